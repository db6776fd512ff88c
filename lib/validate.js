'use strict'
// The one validation path for options of every entry point (acquire, tryAcquire, release, status, withLock, the
// Semaphore class and its config, file and dflockd targets alike, the CLI). A wrong type or value is refused with
// a LockError INVALID_ARGUMENT naming the option and the value; nothing is coerced. Callers that return a
// SemaphoreResult turn the error into a failed result (`asFailure`); the others throw or reject with it.
// `null` and `undefined` mean "the default" for every option that has one.
//
// Options are read ONCE, here, at the boundary: `validate` returns a snapshot (a plain object of the schema's keys)
// and everything after it reads only the snapshot. A getter is called exactly once, so one that answers differently
// on a second read cannot slip a value past the check, and one that throws is an INVALID_ARGUMENT naming the option.

const { ErrorCode } = require('./codes')
const { LockError, invalidArgument } = require('./errors')

/** A value as shown in a message: strings quoted, objects by their kind. */
function describe(v) {
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}…` : v)
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint' || v == null) return String(v)
  if (typeof v === 'function') return 'a function'
  if (Array.isArray(v)) return 'an array'
  return `an object (${Object.prototype.toString.call(v).slice(8, -1)})`
}

function refuse(name, expected, value) {
  return invalidArgument(`${name} must be ${expected}, got ${describe(value)}`)
}

const isNumber = (v) => typeof v === 'number' && !Number.isNaN(v)

/** The longest dflockd lease accepted, in seconds (see check.leaseTtl). */
const MAX_LEASE_TTL_S = 3600

/** `30000` → `over 8 hours`, for a message. */
function humanSeconds(s) {
  if (s >= 86400) return `over ${Math.floor(s / 86400)} day${s >= 172800 ? 's' : ''}`
  return `over ${Math.floor(s / 3600)} hour${s >= 7200 ? 's' : ''}`
}

// Each checker returns nothing and throws on a bad value; `undefined`/`null` never reach it.
const check = {
  /** ms ≥ 0; Infinity = forever. */
  timeout: (name, v) => {
    if (!isNumber(v) || v < 0) throw refuse(name, 'a number of milliseconds >= 0 (or null to wait forever)', v)
  },
  staleTimeout: (name, v) => {
    if (!isNumber(v) || v < 0) throw refuse(name, 'a number of milliseconds >= 0 (or null: never stale)', v)
  },
  retryInterval: (name, v) => {
    if (!isNumber(v) || !Number.isFinite(v) || v <= 0) throw refuse(name, 'a positive number of milliseconds', v)
  },
  fsync: (name, v) => {
    if (typeof v !== 'boolean') throw refuse(name, 'true or false', v)
  },
  /** false or 0 turns it off. */
  heartbeat: (name, v) => {
    if (v === false || v === 0) return
    if (!isNumber(v) || !Number.isFinite(v) || v < 0) {
      throw refuse(name, 'a positive number of milliseconds (or null, false or 0: off)', v)
    }
  },
  maxTagLength: (name, v) => {
    if (!Number.isSafeInteger(v) || v < 0) throw refuse(name, 'an integer >= 0', v)
  },
  tag: (name, v) => {
    if (typeof v !== 'string') throw refuse(name, 'a string', v)
  },
  /** A process id as the OS has them (Linux pids are at most 2^22; pid_t is a signed 32-bit integer). */
  pid: (name, v) => {
    if (!Number.isInteger(v) || v < 1 || v > 0x7fffffff) throw refuse(name, 'a process id (an integer from 1 to 2147483647)', v)
  },
  /**
   * An AbortSignal, or a stand-in with everything the wait uses: `aborted`, `addEventListener` and
   * `removeEventListener` (a stand-in without the last one would be found out only after the lock was taken).
   */
  signal: (name, v) => {
    if (typeof AbortSignal === 'function' && v instanceof AbortSignal) return
    let ok = false
    try {
      ok =
        typeof v === 'object' &&
        typeof v.aborted === 'boolean' &&
        typeof v.addEventListener === 'function' &&
        typeof v.removeEventListener === 'function'
    } catch (e) {
      throw invalidArgument(`${name} could not be read (${errorText(e)}): it must be an AbortSignal`)
    }
    if (!ok) throw refuse(name, 'an AbortSignal', v)
  },
  onLost: (name, v) => {
    if (typeof v !== 'function') throw refuse(name, 'a function', v)
  },
  force: (name, v) => {
    if (typeof v !== 'boolean') throw refuse(name, 'true or false', v)
  },
  /**
   * dflockd's lease: whole seconds, the protocol's unit, among millisecond options: the message says so. A lease is
   * renewed while the lock is held, so its length only bounds how long a crashed holder keeps the key: above an hour
   * the value is taken for milliseconds typed by habit (30000 would be over 8 hours), and refused.
   */
  leaseTtl: (name, v) => {
    if (!Number.isSafeInteger(v) || v < 1) throw refuse(name, "a whole number of seconds >= 1 (the protocol's unit, as ?leaseTtl= in a URL)", v)
    if (v > MAX_LEASE_TTL_S) {
      throw invalidArgument(
        `${name} is in seconds: ${v} s is ${humanSeconds(v)}; the most is ${MAX_LEASE_TTL_S} (1 hour). ` +
          `For ${v} ms, write ${name}${name.startsWith('?') ? '=' : ': '}${Math.max(1, Math.ceil(v / 1000))}`,
      )
    }
  },
  /** A lock's mode (Web Locks' names). */
  mode: (name, v) => {
    if (v !== 'shared' && v !== 'exclusive') throw refuse(name, "'shared' or 'exclusive'", v)
  },
  positiveInteger: (name, v) => {
    if (!Number.isSafeInteger(v) || v < 1) throw refuse(name, 'a positive integer', v)
  },
  positiveMs: (name, v) => {
    if (!isNumber(v) || !Number.isFinite(v) || v <= 0) throw refuse(name, 'a positive number of milliseconds', v)
  },
  ratio: (name, v) => {
    if (!isNumber(v) || v <= 0 || v >= 1) throw refuse(name, 'a number between 0 and 1 (exclusive)', v)
  },
  string: (name, v) => {
    if (typeof v !== 'string') throw refuse(name, 'a string', v)
  },
  tls: (name, v) => {
    if (v !== true && v !== false && (typeof v !== 'object' || Array.isArray(v))) throw refuse(name, 'true or an object of TLS options', v)
  },
}

/** The options of AcquireOptions (both backends; dflockd's own keys are checked here for type, in lib/dflockd.js for the rest). */
const ACQUIRE = {
  timeout: check.timeout,
  signal: check.signal,
  tag: check.tag,
  onLost: check.onLost,
  staleTimeout: check.staleTimeout,
  retryInterval: check.retryInterval,
  fsync: check.fsync,
  heartbeat: check.heartbeat,
  maxTagLength: check.maxTagLength,
  pid: check.pid,
  leaseTtl: check.leaseTtl,
  limit: check.positiveInteger,
  mode: check.mode,
  tls: check.tls,
  auth: check.string,
  connectTimeoutMs: check.positiveMs,
  socketTimeoutMs: check.positiveMs,
  renewRatio: check.ratio,
  renewMaxIntervalMs: check.positiveMs,
}

const RELEASE = { force: check.force, pid: check.pid, limit: check.positiveInteger }

const STATUS = {
  staleTimeout: check.staleTimeout,
  limit: check.positiveInteger,
  mode: check.mode,
  tls: check.tls,
  auth: check.string,
  connectTimeoutMs: check.positiveMs,
  socketTimeoutMs: check.positiveMs,
}

/** semats' SemaphoreConfig. */
const CONFIG = {
  staleTimeout: check.staleTimeout,
  retryInterval: check.retryInterval,
  acquireTimeout: check.timeout,
  maxTagLength: check.maxTagLength,
  fsync: check.fsync,
  heartbeat: check.heartbeat,
}

/**
 * Options that only one backend has. Given (not null/undefined) for a target of the other backend they are refused,
 * not dropped: a file lock given `limit: 2` would otherwise be a one-holder lock, and a dflockd lock given
 * `staleTimeout` would silently keep the server's rules.
 */
const BACKEND_ONLY = {
  staleTimeout: 'file',
  retryInterval: 'file',
  fsync: 'file',
  heartbeat: 'file',
  maxTagLength: 'file',
  pid: 'file',
  force: 'file',
  leaseTtl: 'dflockd',
  tls: 'dflockd',
  auth: 'dflockd',
  connectTimeoutMs: 'dflockd',
  socketTimeoutMs: 'dflockd',
  renewRatio: 'dflockd',
  renewMaxIntervalMs: 'dflockd',
}

/** Why some options of a snapshot do not apply to `backend` ('file' | 'dflockd'); throws INVALID_ARGUMENT. */
function checkBackend(snapshot, backend) {
  for (const key of Object.keys(snapshot)) {
    const only = BACKEND_ONLY[key]
    if (only === undefined || only === backend || snapshot[key] === undefined || snapshot[key] === null) continue
    const hint = only === 'file' ? ' (the dflockd server keeps the lock: it has no lock file to judge or write)' : ''
    throw invalidArgument(`option '${key}' applies to ${only === 'file' ? 'file' : 'dflockd://'} targets only, not to a ${backend} target${hint}`)
  }
  if (snapshot.mode === 'shared' && backend === 'file' && snapshot.pid != null) {
    throw invalidArgument("option 'pid' cannot be combined with mode 'shared' (the readers' heartbeat needs a live process)")
  }
  if (snapshot.mode === 'shared' && !SHARED_ON.has(backend)) {
    throw invalidArgument(`option 'mode': 'shared' is not available on ${backend === 'file' ? 'file' : 'dflockd://'} targets in this version`)
  }
}

/** The backends with shared (reader) locks: refused elsewhere rather than silently taken exclusive. */
const SHARED_ON = new Set(['file', 'dflockd'])

/** Checked where it is used (the native layer, or the dflockd modules): listed so that its name is known. */
const checkedLater = () => {}

/** `Connection.connect(options)` and `stats(options)`: the server and how to reach it. */
const SERVER = {
  host: checkedLater,
  port: checkedLater,
  tls: check.tls,
  auth: checkedLater,
  connectTimeoutMs: check.positiveMs,
  socketTimeoutMs: check.positiveMs,
}

/** `new DistributedLock(options)`: dflockd-client's names, seconds as it has them. */
const DISTRIBUTED_LOCK = {
  key: checkedLater,
  acquireTimeoutS: checkedLater,
  leaseTtlS: check.leaseTtl,
  servers: checkedLater,
  host: checkedLater,
  port: checkedLater,
  shardingStrategy: checkedLater,
  renewRatio: check.ratio,
  tls: check.tls,
  auth: checkedLater,
  onLockLost: checkedLater,
  mode: check.mode,
  connectTimeoutMs: check.positiveMs,
  socketTimeoutMs: check.positiveMs,
  // Not in the public typings: caps the renew interval (tests against a server with a short --read-timeout).
  renewMaxIntervalMs: check.positiveMs,
}

/** `new DistributedSemaphore(options)`: DistributedLock's and its `limit`. */
const DISTRIBUTED_SEMAPHORE = { ...DISTRIBUTED_LOCK, limit: checkedLater }

/** The LockInfo of `Semaphore#tryAcquireWithInfo(info)` (its timestamp is not used: the time of acquisition is). */
const SEMATS_INFO = { pid: check.pid, tag: check.tag }

