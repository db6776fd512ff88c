'use strict'
// The semats-compatible surface: format helpers and the `Semaphore` class, with semats' names, shapes,
// defaults (ms), error types and message strings. The engine underneath is the Rust core (lock files written
// atomically, safe stale breaking, heartbeat, event-driven waiting); this file only maps shapes.

const { ErrorCode } = require('../codes')
const native = require('../native')
const { semaphoreError, fileError, failure, toLockError, holderFacts, invalidArgument } = require('../errors')
const { withAbort } = require('../abort')
const { validate, one, asFailure, CONFIG, SEMATS_ACQUIRE, SEMATS_INFO } = require('../validate')
const { DEFAULT_CONFIG, engineOptions, finiteOrNull, lockInfo, acquireTimeoutMs, installExitHook } = require('./engine')
const { settledAcquire } = require('./settle')

// ─── format helpers ───

function createLockInfo(tag) {
  return { pid: process.pid, timestamp: Math.floor(Date.now() / 1000), tag }
}

function serializeLockInfo(info, maxTagLength = DEFAULT_CONFIG.maxTagLength) {
  return native.serializeLockInfo(info.pid, info.timestamp, info.tag ?? undefined, finiteOrNull(maxTagLength) ?? undefined)
}

function parseLockInfo(content) {
  const r = native.parseLockInfo(String(content))
  return r.ok ? { ok: true, value: lockInfo(r.value) } : { ok: false, error: semaphoreError(r.error) }
}

function isLockStale(info, timeoutMs) {
  return Math.floor(Date.now() / 1000) - info.timestamp > timeoutMs / 1000
}

function isProcessRunning(pid) {
  return typeof pid === 'number' && Number.isInteger(pid) ? native.isProcessRunning(pid) : false
}

// ─── the class ───

/** The key of `Semaphore`'s `cleanStale` that reports why it failed (not part of the public class). */
const CLEAN_STALE_RESULT = Symbol('cleanStaleResult')

/** The semats CLI's acquire with a LockInfo of its own (module-private: not on the public class's surface). */
const kAcquireWithInfo = Symbol('acquireWithInfo')

class Semaphore {
  #path
  #config
  #file

  constructor(lockPath, config = {}) {
    if (typeof lockPath !== 'string') throw new TypeError('lockPath must be a string')
    // A target string of the one-string API is not a path: refused as that API refuses what it cannot serve.
    const notAPath = require('../target').notAFilePath(lockPath)
    if (notAPath) throw invalidArgument(notAPath)
    const checked = native.checkLockPath(lockPath, true)
    if (!checked.ok) {
      // semats throws a plain Error for a bad path; a platform without file locks gets its stable code.
      if (checked.error.code === ErrorCode.UNSUPPORTED_PLATFORM) throw toLockError(checked.error)
      throw new Error(checked.error.message)
    }
    this.#path = checked.value
    // The snapshot: each config getter read once (a plain object from here on).
    this.#config = { ...DEFAULT_CONFIG, ...validate(config, CONFIG, 'config') }
    // The CLI front end's subclass (module-private: nothing in a user's config can ask for it).
    if (new.target === PlainSemaphore) this.#config.plainFormat = true
    this.#file = new native.NativeLockFile(this.#path, engineOptions(this.#config))
  }

  static withDefaults(lockPath) {
    return new Semaphore(lockPath)
  }

  getPath() {
    return this.#path
  }

  isLocked() {
    return this.#file.observe().state !== 'missing'
  }

  getLockInfo() {
    const seen = this.#file.observe()
    return seen.state === 'parsed' ? lockInfo(seen.info) : null
  }

  tryAcquire(tag) {
    try {
      one('tag', tag)
    } catch (e) {
      return asFailure(e)
    }
    return this.#tryAcquire(tag ?? undefined, undefined)
  }

