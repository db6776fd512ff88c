'use strict'
// One API over any target string: a path, a file:// URL or a dflockd:// URL. Switching a service from one
// machine to many is a change of this string, nothing else.

const { ErrorCode } = require('./codes')
const { AsyncLocalStorage } = require('node:async_hooks')
const nodePath = require('node:path')
const { fileURLToPath } = require('node:url')
const { LockError, AcquireTimeoutError, toLockError, fromNativeThrow, invalidArgument } = require('./errors')
const { LockHandle } = require('./lock-handle')
const { acquireFile, releaseFile, statusFile } = require('./file/lock')
const dflockd = require('./dflockd')
const { redactTarget, isDflockdTarget, parseDflockdUrl, targetId } = require('./dflockd/url')
const { validate, checkBackend, asFailure, ACQUIRE, RELEASE, STATUS } = require('./validate')
const { traceAcquire, released } = require('./diagnostics')

/** `{backend: 'file', path}` or `{backend: 'dflockd'}`; throws LockError INVALID_ARGUMENT / INVALID_PATH. */
function parseTarget(target) {
  if (typeof target !== 'string') throw invalidArgument(`target must be a string, got ${typeof target}`)
  if (isDflockdTarget(target)) return { backend: 'dflockd' }
  if (target.startsWith('file:')) {
    try {
      return { backend: 'file', path: fileURLToPath(target) }
    } catch (e) {
      throw new LockError(`Invalid file URL: ${e.message}`, ErrorCode.INVALID_PATH)
    }
  }
  const unsupported = unsupportedScheme(target)
  if (unsupported) throw invalidArgument(unsupported)
  return { backend: 'file', path: target }
}

/**
 * Why `target` (neither dflockd:// nor file:) is refused, or null. It looks like a URL (`scheme:`, two letters or
 * more, so that a Windows drive letter `C:` is still a path): a misspelt `dflockd:/x`, `dflockd:nightly` or `http://`
 * must not silently become a lock file of that name in the working directory.
 */
function unsupportedScheme(target) {
  const m = /^([a-z][a-z0-9+.-]*):/i.exec(target)
  if (!m || m[1].length < 2) return null
  const hint = /^dflockd$/i.test(m[1]) ? `; a dflockd target is dflockd://host[:port]/key` : ''
  // Returned text, shown by the CLI as well as thrown as a LockError: a user info in it is masked here.
  return redactTarget(
    `unsupported target '${target}': it starts like a URL with the scheme '${m[1]}:' (use a path, file:// or ` +
    `dflockd://${hint}; for a file whose name has a colon, write ./${target})`
  )
}

/**
 * Why the `Semaphore` class (semats' API: lock file paths only) refuses `lockPath`, or null. The rule is
 * unsupportedScheme's, for every scheme: a `dflockd://` or `file:` target, which the one-string API serves, is
 * not a path either (semats would lock `./dflockd:/host:6388/key`, or fail on its missing directory).
 */
function notAFilePath(lockPath) {
  const m = /^([a-z][a-z0-9+.-]*):/i.exec(lockPath)
  if (!m || m[1].length < 2) return null
  if (/^dflockd$/i.test(m[1])) {
    return (
      `Semaphore locks files, and '${lockPath}' is a dflockd target: use acquire(), tryAcquire(), ` +
      'withLock() or DistributedLock for it'
    )
  }
  if (/^file$/i.test(m[1])) {
    return `Semaphore takes a path, and '${lockPath}' is a file URL: pass url.fileURLToPath() of it (or use acquire())`
  }
  return unsupportedScheme(lockPath)
}

/** Like parseTarget, but a bad target becomes a failed SemaphoreResult instead of a throw. */
function resolve(target) {
  try {
    return { parsed: parseTarget(target) }
  } catch (e) {
    return { failed: { ok: false, error: { type: e.code, message: e.message } } }
  }
}

/**
 * acquire / tryAcquire: always a SemaphoreResult, never a rejection. The options are read once, here (the
 * snapshot `validate` returns), before either backend sees them.
 */
