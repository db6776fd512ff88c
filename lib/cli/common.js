'use strict'
// Helpers shared by the three CLI front ends (lib/cli/own.js, semats.js, sema.js): output that is never lost on
// exit, durations with unit suffixes, the text of OS errors as Rust prints them, and how a target is shown.

const { ErrorCode } = require('../codes')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

/** A bad command line. `exitCode` is the front end's usage-error code. */
class UsageError extends Error {
  constructor(message, exitCode = 2) {
    super(message)
    this.name = 'UsageError'
    this.exitCode = exitCode
  }
}

// A reader that went away (`sema-native status | head -0`) must not turn into an unhandled EPIPE.
for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {})

function out(text) {
  process.stdout.write(text)
}

function err(text) {
  process.stderr.write(text)
}

/**
 * Exits with `code` once stdout and stderr are flushed (writes to pipes are asynchronous on some platforms, so a
 * bare process.exit() can cut the output). Never returns.
 */
function exit(code) {
  let pending = 2
  const done = () => {
    if (--pending === 0) process.exit(code)
  }
  process.stdout.write('', done)
  process.stderr.write('', done)
  return new Promise(() => {})
}

// The option table lives in the native addon (crates/sema-core/src/options.rs, read by lib/validate.js), so it is
// loaded on first use, not with this module: `--help` and `--version` must work where the addon cannot load.
const table = () => require('../validate')

/** The own CLI's options that take a value, by the option table's CLI_FLAGS (crates/sema-core/src/options.rs). */
function valueFlags() {
  return Object.keys(table().CLI_FLAGS)
}

/** `--timout` → `unknown option: --timout (did you mean --timeout?)`, the nearest of `known` (flag names). */
function unknownFlag(shown, rawName, known) {
  const near = rawName.startsWith('--') ? table().nearest(rawName.slice(2), known) : null
  return `unknown option: ${shown}${near ? ` (did you mean --${near}?)` : ''}`
}

/**
 * The number a value flag's text parsed to, checked by its kind in the table (`--pid` a process id, `--limit` 1 to
 * 10^9): true when it is in range.
 */
function flagInRange(name, n) {
  const k = table().kindOf(table().CLI_FLAGS, name)
  return typeof n === 'number' && n >= (k.min ?? -Infinity) && n <= (k.max ?? Infinity) && (!k.integer || Number.isSafeInteger(n))
}

const UNITS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/**
 * `--timeout` / `--stale` text → `{ ms }`, or `{ problem }` saying why it is refused. A time takes a unit: `500ms`,
 * `2s`, `1.5s`, `1m`, `1h`; a bare `0` needs none. A bare number other than 0 is refused ("did you mean 10s?"): it
 * is seconds to flock -w and to sema's --timeout, and milliseconds to semats' and to this CLI's first releases, so
 * either reading would surprise someone, and silently: 10 read as ms gives up at once, 5000 read as s waits 83 min.
 * A refusal costs one retry and says which unit to write. (docs/cli.md "Times" says the same.)
 */
function parseDuration(text) {
  const m = /^(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)?$/.exec(String(text).trim())
  if (!m) return { problem: `'${text}' is not a time (use e.g. 500ms, 2s, 1m, 1h)` }
  if (m[2] === undefined && Number(m[1]) !== 0) {
    return { problem: `'${text}' has no unit (did you mean ${m[1]}s? for milliseconds write ${m[1]}ms)` }
  }
  const ms = Number(m[1]) * UNITS[m[2] ?? 'ms']
  return Number.isFinite(ms) ? { ms: Math.round(ms) } : { problem: `'${text}' is too long a time` }
}

/** Human form of a duration in ms, in the largest unit that divides it: `250ms`, `2s`, `3m`, `1h`. */
function formatDuration(ms) {
  if (ms > 0 && ms % 3_600_000 === 0) return `${ms / 3_600_000}h`
  if (ms > 0 && ms % 60_000 === 0) return `${ms / 60_000}m`
  if (ms > 0 && ms % 1000 === 0) return `${ms / 1000}s`
  return `${ms}ms`
}

