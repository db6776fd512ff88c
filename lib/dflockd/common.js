'use strict'
// dflockd client, JavaScript side: what the other modules of lib/dflockd/ share. Constants (the option table's
// defaults), the conversions to native options (the tls option's fields, hosts), the event-loop driver's calls, guarded
// user callbacks, and the sharding function. A pending native call is cancelled as a file wait is (lib/abort.js
// withAbort: a cancel id the call takes; the native side settles it ABORTED and closes a grant that crossed the cancel).

const native = require('../native')
const { onLockEnded } = require('../losses')
const { LockError, fromNativeThrow, invalidArgument } = require('../errors')

const { ErrorCode } = require('../codes')
const { DISTRIBUTED_LOCK, defaultsOf, kind } = require('../validate')
// dflockd-client's defaults, from the option table (crates/sema-core/src/options.rs).
const { host: DEFAULT_HOST, port: DEFAULT_PORT, acquireTimeoutS: DEFAULT_ACQUIRE_TIMEOUT_S, renewRatio: DEFAULT_RENEW_RATIO } = defaultsOf(DISTRIBUTED_LOCK)
/** Longest wait we send (the table's; the Go server's time.Duration overflows near 9.2e9 s and then answers at once). */
const MAX_TIMEOUT_S = kind('timeoutSeconds').max

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
    throw invalidArgument(`tls.${name} must be a PEM string or Buffer, or an array of them`)
  })
  return pems.length > 0 ? pems.map((p) => (p.endsWith('\n') ? p : p + '\n')).join('') : undefined
}

let extraCa = null
/**
 * `NODE_EXTRA_CA_CERTS` as Node's own `tls` reads it: a PEM file whose certificates are added to the default roots
 * (never replacing them, and not used when `ca` is given); read once, and when it cannot be read, a warning and
 * nothing added (Node's "Ignoring extra certs from …"). Read at first use rather than at startup.
 */
function extraCaPem() {
  const file = process.env.NODE_EXTRA_CA_CERTS
  if (!file) return undefined
  if (extraCa === null || extraCa.file !== file) {
    let pem
    try {
      pem = require('node:fs').readFileSync(file, 'utf8')
    } catch (e) {
      process.emitWarning(`Ignoring extra certs from \`${file}\`, load failed: ${e && e.code ? e.code : e}`, 'SemaNativeWarning')
    }
    extraCa = { file, pem }
  }
  return extraCa.pem
}

/**
 * `tls` option → NativeTls: `true`/`{}` = system roots (plus `NODE_EXTRA_CA_CERTS`, as Node's `tls`); `ca` PEM(s) joined; `servername`; `rejectUnauthorized`;
 * `cert` + `key` for a server that asks for a client certificate.
 */
function nativeTls(tls) {
  if (tls === undefined || tls === null || tls === false) return undefined
  if (tls === true) return withExtraCa({})
  if (typeof tls !== 'object') throw invalidArgument('tls must be true or an object (tls.ConnectionOptions fields)')
  for (const k of Object.keys(tls)) {
    if (!TLS_FIELDS.includes(k) && tls[k] !== undefined) throw invalidArgument(`unsupported tls option '${k}' (supported: ${TLS_FIELDS.join(', ')})`)
  }
  const out = {}
  const given = (k) => tls[k] !== undefined && tls[k] !== null
  if (given('ca')) out.ca = pemText('ca', tls.ca)
  if (given('servername')) {
    if (typeof tls.servername !== 'string' || tls.servername === '') throw invalidArgument('tls.servername must be a non-empty string')
    out.servername = tls.servername
  }
  if (given('rejectUnauthorized')) {
    if (typeof tls.rejectUnauthorized !== 'boolean') throw invalidArgument(`tls.rejectUnauthorized must be a boolean, got ${typeof tls.rejectUnauthorized}`)
    out.rejectUnauthorized = tls.rejectUnauthorized
  }
  if (given('cert') !== given('key')) throw invalidArgument('tls.cert and tls.key go together: give both or neither')
  if (given('cert')) {
    out.cert = pemText('cert', tls.cert)
    // A key's value is a secret: only its type appears in the error.
    if (typeof tls.key !== 'string' && !Buffer.isBuffer(tls.key) && !(tls.key instanceof Uint8Array)) {
      throw invalidArgument(`tls.key must be a PEM string or Buffer, got ${Array.isArray(tls.key) ? 'an array' : typeof tls.key}`)
    }
    out.key = pemText('key', tls.key)
  }
  return out.ca === undefined ? withExtraCa(out) : out
}

function withExtraCa(out) {
  const extra = extraCaPem()
  if (extra !== undefined) out.extraCa = extra
  return out
}

function describe(v) {
  if (typeof v === 'string') return JSON.stringify(v)
  if (typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined) return String(v)
  return typeof v
}

