'use strict'
// Shared (reader/writer) locks on lock files: `mode: 'shared' | 'exclusive'`.
//
// Files beside the lock path P (none ends in `.tmp`, which semats' cleanStale removes, nor in `.lock`, which `ls`
// lists):
// - `P.rw-guard`: a mutex lock file held for the few milliseconds of each membership change (a reader joining or
//   leaving, an exclusive taking P, the readers' heartbeat), so that these decisions never interleave. Taken by the
//   engine: a guard whose holder died is reclaimed at once.
// - `P.reader-<hex>`: one per shared holder, a lock file of its own taken by the engine (heartbeat, loss
//   notification, a dead holder's file judged dead at once). The readers are the live ones among them.
// - `P.writer-<hex>`: one per exclusive waiter while it waits (writer preference, below).
// - P itself: while any reader holds, P exists in the lock-file format with the line `mode=shared`, names a
//   reader (`pid=`) and is kept young by the readers' heartbeat (its `timestamp=` rewritten every second). It has no
//   `host=`/`token=`, so every tool judges it by semats' rule: `sema` and `semats` (and our plain mutex) wait for
//   it and `sema try` is refused; only an age over the stale timeout with its pid gone would let them break it, and
//   the heartbeat keeps its age at most about a second. When the named reader leaves or dies while others read,
//   the next heartbeat (or the leave itself) names a live one.
//
// Policy (writer preference): a reader joins only when no exclusive waiter is announced (a live `P.writer-*`), so
// a stream of readers cannot starve an exclusive request; readers wait while a writer waits or holds. An exclusive
// acquire under the guard breaks a shared P whose readers are all dead (a crashed reader is reclaimed at once),
// takes P with the engine, and otherwise waits until the last reader's leave removes P. A mutex acquire without
// `mode` does not read the `mode=shared` line: it waits while P exists, and after a crash until the stale timeout.

const { ErrorCode } = require('../codes')
const fs = require('node:fs')
const crypto = require('node:crypto')
const nodePath = require('node:path')
const native = require('../native')
const { LockHandle } = require('../lock-handle')
const { acquireMutex } = require('./lock')
const { acquireTimeoutMs, engineOptions, DEFAULT_CONFIG, beforeExitRelease } = require('./engine')
const { changes, ended, isLive, siblings, keepLive } = require('./slots')

/** The readers' refresh of P's timestamp (the mutex's default heartbeat: a 1 s age for `sema --stale` >= 1 s). */
const HEARTBEAT_MS = 1000

/** The longest wait for the guard when the caller set no deadline. */
const GUARD_BOUND_MS = 30_000

const hex = () => crypto.randomBytes(8).toString('hex')

/** `{ kind: 'absent' | 'shared' | 'other', pid?, ino? }`: what P is now (never follows a link at P). */
function readBase(base) {
  let st
  try {
    st = fs.lstatSync(base)
  } catch (e) {
    return e.code === 'ENOENT' ? { kind: 'absent' } : { kind: 'other' }
  }
  if (!st.isFile()) return { kind: 'other' }
  let text
  try {
    const fd = fs.openSync(base, fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0))
    try {
      text = fs.readFileSync(fd, 'utf8')
    } finally {
      fs.closeSync(fd)
    }
  } catch {
    return { kind: 'other' }
  }
  if (!/^mode=shared$/m.test(text)) return { kind: 'other' }
  const pid = Number(/^pid=(\d+)$/m.exec(text)?.[1] ?? 0)
  return { kind: 'shared', pid, ino: st.ino }
}

/**
 * Writes P as a shared base naming `pid`: a new file written whole, then linked into place when P is absent
 * (`link` fails if anything is there, a link included) or renamed over the shared base (which replaces the name,
 * never following it). Only under the guard.
 */
