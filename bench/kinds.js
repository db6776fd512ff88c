#!/usr/bin/env node
'use strict'
// Lock kinds on files (docs/lock-kinds.md), against the mutex in the same run, in tmpfs (/dev/shm):
//   node bench/kinds.js [--smoke]
// - uncontended: one process, `tryAcquire(p, opts)` + `release()` in a loop for a second: ops/s and p50 of a cycle;
// - hand-off: K processes each `acquire(p, opts)` + `release()` in a loop (no work while held); ops/s over all of
//   them, and the hand-off latency: for each acquisition, the time since the latest release by another process
//   (CLOCK_MONOTONIC, shared by the processes), p50 and p90.
// Rows: the mutex (2 processes), `limit: 2` (3 processes: one always waits), `mode: 'exclusive'` (2 processes),
// and `mode: 'shared'` with one exclusive writer among 2 readers (every grant of the writer is a hand-off from the
// readers, and back). Prints a markdown table; ratios are to the mutex row of the same run.

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const smoke = process.argv.includes('--smoke')
const SECONDS = smoke ? 0.1 : 1
const ROUNDS = smoke ? 20 : 400

const KINDS = [
  { name: 'mutex', procs: [{}, {}], solo: {} },
  { name: 'semaphore (limit 2)', procs: [{ limit: 2 }, { limit: 2 }, { limit: 2 }], solo: { limit: 2 } },
  { name: "mode: 'exclusive'", procs: [{ mode: 'exclusive' }, { mode: 'exclusive' }], solo: { mode: 'exclusive' } },
  { name: "mode: 'shared' (2 readers + 1 writer)", procs: [{ mode: 'shared' }, { mode: 'shared' }, { mode: 'exclusive' }], solo: { mode: 'shared' } },
]

if (process.argv[2] === '--child') {
  child(process.argv[3], JSON.parse(process.argv[4]), Number(process.argv[5])).catch((e) => {
    console.error(e)
    process.exit(1)
  })
} else {
  main().catch((e) => {
    console.error(e)
    process.exit(1)
  })
}

async function child(file, options, rounds) {
  const sema = require('..')
  const events = []
  for (let i = 0; i < rounds; i++) {
    const r = await sema.acquire(file, { ...options, timeout: 60_000 })
    if (!r.ok) throw new Error(JSON.stringify(r.error))
    events.push(['a', Number(process.hrtime.bigint())])
    await r.value.release()
    events.push(['r', Number(process.hrtime.bigint())])
  }
  process.stdout.write(JSON.stringify(events))
}

async function solo(file, options) {
  const sema = require('..')
  const times = []
  const end = Date.now() + SECONDS * 1000
  let n = 0
  const t0 = process.hrtime.bigint()
  while (Date.now() < end) {
    const s = process.hrtime.bigint()
    const r = await sema.tryAcquire(file, options)
    if (!r.ok) throw new Error(JSON.stringify(r.error))
    await r.value.release()
    times.push(Number(process.hrtime.bigint() - s) / 1000)
    n++
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9
  return { soloOps: n / secs, p50Us: pct(times, 0.5) }
}

function run(file, options) {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [__filename, '--child', file, JSON.stringify(options), String(ROUNDS)], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    c.stdout.on('data', (d) => (out += d))
    c.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`child exited ${code}`))))
  })
}

async function handOff(file, procs) {
  const logs = await Promise.all(procs.map((o) => run(file, o)))
  const all = logs.flatMap((events, p) => events.map(([k, t]) => ({ k, t, p }))).sort((a, b) => a.t - b.t)
  // From the first grant to the last release: process start-up is not part of it.
  const secs = (all[all.length - 1].t - all[0].t) / 1e9
  const gaps = []
  const lastRelease = new Map()
  for (const e of all) {
    if (e.k === 'r') lastRelease.set(e.p, e.t)
    else {
      let latest = -Infinity
      for (const [p, t] of lastRelease) if (p !== e.p && t > latest) latest = t
      // A hand-off only: the latest release was another process's, after this one's own previous release.
      if (latest > (lastRelease.get(e.p) ?? -Infinity)) gaps.push((e.t - latest) / 1000)
    }
  }
  return { handOps: (procs.length * ROUNDS) / secs, handOffP50Us: pct(gaps, 0.5), handOffP90Us: pct(gaps, 0.9), handOffs: gaps.length }
}

function pct(xs, q) {
  if (xs.length === 0) return NaN
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]
}

async function main() {
  const base = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir()
  const dir = fs.mkdtempSync(path.join(base, 'sema-kinds-'))
  const rows = []
  try {
    for (const [i, k] of KINDS.entries()) {
      const s = await solo(path.join(dir, `solo-${i}.lock`), k.solo)
      const h = await handOff(path.join(dir, `handoff-${i}.lock`), k.procs)
      rows.push({ name: k.name, ...s, ...h })
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const m = rows[0]
  const f = (x, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : 'n/a')
  console.log(`Lock kinds on files, ${base} (${os.cpus().length} cores, node ${process.version}${smoke ? ', smoke' : ''})\n`)
  console.log('| kind | uncontended ops/s | ÷ mutex | p50 µs | contended ops/s | ÷ mutex | hand-off p50 µs | p90 µs | ÷ mutex p50 |')
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- |')
  for (const r of rows) {
    console.log(
      `| ${r.name} | ${f(r.soloOps)} | ${f(r.soloOps / m.soloOps, 2)} | ${f(r.p50Us, 1)} | ${f(r.handOps)} | ` +
        `${f(r.handOps / m.handOps, 2)} | ${f(r.handOffP50Us)} | ${f(r.handOffP90Us)} | ${f(r.handOffP50Us / m.handOffP50Us, 2)} |`,
    )
  }
}
