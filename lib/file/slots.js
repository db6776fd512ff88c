'use strict'
// Counting semaphores on lock files (`limit: N`): value conversion over the core's Semaphore
// (crates/sema-core/src/lockfile/semaphore/, bound as NativeSemaphore in src/file/semaphore.rs). The core owns the
// layout (slot 0 the base path, slots 1..N-1 `<base>.slot-<i>-of-<N>`), the limit check at every grant, the FIFO
// line, the file events and the poll; each held slot is a lock of the engine's registry like the mutex's, so it is
// released, heard lost and released at exit exactly as a mutex is (./lock.js's FileLock).

const nodePath = require('node:path')
const native = require('../native')
const { ErrorCode } = require('../codes')
const { fileError, holderFacts, toLockError } = require('../errors')
const { withAbort } = require('../abort')
const { settledAcquire } = require('./settle')
const { engineOptions, acquireTimeoutMs, installExitHook, lockInfo } = require('./engine')
const { FileLock, statusOf, configOf, cacheKey, unexpected } = require('./lock')

const CACHE_MAX = 64
/** key (path, options, limit) → { sem: NativeSemaphore, resolved: the absolute base path }; insertion order is recency. */
const cache = new Map()

/** The engine's semaphore of `path` with `options.limit` (cached), or `{ error }` for a bad path. */
function openSemaphore(path, options, fresh = false) {
  const config = configOf(options)
  const key = `${cacheKey(path, config)}\0limit:${options.limit}`
  const hit = fresh ? undefined : cache.get(key)
  if (hit) {
    cache.delete(key)
    cache.set(key, hit)
    return hit
  }
  const checked = native.checkLockPath(path, false)
  if (!checked.ok) return { error: fileError(checked.error, path) }
  const sem = new native.NativeSemaphore(checked.value, { ...engineOptions(config), keepForHandle: true }, options.limit)
  const opened = { sem, key, resolved: nodePath.resolve(path) }
  cache.delete(key)
  cache.set(key, opened)
  if (cache.size > CACHE_MAX) cache.delete(cache.keys().next().value)
  return opened
}

/** One acquisition of a slot of `path` (`wait`: acquire, else tryAcquire). Same result shape as acquireFile. */
async function acquireSlot(target, path, options, { wait }) {
  let opened = openSemaphore(path, options)
  if (opened.error) return { ok: false, error: opened.error }
  let r = await attempt(opened.sem, options, wait)
  if (!r.ok && unexpected(r.error)) {
    // A failure a cached handle may owe to a changed file system (a removed directory...): once more, checked afresh.
    opened = openSemaphore(path, options, true)
    if (opened.error) return { ok: false, error: opened.error }
    r = await attempt(opened.sem, options, wait)
  }
  if (!r.ok) {
    const facts = holderFacts(r.error)
    if (r.error.code === ErrorCode.TIMEOUT) {
      return { ok: false, error: { type: ErrorCode.TIMEOUT, message: `Timeout waiting for lock after ${options.timeout}ms`, ...facts } }
    }
    if (r.error.code === ErrorCode.ALREADY_LOCKED) {
      return { ok: false, error: { type: ErrorCode.ALREADY_LOCKED, message: `All ${options.limit} slots of '${opened.resolved}' are held`, ...facts } }
    }
    return { ok: false, error: fileError(r.error, opened.resolved) }
  }
  installExitHook()
  // The slot's own path: a release by path of that slot finds this handle.
  return { ok: true, value: new FileLock(r.value, target, options.onLost, native.heldPath(r.value.id) ?? opened.resolved) }
}

function attempt(sem, options, wait) {
  const tag = options.tag ?? undefined
  const ownerPid = options.pid ?? undefined
  return wait
    ? withAbort(options.signal, (cancelId) =>
        settledAcquire(sem, tag, ownerPid, acquireTimeoutMs(options.timeout) ?? undefined, cancelId ?? undefined),
      )
    : withAbort(options.signal, () => sem.tryAcquireNow(tag, ownerPid) ?? sem.tryAcquire(tag, ownerPid))
}

/**
 * The slot files of `path` with `options.limit` present now, the base first (for a release by path: only they can
 * be released), or `{ error }` for a bad path.
 */
function presentSlots(path, options) {
  const opened = openSemaphore(path, options)
  return opened.error ? opened : opened.sem.presentSlots()
}

/**
 * status with `limit`: the base's status, with `holders` (slots of this limit whose file exists: taken, by a live
 * holder or one not yet reclaimed) and `limit`; `locked` when any slot is taken, `info` the base's holder or else
 * the first held slot's.
 */
async function statusSlots(target, path, options) {
  const opened = openSemaphore(path, options, true)
  if (opened.error) throw toLockError(opened.error)
  const s = await opened.sem.statusAsync()
  const base = statusOf(s.base, target)
  return { ...base, locked: s.holders > 0, info: s.info ? lockInfo(s.info) : null, holders: s.holders, limit: options.limit }
}

/**
 * wait() with `limit`: resolves `{ ok: true }` when an acquire of that limit would take a slot (a slot file absent
 * or its holder reclaimable), creating nothing; LIMIT_MISMATCH as acquire reports it; TIMEOUT and ABORTED as the
 * engine's (the caller words the timeout).
 */
async function waitSlot(path, options) {
  const opened = openSemaphore(path, options, true)
  if (opened.error) return { ok: false, error: opened.error }
  const timeoutMs = acquireTimeoutMs(options.timeout) ?? undefined
  const r = await withAbort(options.signal, (cancelId) => opened.sem.waitFree(timeoutMs, cancelId ?? undefined))
  return r.ok ? { ok: true } : { ok: false, error: fileError(r.error, opened.resolved) }
}

module.exports = { acquireSlot, presentSlots, statusSlots, waitSlot }
