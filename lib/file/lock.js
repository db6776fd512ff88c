'use strict'
// File targets of the one-string API (acquire / tryAcquire / release / status): Lock handles over the Rust
// engine. Waiting, fsync of a disk and every call on a network file system run off the JS thread (on tokio's
// runtime and its blocking pool); an uncontended acquire and a held lock's release, when their few calls are
// short (tmpfs, or a local disk with fsync off), run on it, saving two thread hops each.

const nodePath = require('node:path')
const native = require('../native')
const { LockHandle } = require('../lock-handle')
const { fileError, toLockError, holderFacts } = require('../errors')
const { withAbort } = require('../abort')
const { onLockEnded } = require('../losses')
const { engineOptions, lockInfo, acquireTimeoutMs, installExitHook, DEFAULT_CONFIG, PLAIN_FORMAT } = require('./engine')
const { ErrorCode } = require('../codes')
const { settledAcquire, settledAcquireMode } = require('./settle')

// ─── loss notification: one native callback for every held lock, dispatched by lock id ───

/**
 * This thread's handles of held locks, by engine id: the callback below finds the handle to tell. How a lock ended
 * is the engine's to say (`takeHeldEnd`), also for one that ended before its handle existed (the native report
 * may overtake the acquire result).
 */
const handles = new Map()

// This thread's locks only, on the thread's one loss channel (lib/losses.js, shared with dflockd).
onLockEnded((id) => {
  const handle = handles.get(id)
  if (handle) settle(handle, id, false)
})

/**
 * Tells `handle` how its lock `id` ended, if the engine says it did (lost, or released by path: `release(path)`,
 * semats' `release()`). A loss found while the handle is being made is told on the next microtask, once the caller
 * has it. `true` when it ended.
 */
function settle(handle, id, fresh) {
  const end = native.takeHeldEnd(id)
  if (end === null) return false
  handles.delete(id)
  if (end.lostReason == null) handle._markReleased()
  else if (fresh) queueMicrotask(() => handle._markLost(end.lostReason))
  else handle._markLost(end.lostReason)
  return true
}

class FileLock extends LockHandle {
  #id
  #path
  #shared

  constructor(held, target, onLost, path, shared = false) {
    super({ target, backend: 'file', pid: held.pid, timestamp: held.timestamp, tag: held.tag ?? undefined, token: held.token, onLost })
    this.#id = held.id
    this.#path = path
    this.#shared = shared
    handles.set(held.id, this)
    settle(this, held.id, true)
  }

  /**
   * The absolute lock path (for release by path), read-only and not enumerable. A getter, not an own property made
   * with Object.defineProperty per lock (~100 ns more per acquisition).
   */
  get _path() {
    return this.#path
  }

  /** A shared hold (its engine lock is a reader's file beside `_path`). */
  get _shared() {
    return this.#shared
  }