/** `Semaphore#acquire(options)`. */
const SEMATS_ACQUIRE = { timeout: check.timeout, tag: check.tag, signal: check.signal }

/** What a thrown value says, for a message (never throws itself). */
function errorText(e) {
  try {
    return e instanceof Error ? `${e.name}: ${e.message}` : String(e)
  } catch {
    return 'an unprintable value'
  }
}

/**
 * Checks `options` (absent = `{}`) against `schema` and returns a snapshot of them: a plain object with each key of
 * the schema read exactly once (keys that read as `undefined` are kept only when they are the object's own, so that
 * `{...defaults, ...snapshot}` means what `{...defaults, ...options}` meant). Throws LockError INVALID_ARGUMENT,
 * also when reading an option throws, and (unless `strict: false`, for data such as a LockInfo) for a key the schema
 * does not have. `what` names the argument in messages (e.g. `options`, `config`).
 */
function validate(options, schema, what = 'options', { strict = true } = {}) {
  if (options === undefined) return {}
  let array
  try {
    array = Array.isArray(options) // throws for a revoked proxy
  } catch (e) {
    throw invalidArgument(`${what} could not be read: ${errorText(e)}`)
  }
  if (options === null || typeof options !== 'object' || array) {
    throw refuse(what, 'an object', options)
  }
  const snapshot = {}
  for (const key of Object.keys(schema)) {
    const name = `${what === 'options' ? '' : `${what}.`}${key}`
    let v
    try {
      v = options[key]
    } catch (e) {
      throw invalidArgument(`${name} could not be read: ${errorText(e)}`)
    }
    if (v !== undefined && v !== null) schema[key](name, v)
    if (v !== undefined || ownKey(options, key)) snapshot[key] = v
  }
  if (strict) refuseUnknown(options, schema, what)
  return snapshot
}