function writeBase(base, pid, tag, replace, fsync) {
  const tmp = `${base}.rw-${hex()}-new`
  let content = `pid=${pid}\ntimestamp=${Math.floor(Date.now() / 1000)}\n`
  if (tag !== undefined && tag !== null) content += `tag=${String(tag).replace(/[\u0000-\u001f\u007f]/g, ' ')}\n`
  content += 'mode=shared\n'
  const fd = fs.openSync(tmp, 'wx', 0o644)
  try {
    fs.writeSync(fd, content)
    if (fsync) fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
  try {
    if (replace) fs.renameSync(tmp, base)
    else fs.linkSync(tmp, base)
  } finally {
    try {
      fs.unlinkSync(tmp)
    } catch {}
  }
}

/** The sibling files `P.<kind>-<hex>` (kind 'reader' | 'writer'), live or dead. */
function members(base, kind) {
  return siblings(base, new RegExp(`^\\.${kind}-[0-9a-f]{16}$`)).map((s) => s.path)
}

/** The live members of a kind; dead ones' files are removed (only under the guard). */
function liveMembers(base, kind, options) {
  return keepLive(members(base, kind), options)
}

/** Removes P if it is still the shared base `seen` (same inode). */
function removeBase(base, seen) {
  const now = readBase(base)
  if (now.kind === 'shared' && now.ino === seen.ino) fs.unlinkSync(base)
}

/** Options for the guard and the member files: the caller's file options, no tag, no waiting of their own. */
function memberOptions(options) {
  return { staleTimeout: options.staleTimeout, fsync: options.fsync, heartbeat: options.heartbeat, retryInterval: options.retryInterval }
}

/**
 * Runs `fn()` holding P's guard. `{ ok: true, value }`, or the guard's failure (TIMEOUT at the deadline, ABORTED).
 */
async function withGuard(base, options, deadline, signal, fn, oneTry = false) {
  const guard = `${base}.rw-guard`
  // No deadline (tryAcquire, release): the guard is held for a few file operations, so waiting for it is no wait
  // for the lock; a bound still ends a wait on a guard that never frees. `oneTry`: a busy guard is `value: null`.
  const timeout = oneTry ? 0 : deadline === null ? GUARD_BOUND_MS : Math.max(0, deadline - Date.now())
  const g = await acquireMutex(guard, guard, { ...memberOptions(options), timeout, signal }, { wait: true })
  if (!g.ok) {
    if (g.error.type === ErrorCode.TIMEOUT) return oneTry ? { ok: true, value: null } : ended('timeout', options, signal)
    return g
  }
  try {
    return { ok: true, value: await fn() }
  } finally {
    await g.value.release()
  }
}

/**
 * This thread's first attempts of shared and exclusive acquisitions, one after the other in call order, whatever
 * their paths: requests made together are granted in the order they were made (the Web Locks spec's order, which
 * the LockManager passes on), not in the order their file operations happen to finish. Only the first attempt: a
 * request that has to wait leaves the line (a busy guard counts as busy here, and the wait takes it).
 */
let firstAttempts = Promise.resolve()
function inCallOrder(fn) {
  const run = firstAttempts.then(fn, fn)
  firstAttempts = run.then(
    () => {},
    () => {},
  )
  return run
}

// ─── shared ───

/** This process's shared holds, by base path: the heartbeat's list. */
const heldShared = new Map()
let heartbeat = null

class SharedFileLock extends LockHandle {
  #inner
  #base
  #options

  constructor(inner, target, base, options) {
    super({ target, backend: 'file', pid: inner.pid, timestamp: inner.timestamp, tag: options.tag ?? undefined, token: inner.token, onLost: options.onLost })
    this.#inner = inner
    this.#base = base
    this.#options = options
    Object.defineProperty(this, '_path', { value: base })
    Object.defineProperty(this, '_options', { value: options })
    Object.defineProperty(this, '_readerPath', { value: inner._path })
    inner.signal.addEventListener('abort', () => this._markLost(inner.signal.reason?.message ?? 'Lock was lost'), { once: true })
    const set = heldShared.get(base) ?? new Set()
    set.add(this)
    heldShared.set(base, set)
    if (heartbeat === null) {
      heartbeat = setInterval(refreshAll, HEARTBEAT_MS)
      heartbeat.unref()
      beforeExitRelease.add(leaveAllNow)
    }
  }

  /** The shared path is gone: this hold is lost (told at once), its reader file released. */
  _lose(reason) {
    forget(this, this.#base)
    this._markLost(reason)
    this.#inner.release().catch(() => {})
  }

  async _release() {
    const base = this.#base
    forget(this, base)
    const r = await withGuard(base, this.#options, null, null, async () => {
      const released = await this.#inner.release()
      const seen = readBase(base)
      if (seen.kind !== 'shared') return released
      const others = await liveMembers(base, 'reader', this.#options)
      if (others.length === 0) removeBase(base, seen)
      else if (!native.isProcessRunning(seen.pid) || (seen.pid === process.pid && !heldShared.has(base))) {
        writeBase(base, await pidOf(others[0]), this.#options.tag, true, this.#options.fsync !== false)
      }
      return released
    })
    if (!r.ok) throw Object.assign(new Error(r.error.message), { code: r.error.type })
    return r.value
  }
}

function forget(handle, base) {
  const set = heldShared.get(base)
  if (!set) return
  set.delete(handle)
  if (set.size === 0) heldShared.delete(base)
  if (heldShared.size === 0 && heartbeat !== null) {
    clearInterval(heartbeat)
    heartbeat = null
    beforeExitRelease.delete(leaveAllNow)
  }
}

async function pidOf(readerFile) {
  const { statusMutex } = require('./lock')
  const s = await statusMutex(readerFile, readerFile, {})
  return s.info?.pid ?? process.pid
}

// ─── leaving at exit (synchronous: 'exit' listeners and the signal hook cannot wait) ───

/** An engine handle for `path` with the default options and no heartbeat, or null for a path the engine refuses. */
function nativeFile(path) {
  const checked = native.checkLockPath(path, false)
  if (!checked.ok) return null
  return new native.NativeLockFile(checked.value, engineOptions({ ...DEFAULT_CONFIG, fsync: false, heartbeat: null }))
}

function liveNow(path) {
  const s = nativeFile(path)?.status()
  return s ? s.locked && !s.isStale : false
}

/** Sleeps the thread for `ms` (at exit, between guard attempts). */
function sleepSync(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

/**
 * At exit (normal, or a signal that ends the process): each group this thread reads leaves as a release would, so
 * that no `mode=shared` path is left naming a dead reader (sema, semats and the plain mutex would wait out the
 * stale timeout for it). The guard is tried for at most ~100 ms; if it cannot be had, the path is left, and the
 * next shared or exclusive acquirer takes it over.
 */
function leaveAllNow() {
  for (const [base, set] of heldShared) {
    const mine = new Set([...set].map((h) => h._readerPath))
    const guard = nativeFile(`${base}.rw-guard`)
    if (!guard) continue
    let got = false
    for (let i = 0; i < 50 && !got; i++) {
      got = guard.tryAcquireSync(undefined, undefined).ok
      if (!got) sleepSync(2)
    }
    if (!got) continue
    try {
      const seen = readBase(base)
      if (seen.kind !== 'shared') continue
      const others = members(base, 'reader').filter((p) => !mine.has(p) && liveNow(p))
      if (others.length === 0) removeBase(base, seen)
      else if (seen.pid === process.pid || !native.isProcessRunning(seen.pid)) {
        const pid = nativeFile(others[0])?.status().info?.pid ?? process.pid
        writeBase(base, pid, undefined, true, false)
      }
    } finally {
      guard.releaseAsProcess(false)
    }
  }
  heldShared.clear()
}

let refreshing = false
/** The heartbeat: each shared base this process reads gets a fresh timestamp, naming a live reader. */
async function refreshAll() {
  if (refreshing) return
  refreshing = true
  try {
    for (const [base, set] of heldShared) {
      const [any] = set
      const options = any ? any._options : {}
      const r = await withGuard(base, options, Date.now() + HEARTBEAT_MS, null, () => {
        const seen = readBase(base)
        // Under the guard a held shared lock always has its shared path: removed or replaced (a forced release, a
        // Web Locks steal), the hold is lost.
        if (seen.kind !== 'shared') return 'gone'
        const pid = native.isProcessRunning(seen.pid) ? seen.pid : process.pid
        writeBase(base, pid, options.tag, true, false)
        return 'kept'
      }).catch(() => null)
      if (r?.ok && r.value === 'gone') {
        for (const h of [...set]) h._lose('the shared lock file was removed or replaced')
      }
    }
  } finally {
    refreshing = false
  }
}

/** mode: 'shared'. Same result shape as acquireFile. */
async function acquireShared(target, path, options, { wait }) {
  if (options.limit != null) {
    return { ok: false, error: { type: ErrorCode.INVALID_ARGUMENT, message: "limit with mode 'shared' is not available on file targets in this version" } }
  }
  const base = nodePath.resolve(path)
  const deadline = wait ? deadlineOf(options) : null
  const signal = options.signal ?? null
  // Watched before the first attempt: a change while an attempt runs wakes the sleep after it.
  const watch = wait ? changes(base, options.retryInterval ?? 100) : null
  try {
    return await joinLoop(target, base, options, wait, deadline, signal, watch)
  } finally {
    watch?.close()
  }
}

async function joinLoop(target, base, options, wait, deadline, signal, watch) {
  for (let attempt = 0; ; attempt++) {
    const join = () => withGuard(base, options, deadline, signal, async () => {
      if ((await liveMembers(base, 'writer', options)).length > 0) return null
      const seen = readBase(base)
      if (seen.kind === 'other') return null
      const reader = `${base}.reader-${hex()}`
      // The reader's file carries the caller's tag: each shared holder can be told apart (query()).
      const reg = await acquireMutex(target, reader, { ...memberOptions(options), tag: options.tag }, { wait: false })
      if (!reg.ok) return reg
      try {
        if (seen.kind === 'absent') writeBase(base, process.pid, options.tag, false, options.fsync !== false)
        else if (!native.isProcessRunning(seen.pid)) writeBase(base, process.pid, options.tag, true, options.fsync !== false)
      } catch (e) {
        await reg.value.release()
        // A mutex holder (which takes the path without the guard) created it first: busy.
        if (e.code === 'EEXIST') return null
        return { ok: false, error: { type: ErrorCode.IO_ERROR, message: `cannot write the shared lock '${base}': ${e.message}` } }
      }
      return reg
    }, wait && attempt === 0)
    const r = attempt === 0 ? await inCallOrder(join) : await join()
    if (!r.ok) return r
    if (r.value !== null) {
      if (!r.value.ok) return r.value
      return { ok: true, value: new SharedFileLock(r.value.value, target, base, options) }
    }
    if (!wait) return { ok: false, error: { type: ErrorCode.ALREADY_LOCKED, message: `'${base}' is held exclusively, or an exclusive request waits` } }
    if (deadline !== null && Date.now() >= deadline) return ended('timeout', options, signal)
    const why = await watch.next(deadline, signal)
    if (why !== 'woken') return ended(why, options, signal)
  }
}

/**
 * mode: 'exclusive': the mutex, aware of readers. One attempt under the guard (a shared path whose readers all died
 * is removed first: reclaimed at once); then, announced as a waiting writer, the engine's own wait for the path (its
 * FIFO line within and across processes, counted by `ls`), while a janitor removes a shared path once its readers
 * have all died (the engine alone would wait out the stale timeout for it).
 */
async function acquireExclusive(target, path, options, { wait }) {
  if (options.limit != null) return require('./slots').acquireSlot(target, path, options, { wait })
  const base = nodePath.resolve(path)
  const deadline = wait ? deadlineOf(options) : null
  const signal = options.signal ?? null
  const first = await inCallOrder(() =>
    withGuard(
      base,
      options,
      deadline,
      signal,
      async () => {
        if ((await clearDeadShared(base, options)) === 'readers') return null
        return acquireMutex(target, base, options, { wait: false })
      },
      wait,
    ),
  )
  if (!first.ok) return first
  const tried = first.value
  if (tried !== null && (tried.ok || tried.error.type !== ErrorCode.ALREADY_LOCKED)) return tried
  if (!wait) return tried ?? { ok: false, error: { type: ErrorCode.ALREADY_LOCKED, message: `'${base}' is held by shared holders` } }
  // Writer preference: from now on no reader joins (see the module comment).
  const w = await acquireMutex(target, `${base}.writer-${hex()}`, memberOptions(options), { wait: false })
  if (!w.ok) return w
  const stop = new AbortController()
  const watch = changes(base, options.retryInterval ?? 100)
  const janitor = (async () => {
    while (!stop.signal.aborted) {
      if ((await watch.next(null, stop.signal)) !== 'woken') return
      await withGuard(base, options, null, stop.signal, () => clearDeadShared(base, options))
    }
  })()
  try {
    const timeout = deadline === null ? options.timeout : Math.max(0, deadline - Date.now())
    const r = await acquireMutex(target, base, { ...options, timeout }, { wait: true })
    if (!r.ok && r.error.type === ErrorCode.TIMEOUT) r.error.message = `Timeout waiting for lock after ${options.timeout}ms`
    return r
  } finally {
    stop.abort()
    await janitor.catch(() => {})
    watch.close()
    await w.value.release().catch(() => {})
  }
}

/** Under the guard: removes a shared path whose readers all died. 'readers' while live ones hold it. */
async function clearDeadShared(base, options) {
  const seen = readBase(base)
  if (seen.kind !== 'shared') return 'none'
  if ((await liveMembers(base, 'reader', options)).length > 0) return 'readers'
  removeBase(base, seen)
  return 'cleared'
}

function deadlineOf(options) {
  const ms = acquireTimeoutMs(options.timeout)
  return ms === null ? null : Date.now() + ms
}

/**
 * release(path) of a shared lock: this thread's shared holds on it are released through their handles (so that the
 * path is removed only by the last reader, never under the others). `null` when this thread holds none there.
 */
async function releaseSharedByPath(path, options) {
  if (options.force) return null
  const set = heldShared.get(nodePath.resolve(path))
  if (!set) return null
  for (const h of [...set]) await h.release()
  return { ok: true, value: undefined }
}

const INTERNAL = /\.(?:writer-[0-9a-f]{16}|rw-guard|rw-[0-9a-f]{16}-new|queue-\d{20}-[0-9a-f]{8})$/
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

/** The live shared holders of `path`: `{ pid, tag, timestamp }` each (none when it is not a shared lock). */
async function readersOf(path) {
  const { statusMutex } = require('./lock')
  const base = nodePath.resolve(path)
  if (readBase(base).kind !== 'shared') return []
  const out = []
  for (const p of members(base, 'reader')) {
    const s = await statusMutex(p, p, {}).catch(() => null)
    if (s && s.locked && !s.isStale && s.info) out.push({ pid: s.info.pid, tag: s.info.tag ?? null, timestamp: s.info.timestamp })
  }
  return out
}

/**
 * Whether an acquire in `mode` would take P now, judged without changing anything (for wait()): shared when no
 * exclusive request waits (writer preference) and P is absent, a shared base, or held by a holder the engine would
 * reclaim; exclusive when P is absent, reclaimable, or a shared base whose readers have all died.
 */
async function freeFor(path, mode, options) {
  const base = nodePath.resolve(path)
  const any = async (kind) => {
    for (const p of members(base, kind)) if (await isLive(p, options)) return true
    return false
  }
  if (mode === 'shared' && (await any('writer'))) return false
  const seen = readBase(base)
  if (seen.kind === 'absent') return true
  if (seen.kind === 'shared') return mode === 'shared' || !(await any('reader'))
  return !(await isLive(base, options))
}

/** Facts for status: `{ mode: 'shared', holders }` when P is a shared base, else null. */
async function sharedFacts(path, options) {
  const base = nodePath.resolve(path)
  if (readBase(base).kind !== 'shared') return null
  let holders = 0
  for (const p of members(base, 'reader')) if (await isLive(p, options)) holders++
  return { mode: 'shared', holders }
}

module.exports = { acquireShared, acquireExclusive, freeFor, sharedFacts, releaseSharedByPath, heldAs, readersOf }