  /** The value, or a promise of it when the release runs off this thread (LockHandle#release awaits either). */
  _release() {
    const now = native.releaseHeldNow(this.#id)
    return now === null ? native.releaseHeldAsync(this.#id).then((r) => this.#released(r)) : this.#released(now)
  }

  #released(r) {
    if (!r.ok) throw toLockError(r.error)
    handles.delete(this.#id)
    return r.value
  }
}

// ─── validated engine handles, cached per (path, options) ───

const OPTION_KEYS = ['staleTimeout', 'retryInterval', 'fsync', 'heartbeat', 'maxTagLength']
const CACHE_MAX = 64
/**
 * key → {file: NativeLockFile, key, resolved: the absolute path}; insertion order is recency (a hit moves the entry to the end). The one cache of lock files:
 * each NativeLockFile alone owns its engine `LockFile` (the engine shares only the per-path FIFO between them).
 * Keyed here by the path as given, so that a hit costs no system call (the engine's key is the canonical path, a
 * `realpath` and a `statfs` away).
 */
const fileCache = new Map()

/** Options whose `null` has a meaning of its own (never stale, heartbeat off); for the others null = the default. */
const NULL_MEANS = new Set(['staleTimeout', 'heartbeat'])

/** An option's engine value from validated target options: absent (undefined, or null where null has no meaning) = default. */
function configValue(options, k) {
  const v = options[k]
  return v === undefined || (v === null && !NULL_MEANS.has(k)) ? DEFAULT_CONFIG[k] : v
}

/** Engine config from validated target options (see configValue). */
function configOf(options) {
  const config = { ...DEFAULT_CONFIG }
  for (const k of OPTION_KEYS) config[k] = configValue(options, k)
  if (options[PLAIN_FORMAT] === true) config.plainFormat = true
  return config
}

/** A relative path means something else after process.chdir(): its working directory is part of its key. */
function keyCwd(path) {
  return nodePath.isAbsolute(path) ? null : process.cwd()
}

/** What an option's value adds to a key: its type and its string (1 and '1' differ). */
function keyPart(v) {
  return `${typeof v}:${String(v)}`
}

function cacheKey(path, config) {
  const cwd = keyCwd(path)
  let key = cwd === null ? path : `${cwd}\0${path}`
  for (const k of OPTION_KEYS) key += `\0${keyPart(config[k])}`
  return config.plainFormat ? `${key}\0plain` : key
}

/** Validated engine handle for a path, or a SemaphoreError. `fresh` skips the cache. */
function openFile(path, options = {}, fresh = false) {
  if (!fresh && last !== null && isLast(path, options)) return last.opened
  const config = configOf(options)
  const key = typeof path === 'string' ? cacheKey(path, config) : null
  if (key !== null && !fresh) {
    const hit = fileCache.get(key)
    if (hit) {
      fileCache.delete(key) // recency: to the end
      fileCache.set(key, hit)
      remember(path, config, hit)
      return hit
    }
  }
  const checked = native.checkLockPath(path, false)
  if (!checked.ok) return { error: fileError(checked.error, path) }
  // The target API keeps a Lock handle per lock: it must hear of a release by path from another thread.
  const file = new native.NativeLockFile(checked.value, { ...engineOptions(config), keepForHandle: true })
  // The absolute path, resolved once per entry (the key holds the working directory a relative path is taken in).
  const opened = { file, key, resolved: nodePath.resolve(path) }
  if (key !== null) {
    fileCache.delete(key) // a fresh open replacing an entry: at the end, the most recent
    fileCache.set(key, opened)
    remember(path, config, opened)
    if (fileCache.size > CACHE_MAX) fileCache.delete(fileCache.keys().next().value)
  }
  return opened
}

/**
 * The most recent entry of fileCache (its last) and what it was opened for: the same path and options again (one
 * lock taken in a loop, the common case) find it without a config object, a key string and two Map operations
 * (~0.75 µs a call, measured). Cleared when the entry leaves the cache.
 */
let last = null

function remember(path, config, opened) {
  last = { path, cwd: keyCwd(path), values: OPTION_KEYS.map((k) => config[k]), plain: config.plainFormat === true, opened }
}

/** Whether `path` and `options` would make `last`'s key (configValue, keyCwd and keyPart, without the string). */
function isLast(path, options) {
  if (path !== last.path || (options[PLAIN_FORMAT] === true) !== last.plain) return false
  if (last.cwd !== null && last.cwd !== process.cwd()) return false
  for (let i = 0; i < OPTION_KEYS.length; i++) {
    const v = configValue(options, OPTION_KEYS[i])
    const was = last.values[i]
    if (v !== was && keyPart(v) !== keyPart(was)) return false
  }
  return true
}

/** Drops a cache entry (a failure it may owe to a changed file system: the next call checks the path afresh). */
function forget(key) {
  fileCache.delete(key)
  if (last !== null && last.opened.key === key) last = null
}

/** Failures a cached handle may owe to a changed file system (a removed directory...): retried with a fresh check. */
function unexpected(error) {
  return error.code !== ErrorCode.ALREADY_LOCKED && error.code !== ErrorCode.TIMEOUT && error.code !== ErrorCode.ABORTED
}

/**
 * acquire / tryAcquire of a file target: a counting semaphore when `limit` is given (./slots.js: the core's
 * Semaphore), else the mutex.
 */
function acquireFile(target, path, options = {}, how) {
  if (options.mode != null) {
    const refused = require('./shared').refusedWithLimit(options)
    if (refused) return Promise.resolve(refused)
  }
  if (options.limit != null) return require('./slots').acquireSlot(target, path, options, how)
  return acquireMutex(target, path, options, how)
}

/** One lock file, as a mutex. */
async function acquireMutex(target, path, options = {}, { wait }) {
  let opened = openFile(path, options)
  if (opened.error) return { ok: false, error: opened.error }
  let r = await attempt(opened.file, options, wait)
  if (!r.ok && opened.key !== null && unexpected(r.error)) {
    forget(opened.key)
    opened = openFile(path, options, true)
    if (opened.error) return { ok: false, error: opened.error }
    r = await attempt(opened.file, options, wait)
  }
  if (!r.ok) {
    if (r.error.code === ErrorCode.TIMEOUT) {
      const message = `Timeout waiting for lock after ${options.timeout}ms`
      return { ok: false, error: { type: ErrorCode.TIMEOUT, message, ...holderFacts(r.error) } }
    }
    return { ok: false, error: fileError(r.error, nodePath.resolve(path)) }
  }
  installExitHook()
  return { ok: true, value: new FileLock(r.value, target, options.onLost, opened.resolved, options.mode === 'shared') }
}

/**
 * One native acquire (wait) or attempt (no wait) on `file`: the native result, or a promise of it. A plain function
 * handing back withAbort's value, not an async one: one promise and its ticks fewer per acquisition.
 */
function attempt(file, options, wait) {
  const tag = options.tag ?? undefined
  const ownerPid = options.pid ?? undefined
  // A mode (a shared lock, ./shared.js): the core's SharedLock of the path.
  const mode = options.mode ?? undefined
  if (mode !== undefined) {
    return wait
      ? withAbort(options.signal, (cancelId) =>
          settledAcquireMode(file, mode, tag, ownerPid, acquireTimeoutMs(options.timeout) ?? undefined, cancelId ?? undefined),
        )
      : withAbort(options.signal, () => file.tryAcquireMode(mode, tag, ownerPid))
  }
  return wait
    ? withAbort(options.signal, (cancelId) =>
        settledAcquire(file, tag, ownerPid, acquireTimeoutMs(options.timeout) ?? undefined, cancelId ?? undefined),
      )
    : withAbort(options.signal, () => file.tryAcquireNow(tag, ownerPid) ?? file.tryAcquire(tag, ownerPid))
}

/**
 * release by path: with `limit`, the first of the slots that is released (a slot of another owner or a free one is
 * passed over; the last slot's refusal is the answer when none is); without, the one lock file.
 */
async function releaseFile(path, options = {}) {
  const shared = await require('./shared').releaseSharedByPath(path, options)
  if (shared) return shared
  if (options.limit == null) return releaseMutex(path, options)
  const present = require('./slots').presentSlots(path, options)
  if (!Array.isArray(present)) return { ok: false, error: present.error }
  let r
  for (const slot of present.length > 0 ? present : [nodePath.resolve(path)]) {
    r = await releaseMutex(slot, options)
    if (r.ok || (r.error.type !== ErrorCode.NOT_LOCKED && r.error.type !== ErrorCode.PERMISSION_DENIED)) return r
  }
  return r
}

async function releaseMutex(path, options = {}) {
  let { file, key, error } = openFile(path)
  if (error) return { ok: false, error }
  let r = await file.releaseAsAsync(Boolean(options.force), options.pid ?? undefined)
  if (!r.ok && key !== null && r.error.code !== ErrorCode.NOT_LOCKED && r.error.code !== ErrorCode.PERMISSION_DENIED) {
    forget(key)
    ;({ file, error } = openFile(path, {}, true))
    if (error) return { ok: false, error }
    r = await file.releaseAsAsync(Boolean(options.force), options.pid ?? undefined)
  }
  if (!r.ok) return { ok: false, error: fileError(r.error, nodePath.resolve(path)) }
  markReleasedByPath(nodePath.resolve(path))
  return { ok: true, value: undefined }
}

/**
 * After a release by path: this thread's handles on that path hear how their lock ended now (`released` turns
 * true at once, not when the engine's report arrives; other threads' handles hear it from the report).
 */
function markReleasedByPath(path) {
  for (const [id, handle] of handles) {
    if (handle._path === path) settle(handle, id, false)
  }
}

/** status of a file target: of its slots when `limit` is given (./slots.js), else of the one lock file. */
async function statusFile(target, path, options = {}) {
  if (options.limit != null) return require('./slots').statusSlots(target, path, options)
  const s = await statusMutex(target, path, options)
  // A shared lock's path names one reader: say how many hold it.
  const shared = s.locked ? await require('./shared').sharedFacts(path, options) : null
  return shared ? { ...s, ...shared } : s
}

async function statusMutex(target, path, options = {}) {
  const { file, error } = openFile(path, options, true)
  if (error) throw toLockError(error)
  return statusOf(await file.statusAsync(), target)
}

/** The target API's status shape of a native status (NativeStatus) of one lock file. */
function statusOf(s, target) {
  return {
    locked: s.locked,
    info: s.info ? lockInfo(s.info) : null,
    isStale: s.isStale,
    isOwnedByCurrentProcess: s.isOwnedByCurrentProcess,
    reclaimableAt: s.reclaimableAt ?? null,
    reclaimRule: s.reclaimRule ?? null,
    fileSystem: s.fileSystem ?? null,
    fallbacks: s.fallbacks,
    target,
    backend: 'file',
  }
}

/** This thread's shared holds of the lock at the absolute path `path` (for a release by path). */
function sharedHandlesOf(path) {
  return [...handles.values()].filter((h) => h._shared && h._path === path)
}

module.exports = { FileLock, acquireFile, acquireMutex, releaseFile, statusFile, statusMutex, statusOf, configOf, cacheKey, unexpected, openFile, sharedHandlesOf }
