'use strict'
// Counting semaphores on lock files (`limit: N`): N slots, each a complete lock file taken by the mutex engine, so
// each slot has every guarantee of the mutex (O_EXCL/link creation, symlink refusal, a dead holder reclaimed at
// once, heartbeat, loss notification, release at exit and on signals, worker threads).
//
// Slot 0 is the base path itself: `sema`, `semats` or a shell script taking the base path take one slot, and can
// never make the count exceed N. Slots 1..N-1 are siblings named `<base>.slot-<i>-of-<N>`: the limit is in the name,
// so that an acquirer with another limit sees it without reading any file (LIMIT_MISMATCH), and no name ends in
// `.tmp` (semats' cleanStale removes `<base>.*.tmp`) or `.lock` (`ls` lists the base only, whose holder count
// `status` reports).
//
// Waiting: this process's waiters on one base path queue in call order (FIFO); the head takes a ticket in the
// cross-process line (a lock file `<base>.queue-<wall-clock µs>-<hex>`: FIFO between processes, a dead waiter's
// ticket judged dead at once) and tries every slot when its ticket is the oldest live one, then sleeps until a file
// event in the directory names the base or a sibling, or `retryInterval` (a crashed holder leaves its file behind:
// the poll is what finds it dead and reclaims it), the deadline or the signal.

const { ErrorCode } = require('../codes')
const fs = require('node:fs')
const crypto = require('node:crypto')
const nodePath = require('node:path')
const { acquireMutex, statusMutex } = require('./lock')
const { acquireTimeoutMs } = require('./engine')
const { abortedResult } = require('../abort')

const SLOT_NAME = /^\.slot-(\d+)-of-(\d+)$/

/** The path of slot `i` of `limit` for the base path `base` (slot 0 is the base). */
function slotPath(base, i, limit) {
  return i === 0 ? base : `${base}.slot-${i}-of-${limit}`
}

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

/** The sibling slot files of `base` present now: `{ path, index, limit }` (any limit). */
function siblingSlots(base) {
  return siblings(base, SLOT_NAME).map(({ path, match }) => ({ path, index: Number(match[1]), limit: Number(match[2]) }))
}

/**
 * LIMIT_MISMATCH when a live slot of `base` was taken with a limit other than `limit` (a dead one is ignored: its
 * file is reclaimed by whoever next uses that limit). `isLive(path)` judges a slot file with the engine.
 */
async function mismatch(base, limit, isLive) {
  for (const s of siblingSlots(base)) {
    if (s.limit === limit || !(await isLive(s.path))) continue
    return {
      ok: false,
      error: {
        type: ErrorCode.LIMIT_MISMATCH,
        message: `lock '${base}' is held with limit ${s.limit}, not ${limit} (a slot file '${nodePath.basename(s.path)}' is held)`,
      },
    }
  }
  return null
}

// ─── the cross-process line: one ticket lock file per waiting process, `<base>.queue-<wall-clock µs>-<hex>` ───

/**
 * A new ticket's path, named by the wall clock in microseconds (process.hrtime is system-wide under Node but counts
 * from the process's start under Bun, so it cannot order processes). A clock step only reorders the waiters of that
 * moment: order is fairness here, never exclusion.
 */
function ticketPath(base) {
  const us = Math.floor((performance.timeOrigin + performance.now()) * 1000)
  return `${base}.queue-${String(us).padStart(20, '0')}-${crypto.randomBytes(4).toString('hex')}`
}

const TICKET_NAME = /^\.queue-\d{20}-[0-9a-f]{8}$/

/** Options of a ticket: the caller's file options, no tag, no waiting. */
const TICKET_OPTIONS = (o) => ({ staleTimeout: o.staleTimeout, fsync: false, heartbeat: o.heartbeat, retryInterval: o.retryInterval })

/** The live tickets of `base`, oldest first (a dead waiter's ticket is removed). */
function liveTickets(base, options) {
  return keepLive(siblings(base, TICKET_NAME).map((s) => s.path), options)
}

/** Per absolute base path: this process's waiters in call order; the head is the one trying. */
const lines = new Map()

/**
 * One acquisition of a slot of `base`: every slot in turn (slot 0 first), then (when `wait`) queued behind this
 * process's earlier waiters and woken by file events or the poll. Same result shape as acquireFile.
 */