function acquireOn(target, options, wait) {
  const { parsed, failed } = resolve(target)
  if (failed) return Promise.resolve(failed)
  try {
    options = validate(options, ACQUIRE)
    checkBackend(options, parsed.backend)
  } catch (e) {
    return Promise.resolve(asFailure(e))
  }
  return traceAcquire(target, parsed.backend, options.mode ?? 'exclusive', wait, () => {
    const acquiring =
      parsed.backend === 'file'
        ? acquireFile(target, parsed.path, options, { wait })
        : dflockd.acquireTarget(target, options, { wait })
    return acquiring.catch((e) => asFailure(fromNativeThrow(e)))
  })
}

function acquire(target, options) {
  return acquireOn(target, options, true)
}

function tryAcquire(target, options) {
  return acquireOn(target, options, false)
}

async function release(target, options) {
  try {
    options = validate(options, RELEASE) // the snapshot: each option read once
  } catch (e) {
    return asFailure(e)
  }
  if (target instanceof LockHandle) {
    try {
      return (await target.release())
        ? { ok: true, value: undefined }
        : { ok: false, error: { type: ErrorCode.NOT_LOCKED, message: 'Lock not held' } }
    } catch (e) {
      return { ok: false, error: { type: e.code ?? ErrorCode.IO_ERROR, message: e.message } }
    }
  }
  const { parsed, failed } = resolve(target)
  if (failed) return failed
  try {
    checkBackend(options, parsed.backend)
  } catch (e) {
    return asFailure(e)
  }
  const r = await (parsed.backend === 'file' ? releaseFile(parsed.path, options) : dflockd.releaseTarget(target, options))
  if (r.ok) released(null, target, parsed.backend)
  return r
}

async function status(target, options) {
  const parsed = parseTarget(target)
  options = validate(options, STATUS) // the snapshot: each option read once
  checkBackend(options, parsed.backend)
  return parsed.backend === 'file' ? statusFile(target, parsed.path, options) : dflockd.statusTarget(target, options)
}

/** The targets the current async call chain holds through withLock (a fresh Set per withLock, inherited by `fn`). */
const heldByChain = new AsyncLocalStorage()

/** What names one lock, for telling a nested withLock on it: an absolute path, or a dflockd server and key. */
function lockKey(target) {
  try {
    const parsed = parseTarget(target)
    if (parsed.backend === 'file') return `file:${nodePath.resolve(parsed.path)}`
    return `dflockd:${targetId(parseDflockdUrl(target))}`
  } catch {
    return null // acquire reports it
  }
}

/**
 * Acquires, runs `fn(lock)`, always releases. A lock lost while `fn` ran rejects with LOCK_LOST even when `fn`
 * succeeded (its work was not exclusive); `fn`'s own error wins over any release error; `fn` may release the lock
 * itself. A withLock on a target that the same async call chain already holds through withLock would wait for
 * itself forever: it rejects at once with ALREADY_LOCKED instead (independent concurrent calls still queue).
 */
async function withLock(target, fn, options) {
  if (typeof fn !== 'function') throw invalidArgument('withLock needs a function')
  const key = lockKey(target)
  const outer = heldByChain.getStore()
  if (key !== null && outer !== undefined && outer.has(key)) {
    throw new LockError(
      `withLock('${target}'): this async call chain already holds ` +
        'this lock (a nested withLock on the same target would wait for itself forever)',
      ErrorCode.ALREADY_LOCKED,
    )
  }
  const r = await acquire(target, options)
  if (!r.ok) {
    if (r.error.type === ErrorCode.TIMEOUT) throw new AcquireTimeoutError(target, r.error.message, r.error)
    throw toLockError(r.error)
  }
  const lock = r.value
  const held = new Set(outer)
  if (key !== null) held.add(key)
  let result
  try {
    result = await heldByChain.run(held, () => fn(lock))
  } catch (e) {
    await lock.release().catch(() => {})
    throw e
  } finally {
    // A task `fn` started and left running may take this lock once `fn` is done.
    held.delete(key)
  }
  const released = await lock.release()
  if (!released && (lock._lost || lock.signal.aborted)) {
    throw lock.signal.reason instanceof LockError ? lock.signal.reason : new LockError('Lock was lost', ErrorCode.LOCK_LOST)
  }
  return result
}


module.exports = { acquire, tryAcquire, release, status, withLock, parseTarget, unsupportedScheme, notAFilePath }
