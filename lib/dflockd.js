'use strict'
// dflockd client, JavaScript side. Mirrors the names and behaviour of the official TypeScript client
// (dflockd-client, reference §D) on top of the native binding (src/dflockd.rs), and provides the target functions
// the dispatcher in lib/target.js uses for `dflockd://` URLs.
//
// Units: seconds in the dflockd classes (as dflockd-client), milliseconds in the target API (as semats).
// Every native async call resolves a result object ({ok: true, …} | {ok:false, error:{code, message, reply?}});
// nothing here rejects with a raw native error. The native layer (src/dflockd.rs over sema-core's dflockd module)
// validates every key, token, number and option and parses every reply; this file only maps results to the
// dflockd-client classes and errors, and checks what only exists in JS (server lists, the sharding function,
// callbacks, AbortSignals, the tls option's shape). No timers live in this file; an abort signal or close()
// settles a pending acquire / enqueue / wait at once (and cancels the native call), so nothing here keeps the
// process alive on its own. Failures map to LockError codes: validation → INVALID_ARGUMENT (nothing sent), a
// server `timeout` → false / AcquireTimeoutError, `error_auth` → AuthError, any other `error*` reply →
// SERVER_ERROR with `reply`, a reply that is not the protocol's → PROTOCOL_ERROR.

const native = require('./native')
const { LockError, AcquireTimeoutError, AuthError } = require('./errors')
const { LockHandle, asyncDispose } = require('./lock-handle')

const DEFAULT_HOST = '127.0.0.1'
const DEFAULT_PORT = 6388
const DEFAULT_ACQUIRE_TIMEOUT_S = 10
const DEFAULT_RENEW_RATIO = 0.5
/** Longest wait we send (the native limit; the Go server's time.Duration overflows near 9.2e9 s and then answers at once). */
const MAX_TIMEOUT_S = 1e9

const CODES = new Set([
  'ALREADY_LOCKED',
  'INVALID_PATH',
  'IO_ERROR',
  'NOT_LOCKED',
  'TIMEOUT',
  'PARSE_ERROR',
  'PERMISSION_DENIED',
  'PATH_TRAVERSAL',
  'ABORTED',
  'LOCK_LOST',
  'CONNECTION_ERROR',
  'TLS_MISMATCH',
  'AUTH_FAILED',
  'PROTOCOL_ERROR',
  'SERVER_ERROR',
  'INVALID_ARGUMENT',
])

// ───────────────────────────── errors and validation ─────────────────────────────

function invalid(message) {
  return new LockError(message, 'INVALID_ARGUMENT')
}

/** LockError (or AcquireTimeoutError / AuthError) from a native `{code, message, reply?}`. */
function fromNative(error, key) {
  const code = CODES.has(error && error.code) ? error.code : 'SERVER_ERROR'
  if (code === 'TIMEOUT' && key !== undefined) return new AcquireTimeoutError(key)
  if (code === 'AUTH_FAILED') return new AuthError()
  const details = {}
  if (error && error.reply != null) details.reply = error.reply
  return new LockError(String((error && error.message) || code), code, details)
}

/** The native constructors throw `Error("INVALID_ARGUMENT: …")`; turn that into a LockError with the code. */
function fromNativeThrow(e) {
  if (e instanceof LockError) return e
  const m = /^([A-Z_]+): ([\s\S]*)$/.exec((e && e.message) || '')
  if (m && CODES.has(m[1])) return new LockError(m[2], m[1], { cause: e })
  return new LockError(String((e && e.message) || e), 'INVALID_ARGUMENT', { cause: e })
}

/** A SemaphoreError value (semats' shape) from a LockError. */
function errorValue(err) {
  const e = { type: err.code, message: err.message }
  if (err.reply !== undefined) e.reply = err.reply
  return e
}

function fail(type, message, extra) {
  return { ok: false, error: { type, message, ...extra } }
}

/** Runs a synchronous native call; a native throw (bad options, a JS value of the wrong type) becomes a LockError. */
function nativeSync(fn) {
  try {
    return fn()
  } catch (e) {
    throw fromNativeThrow(e)
  }
}