  tryAcquireWithInfo(info) {
    let snapshot
    try {
      snapshot = validate(info, SEMATS_INFO, 'info', { strict: false })
    } catch (e) {
      return asFailure(e)
    }
    const ownerPid = snapshot.pid != null && snapshot.pid !== process.pid ? snapshot.pid : undefined
    return this.#tryAcquire(snapshot.tag ?? undefined, ownerPid)
  }

  #tryAcquire(tag, ownerPid) {
    // The hot path's compact answer (src/file/lock_file.rs): a number is the timestamp of a lock written exactly as
    // asked (this process's, the tag as given).
    const r = this.#file.tryAcquireSync(tag, ownerPid)
    if (typeof r === 'number') {
      installExitHook()
      return { ok: true, value: { pid: process.pid, timestamp: r, tag } }
    }
    if (!r.ok) return { ok: false, error: fileError(r.error, this.#path) }
    return { ok: true, value: heldInfo(r.value) }
  }

  async acquire(options) {
    try {
      options = validate(options, SEMATS_ACQUIRE)
    } catch (e) {
      return asFailure(e)
    }
    return this.#acquire(options.tag ?? undefined, undefined, options.timeout ?? this.#config.acquireTimeout, options.signal)
  }

  /** The semats CLI's acquire (lib/cli/semats.js): a lock written for `info`'s pid and tag, waited for in the engine
   * as acquire() waits (woken by file events, in line with other waiters), `timeout` ms (null: forever). */
  [kAcquireWithInfo](info, timeout) {
    const ownerPid = info.pid != null && info.pid !== process.pid ? info.pid : undefined
    return this.#acquire(info.tag ?? undefined, ownerPid, timeout, undefined)
  }

  async #acquire(tag, ownerPid, timeout, signal) {
    const r = await withAbort(signal, (cancelId) =>
      settledAcquire(this.#file, tag, ownerPid, acquireTimeoutMs(timeout) ?? undefined, cancelId ?? undefined),
    )
    if (!r.ok) {
      if (r.error.code === ErrorCode.TIMEOUT) {
        return failure(ErrorCode.TIMEOUT, `Timeout waiting for lock after ${timeout}ms`, holderFacts(r.error))
      }
      return { ok: false, error: fileError(r.error, this.#path) }
    }
    return { ok: true, value: heldInfo(r.value) }
  }

  acquireTimeout(timeoutMs, tag) {
    return this.acquire({ timeout: timeoutMs, tag })
  }

  release(force = false) {
    const error = this.#file.releaseAsProcess(Boolean(force))
    return error === null ? { ok: true, value: undefined } : { ok: false, error: fileError(error, this.#path) }
  }

  forceRelease() {
    return this.release(true)
  }

  status() {
    const s = this.#file.status()
    return {
      locked: s.locked,
      info: s.info ? lockInfo(s.info) : null,
      isStale: s.isStale,
      isOwnedByCurrentProcess: s.isOwnedByCurrentProcess,
    }
  }

  cleanStale() {
    const r = this[CLEAN_STALE_RESULT]()
    return r.ok ? r.value : false
  }

  /** `cleanStale()` as a result, with the reason it failed (the CLI's `clean` reports it; semats returns false). */
  [CLEAN_STALE_RESULT]() {
    const r = this.#file.cleanStale()
    return r.ok ? r : { ok: false, error: semaphoreError(r.error) }
  }
}

/**
 * A Semaphore writing sema's and semats' file layout exactly (no host identity): the `semats` CLI front end's,
 * whose lock must outlive the CLI process (see NativeFileOptions.plainFormat). Not exported from the package.
 */
class PlainSemaphore extends Semaphore {}


/** The LockInfo a successful semats acquire returns: what was written, with the `tag` key always present. */
function heldInfo(lock) {
  installExitHook()
  return { pid: lock.pid, timestamp: lock.timestamp, tag: lock.tag ?? undefined }
}

module.exports = {
  Semaphore,
  createLockInfo,
  serializeLockInfo,
  parseLockInfo,
  isLockStale,
  isProcessRunning,
  CLEAN_STALE_RESULT,
  PlainSemaphore,
  kAcquireWithInfo,
}
