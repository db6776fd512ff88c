// Type test (CommonJS: a .cts file importing the package by name, so `require` resolution picks index.d.ts):
// the discriminated unions narrow. A failure's fields follow its `type` (SemaphoreErrorFieldsByType); a lock's
// members follow its `backend`, and acquire/tryAcquire/withLock give the backend a target string names. Each
// `@ts-expect-error` line must keep failing, or tsc reports an unused directive.
import { acquire, tryAcquire, withLock, wait, release, status, parseLockInfo, ErrorCode, Semaphore } from 'sema-native'
import type { DflockdLock, DflockdLockStatus, FileLock, FileLockStatus, Lock, LockOf, LockStatus, SemaphoreError, SemaphoreErrorFieldsByType, SemaphoreErrorOf, SemaphoreErrorType, SemaphoreResult } from 'sema-native'
import { exact } from './exact'

// The fields map names error types only (SemaphoreErrorType stays the one list of codes).
exact<Exclude<keyof SemaphoreErrorFieldsByType, SemaphoreErrorType>, never>(true)

export function errorFields(e: SemaphoreError): void {
  // Before narrowing, every field reads as its type or undefined (semats code reads holderPid this way).
  exact<typeof e.holderPid, number | undefined>(true)
  exact<typeof e.errno, number | undefined>(true)
  if (e.type === 'TIMEOUT') {
    exact<typeof e, SemaphoreErrorOf<'TIMEOUT'>>(true)
    exact<typeof e.holderPid, number | undefined>(true)
    exact<typeof e.holderTag, string | undefined>(true)
    exact<typeof e.isOwnedByCurrentProcess, boolean | undefined>(true)
    // A TIMEOUT is not an OS failure, nor a server reply, and sends no stats request.
    exact<typeof e.errno, undefined>(true)
    exact<typeof e.reply, undefined>(true)
    exact<typeof e.leaseExpiresInS, undefined>(true)
    // @ts-expect-error narrowed: a TIMEOUT's holderPid is a number when known, not always undefined
    exact<typeof e.holderPid, undefined>(true)
  } else if (e.type === ErrorCode.ALREADY_LOCKED) {
    exact<typeof e.leaseExpiresInS, number | undefined>(true)
    exact<typeof e.waiters, number | undefined>(true)
    exact<typeof e.holderTag, string | undefined>(true)
  } else if (e.type === 'IO_ERROR') {
    exact<typeof e.errno, number | undefined>(true)
    exact<typeof e.errnoName, string | undefined>(true)
    exact<typeof e.holderPid, undefined>(true)
    // @ts-expect-error an IO_ERROR names no holder
    exact<typeof e.holderPid, number | undefined>(true)
  } else if (e.type === 'PERMISSION_DENIED') {
    // semats' release of another process's lock names its pid; the OS refusing us gives errno.
    exact<typeof e.holderPid, number | undefined>(true)
    exact<typeof e.errno, number | undefined>(true)
    exact<typeof e.holderTag, undefined>(true)
  } else if (e.type === 'SERVER_ERROR' || e.type === 'LIMIT_MISMATCH' || e.type === 'AUTH_FAILED') {
    exact<typeof e.reply, string | undefined>(true)
    exact<typeof e.holderPid, undefined>(true)
  } else if (e.type === 'INVALID_ARGUMENT') {
    exact<typeof e.reply, undefined>(true)
    const cause: Error | undefined = e.cause
    void cause
  }
  switch (e.type) {
    case 'LOCK_LOST':
      exact<typeof e.reply, string | undefined>(true)
      break
    case 'NOT_LOCKED':
      // @ts-expect-error NOT_LOCKED carries no reply
      exact<typeof e.reply, string | undefined>(true)
      break
  }
}

