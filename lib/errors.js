'use strict'
// Error classes and the conversions between the three ways a failure travels:
// - SemaphoreError values inside SemaphoreResult (semats' shape: {type, message, holderPid?, lockedSince?, cause?}; a
//   lock file's ALREADY_LOCKED and TIMEOUT add holderTag? and isOwnedByCurrentProcess?: the holder as the engine read
//   it when it refused),
// - LockError instances thrown by withLock, status and the dflockd classes (same fields plus a stable `code`),
// - native result objects from the binding ({code, message, reply?, holderPid?, lockedSince?}).

class LockError extends Error {
  constructor(message, code = 'IO_ERROR', details = {}) {
    super(message)
    this.name = 'LockError'
    this.code = code
    if (details.holderPid !== undefined) this.holderPid = details.holderPid
    if (details.lockedSince !== undefined) this.lockedSince = details.lockedSince
    if (details.holderTag !== undefined) this.holderTag = details.holderTag
    if (details.isOwnedByCurrentProcess !== undefined) this.isOwnedByCurrentProcess = details.isOwnedByCurrentProcess
    if (details.reply !== undefined) this.reply = details.reply
    if (details.cause !== undefined) this.cause = details.cause
  }

  /** semats naming for the code. */
  get type() {
    return this.code
  }
}

class AcquireTimeoutError extends LockError {
  constructor(key, message = `timeout acquiring '${key}'`, details = {}) {
    super(message, 'TIMEOUT', details)
    this.name = 'AcquireTimeoutError'
  }
}

class AuthError extends LockError {
  constructor(message = 'authentication failed') {
    super(message, 'AUTH_FAILED')
    this.name = 'AuthError'
  }
}

/** The holder facts of a failure (holderPid, lockedSince, holderTag, isOwnedByCurrentProcess), as present. */
function holderFacts(error) {
  const facts = {}
  for (const k of ['holderPid', 'lockedSince', 'holderTag', 'isOwnedByCurrentProcess']) {
    if (error[k] != null) facts[k] = error[k]
  }
  return facts
}

/** A SemaphoreError value (plain object, semats' key order) from a native error object. */
function semaphoreError(nativeError) {
  const e = { type: nativeError.code ?? nativeError.type, message: nativeError.message }
  if (nativeError.holderPid != null) e.holderPid = nativeError.holderPid
  if (nativeError.lockedSince != null) e.lockedSince = nativeError.lockedSince
  if (nativeError.holderTag != null) e.holderTag = nativeError.holderTag
  if (nativeError.isOwnedByCurrentProcess != null) e.isOwnedByCurrentProcess = nativeError.isOwnedByCurrentProcess
  if (nativeError.reply != null) e.reply = nativeError.reply
  if (nativeError.cause != null) e.cause = nativeError.cause
  return e
}

/**
 * semaphoreError for a failure on the lock file `path`: an OS error ("Permission denied (os error 13)") names the
 * file it happened on, as Node's own fs errors do.
 */
function fileError(nativeError, path) {
  const e = semaphoreError(nativeError)
  if (typeof e.message === 'string' && /\(os error \d+\)/.test(e.message) && !e.message.includes(path)) {
    e.message = `${e.message}, lock file '${path}'`
  }
  return e
}

function failure(type, message, extra) {
  return { ok: false, error: { type, message, ...extra } }
}

/** A LockError (or its subclass for TIMEOUT / AUTH_FAILED) from a SemaphoreError or native error object. */
function toLockError(error, key) {
  const code = error.code ?? error.type
  if (code === 'TIMEOUT' && key !== undefined) return new AcquireTimeoutError(key)
  // The fixed text for a refused token: callers match 'authentication failed' (dflockd-client's message). A server
  // with no token configured answers bare `error`: a different mistake, said in words (same class and code).
  if (code === 'AUTH_FAILED') return error.reply === 'error' ? new AuthError(error.message) : new AuthError()
  return new LockError(error.message, code, error)
}

let stableCodes
/**
 * A LockError from a synchronous native throw (bad options, key or shard count): the binding throws an Error whose
 * `code` is one of the stable codes; anything else it throws (a JS value of the wrong type, with napi's own codes
 * such as 'InvalidArg') is INVALID_ARGUMENT. The native error is kept as `cause`.
 */
function fromNativeThrow(e) {
  if (e instanceof LockError) return e
  stableCodes = stableCodes ?? new Set(require('./native').errorCodes())
  const code = e && stableCodes.has(e.code) ? e.code : 'INVALID_ARGUMENT'
  return new LockError(String((e && e.message) || e), code, { cause: e })
}

/** Argument errors thrown synchronously, with a stable code. */
function invalidArgument(message) {
  return new LockError(message, 'INVALID_ARGUMENT')
}

module.exports = { LockError, AcquireTimeoutError, AuthError, holderFacts, semaphoreError, fileError, failure, toLockError, fromNativeThrow, invalidArgument }
