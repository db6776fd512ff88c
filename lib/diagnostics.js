'use strict'
// node:diagnostics_channel, the convention APM agents and OpenTelemetry instrumentations subscribe to:
// - TracingChannel `sema-native:acquire`: start / end (the synchronous part) / asyncStart / asyncEnd around every
//   acquire and tryAcquire of the target API (both backends), and `error` when it fails (a failed SemaphoreResult
//   as well as a rejection: the API reports failures as values, and a tracer wants to see them as errors);
// - channel `sema-native:release`: a held lock released by its handle or by path;
// - channel `sema-native:lost`: a held lock lost (file changed or gone, renewal refused, server gone).
// Every message carries the target with a dflockd URL's token redacted, never a lock's ownership token.
// Nobody subscribed costs one property read per call (`hasSubscribers`; measured in bench/diagnostics.js). The
// acquires that wait are also listed while they wait, for query() (lib/observe.js).

const dc = require('node:diagnostics_channel')
const { LockError } = require('./errors')
const { redactTarget } = require('./dflockd/url')

const acquireChannel = dc.tracingChannel('sema-native:acquire')
const releaseChannel = dc.channel('sema-native:release')
const lostChannel = dc.channel('sema-native:lost')

/** TracingChannel#hasSubscribers is Node ≥ 20.13 / 22; before that, any of its five channels. */
const acquireSubscribed =
  'hasSubscribers' in acquireChannel
    ? () => acquireChannel.hasSubscribers
    : () =>
        acquireChannel.start.hasSubscribers ||
        acquireChannel.end.hasSubscribers ||
        acquireChannel.asyncStart.hasSubscribers ||
        acquireChannel.asyncEnd.hasSubscribers ||
        acquireChannel.error.hasSubscribers

/** What a message says about a lock: where, which backend, its holder's facts (no token). */
function lockFacts(lock) {
  const facts = { target: redactTarget(lock.target), backend: lock.backend, pid: lock.pid, timestamp: lock.timestamp }
  if (lock.tag !== undefined) facts.tag = lock.tag
  return facts
}

/**
 * Runs `run()` (an acquire resolving a SemaphoreResult) traced on `sema-native:acquire` when anyone listens. The
 * context: `{target, backend, mode, wait}` at start; then `waitedMs`, and `lock` (pid, timestamp, tag) on success or
 * `error` (a LockError) with `holderPid` / `lockedSince` when known on failure.
 */
function traceAcquire(target, backend, mode, wait, run) {
  if (!acquireSubscribed()) return wait ? waiting(target, backend, mode, run) : run()
  const ctx = { target: redactTarget(target), backend, mode, wait }
  const t0 = performance.now()
  acquireChannel.start.publish(ctx)
  let pending
  try {
    pending = wait ? waiting(target, backend, mode, run) : run()
  } catch (e) {
    ctx.error = e
    acquireChannel.error.publish(ctx)
    throw e
  } finally {
    acquireChannel.end.publish(ctx)
  }
  return Promise.resolve(pending).then(
    (r) => {
      ctx.waitedMs = performance.now() - t0
      if (r.ok) ctx.lock = lockFacts(r.value)
      else {
        ctx.error = new LockError(r.error.message, r.error.type, r.error)
        if (r.error.holderPid !== undefined) ctx.holderPid = r.error.holderPid
        if (r.error.lockedSince !== undefined) ctx.lockedSince = r.error.lockedSince
        acquireChannel.error.publish(ctx)
      }
      finish(ctx)
      return r
    },
    (e) => {
      ctx.waitedMs = performance.now() - t0
      ctx.error = e
      acquireChannel.error.publish(ctx)
      finish(ctx)
      throw e
    },
  )
}

/** The acquires (with waiting) in progress in this thread, for query(): `{target, backend, mode, since}`. */
const pending = new Set()

/**
 * `run()` listed in `pending` until it settles (one Set entry and one promise reaction per acquire; a tryAcquire
 * does not wait and is not listed).
 */
function waiting(target, backend, mode, run) {
  const entry = { target, backend, mode, since: Date.now() }
  pending.add(entry)
  const forget = () => pending.delete(entry)
  let p
  try {
    p = run()
  } catch (e) {
    forget()
    throw e
  }
  Promise.resolve(p).then(forget, forget)
  return p
}

function pendingAcquires() {
  return [...pending]
}

function finish(ctx) {
  acquireChannel.asyncStart.publish(ctx)
  acquireChannel.asyncEnd.publish(ctx)
}

/** A held lock was released by its handle (`byPath: false`) or by `release(target)` (`lock` null then). */
function released(lock, target, backend) {
  if (!releaseChannel.hasSubscribers) return
  releaseChannel.publish(lock ? { ...lockFacts(lock), byPath: false } : { target: redactTarget(target), backend, byPath: true })
}

/** A held lock was lost; `error` is the LockError (code LOCK_LOST) its `signal` was aborted with. */
function lost(lock, error) {
  if (!lostChannel.hasSubscribers) return
  lostChannel.publish({ ...lockFacts(lock), error })
}

module.exports = { traceAcquire, released, lost, pendingAcquires, redactTarget, acquireChannel, releaseChannel, lostChannel }
