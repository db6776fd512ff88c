'use strict'
// The lowest layer of the test helpers (re-exported by ./file-util.js, which every suite requires): the one factor
// that widens every time bound, real child processes tracked so that none outlives its test file, with hard time
// bounds and a line reader over their stdout, signals sent by pid, and waits on an observable state.

const { spawn } = require('node:child_process')
const path = require('node:path')

const ROOT = path.resolve(__dirname, '..', '..')
const HELPERS = __dirname

/**
 * SEMA_TEST_TIME_SCALE: the one multiplier of the suites' time bounds (a wait's deadline, an upper bound on a
 * measured duration), for machines where everything is slower: CI may widen it, scripts/test-emulated.js sets 4
 * (one emulated Node start costs about 2.5 s of CPU). Bounds only: nothing waits longer when things are fast, and a
 * lower bound (a duration that must have passed) is never scaled. At least 1: it cannot tighten a bound.
 */
function timeScale() {
  return Math.max(1, Number(process.env.SEMA_TEST_TIME_SCALE) || 1)
}

/**
 * `ms` times timeScale(): an upper time bound as this machine should read it. `below`, when given, is the duration
 * the defect under test would take (a poll interval, a timeout the code must beat): the bound widens up to it and
 * never past it, so a widened bound still tells the fix from the defect.
 */
function scaled(ms, below = Infinity) {
  return Math.min(ms * timeScale(), below)
}

/** Every child spawned through this module, so that a failing test never leaves processes behind. */
const live = new Set()

function killAll() {
  for (const child of live) {
    try {
      child.kill('SIGKILL')
    } catch {}
  }
  live.clear()
}
process.on('exit', killAll)

function track(child) {
  live.add(child)
  child.once('exit', () => live.delete(child))
  return child
}

/** Spawns any command (stdin piped, stdout/stderr collected). */
function spawnTracked(cmd, args, options = {}) {
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], ...options })
  track(child)
  child.stdoutText = ''
  child.stderrText = ''
  // Complete stdout lines, kept from the start so that a reader attached later misses none (see lines()).
  child.lineLog = []
  child.lineEnded = false
  child.lineListeners = new Set()
  let partial = ''
  child.stdout.setEncoding('utf8')
  child.stderr.setEncoding('utf8')
  child.stdout.on('data', (d) => {
    child.stdoutText += d
    partial += d
    const parts = partial.split('\n')
    partial = parts.pop()
    if (parts.length) {
      child.lineLog.push(...parts.map((l) => l.replace(/\r$/, '')))
      for (const f of child.lineListeners) f()
    }
  })
  child.stdout.on('end', () => {
    if (partial) child.lineLog.push(partial)
    partial = ''
    child.lineEnded = true
    for (const f of child.lineListeners) f()
  })
  child.stderr.on('data', (d) => (child.stderrText += d))
  child.exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }))
  })
  // Make the stdout/stderr text complete by the time `closed` resolves.
  child.closed = new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal })))
  return child
}

/** Spawns `node __test__/helpers/<script> ...args`. */
function spawnNode(script, args = [], options = {}) {
  return spawnTracked(process.execPath, [path.join(HELPERS, script), ...args.map(String)], {
    cwd: ROOT,
    ...options,
  })
}

/**
 * Resolves {code, signal, stdout, stderr, ms} when the child has exited and its pipes are closed. If it has not
 * exited within `ms` (× timeScale()), kills it with SIGKILL and rejects (the bound is part of the test).
 */
function waitExit(child, ms, what = 'child') {
  const t0 = Date.now()
  ms = scaled(ms)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(
        new Error(
          `${what} (pid ${child.pid}) did not exit within ${ms} ms; killed.\nstdout: ${child.stdoutText}\nstderr: ${child.stderrText}`,
        ),
      )
    }, ms)
    child.closed.then(({ code, signal }) => {
      clearTimeout(timer)
      resolve({ code, signal, stdout: child.stdoutText, stderr: child.stderrText, ms: Date.now() - t0 })
    })
  })
}

/** Runs a node helper to completion within `ms`; resolves its exit result. */
async function runNode(script, args = [], ms = 20000, options = {}) {
  const child = spawnNode(script, args, options)
  if (options.input !== undefined) child.stdin.end(options.input)
  return waitExit(child, ms, script)
}

/**
 * Line reader over a child's stdout: `next(pred, ms)` resolves the first line not yet consumed (by this reader)
 * that matches `pred` (a RegExp or function; without one, the next line); rejects after `ms` (× timeScale()) or when
 * the child's stdout ends first. Lines printed before the reader was created are seen too. `unread()` is how many
 * lines the child has printed that this reader has not consumed (0: it has said nothing new).
 */