/**
 * `No such file or directory (os error 2)`: how Rust's io::Error (so `sema`) shows an OS error, from a Node error
 * code. The text comes from Rust's standard library in the addon, the one that prints it for `sema`. On Windows
 * the numbers Node gives (`os.constants.errno`) are POSIX-style, not the system error codes Rust shows, so the
 * text there is libuv's.
 */
function rustIoText(code, fallback) {
  const errno = code ? os.constants.errno[code] : undefined
  if (errno === undefined) return fallback
  if (process.platform !== 'win32') return require('../native').osErrorText(errno)
  const entry = require('node:util').getSystemErrorMap().get(-errno)
  const text = entry ? entry[1].charAt(0).toUpperCase() + entry[1].slice(1) : code
  return `${text} (os error ${errno})`
}

/** The errno code (`ENOENT`) inside an error value or its cause/message, if any. */
function errnoCode(error) {
  if (!error) return undefined
  if (typeof error.errnoName === 'string') return error.errnoName
  if (error.cause && typeof error.cause.code === 'string') return error.cause.code
  if (typeof error.code === 'string' && /^E[A-Z0-9]+$/.test(error.code)) return error.code
  const m = /\b(E[A-Z]{2,}[A-Z0-9]*)\b/.exec(error.message ?? '')
  if (m && os.constants.errno[m[1]] !== undefined) return m[1]
  return undefined
}

/** `dflockd://` targets shown without their auth token (it would otherwise end up in logs and JSON). */
function displayTarget(target) {
  return require('../dflockd/url').redactTarget(target)
}

/**
 * The command line of process `pid` as words, or null when it cannot be read: the engine's (Linux /proc; Windows, the
 * system's copy split as the C runtime splits it), elsewhere `ps` (whose answer is one line, split at blanks).
 */
function processArgs(pid) {
  try {
    const words = require('../native').processArgs(pid)
    if (words) return words
  } catch {}
  if (process.platform === 'win32' || process.platform === 'linux') return null
  const r = require('node:child_process').spawnSync('ps', ['-o', 'args=', '-p', String(pid)], { encoding: 'utf8' })
  return r.status === 0 && r.stdout.trim() ? r.stdout.trim().split(/\s+/) : null
}

/** The file name of a program path (either separator), lower case, without `.exe`. */
function programName(arg) {
  return String(arg ?? '').split(/[\\/]/).pop().toLowerCase().replace(/\.exe$/, '')
}

/**
 * `shell flag 'command'` when `args` (a process's command line) is a shell started to run one command and nothing
 * after it, else null:
 * - `sh -c 'x'` (and bash, dash, zsh, ksh, mksh, ash): no `;`, `&`, `|`, newline, backquote or `$(` in the command;
 * - `cmd.exe /c x` (npm's `cmd.exe /d /s /c "x"` too): no `&` (also `&&`), `|` or newline; `/k` keeps the shell;
 * - `powershell -Command x` / `pwsh -c x` (-Command and its prefixes): no `;`, `&`, `|` or newline.
 * A command with one of those goes on after this one (`x && build`), and keeps its shell alive.
 */