/** `''` or absent = no auth (as dflockd-client); the native side checks the rest. */
function authOption(auth) {
  return auth === undefined || auth === null || auth === '' ? undefined : auth
}

/** `[::1]` → `::1` (a bracketed IPv6 literal, as URLs write it). */
function hostOption(host) {
  return typeof host === 'string' && host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host
}

/** `undefined`/`null` → absent, so the native default applies. */
function opt(v) {
  return v === null ? undefined : v
}

// The tls.ConnectionOptions fields that mean something to this client (the rest, e.g. checkServerIdentity,
// secureContext, pfx, passphrase, minVersion, are refused by name so nothing is silently ignored).
const TLS_FIELDS = ['ca', 'servername', 'rejectUnauthorized', 'cert', 'key']

/** One PEM string from a string, Buffer/Uint8Array, or an array of them (joined). */
function pemText(name, v) {
  const list = Array.isArray(v) ? v : [v]
  const pems = list.map((c) => {
    if (typeof c === 'string') return c
    if (Buffer.isBuffer(c) || c instanceof Uint8Array) return Buffer.from(c).toString('utf8')
    throw invalid(`tls.${name} must be a PEM string or Buffer, or an array of them`)
  })
  return pems.length > 0 ? pems.map((p) => (p.endsWith('\n') ? p : p + '\n')).join('') : undefined
}

/**
 * `tls` option → NativeTls: `true`/`{}` = system roots; `ca` PEM(s) joined; `servername`; `rejectUnauthorized`;
 * `cert` + `key` for a server that asks for a client certificate.
 */
function nativeTls(tls) {
  if (tls === undefined || tls === null || tls === false) return undefined
  if (tls === true) return {}
  if (typeof tls !== 'object') throw invalid('tls must be true or an object (tls.ConnectionOptions fields)')
  for (const k of Object.keys(tls)) {
    if (!TLS_FIELDS.includes(k) && tls[k] !== undefined) throw invalid(`unsupported tls option '${k}' (supported: ${TLS_FIELDS.join(', ')})`)
  }
  const out = {}
  const given = (k) => tls[k] !== undefined && tls[k] !== null
  if (given('ca')) out.ca = pemText('ca', tls.ca)
  if (given('servername')) {
    if (typeof tls.servername !== 'string' || tls.servername === '') throw invalid('tls.servername must be a non-empty string')
    out.servername = tls.servername
  }
  if (given('rejectUnauthorized')) {
    if (typeof tls.rejectUnauthorized !== 'boolean') throw invalid(`tls.rejectUnauthorized must be a boolean, got ${typeof tls.rejectUnauthorized}`)
    out.rejectUnauthorized = tls.rejectUnauthorized
  }
  if (given('cert') !== given('key')) throw invalid('tls.cert and tls.key go together: give both or neither')
  if (given('cert')) {
    out.cert = pemText('cert', tls.cert)
    // A key's value is a secret: only its type appears in the error.
    if (typeof tls.key !== 'string' && !Buffer.isBuffer(tls.key) && !(tls.key instanceof Uint8Array)) {
      throw invalid(`tls.key must be a PEM string or Buffer, got ${Array.isArray(tls.key) ? 'an array' : typeof tls.key}`)
    }
    out.key = pemText('key', tls.key)
  }
  return out
}

function checkSignal(signal) {
  if (signal === undefined || signal === null) return undefined
  if (typeof signal !== 'object' || typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function') {
    throw invalid('signal must be an AbortSignal')
  }
  return signal
}

function describe(v) {
  if (typeof v === 'string') return JSON.stringify(v)
  if (typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined) return String(v)
  return typeof v
}

/** Calls `fn` once when `signal` aborts; returns the unsubscribe function. */
function onAbort(signal, fn) {
  if (!signal) return () => {}
  signal.addEventListener('abort', fn, { once: true })
  return () => signal.removeEventListener('abort', fn)
}

function abortedError(what) {
  return new LockError(`${what} aborted`, 'ABORTED')
}

const ABORTED_RESULT = Object.freeze({ ok: false, error: Object.freeze({ code: 'ABORTED', message: 'operation aborted' }) })

