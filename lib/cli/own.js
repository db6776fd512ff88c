'use strict'
// sema-native's own commands over any target (a path, file:// or dflockd:// URL): acquire, try-acquire, release,
// status, clean, wait, run, ls and top. docs/cli.md is the user-facing description; keep the two in step.
//
// Exit codes: 0 success (a query that answered, whatever the answer), 1 busy / timed out / refused / not held,
// 2 usage error, 3 I/O, connection or other error. `run` exits with its command's status instead.

const { ErrorCode } = require('../codes')
const fs = require('node:fs')
const path = require('node:path')
const { parseArgs } = require('node:util')
const { fileURLToPath } = require('node:url')
const {
  UsageError,
  valueFlags,
  unknownFlag,
  flagInRange,
  out,
  err,
  exit,
  parseDuration,
  formatDuration,
  displayTarget,
  isDflockd,
  since,
  holderFields,
  heldBy,
  reclaimText,
  exitCodeFor,
  shortLivedOwner,
  defaultOwner,
  LOADER_CODES,
  api,
} = require('./common')

const PROG = 'sema-native'

const { OVERVIEW, COMMAND_HELP } = require('./own-help')
const { startWaitingLine } = require('./waiting-line')

// ─── argument parsing ───

/** Options each command accepts (besides --json, --quiet and --help, which every command accepts). */
const ACCEPTS = {
  acquire: ['timeout', 'tag', 'pid', 'stale', 'limit', 'verbose'],
  'try-acquire': ['tag', 'pid', 'stale', 'limit'],
  release: ['pid', 'force', 'limit'],
  status: ['stale', 'ca', 'limit'],
  clean: ['stale'],
  wait: ['timeout', 'ca'],
  run: ['timeout', 'tag', 'stale', 'ca', 'limit', 'mode', 'verbose'],
  ls: ['stale'],
  top: ['stale'],
}
const COMMON = ['json', 'quiet', 'help']
// run's stdout is the command's: no JSON of ours mixed into it.
const NOT_FOR = { run: ['json'], top: ['json'] }
const SHORT = { quiet: 'q', help: 'h', tag: 't', verbose: 'v' }
/** Every option `node:util.parseArgs` should know (unknown ones come back as tokens and are refused below). */
function parseOptions(valueOptions) {
  return Object.fromEntries(
    [...valueOptions, ...COMMON, 'force', 'verbose'].map((name) => [
      name,
      { type: valueOptions.includes(name) ? 'string' : 'boolean', ...(SHORT[name] ? { short: SHORT[name] } : {}) },
    ]),
  )
}

/**
 * `<command> <target> [options] [-- argv]`, options anywhere, `--name value` or `--name=value`. For `run` the
 * command to run starts after `--` (or at the first word after the target). Throws UsageError.
 */
function parse(args) {
  const o = { command: args[0], target: undefined, argv: null }
  const accepted = new Set([...(ACCEPTS[o.command] ?? []), ...COMMON])
  for (const name of NOT_FOR[o.command] ?? []) accepted.delete(name)
  const rest = args.slice(1)
  const VALUE_OPTIONS = valueFlags()
  const PARSE_OPTIONS = parseOptions(VALUE_OPTIONS)
  const { tokens } = parseArgs({ args: rest, options: PARSE_OPTIONS, strict: false, allowPositionals: true, tokens: true })
  for (const token of tokens) {
    if (token.kind === 'option-terminator') {
      if (o.command !== 'run') throw new UsageError(`'--' is only for run`)
      o.argv = rest.slice(token.index + 1)
      break
    }
    if (token.kind === 'option') {
      const { name, rawName, value } = token
      if (!Object.hasOwn(PARSE_OPTIONS, name) || (rawName.startsWith('-') && !rawName.startsWith('--') && rawName.length !== 2)) {
        throw new UsageError(unknownFlag(`${rawName}${token.inlineValue ? `=${value}` : ''}`, rawName, [...accepted]))
      }
      if (!accepted.has(name)) throw new UsageError(`${o.command} does not take --${name}`)
      if (VALUE_OPTIONS.includes(name)) {
        if (value === undefined) throw new UsageError(`--${name} needs a value`)
        o[name] = value
      } else {
        if (value !== undefined) throw new UsageError(`--${name} takes no value`)
        o[name] = true
      }
      continue
    }
    if (o.target === undefined) {
      o.target = token.value
    } else if (o.command === 'run') {
      o.argv = rest.slice(token.index)
      break
    } else {
      throw new UsageError(`unexpected argument: ${token.value}`)
    }
  }
  return o
}

