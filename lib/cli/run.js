'use strict'
// `sema-native run <target> [options] -- <command…>`: holds the lock for the command's whole life.
//
// Order of events: acquire (a signal while waiting cancels the wait and exits 128+N), spawn the command with
// inherited stdio, pass signals on to it (below), wait for it to end, release, exit with its status (128+N when it
// died of signal N). The lock is kept alive by the package (heartbeat for files, lease renewal for dflockd); if it
// is lost anyway, a warning goes to stderr and the command keeps running.
//
// If this wrapper dies first (SIGKILL, OOM, `taskkill /F`), the command must keep the lock while it lives, as with
// flock(1):
// - Unix: the command inherits the lock file's descriptor as fd 3, and with it the holder's presence mark (a lock
//   of the open file, not of a process), so the engine judges the lock held while that descriptor is open
//   anywhere, although the pid recorded in the file is dead;
// - Windows: a byte-range lock belongs to the process that took it and dies with it, so no handle can carry the
//   mark. Instead the command is recorded as the holder (its pid and creation time written into the lock file by
//   this wrapper, which still holds it): the lock is held while the command lives, and while this wrapper lives
//   its own mark keeps it held even if the command ends first. (Node puts the children it spawns on Windows in a
//   job that is killed with this wrapper, so there the command ends with it; the record keeps the lock held until
//   the command is really gone.)
// When the command ends too, the lock is reclaimable at once.
//
// Signals on Windows: Ctrl-C and Ctrl-Break go to every process of the console, the command included, so nothing
// is passed on (Node's child.kill() would be TerminateProcess there); the wrapper only has to survive them (Node's
// default for SIGBREAK is to die) and wait for the command, then release and pass its exit code through.

const { ErrorCode } = require('../codes')
const { spawn } = require('node:child_process')
const native = require('../native')
const { UsageError, err, exit, signalExitCode, formatDuration, heldBy, EXIT_CODES, exitCodeFor } = require('./common')

const WINDOWS = process.platform === 'win32'
/** Signals heard while waiting (cancel the wait) and while the command runs (passed on, except on Windows). */
const FORWARDED = WINDOWS ? ['SIGINT', 'SIGBREAK', 'SIGHUP'] : ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT']
/** What a dflockd wait without --timeout means here: as long as a timer can hold (about 24 days). */
const FOREVER_MS = 0x7fffffff

async function run(o, { durationOption, statusOptions, apiTarget, acquireWithNotice, rep }) {
  if (!o.argv || o.argv.length === 0) {
    throw new UsageError('run needs a command: run <target> [options] -- <command> [args...]')
  }
  const target = apiTarget(o.target)
  const dflockd = require('./common').isDflockd(target)
  const options = { ...statusOptions(o), tag: o.tag }
  const timeout = durationOption(o, 'timeout')
  if (timeout !== undefined) options.timeout = timeout
  else if (dflockd) options.timeout = FOREVER_MS

  let phase = 'acquiring' // then 'running', then 'done'
  let child = null
  let signalBeforeStart = null
  const cancel = new AbortController()
  const onSignal = (signal) => {
    if (phase === 'acquiring') {
      signalBeforeStart = signal
      cancel.abort()
    } else if (phase === 'running' && child && !WINDOWS) {
      try {
        child.kill(signal)
      } catch {}
    }
  }
  // Installed for good: a signal that arrives while the lock is being released is ignored (the command is gone).
  for (const signal of FORWARDED) process.on(signal, () => onSignal(signal))

  const onLost = (_lock, error) => {
    err(`sema-native: warning: the lock on ${rep.target} was lost while the command ran: ${error.message}\n`)
  }
  const r = await acquireWithNotice(target, { ...options, signal: cancel.signal, onLost }, o.verbose, rep.target)
  if (signalBeforeStart) {
    if (r.ok) await r.value.release().catch(() => {})
    return exit(signalExitCode(signalBeforeStart))
  }
  if (!r.ok) {
    const e = r.error
    const timedOut = e.type === ErrorCode.TIMEOUT || e.type === ErrorCode.ALREADY_LOCKED
    const message = timedOut
      ? `Timeout waiting for lock after ${formatDuration(options.timeout ?? 0)}`
      : e.message
    rep.fail({ ...e, message }, `${rep.target}: ${message}${timedOut ? heldBy(e) : ''}`)
    // The one table (a busy lock at the deadline is the wait running out, as TIMEOUT).
    return exit(timedOut ? EXIT_CODES.LOCK_STATE : exitCodeFor(e))
  }
  const lock = r.value

  const status = await new Promise((resolve) => {
    let settled = false
    const settle = (code) => {
      if (!settled) {
        settled = true
        resolve(code)
      }
    }
    // fd 3 of the command: the lock file's descriptor (file locks), so the command holds the lock if we die.
    const held = lock.backend === 'file' && lock.token ? native.heldLockFd(lock.token) : null
    const stdio = held == null ? 'inherit' : ['inherit', 'inherit', 'inherit', held]
    try {
      child = spawn(o.argv[0], o.argv.slice(1), { stdio })
    } catch (e) {
      err(`sema-native: ${o.argv[0]}: ${e.message}\n`)
      settle(126)
      return
    }
    phase = 'running'
    // No descriptor carries the presence mark (Windows): the command becomes the recorded holder.
    if (held == null && lock.backend === 'file' && lock.token && child.pid) {
      const handed = native.handLockTo(lock.token, child.pid)
      if (!handed.ok) err(`sema-native: warning: ${rep.target} stays recorded as this process's lock: ${handed.error.message}\n`)
    }
    child.once('error', (e) => {
      if (e.code === 'ENOENT') err(`sema-native: ${o.argv[0]}: command not found\n`)
      else err(`sema-native: ${o.argv[0]}: ${e.message}\n`)
      settle(e.code === 'ENOENT' ? 127 : 126)
    })
    child.once('exit', (code, signal) => settle(signal ? signalExitCode(signal) : (code ?? 1)))
  })
  phase = 'done'

  try {
    const released = await lock.release()
    if (!released && !lock.signal.aborted) err(`sema-native: warning: the lock on ${rep.target} was already gone\n`)
  } catch (e) {
    err(`sema-native: warning: releasing ${rep.target} failed: ${e.message}\n`)
  }
  return exit(status)
}

module.exports = { run }
