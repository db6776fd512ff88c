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

// The rules themselves (names, kinds, bounds, units, defaults, the words of each message) are the core's option
// table, crates/sema-core/src/options.rs, read ONCE here at load (`optionRules()`, JSON): the schemas below are built
// from it, so a check costs no call across the napi boundary. JS keeps only the kinds that need JS values (an
// AbortSignal, a function) and the shapes semats and dflockd-client users depend on.
const native = require('./native')
const RULES = JSON.parse(native.optionRules())

/** The longest dflockd lease accepted, in seconds (the table's; why: crates/sema-core/src/options.rs MAX_LEASE_TTL_S). */
const MAX_LEASE_TTL_S = RULES.maxLeaseTtlS

/** One checker per kind of the table: `(name, value)` → nothing, or throws; `undefined`/`null` never reach it. */
function checkerOf(kind) {
  const { expected } = kind
  switch (kind.check) {
    case 'number':
      return numberChecker(kind)
    case 'heartbeat': {
      const positive = numberChecker({ ...kind, check: 'number' })
      return (name, v) => {
        if (v !== false && v !== 0) positive(name, v)
      }
    }
    case 'boolean':
      return (name, v) => {
        if (typeof v !== 'boolean') throw refuse(name, expected, v)
      }
    case 'string':
      return (name, v) => {
        if (typeof v !== 'string') throw refuse(name, expected, v)
      }
    case 'nonEmptyString':
      return (name, v) => {
        if (typeof v !== 'string' || v === '') throw refuse(name, expected, v)
      }
    case 'oneOf':
      return (name, v) => {
        if (!kind.values.includes(v)) throw refuse(name, expected, v)
      }
    case 'tls':
      return (name, v) => {
        if (v !== true && v !== false && (typeof v !== 'object' || Array.isArray(v))) throw refuse(name, expected, v)
      }
    case 'servers':
      return (name, v) => {
        if (!Array.isArray(v) || v.length === 0) throw refuse(name, expected, v)
        v.forEach((pair, i) => {
          if (!Array.isArray(pair) || pair.length !== 2) throw refuse(`${name}[${i}]`, 'a [host, port] pair', pair)
          host(`${name}[${i}][0]`, pair[0])
          port(`${name}[${i}][1]`, pair[1])
        })
      }
    case 'function':
      return (name, v) => {
        if (typeof v !== 'function') throw refuse(name, expected, v)
      }
    case 'signal':
      return signalChecker(expected)
    default:
      // A kind this JS does not implement would accept anything: refuse to load instead.
      throw new Error(`sema-native: option kind '${kind.check}' of the native table has no JS checker`)
  }
}

/** A number kind: type, integer, finiteness and bounds from the table; a lease above its bound names the unit. */
function numberChecker({ name: kindName, expected, min, max, minExclusive, maxExclusive, integer, infinite }) {
  const lo = min ?? -Infinity
  const hi = max ?? Infinity
  return (name, v) => {
    if (
      typeof v !== 'number' ||
      v !== v ||
      (integer ? !Number.isSafeInteger(v) : !infinite && !Number.isFinite(v)) ||
      (minExclusive ? v <= lo : v < lo)
    ) {
      throw refuse(name, expected, v)
    }
    if (maxExclusive ? v >= hi : v > hi) {
      if (kindName === 'leaseSeconds' || kindName === 'acquireTimeoutSeconds') throw invalidArgument(native.leaseTtlTooLong(name, v))
      throw refuse(name, expected, v)
    }
  }
}

/**
 * An AbortSignal, or a stand-in with everything the wait uses: `aborted`, `addEventListener` and
 * `removeEventListener` (a stand-in without the last one would be found out only after the lock was taken).
 */
function signalChecker(expected) {
  return (name, v) => {
    if (typeof AbortSignal === 'function' && v instanceof AbortSignal) return
    let ok = false
    try {
      ok =
        typeof v === 'object' &&
        typeof v.aborted === 'boolean' &&
        typeof v.addEventListener === 'function' &&
        typeof v.removeEventListener === 'function'
    } catch (e) {
      throw invalidArgument(`${name} could not be read (${errorText(e)}): it must be ${expected}`)
    }
    if (!ok) throw refuse(name, expected, v)
  }
}

/** The checkers by kind name. */
const check = {}
for (const kind of Object.values(RULES.kinds)) check[kind.name] = checkerOf(kind)
const host = check.nonEmptyString
const port = check.port

const kKeys = Symbol('keys')
const kRequired = Symbol('required')
const kRules = Symbol('rules')
const kInstead = Symbol('instead')

/**
 * The schema of one entry point of the table: `{name: checker}` (so `Object.keys(schema)` lists its names), with its
 * names, required names and rules under symbols.
 */
function schemaOf(entry) {
  const schema = {}
  for (const r of entry.options) schema[r.name] = check[r.kind]
  Object.defineProperty(schema, kKeys, { value: Object.freeze(entry.options.map((r) => r.name)) })
  const required = entry.options.filter((r) => r.required).map((r) => [r.name, RULES.kinds[r.kind].expected])
  Object.defineProperty(schema, kRequired, { value: required })
  Object.defineProperty(schema, kRules, { value: entry.options })
  const instead = new Map(RULES.instead.filter((i) => i.entry === entry.name).map((i) => [i.name, i.message]))
  Object.defineProperty(schema, kInstead, { value: instead })
  return schema
}