function durationOption(o, name) {
  if (o[name] === undefined) return undefined
  if (name === 'stale' && /^(off|never)$/i.test(o[name])) return null
  const { ms, problem } = parseDuration(o[name])
  if (problem) throw new UsageError(`--${name}: ${problem}`)
  if (name === 'stale' && ms === 0) return null
  return ms
}

function pidOption(o) {
  if (o.pid === undefined) return undefined
  if (!/^[0-9]+$/.test(o.pid) || !flagInRange('pid', Number(o.pid))) {
    throw new UsageError(`--pid: '${o.pid}' is not a process id`)
  }
  return Number(o.pid)
}

/** --limit N: a counting semaphore of N slots (files and dflockd). */
function limitOption(o) {
  if (o.limit === undefined) return undefined
  if (!/^[0-9]+$/.test(o.limit) || !flagInRange('limit', Number(o.limit))) {
    throw new UsageError(`--limit: '${o.limit}' is not a positive integer`)
  }
  return Number(o.limit)
}

function caOption(o) {
  if (o.ca === undefined) return undefined
  try {
    return { ca: fs.readFileSync(o.ca) }
  } catch (e) {
    throw new UsageError(`--ca: cannot read ${o.ca}: ${e.message}`)
  }
}

/** The target as our API takes it: dflockd and file URLs as given, paths made absolute. Throws UsageError. */
function apiTarget(target) {
  if (isDflockd(target) || /^file:/i.test(target)) return target
  const unsupported = require('../target').unsupportedScheme(target)
  if (unsupported) throw new UsageError(unsupported)
  return path.resolve(target)
}

/** The target as shown to the user: absolute paths, dflockd URLs without their token. */
function shownTarget(target) {
  return isDflockd(target) ? displayTarget(target) : /^file:/i.test(target) ? target : path.resolve(target)
}

// ─── output ───

class Reporter {
  constructor(o) {
    this.command = o.command
    this.target = o.target === undefined ? null : shownTarget(o.target)
    this.json = Boolean(o.json)
    this.quiet = Boolean(o.quiet)
  }

  /** A success: JSON with `fields`, or `text` on stdout. */
  ok(fields, text) {
    if (this.json) out(JSON.stringify({ ok: true, command: this.command, target: this.target, ...fields }) + '\n')
    else if (!this.quiet && text) out(text + '\n')
  }

  /** A failure: JSON on stdout, or `sema-native: text` on stderr. */
  fail(error, text) {
    if (this.json) {
      const e = { type: error.type, message: error.message, ...holderFields(error) }
      out(JSON.stringify({ ok: false, command: this.command, target: this.target, error: e }) + '\n')
    } else {
      err(`${PROG}: ${text ?? error.message}\n`)
    }
  }
}

/** Exit code for a failed SemaphoreResult: the one table (common.js exitCodeFor). */
const failureCode = exitCodeFor

function describeFailure(error, target) {
  switch (error.type) {
    case ErrorCode.ALREADY_LOCKED:
      return error.holderPid !== undefined
        ? `${target} is locked by pid ${error.holderPid}${since(error.lockedSince)}`
        : `${target} is locked (holder unknown)`
    default:
      return `${target}: ${error.message}`
  }
}

