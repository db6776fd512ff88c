'use strict'
// AbortSignal wiring for native waits. napi's own AbortSignal support overwrites `signal.onabort` and ignores an
// already-aborted signal, so the JS layer owns it: an aborted signal fails at once without touching the disk, and
// an abort during the wait cancels the native wait by id (it then resolves with code ABORTED).

const native = require('./native')

function abortedResult(signal) {
  const why = signal && signal.reason instanceof Error ? `: ${signal.reason.message}` : ''
  return { ok: false, error: { code: 'ABORTED', message: `Lock acquisition was aborted${why}` } }
}

/** Runs `start(cancelId)` (a native wait) so that aborting `signal` cancels it. */
async function withAbort(signal, start) {
  if (signal == null) return start(null)
  if (signal.aborted) return abortedResult(signal)
  const cancelId = native.newCancelId()
  const onAbort = () => native.cancelWait(cancelId)
  signal.addEventListener('abort', onAbort, { once: true })
  try {
    return await start(cancelId)
  } finally {
    signal.removeEventListener('abort', onAbort)
    native.forgetCancel(cancelId)
  }
}

module.exports = { withAbort, abortedResult }
