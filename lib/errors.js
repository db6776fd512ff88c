'use strict'
// Error classes and the conversions between the three ways a failure travels:
// - SemaphoreError values inside SemaphoreResult (semats' shape: {type, message, holderPid?, lockedSince?, cause?}; a
//   lock file's ALREADY_LOCKED and TIMEOUT add holderTag? and isOwnedByCurrentProcess?: the holder as the engine read
//   it when it refused),
// - LockError instances thrown by withLock, status and the dflockd classes (same fields plus a stable `code`),
// - native result objects from the binding ({code, message, reply?, holderPid?, lockedSince?, errno?}).
// An OS failure carries the OS's number as `errno` (and its name as `errnoName` where Node knows the numbers), so
// nothing here or in callers reads it back out of a message.

const { ErrorCode } = require('./codes')

/** `message` with the token of every dflockd URL in it masked: every LockError's message goes through it. */
function redacted(message) {
  return typeof message === 'string' && /dflockd:/i.test(message) ? require('./dflockd/url').redactTarget(message) : message
}

class LockError extends Error {
  constructor(message, code = ErrorCode.IO_ERROR, details = {}) {
    super(redacted(message))
    this.name = 'LockError'
    this.code = code
    if (details.holderPid !== undefined) this.holderPid = details.holderPid
    if (details.lockedSince !== undefined) this.lockedSince = details.lockedSince
    if (details.holderTag !== undefined) this.holderTag = details.holderTag
    if (details.isOwnedByCurrentProcess !== undefined) this.isOwnedByCurrentProcess = details.isOwnedByCurrentProcess
    if (details.reply !== undefined) this.reply = details.reply
    if (details.errno !== undefined) this.errno = details.errno
    if (details.errnoName !== undefined) this.errnoName = details.errnoName
    if (details.cause !== undefined) this.cause = details.cause
  }

  /** semats naming for the code. */
  get type() {
    return this.code
  }
}

class AcquireTimeoutError extends LockError {
  constructor(key, message = `timeout acquiring '${key}'`, details = {}) {
    super(message, ErrorCode.TIMEOUT, details)
    this.name = 'AcquireTimeoutError'
  }
}

class AuthError extends LockError {
  constructor(message = 'authentication failed') {
    super(message, ErrorCode.AUTH_FAILED)
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

let errnoNames
/**
 * `EACCES` for 13: the name of an OS error number. On Unix `os.constants.errno` holds the platform's own numbers,
 * the ones the engine reports; on Windows the engine reports system error codes, which that table does not hold, so
 * there is no name there.
 */
function errnoName(errno) {
  if (process.platform === 'win32') return undefined
  errnoNames = errnoNames ?? new Map(Object.entries(require('node:os').constants.errno).map(([k, v]) => [v, k]))
  return errnoNames.get(errno)
}

/** A SemaphoreError value (plain object, semats' key order) from a native error object. */
function semaphoreError(nativeError) {
  const e = { type: nativeError.code ?? nativeError.type, message: nativeError.message }
  if (nativeError.holderPid != null) e.holderPid = nativeError.holderPid
  if (nativeError.lockedSince != null) e.lockedSince = nativeError.lockedSince
  if (nativeError.holderTag != null) e.holderTag = nativeError.holderTag
  if (nativeError.isOwnedByCurrentProcess != null) e.isOwnedByCurrentProcess = nativeError.isOwnedByCurrentProcess
  if (nativeError.reply != null) e.reply = nativeError.reply
  if (nativeError.errno != null) {
    e.errno = nativeError.errno
    const name = nativeError.errnoName ?? errnoName(nativeError.errno)
    if (name !== undefined) e.errnoName = name
  }
  if (nativeError.cause != null) e.cause = nativeError.cause
  return e
}

/**
 * semaphoreError for a failure on the lock file `path`: an OS error (one with an `errno`) names the file it happened
 * on, as Node's own fs errors do.
 */
function fileError(nativeError, path) {
  const e = semaphoreError(nativeError)
  if (e.errno !== undefined && typeof e.message === 'string' && !e.message.includes(path)) {
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
  if (code === ErrorCode.TIMEOUT && key !== undefined) return new AcquireTimeoutError(key)
  // The engine's words: they start with 'authentication failed' (dflockd-client's message, which callers match) and
  // say whether a token was sent (never the token). A server with no token configured answers bare `error` to one:
  // a different mistake, said in words (same class and code).
  if (code === ErrorCode.AUTH_FAILED) return new AuthError(error.message)
  return new LockError(error.message, code, error)
}

const stableCodes = new Set(Object.values(ErrorCode))
/**
 * A LockError from a synchronous native throw (bad options, key or shard count): the binding throws an Error whose
 * `code` is one of the stable codes; anything else it throws (a JS value of the wrong type, with napi's own codes
 * such as 'InvalidArg') is INVALID_ARGUMENT. The native error is kept as `cause`.
 */
function fromNativeThrow(e) {
  if (e instanceof LockError) return e
  const code = e && stableCodes.has(e.code) ? e.code : ErrorCode.INVALID_ARGUMENT
  return new LockError(String((e && e.message) || e), code, { cause: e })
}

/** Argument errors thrown synchronously, with a stable code. */
function invalidArgument(message) {
  return new LockError(message, ErrorCode.INVALID_ARGUMENT)
}

module.exports = { LockError, AcquireTimeoutError, AuthError, holderFacts, semaphoreError, fileError, failure, toLockError, fromNativeThrow, invalidArgument }