/**
 * Starts a native acquire/enqueue/wait of `prim` and returns `{promise, interrupt}`: the promise resolves the native
 * result, or ABORTED at once when `signal` aborts or `interrupt()` is called. The native cancel()/close() can miss
 * an operation that has not started running yet, so the JS side does not wait for it: a result that still arrives
 * after the interrupt (a late grant) is dropped with close(), which the server turns into a release.
 */
function cancellable(prim, start, signal) {
  let settled = false
  let interrupt
  const promise = new Promise((resolve) => {
    const op = start()
    const off = onAbort(signal, () => interrupt())
    interrupt = () => {
      prim.cancel()
      prim.close()
      if (settled) return
      settled = true
      off()
      resolve(ABORTED_RESULT)
      op.then(() => prim.close(), () => prim.close())
    }
    op.then(
      (r) => {
        if (settled) return
        settled = true
        off()
        resolve(r)
      },
      (e) => {
        if (settled) return
        settled = true
        off()
        resolve({ ok: false, error: { code: 'PROTOCOL_ERROR', message: `native call failed: ${e && e.message ? e.message : e}` } })
      },
    )
  })
  return { promise, interrupt }
}

/** Options shared by connections (connect-time part). */
function connectOptions(o) {
  return { tls: nativeTls(o.tls), auth: authOption(o.auth), connectTimeoutMs: opt(o.connectTimeoutMs), socketTimeoutMs: opt(o.socketTimeoutMs) }
}

function guardedCallback(name, fn, ...args) {
  try {
    const r = fn(...args)
    if (r && typeof r.then === 'function') r.then(undefined, (e) => warnCallback(name, e))
  } catch (e) {
    warnCallback(name, e)
  }
}

function warnCallback(name, e) {
  process.emitWarning(`sema-native: ${name} callback failed: ${e && e.stack ? e.stack : e}`, 'SemaNativeWarning')
}

// ───────────────────────────── sharding ─────────────────────────────

/** CRC-32/IEEE of the key's UTF-8 bytes modulo `numServers` (same as the Go, Python and TS clients). */
function stableHashShard(key, numServers) {
  return nativeSync(() => native.stableHashShard(key, numServers))
}

// ───────────────────────────── DistributedLock / DistributedSemaphore ─────────────────────────────

const kLimit = Symbol('limit')

