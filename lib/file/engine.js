'use strict'
// What both file-lock front ends share (the semats drop-in in ./semats.js and the target API's file backend in
// ./lock.js): the default configuration, the mapping of millisecond options to the native engine's, the native
// lock info's JS shape, and the exit hook that releases held locks.

const { isMainThread } = require('node:worker_threads')
const native = require('../native')

const { CONFIG, defaultsOf } = require('../validate')

/** semats' defaults, in semats' key order, from the option table (crates/sema-core/src/options.rs). */
const DEFAULT_CONFIG = (() => {
  const d = defaultsOf(CONFIG)
  return Object.freeze({
    staleTimeout: d.staleTimeout,
    retryInterval: d.retryInterval,
    acquireTimeout: null, // forever
    maxTagLength: d.maxTagLength,
    fsync: d.fsync,
    heartbeat: undefined, // the engine's: min(1 s, staleTimeout / 4)
  })
})()

/**
 * Internal config key (never read from user options): write sema's and semats' file layout (pid, timestamp, tag;
 * no host identity), for the CLI front ends whose lock must outlive the process that took it (see
 * NativeFileOptions.plainFormat).
 */
const PLAIN_FORMAT = Symbol('plainFormat')

/**
 * Native engine options from semats-style config (ms). semats merges `{...DEFAULT_CONFIG, ...config}`, so an
 * explicit `undefined` replaces a default: undefined/null/NaN staleTimeout never expires, undefined
 * retryInterval polls every millisecond, undefined maxTagLength does not cut. We keep that meaning.
 */
function engineOptions(config) {
  const staleTimeoutMs = finiteOrNull(config.staleTimeout)
  const heartbeatOff = config.heartbeat === null || config.heartbeat === false || config.heartbeat === 0
  // undefined leaves the engine's default: min(1 s, staleTimeout / 4)
  // (validated: a positive number here)
  const heartbeatMs = heartbeatOff || config.heartbeat === undefined ? undefined : config.heartbeat
  // napi maps `undefined` (not `null`) to None in object fields.
  return {
    staleTimeoutMs: staleTimeoutMs === null ? undefined : Math.max(0, staleTimeoutMs),
    retryIntervalMs: Math.max(1, finiteOrNull(config.retryInterval) ?? 1),
    fsync: config.fsync !== false,
    heartbeatMs,
    heartbeatOff,
    maxTagLength: finiteOrNull(config.maxTagLength) ?? undefined,
    plainFormat: config.plainFormat === true ? true : undefined,
  }
}

function finiteOrNull(v) {
  return typeof v === 'number' && Number.isFinite(v) ? v : null
}

/** semats' LockInfo shape from the native one: the tag key only when the file has one. */
function lockInfo(n) {
  const info = { pid: n.pid, timestamp: n.timestamp }
  if (n.tag != null) info.tag = n.tag
  return info
}

/** A validated acquire timeout for the engine: null or Infinity waits forever; 0 tries once. */
function acquireTimeoutMs(timeout) {
  if (timeout === null || timeout === undefined || timeout === Infinity) return null
  return timeout
}

let exitHookInstalled = false
/**
 * Locks still held when the process exits normally are released, so other tools do not see a dead pid's lock
 * (after a crash, our own stale judgement reclaims it at once). Installed on the first acquisition. A worker
 * thread's 'exit' is its own end, not the process's: it releases that thread's locks only (the engine does it
 * too when a worker is terminated); the main thread's releases every thread's.
 */
function installExitHook() {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.once('exit', () => {
    if (isMainThread) native.releaseAllHeld()
    else native.releaseThreadHeld()
  })
  // Signals reach the main thread only (a worker cannot listen to them).
  if (isMainThread) for (const signal of RELEASE_ON) process.on(signal, releaseAndReraise)
}

/** Signals whose default action ends the process without an 'exit' event: held locks would stay on disk. */
const RELEASE_ON = process.platform === 'win32' ? ['SIGINT', 'SIGHUP'] : ['SIGINT', 'SIGTERM', 'SIGHUP']

/**
 * A listener changes what a signal does (Node no longer exits on it), so this one steps aside whenever the program
 * has a listener of its own: then the program keeps control, and its own `process.exit()` releases through 'exit'.
 * When it is the only listener, the process would otherwise have died of the signal: release every held lock, then
 * remove this listener (the default action is back) and raise the signal again, so the process ends exactly as it
 * would have (killed by the signal, as its parent and shell see it).
 */
function releaseAndReraise(signal) {
  if (process.listenerCount(signal) > 1) return
  native.releaseAllHeld()
  for (const s of RELEASE_ON) process.removeListener(s, releaseAndReraise)
  process.kill(process.pid, signal)
}

module.exports = { PLAIN_FORMAT, DEFAULT_CONFIG, engineOptions, finiteOrNull, lockInfo, acquireTimeoutMs, installExitHook }
