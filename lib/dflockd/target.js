'use strict'
// The target API for `dflockd://[token@]host[:port][,host2[:port]…]/key[?limit=N&leaseTtl=S&tls=1]` URLs (acquire, release,
// status through lib/target.js), with milliseconds as the file targets have them. The auth token in a URL is never
// shown: messages and `target` fields carry it masked.

const { ErrorCode } = require('../codes')
const native = require('../native')
const { LockError, toLockError, semaphoreError, failure } = require('../errors')
const { LockHandle } = require('../lock-handle')
const { withAbort } = require('../abort')
const { DEFAULT_ACQUIRE_TIMEOUT_S, DEFAULT_RENEW_RATIO, MAX_TIMEOUT_S, connectOptions, loopAcquire, loopRelease, nativeSync, opt, unwatchLoss, useEventLoop, watchLoss } = require('./common')
const { redactTarget, parseDflockdUrl, targetId } = require('./url')
const { validate, checkBackend, ACQUIRE } = require('../validate')
const { parseStatsJson, stats } = require('./connection')
const { meetsSharedLock, MAX_READERS } = require('./kinds')

// ───────────────────────────── target API (dflockd:// URLs) ─────────────────────────────

/** Locks this process holds through acquireTarget, by `host:port/key`. */
const held = new Map()

class DflockdLock extends LockHandle {
  #prim
  #id
  #lease
  #loopId
  #renewRatio
  constructor(fields, prim, id, loopId, renewRatio) {
    super(fields)
    this.#prim = prim
    this.#renewRatio = renewRatio
    this.#id = id
    this.#loopId = loopId
    this.#lease = prim.lease
    let set = held.get(id)
    if (!set) held.set(id, (set = new Set()))
    set.add(this)
  }

  /** The share of the lease after which it is renewed (the renew schedule a steal's safety margin is read from). */
  get renewRatio() {
    return this.#renewRatio
  }

  /** The lease in seconds last granted or renewed. */
  get lease() {
    if (!this.released) this.#lease = this.#prim.lease || this.#lease
    return this.#lease
  }

  /** End of the proven validity of the lease (ms since the epoch; 0 once released or lost): the client's own lease
   * clock, counted from when the last acquire or renew was sent, minus a guard. */
  get validUntil() {
    return this.released ? 0 : this.#prim.validUntil
  }

  /** Milliseconds the lease is still proven valid (monotonic; 0 once released, lost, or past its validity). */
  remaining() {
    return this.released ? 0 : this.#prim.remainingMs
  }