function normalizeServers(o) {
  if (o.servers !== undefined && o.servers !== null) {
    if (!Array.isArray(o.servers) || o.servers.length === 0) throw invalid('servers list must not be empty')
    return Object.freeze(
      o.servers.map((s) => {
        if (!Array.isArray(s) || s.length < 2) throw invalid('each server must be a [host, port] pair')
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
    if (options === null || typeof options !== 'object') throw invalid('options must be an object with a key')
    const limit = internal[0] === kLimit ? internal[1] : 1
    this.#key = options.key
    this.#limit = limit
    this.#acquireTimeoutS = options.acquireTimeoutS ?? DEFAULT_ACQUIRE_TIMEOUT_S
    this.#leaseTtlS = opt(options.leaseTtlS)
    this.#servers = normalizeServers(options)
    if (options.shardingStrategy !== undefined && typeof options.shardingStrategy !== 'function') {
      throw invalid('shardingStrategy must be a function')
    }
    this.#strategy = options.shardingStrategy ?? stableHashShard
    this.#renewRatio = options.renewRatio ?? DEFAULT_RENEW_RATIO
    // Not part of the public typings: caps the renew interval (tests against a server with a short --read-timeout).
    this.#renewMaxIntervalMs = opt(options.renewMaxIntervalMs)
    this.#tlsOption = options.tls
    this.#tls = nativeTls(options.tls)
    this.#auth = authOption(options.auth)
    if (options.onLockLost !== undefined && options.onLockLost !== null && typeof options.onLockLost !== 'function') {
      throw invalid('onLockLost must be a function')
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
      throw invalid(`shardingStrategy returned invalid index ${describe(idx)} for ${n} server(s)`)
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
      throw fromNative(r.error, this.#key)
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
    if (typeof t !== 'number') throw invalid(`timeoutS must be a number of seconds, got ${describe(t)}`)
    const r = await this.#run(prim, () => prim.wait(t), signal)
    // A timeout the native side refuses was never sent: the enqueue stays pending.
    if (!r.ok && r.error.code === 'INVALID_ARGUMENT' && this.#prim === prim) throw fromNative(r.error)
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
   * 4 per server, closed after 2 s unused, never keeping the process alive) for the next acquisition to that server
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
    if (typeof fn !== 'function') throw invalid('withLock needs a function')
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
    if (options === null || typeof options !== 'object') throw invalid('options must be an object with a key and a limit')
    const limit = options.limit
    if (typeof limit !== 'number') throw invalid(`limit must be an integer >= 1, got ${describe(limit)}`)
    super(options, kLimit, limit)
    this.#limit = limit
  }
  get limit() {
    return this.#limit
  }
}

// ───────────────────────────── low-level Connection ─────────────────────────────

function parseStatsJson(json) {
  let s
  try {
    s = JSON.parse(json)
  } catch {
    throw new LockError(`stats: malformed JSON response: '${json}'`, 'PROTOCOL_ERROR')
  }
  if (s === null || typeof s !== 'object') throw new LockError(`stats: malformed JSON response: '${json}'`, 'PROTOCOL_ERROR')
  for (const k of ['locks', 'semaphores', 'idle_locks', 'idle_semaphores']) if (!Array.isArray(s[k])) s[k] = []
  return s
}

function serverOptions(options) {
  const o = options ?? {}
  if (typeof o !== 'object') throw invalid('options must be an object')
  return { server: { host: hostOption(o.host ?? DEFAULT_HOST), port: o.port ?? DEFAULT_PORT }, ...connectOptions(o) }
}

/**
 * The error of a failed Connection call: AcquireTimeoutError for the server's `timeout`, AuthError for
 * `error_auth`, and for other `error*` replies the dflockd-client message `<label> failed: '<reply>'`.
 */
function callError(error, label, key) {
  if (error.code === 'TIMEOUT' && error.reply === 'timeout') return new AcquireTimeoutError(key)
  if (error.code === 'SERVER_ERROR' && error.reply != null) {
    return new LockError(`${label} failed: '${error.reply}'`, 'SERVER_ERROR', { reply: error.reply.split(' ')[0] })
  }
  return fromNative(error)
}

const kConnection = Symbol('Connection')

/**
 * The promises of one connection's queued requests, settled in order by the native reply callback.
 * While any is pending a timer keeps the process alive (~0.4 µs to arm and clear). When the first one
 * was written from the JS thread (`limitMs` > 0: the native task is not woken for it), the same timer is
 * its reply deadline: it calls `expire(seq)`, which fails that request with TIMEOUT if it is still awaited.
 */
class ReplyQueue {
  #resolvers = []
  #head = 0
  #seq = 0
  #keepAlive = null
  expire = noop

  push(limitMs) {
    const seq = this.#seq++
    return new Promise((resolve) => {
      if (this.#resolvers.length === this.#head) {
        this.#keepAlive = limitMs > 0 ? setInterval(() => this.expire(seq), limitMs) : setInterval(noop, 0x7fffffff)
      }
      this.#resolvers.push(resolve)
    })
  }

  settle(reply) {
    if (this.#head === this.#resolvers.length) return // nothing pending (cannot happen)
    const resolve = this.#resolvers[this.#head]
    this.#resolvers[this.#head++] = undefined
    if (this.#head === this.#resolvers.length) {
      this.#resolvers.length = 0
      this.#head = 0
      clearInterval(this.#keepAlive)
      this.#keepAlive = null
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#resolvers.length) {
      this.#resolvers = this.#resolvers.slice(this.#head)
      this.#head = 0
    }
    resolve(reply)
  }
}

function noop() {}

/**
 * One dflockd connection, one method per protocol command (validation and reply parsing are native).
 * The native side answers every queued request through one callback, in call order: the pending
 * promises wait in a FIFO. An idle connection never keeps Node alive; a pending request does (a ref'd
 * timer while the FIFO is not empty, as a promise per request did before).
 */
class Connection {
  #native
  #closed = false
  #pending

  constructor(token, nativeConnection, pending) {
    if (token !== kConnection) throw new TypeError('use Connection.connect(options)')
    this.#native = nativeConnection
    this.#pending = pending
  }

  static async connect(options) {
    const o = serverOptions(options)
    const pending = new ReplyQueue()
    const r = await nativeSync(() => native.NativeDflockdConnection.connect(o, (reply) => pending.settle(reply)))
    if (!r.ok) throw fromNative(r.error)
    const conn = r.value
    pending.expire = (seq) => conn.expire(seq)
    return new Connection(kConnection, conn, pending)
  }

  /** Runs one native call; resolves its result, rejects with the mapped LockError. */
  async #call(label, key, start) {
    if (this.#closed) throw new LockError('connection closed', 'CONNECTION_ERROR')
    let r = nativeSync(start)
    if (typeof r === 'number') r = await this.#pending.push(r)
    if (!r.ok) throw callError(r.error, label, key)
    return r
  }

  /** Sends a raw request (validated framing) and resolves the reply line. */
  async request(cmd, key, arg) {
    return (await this.#call('request', key, () => this.#native.request(cmd, key, arg))).text
  }

  async acquire(key, acquireTimeoutS, leaseTtlS) {
    return grant(await this.#call('acquire', key, () => this.#native.lock(key, acquireTimeoutS, opt(leaseTtlS))))
  }

  async release(key, token) {
    await this.#call('release', key, () => this.#native.release(key, token, false))
  }

  async renew(key, token, leaseTtlS) {
    return (await this.#call('renew', key, () => this.#native.renew(key, token, opt(leaseTtlS), false))).lease
  }

  async enqueue(key, leaseTtlS) {
    return enqueued(await this.#call('enqueue', key, () => this.#native.enqueue(key, opt(leaseTtlS))))
  }

  async waitForLock(key, waitTimeoutS) {
    return grant(await this.#call('wait', key, () => this.#native.wait(key, waitTimeoutS, false)))
  }

  async semAcquire(key, acquireTimeoutS, limit, leaseTtlS) {
    return grant(await this.#call('sem_acquire', key, () => this.#native.lock(key, acquireTimeoutS, opt(leaseTtlS), limit)))
  }

  async semRelease(key, token) {
    await this.#call('sem_release', key, () => this.#native.release(key, token, true))
  }

  async semRenew(key, token, leaseTtlS) {
    return (await this.#call('sem_renew', key, () => this.#native.renew(key, token, opt(leaseTtlS), true))).lease
  }

  async semEnqueue(key, limit, leaseTtlS) {
    return enqueued(await this.#call('sem_enqueue', key, () => this.#native.enqueue(key, opt(leaseTtlS), limit)))
  }

  async semWaitForLock(key, waitTimeoutS) {
    return grant(await this.#call('sem_wait', key, () => this.#native.wait(key, waitTimeoutS, true)))
  }

  async stats() {
    return parseStatsJson((await this.#call('stats', undefined, () => this.#native.stats())).text)
  }

  close() {
    if (this.#closed) return
    this.#closed = true
    this.#native.close()
  }

  async [asyncDispose]() {
    this.close()
  }
}

function grant(r) {
  return { token: r.token, lease: r.lease }
}

function enqueued(r) {
  return r.status === 'acquired' ? { status: 'acquired', token: r.token, lease: r.lease } : { status: 'queued', token: null, lease: null }
}

/** Server statistics over a short-lived connection (needs a server with the `stats` command). */
async function stats(options) {
  const o = serverOptions(options)
  const r = await nativeSync(() => native.dflockdStats(o))
  if (!r.ok) {
    if (r.error && r.error.code === 'SERVER_ERROR') {
      throw new LockError(`stats failed: '${r.error.reply ?? r.error.message}'`, 'SERVER_ERROR', {
        reply: r.error.reply ?? 'error',
      })
    }
    throw fromNative(r.error)
  }
  return parseStatsJson(r.value)
}

// ───────────────────────────── target API (dflockd:// URLs) ─────────────────────────────

/**
 * `url` with its auth token (the URL's user info) replaced by `***`, as every message, `lock.target` and
 * `status().target` show it: a token must never reach a log. The user info ends at the last `@` before the path.
 */
function redactTarget(url) {
  return String(url).replace(/^(dflockd:\/\/)[^/?#]*@/i, '$1***@')
}

/**
 * `dflockd://[token@]host[:port]/key[?limit=N&leaseTtl=S&tls=1]` → `{host, port, key, auth?, limit?, leaseTtl?, tls}`.
 * The key is URL-decoded (encode `/`-free specials such as `#` as `%23`); unknown query parameters are rejected.
 */
function parseDflockdUrl(url) {
  if (typeof url !== 'string') throw invalid('dflockd target must be a string')
  const shown = redactTarget(url)
  let u
  try {
    u = new URL(url)
  } catch {
    throw invalid(`invalid dflockd URL: ${shown}`)
  }
  if (u.protocol !== 'dflockd:') throw invalid(`not a dflockd:// URL: ${shown}`)
  if (!u.hostname) throw invalid(`dflockd URL has no host: ${shown}`)
  if (u.hash) throw invalid(`dflockd URL must not have a fragment (encode '#' in the key as %23): ${shown}`)
  const host = hostOption(u.hostname)
  const port = u.port === '' ? DEFAULT_PORT : Number(u.port)
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw invalid(`invalid port in dflockd URL: ${shown}`)
  let key
  let auth
  try {
    key = decodeURIComponent(u.pathname.replace(/^\//, ''))
    if (u.username) auth = decodeURIComponent(u.username) + (u.password ? ':' + decodeURIComponent(u.password) : '')
  } catch {
    throw invalid(`invalid percent-encoding in dflockd URL: ${shown}`)
  }
  if (key === '') throw invalid(`dflockd URL has no key: ${shown}`)
  nativeSync(() => native.dflockdValidateKey(key))
  const out = { host, port, key, tls: false }
  if (auth !== undefined && auth !== '') out.auth = auth
  for (const [name, value] of u.searchParams) {
    if (name === 'limit') out.limit = urlInt(shown, name, value)
    else if (name === 'leaseTtl') out.leaseTtl = urlInt(shown, name, value)
    else if (name === 'tls') {
      if (value === '1' || value === 'true' || value === '') out.tls = true
      else if (value === '0' || value === 'false') out.tls = false
      else throw invalid(`invalid tls=${value} in dflockd URL (use 1 or 0): ${shown}`)
    } else throw invalid(`unknown parameter '${name}' in dflockd URL (known: limit, leaseTtl, tls): ${shown}`)
  }
  return out
}

function urlInt(shown, name, value) {
  if (!/^\d+$/.test(value)) throw invalid(`invalid ${name}=${value} in dflockd URL: ${shown}`)
  const n = Number(value)
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_TIMEOUT_S) throw invalid(`invalid ${name}=${value} in dflockd URL: ${shown}`)
  return n
}

/** Locks this process holds through acquireTarget, by `host:port/key`. */
const held = new Map()

function targetId(cfg) {
  return `${cfg.host.toLowerCase()}|${cfg.port}|${cfg.key}`
}

class DflockdLock extends LockHandle {
  #prim
  #id
  #lease
  constructor(fields, prim, id) {
    super(fields)
    this.#prim = prim
    this.#id = id
    this.#lease = prim.lease
    let set = held.get(id)
    if (!set) held.set(id, (set = new Set()))
    set.add(this)
  }

  /** The lease in seconds last granted or renewed. */
  get lease() {
    if (!this.released) this.#lease = this.#prim.lease || this.#lease
    return this.#lease
  }

  _unregister() {
    const set = held.get(this.#id)
    if (set && set.delete(this) && set.size === 0) held.delete(this.#id)
  }

  _lost(message) {
    this._unregister()
    this.#prim.close()
    this._markLost(message)
  }

  /** true = released; false = the server no longer knew the lock (lost); throws LockError on I/O failure. */
  async _release() {
    this._unregister()
    const prim = this.#prim
    let r
    try {
      r = await prim.release()
    } finally {
      prim.close()
    }
    if (r.ok) return true
    const code = r.error.code
    if (code === 'NOT_LOCKED' || code === 'LOCK_LOST' || (code === 'SERVER_ERROR' && r.error.reply === 'error')) return false
    throw fromNative(r.error)
  }
}

/** Normalised settings for one acquisition on a target. Throws LockError INVALID_ARGUMENT. */
function targetConfig(url, options, wait) {
  const o = options ?? {}
  if (typeof o !== 'object') throw invalid('options must be an object')
  const u = parseDflockdUrl(url)
  // The server takes whole seconds; the native side sends the ceiling and stops waiting at the exact ms.
  let acquireTimeoutMs = DEFAULT_ACQUIRE_TIMEOUT_S * 1000
  if (!wait) acquireTimeoutMs = 0
  else if (o.timeout !== undefined && o.timeout !== null) {
    if (typeof o.timeout !== 'number' || Number.isNaN(o.timeout) || o.timeout < 0) {
      throw invalid(`timeout must be a number of milliseconds >= 0, got ${describe(o.timeout)}`)
    }
    acquireTimeoutMs = Math.min(MAX_TIMEOUT_S * 1000, o.timeout)
  }
  if (o.leaseTtl !== undefined && o.leaseTtl !== null) {
    if (!Number.isInteger(o.leaseTtl) || o.leaseTtl < 1 || o.leaseTtl > MAX_TIMEOUT_S) {
      throw invalid(`leaseTtl is in whole seconds (as ?leaseTtl= in the URL): it must be an integer between 1 and ${MAX_TIMEOUT_S}, got ${describe(o.leaseTtl)}`)
    }
  }
  const limit = opt(o.limit) ?? u.limit ?? 1
  const useTls = o.tls !== undefined && o.tls !== null ? o.tls : u.tls ? {} : undefined
  const prim = {
    key: u.key,
    limit,
    acquireTimeoutS: 0,
    acquireTimeoutMs,
    leaseTtlS: opt(o.leaseTtl) ?? u.leaseTtl,
    server: { host: u.host, port: u.port },
    renewRatio: o.renewRatio ?? DEFAULT_RENEW_RATIO,
    renewMaxIntervalMs: opt(o.renewMaxIntervalMs),
    ...connectOptions({ ...o, tls: useTls, auth: o.auth ?? u.auth }),
  }
  if (o.onLost !== undefined && o.onLost !== null && typeof o.onLost !== 'function') throw invalid('onLost must be a function')
  return { ...u, url, limit, prim }
}

/**
 * Acquires `url` (wait: false = one attempt). Every failure resolves `{ok:false, error}`: INVALID_ARGUMENT for a bad
 * URL or option (nothing sent), TIMEOUT, ALREADY_LOCKED (a failed try), ABORTED, CONNECTION_ERROR, AUTH_FAILED,
 * SERVER_ERROR (with `reply`), …
 */
async function acquireTarget(url, options, { wait = true } = {}) {
  let cfg
  let signal
  let prim
  try {
    cfg = targetConfig(url, options, wait)
    signal = checkSignal(options && options.signal)
    if (signal && signal.aborted) return fail('ABORTED', 'acquire aborted')
    prim = nativeSync(() => new native.NativeDflockdPrimitive(cfg.prim))
  } catch (e) {
    if (e instanceof LockError) return { ok: false, error: errorValue(e) }
    throw e
  }
  let handle = null
  let lostMessage = null
  prim.onLost((key, token, reason) => {
    lostMessage = `dflockd lock '${cfg.key}' on ${cfg.host}:${cfg.port} lost: ${reason || 'the lease could not be renewed'}`
    if (handle) handle._lost(lostMessage)
  })
  const r = await cancellable(prim, () => prim.acquire(), signal).promise
  if (!r.ok) {
    prim.close()
    if (r.error.code === 'ABORTED') return fail('ABORTED', 'acquire aborted')
    if (r.error.code === 'TIMEOUT') return timeoutResult(cfg, wait)
    return { ok: false, error: errorValue(fromNative(r.error, cfg.key)) }
  }
  if (!r.value) {
    prim.close()
    return timeoutResult(cfg, wait)
  }
  handle = new DflockdLock(
    {
      target: redactTarget(url),
      backend: 'dflockd',
      pid: process.pid,
      timestamp: Math.floor(Date.now() / 1000),
      token: prim.token ?? undefined,
      onLost: options && options.onLost,
    },
    prim,
    targetId(cfg),
  )
  if (lostMessage !== null) handle._lost(lostMessage)
  return { ok: true, value: handle }
}

function timeoutResult(cfg, wait) {
  return wait ? fail('TIMEOUT', `timeout acquiring '${cfg.key}'`) : fail('ALREADY_LOCKED', 'Lock already held')
}

/** Releases the lock(s) this process holds on `url` through acquireTarget. */
async function releaseTarget(url, _options) {
  let id
  try {
    id = targetId(parseDflockdUrl(url))
  } catch (e) {
    if (e instanceof LockError) return { ok: false, error: errorValue(e) }
    throw e
  }
  const set = held.get(id)
  if (!set || set.size === 0) return fail('NOT_LOCKED', 'Lock not held')
  let released = false
  let error
  for (const handle of [...set]) {
    try {
      if (await handle.release()) released = true
    } catch (e) {
      error = error ?? errorValue(e instanceof LockError ? e : new LockError(String(e && e.message), 'IO_ERROR'))
    }
  }
  if (released) return { ok: true, value: undefined }
  return { ok: false, error: error ?? { type: 'NOT_LOCKED', message: 'Lock not held' } }
}

/** What `url` looks like now, from the server's `stats` (Go server only). */
async function statusTarget(url, options) {
  const o = options ?? {}
  const u = parseDflockdUrl(url)
  const conn = connectOptions({
    ...o,
    tls: o.tls !== undefined && o.tls !== null ? o.tls : u.tls ? {} : undefined,
    auth: o.auth ?? u.auth,
  })
  const r = await nativeSync(() => native.dflockdStats({ server: { host: u.host, port: u.port }, ...conn }))
  if (!r.ok) {
    if (r.error.code === 'SERVER_ERROR') {
      throw new LockError(
        `dflockd server at ${u.host}:${u.port} has no stats command (it answered '${r.error.reply ?? 'error'}'; ` +
          'status needs the Go dflockd server)',
        'SERVER_ERROR',
        { reply: r.error.reply ?? 'error' },
      )
    }
    throw fromNative(r.error)
  }
  const s = parseStatsJson(r.value)
  const mine = [...(held.get(targetId(u)) ?? [])].filter((h) => !h.released)
  const out = {
    locked: false,
    info: null,
    isStale: false,
    isOwnedByCurrentProcess: mine.length > 0,
    target: redactTarget(url),
    backend: 'dflockd',
    holders: 0,
    waiters: 0,
    limit: u.limit ?? 1,
  }
  const lock = s.locks.find((e) => e && e.key === u.key)
  const sem = lock ? undefined : s.semaphores.find((e) => e && e.key === u.key)
  if (lock) {
    const holding = Number(lock.owner_conn_id) !== 0
    out.locked = holding
    out.holders = holding ? 1 : 0
    out.waiters = Number(lock.waiters) || 0
    out.limit = 1
    if (holding) out.leaseExpiresInS = Number(lock.lease_expires_in_s)
  } else if (sem) {
    out.holders = Number(sem.holders) || 0
    out.waiters = Number(sem.waiters) || 0
    out.limit = Number(sem.limit) || out.limit
    out.locked = out.holders > 0
  } else if (s.idle_locks.some((e) => e && e.key === u.key)) {
    out.limit = 1
  }
  if (out.locked && mine.length > 0) out.info = { pid: mine[0].pid, timestamp: mine[0].timestamp }
  return out
}

module.exports = {
  DistributedLock,
  DistributedSemaphore,
  Connection,
  stats,
  stableHashShard,
  parseDflockdUrl,
  acquireTarget,
  releaseTarget,
  statusTarget,
}
