'use strict'
// AbortSignal wiring for native waits. napi's own AbortSignal support overwrites `signal.onabort` and ignores an
// already-aborted signal, so the JS layer owns it: an aborted signal fails at once without touching the disk, and
// an abort during the wait cancels the native wait by id (it then resolves with code ABORTED).
//
// The signal was checked at the boundary (lib/validate.js), but a stand-in may still throw when it is used: that
// is an INVALID_ARGUMENT result before the wait starts, and a throw while detaching once the wait is over is
// ignored, so that a lock taken meanwhile is always handed to the caller (never held with no handle).

const { ErrorCode } = require('./codes')
const native = require('./native')

function abortedResult(signal) {
  let why = ''
  try {
    why = signal && signal.reason instanceof Error ? `: ${signal.reason.message}` : ''
  } catch {}
  return { ok: false, error: { code: ErrorCode.ABORTED, message: `Lock acquisition was aborted${why}` } }
}

function unusableSignal(e) {
  const text = e instanceof Error ? e.message : String(e)
  return { ok: false, error: { code: ErrorCode.INVALID_ARGUMENT, message: `signal is not a usable AbortSignal: ${text}` } }
}

/**
 * Runs `start(cancelId)` (a native wait) so that aborting `signal` cancels it. Without a signal it is `start(null)`
 * itself, its value or promise as it is (callers await it): no async wrapper, whose promise and ticks are a part of
 * every file acquisition's JS-thread cost (bench/file-js-cost.js).
 */
function withAbort(signal, start) {
  if (signal == null) return start(null)
  return withSignal(signal, start)
}

async function withSignal(signal, start) {
  let cancelId = null
  let onAbort = null
  try {
    if (signal.aborted) return abortedResult(signal)
    cancelId = native.newCancelId()
    const id = cancelId
    onAbort = () => native.cancelWait(id)
    signal.addEventListener('abort', onAbort, { once: true })
  } catch (e) {
    if (cancelId !== null) native.forgetCancel(cancelId)
    return unusableSignal(e)
  }
  try {
    return await start(cancelId)
  } finally {
    try {
      signal.removeEventListener('abort', onAbort)
    } catch {}
    native.forgetCancel(cancelId)
  }
}

module.exports = { withAbort, abortedResult }
