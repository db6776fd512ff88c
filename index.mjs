// sema-native for ES modules. Node finds only some names of a CommonJS module statically (here just the first),
// so every export is re-exported explicitly from the one CommonJS instance (no second copy of the state).
// Keep in step with index.js; __test__/package-exports.test.js checks both against index.d.ts.
import cjs from './index.js'

export const {
  ErrorCode,
  LockError,
  AcquireTimeoutError,
  AuthError,
  Semaphore,
  createLockInfo,
  serializeLockInfo,
  parseLockInfo,
  isLockStale,
  isProcessRunning,
  acquire,
  tryAcquire,
  release,
  status,
  withLock,
  wait,
  query,
  createLockManager,
  locks,
  DistributedLock,
  DistributedSemaphore,
  Connection,
  stats,
  stableHashShard,
} = cjs

export default cjs