function lines(child) {
  const consumed = new Set()
  const waiters = []
  function matches(pred, line) {
    return typeof pred === 'function' ? pred(line) : pred.test(line)
  }
  function pump() {
    for (let i = 0; i < waiters.length; ) {
      const w = waiters[i]
      const idx = child.lineLog.findIndex((l, j) => !consumed.has(j) && matches(w.pred, l))
      if (idx >= 0) {
        consumed.add(idx)
        waiters.splice(i, 1)
        clearTimeout(w.timer)
        w.resolve(child.lineLog[idx])
      } else if (child.lineEnded) {
        waiters.splice(i, 1)
        clearTimeout(w.timer)
        w.reject(
          new Error(
            `child ${child.pid} stdout ended before a line matching ${w.pred}; stdout: ${JSON.stringify(child.stdoutText)} stderr: ${child.stderrText}`,
          ),
        )
      } else i++
    }
    if (!waiters.length) child.lineListeners.delete(pump)
  }
  return {
    unread: () => child.lineLog.length - consumed.size,
    next(pred = () => true, ms = 10000) {
      ms = scaled(ms)
      return new Promise((resolve, reject) => {
        const w = { pred, resolve, reject }
        w.timer = setTimeout(() => {
          const i = waiters.indexOf(w)
          if (i >= 0) waiters.splice(i, 1)
          reject(
            new Error(
              `no line matching ${pred} from child ${child.pid} within ${ms} ms; stdout: ${JSON.stringify(child.stdoutText)} stderr: ${child.stderrText}`,
            ),
          )
        }, ms)
        waiters.push(w)
        child.lineListeners.add(pump)
        pump()
      })
    },
  }
}

/**
 * Resolves the first truthy value of `predicate()` (which may be async), asked at once and then every `intervalMs`;
 * rejects after `timeoutMs` × timeScale(), naming `what` and, when given, `last()` (the state last seen). For a state
 * that has no event of its own (a /proc entry, a server's stats, a counter): where an event exists, await it instead.
 */
async function until(predicate, { timeoutMs = 10000, intervalMs = 10, what = 'condition', last } = {}) {
  const deadline = Date.now() + scaled(timeoutMs)
  for (;;) {
    const value = await predicate()
    if (value) return value
    if (Date.now() > deadline) {
      const seen = last ? `; last seen: ${JSON.stringify(await last())}` : ''
      throw new Error(`${what}: not reached within ${scaled(timeoutMs)} ms${seen}`)
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}

/**
 * Sends `signal` to a child spawned here, by its pid (signalPid()), unless it has already exited: once reaped, its
 * pid may be another process's. For every child that ends when its stdin ends (the holder scripts), and for a second
 * signal to one child: Deno 2.9.6's ChildProcess.kill() sends nothing after its first call (measured: kill('SIGSTOP')
 * then kill('SIGKILL') left the child alive, the second call returned false).
 */
function signalChild(child, signal = 'SIGKILL') {
  if (child.exitCode !== null || child.signalCode !== null) return
  // Windows has no signals: Node's child.kill() terminates the process and its 'exit' names the signal asked for;
  // process.kill(pid) terminates it too, but the exit then names no signal (Wine: `signal` null, 4 file-stale tests).
  if (process.platform === 'win32') child.kill(signal)
  else signalPid(child.pid, signal)
}

/**
 * Sends `signal` to `pid` and nothing else. Not `child.kill()`: Deno 2.9.6's ChildProcess.kill() ends the child's
 * stdin before the signal lands, and a holder ends (releasing its lock) when its stdin ends, so a "crashed" holder
 * left no lock file (measured: 5 of 150 SIGKILLed holders under load; 0 of 150 signalled by pid). A child that has
 * already exited is not an error.
 */
function signalPid(pid, signal) {
  try {
    process.kill(pid, signal)
  } catch (e) {
    if (e.code !== 'ESRCH') throw e
  }
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return e.code === 'EPERM'
  }
}

/** Rejects if `promise` has not settled within `ms` × timeScale() (the bound is the assertion). */
function within(promise, ms, what) {
  let timer
  ms = scaled(ms)
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms)
    }),
  ]).finally(() => clearTimeout(timer))
}

module.exports = {
  ROOT,
  timeScale,
  scaled,
  killAll,
  spawnTracked,
  spawnNode,
  waitExit,
  runNode,
  lines,
  until,
  within,
  signalChild,
  signalPid,
  pidAlive,
}
