'use strict'
// DistributedLock and DistributedSemaphore: the dflockd TypeScript client's classes (same names, options in
// seconds as it has them) over ONE native primitive kept for the instance's lifetime (per shard server). A clean
// release leaves the connection in the native idle pool; a loss aborts the acquisition's signal and calls onLockLost
// once.
//
// Why one primitive: building one per acquisition (options converted and validated again, a threadsafe function
// for the loss callback created and released) cost ~7.6 µs of the ~120 µs of client CPU per acquire + release pair,
// and a loss callback of its own per instance would leave one libuv handle per uncollected instance. Losses of all
// instances go through the thread's one loss channel instead (lib/losses.js, shared with file locks), dispatched by
// the primitive's loss id to the acquisition in progress.
// Measured with the native side's one task per acquisition (Go server, best of 7 on a loaded 2-core machine): client
// CPU per lock + release pair 61 → 50 µs with 1 worker, 42.6 → 28.5 µs with 10.
//
// Where this thread's event loop serves (Node; not TLS, a shared mode, Bun or Deno), the primitive's round trips run on
// it (src/dflockd/on_loop_lock.rs; results through common.js onLoopSettle, no tokio thread or threadsafe function per round
// trip). Measured by bench/run.js --only=dflockd (Go server, one run on a loaded 2-core VM, lock + release pairs/s):
// 1 worker 4 644 → 11 806 (client CPU 139.5 → 45.5 µs, context switches 7.1 → 2.0 per pair), 10 workers 16 599 →
// 16 640 (CPU 47.3 → 32.7 µs: the machine's ceiling, where the TS client and a plain Node net loop also are).

const native = require('../native')
const { validate, DISTRIBUTED_LOCK, DISTRIBUTED_SEMAPHORE, DISTRIBUTED_ACQUIRE, DISTRIBUTED_WAIT } = require('../validate')
const { LockError, AcquireTimeoutError, toLockError, invalidArgument } = require('../errors')
const { asyncDispose } = require('../lock-handle')
const { withAbort } = require('../abort')
const { meetsSharedLock, enqueueMeetsSharedLock } = require('./kinds')
const { DEFAULT_ACQUIRE_TIMEOUT_S, loopAcquire, loopRelease, useEventLoop, DEFAULT_HOST, DEFAULT_PORT, DEFAULT_RENEW_RATIO, abortedError, authOption, describe, guardedCallback, hostOption, nativeSync, nativeTls, opt, stableHashShard, unwatchLoss, watchLoss } = require('./common')
const { ErrorCode } = require('../codes')

// ───────────────────────────── DistributedLock / DistributedSemaphore ─────────────────────────────
//
// The acquisition's state lives in the native primitive only (crates/sema-core/src/dflockd/primitive.rs `Stage`:
// idle → acquiring → queued → held → lost, read as `prim.stage`; which hold a loss report is for, `prim.holdToken`).
// The binding settles a call replaced by close()/release()/force as ABORTED, and reports a loss read off this thread
// only after the grant's result reached it (src/losses.rs). This class keeps what is JavaScript's: the option
// snapshot, the sharding pick, the acquisition's AbortController, calling onLockLost, and withLock.

const kLimit = Symbol('limit')

