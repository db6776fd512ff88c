'use strict'
// `sema-native semats <args>`: the semats CLI (tuulbelt/file-based-semaphore-ts) reproduced on our engine.
// Same command line quirks, the same text on the same streams, the same JSON layout and exit codes 0/1.
//
// The lock file is semats' layout exactly (PlainSemaphore: no host identity of ours), so every reader judges it
// by semats' rule (stale once older than 1 h with its pid not running) and it outlives this CLI and its parent
// however the command is run; our own format would make a gone holder's lock reclaimable at once.
// One deliberate difference: the pid recorded in the lock file is this CLI's parent (the calling shell), not
// the short-lived CLI process. Everything the user sees keeps semats' meaning: `release` without --force is still refused (the lock is not the CLI process's own) and
// `isOwnedByCurrentProcess` is still false.

const { ErrorCode } = require('../codes')
const { out, err, exit, api } = require('./common')

const USAGE = `Usage: semats <command> [options]

Commands:
  acquire <path>    Acquire a lock (blocks until available)
  try-acquire <path> Try to acquire a lock (non-blocking)
  release <path>    Release a lock
  status <path>     Show lock status
  clean <path>      Clean stale locks

Options:
  -t, --tag <tag>       Tag/description for the lock
  --timeout <ms>        Timeout in milliseconds (for acquire)
  -f, --force           Force operation (for release)
  -j, --json            Output in JSON format
  -v, --verbose         Verbose output
  -h, --help            Show this help message

Examples:
  semats acquire /tmp/my-lock.lock
  semats try-acquire /tmp/my-lock.lock --tag "build process"
  semats status /tmp/my-lock.lock --json
  semats release /tmp/my-lock.lock
  semats clean /tmp/my-lock.lock
`

/** semats' stale timeout (its CLI has no flag for it). */
const STALE_MS = 3_600_000

/**
 * semats' argument scan: words in any order (first = command, second = path, more ignored), unknown dashes
 * ignored, a value flag at the end ignored, and -h/--help answered the moment it is seen.
 */
function parse(args) {
  const options = {}
  let command = ''
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]
    if (arg === '-h' || arg === '--help') return { help: true }
    if (arg === '-t' || arg === '--tag') {
      i++
      if (i < args.length) options.tag = args[i]
    } else if (arg === '--timeout') {
      i++
      if (i < args.length) options.timeout = Number.parseInt(args[i], 10)
    } else if (arg === '-f' || arg === '--force') {
      options.force = true
    } else if (arg === '-j' || arg === '--json') {
      options.json = true
    } else if (arg === '-v' || arg === '--verbose') {
      options.verbose = true
    } else if (!arg.startsWith('-')) {
      // An empty word leaves the slot empty, so the next word fills it again (as semats).
      if (!command) command = arg
      else if (!options.path) options.path = arg
    }
  }
  return { command, options }
}

/** semats' output: JSON.stringify(…, null, 2), or one `key: value` line per entry (objects inline as JSON). */
function format(data, json) {
  if (json) return JSON.stringify(data, null, 2)
  return Object.entries(data)
    .map(([k, v]) => {
      if (v !== null && typeof v === 'object') return `${k}: ${JSON.stringify(v)}`
      return `${k}: ${v}`
    })
    .join('\n')
}

/** A failure in the key layout semats' own results have (keys present even when undefined). */
function failed(error) {
  const e = { status: 'failed', type: error.type, message: error.message }
  switch (error.type) {
    case ErrorCode.ALREADY_LOCKED:
      e.holderPid = error.holderPid
      e.lockedSince = error.lockedSince
      break
    case ErrorCode.PERMISSION_DENIED:
      e.holderPid = error.holderPid
      break
    case ErrorCode.NOT_LOCKED:
    case ErrorCode.TIMEOUT:
      break
    case ErrorCode.IO_ERROR:
      e.cause = error.cause instanceof Error ? error.cause : undefined
      break
    default:
      for (const [k, v] of Object.entries(error)) if (!(k in e)) e[k] = v
  }
  return e
}

function acquired(value, info, tag) {
  // semats answers with the LockInfo it was given: the tag unsanitised, and the `tag` key always there.
  return { status: 'acquired', pid: info.pid, timestamp: value.timestamp ?? info.timestamp, tag }
}

async function main(args) {
  const { help, command, options } = parse(args)
  if (help) {
    out(USAGE)
    return exit(0)
  }
  if (!command) {
    out(USAGE)
    return exit(1)
  }
  if (!options.path) {
    err('Error: Lock path is required\n')
    return exit(1)
  }
  const json = options.json ?? false
  const { isLockStale } = api()
  // semats' file layout exactly (no host identity of ours): the lock outlives this CLI and its parent as
  // semats' does, judged by its rule by every reader (see PlainSemaphore).
  const { PlainSemaphore: Semaphore, kAcquireWithInfo } = require('../file/semats')
  let code = 0
  try {
    const sem = new Semaphore(options.path)
    const owner = { pid: process.ppid, timestamp: Math.floor(Date.now() / 1000), tag: options.tag }
    switch (command) {
      case 'acquire': {
        if (options.verbose) err(`[INFO] Acquiring lock: ${options.path}\n`)
        const timeout = options.timeout === undefined ? null : options.timeout
        // semats tries every 100 ms; the engine waits for the file events (and looks every 100 ms too).
        const r = await sem[kAcquireWithInfo](owner, timeout)
        if (r.ok) {
          out(format(acquired(r.value, owner, options.tag), json) + '\n')
        } else {
          err(format(failed(r.error), json) + '\n')
          code = 1
        }
        break
      }
      case 'try-acquire': {
        if (options.verbose) err(`[INFO] Trying to acquire lock: ${options.path}\n`)
        const r = sem.tryAcquireWithInfo(owner)
        if (r.ok) {
          out(format(acquired(r.value, owner, options.tag), json) + '\n')
        } else {
          out(format(failed(r.error), json) + '\n')
          code = 1
        }
        break
      }
      case 'release': {
        if (options.verbose) err(`[INFO] Releasing lock: ${options.path}\n`)
        const r = sem.release(options.force ?? false)
        if (r.ok) {
          out(format({ status: 'released' }, json) + '\n')
        } else {
          err(format(failed(r.error), json) + '\n')
          code = 1
        }
        break
      }
      case 'status': {
        // semats: `locked` means "the file parses", and staleness is the age rule alone. Ownership is the
        // engine's rule (token and host identity; the pid alone only for a file without identity), from the
        // same read of the file.
        const s = sem.status()
        const info = s.info ? { pid: s.info.pid, timestamp: s.info.timestamp, tag: s.info.tag } : null
        const locked = info !== null
        const status = {
          locked,
          info,
          isStale: locked ? isLockStale(info, STALE_MS) : false,
          isOwnedByCurrentProcess: locked && s.isOwnedByCurrentProcess,
        }
        out(format(status, json) + '\n')
        break
      }
      case 'clean': {
        if (options.verbose) err(`[INFO] Cleaning stale locks: ${options.path}\n`)
        out(format({ cleaned: sem.cleanStale() }, json) + '\n')
        break
      }
      default:
        err(`Unknown command: ${command}\n`)
        out(USAGE)
        code = 1
    }
  } catch (e) {
    err(`Error: ${e instanceof Error ? e.message : e}\n`)
    code = 1
  }
  return exit(code)
}

module.exports = { main, USAGE, parse, format }
