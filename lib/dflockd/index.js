'use strict'
// dflockd client, JavaScript side. Mirrors the names and behaviour of the official TypeScript client
// (dflockd-client) on top of the native binding (src/dflockd*.rs over sema-core's dflockd module), and provides the
// target functions the dispatcher in lib/target.js uses for `dflockd://` URLs.
//
// Units: seconds in the dflockd classes (as dflockd-client), milliseconds in the target API (as semats), except
// leaseTtl, which is whole seconds everywhere (the protocol's unit). Every native async call resolves a result
// object ({ok: true, …} | {ok:false, error:{code, message, reply?}}); nothing here rejects with a raw native error.
// The native layer validates every key, token, number and option and parses every reply; these modules only map
// results to the dflockd-client classes and errors, and check what only exists in JS. No timers live here; an abort
// signal or close() settles a pending acquire / enqueue / wait at once (and cancels the native call), so nothing
// keeps the process alive on its own. Failures map to LockError codes: validation → INVALID_ARGUMENT (nothing
// sent), a server `timeout` → false / AcquireTimeoutError, `error_auth` → AuthError, any other `error*` reply →
// SERVER_ERROR with `reply`, a reply that is not the protocol's → PROTOCOL_ERROR, TLS on one side only →
// TLS_MISMATCH.
//
//   common.js      constants, native result → LockError, JS-only option checks, cancellation, sharding
//   lock.js        DistributedLock, DistributedSemaphore
//   connection.js  the low-level Connection, stats()
//   url.js         the dflockd:// URL: parse, redaction of its token, the identity of the lock it names
//   target.js      dflockd:// URLs: acquire, release, status

const { stableHashShard } = require('./common')
const { DistributedLock, DistributedSemaphore } = require('./lock')
const { Connection, stats } = require('./connection')
const { acquireTarget, releaseTarget, statusTarget } = require('./target')
const { parseDflockdUrl } = require('./url')

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
