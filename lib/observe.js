'use strict'
// Observing locks without taking them: wait(target) until a lock is free. File targets wait in the engine, woken by
// the file events of the lock's directory (nothing is created: no lock file, no queue place); dflockd has no
// command that waits without enqueueing (`l`/`e`/`w` all take the lock), so a dflockd wait asks the server's
// `stats` every poll interval until the key has a free slot, bounded by the timeout and the signal.

const { ErrorCode } = require('./codes')
const { setTimeout: sleep } = require('node:timers/promises')
const native = require('./native')
const { parseTarget } = require('./target')
const { validate, asFailure, STATUS, WAIT } = require('./validate')
const { fileError } = require('./errors')
const { withAbort, abortedResult } = require('./abort')
const { engineOptions, acquireTimeoutMs, DEFAULT_CONFIG } = require('./file/engine')
const dflockd = require('./dflockd')
const { pendingAcquires } = require('./diagnostics')

// (WAIT: the option table's entry point for wait(), lib/validate.js)

/** dflockd: ms between two `stats` (one connection each): a hand-off is seen within it. */
const DFLOCKD_POLL_MS = 200

function timeoutFailure(timeout) {
  return { ok: false, error: { type: ErrorCode.TIMEOUT, message: `Timeout waiting for lock to be released after ${timeout}ms` } }
}

/**
 * Resolves `{ok: true, value: {waitedMs}}` when `target` is free (no holder, or a stale holder the engine would break),
 * without taking it. Failures as `acquire`'s: INVALID_ARGUMENT / INVALID_PATH, TIMEOUT, ABORTED, IO_ERROR.
 */
async function wait(target, options) {
  const start = Date.now()
  let parsed
  try {
    parsed = parseTarget(target)
    options = validate(options, WAIT)
  } catch (e) {
    return asFailure(e)
  }
  const r = parsed.backend === 'file' ? await waitFile(parsed.path, options) : await waitDflockd(target, options)
  if (!r.ok) return r
  return { ok: true, value: { waitedMs: Date.now() - start } }
}

async function waitFile(path, options) {
  const checked = native.checkLockPath(path, false)
  if (!checked.ok) return { ok: false, error: fileError(checked.error, path) }
  if (options.limit != null && options.limit > 1) {
    const r = await require('./file/slots').waitSlot(checked.value, options)
    return r.ok || r.error.type !== ErrorCode.TIMEOUT ? r : timeoutFailure(options.timeout)
  }
  if (options.mode != null) return waitFileKind(checked.value, options)
  const config = { ...DEFAULT_CONFIG }
  if (options.staleTimeout !== undefined) config.staleTimeout = options.staleTimeout
  if (options.retryInterval != null) config.retryInterval = options.retryInterval
  const timeoutMs = acquireTimeoutMs(options.timeout) ?? undefined
  const r = await withAbort(options.signal, (cancelId) =>
    native.waitLockFree(checked.value, engineOptions(config), timeoutMs, cancelId ?? undefined),
  )
  if (r.ok) return r
  if (r.error.code === ErrorCode.TIMEOUT) return timeoutFailure(options.timeout)
  return { ok: false, error: fileError(r.error, checked.value) }
}

/** wait() in a `mode` on a file: the core's look and decision (lib/file/shared.js waitMode), as a counting
 * semaphore's is (lib/file/slots.js waitSlot). */
async function waitFileKind(path, options) {
  const r = await require('./file/shared').waitMode(path, options)
  if (r.ok) return { ok: true }
  if (r.error.code === ErrorCode.TIMEOUT) return timeoutFailure(options.timeout)
  return { ok: false, error: { type: r.error.code, message: r.error.message } }
}

async function waitDflockd(target, options) {
  const { signal } = options
  if (signal?.aborted) return failureOf(abortedResult(signal))
  const timeoutMs = acquireTimeoutMs(options.timeout)
  const deadline = timeoutMs === null ? Infinity : Date.now() + timeoutMs
  const statusOptions = {}
  for (const k of Object.keys(STATUS)) if (options[k] != null) statusOptions[k] = options[k]
  // Free for the acquire of the same kind: a slot of a semaphore; a shared lock with no writer and a slot; for a
  // plain or exclusive acquire, no holder of any kind (readers hold slots of the key itself: lib/dflockd/kinds.js).
  let kind
  try {
    const u = require('./dflockd/url').parseDflockdUrl(target)
    kind = (options.limit ?? u.limit ?? 1) > 1 ? 'slot' : (options.mode ?? u.mode) === 'shared' ? 'shared' : 'sole'
  } catch (e) {
    return { ok: false, error: { type: e.code ?? ErrorCode.INVALID_ARGUMENT, message: e.message } }
  }
  const free = (s) => {
    const holders = s.holders ?? 0
    if (kind === 'sole') return holders === 0
    return holders < (s.limit ?? 1) && !(kind === 'shared' && s.mode === 'exclusive')
  }
  for (;;) {
    let s
    try {
      s = await dflockd.statusTarget(target, statusOptions)
    } catch (e) {
      return { ok: false, error: { type: e.code ?? ErrorCode.IO_ERROR, message: e.message } }
    }
    if (free(s)) return { ok: true }
    const left = deadline - Date.now()
    if (left <= 0) return timeoutFailure(options.timeout)
    try {
      await sleep(Math.min(DFLOCKD_POLL_MS, left), undefined, signal ? { signal } : undefined)
    } catch {
      return failureOf(abortedResult(signal))
    }
  }
}

/** abortedResult's `{code}` as a SemaphoreResult's `{type}`. */
function failureOf(r) {
  return { ok: false, error: { type: r.error.code, message: r.error.message } }
}

/** A held or pending lock as query() reports it (the Web Locks `LockManager.query()` shape, plus facts). */
function queryEntry(name, backend, mode, extra) {
  return { name, backend, mode, ...extra }
}

/**
 * The locks this process holds and the acquisitions it waits for: `{held, pending}`. Held: every lock file held by
 * any thread and any API (the engine's registry: `acquire`, `Semaphore`, `withLock`), by absolute path, and the
 * dflockd locks of the target API (`acquire('dflockd://…')`), by URL with its token redacted. Pending: the
 * `acquire`/`withLock` calls of this thread still waiting, by target as given.
 */
async function query() {
  const { heldHandles } = require('./dflockd/target')
  const { redactTarget } = require('./dflockd/url')
  const { heldAs } = require('./file/shared')
  const held = []
  for (const f of native.heldLockFacts()) {
    // A slot or a shared hold by its lock's path; the files of waiters and guards are no holds.
    const as = heldAs(f.path)
    if (as) held.push(queryEntry(as.name, 'file', as.mode, { pid: f.pid, timestamp: f.timestamp, ...(f.tag != null ? { tag: f.tag } : {}) }))
  }
  for (const h of heldHandles()) {
    held.push(queryEntry(redactTarget(h.target), 'dflockd', 'exclusive', { pid: h.pid, timestamp: h.timestamp }))
  }
  const pending = pendingAcquires().map((e) => queryEntry(redactTarget(e.target), e.backend, e.mode, { since: e.since }))
  return { held, pending }
}

module.exports = { wait, query }