/**
 * Throws INVALID_ARGUMENT for the first own enumerable key of `options` that `schema` does not have, naming it and
 * the nearest valid name: a misspelt option (`timeOut`) would otherwise be ignored and its default used (a wait
 * forever instead of 300 ms).
 */
function refuseUnknown(options, schema, what) {
  let keys
  try {
    keys = Object.keys(options)
  } catch (e) {
    throw invalidArgument(`${what} could not be read: ${errorText(e)}`)
  }
  for (const key of keys) {
    if (Object.prototype.hasOwnProperty.call(schema, key)) continue
    const near = nearest(key, Object.keys(schema))
    const kind = what === 'options' ? 'option' : `${what} option`
    throw invalidArgument(`unknown ${kind} '${key}' (${near ? `did you mean '${near}'?` : `known: ${Object.keys(schema).join(', ')}`})`)
  }
}

/** The valid name closest to `name` (case-insensitive edit distance ≤ 2, or one contains the other), or null. */
function nearest(name, names) {
  const lower = name.toLowerCase()
  let best = null
  let bestDistance = Infinity
  for (const candidate of names) {
    const c = candidate.toLowerCase()
    let d = editDistance(lower, c)
    if (d > 2 && lower.length >= 4 && (c.includes(lower) || lower.includes(c))) d = 2.5
    if (d < bestDistance) [best, bestDistance] = [candidate, d]
  }
  return bestDistance <= 2.5 ? best : null
}

