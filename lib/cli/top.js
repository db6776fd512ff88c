'use strict'
// `sema-native top <dir>`: `ls` as a live view. The listing is redrawn when something happens in the directory (a
// file event: a lock taken, released, replaced, refreshed) and once a second for the clocks and the waiter counts
// (which live in the queue, not in the directory: no event tells their change). Each lock also shows its
// hand-offs per second (a new holder seen, over the last 10 s) and how long its line has had waiters (since this view
// first saw them). On a terminal: the alternate screen, q (or Ctrl-C) to quit. Not a terminal: the table again, under
// a time line, each time something other than the clocks changed, until the process is ended.

const fs = require('node:fs')
const path = require('node:path')
const ls = require('./ls')
const { stateText } = ls

/** Redraws coalesce the events that come in bursts (a hand-off is an unlink and a link). */
const EVENT_DELAY_MS = 20
/** The clocks count seconds. */
const TICK_MS = 1000
/** The window of hand-offs per second. */
const RATE_WINDOW_MS = 10_000

/**
 * Who holds a lock, for counting hand-offs: its pid on its host. Not its `since`: for our own files that moves with
 * the heartbeat's in-place refresh (every second by default), which is no hand-off (CI run of 2026-11-25: 1.0
 * hand-offs/s shown for one holder that never let go).
 */
function holderKey(l) {
  return l.state === 'held' && l.pid !== null ? `${l.pid}@${l.host ?? ''}` : null
}

/** Per lock: the holders seen (for hand-offs/s) and when its line was first seen with waiters. */
class History {
  constructor() {
    this.locks = new Map()
  }

  /** Adds the rate and waited columns to `locks` (records of ls.js), as of `now` (ms). */
  update(locks, now) {
    const seen = new Set()
    for (const l of locks) {
      seen.add(l.name)
      let h = this.locks.get(l.name)
      if (!h) this.locks.set(l.name, (h = { holder: holderKey(l), handoffs: [], waitingSince: null }))
      const holder = holderKey(l)
      if (holder !== null && h.holder !== null && holder !== h.holder) h.handoffs.push(now)
      if (holder !== null) h.holder = holder
      while (h.handoffs.length && h.handoffs[0] < now - RATE_WINDOW_MS) h.handoffs.shift()
      if (l.waiters) h.waitingSince ??= now
      else h.waitingSince = null
      l.handoffsPerS = h.handoffs.length / (RATE_WINDOW_MS / 1000)
      l.waitedS = h.waitingSince === null ? null : Math.floor((now - h.waitingSince) / 1000)
    }
    for (const name of this.locks.keys()) if (!seen.has(name)) this.locks.delete(name)
    return locks
  }
}

/** The table of `top`: ls's columns plus hand-offs/s and how long its line has had waiters. */
function topTable(locks) {
  if (!locks.length) return 'no locks'
  const rows = [['LOCK', 'STATE', 'PID', 'HELD FOR', 'WAITING', 'WAITED', 'HAND-OFFS/S', 'TAG', 'HOLDER']]
  for (const r of locks) {
    rows.push([
      ls.nameText(r.name),
      stateText(r),
      r.pid === null ? '-' : String(r.pid),
      ls.shortAge(r.ageS),
      r.waiters === null ? '-' : String(r.waiters),
      r.waitedS === null ? '-' : ls.shortAge(r.waitedS),
      r.handoffsPerS.toFixed(1),
      ls.tagText(r.tag),
      ls.holderText(r),
    ])
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((row) => row[i].length)))
  return rows.map((row) => row.map((c, i) => (i === row.length - 1 ? c : c.padEnd(widths[i]))).join('  ').trimEnd()).join('\n')
}

/** What changed apart from the clocks: the plain output prints again only then. */
function signature(locks) {
  return JSON.stringify(locks.map((l) => [l.name, l.state, l.pid, l.since, l.waiters, l.tag, l.format]))
}

/**
 * Runs the view of `dir` until quit. `stale`: the judgement's stale rule. Resolves the exit code: 0 when quit, 3 when
 * the directory cannot be read (reported on stderr).
 */
function top(dir, { stale, input = process.stdin, output = process.stdout, errOut = process.stderr } = {}) {
  const tty = Boolean(output.isTTY)
  const history = new History()
  let lastSignature = null
  let busy = false
  let again = false
  let pendingEvent = null
  let watcher = null
  let ticker = null
  let finish
  const done = new Promise((resolve) => (finish = resolve))

  async function refresh() {
    if (busy) {
      again = true
      return
    }
    busy = true
    try {
      const r = await ls.listDir(dir, stale)
      if (r.error) return stop(3, `${dir}: ${r.error.message}\n`)
      const locks = history.update(r.locks, Date.now())
      const stamp = new Date().toISOString().replace('T', ' ').slice(0, 19)
      if (tty) {
        const rows = output.rows || 24
        const lines = [`sema-native top ${dir}    ${stamp} UTC    q to quit`, '', ...topTable(locks).split('\n')]
        output.write(`\x1b[H${lines.slice(0, rows).map((l) => `${l.slice(0, (output.columns || 80) - 1)}\x1b[K`).join('\n')}\x1b[J`)
      } else {
        const sig = signature(locks)
        if (sig !== lastSignature) {
          lastSignature = sig
          output.write(`--- ${stamp} UTC\n${topTable(locks)}\n`)
        }
      }
    } finally {
      busy = false
      if (again && ticker !== null) {
        again = false
        refresh()
      }
    }
  }

  function onEvent() {
    if (pendingEvent === null) {
      pendingEvent = setTimeout(() => {
        pendingEvent = null
        refresh()
      }, EVENT_DELAY_MS)
    }
  }

  function onKey(key) {
    if (key === 'q' || key === 'Q' || key === '\u0003') stop(0)
  }

  function stop(code, message) {
    if (ticker === null) return
    clearInterval(ticker)
    ticker = null
    if (pendingEvent) clearTimeout(pendingEvent)
    if (watcher) watcher.close()
    if (tty) output.write('\x1b[?25h\x1b[?1049l')
    if (input.isTTY) {
      input.setRawMode(false)
      input.removeListener('data', onKey)
      input.pause()
    }
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
    if (message) errOut.write(message)
    finish(code)
  }

  function onSignal() {
    stop(0)
  }

  try {
    watcher = fs.watch(path.resolve(dir), { persistent: false }, onEvent)
    watcher.on('error', () => {})
  } catch (e) {
    errOut.write(`${dir}: ${e.message}\n`)
    return Promise.resolve(3)
  }
  ticker = setInterval(refresh, TICK_MS)
  process.on('SIGINT', onSignal)
  process.on('SIGTERM', onSignal)
  if (tty) output.write('\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J')
  if (input.isTTY) {
    input.setRawMode(true)
    input.setEncoding('utf8')
    input.on('data', onKey)
    input.resume()
  }
  refresh()
  return done
}

module.exports = { top, topTable, History }
