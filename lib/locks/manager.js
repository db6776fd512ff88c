'use strict'
// The W3C Web Locks `LockManager` (https://w3c.github.io/web-locks/) over a lock directory or a dflockd server, so
// that its locks hold across processes and machines. In each process the spec's algorithm runs as written (one
// "lock request queue" per name: FIFO, shared requests granted together, `ifAvailable`, `steal`, `signal`); a
// request that the local algorithm grants then takes the backend lock of its name (one lock file or dflockd key
// per granted request), and only then is it held and its callback called. So requests of one process are ordered
// by the spec, and processes by the backend (the file engine's FIFO line, dflockd's FIFO queue).
//
// One state per base and thread (a registry): two managers created on the same base in one thread share their
// queues, as two `navigator.locks` of one agent do. Backends: ./file-backend.js, ./dflockd-backend.js.

const os = require('node:os')
const { randomUUID } = require('node:crypto')
const { threadId } = require('node:worker_threads')
const { LOCK_REQUEST, unknownName } = require('../validate')

/** This thread's client id (the spec's clientId: one per "agent"), shared by every manager of the thread. */
const CLIENT_ID = randomUUID()

/** A held lock as the callback sees it (the spec's `Lock`: name and mode). */
class Lock {
  #name
  #mode
  constructor(name, mode) {
    this.#name = name
    this.#mode = mode
  }
  get name() {
    return this.#name
  }
  get mode() {
    return this.#mode
  }
  get [Symbol.toStringTag]() {
    return 'Lock'
  }
}

function notSupported(message) {
  return new DOMException(message, 'NotSupportedError')
}

function abortError(message) {
  return new DOMException(message, 'AbortError')
}

/**
 * WebIDL `LockOptions` conversion: a TypeError for what is not a dictionary or has a bad member, and (unlike WebIDL,
 * which ignores them) for a name LockOptions does not have, as every entry point of this package refuses one: a
 * misspelt `ifavailable` would otherwise wait for the lock, and a `timeout` wait forever.
 */
function lockOptions(options) {
  if (options === undefined || options === null) return { mode: 'exclusive', ifAvailable: false, steal: false, signal: undefined }
  if (typeof options !== 'object' && typeof options !== 'function') {
    throw new TypeError('LockManager.request: options must be an object')
  }
  for (const key of Object.keys(options)) {
    if (!Object.prototype.hasOwnProperty.call(LOCK_REQUEST, key)) throw new TypeError(`LockManager.request: ${unknownName('option', key, LOCK_REQUEST)}`)
  }
  const rawMode = options.mode
  const mode = rawMode === undefined ? 'exclusive' : String(rawMode)
  if (mode !== 'exclusive' && mode !== 'shared') {
    throw new TypeError(`LockManager.request: mode must be 'exclusive' or 'shared', got ${typeof rawMode === 'symbol' ? 'a symbol' : `'${mode}'`}`)
  }
  const signal = options.signal
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError('LockManager.request: signal must be an AbortSignal')
  }
  return { mode, ifAvailable: Boolean(options.ifAvailable), steal: Boolean(options.steal), signal }
}

/** The state of one base in this thread: per name, the held requests and the queue (pending and acquiring). */
class BaseState {
  constructor(backend) {
    this.backend = backend
    /** name → {held: Request[], queue: Request[]} */
    this.names = new Map()
    /** name → the promise of the last steal */
    this.steals = new Map()
    /** Requests held here, all names (pushed to `held` only by acquired(), dropped only by dropHeld()). */
    this.heldCount = 0
    /** name → the backend releases of this thread's locks of the name under way (see startAcquire). */
    this.releases = new Map()
    /** The `granting` promise of the request whose backend lock was asked for last (see startAcquire). */
    this.lastGranting = undefined
    backend.attach?.(this)
  }