// ─── commands ───

const NO_DFLOCKD = {
  acquire:
    'a dflockd lock cannot outlive this command: the server releases it when the connection that holds it ' +
    `closes, which is when ${PROG} exits. Hold it around your command with: ${PROG} run <target> -- <command…>`,
  release:
    'a dflockd lock is released by the connection that holds it (or when that connection closes); another ' +
    `process cannot release it. Use ${PROG} run <target> -- <command…>, which releases when the command ends`,
  clean: 'clean is for lock files; the dflockd server expires the leases of clients that went away by itself',
  ls: 'ls lists the lock files of a directory; for a dflockd key use status <target>',
  top: 'top shows the lock files of a directory; for a dflockd key use status <target>',
}
NO_DFLOCKD['try-acquire'] = NO_DFLOCKD.acquire

/**
 * `acquire(target, options)`; with `verbose`, a first attempt without waiting, and when the lock is busy a line on
 * stderr saying who holds it before the wait starts. On a terminal (unless `quiet`), the waiting line while it waits.
 */
async function acquireWithNotice(target, options, verbose, shown, quiet) {
  if (verbose) {
    const first = await api().tryAcquire(target, options)
    if (first.ok || first.error.type !== ErrorCode.ALREADY_LOCKED) return first
    const e = first.error
    err(`${PROG}: waiting for ${shown}${e.holderPid !== undefined ? ` (held by pid ${e.holderPid}${since(e.lockedSince)})` : ''}\n`)
  }
  const stop = startWaitingLine(target, { quiet, staleTimeout: options.staleTimeout, statusOptions: lineStatusOptions(options) })
  try {
    return await api().acquire(target, options)
  } finally {
    stop()
  }
}

/** The options of a status call for the waiting line, from acquire's (dflockd: TLS and auth). */
function lineStatusOptions(options) {
  const out = {}
  for (const k of ['staleTimeout', 'tls', 'auth', 'limit']) if (options[k] !== undefined) out[k] = options[k]
  return out
}

/**
 * The owner a lock taken by acquire/try-acquire is recorded for: --pid, else this command's parent. A parent that
 * would not keep the lock (npm's own process) is refused rather than warned about: a warning is easily missed in a
 * CI log, and the script would go on without the exclusion it asked for.
 */
function ownerPid(o) {
  const given = pidOption(o)
  if (given !== undefined) return given
  const owner = defaultOwner()
  const why = shortLivedOwner(owner)
  if (why) {
    throw new UsageError(
      `the lock would be recorded for this command's parent, but ${why}: the lock would be free again at once. ` +
        `Hold it around a command with \`${PROG} run <target> -- <command>\`, or pass --pid of a process that lives as ` +
        'long as the lock must (in a shell script: --pid $$)',
    )
  }
  return owner
}

async function cmdAcquire(o, rep, wait) {
  const pid = ownerPid(o)
  const options = { pid, tag: o.tag, limit: limitOption(o) }
  const stale = durationOption(o, 'stale')
  if (stale !== undefined) options.staleTimeout = stale
  if (wait) {
    const timeout = durationOption(o, 'timeout')
    if (timeout !== undefined) options.timeout = timeout
  }
  if (!api().isProcessRunning(pid)) throw new UsageError(`--pid ${pid}: no such process`)
  const target = apiTarget(o.target)
  const r = wait
    ? await acquireWithNotice(target, options, o.verbose, rep.target, o.quiet)
    : await api().tryAcquire(target, options)
  if (!r.ok) {
    let error = r.error
    if (error.type === ErrorCode.TIMEOUT) {
      error = { ...error, message: `Timeout waiting for lock after ${formatDuration(options.timeout)}` }
    }
    rep.fail(error, error.type === ErrorCode.TIMEOUT ? `${rep.target}: ${error.message}${heldBy(error)}` : describeFailure(error, rep.target))
    return failureCode(error)
  }
  const lock = r.value // recorded for `pid`: the package's exit hook leaves it in place
  rep.ok(
    { backend: 'file', pid: lock.pid, timestamp: lock.timestamp, tag: lock.tag ?? null },
    `acquired ${rep.target} (owner pid ${lock.pid})`,
  )
  return 0
}

