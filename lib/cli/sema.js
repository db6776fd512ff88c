'use strict'
// `sema-native sema <args>`: the Rust `sema` / `file-semaphore` CLI (tuulbelt/file-based-semaphore) reproduced
// on our engine: positional syntax, times in seconds, the same text on the same streams, exit codes 0/1/2/3.
//
// Deliberate differences, both about safety rather than output:
// - `--stale` keeps its meaning for locks of other tools, but a lock whose holder is alive is never evicted by
//   age (sema removes it), and one whose holder on this host is dead is reclaimed at once (our engine's rule).
// - `status --json` escapes the tag, so its output is always valid JSON (sema prints it raw).
// Like the semats front end, `try` and `acquire` write sema's own file layout (no host identity of ours), recorded
// for this CLI's parent (the calling shell): the lock stays held after this process and its parent exit, judged
// by age as sema judges it (see takeLock), so no way of running this command hands the lock to the next caller.

const { ErrorCode } = require('../codes')
const fs = require('node:fs')
const path = require('node:path')
const { out, err, exit, api, rustIoText, errnoCode, rustParent, exists } = require('./common')

const VERSION = '0.1.0'

const USAGE = `file-semaphore ${VERSION}

Cross-platform file-based semaphore for process coordination.

USAGE:
    file-semaphore <COMMAND> <LOCK_PATH> [OPTIONS]

COMMANDS:
    acquire     Acquire a lock (blocks until available or timeout)
    try         Try to acquire a lock without blocking
    release     Release a lock (force remove lock file)
    status      Show lock status and holder information
    wait        Wait for a lock to be released

OPTIONS:
    --timeout <SECONDS>     Timeout for acquire/wait operations (default: no timeout)
    --stale <SECONDS>       Stale lock timeout (default: 3600)
    --tag <STRING>          Tag to include in lock info
    --json                  Output status in JSON format
    --quiet, -q             Suppress non-essential output
    --help, -h              Show this help message
    --version, -V           Show version

EXAMPLES:
    # Try to acquire a lock (non-blocking)
    file-semaphore try /tmp/my.lock

    # Acquire a lock with 10 second timeout
    file-semaphore acquire /tmp/my.lock --timeout 10

    # Check lock status
    file-semaphore status /tmp/my.lock

    # Release/force-remove a lock
    file-semaphore release /tmp/my.lock

    # Wait for a lock to be released
    file-semaphore wait /tmp/my.lock --timeout 30

EXIT CODES:
    0   Success (lock acquired/released, or lock is free)
    1   Lock already held (for try/acquire with timeout)
    2   Invalid arguments or usage error
    3   IO or system error

`

const COMMANDS = ['acquire', 'try', 'release', 'status', 'wait']
const POLL_MS = 100
const U64_MAX = (1n << 64n) - 1n
const U32_MAX = (1n << 32n) - 1n

class SemaUsage extends Error {}

/** Rust's `u64::from_str`: digits with an optional leading `+`, no spaces, no overflow. Returns a BigInt or null. */
function parseUnsigned(text, max) {
  if (!/^\+?[0-9]+$/.test(text)) return null
  const n = BigInt(text.startsWith('+') ? text.slice(1) : text)
  return n <= max ? n : null
}

/** Seconds (BigInt) as ms for our API; beyond what a timer can hold it is as good as forever. */
function secondsToMs(secs) {
  const ms = secs * 1000n
  return ms > BigInt(Number.MAX_SAFE_INTEGER) ? Number.POSITIVE_INFINITY : Number(ms)
}

function parse(args) {
  if (args.length < 1) throw new SemaUsage('missing command')
  // --help / --version win wherever they are, even as the value of --tag (as sema).
  for (const arg of args) {
    if (arg === '--help' || arg === '-h') return { help: true }
    if (arg === '--version' || arg === '-V') return { version: true }
  }
  if (args.length < 2) throw new SemaUsage('missing lock path')
  const [command, lockPath] = args
  if (!COMMANDS.includes(command)) throw new SemaUsage(`unknown command: ${command}`)
  const o = { command, lockPath, timeout: null, stale: 3600n, tag: undefined, json: false, quiet: false }
  for (let i = 2; i < args.length; i++) {
    const arg = args[i]
    switch (arg) {
      case '--timeout': {
        if (++i >= args.length) throw new SemaUsage('--timeout requires a value')
        const v = parseUnsigned(args[i], U64_MAX)
        if (v === null) throw new SemaUsage('invalid timeout value')
        o.timeout = v
        break
      }
      case '--stale': {
        if (++i >= args.length) throw new SemaUsage('--stale requires a value')
        const v = parseUnsigned(args[i], U64_MAX)
        if (v === null) throw new SemaUsage('invalid stale timeout value')
        o.stale = v === 0n ? null : v
        break
      }
      case '--tag':
        if (++i >= args.length) throw new SemaUsage('--tag requires a value')
        o.tag = args[i]
        break
      case '--json':
        o.json = true
        break
      case '--quiet':
      case '-q':
        o.quiet = true
        break
      default:
        throw new SemaUsage(`unknown option: ${arg}`)
    }
  }
  return o
}

