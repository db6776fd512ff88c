'use strict'
// The JS side of the binding's file settler (src/file/settle.rs): this module instance's completion channel for the
// acquisitions the binding decides off this thread. `settledAcquire` is NativeLockFile#acquire as a promise: the
// result decided on this thread, or the one the channel brings for its id. The channel keeps the process alive
// only while an acquisition made through it is pending.

const native = require('../native')

/** Pending acquisitions: settle id → the resolve of its promise. */
const pending = new Map()
let lastId = 0

const settler = new native.NativeFileSettler(({ id, result }) => {
  const resolve = pending.get(id)
  pending.delete(id)
  if (pending.size === 0) settler.keepAlive(false)
  resolve?.(result)
})

/** NativeLockFile#acquire (its arguments before the settler's) as a promise of its `NativeResult`. */
function settledAcquire(file, tag, ownerPid, timeoutMs, cancelId) {
  // Wraps at 2^32: a pending id is long settled by the time its number comes round again.
  lastId = (lastId + 1) >>> 0
  const id = lastId
  const now = file.acquire(tag, ownerPid, timeoutMs, cancelId, settler, id)
  if (now !== null) return Promise.resolve(now)
  if (pending.size === 0) settler.keepAlive(true)
  return new Promise((resolve) => pending.set(id, resolve))
}

/** NativeLockFile#acquireMode (a shared lock's acquire: always answered through the channel) as a promise. */
function settledAcquireMode(file, mode, tag, ownerPid, timeoutMs, cancelId) {
  lastId = (lastId + 1) >>> 0
  const id = lastId
  const now = file.acquireMode(mode, tag, ownerPid, timeoutMs, cancelId, settler, id)
  if (now !== null) return Promise.resolve(now)
  if (pending.size === 0) settler.keepAlive(true)
  return new Promise((resolve) => pending.set(id, resolve))
}

module.exports = { settledAcquire, settledAcquireMode }