async function acquireSlot(target, path, options, { wait }) {
  const limit = options.limit
  const base = nodePath.resolve(path)
  const wrong = await mismatch(base, limit, (p) => isLive(p, options))
  if (wrong) return wrong
  const tryAll = async () => {
    for (let i = 0; i < limit; i++) {
      const r = await acquireMutex(target, slotPath(base, i, limit), options, { wait: false })
      if (r.ok || r.error.type !== ErrorCode.ALREADY_LOCKED) return r
    }
    return null
  }
  if (!wait) {
    return (
      (await tryAll()) ?? {
        ok: false,
        error: { type: ErrorCode.ALREADY_LOCKED, message: `All ${limit} slots of '${base}' are held` },
      }
    )
  }
  const timeoutMs = acquireTimeoutMs(options.timeout)
  const deadline = timeoutMs === null ? null : Date.now() + timeoutMs
  const signal = options.signal ?? null
  const line = lines.get(base) ?? []
  lines.set(base, line)
  const me = { wake: null }
  line.push(me)
  let ticket = null
  let watch = null
  try {
    if (line[0] !== me) {
      const turn = await waitFor(deadline, signal, (wake) => {
        me.wake = wake
      })
      if (turn !== 'woken') return ended(turn, options, signal)
    }
    // Watched before the first attempt: a slot freed while an attempt runs wakes the sleep after it.
    watch = changes(base, options.retryInterval ?? 100)
    for (;;) {
      if (signal?.aborted) return ended('aborted', options, signal)
      // Across processes: a newcomer tries only when nobody queues; a queued waiter only when its ticket is first.
      const first = ticket === null ? (await liveTickets(base, options)).length === 0 : (await liveTickets(base, options))[0] === ticket._path
      if (first) {
        const r = await tryAll()
        if (r) return r
      }
      if (deadline !== null && Date.now() >= deadline) return ended('timeout', options, signal)
      if (ticket === null) {
        const t = await acquireMutex(target, ticketPath(base), TICKET_OPTIONS(options), { wait: false })
        if (!t.ok) return t
        ticket = t.value
        continue // the line may have emptied meanwhile: look again before sleeping
      }
      const why = await watch.next(deadline, signal)
      if (why !== 'woken') return ended(why, options, signal)
    }
  } finally {
    watch?.close()
    if (ticket) await ticket.release().catch(() => {})
    const at = line.indexOf(me)
    if (at >= 0) line.splice(at, 1)
    if (line.length === 0) lines.delete(base)
    else if (at === 0) line[0].wake?.('woken')
  }
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

/**
 * Whether an acquire with `limit` would take a slot now, judged without changing anything (for wait()): a slot file
 * absent or its holder reclaimable. `{ ok: true, value }`, or LIMIT_MISMATCH as acquire reports it.
 */
async function slotFree(path, options) {
  const base = nodePath.resolve(path)
  const live = (p) => isLive(p, options)
  const wrong = await mismatch(base, options.limit, live)
  if (wrong) return wrong
  const taken = presentSlots(base, options.limit)
  if (taken.length < options.limit) return { ok: true, value: true } // a slot has no file
  for (const p of taken) if (!(await live(p))) return { ok: true, value: true }
  return { ok: true, value: false }
}

/**
 * The slot files of `base` with `limit` that exist now, slot 0 (the base) first: only they can be taken, so status
 * and wait() visit these and not every one of `limit` slots (limit may be up to 1e9: a visit of each never ended).
 */
function presentSlots(base, limit) {
  const others = siblingSlots(base)
    .filter((s) => s.limit === limit && s.index > 0 && s.index < limit)
    .sort((a, b) => a.index - b.index)
    .map((s) => s.path)
  let baseExists = true
  try {
    fs.lstatSync(base)
  } catch {
    baseExists = false
  }
  return baseExists ? [base, ...others] : others
}

/**
 * status with `limit`: the base's status, with `holders` (slots whose file exists: taken, by a live holder or one
 * not yet reclaimed) and `limit`; `locked` when any slot is taken, `info` the base's holder or else the first held
 * slot's.
 */
async function statusSlots(target, path, options) {
  const limit = options.limit
  const base = nodePath.resolve(path)
  const statusOf = (p) => statusMutex(target, p, { staleTimeout: options.staleTimeout })
  const first = await statusOf(base)
  const held = first.locked ? [first] : []
  for (const p of presentSlots(base, limit)) {
    if (p === base) continue
    const s = await statusOf(p)
    if (s.locked) held.push(s)
  }
  return { ...first, locked: held.length > 0, info: held[0]?.info ?? null, holders: held.length, limit }
}

module.exports = { acquireSlot, slotFree, statusSlots, slotPath, presentSlots, siblingSlots, siblings, keepLive, waitFor, changes, ended, isLive }