/**
 * sema's `LockInfo::parse` over the raw bytes (strict UTF-8, `lines()`, `trim()`, u32 pid, u64 timestamp), in Rust
 * (crates/sema-core lockfile/format.rs). Returns {pid, timestamp (BigInt), tag|null} or null.
 */
function parseStrict(bytes) {
  const info = require('../native').semaLockInfo(bytes)
  return info ? { pid: info.pid, timestamp: info.timestamp, tag: info.tag ?? null } : null
}

/** sema's `lock_info()`: null when the file is missing, unreadable or does not parse. */
function readInfo(lockPath) {
  try {
    return parseStrict(fs.readFileSync(lockPath))
  } catch {
    return null
  }
}

/** `Semaphore::new`'s checks (release, status and wait): a message for `Error: Invalid path: …`, or null. */
function pathProblem(lockPath) {
  if (lockPath === '') return 'path cannot be empty'
  const parent = rustParent(lockPath)
  if (parent && !exists(parent)) return `parent directory does not exist: ${parent}`
  return null
}

/**
 * `IO error: <text> (os error N)` from one of our API's failures: from its `errno` (the OS's own number, so Rust's
 * text on every platform) where it has one, else from a Node error code.
 */
function ioError(error) {
  if (typeof error.errno === 'number') return `IO error: ${require('../native').osErrorText(error.errno)}`
  return `IO error: ${rustIoText(errnoCode(error), error.message)}`
}

/** An absolute path, so that no target string sema treats as a file can ever be read as a URL. */
function fileTarget(lockPath) {
  return path.resolve(lockPath)
}

/**
 * `try` (wait false) / `acquire`: the lock in sema's own file layout (pid, timestamp, tag: no host identity of
 * ours), recorded for this CLI's parent. Every reader, ours included, then judges it as sema and semats do (by
 * age; semats' rule adds "and its pid is not running"), so it stays held after this process and its parent exit,
 * as the real sema's does: whatever runs this command (an npm script, `sh -c`, `$( )`, xargs, make), the next
 * caller is refused. Our own format would make the lock of a gone parent reclaimable at once.
 */
async function takeLock(o, wait) {
  api() // loads the addon first (and with it the exit hook's module)
  const { acquireFile } = require('../file/lock')
  const { PLAIN_FORMAT } = require('../file/engine')
  const timeout = o.timeout === null ? null : secondsToMs(o.timeout)
  const options = {
    pid: process.ppid,
    tag: o.tag,
    staleTimeout: o.stale === null ? null : secondsToMs(o.stale),
    retryInterval: POLL_MS,
    timeout: timeout === Number.POSITIVE_INFINITY ? null : timeout,
    [PLAIN_FORMAT]: true,
  }
  const target = fileTarget(o.lockPath)
  return acquireFile(target, target, options, { wait })
}

/** What sema does when the lock file cannot be created at all (a missing directory gives ENOENT, exit 3). */
function createProblem(lockPath) {
  if (lockPath === '') return 'ENOENT'
  const parent = rustParent(lockPath)
  if (parent && !exists(parent)) return 'ENOENT'
  return null
}

async function cmdTry(o) {
  const problem = createProblem(o.lockPath)
  if (problem) {
    err(`Error: IO error: ${rustIoText(problem)}\n`)
    return 3
  }
  const r = await takeLock(o, false)
  if (r.ok) {
    if (!o.quiet) out(`Lock acquired: ${o.lockPath}\n`)
    return 0
  }
  if (r.error.type === ErrorCode.ALREADY_LOCKED) {
    const info = readInfo(o.lockPath)
    if (o.json) {
      out(`{"locked":true,"pid":${info ? info.pid : 0},"since":${info ? info.timestamp : 0}}\n`)
    } else if (!o.quiet) {
      err('Lock already held\n')
      if (info) err(`  Holder PID: ${info.pid}\n`)
    }
    return 1
  }
  err(`Error: ${ioError(r.error)}\n`)
  return 3
}