/** Levenshtein distance with adjacent transpositions (optimal string alignment). */
function editDistance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array(b.length).fill(0)])
  for (let j = 1; j <= b.length; j++) d[0][j] = j
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1)
    }
  }
  return d[a.length][b.length]
}

function ownKey(object, key) {
  try {
    return Object.prototype.hasOwnProperty.call(object, key)
  } catch {
    return false // a proxy that refuses: absent, as for a spread
  }
}

/** One value by a checker's name (e.g. `one('tag', tag)` for a positional argument). */
function one(kind, value, name = kind) {
  if (value !== undefined && value !== null) check[kind](name, value)
  return value
}

/**
 * `{ok: false, error}` (semats' SemaphoreError shape) from a thrown validation error. Anything else thrown (not a
 * LockError with its code) is an INVALID_ARGUMENT: the type is never undefined.
 */
function asFailure(e) {
  const type = e instanceof LockError && typeof e.code === 'string' ? e.code : ErrorCode.INVALID_ARGUMENT
  return { ok: false, error: { type, message: e && typeof e.message === 'string' ? e.message : errorText(e) } }
}

module.exports = { validate, checkBackend, nearest, MAX_LEASE_TTL_S, one, asFailure, describe, errorText, ACQUIRE, RELEASE, STATUS, CONFIG, SEMATS_ACQUIRE, SEMATS_INFO, SERVER, DISTRIBUTED_LOCK, DISTRIBUTED_SEMAPHORE }