function abortedError(what) {
  return new LockError(`${what} aborted`, ErrorCode.ABORTED)
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

// ───────────────────────────── losses ─────────────────────────────

/** Why a lock was lost when the native side gave no reason: the one wording for every dflockd loss message. */
const LEASE_NOT_RENEWED = 'the lease could not be renewed'

/** What to tell of a loss, by the primitive's `lossId` (DistributedLock, acquire('dflockd://…')): `fn(token, reason)`.
 * Set while a lock may be lost (an acquisition live, a Lock held), so nothing unreleased is kept alive by it. */
const lossWatchers = new Map()

// A dflockd lock's loss comes on this thread's one loss channel (lib/losses.js); its end is read from the native
// registry, never from the primitive: one already finalized (Deno's test runner at teardown) answers null, and is
// then not touched (src/losses.rs).
onLockEnded((id) => {
  const fn = lossWatchers.get(id)
  if (fn === undefined) return
  const end = native.takeHeldEnd(id)
  if (end !== null) fn(end.token, end.lostReason || LEASE_NOT_RENEWED)
})

/** Tells `fn(token, reason)` (a reason always given) of each loss of the primitive with loss id `id`, until unwatchLoss(id). */
function watchLoss(id, fn) {
  lossWatchers.set(id, fn)
}

function unwatchLoss(id) {
  lossWatchers.delete(id)
}

// ───────────────────────────── sharding ─────────────────────────────

/** CRC-32/IEEE of the key's UTF-8 bytes modulo `numServers` (same as the Go, Python and TS clients). */
function stableHashShard(key, numServers) {
  return nativeSync(() => native.stableHashShard(key, numServers))
}


// ───────────────────────────── the event-loop driver of a primitive ─────────────────────────────

/** Results of the primitives' event-loop calls (acquireOnLoop/releaseOnLoop), by loop id: one call at a time per
 * primitive, its resolver set before the call and removed when it settles. One function for every primitive: the
 * native side holds it strongly, so it must not reach an instance (which would then never be collected). */
const settleHandlers = new Map()
let nextLoopId = 0
function onLoopSettle(id, ok, valueOrError) {
  const resolve = settleHandlers.get(id)
  if (resolve === undefined) return
  settleHandlers.delete(id)
  resolve(ok ? { ok, value: valueOrError } : { ok, error: valueOrError })
}

/**
 * DistributedLock, DistributedSemaphore and acquire('dflockd://…') make their round trips on the event loop by default
 * (where it serves and the target is plain TCP: TLS, a shared mode, Bun, Deno and SEMA_NATIVE_LIBUV=off stay on tokio
 * threads). Measured (bench, 1 worker, quiet machine): 10 290 lock+release pairs/s against 4 797 on tokio threads. A lease held there
 * is renewed on the loop's timer while JavaScript runs on time, and by the native renew watchdog (one thread, same
 * socket) while it is blocked (an `execSync` of a long build inside withLock), so a blocked holder keeps its lock as
 * on tokio (dflockd-lock-loop.test.js shows both). `SEMA_NATIVE_DFLOCKD_DRIVER=tokio` forces the tokio threads;
 * `event-loop` (or unset, or empty) is the default. Any other value is ignored (the default), with one process warning
 * naming it: the variable is read where a primitive is made, so refusing there would fail every lock of a deployed
 * process over a typo in a tuning switch, while a silent fallback would hide the typo.
 */
function loopDriverChosen() {
  const v = process.env.SEMA_NATIVE_DFLOCKD_DRIVER
  if (v === 'tokio') return false
  if (v !== undefined && v !== '' && v !== 'event-loop' && v !== warnedDriver) {
    warnedDriver = v
    process.emitWarning(
      `SEMA_NATIVE_DFLOCKD_DRIVER=${JSON.stringify(v)} is not 'tokio' or 'event-loop': ignored, the event-loop driver is used`,
      'SemaNativeWarning',
    )
  }
  return true
}
let warnedDriver

/** Puts `prim`'s round trips on this thread's event loop where it serves and was not turned off: its loop id, or 0
 * (tokio: SEMA_NATIVE_DFLOCKD_DRIVER=tokio, TLS, a shared mode, Bun, Deno, SEMA_NATIVE_LIBUV=off). */
function useEventLoop(prim) {
  if (!loopDriverChosen()) return 0
  const id = (nextLoopId = (nextLoopId % 0xffffffff) + 1)
  return prim.useEventLoop(id, onLoopSettle) ? id : 0
}

/** Runs `onLoop()` (true = started on the event loop, its result to onLoopSettle) or else `fallback()` (a promise). */
function loopCall(id, onLoop, fallback) {
  if (id === 0) return fallback()
  let resolve
  const p = new Promise((r) => (resolve = r))
  settleHandlers.set(id, resolve)
  if (onLoop()) return p
  settleHandlers.delete(id)
  return fallback()
}

/** The native acquire of `prim` (loop id `id`, 0 = tokio): on the event loop when it can; an `e` answered `queued`
 * goes on on tokio (continueAcquire). `cancelId` (lib/abort.js withAbort, or null) cancels it. Resolves a NativeResult<boolean>. */
function loopAcquire(prim, id, cancelId) {
  const cid = cancelId ?? undefined
  if (id === 0) return prim.acquire(cid)
  return loopCall(id, () => prim.acquireOnLoop(cid), () => prim.acquire(cid)).then((r) => (r.ok && r.value === 'queued' ? prim.continueAcquire(cid) : r))
}

/** The native release of `prim` (see loopAcquire). Resolves `{ok, error?}`. */
function loopRelease(prim, id) {
  return loopCall(id, () => prim.releaseOnLoop(), () => prim.release())
}

module.exports = {
  DEFAULT_ACQUIRE_TIMEOUT_S,
  DEFAULT_HOST,
  DEFAULT_PORT,
  DEFAULT_RENEW_RATIO,
  MAX_TIMEOUT_S,
  TLS_FIELDS,
  abortedError,
  authOption,
  loopAcquire,
  loopRelease,
  useEventLoop,
  connectOptions,
  describe,
  guardedCallback,
  hostOption,
  nativeSync,
  nativeTls,
  opt,
  pemText,
  stableHashShard,
  unwatchLoss,
  warnCallback,
  watchLoss,
}
