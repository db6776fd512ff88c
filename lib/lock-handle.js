'use strict'
// The `Lock` handle both backends return: LockInfo fields, `signal` (aborted on loss), `onLost`, an idempotent
// `release()` and `Symbol.asyncDispose`. Backends subclass it and implement `_release()`.

const { ErrorCode } = require('./codes')
const { LockError } = require('./errors')
const diagnostics = require('./diagnostics')

const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')

class LockHandle {
  #controller = new AbortController()
  #state = 'held' // 'held' | 'released' | 'lost'
  #releasing = null
  #onLost

  constructor({ target, backend, pid, timestamp, tag, token, onLost }) {
    this.target = target
    this.backend = backend
    this.pid = pid
    this.timestamp = timestamp
    if (tag !== undefined) this.tag = tag
    if (token !== undefined) this.token = token
    this.#onLost = onLost
  }

  get signal() {
    return this.#controller.signal
  }

  get released() {
    return this.#state !== 'held'
  }

  /** Internal: the lock was lost (not released by its holder). */
  get _lost() {
    return this.#state === 'lost'
  }

  /** Called by the backend when the lock is found lost. Aborts `signal`, then runs `onLost`; never throws. */
  _markLost(message) {
    if (this.#state !== 'held') return
    this.#state = 'lost'
    const error = new LockError(message, ErrorCode.LOCK_LOST)
    this.#controller.abort(error)
    diagnostics.lost(this, error)
    if (typeof this.#onLost !== 'function') return
    try {
      const r = this.#onLost(this, error)
      if (r && typeof r.then === 'function') r.then(undefined, (e) => reportCallbackError(e))
    } catch (e) {
      reportCallbackError(e)
    }
  }

  /** Called by the backend when the lock was released by other means (e.g. `release(path)`): `released` turns true. */
  _markReleased() {
    if (this.#state === 'held') this.#state = 'released'
  }

  /** Resolves true if this call released the lock, false if it was already released or lost (or another call is releasing it). */
  release() {
    if (this.#releasing) return this.#releasing.then(() => false, () => false)
    if (this.#state !== 'held') return Promise.resolve(false)
    this.#releasing = (async () => {
      try {
        const released = await this._release()
        if (this.#state === 'held') this.#state = released ? 'released' : 'lost'
        const done = released && this.#state === 'released'
        if (done) diagnostics.released(this)
        return done
      } finally {
        this.#releasing = null
      }
    })()
    return this.#releasing
  }

  async [asyncDispose]() {
    await this.release()
  }

  /* c8 ignore next 3 */
  async _release() {
    throw new Error('LockHandle._release must be implemented by the backend')
  }
}

function reportCallbackError(e) {
  process.emitWarning(`sema-native: onLost callback failed: ${e && e.stack ? e.stack : e}`, 'SemaNativeWarning')
}

module.exports = { LockHandle, asyncDispose, reportCallbackError }