async function cmdAcquire(o) {
  const problem = createProblem(o.lockPath)
  if (problem) {
    err(`Error: IO error: ${rustIoText(problem)}\n`)
    return 3
  }
  const r = await takeLock(o, true)
  if (r.ok) {
    if (!o.quiet) out(`Lock acquired: ${o.lockPath}\n`)
    return 0
  }
  if (r.error.type === ErrorCode.TIMEOUT || r.error.type === ErrorCode.ALREADY_LOCKED) {
    if (!o.quiet) err('Timeout waiting for lock\n')
    return 1
  }
  err(`Error: ${ioError(r.error)}\n`)
  return 3
}

async function cmdRelease(o) {
  const problem = pathProblem(o.lockPath)
  if (problem) {
    err(`Error: Invalid path: ${problem}\n`)
    return 3
  }
  // sema's release is always forced, and succeeds when there is nothing to release.
  const r = await api().release(fileTarget(o.lockPath), { force: true })
  if (!r.ok && r.error.type !== ErrorCode.NOT_LOCKED) {
    err(`Error: ${ioError(r.error)}\n`)
    return 3
  }
  if (!o.quiet) out(`Lock released: ${o.lockPath}\n`)
  return 0
}

function cmdStatus(o) {
  const problem = pathProblem(o.lockPath)
  if (problem) {
    err(`Error: Invalid path: ${problem}\n`)
    return 3
  }
  const locked = exists(o.lockPath)
  const info = locked ? readInfo(o.lockPath) : null
  if (o.json) {
    if (info) {
      const tag = info.tag === null ? 'null' : JSON.stringify(info.tag)
      out(`{"locked":true,"pid":${info.pid},"timestamp":${info.timestamp},"tag":${tag}}\n`)
    } else {
      out('{"locked":false}\n')
    }
  } else if (locked) {
    let text = `Lock status: LOCKED\n  Path: ${o.lockPath}\n`
    if (info) {
      text += `  PID: ${info.pid}\n  Timestamp: ${info.timestamp}\n`
      if (info.tag !== null) text += `  Tag: ${info.tag}\n`
      if (process.platform !== 'win32') {
        // sema checks /proc/<pid>: pid 0 is no process there (kill(0, 0) would answer for a process group).
        text += `  Process running: ${info.pid > 0 && api().isProcessRunning(info.pid) ? 'yes' : 'no'}\n`
      }
    }
    out(text)
  } else {
    out(`Lock status: FREE\n  Path: ${o.lockPath}\n`)
  }
  return locked ? 1 : 0
}

async function cmdWait(o) {
  const problem = pathProblem(o.lockPath)
  if (problem) {
    err(`Error: Invalid path: ${problem}\n`)
    return 3
  }
  // sema polls every 100 ms for the file to be gone and never breaks a stale lock itself: the engine's event-driven
  // wait with staleness off (the file's existence only), looking again every 100 ms as sema does.
  const timeout = o.timeout === null ? null : secondsToMs(o.timeout)
  const r = await api().wait(fileTarget(o.lockPath), {
    staleTimeout: null,
    retryInterval: POLL_MS,
    timeout: timeout === Number.POSITIVE_INFINITY ? null : timeout,
  })
  if (r.ok) {
    if (!o.quiet) out(`Lock is free: ${o.lockPath}\n`)
    return 0
  }
  if (r.error.type !== ErrorCode.TIMEOUT) {
    err(`Error: ${r.error.message}\n`)
    return 3
  }
  if (!o.quiet) err('Timeout waiting for lock to be released\n')
  return 1
}

async function main(args) {
  let o
  try {
    o = parse(args)
  } catch (e) {
    if (!(e instanceof SemaUsage)) throw e
    err(`Error: ${e.message}\n\n${USAGE}`)
    return exit(2)
  }
  if (o.help) {
    err(USAGE)
    return exit(0)
  }
  if (o.version) {
    out(`file-semaphore ${VERSION}\n`)
    return exit(0)
  }
  let code
  try {
    switch (o.command) {
      case 'try':
        code = await cmdTry(o)
        break
      case 'acquire':
        code = await cmdAcquire(o)
        break
      case 'release':
        code = await cmdRelease(o)
        break
      case 'status':
        code = cmdStatus(o)
        break
      default:
        code = await cmdWait(o)
    }
  } catch (e) {
    err(`Error: ${e && e.message ? e.message : e}\n`)
    code = 3
  }
  // A lock taken by try/acquire is recorded for the calling shell: the package's exit hook leaves it in place.
  return exit(code)
}

module.exports = { main, USAGE, VERSION, parse, parseStrict }