  /** The backend keys (`keyOf(name)`) of the names held here in exclusive mode (by a lock `canGive(handle)` accepts). */
  heldKeys(keyOf, canGive = () => true) {
    const out = []
    for (const [name, e] of this.names) if (e.held.some((r) => r.mode === 'exclusive' && canGive(r.handle))) out.push(keyOf(name))
    return out
  }

  /**
   * A steal by another process (the backend's hand-over): the exclusive holder of the name that `match`es rejects
   * with an AbortError, and its backend lock is returned to the backend (which keeps it for the stealer), or null
   * (nothing touched) when there is none or `canGive(handle)` refuses its lock.
   */
  surrender(match, canGive = () => true) {
    for (const [name, e] of this.names) {
      if (!match(name)) continue
      const h = e.held.find((r) => r.mode === 'exclusive')
      if (!h || !canGive(h.handle)) return null
      this.dropHeld(h)
      h.reject(abortError(`the lock '${name}' was stolen by a request with steal: true in another process`))
      this.pump(name)
      return h.handle
    }
    return null
  }

  entry(name) {
    let e = this.names.get(name)
    if (!e) {
      e = { held: [], queue: [] }
      this.names.set(name, e)
    }
    return e
  }

  tidy(name) {
    const e = this.names.get(name)
    if (e && e.held.length === 0 && e.queue.length === 0) this.names.delete(name)
  }

  /** The spec's "grantable" test for `req` at the head of what may be granted now. */
  grantableNow(name, mode) {
    const e = this.names.get(name)
    if (!e) return true
    if (e.queue.length > 0) return false
    return mode === 'shared' ? e.held.every((r) => r.mode === 'shared') : e.held.length === 0
  }

  /** Starts the backend acquisition of every queued request the spec's algorithm grants now, in order. */
  pump(name) {
    const e = this.names.get(name)
    if (!e) return
    for (let i = 0; i < e.queue.length; i++) {
      const req = e.queue[i]
      const before = e.queue.slice(0, i)
      const ok =
        req.mode === 'exclusive'
          ? e.held.length === 0 && i === 0
          : e.held.every((r) => r.mode === 'shared') && before.every((r) => r.mode === 'shared' && r.state === 'acquiring')
      if (!ok) break
      if (req.state === 'pending') this.startAcquire(req, true)
    }
    this.tidy(name)
  }

  /**
   * Takes the backend lock of a request the spec's algorithm grants now: a try (answered at once), then, when another
   * process holds the name, the wait in the backend's line. The try tells whether the whole base grants it too, so
   * query() waits for that answer (`req.granting`) and shows the request as held, or as pending behind another
   * process, as the spec's algorithm run over every process would.
   */
  startAcquire(req, wait) {
    const e = this.entry(req.name)
    const prev = e.queue[e.queue.indexOf(req) - 1]
    const after = prev?.state === 'acquiring' ? prev : null
    req.state = 'acquiring'
    const ctl = new AbortController()
    req.internal = ctl
    const take = (w) =>
      this.backend.acquire(req.name, req.mode, { wait: w, signal: ctl.signal, clientId: CLIENT_ID }).then(
        (r) => r,
        (error) => ({ ok: false, error }),
      )
    // The tries of a name's requests granted together go one after the other: a shared try on dflockd is refused while
    // another reader holds the name's gate for its own two steps, which would read as "behind another process".
    // And they wait for this thread's own releases of the name still under way (the spec has released those locks;
    // the backend may not have yet, and would refuse the try).
    const releases = this.releases.get(req.name)
    const ready = releases ? Promise.all([...releases, after?.tried]) : after?.tried
    const tried = ready ? ready.then(() => take(false)) : take(false)
    req.tried = tried
    const answer = tried.then((r) => {
      if (!wait || r.ok || !r.unavailable || ctl.signal.aborted) return r
      req.waiting = true // in the backend's line, behind another process (atBackend tells the backend's query)
      return take(true)
    })
    // The spec grants requests in the order they are made, each grant queueing its callback: so a callback runs only
    // once every request granted before it (any name) is held, or known to wait behind another process; and, as the
    // backend may answer a name's shared requests out of order (dflockd: one connection each), only after the one
    // before it in the name's queue.
    const before = this.lastGranting
    req.acquiring = Promise.all([answer, after?.acquiring, before])
      .then(([r]) => this.acquired(req, ctl, r))
      .catch((err) => internalError(req, err))
    const settled = req.acquiring
    req.granting = tried
      .then(async (r) => {
        if (wait && !r.ok && r.unavailable && !ctl.signal.aborted) return // behind another process: pending
        if (after) {
          await after.granting
          if (after.state === 'acquiring') return // the one before waits behind another process: so does this one
        }
        await settled
      })
      .catch(() => {})
    this.lastGranting = req.granting
  }