function oneCommandShell(args) {
  const name = programName(args[0])
  let flag
  let command
  let separators
  if (/^-?(sh|bash|dash|zsh|ksh|mksh|ash)$/.test(name)) {
    const c = args.findIndex((a, i) => i > 0 && /^-[a-z]*c[a-z]*$/.test(a))
    if (c < 0 || c + 1 >= args.length) return null
    ;[flag, command, separators] = [args[c], args[c + 1], /[;&|\n`]|\$\(/]
  } else if (name === 'cmd') {
    const c = args.findIndex((a, i) => i > 0 && /^\/c$/i.test(a))
    if (c < 0 || c + 1 >= args.length) return null
    ;[flag, command, separators] = [args[c], args.slice(c + 1).join(' '), /[&|\n]/]
  } else if (name === 'powershell' || name === 'pwsh') {
    const c = args.findIndex((a, i) => i > 0 && /^[-/]c(o(m(m(a(n(d)?)?)?)?)?)?$/i.test(a))
    if (c < 0 || c + 1 >= args.length || args[c + 1] === '-') return null
    ;[flag, command, separators] = [args[c], args.slice(c + 1).join(' '), /[;&|\n]/]
  } else {
    return null
  }
  return separators.test(command) ? null : `${args[0]} ${flag} '${command}'`
}

/**
 * Why `pid`, as the default owner of a lock taken from the command line (this command's parent), would not keep it
 * (null if it would). Such a parent runs only until this command returns, so the lock would be free a moment after
 * we report it taken:
 * - npm's own process (`npx`, `npm exec`, and `npm run` where the script's shell exec'ed us);
 * - a shell started to run this one command and nothing after it (`sh -c 'sema-native acquire x'`: an npm script
 *   line, a make recipe line; `cmd.exe /c`, `powershell -Command` on Windows). A line that goes on
 *   (`acquire x && build`) keeps its shell alive, and is fine;
 * - xargs, which runs its commands one after another and exits after the last.
 */
function shortLivedOwner(pid) {
  const args = processArgs(pid)
  if (!args) return null
  const npm = args.slice(0, 3).some((a) => /(^|[\\/])(npm|npx)(\.cmd|\.exe)?$/i.test(a) || /[\\/]np[mx]-cli\.js$/.test(a))
  if (npm) return `its parent process (pid ${pid}) is npm (${args.slice(0, 4).join(' ')}), which exits as soon as this command returns`
  if (programName(args[0]) === 'xargs') {
    return `its parent process (pid ${pid}) is xargs, which exits once its last command returns`
  }
  const shell = oneCommandShell(args)
  if (shell) {
    return `its parent process (pid ${pid}) is a shell that runs only this command (${shell}), which exits as soon as this command returns`
  }
  return null
}

/** The parent of process `pid`, or null when it cannot be read (Linux: /proc/<pid>/stat; elsewhere `ps`). */
function parentPid(pid) {
  if (process.platform === 'win32') return null
  if (process.platform === 'linux') {
    try {
      // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so read after the last ')'.
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      return Number.isSafeInteger(ppid) && ppid > 0 ? ppid : null
    } catch {
      return null
    }
  }
  const r = require('node:child_process').spawnSync('ps', ['-o', 'ppid=', '-p', String(pid)], { encoding: 'utf8' })
  const ppid = Number(r.stdout && r.stdout.trim())
  return r.status === 0 && Number.isSafeInteger(ppid) && ppid > 0 ? ppid : null
}

/**
 * Whether `pid` is a subshell of `parent`: a copy of that shell made by fork() without exec(), as shells run
 * `$( … )` and backquotes, `( … )`, each element of a pipeline and a background `&`. It ends as soon as its commands
 * do (`x=$(sema-native try-acquire L || echo busy)`: at once), so it cannot own a lock; `$$` in it is still the
 * parent's pid. Told by: a shell whose command line is its parent's, and (Linux) whose auxiliary vector, which the
 * kernel writes at exec() and fork() copies, is its parent's byte for byte: a shell exec'ed from that shell
 * (`bash` typed in bash) has the same command line but its own auxv.
 */
function isSubshellOf(pid, parent) {
  const args = processArgs(pid)
  if (!args || !/^-?(sh|bash|dash|zsh|ksh|mksh|ash|busybox)$/.test(programName(args[0]))) return false
  const parentArgs = processArgs(parent)
  if (!parentArgs || parentArgs.length !== args.length || parentArgs.some((a, i) => a !== args[i])) return false
  if (process.platform !== 'linux') return true
  try {
    return fs.readFileSync(`/proc/${pid}/auxv`).equals(fs.readFileSync(`/proc/${parent}/auxv`))
  } catch {
    return true // unreadable (another user's shell, hidepid): the command lines decide
  }
}

/**
 * The process a lock taken from the command line is recorded for by default: this command's parent, or, when that
 * parent is a subshell (isSubshellOf), the shell it was forked from, the one `$$` names there.
 */
function defaultOwner() {
  let pid = process.ppid
  for (let depth = 0; depth < 64; depth++) {
    const up = parentPid(pid)
    if (up === null || up === 1 || !isSubshellOf(pid, up)) break
    pid = up
  }
  return pid
}

/** ` since <ISO time> (<n>s ago)` for a lock file's `timestamp=`, or '' when unknown. */
function since(ts) {
  if (typeof ts !== 'number') return ''
  const age = Math.max(0, Math.floor(Date.now() / 1000) - ts)
  return ` since ${new Date(ts * 1000).toISOString()} (${age}s ago)`
}

/**
 * The holder facts of a failure for `--json` (the engine's read when it refused: ALREADY_LOCKED, TIMEOUT of a lock
 * file; PERMISSION_DENIED's holderPid): every key always present, null where unknown.
 */
function holderFields(error) {
  return {
    holderPid: error.holderPid ?? null,
    lockedSince: error.lockedSince ?? null,
    holderTag: error.holderTag ?? null,
    isOwnedByCurrentProcess: error.isOwnedByCurrentProcess ?? null,
  }
}

/** ` (held by pid N tagged "t" since …; by this process)` after a TIMEOUT message, or '' when the holder is unknown. */
function heldBy(error) {
  if (typeof error.holderPid !== 'number') return ''
  const tag = typeof error.holderTag === 'string' ? ` tagged ${JSON.stringify(error.holderTag)}` : ''
  const mine = error.isOwnedByCurrentProcess === true ? '; by this process' : ''
  return ` (held by pid ${error.holderPid}${tag}${since(error.lockedSince)}${mine})`
}

/**
 * The `reclaimable:` line of a file lock's status (without its indent): when and by which rule the lock becomes
 * reclaimable (`reclaimRule`, `reclaimableAt` of the target API's status; `pid` the recorded holder).
 */
function reclaimText({ reclaimRule: rule, reclaimableAt: at, isStale, pid }) {
  if (isStale) return 'now (stale: the next acquire takes it)'
  const when = () => {
    const left = at - Math.floor(Date.now() / 1000)
    return `${new Date(at * 1000).toISOString()} (${left > 0 ? `in ${left}s` : 'already past'})`
  }
  switch (rule) {
    case 'holder-dead':
      return `at once when pid ${pid} exits (a lock of this host: never while it runs)`
    case 'age-and-pid-not-running':
      return `from ${when()} if pid ${pid} is not running then (a lock of another tool: semats' rule, older than the stale timeout and its pid not running)`
    case 'heartbeat-unchanged':
      return `from ${when()} if its file stays unchanged until then (a lock from another host: heartbeat unchanged for 6 × its period, observed locally; every beat restarts the count)`
    case 'unparseable-age':
      return `from ${when()} (the file cannot be parsed: by its modification time)`
    case 'never':
      return 'never by age (no stale timeout, or a symbolic link): release it by hand'
    default:
      return null
  }
}

/**
 * The own CLI's exit codes, for every command (docs/cli.md "Exit codes" and `--help` say the same):
 * - 1: the lock's state: busy, a wait ran out, `release` refused because another owner holds the lock, nothing to
 *   release;
 * - 2: a usage error;
 * - 3: anything else: I/O, connection, protocol, a path that cannot be used, and the OS refusing us.
 * (`run` passes its command's status through once the command has started.)
 */
const EXIT_CODES = Object.freeze({ OK: 0, LOCK_STATE: 1, USAGE: 2, ERROR: 3 })

/**
 * The one table from an error's code (lib/codes.js, the engine's list) to the exit code. Every code is listed, so a
 * code added to the list fails __test__/cli-exit-codes.test.js until it is placed here.
 */
const EXIT_CODE_OF = Object.freeze({
  [ErrorCode.ALREADY_LOCKED]: EXIT_CODES.LOCK_STATE,
  [ErrorCode.TIMEOUT]: EXIT_CODES.LOCK_STATE,
  [ErrorCode.NOT_LOCKED]: EXIT_CODES.LOCK_STATE,
  [ErrorCode.LIMIT_MISMATCH]: EXIT_CODES.LOCK_STATE,
  // The lock's owner refused (the engine's LockError::PermissionDenied). The OS refusing us has this code too, and
  // carries the OS's `errno`: exitCodeFor places it with the other OS failures.
  [ErrorCode.PERMISSION_DENIED]: EXIT_CODES.LOCK_STATE,
  [ErrorCode.INVALID_ARGUMENT]: EXIT_CODES.USAGE,
  [ErrorCode.INVALID_PATH]: EXIT_CODES.ERROR,
  [ErrorCode.UNSUPPORTED_FILE_SYSTEM]: EXIT_CODES.ERROR,
  [ErrorCode.PATH_TRAVERSAL]: EXIT_CODES.ERROR,
  [ErrorCode.IO_ERROR]: EXIT_CODES.ERROR,
  [ErrorCode.PARSE_ERROR]: EXIT_CODES.ERROR,
  [ErrorCode.ABORTED]: EXIT_CODES.ERROR,
  [ErrorCode.LOCK_LOST]: EXIT_CODES.ERROR,
  [ErrorCode.CONNECTION_ERROR]: EXIT_CODES.ERROR,
  [ErrorCode.TLS_MISMATCH]: EXIT_CODES.ERROR,
  [ErrorCode.AUTH_FAILED]: EXIT_CODES.ERROR,
  [ErrorCode.PROTOCOL_ERROR]: EXIT_CODES.ERROR,
  [ErrorCode.SERVER_ERROR]: EXIT_CODES.ERROR,
  [ErrorCode.UNSUPPORTED_PLATFORM]: EXIT_CODES.ERROR,
  [ErrorCode.NATIVE_LOAD_FAILED]: EXIT_CODES.ERROR,
})

/**
 * The exit code of a failure (`{type, errno?}`: a SemaphoreResult's error, or a thrown LockError's `code` as
 * `type`), by its code in EXIT_CODE_OF; a failure the OS reported (it carries `errno`) is an error (3) whatever its
 * code. Never by message text.
 */
function exitCodeFor(error) {
  if (typeof error.errno === 'number') return EXIT_CODES.ERROR
  return EXIT_CODE_OF[error.type] ?? EXIT_CODES.ERROR
}

/** The core's answer (lib/dflockd/url.js). */
function isDflockd(target) {
  return require('../dflockd/url').isDflockdTarget(target)
}

/** Rust's `Path::parent` (`null` for a root, `''` for a bare name): the directory `sema` checks. */
function rustParent(p) {
  return require('../native').pathParent(p)
}

function exists(p) {
  try {
    fs.statSync(p)
    return true
  } catch {
    return false
  }
}

/**
 * The loader's failures (lib/native.js): the addon is missing or cannot load on this platform. Their message says
 * what to do; the CLI prints it alone, without a stack trace.
 */
const LOADER_CODES = new Set([ErrorCode.UNSUPPORTED_PLATFORM, ErrorCode.NATIVE_LOAD_FAILED])

/** Lazily loads the package API, so that `--help` works even where the native addon is not built. */
function api() {
  return require(path.join(__dirname, '..', '..', 'index.js'))
}

/** The shell's exit status for a death by `signal`: 128 + its number. */
function signalExitCode(signal) {
  const n = os.constants.signals[signal]
  return n === undefined ? 1 : 128 + n
}

module.exports = {
  valueFlags,
  unknownFlag,
  flagInRange,
  UsageError,
  out,
  err,
  exit,
  parseDuration,
  formatDuration,
  rustIoText,
  errnoCode,
  displayTarget,
  isDflockd,
  since,
  holderFields,
  heldBy,
  reclaimText,
  EXIT_CODES,
  EXIT_CODE_OF,
  exitCodeFor,
  shortLivedOwner,
  oneCommandShell,
  defaultOwner,
  rustParent,
  exists,
  LOADER_CODES,
  api,
  signalExitCode,
}
