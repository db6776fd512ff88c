'use strict'
// Shared (reader/writer) locks on lock files, `mode: 'shared' | 'exclusive'`: value conversion over the core's
// SharedLock (crates/sema-core/src/lockfile/shared/, bound in src/file/shared.rs), which owns the files, the
// decisions, the waiting line, the heartbeat of the shared base and the release at exit. A shared or exclusive hold
// is a FileLock (./lock.js) of the engine's held lock (a reader's file, or the path itself for a writer): its
// release, loss notification and exit release are the mutex's. See docs/lock-kinds.md, "Shared locks".

const nodePath = require('node:path')
const { ErrorCode } = require('../codes')
const { acquireTimeoutMs } = require('./engine')

/** The native lock file of `path` (./lock.js's cache), or `{ error }`. */
function opened(path, options) {
  return require('./lock').openFile(path, options)
}

/** Whether an acquire in `mode` would be served now (for wait()): the core's look and decision. */
async function waitMode(path, options) {
  const { withAbort } = require('../abort')
  const { file, error } = opened(path, options)
  if (error) return { ok: false, error }
  const timeoutMs = acquireTimeoutMs(options.timeout) ?? undefined
  return withAbort(options.signal, (cancelId) => file.waitMode(options.mode, timeoutMs, cancelId ?? undefined))
}

/** Facts for status: `{ mode: 'shared', holders }` while the path is a shared lock's base, else null. */
async function sharedFacts(path, options) {
  const { file, error } = opened(path, options)
  if (error) return null
  const s = await file.statusShared()
  return s.mode === 'shared' ? { mode: 'shared', holders: s.holders } : null
}

/**
 * release(path) of a shared lock. Forced: the whole group (every reader's file and the base) is removed by the core,
 * each holder hearing of it as a loss. Not forced: this thread's shared holds on it are released through their
 * handles (the base goes with the last reader, never under the others). `null`: no shared lock of this thread
 * there (released as the mutex).
 */
async function releaseSharedByPath(path, options) {
  const base = nodePath.resolve(path)
  if (options.force) {
    const { file, error } = opened(path, {})
    if (error) return null
    const r = await file.releaseGroup()
    if (!r.ok) return { ok: false, error: { type: r.error.code, message: r.error.message } }
    return r.value ? { ok: true, value: undefined } : null
  }
  const mine = require('./lock').sharedHandlesOf(base)
  if (mine.length === 0) return null
  for (const h of mine) await h.release()
  return { ok: true, value: undefined }
}

const INTERNAL = /\.(?:writer-[0-9a-f]{16}|rwait-[0-9a-f]{16}|rw-guard|queue-\d{20}-[0-9a-f]{8})$/
const READER = /^(.*)\.reader-[0-9a-f]{16}$/
const SLOT = /^(.*)\.slot-\d+-of-\d+$/

/**
 * What a held lock file is to a caller (for query()): `{ name, mode }` of the lock it belongs to (a reader file:
 * its path in mode 'shared'; a slot file: its path), or null for the files a waiter or a guard holds.
 */
function heldAs(path) {
  if (INTERNAL.test(path)) return null
  const reader = READER.exec(path)
  if (reader) return { name: reader[1], mode: 'shared' }
  const slot = SLOT.exec(path)
  return { name: slot ? slot[1] : path, mode: 'exclusive' }
}

/**
 * `path` as a shared lock: `readers`, its live shared holders (`{ pid, tag, timestamp }` each, none when it is not a
 * shared base), and `waiting`, the requests of either mode waiting in its line (one each, of every process).
 */
async function sharedOf(path) {
  const { file, error } = opened(path, {})
  if (error) return { readers: [], waiting: 0 }
  const s = await file.statusShared()
  return { readers: s.readers.map((r) => ({ pid: r.pid, tag: r.tag ?? null, timestamp: r.timestamp })), waiting: s.waiting }
}

/** `mode: 'shared'` with `limit` is refused (a counting semaphore of readers is not built on files). */
function refusedWithLimit(options) {
  if (options.mode === 'shared' && options.limit != null) {
    return { ok: false, error: { type: ErrorCode.INVALID_ARGUMENT, message: "limit with mode 'shared' is not available on file targets in this version" } }
  }
  return null
}

module.exports = { waitMode, sharedFacts, releaseSharedByPath, heldAs, sharedOf, refusedWithLimit }