  /**
   * Settles once every request this thread's algorithm has granted (the backend lock being taken) is held or known to
   * wait behind another process, and every steal asked for is done: what query() waits for before its snapshot.
   */
  grantsInFlight() {
    const waits = [...this.steals.values()]
    for (const e of this.names.values()) for (const r of e.queue) if (r.state === 'acquiring' && r.granting) waits.push(r.granting)
    return Promise.all(waits.map((p) => p.catch(() => {})))
  }

  async acquired(req, ctl, r) {
    const e = this.entry(req.name)
    if (req.state !== 'acquiring' || ctl !== req.internal) {
      // Aborted meanwhile (already rejected and dequeued): a lock taken anyway goes back at once.
      if (r.ok) await r.value.release().catch(() => {})
      return
    }
    remove(e.queue, req)
    if (!r.ok) {
      req.state = 'done'
      if (r.unavailable) {
        // ifAvailable and the backend lock is taken by another process: the callback gets null.
        req.runCallback(null)
      } else {
        req.reject(r.error)
      }
      this.pump(req.name)
      return
    }
    req.state = 'held'
    req.handle = r.value
    e.held.push(req)
    // Holding again (also a lock adopted by a local steal, not acquired through the backend): what the backend let go
    // of when nothing was held comes back (dflockd: the steal mailbox's idle close is cancelled).
    if (this.heldCount++ === 0) this.backend.held?.()
    const onLost = () => this.lost(req)
    r.value.signal.addEventListener('abort', onLost, { once: true })
    req.unwatch = () => r.value.signal.removeEventListener('abort', onLost)
    // Lost before we listened (e.g. a stolen lock whose hand-over ended, or an adopted one lost meanwhile): the
    // request rejects instead of running its callback.
    if (r.value.signal.aborted) {
      this.lost(req)
      return
    }
    req.runCallback(new Lock(req.name, req.mode))
  }

  /** The backend lock of a held request was taken from it (a steal in another process, or a forced release). */
  lost(req) {
    if (req.state !== 'held') return
    this.dropHeld(req)
    const why = req.handle.signal.reason
    const error = abortError(
      `the lock '${req.name}' was lost: ${why && why.message ? why.message : 'its backend lock was taken by another holder'} ` +
        '(a steal in another process, a forced release, or a lease that could not be renewed)',
    )
    Object.defineProperty(error, 'cause', { value: why, configurable: true, writable: true })
    req.reject(error)
    this.pump(req.name)
  }

  dropHeld(req) {
    req.state = 'done'
    req.unwatch?.()
    const e = this.entry(req.name)
    const i = e.held.indexOf(req)
    if (i < 0) return
    e.held.splice(i, 1)
    // Nothing held here any more: the backend may let go of what only holders need (dflockd: the steal mailbox).
    if (--this.heldCount === 0) this.backend.idle?.()
  }

  /** The callback's promise settled: release the backend lock, then settle the request's promise. */
  async release(req, settle) {
    if (req.state !== 'held') return // stolen: already rejected
    this.dropHeld(req)
    const released = req.handle.release().then(
      () => {},
      (e) => process.emitWarning(`sema-native: releasing Web Lock '${req.name}' failed: ${e && e.message}`, 'SemaNativeWarning'),
    )
    let releases = this.releases.get(req.name)
    if (!releases) this.releases.set(req.name, (releases = new Set()))
    releases.add(released)
    await released
    releases.delete(released)
    if (releases.size === 0) this.releases.delete(req.name)
    settle()
    this.pump(req.name)
  }

