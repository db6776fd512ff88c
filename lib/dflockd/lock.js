'use strict'
// DistributedLock and DistributedSemaphore: the dflockd TypeScript client's classes (same names, options in
// seconds as it has them) over one native primitive per acquisition. A clean release leaves the connection in the
// native idle pool; a loss aborts the acquisition's signal and calls onLockLost once.

const native = require('../native')
const { LockError, AcquireTimeoutError, toLockError, invalidArgument } = require('../errors')
const { asyncDispose } = require('../lock-handle')
const { DEFAULT_ACQUIRE_TIMEOUT_S, DEFAULT_HOST, DEFAULT_PORT, DEFAULT_RENEW_RATIO, abortedError, authOption, cancellable, checkSignal, describe, guardedCallback, hostOption, nativeSync, nativeTls, opt, stableHashShard } = require('./common')

// ───────────────────────────── DistributedLock / DistributedSemaphore ─────────────────────────────

const kLimit = Symbol('limit')

function normalizeServers(o) {
  if (o.servers !== undefined && o.servers !== null) {
    if (!Array.isArray(o.servers) || o.servers.length === 0) throw invalidArgument('servers list must not be empty')
    return Object.freeze(
      o.servers.map((s) => {
        if (!Array.isArray(s) || s.length < 2) throw invalidArgument('each server must be a [host, port] pair')
        return Object.freeze([hostOption(s[0]), s[1]])
      }),
    )
  }
  return Object.freeze([Object.freeze([hostOption(o.host ?? DEFAULT_HOST), o.port ?? DEFAULT_PORT])])
}

class DistributedLock {
  #key
  #limit
  #acquireTimeoutS
  #leaseTtlS
  #servers
  #strategy
  #renewRatio
  #renewMaxIntervalMs
  #tls
  #tlsOption
  #auth
  #onLockLost
  #connectTimeoutMs
  #socketTimeoutMs

  /** The live native primitive (connecting, acquiring, queued or held), or null. */
  #prim = null
  #held = false
  #enqueued = false
  #lostEarly = null
  /** Interrupts the in-flight native acquire/enqueue/wait (see cancellable). */
  #interrupt = null
  #controller = new AbortController()

  constructor(options, ...internal) {
    if (options === null || typeof options !== 'object') throw invalidArgument('options must be an object with a key')
    const limit = internal[0] === kLimit ? internal[1] : 1
    this.#key = options.key
    this.#limit = limit
    this.#acquireTimeoutS = options.acquireTimeoutS ?? DEFAULT_ACQUIRE_TIMEOUT_S
    this.#leaseTtlS = opt(options.leaseTtlS)
    this.#servers = normalizeServers(options)
    if (options.shardingStrategy !== undefined && typeof options.shardingStrategy !== 'function') {
      throw invalidArgument('shardingStrategy must be a function')
    }
    this.#strategy = options.shardingStrategy ?? stableHashShard
    this.#renewRatio = options.renewRatio ?? DEFAULT_RENEW_RATIO
    // Not part of the public typings: caps the renew interval (tests against a server with a short --read-timeout).
    this.#renewMaxIntervalMs = opt(options.renewMaxIntervalMs)
    this.#tlsOption = options.tls
    this.#tls = nativeTls(options.tls)
    this.#auth = authOption(options.auth)
    if (options.onLockLost !== undefined && options.onLockLost !== null && typeof options.onLockLost !== 'function') {
      throw invalidArgument('onLockLost must be a function')
    }
    this.#onLockLost = options.onLockLost ?? undefined
    this.#connectTimeoutMs = opt(options.connectTimeoutMs)
    this.#socketTimeoutMs = opt(options.socketTimeoutMs)
    // Every rule on the key, numbers, ratio, TLS and auth lives in the native layer: check each server's options now,
    // so a bad option throws here (as dflockd-client's constructor) instead of at acquire().
    for (const [host, port] of this.#servers) nativeSync(() => native.dflockdValidateOptions(this.#nativeOptions({ host, port })))
  }

  /** The options of a native primitive on `server`. */
  #nativeOptions(server) {
    return {
      key: this.#key,
      limit: this.#limit,
      acquireTimeoutS: this.#acquireTimeoutS,
      // The client stops waiting at the timeout itself, not at the server's reply plus a safety margin.
      acquireTimeoutMs: typeof this.#acquireTimeoutS === 'number' ? this.#acquireTimeoutS * 1000 : undefined,
      leaseTtlS: this.#leaseTtlS,
      server,
      renewRatio: this.#renewRatio,
      tls: this.#tls,
      auth: this.#auth,
      connectTimeoutMs: this.#connectTimeoutMs,
      socketTimeoutMs: this.#socketTimeoutMs,
      renewMaxIntervalMs: this.#renewMaxIntervalMs,
    }
  }