export async function results(path: string): Promise<void> {
  const r = await tryAcquire(path)
  if (!r.ok && r.error.type === 'ALREADY_LOCKED' && r.error.holderPid !== undefined) {
    const holder: number = r.error.holderPid
    void holder
  }
  const w = await wait(path, { timeout: 0 })
  if (!w.ok && w.error.type === 'TIMEOUT') exact<typeof w.error.holderPid, number | undefined>(true)
  const parsed = parseLockInfo('pid=1\n')
  if (!parsed.ok) exact<typeof parsed.error.holderPid, number | undefined>(true)
  const rel = await release(path)
  if (!rel.ok && rel.error.type === 'NOT_LOCKED') exact<typeof rel.error.holderPid, undefined>(true)
  const sem = new Semaphore(path).release()
  if (!sem.ok && sem.error.type === 'PERMISSION_DENIED') exact<typeof sem.error.holderPid, number | undefined>(true)
  // Building a failure: the fields a type carries are accepted, and no others.
  const made: SemaphoreResult<void> = { ok: false, error: { type: 'SERVER_ERROR', message: 'full', reply: 'error_max_locks' } }
  // @ts-expect-error a SERVER_ERROR names no holder
  const wrong: SemaphoreResult<void> = { ok: false, error: { type: 'SERVER_ERROR', message: 'full', holderPid: 1 } }
  void made
  void wrong
}

export async function locks(path: string, addr: string, target: string): Promise<void> {
  // The target's type decides the lock's: a dflockd:// template or literal gives a DflockdLock.
  const d = await acquire(`dflockd://${addr}/jobs?leaseTtl=30`)
  if (d.ok) {
    exact<typeof d.value, DflockdLock>(true)
    const left: number = d.value.remaining()
    const lease: number = d.value.lease
    const until: number = d.value.validUntil
    void [left, lease, until]
  }
  const f = await tryAcquire('/var/lock/nightly.lock')
  if (f.ok) {
    exact<typeof f.value, FileLock>(true)
    exact<typeof f.value.validUntil, undefined>(true)
    // @ts-expect-error a file lock has no lease clock
    f.value.remaining()
  }
  exact<LockOf<`file://${string}`>, FileLock>(true)
  // A plain string may name either backend: narrow by `backend` first.
  const any = await acquire(target)
  if (any.ok) {
    const lock: Lock = any.value
    // @ts-expect-error remaining() exists on dflockd locks only (TS2722 until narrowed)
    lock.remaining()
    if (lock.backend === 'dflockd') {
      const left: number = lock.remaining()
      void left
    } else {
      exact<typeof lock, FileLock>(true)
    }
    // Reading a dflockd member on either still type-checks (as before the union).
    const maybe: number | undefined = lock.remaining?.()
    void maybe
  }
  const left: number = await withLock(`dflockd://${addr}/nightly`, (lock) => lock.remaining())
  const pid: number = await withLock(path, (lock) => lock.pid)
  const explicit: string = await withLock<string>(path, (lock: Lock) => lock.backend)
  // @ts-expect-error withLock on a file literal: no lease clock
  await withLock('/tmp/x.lock', (lock) => lock.remaining())
  void [left, pid, explicit]
}

export async function statuses(addr: string, target: string): Promise<void> {
  // A file's status always says how it becomes reclaimable; a dflockd key's always counts holders and waiters.
  const f = await status('/var/lock/nightly.lock')
  exact<typeof f, FileLockStatus>(true)
  exact<typeof f.reclaimRule, 'holder-dead' | 'age-and-pid-not-running' | 'heartbeat-unchanged' | 'unparseable-age' | 'never' | null>(true)
  exact<typeof f.waiters, undefined>(true)
  exact<typeof f.fileSystem, string | null>(true)
  exact<typeof f.fallbacks, Array<'no-tmpfile' | 'poll'>>(true)
  const d = await status(`dflockd://${addr}/jobs`)
  exact<typeof d, DflockdLockStatus>(true)
  const counts: [number, number, number] = [d.holders, d.waiters, d.limit]
  void counts
  // @ts-expect-error a dflockd key has no stale rule
  const rule: string | null = d.reclaimRule
  void rule
  const either: LockStatus = await status(target)
  // @ts-expect-error either backend: holders may be absent until narrowed
  const holders: number = either.holders
  void holders
  if (either.backend === 'dflockd') exact<typeof either.holders, number>(true)
  else exact<typeof either.reclaimableAt, number | null>(true)
}
