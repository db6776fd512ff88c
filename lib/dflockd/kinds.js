'use strict'
// How the kinds of lock on one dflockd key meet on the server (the layout: crates/sema-core/src/dflockd/shared.rs).
// A shared lock's readers hold slots of the semaphore `<key>` itself (limit 16), its gate is `<key>/gate`; a plain
// mutex is `l <key>` (limit 1). The server refuses one key used with two limits (`error_limit_mismatch`, until the
// key is GC'd ~60 s after its last use), so a plain acquire can never be granted beside readers: refused, it is made
// again as a writer (`mode: 'exclusive'`), which waits for the readers as on files. One request stays the plain
// mutex's cost whenever the key has no readers.

const { ErrorCode } = require('../codes')
const { LockError } = require('../errors')

/** Whether a plain acquisition's failure `error` means the key is a shared lock's (readers or a writer hold it, or
 * did within the server's GC idle time): then it is made again with mode 'exclusive'. */
function meetsSharedLock(error, { mode, limit }) {
  return error != null && error.code === ErrorCode.LIMIT_MISMATCH && (mode === undefined || mode === null) && limit === 1
}

/** The error of a two-phase enqueue() that met a shared lock's key: it cannot wait for readers. */
function enqueueMeetsSharedLock(key, cause) {
  return new LockError(
    `key '${key}' is a shared lock's on the server (its readers' semaphore, limit 16; or a DistributedSemaphore's): ` +
      "enqueue()/wait() cannot wait for readers; acquire() waits for them (as a writer), or pass mode: 'exclusive'",
    ErrorCode.LIMIT_MISMATCH,
    { reply: cause.reply },
  )
}

/** The most readers of a shared lock at once: the limit of its slot semaphore (sema-core shared::MAX_READERS). */
const MAX_READERS = 16

/** The key of a shared lock's gate (sema-core shared::GATE_SUFFIX). */
const gateKey = (key) => `${key}/gate`

module.exports = { meetsSharedLock, enqueueMeetsSharedLock, MAX_READERS, gateKey }
