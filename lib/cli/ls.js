'use strict'
// `sema-native ls <dir>`: every lock of a directory, as the engine judges it (crates/sema-core/src/lockfile/listing.rs
// finds, reads and judges; this module only formats). Also the facts the waiting line and `top` show about a lock.

const path = require('node:path')
const native = require('../native')
const { semaphoreError } = require('../errors')
const { engineOptions, DEFAULT_CONFIG } = require('../file/engine')

/** Engine options for looking only: the stale rule is the one thing that changes a judgement. */
function lookOptions(staleTimeout) {
  const config = { ...DEFAULT_CONFIG }
  if (staleTimeout !== undefined) config.staleTimeout = staleTimeout
  return engineOptions(config)
}

/** One lock in this CLI's documented JSON shape (every key always present; null when unknown). */
function record(n, nowS = Math.floor(Date.now() / 1000)) {
  return {
    name: n.name,
    path: n.path,
    state: n.state,
    reason: n.reason,
    format: n.format,
    pid: n.pid ?? null,
    holderRunning: n.holderRunning ?? null,
    commandLine: n.commandLine ?? null,
    host: n.host ?? null,
    thisHost: n.thisHost ?? null,
    tag: n.tag ?? null,
    timestamp: n.timestamp ?? null,
    since: n.since ?? null,
    ageS: n.since == null ? null : Math.max(0, nowS - n.since),
    waiters: n.waiters ?? null,
    ownerUid: n.ownerUid ?? null,
    linkTarget: n.linkTarget ?? null,
    kind: n.kind ?? 'mutex',
    holders: n.holders ?? null,
    limit: n.limit ?? null,
  }
}

/** `{locks}` or `{error}` (a SemaphoreError: `{type, message}`, and `errno`/`errnoName` from the OS) for `dir`. */
async function listDir(dir, staleTimeout) {
  const r = await native.listLocks(path.resolve(dir), lookOptions(staleTimeout))
  if (!r.ok) return { error: semaphoreError(r.error) }
  const now = Math.floor(Date.now() / 1000)
  return { locks: r.value.map((n) => record(n, now)) }
}

/** The facts about one lock path, or null (for the waiting line). */
async function describe(file, staleTimeout) {
  const n = await native.describeLock(file, lookOptions(staleTimeout))
  return n ? record(n) : null
}

/** 2m13s, 3h02m, 4d07h: two units at most, as a person reads a wait. */
function shortAge(s) {
  if (s == null) return '-'
  if (s < 60) return `${s}s`
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`
  return `${Math.floor(s / 86400)}d${String(Math.floor((s % 86400) / 3600)).padStart(2, '0')}h`
}

/**
 * Characters a terminal may act on rather than show: C0 controls (a newline would forge a row, ESC starts an escape
 * sequence), DEL, C1 controls (U+009B is a one-character CSI), the line and paragraph separators, and the
 * bidirectional overrides and isolates (they reorder what follows); and the backslash, so an escape stays unambiguous.
 */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\\]/g
const SHORT = { '\n': '\\n', '\r': '\\r', '\t': '\\t', '\\': '\\\\' }

/**
 * The one escaping rule for text read from a lock directory (names, tags, hosts, link targets, command lines) that
 * a terminal shows: each unsafe character as `\n`, `\r`, `\t`, `\\` or `\uXXXX` (as JSON writes it), the rest as is.
 */
function terminalText(text) {
  return String(text).replace(UNSAFE, (c) => SHORT[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** A command line for one line of a terminal: words joined, escaped (terminalText), cut at `max`. */
function commandText(words, max = 60) {
  if (!words || !words.length) return null
  const text = terminalText(words.join(' '))
  return text.length > max ? `${text.slice(0, max - 1)}…` : text
}

/**
 * The command a holder stands for: for `sema-native run <target> … -- <command…>` (the holder of its lock is the
 * wrapper) the command it runs, else the words as they are.
 */
function holderCommand(words) {
  if (!words) return null
  const at = words.findIndex((w) => /(^|[\\/])sema-native(\.js)?$/.test(w))
  if (at >= 0 && words[at + 1] === 'run') {
    const dashdash = words.indexOf('--', at + 2)
    if (dashdash >= 0 && dashdash + 1 < words.length) return words.slice(dashdash + 1)
  }
  return words
}

/** What the COMMAND column (and the waiting line's parenthesis) says about the holder. */
function holderText(r) {
  if (r.format === 'symlink') return `symlink → ${r.linkTarget == null ? '?' : terminalText(r.linkTarget)} (not followed)`
  if (r.format === 'unparseable') return '(unreadable or not a lock file: holder unknown)'
  if (r.thisHost === false) return `(on host ${terminalText(r.host)}: reclaimed once its heartbeat stays unchanged 6 periods here)`
  if (r.holderRunning === false) return '(not running)'
  return commandText(holderCommand(r.commandLine)) ?? ''
}

/** Tags can hold any character but a newline: shown quoted, escaped (terminalText). */
function tagText(tag) {
  return tag == null ? '' : `"${terminalText(tag).replace(/"/g, '\\"')}"`
}

/** A lock's name, escaped (terminalText): a name is any byte string but `/` and NUL. */
function nameText(name) {
  return terminalText(name)
}

/**
 * `held`, `stale` or `free`; a lock free to take while processes stand in its line is `free, queued` / `stale, queued`.
 * A semaphore adds its holders (`held (2 of 3)`), a shared lock its shared holders (`held (3 shared)`).
 */
function stateText(r) {
  const state = r.state !== 'held' && r.waiters ? `${r.state}, queued` : r.state
  if (r.holders == null) return state
  if (r.kind === 'shared') return `${state} (${r.holders} shared)`
  return r.limit == null ? `${state} (${r.holders} holding)` : `${state} (${r.holders} of ${r.limit})`
}

/** The text table of `ls` (and each screen of `top`). */
function table(locks) {
  if (!locks.length) return 'no locks'
  const rows = [['LOCK', 'STATE', 'PID', 'HELD FOR', 'WAITING', 'TAG', 'HOLDER']]
  for (const r of locks) {
    rows.push([
      nameText(r.name),
      stateText(r),
      r.pid === null ? '-' : String(r.pid),
      shortAge(r.ageS),
      r.waiters === null ? '-' : String(r.waiters),
      tagText(r.tag),
      holderText(r),
    ])
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)))
  return rows.map((row) => row.map((c, i) => (i === row.length - 1 ? c : c.padEnd(widths[i]))).join('  ').trimEnd()).join('\n')
}

module.exports = {
  stateText,
  listDir,
  describe,
  record,
  table,
  shortAge,
  commandText,
  holderCommand,
  holderText,
  tagText,
  nameText,
  terminalText,
  lookOptions,
}
