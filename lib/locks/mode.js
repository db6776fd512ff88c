'use strict'
// The `mode` option of a backend acquisition. A backend with shared locks needs `mode: 'exclusive'` on exclusive
// requests too (on dflockd a plain mutex does not wait for shared holders); a build without shared locks refuses
// `mode` (INVALID_ARGUMENT: an unknown option, or one for the other backend only). So the first exclusive acquisition tries with the mode and, when
// refused for that reason, remembers it and goes on without: exclusive requests then work either way, and a shared
// one rejects with the backend's refusal.

/**
 * True when `error` (a SemaphoreError) is a refusal of the `mode` option itself: INVALID_ARGUMENT naming it (as an
 * unknown option, or one that this backend does not take). The values passed here are always valid ones.
 */
function refusesMode(error) {
  return error != null && error.type === 'INVALID_ARGUMENT' && /'mode'/.test(String(error.message))
}

/**
 * `take(target, options)` (acquire or tryAcquire of lib/target.js) in `mode`; `memo.modes` is false once the backend
 * refused `mode`.
 */
async function takeInMode(take, target, options, mode, memo) {
  if (mode === 'exclusive' && memo.modes === false) return take(target, options)
  const r = await take(target, { ...options, mode })
  if (mode === 'exclusive' && !r.ok && refusesMode(r.error)) {
    memo.modes = false
    return take(target, options)
  }
  return r
}

module.exports = { takeInMode, refusesMode }