  /** The user's signal aborted before the grant. */
  aborted(req, reason, pump = true) {
    if (req.state !== 'pending' && req.state !== 'acquiring') return
    const e = this.entry(req.name)
    remove(e.queue, req)
    const wasAcquiring = req.state === 'acquiring'
    req.state = 'done'
    if (wasAcquiring) req.internal.abort()
    req.reject(reason)
    if (pump) this.pump(req.name)
  }

  /** Steals run one after the other per name, so that the last caller wins (each breaks the one before). */
  steal(req) {
    const before = this.steals.get(req.name) ?? Promise.resolve()
    const mine = before.then(() => this.stealNow(req)).catch((e) => internalError(req, e))
    this.steals.set(req.name, mine)
    mine.then(() => {
      if (this.steals.get(req.name) === mine) this.steals.delete(req.name)
    })
  }

  async stealNow(req) {
    const e = this.entry(req.name)
    // The spec: every held lock of the name is released and its request rejects with an AbortError. A backend that
    // adopts a held lock (dflockd: a release would hand it to the next waiter of the server's queue) gives an
    // exclusive one to the stealer as it is.
    let adopted = null
    for (const h of [...e.held]) {
      this.dropHeld(h)
      h.reject(abortError(`the lock '${req.name}' was stolen by a request with steal: true`))
      if (!adopted && this.backend.adoptsHeld && h.mode === 'exclusive') adopted = h.handle
      else await h.handle.release().catch(() => {})
    }
    // Requests the spec's algorithm has granted here but that still wait for the backend lock count as held: broken
    // too (their backend wait is cancelled; a lock it got anyway is given back). Pending ones stay queued, granted
    // after the stealer.
    const granted = e.queue.filter((q) => q.state === 'acquiring')
    for (const q of granted) this.aborted(q, abortError(`the lock '${req.name}' was stolen by a request with steal: true`), false)
    await Promise.all(granted.map((q) => q.acquiring))
    e.queue.unshift(req)
    req.state = 'acquiring'
    let r
    try {
      r = adopted ? { ok: true, value: adopted } : await this.backend.steal(req.name, { clientId: CLIENT_ID })
    } catch (error) {
      r = { ok: false, error }
    }
    req.internal = null
    await this.acquired(Object.assign(req, { state: 'acquiring' }), null, r)
  }

  /** `{held, pending}` of this thread, in the spec's shape plus pid/host. */
  local() {
    const held = []
    const pending = []
    const facts = { pid: process.pid, host: os.hostname() }
    for (const [name, e] of this.names) {
      for (const r of e.held) held.push({ name, mode: r.mode, clientId: CLIENT_ID, ...facts })
      for (const r of e.queue) pending.push({ name, mode: r.mode, clientId: CLIENT_ID, ...facts })
    }
    return { held, pending }
  }

  /**
   * This thread's requests for `name` that hold or are asking the backend: `[{state, mode}]`, state 'held', 'waiting'
   * (its try was refused: it waits in the backend's line behind another holder, or is on its way there) or
   * 'acquiring' (its try is under way: the backend may have granted it already).
   */
  atBackend(name) {
    const e = this.names.get(name)
    if (!e) return []
    const asking = e.queue.filter((r) => r.state === 'acquiring')
    return [...e.held, ...asking].map((r) => ({ state: r.state === 'acquiring' && r.waiting ? 'waiting' : r.state, mode: r.mode }))
  }
}

function remove(list, item) {
  const i = list.indexOf(item)
  if (i >= 0) list.splice(i, 1)
}

class LockManager {
  #state

  constructor(state) {
    this.#state = state
  }