  get key() {
    return this.#key
  }
  get acquireTimeoutS() {
    return this.#acquireTimeoutS
  }
  get leaseTtlS() {
    return this.#leaseTtlS
  }
  get servers() {
    return this.#servers
  }
  get shardingStrategy() {
    return this.#strategy
  }
  get renewRatio() {
    return this.#renewRatio
  }
  get tls() {
    return this.#tlsOption
  }
  get auth() {
    return this.#auth
  }
  get onLockLost() {
    return this.#onLockLost
  }
  get connectTimeoutMs() {
    return this.#connectTimeoutMs
  }
  get socketTimeoutMs() {
    return this.#socketTimeoutMs
  }
  /** Token of the held lock, or null. */
  get token() {
    return this.#held && this.#prim ? this.#prim.token : null
  }
  /** Lease in seconds of the held lock, 0 when none. */
  get lease() {
    return this.#held && this.#prim ? this.#prim.lease : 0
  }
  /** Aborted when the currently held lock is lost; a fresh signal per acquisition. */
  get signal() {
    return this.#controller.signal
  }

  #pickServer() {
    const n = this.#servers.length
    let idx
    try {
      idx = this.#strategy(this.#key, n)
    } catch (e) {
      if (e instanceof LockError) throw e
      throw new LockError(`shardingStrategy failed: ${e && e.message ? e.message : e}`, 'INVALID_ARGUMENT', { cause: e })
    }
    if (!Number.isInteger(idx) || idx < 0 || idx >= n) {
      throw invalidArgument(`shardingStrategy returned invalid index ${describe(idx)} for ${n} server(s)`)
    }
    const [host, port] = this.#servers[idx]
    return { host, port }
  }

  /** Checks the connection state, then builds a fresh native primitive (one connection per acquisition). */
  #begin(force, signal) {
    if (this.#prim) {
      if (!force) {
        throw new LockError('already connected; call release() or close() first, or pass { force: true }', 'ALREADY_LOCKED')
      }
      this.close()
    }
    if (signal && signal.aborted) throw abortedError('acquire')
    // A clean release leaves its connection in the native idle pool, where this acquisition finds it.
    const prim = nativeSync(() => new native.NativeDflockdPrimitive(this.#nativeOptions(this.#pickServer())))
    const controller = new AbortController()
    this.#controller = controller
    this.#prim = prim
    this.#held = false
    this.#lostEarly = null
    prim.onLost((key, token, reason) => this.#lost(prim, controller, token, reason))
    return prim
  }

  #lost(prim, controller, token, reason) {
    if (this.#prim !== prim) return
    if (!this.#held) {
      // Lost before the grant's continuation ran: report it once the grant is recorded (#granted).
      this.#lostEarly = { prim, controller, token, reason }
      return
    }
    this.#prim = null
    this.#held = false
    prim.close()
    controller.abort(new LockError(`lock '${this.#key}' lost: ${reason || 'the lease could not be renewed'}`, 'LOCK_LOST'))
    if (this.#onLockLost) guardedCallback('onLockLost', this.#onLockLost, this.#key, token)
  }

  /** Marks `prim` held; replays a loss that arrived before this point. */
  #granted(prim) {
    this.#held = true
    const early = this.#lostEarly
    this.#lostEarly = null
    if (early && early.prim === prim) this.#lost(prim, early.controller, early.token, early.reason)
  }

  /** Drops `prim` if it is still ours (after a timeout or failure). */
  #drop(prim) {
    if (this.#prim === prim) {
      this.#prim = null
      this.#held = false
    }
    prim.close()
  }

  /** The value of a native acquire/enqueue/wait result (false = timed out); throws LockError on failure. */
  #settle(prim, r, signal, what) {
    if (this.#prim !== prim) {
      // close()/force replaced us while the request was in flight.
      prim.close()
      throw new LockError(`${what} interrupted: the lock was closed`, 'ABORTED')
    }
    if (!r.ok) {
      this.#drop(prim)
      if (r.error.code === 'ABORTED') throw abortedError(what)
      throw toLockError(r.error, this.#key)
    }
    return r.value
  }

  /** Runs one native acquire/enqueue/wait of `prim`, interruptible by `signal` and close(). */
  async #run(prim, start, signal) {
    const { promise, interrupt } = cancellable(prim, start, signal)
    this.#interrupt = interrupt
    try {
      return await promise
    } finally {
      if (this.#interrupt === interrupt) this.#interrupt = null
    }
  }

  /** true = acquired; false = timed out. `force` closes a live connection first. */
  async acquire(options) {
    const { force = false, signal } = options ?? {}
    checkSignal(signal)
    const prim = this.#begin(force, signal)
    const r = await this.#run(prim, () => prim.acquire(), signal)
    if (!this.#settle(prim, r, signal, 'acquire')) {
      this.#drop(prim)
      return false
    }
    this.#granted(prim)
    return true
  }

  /** Two-phase step 1: 'acquired' (held now, renewing) or 'queued' (call wait()). */
  async enqueue(options) {
    const { force = false, signal } = options ?? {}
    checkSignal(signal)
    const prim = this.#begin(force, signal)
    this.#enqueued = true
    const r = await this.#run(prim, () => prim.enqueue(), signal)
    const status = this.#settle(prim, r, signal, 'enqueue')
    if (status === 'acquired') this.#granted(prim)
    else if (status !== 'queued') {
      this.#drop(prim)
      throw new LockError(`enqueue: unexpected native status ${describe(status)}`, 'PROTOCOL_ERROR')
    }
    return status
  }

  /** Two-phase step 2: true once granted (at once if enqueue() already acquired), false on timeout. */
  async wait(timeoutS, options) {
    const t = timeoutS ?? this.#acquireTimeoutS
    const { signal } = options ?? {}
    checkSignal(signal)
    if (this.#held && this.#prim) return true
    const prim = this.#prim
    if (!prim) {
      throw new LockError(
        this.#enqueued ? 'connection closed; call enqueue() again' : 'not connected; call enqueue() first',
        'NOT_LOCKED',
      )
    }
    if (signal && signal.aborted) {
      this.close()
      throw abortedError('wait')
    }
    if (typeof t !== 'number') throw invalidArgument(`timeoutS must be a number of seconds, got ${describe(t)}`)
    const r = await this.#run(prim, () => prim.wait(t), signal)
    // A timeout the native side refuses was never sent: the enqueue stays pending.
    if (!r.ok && r.error.code === 'INVALID_ARGUMENT' && this.#prim === prim) throw toLockError(r.error)
    if (!this.#settle(prim, r, signal, 'wait')) {
      // After a `w` timeout the server has dropped our queue entry: the connection is done.
      this.#drop(prim)
      return false
    }
    this.#granted(prim)
    return true
  }

  /** Releases the lock. Best effort on the wire (as dflockd-client): a failed release closes the connection, and the
   * server releases on disconnect. After a clean release the connection goes to the process-wide idle pool (at most
   * 64 per server, closed after 2 s unused, never keeping the process alive) for the next acquisition to that server
   * by any instance. */
  async release() {
    const prim = this.#prim
    if (!prim) throw new LockError('not connected; nothing to release', 'NOT_LOCKED')
    const held = this.#held
    this.#prim = null
    this.#held = false
    if (held) {
      try {
        await prim.release()
      } finally {
        prim.close()
      }
    } else {
      const interrupt = this.#interrupt
      this.#interrupt = null
      if (interrupt) interrupt()
      prim.cancel()
      prim.close()
    }
  }

  /** Acquires, runs `fn`, always releases. AcquireTimeoutError on timeout; `fn`'s error wins over a release error. */
  async withLock(fn) {
    if (typeof fn !== 'function') throw invalidArgument('withLock needs a function')
    if (!(await this.acquire())) throw new AcquireTimeoutError(this.#key)
    // This acquisition's signal: aborted with the LOCK_LOST error if the lease is lost while `fn` runs.
    const signal = this.#controller.signal
    let threw = false
    let result
    try {
      result = await fn()
    } catch (e) {
      threw = true
      throw e
    } finally {
      if (signal.aborted) {
        // Lost mid-work: nothing is left to release, and fn's work was not exclusive.
        if (!threw) throw signal.reason
      } else {
        try {
          await this.release()
        } catch (releaseError) {
          if (!threw) throw releaseError
        }
      }
    }
    return result
  }

  /** Drops the connection without releasing (the server releases on disconnect). Sync and idempotent. */
  close() {
    const prim = this.#prim
    if (!prim) return
    this.#prim = null
    this.#held = false
    const interrupt = this.#interrupt
    this.#interrupt = null
    if (interrupt) interrupt()
    prim.cancel()
    prim.close()
  }

  async [asyncDispose]() {
    if (this.#held && this.#prim) await this.release()
    else this.close()
  }
}

class DistributedSemaphore extends DistributedLock {
  #limit
  constructor(options) {
    if (options === null || typeof options !== 'object') throw invalidArgument('options must be an object with a key and a limit')
    const limit = options.limit
    if (typeof limit !== 'number') throw invalidArgument(`limit must be an integer >= 1, got ${describe(limit)}`)
    super(options, kLimit, limit)
    this.#limit = limit
  }
  get limit() {
    return this.#limit
  }
}

module.exports = { DistributedLock, DistributedSemaphore }
