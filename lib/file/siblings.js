'use strict'
// Directory helpers of the shared/exclusive lock (./shared.js), moved out of ./slots.js when the counting semaphore
// went into the core (crates/sema-core/src/lockfile/semaphore/): the sibling files of a base path, their liveness
// as the engine judges it, and the file events naming them. Nothing here is used by the semaphore any more.

const fs = require('node:fs')
const nodePath = require('node:path')
const { ErrorCode } = require('../codes')
const { statusMutex } = require('./lock')
const { abortedResult } = require('../abort')

/**
 * The files beside `base` named `<basename of base><suffix>` with `suffix` matching `pattern`, in name order:
 * `{ path, match }` (none when the directory cannot be read). Slots, tickets and shared members are all named so.
 */
function siblings(base, pattern) {
  const dir = nodePath.dirname(base)
  const name = nodePath.basename(base)
  let names
  try {
    names = fs.readdirSync(dir)
  } catch {
    return []
  }
  const out = []
  for (const n of names.sort()) {
    const match = n.startsWith(name) ? pattern.exec(n.slice(name.length)) : null
    if (match) out.push({ path: nodePath.join(dir, n), match })
  }
  return out
}

/** The live ones of `paths`, in order, as the engine judges them; a dead one's file (a regular file only) is removed. */
async function keepLive(paths, options) {
  const live = []
  for (const p of paths) {
    if (await isLive(p, options)) live.push(p)
    else {
      try {
        if (fs.lstatSync(p).isFile()) fs.unlinkSync(p)
      } catch {}
    }
  }
  return live
}

/**
 * Resolves 'woken' | 'timeout' | 'aborted': whichever comes first of `arm`'s wake call, the deadline and the signal.
 * `arm(wake)` may return a function that stops what it started.
 */
function waitFor(deadline, signal, arm) {
  return new Promise((resolve) => {
    let stop = null
    let timer = null
    const done = (why) => {
      if (timer !== null) clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
      if (stop) stop()
      resolve(why)
    }
    const onAbort = () => done('aborted')
    if (signal) {
      if (signal.aborted) return resolve('aborted')
      signal.addEventListener('abort', onAbort, { once: true })
    }
    if (deadline !== null) timer = setTimeout(() => done('timeout'), Math.max(0, deadline - Date.now()))
    let fired = false
    stop =
      arm((why) => {
        if (!fired) {
          fired = true
          done(why)
        }
      }) ?? null
  })
}

/**
 * The file events naming `base` or one of its siblings (`<base>.…`), watched from now on: `next(deadline, signal)`
 * resolves like waitFor, at once when an event came since the last `next()` (so that a change between an attempt
 * and the sleep after it is not missed), else at the next event or after `retryMs`. `close()` when done.
 */
function changes(base, retryMs) {
  const name = nodePath.basename(base)
  let dirty = false
  let wake = null
  let watcher = null
  try {
    watcher = fs.watch(nodePath.dirname(base), { persistent: false }, (_event, file) => {
      if (file !== null && file !== name && !file.startsWith(`${name}.`)) return
      // The shared lock's guard and temporary files change on every attempt (ours too): no news for a waiter.
      if (file !== null && file.startsWith(`${name}.rw-`)) return
      dirty = true
      wake?.()
    })
    watcher.on('error', () => {}) // the poll goes on
  } catch {
    // No watcher (a file system without events): the poll alone.
  }
  return {
    next(deadline, signal) {
      return waitFor(deadline, signal, (woken) => {
        if (dirty) {
          dirty = false
          woken('woken')
          return undefined
        }
        wake = () => {
          dirty = false
          woken('woken')
        }
        const poll = setTimeout(() => woken('woken'), retryMs)
        return () => {
          clearTimeout(poll)
          wake = null
        }
      })
    },
    close() {
      watcher?.close()
    },
  }
}

function ended(why, options, signal) {
  if (why === 'aborted') {
    const { error } = abortedResult(signal)
    return { ok: false, error: { type: error.code, message: error.message } }
  }
  return { ok: false, error: { type: ErrorCode.TIMEOUT, message: `Timeout waiting for lock after ${options.timeout}ms` } }
}

/** A slot file held by a live holder (our engine's judgement: present and not reclaimable now). */
async function isLive(path, options) {
  try {
    const s = await statusMutex(path, path, { staleTimeout: options.staleTimeout })
    return s.locked && !s.isStale
  } catch {
    return false
  }
}

module.exports = { siblings, keepLive, waitFor, changes, ended, isLive }