  /**
   * `request(name, callback)` or `request(name, options, callback)`: the spec's method. Resolves with what the
   * callback returns (after the lock is released), rejects with what it throws, with an AbortError when the lock is
   * stolen or the signal aborts before the grant, and with the backend's LockError when the backend fails.
   */
  request(name, options, callback) {
    const state = this.#state
    return new Promise((resolve, reject) => {
      if (arguments.length < 2) throw new TypeError('LockManager.request needs a name and a callback')
      if (arguments.length === 2) {
        callback = options
        options = undefined
      }
      if (typeof name === 'symbol') throw new TypeError('LockManager.request: name must be a string')
      name = String(name)
      const o = lockOptions(options)
      if (typeof callback !== 'function') throw new TypeError('LockManager.request: callback must be a function')
      if (name.startsWith('-')) throw notSupported(`lock names starting with '-' are reserved: '${name}'`)
      if (o.steal && o.ifAvailable) throw notSupported("the 'steal' and 'ifAvailable' options are mutually exclusive")
      if (o.steal && o.mode !== 'exclusive') throw notSupported("the 'steal' option may only be used with exclusive locks")
      if (o.signal && (o.steal || o.ifAvailable)) {
        throw notSupported("the 'signal' option may not be used with 'steal' or 'ifAvailable'")
      }
      if (o.signal?.aborted) {
        reject(o.signal.reason)
        return
      }
      const req = {
        name,
        mode: o.mode,
        state: 'pending',
        internal: null,
        acquiring: null,
        tried: null,
        granting: null,
        waiting: false,
        handle: null,
        unwatch: null,
        reject,
        runCallback: (lock) => runCallback(state, req, callback, lock, resolve, reject),
      }
      if (o.signal) {
        const onAbort = () => state.aborted(req, o.signal.reason)
        o.signal.addEventListener('abort', onAbort, { once: true })
        const settle = (f) => (v) => {
          o.signal.removeEventListener('abort', onAbort)
          f(v)
        }
        req.reject = settle(reject)
        resolve = settle(resolve)
        reject = req.reject
      }
      if (o.steal) {
        if (state.backend.stealRefused) {
          reject(notSupported(state.backend.stealRefused))
          return
        }
        state.steal(req)
        return
      }
      if (o.ifAvailable) {
        if (!state.grantableNow(name, o.mode)) {
          req.state = 'done'
          queueMicrotask(() => req.runCallback(null))
          return
        }
        state.entry(name).queue.push(req)
        state.startAcquire(req, false)
        return
      }
      state.entry(name).queue.push(req)
      state.pump(name)
    })
  }

  /**
   * `{held, pending}`: this thread's requests (name, mode, clientId, pid, host), then those of every other process
   * using the base, as far as the backend tells them (see the backend's `others`).
   */
  async query() {
    const state = this.#state
    // The spec grants a request as it is made; here the backend lock is taken first. A request granted before this
    // call shows as held once its backend lock is taken (or as pending when another process holds the name).
    await state.grantsInFlight()
    const mine = state.local()
    const others = await state.backend.others((name) => state.atBackend(name), CLIENT_ID)
    return { held: [...mine.held, ...others.held], pending: [...mine.pending, ...others.pending] }
  }

  get [Symbol.toStringTag]() {
    return 'LockManager'
  }
}

function runCallback(state, req, callback, lock, resolve, reject) {
  let p
  try {
    p = Promise.resolve(callback(lock))
  } catch (e) {
    p = Promise.reject(e)
  }
  p.then(
    (v) => (lock === null ? resolve(v) : state.release(req, () => resolve(v))),
    (e) => (lock === null ? reject(e) : state.release(req, () => reject(e))),
  )
}

const states = new Map()

/** The manager of `backend` (its state shared with every manager of the same base in this thread). */
function managerFor(backend) {
  let state = states.get(backend.id)
  if (!state) {
    state = new BaseState(backend)
    states.set(backend.id, state)
  }
  return new LockManager(state)
}

module.exports = { LockManager, Lock, managerFor, CLIENT_ID, threadId }