const E = RULES.entryPoints
/** AcquireOptions: `acquire`, `tryAcquire`, `withLock` (both backends). */
const ACQUIRE = schemaOf(E.ACQUIRE)
const RELEASE = schemaOf(E.RELEASE)
const STATUS = schemaOf(E.STATUS)
/** `wait(target, options)`: status's options and how long to wait. */
const WAIT = schemaOf(E.WAIT)
/** semats' SemaphoreConfig. */
const CONFIG = schemaOf(E.CONFIG)
/** `Semaphore#acquire(options)`. */
const SEMATS_ACQUIRE = schemaOf(E.SEMATS_ACQUIRE)
/** The LockInfo of `Semaphore#tryAcquireWithInfo(info)` (its timestamp is not used: the time of acquisition is). */
const SEMATS_INFO = schemaOf(E.SEMATS_INFO)
/** `Connection.connect(options)` and `stats(options)`: the server and how to reach it. */
const SERVER = schemaOf(E.SERVER)
/** `new DistributedLock(options)`: dflockd-client's names, seconds as it has them. */
const DISTRIBUTED_LOCK = schemaOf(E.DISTRIBUTED_LOCK)
/** `new DistributedSemaphore(options)`: DistributedLock's and its `limit`. */
const DISTRIBUTED_SEMAPHORE = schemaOf(E.DISTRIBUTED_SEMAPHORE)
/** `DistributedLock#acquire(options)` and `#enqueue(options)`: `force` and `signal`. */
const DISTRIBUTED_ACQUIRE = schemaOf(E.DISTRIBUTED_ACQUIRE)
/** `DistributedLock#wait(timeoutS, options)`: `signal`. */
const DISTRIBUTED_WAIT = schemaOf(E.DISTRIBUTED_WAIT)
/** The Web Locks `LockManager#request` options (names only: their values are converted as WebIDL does, lib/locks). */
const LOCK_REQUEST = schemaOf(E.LOCK_REQUEST)
/** The query parameters of a `dflockd://` URL (names only: their text is parsed in lib/dflockd/url.js). */
const URL_QUERY = schemaOf(E.URL_QUERY)
/** The own CLI's value flags, by the kind of their parsed value (their text forms: lib/cli/common.js). */
const CLI_FLAGS = schemaOf(E.CLI_FLAGS)

/** `{name: default}` of a schema's options that have one in the table (frozen). */
function defaultsOf(schema) {
  const out = {}
  for (const r of schema[kRules]) if (r.default !== undefined && r.default !== null) out[r.name] = r.default
  return Object.freeze(out)
}

/** The table's kind of option `name` of `schema` (undefined when the schema has no such option). */
function kindOf(schema, name) {
  const rule = schema[kRules].find((r) => r.name === name)
  return rule === undefined ? undefined : RULES.kinds[rule.kind]
}

/** The table's kind `name` (bounds, unit, expected words), e.g. `kind('timeoutSeconds').max`. */
function kind(name) {
  return RULES.kinds[name]
}

/**
 * Options that only one backend has (the table's `backend` of the target API's options). Given (not null/undefined)
 * for a target of the other backend they are refused, not dropped: a file lock given `limit: 2` would otherwise be a
 * one-holder lock, and a dflockd lock given `staleTimeout` would silently keep the server's rules.
 */
const BACKEND_ONLY = {}
for (const entry of [E.ACQUIRE, E.RELEASE, E.STATUS, E.WAIT]) {
  for (const r of entry.options) if (r.backend !== 'both') BACKEND_ONLY[r.name] = r.backend
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
  const prefix = what === 'options' ? '' : `${what}.`
  for (const key of Object.keys(schema)) {
    let v
    try {
      v = options[key]
    } catch (e) {
      throw invalidArgument(`${prefix}${key} could not be read: ${errorText(e)}`)
    }
    if (v !== undefined && v !== null) schema[key](prefix + key, v)
    if (v !== undefined || ownKey(options, key)) snapshot[key] = v
  }
  const required = schema[kRequired]
  if (required.length !== 0) {
    for (const [key, expected] of required) {
      if (snapshot[key] === undefined || snapshot[key] === null) throw refuse(prefix + key, expected, snapshot[key])
    }
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
    throw invalidArgument(unknownName(what === 'options' ? 'option' : `${what} option`, key, schema))
  }
}

/**
 * `unknown option 'timeOut' (did you mean 'timeout'?)`: the message for a name `schema` does not have; for a name
 * users bring from elsewhere, the table's message saying what to write instead (`RULES.instead`).
 */
function unknownName(what, key, schema) {
  const instead = schema[kInstead].get(key)
  if (instead !== undefined) return instead
  const near = nearest(key, schema[kKeys])
  return `unknown ${what} '${key}' (${near ? `did you mean '${near}'?` : `known: ${schema[kKeys].join(', ')}`})`
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

/**
 * One value by the rule of an AcquireOptions name or a kind of the table (e.g. `one('tag', tag)` for a positional
 * argument, `one('leaseTtl', v, 'leaseTtlS')`).
 */
function one(option, value, name = option) {
  if (value !== undefined && value !== null) (ACQUIRE[option] ?? check[option])(name, value)
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

module.exports = {
  validate,
  checkBackend,
  nearest,
  unknownName,
  defaultsOf,
  kind,
  kindOf,
  MAX_LEASE_TTL_S,
  RULES,
  one,
  asFailure,
  describe,
  errorText,
  ACQUIRE,
  RELEASE,
  STATUS,
  WAIT,
  CONFIG,
  SEMATS_ACQUIRE,
  SEMATS_INFO,
  SERVER,
  DISTRIBUTED_LOCK,
  LOCK_REQUEST,
  DISTRIBUTED_SEMAPHORE,
  DISTRIBUTED_ACQUIRE,
  DISTRIBUTED_WAIT,
  URL_QUERY,
  CLI_FLAGS,
}
