'use strict'
// sema-native: the public JS layer over the native binding. index.d.ts is its contract.

const errors = require('./lib/errors')
const { ErrorCode } = require('./lib/codes')
const semaphore = require('./lib/file/semats')
const target = require('./lib/target')
const dflockd = require('./lib/dflockd')
const observe = require('./lib/observe')
const webLocks = require('./lib/locks')

module.exports = {
  // errors
  ErrorCode,
  LockError: errors.LockError,
  AcquireTimeoutError: errors.AcquireTimeoutError,
  AuthError: errors.AuthError,
  // semats drop-in
  Semaphore: semaphore.Semaphore,
  createLockInfo: semaphore.createLockInfo,
  serializeLockInfo: semaphore.serializeLockInfo,
  parseLockInfo: semaphore.parseLockInfo,
  isLockStale: semaphore.isLockStale,
  isProcessRunning: semaphore.isProcessRunning,
  // one API over any target
  acquire: target.acquire,
  tryAcquire: target.tryAcquire,
  release: target.release,
  status: target.status,
  withLock: target.withLock,
  // observing locks
  wait: observe.wait,
  query: observe.query,
  // W3C Web Locks across processes and machines
  createLockManager: webLocks.createLockManager,
  locks: webLocks.locks,
  // dflockd client
  DistributedLock: dflockd.DistributedLock,
  DistributedSemaphore: dflockd.DistributedSemaphore,
  Connection: dflockd.Connection,
  stats: dflockd.stats,
  stableHashShard: dflockd.stableHashShard,
}