async function cmdRelease(o, rep) {
  const target = apiTarget(o.target)
  if (o.force) {
    if (o.pid !== undefined) throw new UsageError('--force and --pid cannot be combined')
    const r = await api().release(target, { force: true, limit: limitOption(o) })
    if (!r.ok) {
      rep.fail(r.error, r.error.type === ErrorCode.NOT_LOCKED ? `${rep.target} is not locked` : describeFailure(r.error, rep.target))
      return failureCode(r.error)
    }
    rep.ok({ released: true }, `released ${rep.target}`)
    return 0
  }
  const pid = pidOption(o) ?? defaultOwner()
  const r = await api().release(target, { pid, limit: limitOption(o) })
  if (!r.ok) {
    const e = r.error
    let text
    if (e.type === ErrorCode.NOT_LOCKED) text = `${rep.target} is not locked`
    else if (e.type === ErrorCode.PERMISSION_DENIED && e.holderPid !== undefined) {
      text = `${rep.target} is held by pid ${e.holderPid}, not by pid ${pid} (pass --pid ${e.holderPid}, or --force)`
    } else text = describeFailure(e, rep.target)
    rep.fail(e, text)
    return failureCode(e)
  }
  rep.ok({ released: true }, `released ${rep.target}`)
  return 0
}

function statusOptions(o) {
  const options = {}
  const stale = durationOption(o, 'stale')
  if (stale !== undefined) options.staleTimeout = stale
  const tls = caOption(o)
  if (tls) options.tls = tls
  const limit = limitOption(o)
  if (limit !== undefined) options.limit = limit
  // run only (acquire/try-acquire leave a lock behind, which a shared holder cannot: its heartbeat needs a live
  // process); the value is checked with the API's options.
  if (o.mode !== undefined) options.mode = o.mode
  return options
}

/** `LockStatus` in this CLI's documented JSON shape (every key always present). */
function statusFields(s) {
  const info = s.info ? { pid: s.info.pid, timestamp: s.info.timestamp, tag: s.info.tag ?? null } : null
  return {
    backend: s.backend,
    locked: Boolean(s.locked),
    info,
    isStale: Boolean(s.isStale),
    // A pid <= 0 names a process group to kill(), never a live holder.
    holderRunning: info && s.backend === 'file' ? info.pid > 0 && api().isProcessRunning(info.pid) : null,
    holders: s.holders ?? null,
    waiters: s.waiters ?? null,
    limit: s.limit ?? null,
    leaseExpiresInS: s.leaseExpiresInS ?? null,
    reclaimableAt: s.reclaimableAt ?? null,
    reclaimRule: s.reclaimRule ?? null,
    fileSystem: s.fileSystem ?? null,
    fallbacks: s.fallbacks ?? null,
  }
}