  _unregister() {
    unwatchLoss(this.#prim.lossId)
    const set = held.get(this.#id)
    if (set && set.delete(this) && set.size === 0) held.delete(this.#id)
  }

  /** The native side reported the loss (it ends the connection itself, once the server could have freed the key). */
  _lost(message) {
    this._unregister()
    this._markLost(message)
  }

  /** true = released; false = the server no longer knew the lock (lost); throws LockError on I/O failure. */
  async _release() {
    this._unregister()
    const prim = this.#prim
    if (prim.remainingMs === 0) {
      // Its validity ended before this release (the native loss report may not have run yet): a loss, reported as one.
      prim.close()
      this._markLost(`dflockd lock '${this.target}' lost: no renewal was confirmed within the lease`)
      return false
    }
    let r
    try {
      r = await loopRelease(prim, this.#loopId)
    } finally {
      prim.close()
    }
    if (r.ok) return true
    const code = r.error.code
    if (code === ErrorCode.LOCK_LOST) {
      // Lost before the release got through (e.g. a renewal unconfirmed within the lease): reported as a loss.
      this._markLost(`dflockd lock '${this.target}' lost: ${r.error.message}`)
      return false
    }
    if (code === ErrorCode.NOT_LOCKED || code === ErrorCode.LOCK_LOST || (code === ErrorCode.SERVER_ERROR && r.error.reply === 'error')) return false
    throw toLockError(r.error)
  }
}

/** The `tls` option for a parsed URL: the option when given (a `?ca=` fills in its missing `ca`), else the URL's
 * `?tls=1` (system roots, plus NODE_EXTRA_CA_CERTS) or `?ca=` (that PEM only, as Node's `ca`). */
function tlsFor(u, tls) {
  const fromUrl = u.ca !== undefined ? { ca: u.ca } : u.tls ? {} : undefined
  if (tls === undefined || tls === null) return fromUrl
  if (u.ca !== undefined && tls === true) return fromUrl
  if (u.ca !== undefined && typeof tls === 'object' && (tls.ca === undefined || tls.ca === null)) return { ...tls, ca: u.ca }
  return tls
}

/** Normalised settings for one acquisition on a target. Throws LockError INVALID_ARGUMENT. */
function targetConfig(url, options, wait) {
  // The one check of every option (lib/validate.js); a no-op re-read of the snapshot when lib/target.js made it.
  const o = validate(options, ACQUIRE)
  checkBackend(o, 'dflockd')
  const u = parseDflockdUrl(url)
  // The server takes whole seconds; the native side sends the ceiling and stops waiting at the exact ms.
  let acquireTimeoutMs = DEFAULT_ACQUIRE_TIMEOUT_S * 1000
  if (!wait) acquireTimeoutMs = 0
  else if (o.timeout !== undefined && o.timeout !== null) acquireTimeoutMs = Math.min(MAX_TIMEOUT_S * 1000, o.timeout)
  const limit = opt(o.limit) ?? u.limit ?? 1
  const useTls = tlsFor(u, o.tls)
  const prim = {
    key: u.key,
    limit,
    acquireTimeoutS: 0,
    acquireTimeoutMs,
    leaseTtlS: opt(o.leaseTtl) ?? u.leaseTtl,
    server: { host: u.host, port: u.port },
    renewRatio: o.renewRatio ?? DEFAULT_RENEW_RATIO,
    renewMaxIntervalMs: opt(o.renewMaxIntervalMs),
    mode: opt(o.mode) ?? u.mode,
    ...connectOptions({ ...o, tls: useTls, auth: o.auth ?? u.auth }),
  }
  return { ...u, url, limit, prim, options: o, conn: { tls: prim.tls, auth: prim.auth, connectTimeoutMs: prim.connectTimeoutMs, socketTimeoutMs: prim.socketTimeoutMs } }
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
  const started = performance.now()
  try {
    cfg = targetConfig(url, options, wait)
    signal = cfg.options.signal ?? undefined // checked by the table's signal kind, read once (the snapshot)
    if (signal && signal.aborted) return failure(ErrorCode.ABORTED, 'acquire aborted')
    prim = nativeSync(() => new native.NativeDflockdPrimitive(cfg.prim))
  } catch (e) {
    if (e instanceof LockError) return { ok: false, error: semaphoreError(e) }
    throw e
  }
  let handle = null
  let lostMessage = null
  const onLoss = (token, reason) => {
    lostMessage = `dflockd lock '${cfg.key}' on ${cfg.host}:${cfg.port} lost: ${reason}`
    if (handle) handle._lost(lostMessage)
  }
  watchLoss(prim.lossId, onLoss)
  // On this thread's event loop where it serves (see lock.js), else on tokio.
  let loopId = useEventLoop(prim)
  let r = await withAbort(signal, (cancelId) => loopAcquire(prim, loopId, cancelId))
  if (!r.ok && meetsSharedLock(r.error, cfg.prim)) {
    // The key is a shared lock's (./kinds.js): this plain acquisition waits for its readers as a writer, within
    // what is left of its time (the refusal comes at once).
    unwatchLoss(prim.lossId)
    prim.close()
    const acquireTimeoutMs = Math.max(0, cfg.prim.acquireTimeoutMs - Math.ceil(performance.now() - started))
    prim = nativeSync(() => new native.NativeDflockdPrimitive({ ...cfg.prim, mode: 'exclusive', acquireTimeoutMs }))
    watchLoss(prim.lossId, onLoss)
    loopId = useEventLoop(prim)
    r = await withAbort(signal, (cancelId) => loopAcquire(prim, loopId, cancelId))
  }
  if (!r.ok) {
    unwatchLoss(prim.lossId)
    prim.close()
    if (r.error.code === ErrorCode.ABORTED) return failure(ErrorCode.ABORTED, 'acquire aborted')
    // A try (timeout 0) that got no answer is a TIMEOUT, never ALREADY_LOCKED: nobody said the key was held.
    if (r.error.code === ErrorCode.TIMEOUT && wait) return await timeoutResult(cfg, wait)
    return { ok: false, error: semaphoreError(toLockError(r.error, cfg.key)) }
  }
  if (!r.value) {
    unwatchLoss(prim.lossId)
    prim.close()
    return await timeoutResult(cfg, wait)
  }
  handle = new DflockdLock(
    {
      target: redactTarget(url),
      backend: 'dflockd',
      pid: process.pid,
      timestamp: Math.floor(Date.now() / 1000),
      token: prim.token ?? undefined,
      onLost: cfg.options.onLost,
    },
    prim,
    targetId(cfg),
    loopId,
    cfg.prim.renewRatio,
  )
  if (lostMessage !== null) handle._lost(lostMessage)
  return { ok: true, value: handle }
}

/**
 * TIMEOUT (a wait) or ALREADY_LOCKED (a try), with what is known of the holder: whether it is this process (its own
 * `Lock` on the same server and key: a forgotten release or a nested acquire), and then its pid, `lockedSince` and
 * tag; after a try, from one `stats` request bounded by 1 s (Go server only), the lease time the holder has left
 * (`leaseExpiresInS`) and the queue (`waiters`). The protocol does not tell another holder's pid or tag. A TIMEOUT
 * sends nothing more: its deadline is kept to the millisecond.
 */
async function timeoutResult(cfg, wait) {
  const facts = {}
  const mine = [...(held.get(targetId(cfg)) ?? [])].find((h) => !h.released)
  facts.isOwnedByCurrentProcess = mine !== undefined
  if (mine) {
    facts.holderPid = mine.pid
    facts.lockedSince = mine.timestamp
    if (mine.tag !== undefined) facts.holderTag = mine.tag
  }
  const own = mine ? ` (held by this process, pid ${mine.pid}, since ${new Date(mine.timestamp * 1000).toISOString()})` : ''
  if (wait) return failure(ErrorCode.TIMEOUT, `timeout acquiring '${cfg.key}'${own}`, facts)
  try {
    const r = await native.dflockdStats({
      server: { host: cfg.host, port: cfg.port },
      ...cfg.conn,
      connectTimeoutMs: Math.min(cfg.conn.connectTimeoutMs ?? 1000, 1000),
      socketTimeoutMs: Math.min(cfg.conn.socketTimeoutMs ?? 1000, 1000),
    })
    if (r.ok) {
      const s = parseStatsJson(r.value)
      const lock = s.locks.find((e) => e && e.key === cfg.key)
      if (lock && Number(lock.owner_conn_id) !== 0) facts.leaseExpiresInS = Number(lock.lease_expires_in_s)
      const entry = lock ?? s.semaphores.find((e) => e && e.key === cfg.key)
      if (entry) facts.waiters = Number(entry.waiters) || 0
    }
  } catch {
    // The facts are a courtesy: a server without `stats` (Python) or a slow one leaves them out.
  }
  return failure(ErrorCode.ALREADY_LOCKED, 'Lock already held', facts)
}

/** Releases the lock(s) this process holds on `url` through acquireTarget. */
async function releaseTarget(url, _options) {
  let id
  try {
    id = targetId(parseDflockdUrl(url))
  } catch (e) {
    if (e instanceof LockError) return { ok: false, error: semaphoreError(e) }
    throw e
  }
  const set = held.get(id)
  if (!set || set.size === 0) return failure(ErrorCode.NOT_LOCKED, 'Lock not held')
  let released = false
  let error
  for (const handle of [...set]) {
    try {
      if (await handle.release()) released = true
    } catch (e) {
      error = error ?? semaphoreError(e instanceof LockError ? e : new LockError(String(e && e.message), ErrorCode.IO_ERROR))
    }
  }
  if (released) return { ok: true, value: undefined }
  return { ok: false, error: error ?? { type: ErrorCode.NOT_LOCKED, message: 'Lock not held' } }
}

/** What `url` looks like now, from the server's `stats` (Go server only). */
async function statusTarget(url, options) {
  const o = options ?? {}
  const u = parseDflockdUrl(url)
  const conn = connectOptions({
    ...o,
    tls: tlsFor(u, o.tls),
    auth: o.auth ?? u.auth,
  })
  const r = await nativeSync(() => native.dflockdStats({ server: { host: u.host, port: u.port }, ...conn }))
  if (!r.ok) {
    if (r.error.code === ErrorCode.SERVER_ERROR) {
      throw new LockError(
        `dflockd server at ${u.host}:${u.port} has no stats command (it answered '${r.error.reply ?? 'error'}'; ` +
          'status needs the Go dflockd server)',
        ErrorCode.SERVER_ERROR,
        { reply: r.error.reply ?? 'error' },
      )
    }
    throw toLockError(r.error)
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
  // A shared lock's readers hold slots of the key itself (limit 16: ./kinds.js); a writer holds all of them and its
  // gate `<key>/gate`: one holder.
  const gate = s.locks.find((e) => e && e.key === `${u.key}/gate` && Number(e.owner_conn_id) !== 0)
  if (sem && out.limit === MAX_READERS && out.holders > 0) {
    const writer = gate !== undefined && out.holders === MAX_READERS
    out.mode = writer ? 'exclusive' : 'shared'
    if (writer) out.holders = 1
  }
  if (out.locked && mine.length > 0) out.info = { pid: mine[0].pid, timestamp: mine[0].timestamp }
  return out
}

/** The Lock handles this process holds through acquireTarget (for query()). */
function heldHandles() {
  return [...held.values()].flatMap((set) => [...set]).filter((h) => !h.released)
}

module.exports = { acquireTarget, releaseTarget, statusTarget, heldHandles }
