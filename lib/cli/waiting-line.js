'use strict'
// The waiting line: while acquire/run/wait wait on a terminal, one status line on stderr saying whom they wait for,
//   waiting for build.lock: held by pid 4242 (cargo build, tag "nightly") for 2m13s, 3 waiting
// redrawn in place (carriage return + erase to the end of the line) and erased when the wait ends. Nothing when
// stderr is not a terminal or with --quiet. The facts come from the engine's listing (lib/cli/ls.js): the same
// judgement, command line and queue count as `ls`.

const fs = require('node:fs')
const path = require('node:path')
const { fileURLToPath } = require('node:url')
const { isDflockd, displayTarget, api } = require('./common')
// lib/cli/ls.js loads the addon: on first use, so that `--help` works where it cannot load.
const ls = () => require('./ls')

/**
 * A wait shorter than this shows nothing: an uncontended acquire settles in microseconds, and a line drawn and
 * erased at once only flickers.
 */
const SHOW_AFTER_MS = 150
/** The held-for counter counts seconds; file events redraw in between (a hand-off to another holder). */
const REDRAW_MS = 1000

/** A command line for a short line: paths shown by their last part (`/usr/bin/node /x/y/build.js` → `node build.js`). */
function briefWords(words) {
  return words && words.map((w) => (/^([a-z]:)?[\\/]/i.test(w) && !/\s/.test(w) ? path.basename(w) : w))
}

/** `waiting for …` for one lock file's facts (an `ls` record), or for a dflockd status. */
function fileText(name, r) {
  if (!r || r.state !== 'held') return `waiting for ${name}`
  const facts = []
  const cmd = ls().commandText(briefWords(ls().holderCommand(r.commandLine)), 40)
  if (cmd) facts.push(cmd)
  if (r.tag != null) facts.push(`tag ${ls().tagText(r.tag)}`)
  // Another host's holder is reclaimed by its heartbeat's progress as this host sees it (stale::remote).
  if (r.thisHost === false) facts.push(`on ${r.host}, reclaimed once its heartbeat stays unchanged 6 periods here`)
  let who
  if (r.format === 'symlink') who = 'a symlink (refused, never followed)'
  else if (r.pid === null) who = 'held by an unknown holder'
  else who = `held by pid ${r.pid}${facts.length ? ` (${facts.join(', ')})` : ''}`
  const since = r.ageS === null ? '' : ` for ${ls().shortAge(r.ageS)}`
  const waiting = r.waiters ? `, ${r.waiters} waiting` : ''
  return `waiting for ${name}: ${who}${since}${waiting}`
}

function dflockdText(name, s) {
  if (!s || !s.locked) return `waiting for ${name}`
  const lease = s.leaseExpiresInS !== undefined ? ` (lease expires in ${Math.round(s.leaseExpiresInS)}s)` : ''
  const holders = (s.limit ?? 1) > 1 ? `${s.holders}/${s.limit} slots held` : 'held'
  return `waiting for ${name}: ${holders}${lease}${s.waiters ? `, ${s.waiters} waiting` : ''}`
}

/**
 * Starts the line for `target` (as our API takes it) unless stderr is not a terminal or `quiet`; returns `stop()`,
 * which erases it (safe to call more than once). `staleTimeout` / `statusOptions`: the judgement's rule, as the
 * command's own.
 */
function startWaitingLine(target, { quiet, stream = process.stderr, staleTimeout, statusOptions } = {}) {
  if (quiet || !stream.isTTY) return () => {}
  const dflockd = isDflockd(target)
  const file = dflockd ? null : /^file:/i.test(target) ? fileURLToPath(target) : target
  const name = dflockd ? displayTarget(target) : path.basename(file)
  let shown = false
  let stopped = false
  let busy = false
  let watcher = null
  let timer = null

  async function draw() {
    if (busy || stopped) return
    busy = true
    let text
    try {
      text = dflockd
        ? dflockdText(name, await api().status(target, statusOptions))
        : fileText(name, await ls().describe(file, staleTimeout))
    } catch {
      text = `waiting for ${name}`
    } finally {
      busy = false
    }
    if (stopped) return
    const width = Math.max(20, (stream.columns || 80) - 1) // the last column would wrap on some terminals
    if (text.length > width) text = `${text.slice(0, width - 1)}…`
    stream.write(`\r${text}\x1b[K`)
    shown = true
  }

  const start = setTimeout(() => {
    draw()
    timer = setInterval(draw, REDRAW_MS)
    timer.unref()
    if (!dflockd) {
      try {
        watcher = fs.watch(path.dirname(file), { persistent: false }, () => draw())
        watcher.on('error', () => {})
      } catch {
        watcher = null // the timer alone
      }
    }
  }, SHOW_AFTER_MS)
  start.unref()

  return function stop() {
    if (stopped) return
    stopped = true
    clearTimeout(start)
    if (timer) clearInterval(timer)
    if (watcher) watcher.close()
    if (shown) stream.write('\r\x1b[K')
  }
}

module.exports = { startWaitingLine, fileText, dflockdText }