function statusText(target, f) {
  const lines = [`${target}: ${f.locked ? 'locked' : 'free'}`]
  if (f.info) {
    lines.push(`  pid: ${f.info.pid}${f.holderRunning === null ? '' : f.holderRunning ? ' (running)' : ' (not running)'}`)
    lines.push(`  since: ${new Date(f.info.timestamp * 1000).toISOString()} (timestamp ${f.info.timestamp})`)
    if (f.info.tag !== null) lines.push(`  tag: ${f.info.tag}`)
  } else if (f.locked && f.backend === 'file') {
    lines.push('  owner: unknown (the lock file cannot be parsed)')
  }
  if (f.locked && f.backend === 'file') lines.push(`  stale: ${f.isStale ? 'yes' : 'no'}`)
  const reclaim = f.locked && f.backend === 'file' ? reclaimText({ ...f, pid: f.info?.pid }) : null
  if (reclaim) lines.push(`  reclaimable: ${reclaim}`)
  if (f.backend === 'file' && f.holders !== null) lines.push(`  holders: ${f.holders}/${f.limit} slots`)
  // Only where the engine works around the file system (the usual local disk adds no line).
  if (f.fallbacks?.length) lines.push(`  file system: ${f.fileSystem ?? 'unknown'} (fallbacks: ${f.fallbacks.join(', ')})`)
  if (f.backend === 'dflockd') {
    if (f.holders !== null) lines.push(`  holders: ${f.holders}${f.limit !== null ? `/${f.limit}` : ''}`)
    if (f.waiters !== null) lines.push(`  waiters: ${f.waiters}`)
    if (f.leaseExpiresInS !== null) lines.push(`  lease expires in: ${f.leaseExpiresInS}s`)
  }
  return lines.join('\n')
}

async function cmdStatus(o, rep) {
  const s = await api().status(apiTarget(o.target), statusOptions(o))
  const fields = statusFields(s)
  if (rep.json) rep.ok(fields)
  else out(statusText(rep.target, fields) + '\n') // status prints even with --quiet: it is the answer
  return 0
}

async function cmdClean(o, rep) {
  const { Semaphore } = api()
  const target = apiTarget(o.target)
  const file = /^file:/i.test(target) ? fileURLToPath(target) : target
  const config = {}
  const stale = durationOption(o, 'stale')
  if (stale !== undefined) config.staleTimeout = stale
  const { CLEAN_STALE_RESULT } = require('../file/semats')
  const r = new Semaphore(file, config)[CLEAN_STALE_RESULT]()
  if (!r.ok) {
    rep.fail(r.error, describeFailure(r.error, rep.target))
    return failureCode(r.error)
  }
  const cleaned = r.value
  rep.ok({ cleaned }, cleaned ? `removed stale lock ${rep.target}` : `nothing to clean at ${rep.target}`)
  return 0
}

/**
 * The library's `wait()`: file targets wait in the engine on the lock directory's file events (the same judgement
 * as acquire: a stale lock counts as free), dflockd targets poll the server's stats.
 */
async function cmdWait(o, rep) {
  const timeout = durationOption(o, 'timeout')
  const target = apiTarget(o.target)
  const options = statusOptions(o)
  if (timeout !== undefined) options.timeout = timeout
  const stop = startWaitingLine(target, { quiet: o.quiet, staleTimeout: options.staleTimeout, statusOptions: lineStatusOptions(options) })
  let r
  try {
    r = await api().wait(target, options)
  } finally {
    stop()
  }
  if (!r.ok) {
    if (r.error.type !== ErrorCode.TIMEOUT) {
      rep.fail(r.error, describeFailure(r.error, rep.target))
      return failureCode(r.error)
    }
    const message = `Timeout waiting for lock to be released after ${formatDuration(timeout)}`
    rep.fail({ type: ErrorCode.TIMEOUT, message }, `${rep.target}: ${message}`)
    return 1
  }
  rep.ok({ free: true, waitedMs: r.value.waitedMs }, `free ${rep.target}`)
  return 0
}

/** `ls <dir>`: the directory's locks as the engine judges them (lib/cli/ls.js formats). */
async function cmdLs(o, rep) {
  const ls = require('./ls')
  const r = await ls.listDir(o.target, durationOption(o, 'stale'))
  if (r.error) {
    rep.fail(r.error, `${rep.target}: ${r.error.message}`)
    return 3
  }
  if (rep.json) rep.ok({ locks: r.locks })
  else out(ls.table(r.locks) + '\n') // the listing is the answer: printed even with --quiet
  return 0
}

// ─── entry ───

function version() {
  try {
    return JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8')).version
  } catch {
    return 'unknown'
  }
}