function normalizeServers(o) {
  // Checked by the option table's `servers` kind (lib/validate.js): a non-empty array of [host, port] pairs.
  if (o.servers !== undefined && o.servers !== null) return Object.freeze(o.servers.map((s) => Object.freeze([hostOption(s[0]), s[1]])))
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
  #mode

  /** The native primitive of server #primIdx, kept across acquisitions (rebuilt only for another shard server). */
  #prim = null
  #primIdx = -1
  /** The mode the kept primitive was built with: the instance's, or 'exclusive' for a plain acquisition made again as
   * a writer because the key is a shared lock's (./kinds.js). */
  #primMode = undefined
  #primId = 0
  /** The primitive's id for its event-loop results; 0 = its round trips run on tokio (TLS, shared mode, Bun, Deno). */
  #loopId = 0
  /** The default strategy's answer, computed once (it depends on the key and the server count only). */
  #defaultIdx = -1
  /** This acquisition's controller, created when `signal` is first read (or on a loss). */
  #controller = null
  #onLoss = (token, reason) => this.#lost(token, reason)

  constructor(options, ...internal) {
    if (options === null || typeof options !== 'object') throw invalidArgument('options must be an object with a key')
    const limit = internal[0] === kLimit ? internal[1] : 1
    // The snapshot: every option read once, unknown names refused with the nearest valid one.
    options = validate(options, internal[0] === kLimit ? DISTRIBUTED_SEMAPHORE : DISTRIBUTED_LOCK)
    this.#key = options.key
    this.#limit = limit
    this.#acquireTimeoutS = options.acquireTimeoutS ?? DEFAULT_ACQUIRE_TIMEOUT_S
    this.#leaseTtlS = opt(options.leaseTtlS)
    this.#servers = normalizeServers(options)
    this.#strategy = options.shardingStrategy ?? stableHashShard
    this.#renewRatio = options.renewRatio ?? DEFAULT_RENEW_RATIO
    // Caps the renew interval (a server started with a short --read-timeout).
    this.#renewMaxIntervalMs = opt(options.renewMaxIntervalMs)
    this.#tlsOption = options.tls
    this.#tls = nativeTls(options.tls)
    this.#auth = authOption(options.auth)
    this.#onLockLost = options.onLockLost ?? undefined
    this.#connectTimeoutMs = opt(options.connectTimeoutMs)
    this.#socketTimeoutMs = opt(options.socketTimeoutMs)
    this.#mode = opt(options.mode)
    // Every rule on the key, numbers, ratio, TLS and auth lives in the native layer: check each server's options now,
    // so a bad option throws here (as dflockd-client's constructor) instead of at acquire(). With one server the
    // check is building its primitive, which the first acquire() then uses (no I/O until then).
    if (this.#servers.length === 1) this.#primitive(0)
    else for (const [host, port] of this.#servers) nativeSync(() => native.dflockdValidateOptions(this.#nativeOptions({ host, port })))
  }

  /** The options of a native primitive on `server` (in `mode`: the instance's by default). */
  #nativeOptions(server, mode = this.#mode) {
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
      mode,
    }
  }

  /** The primitive on server `idx` in `mode`: the kept one, or a new one (the old one closed). */
  #primitive(idx, mode = this.#mode) {
    if (this.#prim !== null && this.#primIdx === idx && this.#primMode === mode) return this.#prim
    const [host, port] = this.#servers[idx]
    const prim = nativeSync(() => new native.NativeDflockdPrimitive(this.#nativeOptions({ host, port }, mode)))
    if (this.#prim !== null) {
      unwatchLoss(this.#primId)
      this.#prim.close()
    }
    this.#prim = prim
    this.#primIdx = idx
    this.#primMode = mode
    this.#primId = prim.lossId
    this.#loopId = useEventLoop(prim)
    return prim
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
    return this.#prim ? this.#prim.token : null
  }
  /** Lease in seconds of the held lock, 0 when none. */
  get lease() {
    return this.#prim ? this.#prim.lease : 0
  }
  /** End of the held lock's proven validity, in ms since the epoch (0 when none): the client's own lease clock,
   * counted from when the last acquire or renew was sent, minus a guard. */
  get validUntil() {
    return this.#prim ? this.#prim.validUntil : 0
  }
  /** Milliseconds the held lock is still proven valid (monotonic clock; 0 when none or lost). */
  remaining() {
    return this.#prim ? this.#prim.remainingMs : 0
  }
  /** Aborted when the currently held lock is lost; a fresh signal per acquisition. */
  get signal() {
    if (this.#controller === null) this.#controller = new AbortController()
    return this.#controller.signal
  }

  #pickServer() {
    const n = this.#servers.length
    if (this.#strategy === stableHashShard && this.#defaultIdx >= 0) return this.#defaultIdx
    let idx
    try {
      idx = this.#strategy(this.#key, n)
    } catch (e) {
      if (e instanceof LockError) throw e
      throw new LockError(`shardingStrategy failed: ${e && e.message ? e.message : e}`, ErrorCode.INVALID_ARGUMENT, { cause: e })
    }
    if (!Number.isInteger(idx) || idx < 0 || idx >= n) {
      throw invalidArgument(`shardingStrategy returned invalid index ${describe(idx)} for ${n} server(s)`)
    }
    if (this.#strategy === stableHashShard) this.#defaultIdx = idx
    return idx
  }

  /** Whether an acquisition is live on the kept primitive (acquiring, queued or held: the primitive's own stage). */
  #live(stage = this.#prim ? this.#prim.stage : 'idle') {
    return stage === 'acquiring' || stage === 'queued' || stage === 'held'
  }

  /** Checks the connection state and starts an acquisition on the kept primitive. */
  #begin(force, signal, mode = this.#mode) {
    if (this.#live()) {
      if (!force) {
        throw new LockError('already connected; call release() or close() first, or pass { force: true }', ErrorCode.ALREADY_LOCKED)
      }
      this.close()
    }
    if (signal && signal.aborted) throw abortedError('acquire')
    // A clean release left its connection in the native idle pool, where this acquisition finds it.
    const prim = this.#primitive(this.#pickServer(), mode)
    this.#controller = null
    watchLoss(this.#primId, this.#onLoss)
    return prim
  }

  /** The acquisition is over (released, closed, lost, or ended without a hold): no more loss reports for it. */
  #end() {
    unwatchLoss(this.#primId)
  }

  /** A loss report of the primitive: this hold's (the native side reports it after the grant's result, never
   * before) unless it names another token (a late report of an earlier hold). */
  #lost(token, reason) {
    if (this.#prim === null || this.#prim.holdToken !== token) return
    const controller = this.#controller ?? (this.#controller = new AbortController())
    // Read before #end: null once the native side reported it lost.
    const current = this.#prim.token
    this.#end()
    controller.abort(new LockError(`lock '${this.#key}' lost: ${reason}`, ErrorCode.LOCK_LOST))
    if (this.#onLockLost) guardedCallback('onLockLost', this.#onLockLost, this.#key, token)
    // Told first, then stopped: a lock the native side still counts as held (its validity ran out before its own
    // report) is closed now; one it reported lost keeps its connection until the server's earliest expiry, so the
    // server does not free the key before this holder has been told.
    if (current !== null) this.#prim.close()
  }

  /** The value of a native acquire/enqueue/wait result (false = timed out); throws LockError on failure. A call
   * replaced meanwhile (close(), release(), force) resolves ABORTED natively. */
  #settle(prim, r, what) {
    if (!r.ok || !r.value) {
      // Ended without a hold (the native side dropped the connection); a newer acquisition keeps its watch.
      if (this.#prim === prim && !this.#live()) this.#end()
    }
    if (!r.ok) {
      if (r.error.code === ErrorCode.ABORTED) throw abortedError(what)
      throw toLockError(r.error, this.#key)
    }
    return r.value
  }

  /** true = acquired; false = timed out. `force` closes a live connection first. */
  async acquire(options) {
    const { force = false, signal } = validate(options ?? undefined, DISTRIBUTED_ACQUIRE)
    let prim = this.#begin(force, signal)
    // Aborting `signal` cancels the call by id as a file wait is (lib/abort.js), close() cancels it on the primitive;
    // either way it settles ABORTED natively and closes a grant that crossed the cancel (so enqueue() and wait() too).
    let r = await withAbort(signal, (cancelId) => loopAcquire(prim, this.#loopId, cancelId))
    if (!r.ok && meetsSharedLock(r.error, { mode: this.#mode, limit: this.#limit })) {
      // The key is a shared lock's (./kinds.js): this acquisition waits for its readers as a writer (its timeout
      // counted again from the refusal, which comes at once).
      prim = this.#begin(false, signal, 'exclusive')
      r = await withAbort(signal, (cancelId) => loopAcquire(prim, this.#loopId, cancelId))
    }
    return this.#settle(prim, r, 'acquire')
  }

  /** Two-phase step 1: 'acquired' (held now, renewing) or 'queued' (call wait()). */
  async enqueue(options) {
    const { force = false, signal } = validate(options ?? undefined, DISTRIBUTED_ACQUIRE)
    const prim = this.#begin(force, signal)
    const r = await withAbort(signal, (cancelId) => prim.enqueue(cancelId ?? undefined))
    if (!r.ok && meetsSharedLock(r.error, { mode: this.#mode, limit: this.#limit })) {
      this.#settle(prim, { ok: true, value: false }, 'enqueue')
      throw enqueueMeetsSharedLock(this.#key, r.error)
    }
    const status = this.#settle(prim, r, 'enqueue')
    if (status !== 'acquired' && status !== 'queued') {
      this.close()
      throw new LockError(`enqueue: unexpected native status ${describe(status)}`, ErrorCode.PROTOCOL_ERROR)
    }
    return status
  }

  /** Two-phase step 2: true once granted (at once if enqueue() already acquired), false on timeout. `timeoutS` may
   * have a fraction: the server gets the ceiling in whole seconds and the wait is cut at the exact deadline (the
   * connection is then dropped, so the server withdraws the wait or releases a grant that crossed the cut). */
  async wait(timeoutS, options) {
    const t = timeoutS ?? this.#acquireTimeoutS
    const { signal } = validate(options ?? undefined, DISTRIBUTED_WAIT)
    const prim = this.#prim
    const stage = prim ? prim.stage : 'idle'
    if (stage === 'held') return true
    if (stage === 'acquiring') throw new LockError('not queued: an enqueue() or wait() of this lock is in progress', ErrorCode.NOT_LOCKED)
    if (stage !== 'queued') {
      throw new LockError('not queued; call enqueue() first, or enqueue() again after a timeout, a loss or close()', ErrorCode.NOT_LOCKED)
    }
    if (signal && signal.aborted) {
      this.close()
      throw abortedError('wait')
    }
    if (typeof t !== 'number') throw invalidArgument(`timeoutS must be a number of seconds, got ${describe(t)}`)
    const r = await withAbort(signal, (cancelId) => prim.wait(t, cancelId ?? undefined))
    // A timeout the native side refuses was never sent: the enqueue stays pending.
    if (!r.ok && r.error.code === ErrorCode.INVALID_ARGUMENT && prim.stage === 'queued') throw toLockError(r.error)
    // After a `w` timeout (or the cut at the deadline) the server has dropped our queue entry: the connection is done.
    return this.#settle(prim, r, 'wait')
  }

  /** Releases the lock. Best effort on the wire (as dflockd-client): a failed release closes the connection, and the
   * server releases on disconnect. After a clean release the connection goes to the idle pool (this thread's on the
   * event-loop driver, the process's on tokio; at most 64 per server, closed after 2 s unused, never keeping the process
   * alive) for the next acquisition to that server by any instance. */
  async release() {
    const prim = this.#prim
    const stage = prim ? prim.stage : 'idle'
    if (!this.#live(stage)) throw new LockError('not connected; nothing to release', ErrorCode.NOT_LOCKED)
    const held = stage === 'held'
    this.#end()
    if (held) {
      // The native release ends the hold whatever the server answers (a failed one closes the connection).
      await loopRelease(prim, this.#loopId)
    } else {
      prim.close() // cancels a call in flight too
    }
  }

  /** Acquires, runs `fn`, always releases. AcquireTimeoutError on timeout; `fn`'s error wins over a release error. */
  async withLock(fn) {
    if (typeof fn !== 'function') throw invalidArgument('withLock needs a function')
    if (!(await this.acquire())) throw new AcquireTimeoutError(this.#key)
    // This acquisition's signal: aborted with the LOCK_LOST error if the lease is lost while `fn` runs.
    const signal = this.signal
    let threw = false
    let result
    try {
      result = await fn()
    } catch (e) {
      threw = true
      throw e
    } finally {
      // The lease's validity ended before fn did, and the native loss report has not run yet: lost now, so the
      // signal, onLockLost and this rejection agree.
      const prim = this.#prim
      if (!signal.aborted && prim && (prim.stage === 'lost' || (prim.stage === 'held' && prim.remainingMs === 0))) {
        this.#lost(prim.holdToken, 'the lease was no longer proven valid when fn finished (no renewal confirmed in time)')
      }
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
    if (prim === null || prim.stage === 'idle') return
    this.#end()
    // The native close() cancels a call in flight too (the core's tickets, the event loop's round trip).
    prim.close()
  }

  async [asyncDispose]() {
    if (this.#prim && this.#prim.stage === 'held') await this.release()
    else this.close()
  }
}

class DistributedSemaphore extends DistributedLock {
  #limit
  constructor(options) {
    if (options === null || typeof options !== 'object') throw invalidArgument('options must be an object with a key and a limit')
    options = validate(options, DISTRIBUTED_SEMAPHORE)
    const limit = options.limit // required by the table: a positive integer
    super(options, kLimit, limit)
    this.#limit = limit
  }
  get limit() {
    return this.#limit
  }
}

module.exports = { DistributedLock, DistributedSemaphore }
