'use strict'
// The low-level Connection (one request at a time per connection, the dflockd TypeScript client's functions) and
// stats(). Replies are parsed natively; this module maps them to the client's values and errors.

const { ErrorCode } = require('../codes')
const native = require('../native')
const { validate, one, SERVER } = require('../validate')
const { LockError, AcquireTimeoutError, AuthError, toLockError } = require('../errors')
const { asyncDispose } = require('../lock-handle')
const { DEFAULT_HOST, DEFAULT_PORT, connectOptions, hostOption, nativeSync, opt } = require('./common')

// ───────────────────────────── low-level Connection ─────────────────────────────

function parseStatsJson(json) {
  let s
  try {
    s = JSON.parse(json)
  } catch {
    throw new LockError(`stats: malformed JSON response: '${json}'`, ErrorCode.PROTOCOL_ERROR)
  }
  if (s === null || typeof s !== 'object') throw new LockError(`stats: malformed JSON response: '${json}'`, ErrorCode.PROTOCOL_ERROR)
  for (const k of ['locks', 'semaphores', 'idle_locks', 'idle_semaphores']) if (!Array.isArray(s[k])) s[k] = []
  return s
}

function serverOptions(options) {
  const o = validate(options ?? {}, SERVER)
  return { server: { host: hostOption(o.host ?? DEFAULT_HOST), port: o.port ?? DEFAULT_PORT }, ...connectOptions(o) }
}

/**
 * The error of a failed Connection call: AcquireTimeoutError for the server's `timeout`, AuthError for
 * `error_auth`, and for other `error*` replies the dflockd-client message `<label> failed: '<reply>'`.
 */
function callError(error, label, key) {
  if (error.code === ErrorCode.TIMEOUT && error.reply === 'timeout') return new AcquireTimeoutError(key)
  if (error.code === ErrorCode.SERVER_ERROR && error.reply != null) {
    return new LockError(`${label} failed: '${error.reply}'`, ErrorCode.SERVER_ERROR, { reply: error.reply.split(' ')[0] })
  }
  return toLockError(error)
}

const kConnection = Symbol('Connection')

/** A lease argument by validate.js's one leaseTtl rule (whole seconds, at most an hour, the unit named); null = the server's default. */
function ttl(leaseTtlS) {
  return opt(one('leaseTtl', leaseTtlS, 'leaseTtlS'))
}

/**
 * One dflockd connection, one method per protocol command (validation and reply parsing are native).
 * Each native call returns its request's own promise, settled natively in call order (src/dflockd/replies.rs): no
 * queue here. A call awaiting it keeps this object, and so the native connection, from being collected. An idle
 * connection never keeps Node alive; a pending request does, unless unref().
 */
class Connection {
  #native
  #closed = false

  constructor(token, nativeConnection) {
    if (token !== kConnection) throw new TypeError('use Connection.connect(options)')
    this.#native = nativeConnection
  }

  static async connect(options) {
    const o = serverOptions(options)
    const r = await nativeSync(() => native.NativeDflockdConnection.connect(o))
    if (!r.ok) throw toLockError(r.error)
    return new Connection(kConnection, r.value)
  }

  /** Runs one native call; resolves its value (a NativeReply), rejects with the mapped LockError. */
  async #call(label, key, start) {
    if (this.#closed) throw new LockError('connection closed', ErrorCode.CONNECTION_ERROR)
    const r = await nativeSync(start)
    if (!r.ok) throw callError(r.error, label, key)
    return r.value
  }

  /** Sends a raw request (validated framing) and resolves the reply line. */
  async request(cmd, key, arg) {
    return (await this.#call('request', key, () => this.#native.request(cmd, key, arg))).text
  }

  async acquire(key, acquireTimeoutS, leaseTtlS) {
    return grant(await this.#call('acquire', key, () => this.#native.lock(key, acquireTimeoutS, ttl(leaseTtlS))))
  }

  async release(key, token) {
    await this.#call('release', key, () => this.#native.release(key, token, false))
  }

  async renew(key, token, leaseTtlS) {
    return (await this.#call('renew', key, () => this.#native.renew(key, token, ttl(leaseTtlS), false))).lease
  }

  async enqueue(key, leaseTtlS) {
    return enqueued(await this.#call('enqueue', key, () => this.#native.enqueue(key, ttl(leaseTtlS))))
  }

  async waitForLock(key, waitTimeoutS) {
    return grant(await this.#call('wait', key, () => this.#native.wait(key, waitTimeoutS, false)))
  }

  async semAcquire(key, acquireTimeoutS, limit, leaseTtlS) {
    return grant(await this.#call('sem_acquire', key, () => this.#native.lock(key, acquireTimeoutS, ttl(leaseTtlS), limit)))
  }

  async semRelease(key, token) {
    await this.#call('sem_release', key, () => this.#native.release(key, token, true))
  }

  async semRenew(key, token, leaseTtlS) {
    return (await this.#call('sem_renew', key, () => this.#native.renew(key, token, ttl(leaseTtlS), true))).lease
  }

  async semEnqueue(key, limit, leaseTtlS) {
    return enqueued(await this.#call('sem_enqueue', key, () => this.#native.enqueue(key, ttl(leaseTtlS), limit)))
  }

  async semWaitForLock(key, waitTimeoutS) {
    return grant(await this.#call('sem_wait', key, () => this.#native.wait(key, waitTimeoutS, true)))
  }

  async stats() {
    return parseStatsJson((await this.#call('stats', undefined, () => this.#native.stats())).text)
  }

  /** A pending request no longer keeps the process alive (as a Node socket's `unref()`); returns `this`. */
  unref() {
    if (!this.#closed) this.#native.setRef(false)
    return this
  }

  /** A pending request keeps the process alive again (the default); returns `this`. */
  ref() {
    if (!this.#closed) this.#native.setRef(true)
    return this
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
    if (r.error && r.error.code === ErrorCode.SERVER_ERROR) {
      throw new LockError(`stats failed: '${r.error.reply ?? r.error.message}'`, ErrorCode.SERVER_ERROR, {
        reply: r.error.reply ?? 'error',
      })
    }
    throw toLockError(r.error)
  }
  return parseStatsJson(r.value)
}

module.exports = { Connection, stats, parseStatsJson }