async function main(args) {
  const first = args[0]
  if (first === undefined) {
    err(OVERVIEW)
    return exit(2)
  }
  if (first === '-h' || first === '--help' || first === 'help') {
    const topic = args[1]
    out(COMMAND_HELP[topic] ?? OVERVIEW)
    return exit(0)
  }
  if (first === '-V' || first === '--version') {
    out(`${PROG} ${version()}\n`)
    return exit(0)
  }
  const dashdash = args.indexOf('--')
  const command = first
  const wantsJson = command !== 'run' && (dashdash < 0 ? args : args.slice(0, dashdash)).includes('--json')
  if (!COMMAND_HELP[command]) {
    return usageFailure({ command: null, target: null, json: wantsJson }, `unknown command: ${command}`)
  }
  let o
  try {
    o = parse(args)
  } catch (e) {
    // Parsing reads the option table from the addon; `<command> --help` must work where it cannot load.
    if (LOADER_CODES.has(e && e.code) && helpAsked(args)) {
      out(COMMAND_HELP[command])
      return exit(0)
    }
    if (!(e instanceof UsageError)) throw e
    return usageFailure({ command, target: null, json: wantsJson }, e.message)
  }
  if (o.help) {
    out(COMMAND_HELP[command])
    return exit(0)
  }
  const rep = new Reporter(o)
  try {
    if (o.target === undefined || o.target === '') throw new UsageError(`${command} needs a <target>`)
    if (command === 'run') {
      const withLine = (target, options, verbose, shown) => acquireWithNotice(target, options, verbose, shown, o.quiet)
      return await require('./run').run(o, { durationOption, statusOptions, apiTarget, acquireWithNotice: withLine, rep })
    }
    if (isDflockd(o.target) && NO_DFLOCKD[command]) throw new UsageError(NO_DFLOCKD[command])
    let code
    switch (command) {
      case 'acquire':
        code = await cmdAcquire(o, rep, true)
        break
      case 'try-acquire':
        code = await cmdAcquire(o, rep, false)
        break
      case 'release':
        code = await cmdRelease(o, rep)
        break
      case 'status':
        code = await cmdStatus(o, rep)
        break
      case 'clean':
        code = await cmdClean(o, rep)
        break
      case 'ls':
        code = await cmdLs(o, rep)
        break
      case 'top':
        code = await require('./top').top(o.target, { stale: durationOption(o, 'stale') })
        break
      default:
        code = await cmdWait(o, rep)
    }
    return exit(code)
  } catch (e) {
    if (e instanceof UsageError) return usageFailure(o, e.message)
    // Thrown by the API: a bad target (INVALID_ARGUMENT → 2) or anything else that went wrong (3).
    const error = { type: e && e.code ? e.code : ErrorCode.IO_ERROR, message: e && e.message ? e.message : String(e), errno: e && e.errno }
    rep.fail(error, `${rep.target ?? command}: ${error.message}`)
    return exit(exitCodeFor(error))
  }
}

/** Whether `-h` / `--help` is among a command's own arguments (before run's `--`). */
function helpAsked(args) {
  const dashdash = args.indexOf('--')
  return (dashdash < 0 ? args : args.slice(0, dashdash)).some((a) => a === '-h' || a === '--help')
}

function usageFailure(o, message) {
  if (o.json) {
    const target = o.target === undefined || o.target === null ? null : shownTarget(o.target)
    const error = { type: ErrorCode.INVALID_ARGUMENT, message, ...holderFields({}) }
    out(JSON.stringify({ ok: false, command: o.command ?? null, target, error }) + '\n')
  } else {
    const hint = o.command && COMMAND_HELP[o.command] ? `${o.command} --help` : '--help'
    err(`${PROG}: ${message}\nTry '${PROG} ${hint}'.\n`)
  }
  return exit(2)
}

module.exports = { main, parse, OVERVIEW, COMMAND_HELP }
