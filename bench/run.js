#!/usr/bin/env node
'use strict'
// sema-native benchmark suite (`npm run bench`). Prints markdown tables of ratios against peers measured in the
// same run, the machine, and writes bench/results/latest.json and latest.md. See bench/README.md.
//
//   node bench/run.js                      everything (several minutes)
//   node bench/run.js --smoke              every benchmark with tiny counts (< 30 s); exit 1 on a crash or overlap
//   node bench/run.js --only=file,contended,dflockd,kinds,memory,diagnostics
//   node bench/run.js --render             re-render bench/results/latest.json (after a change of the tables)
//   node bench/run.js --only=contended --floor-only   the file lock against its floor alone (latest-floor.md)

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { runJson } = require('./lib/proc')
const { machine, benchDirs } = require('./lib/machine')
const { median, num, ratio, table } = require('./lib/stats')
const { contend } = require('./contended')
const dfl = require('./dflockd')

const root = path.resolve(__dirname, '..')
const resultsDir = path.join(__dirname, 'results')
const SECTIONS = ['file', 'contended', 'dflockd', 'kinds', 'memory', 'diagnostics']
// The lock kinds' own scripts (counting semaphores and shared locks, against the mutex of the same backend), each
// printing a markdown table that the report embeds; a non-zero exit (an overlap, a failure) fails the run.
const KIND_SCRIPTS = [
  ['File lock kinds: limit 2, shared and exclusive vs the mutex (bench/kinds.js)', 'kinds.js'],
  ['dflockd shared and exclusive vs the mutex (bench/dflockd-shared.js)', 'dflockd-shared.js'],
]

const argv = process.argv.slice(2)
const smoke = argv.includes('--smoke')
const renderOnly = argv.includes('--render') // re-render bench/results/latest.json without measuring
// With --only=contended: the floor comparison alone (issue 24), written to latest-floor.{json,md}.
const floorOnly = argv.includes('--floor-only')
const onlyArg = argv.find((a) => a.startsWith('--only='))
const only = onlyArg ? onlyArg.slice(7).split(',').filter(Boolean) : SECTIONS
for (const s of only) {
  if (!SECTIONS.includes(s)) {
    console.error(`unknown section '${s}' (choose from ${SECTIONS.join(', ')})`)
    process.exit(2)
  }
}

// Counts: the full run, and the smoke run (tiny, < 30 s for everything).
// --workers=1,10 and --reps=N: the dflockd section's worker counts and repetitions (a comparison of two builds).
const listArg = (name) => argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3)
const P = smoke
  ? {
      file: { reps: 1, seconds: 0.05, warmup: 10 },
      contended: [{ procs: 8, rounds: 5, dirs: ['tmpfs'] }],
      floorCompare: [{ procs: 1, rounds: 5, dirs: ['disk'] }, { procs: 8, rounds: 5, dirs: ['disk'] }],
      contendedReps: 1,
      dflockd: { workers: [1, 10, 100], seconds: 0.2, reps: 1, goTimeoutMs: 20_000 },
      memory: { fileCycles: 2_000, dflockdPairs: 500, dflockdSeconds: 3, warmup: 100 },
    }
  : {
      file: { reps: 3, seconds: 1, warmup: 300 },
      contended: [
        { procs: 2, rounds: 300, dirs: ['tmpfs'] },
        { procs: 8, rounds: 300, dirs: ['tmpfs', 'disk'], references: ['tmpfs'], noFsync: ['disk'] },
        { procs: 32, rounds: 100, dirs: ['tmpfs'] },
      ],
      // Against the floor of the same protocol and durability, on the disk (issue 24): 1 and 8 processes.
      // warmup: cycles each addon contender runs on a lock of its own before the barrier (bench/workers/contender.js).
      floorCompare: [{ procs: 1, rounds: 5000, dirs: ['disk', 'tmpfs'], warmup: 3000 }, { procs: 8, rounds: 300, dirs: ['disk', 'tmpfs'], warmup: 500 }],
      contendedReps: 3,
      dflockd: { workers: [1, 10, 100], seconds: 1.5, reps: 3, goTimeoutMs: 180_000 },
      memory: { fileCycles: 1_000_000, dflockdPairs: 500_000, dflockdSeconds: 180, warmup: 2_000 },
    }

const failures = []
const log = (...a) => console.error('[bench]', ...a)

function fail(where, e) {
  const msg = `${where}: ${(e && e.message) || e}`
  failures.push(msg)
  log(`FAILED ${msg}`)
  return { error: String((e && e.message) || e).split('\n')[0] }
}

// ─────────────────────────── 1. file locks, one process ───────────────────────────

function buildFloor() {
  const r = spawnSync('cargo', ['build', '--release', '--quiet', '--manifest-path', path.join(__dirname, 'floor', 'Cargo.toml')], {
    cwd: root,
    stdio: ['ignore', 'inherit', 'inherit'],
  })
  if (r.status !== 0) throw new Error('cargo build of bench/floor failed')
  return path.join(__dirname, 'floor', 'target', 'release', 'sema-bench-floor')
}

const FILE_VARIANTS = [
  { id: 'floor', label: 'raw syscall floor (Rust)', style: 'floor', fsync: false },
  { id: 'floor', label: 'raw syscall floor (Rust)', style: 'floor', fsync: true },
  { id: 'floor-engine', label: "engine's exact syscalls, no user-space work (Rust)", style: 'floor', fsync: false },
  { id: 'floor-engine', label: "engine's exact syscalls, no user-space work (Rust)", style: 'floor', fsync: true },
  { id: 'addon-sync', label: 'addon `Semaphore` sync, heartbeat off', style: 'sync', fsync: false, heartbeat: false },
  { id: 'addon-sync', label: 'addon `Semaphore` sync, heartbeat off', style: 'sync', fsync: true, heartbeat: false },
  { id: 'addon-sync', label: 'addon `Semaphore` sync, heartbeat on (default)', style: 'sync', fsync: false },
  { id: 'addon-sync', label: 'addon `Semaphore` sync, heartbeat on (default)', style: 'sync', fsync: true },
  { id: 'addon-async', label: 'addon async `tryAcquire(p)` + `lock.release()`', style: 'async', fsync: false },
  { id: 'addon-async', label: 'addon async `tryAcquire(p)` + `lock.release()`', style: 'async', fsync: true },
  { id: 'proper-lockfile-sync', label: 'proper-lockfile 4.1.2 `lockSync`/`unlockSync`', style: 'sync', peer: true },
  { id: 'proper-lockfile-async', label: 'proper-lockfile 4.1.2 `lock()` + release()', style: 'async', peer: true },
  { id: 'lockfile-sync', label: 'lockfile 1.0.4 `lockSync`/`unlockSync`', style: 'sync', peer: true },
]

async function fileVariant(v, dir, floorBin) {
  const p = P.file
  if (v.id === 'floor' || v.id === 'floor-engine') {
    const mode = v.id === 'floor' ? 'floor' : 'engine'
    const { result } = await runJson(floorBin, [dir, '100000000', v.fsync ? '1' : '0', String(p.warmup), String(p.seconds), mode], { timeoutMs: 120_000 })
    return result
  }
  const cfg = { kind: v.id, dir, fsync: v.fsync, heartbeat: v.heartbeat, seconds: p.seconds, warmup: p.warmup }
  const { result } = await runJson(process.execPath, [path.join(__dirname, 'workers', 'file-single.js'), JSON.stringify(cfg)], { timeoutMs: 120_000 })
  return result
}

async function runFile(dirs) {
  const floorBin = buildFloor()
  const out = {}
  for (const [dirName, dir] of Object.entries(dirs)) {
    const runs = FILE_VARIANTS.map(() => [])
    for (let rep = 0; rep < P.file.reps; rep++) {
      for (let i = 0; i < FILE_VARIANTS.length; i++) {
        const v = FILE_VARIANTS[i]
        try {
          runs[i].push(await fileVariant(v, dir, floorBin))
        } catch (e) {
          runs[i].push(fail(`file/${dirName}/${v.id}${v.fsync ? '+fsync' : ''}`, e))
        }
      }
      log(`file ${dirName}: repetition ${rep + 1}/${P.file.reps} done`)
    }
    // per variant: the repetition with the median ops/s
    out[dirName] = FILE_VARIANTS.map((v, i) => {
      const ok = runs[i].filter((r) => !r.error)
      if (ok.length === 0) return { ...v, error: runs[i][0].error }
      const m = median(ok.map((r) => r.opsPerSec))
      const pick = ok.reduce((a, b) => (Math.abs(b.opsPerSec - m) < Math.abs(a.opsPerSec - m) ? b : a))
      return { ...v, ...pick, allOpsPerSec: ok.map((r) => r.opsPerSec) }
    })
  }
  return out
}

function fileTable(rows) {
  const floor = (fsync) => rows.find((r) => r.id === 'floor' && r.fsync === fsync)
  const plSync = rows.find((r) => r.id === 'proper-lockfile-sync')
  const plAsync = rows.find((r) => r.id === 'proper-lockfile-async')
  const lf = rows.find((r) => r.id === 'lockfile-sync')
  return table(
    ['variant', 'fsync', 'ops/s', 'p50 µs', 'p99 µs', 'p50 ÷ floor p50 (target ≤ 1.3)', 'time ÷ floor (ops/s)', '× proper-lockfile ops/s', '× lockfile ops/s'],
    rows.map((r) => {
      if (r.error) return [r.label, r.peer ? 'n/a' : r.fsync ? 'yes' : 'no', `error: ${r.error}`, '', '', '', '', '', '']
      const fl = r.peer ? null : floor(r.fsync)
      const pl = r.style === 'async' ? plAsync : plSync
      return [
        r.label,
        r.peer ? 'no (none)' : r.fsync ? 'yes' : 'no',
        num(r.opsPerSec),
        num(r.p50Us),
        num(r.p99Us),
        r.id === 'floor' ? '1.00×' : fl && !fl.error ? ratio(r.p50Us, fl.p50Us) : r.peer ? `${ratio(r.p50Us, floor(false)?.p50Us)} (vs no-fsync floor)` : '–',
        r.id === 'floor' ? '1.00×' : fl && !fl.error ? ratio(fl.opsPerSec, r.opsPerSec) : r.peer ? `${ratio(floor(false)?.opsPerSec, r.opsPerSec)} (vs no-fsync floor)` : '–',
        r.style === 'floor' || !pl || pl.error || r.id.startsWith('proper') ? '' : ratio(r.opsPerSec, pl.opsPerSec),
        r.style === 'floor' || !lf || lf.error || r.id === 'lockfile-sync' ? '' : ratio(r.opsPerSec, lf.opsPerSec),
      ]
    }),
  )
}

// ─────────────────────────── 2. file locks, contended ───────────────────────────

async function runContended(dirs) {
  const out = []
  for (const c of P.contended) {
    for (const dirName of c.dirs) {
      if (!dirs[dirName]) continue
      // Extra rows: the JS-thread reference; on disk, the addon without fsync (what waiting costs apart from fsync).
      const runs = [{ kind: 'addon' }, { kind: 'proper-lockfile' }]
      if ((c.references || []).includes(dirName)) runs.push({ kind: 'js-watch' })
      if ((c.noFsync || []).includes(dirName)) runs.splice(1, 0, { kind: 'addon', fsync: false })
      // Interleaved repetitions; the row is the one with the median ops/s, its overlaps the sum over all of them.
      const done = runs.map(() => [])
      for (let rep = 0; rep < P.contendedReps; rep++) {
        for (const [i, { kind, fsync }] of runs.entries()) {
          try {
            const r = await contend({ kind, fsync, procs: c.procs, rounds: c.rounds, dir: dirs[dirName], timeoutMs: smoke ? 20_000 : 300_000 })
            done[i].push(r)
            log(`contended ${kind}${fsync === false ? ' (fsync off)' : ''} ${c.procs}×${c.rounds} ${dirName}: ${num(r.opsPerSec)} ops/s, overlaps ${r.overlaps}`)
          } catch (e) {
            done[i].push({ error: fail(`contended/${kind}/${c.procs}/${dirName}`, e).error })
          }
        }
      }
      for (const [i, { kind, fsync }] of runs.entries()) {
        const ok = done[i].filter((r) => !r.error)
        if (!ok.length) {
          out.push({ kind, fsync, procs: c.procs, rounds: c.rounds, dir: dirName, error: done[i][0].error })
          continue
        }
        const median = [...ok].sort((a, b) => a.opsPerSec - b.opsPerSec)[Math.floor((ok.length - 1) / 2)]
        out.push({
          ...median,
          dir: dirName,
          runs: ok.length,
          overlaps: ok.reduce((n, r) => n + r.overlaps, 0),
          intervalOverlaps: ok.reduce((n, r) => n + r.intervalOverlaps, 0),
          opsPerSecAll: ok.map((r) => r.opsPerSec),
        })
      }
    }
  }
  return out
}

/** Median-of-reps row for each of `runs` (interleaved repetitions), as runContended's main loop. */
function medianRows(runs, done, extra) {
  return runs.map(({ kind, fsync }, i) => {
    const ok = done[i].filter((r) => !r.error)
    if (!ok.length) return { kind, fsync, ...extra, error: done[i][0].error }
    const median = [...ok].sort((a, b) => a.opsPerSec - b.opsPerSec)[Math.floor((ok.length - 1) / 2)]
    return {
      ...median,
      ...extra,
      runs: ok.length,
      overlaps: ok.reduce((n, r) => n + r.overlaps, 0),
      intervalOverlaps: ok.reduce((n, r) => n + (r.intervalOverlaps || 0), 0),
      opsPerSecAll: ok.map((r) => r.opsPerSec),
    }
  })
}

/**
 * The file API against the floor of its own protocol and durability (bench/floor/src/bin/file-contended-floor.rs):
 * each process acquires, reads a counter file, writes it + 1, releases; fsync on; on the disk. A lost update counts
 * as an overlap.
 */
async function runFloorCompare(dirs) {
  const out = []
  if (!dirs.disk || !P.floorCompare) return out
  buildFloor()
  // floor-fifo and floor-fifo-hop: the floor with the addon's fairness, and with that and two thread hops per
  // acquisition (the addon's caller, a JS thread, must not block): what fairness and a non-blocking caller cost.
  // node-floor: the floor-fifo contender behind Node (its acquisition on libuv's pool, a promise, the JS round):
  // the floor of any lock a Node caller awaits, with none of the addon in it. node-floor-agent: the same with the line
  // stood in by an agent thread and waits a cancel could end, as the addon's: what a wait that can time out costs.
  const runs = [{ kind: 'floor' }, { kind: 'floor-after' }, { kind: 'floor-fifo' }, { kind: 'floor-fifo-hop' }, { kind: 'node-floor' }, { kind: 'node-floor-agent' }, { kind: 'addon' }, { kind: 'semaphore' }]
  for (const c of P.floorCompare) {
    // The disk (the issue's case) and tmpfs: the floor's rate on the shared disk swings with the other load on it,
    // on tmpfs there is no device in the measurement at all.
    for (const dirName of c.dirs ?? ['disk']) {
      const dir = dirs[dirName]
      if (!dir) continue
      const done = runs.map(() => [])
      for (let rep = 0; rep < P.contendedReps; rep++) {
        for (const [i, { kind }] of runs.entries()) {
          try {
            const r = await contend({ kind, work: 'counter', procs: c.procs, rounds: c.rounds, warmup: c.warmup, dir, timeoutMs: smoke ? 20_000 : 300_000 })
            done[i].push(r)
            log(`floor compare ${kind} ${c.procs}×${c.rounds} ${dirName}: ${num(r.opsPerSec)} ops/s, lost updates ${r.overlaps}`)
          } catch (e) {
            done[i].push({ error: fail(`floor-compare/${kind}/${c.procs}/${dirName}`, e).error })
          }
        }
      }
      out.push(...medianRows(runs, done, { procs: c.procs, rounds: c.rounds, dir: dirName, work: 'counter' }))
    }
  }
  return out
}

/**
 * Where a hand-off's time goes beyond the floor's system calls (bench/file-hops.js, issue 24): the JS ↔ native
 * crossings and thread hops alone, against the lock cycle with its attempt on tokio, on the JS thread, and the floor.
 */
function runFileHops(dirs) {
  if (!dirs.disk) return null
  const r = spawnSync(process.execPath, [path.join(__dirname, 'file-hops.js'), dirs.disk, `--n=${smoke ? 50 : 3000}`], { encoding: 'utf8', timeout: 300_000 })
  if (r.status !== 0) return { error: fail('file-hops', new Error(`exit ${r.status ?? r.signal}: ${(r.stderr || '').trim().slice(-500)}`)).error }
  return { table: r.stdout.trim() }
}

function floorCompareTable(rows) {
  const label = {
    floor: 'floor: the same protocol in Rust (O_TMPFILE + fsync, linkat, fsync(dir), inotify wake-up; no queue)',
    'floor-after': "the floor with the engine's former fsync order (the content synced after the link, with the directory)",
    'floor-fifo': 'the floor with a FIFO line of waiters (flock of a queue file, only the head watches; the lock goes to the next process every time)',
    'floor-fifo-hop': 'the floor with the FIFO line and each acquisition made by a second thread (two thread hops per acquisition, as for a caller that must not block)',
    'node-floor': "the floor with the FIFO line behind Node: the floor's contender as a Node-API module, its acquisition on libuv's pool (napi async work), a promise per acquisition, the round's work and the release on the JS thread (what any lock a Node caller awaits pays)",
    'node-floor-agent': 'the floor behind Node with a line a cancel can leave: an agent thread stands in the line for the contender and wakes it at the head, the inotify wait polled beside an eventfd (what a wait that can time out or be aborted adds, as the addon pays it)',
    addon: 'addon `acquire(p)` + `lock.release()`',
    semaphore: 'addon `Semaphore`: `await sem.acquire()` + `sem.release()`',
  }
  const floor = (r) => rows.find((x) => x.kind === 'floor' && x.procs === r.procs && (x.dir ?? 'disk') === (r.dir ?? 'disk') && !x.error)
  return table(
    ['lock', 'dir', 'procs × rounds', 'ops/s', 'ms per hand-off', '× floor ops/s (target ≥ 0.8)', 'hand-off p50 ms', 'CPU µs per hand-off (all processes)', 'thread wake-ups per hand-off (all processes)', 'lost updates'],
    rows.map((r) => {
      if (r.error) return [label[r.kind], r.dir ?? 'disk', `${r.procs} × ${r.rounds}`, `error: ${r.error}`, '', '', '', '', '', '']
      const fl = floor(r)
      return [
        label[r.kind],
        r.dir ?? 'disk',
        `${r.procs} × ${r.rounds}`,
        num(r.opsPerSec),
        num(1000 / r.opsPerSec, 3),
        r.kind === 'floor' ? '1.00×' : fl ? ratio(r.opsPerSec, fl.opsPerSec) : '–',
        r.handoffP50Ms === undefined ? '' : num(r.handoffP50Ms, 3),
        r.cpuUsPerOp === undefined ? '' : num(r.cpuUsPerOp, 0),
        // Voluntary context switches: counts, stable on a shared machine where the times are not.
        r.vcswPerOp === undefined ? '' : num(r.vcswPerOp, 1),
        String(r.overlaps + (r.intervalOverlaps || 0)),
      ]
    }),
  )
}

function contendedTable(rows) {
  const peer = (r) => rows.find((x) => x.kind === 'proper-lockfile' && x.procs === r.procs && x.dir === r.dir && !x.error)
  const label = {
    'node-floor': "the floor with the FIFO line behind Node: the floor's contender as a Node-API module, its acquisition on libuv's pool (napi async work), a promise per acquisition, the round's work and the release on the JS thread (what any lock a Node caller awaits pays)",
    addon: 'addon `acquire(p)` + `lock.release()`',
    'proper-lockfile': 'proper-lockfile 4.1.2 `lock()` (retries 1–10 ms)',
    'js-watch': 'reference: wake and attempt on the JS thread (fs.watch + sync tryAcquire), no queue, no fairness',
  }
  return table(
    ['lock', 'dir', 'procs × rounds', 'ops/s', 'hand-off p50 ms', 'hand-off p99 ms', 'wait p50 ms', 'wait p99 ms', 'overlaps', 'same holder again', '× proper-lockfile ops/s'],
    rows.map((r) => {
      const name = r.fsync === false ? `${label[r.kind]}, \`fsync: false\`` : label[r.kind]
      if (r.error) return [name, r.dir, `${r.procs} × ${r.rounds}`, `error: ${r.error}`, '', '', '', '', '', '', '']
      const pl = peer(r)
      return [
        name,
        r.dir,
        `${r.procs} × ${r.rounds}`,
        num(r.opsPerSec),
        num(r.handoffP50Ms, 3),
        num(r.handoffP99Ms, 2),
        num(r.waitP50Ms, 2),
        num(r.waitP99Ms, 1),
        `${r.overlaps}${r.intervalOverlaps ? ` (+${r.intervalOverlaps} by times)` : ''}`,
        `${(r.sameHolderShare * 100).toFixed(0)} %`,
        r.kind !== 'proper-lockfile' && pl ? ratio(r.opsPerSec, pl.opsPerSec) : '',
      ]
    }),
  )
}

// ─────────────────────────── 3. dflockd ───────────────────────────

if (listArg('workers')) P.dflockd.workers = listArg('workers').split(',').map(Number)
if (listArg('reps')) P.dflockd.reps = Number(listArg('reps'))

const DFL_CLIENTS = [
  { id: 'addon-connection', label: 'addon `Connection` (acquire + release on one connection)' },
  { id: 'addon-distributedlock', label: 'addon `DistributedLock` reused (acquire() + release()), default driver (event loop; the renew watchdog covers a blocked JS thread)' },
  { id: 'addon-distributedlock-tokio', label: 'addon `DistributedLock` reused, tokio driver (forced: `SEMA_NATIVE_DFLOCKD_DRIVER=tokio`; what TLS, shared mode, Bun and Deno use)' },
  { id: 'addon-loop-shape', label: '`DistributedLock`\'s wire shape (`e` + `r`, a renew timer per hold) on the event-loop `Connection`: its ceiling on that driver' },
  { id: 'addon-connection-tokio', label: 'addon `Connection` on its tokio driver (`SEMA_NATIVE_LIBUV=off`: the ceiling of a tokio-thread round trip)' },
  { id: 'ts-lowlevel', label: 'TS client `dflockd-client` low-level `acquire`/`release` (one socket)' },
  { id: 'ts-distributedlock', label: 'TS client `dflockd-client` `DistributedLock` reused (a connection per acquisition)' },
  { id: 'node-net', label: 'plain Node `net` loop (floor for a JS client)' },
  { id: 'go-standin', label: 'Go `net` loop, same shape as cmd/bench (stand-in, not the official client)' },
  { id: 'rust-floor', label: 'Rust blocking floor (std `TcpStream`, a thread per worker: the least any client costs)' },
]

/** The rows run: every client, or `--clients=a,b` (ids of DFL_CLIENTS); with bench/.baseline, the addon
 * `DistributedLock` rows of that build too (bench/dflockd.js `hasBaseline`). */
function dflClients() {
  const ids = listArg('clients')?.split(',') ?? null
  const base = DFL_CLIENTS.filter((c) => !ids || ids.includes(c.id))
  if (!dfl.hasBaseline()) return base
  const extra = base
    .filter((c) => c.id.startsWith('addon-distributedlock'))
    .map((c) => ({ id: `${c.id}-baseline`, label: `${c.label}: **baseline build** (bench/.baseline)` }))
  return [...base, ...extra]
}

async function runDflockd() {
  const server = await dfl.startServer()
  log(`dflockd: ${server.kind} ${server.version} on 127.0.0.1:${server.port}`)
  const out = { server: { kind: server.kind, version: server.version, bin: server.bin, reason: server.reason }, rows: [], goOfficial: null }
  try {
    const go = dfl.buildGoStandIn()
    if (go.unavailable) fail('dflockd/go stand-in build', new Error(go.unavailable))
    // The Go client's own benchmark, tried once (it needs the module proxy); its failure reason is reported.
    log('dflockd: the Go client cmd/bench v1.10.0 (built by setup, else go run)')
    const official = dfl.goOfficial(server.port, 1, smoke ? 10 : 500, P.dflockd.goTimeoutMs)
    out.goOfficial = official.unavailable ? { unavailable: official.unavailable } : { available: true }
    for (const workers of P.dflockd.workers) {
      out.rows.push(...(await clientRows(server.port, workers, go, 'dflockd')))
      if (!official.unavailable && !smoke && dflClients().length >= DFL_CLIENTS.length) {
        const r = dfl.goOfficial(server.port, workers, 500, P.dflockd.goTimeoutMs)
        out.rows.push({ id: 'go-official', label: 'Go client `cmd/bench` v1.10.0', workers, ...(r.unavailable ? { error: r.unavailable } : r) })
      } else {
        out.rows.push({ id: 'go-official', label: 'Go client `cmd/bench` v1.10.0', workers, unavailable: official.unavailable || (smoke ? 'skipped in --smoke' : 'skipped with --clients') })
      }
      log(`dflockd ${workers} workers done`)
    }
  } finally {
    await server.stop()
  }
  // Client-bound: the same clients against an instant-reply stand-in server, so the clients' own cost shows.
  const go = dfl.buildGoStandIn()
  if (go.unavailable) {
    out.clientBound = { error: go.unavailable }
  } else {
    const fake = await dfl.startFakeServer(go.serverBin)
    out.clientBound = { rows: [] }
    try {
      for (const workers of P.dflockd.workers) out.clientBound.rows.push(...(await clientRows(fake.port, workers, go, 'client-bound')))
      log('dflockd client-bound done')
    } finally {
      await fake.stop()
    }
  }
  return out
}

let floorClientBin = null
/** bench/floor's dflockd-floor binary (built with the file floor, once). */
function floorClient() {
  if (!floorClientBin) floorClientBin = path.join(path.dirname(buildFloor()), 'dflockd-floor')
  return floorClientBin
}

/** Every client at one worker count, P.dflockd.reps interleaved repetitions; the median-ops/s run of each. */
async function clientRows(port, workers, go, where) {
  const clients = dflClients()
  const runs = Object.fromEntries(clients.map((c) => [c.id, []]))
  for (let rep = 0; rep < P.dflockd.reps; rep++) {
    for (const c of clients) {
      try {
        if (c.id === 'go-standin') {
          if (go.unavailable) throw new Error(go.unavailable)
          runs[c.id].push(await dfl.goStandInRun(go.bin, port, workers, P.dflockd.seconds))
        } else if (c.id === 'rust-floor') {
          runs[c.id].push(await dfl.floorRun(floorClient(), port, workers, P.dflockd.seconds))
        } else {
          runs[c.id].push(await dfl.clientRun(c.id, port, workers, P.dflockd.seconds))
        }
      } catch (e) {
        runs[c.id].push(fail(`${where}/${c.id}/${workers}`, e))
      }
    }
  }
  return clients.map((c) => {
    const ok = runs[c.id].filter((r) => !r.error)
    if (ok.length === 0) return { ...c, workers, error: runs[c.id][0].error }
    const m = median(ok.map((r) => r.opsPerSec))
    const pick = ok.reduce((a, b) => (Math.abs(b.opsPerSec - m) < Math.abs(a.opsPerSec - m) ? b : a))
    return { ...c, workers, ...pick, allOpsPerSec: ok.map((r) => r.opsPerSec) }
  })
}

function dflockdTable(d) {
  const find = (id, w) => d.rows.find((r) => r.id === id && r.workers === w && !r.error && !r.unavailable)
  return table(
    ['client', 'workers', 'ops/s (l + r pairs)', 'p50 ms', 'p99 ms', 'client CPU µs/op', 'switches/op', '× Go cmd/bench', '× Go stand-in', '× Node net loop', '× Rust floor'],
    d.rows.map((r) => {
      if (r.unavailable) return [r.label, String(r.workers), `unavailable: ${r.unavailable}`, '', '', '', '', '', '', '', '']
      if (r.error) return [r.label, String(r.workers), `error: ${r.error}`, '', '', '', '', '', '', '', '']
      const go = find('go-official', r.workers)
      const gs = find('go-standin', r.workers)
      const nn = find('node-net', r.workers)
      const fl = find('rust-floor', r.workers)
      return [
        r.label,
        String(r.workers),
        num(r.opsPerSec),
        num(r.p50Ms, 3),
        num(r.p99Ms, 2),
        r.cpuUsPerOp !== undefined ? num(r.cpuUsPerOp, 1) : '–',
        r.switchesPerOp !== undefined ? num(r.switchesPerOp, 2) : '–',
        go && r.id !== 'go-official' ? ratio(r.opsPerSec, go.opsPerSec) : go ? '' : 'n/a',
        gs && r.id !== 'go-standin' ? ratio(r.opsPerSec, gs.opsPerSec) : '',
        nn && r.id !== 'node-net' ? ratio(r.opsPerSec, nn.opsPerSec) : '',
        fl && r.id !== 'rust-floor' ? ratio(r.opsPerSec, fl.opsPerSec) : '',
      ]
    }),
  )
}

// ─────────────────────────── 4. memory ───────────────────────────

async function runMemory(dirs) {
  const m = P.memory
  const dir = dirs.tmpfs || dirs.disk
  const worker = path.join(__dirname, 'workers', 'memory.js')
  const out = []
  const jobs = [
    { label: 'control: plain JS loop allocating the same result objects, no lock', cfg: { kind: 'control', cycles: m.fileCycles, warmup: m.warmup } },
    { label: 'file `Semaphore` tryAcquire + release, heartbeat off', cfg: { kind: 'file', dir, heartbeat: false, cycles: m.fileCycles, warmup: m.warmup } },
    { label: 'file `Semaphore` tryAcquire + release, heartbeat on (default)', cfg: { kind: 'file', dir, cycles: m.fileCycles, warmup: m.warmup } },
  ]
  let server = null
  try {
    server = await dfl.startServer()
    jobs.push({
      label: `dflockd \`Connection\` acquire + release (10 connections, ${server.kind} server)`,
      cfg: { kind: 'dflockd', port: server.port, workers: 10, cycles: m.dflockdPairs, seconds: m.dflockdSeconds, warmup: 10 },
    })
  } catch (e) {
    out.push({ label: 'dflockd `Connection` acquire + release', ...fail('memory/dflockd server', e) })
  }
  try {
    for (const j of jobs) {
      try {
        const { result } = await runJson(process.execPath, ['--expose-gc', worker, JSON.stringify(j.cfg)], { timeoutMs: 600_000 })
        out.push({ label: j.label, kind: j.cfg.kind, ...result })
        log(`memory ${j.label}: ${num(result.growthMB, 2)} MB over ${result.cycles} cycles`)
      } catch (e) {
        out.push({ label: j.label, kind: j.cfg.kind, ...fail(`memory/${j.label}`, e) })
      }
    }
  } finally {
    if (server) await server.stop()
  }
  return out
}

/** RSS growth between the checkpoint nearest half-way and the end: ~0 for a plateau, ~half the total for a leak. */
function lastHalf(r) {
  if (!r.samples || r.samples.length < 2) return '–'
  const mid = r.samples[Math.floor((r.samples.length - 1) / 2)]
  return num(r.rssAfterMB - mid[1], 2)
}

function memoryTable(rows) {
  return table(
    ['what', 'cycles (round trips)', 'seconds', 'RSS before MB', 'RSS after MB', 'growth MB (target < 20)', 'growth in the last half MB'],
    rows.map((r) =>
      r.error
        ? [r.label, `error: ${r.error}`, '', '', '', '', '']
        : [
            r.label,
            `${num(r.cycles, 0)}${r.roundTrips ? ` (${num(r.roundTrips, 0)})` : ''}${r.capped ? ', time cap reached' : ''}`,
            num(r.seconds, 1),
            num(r.rssBeforeMB, 1),
            num(r.rssAfterMB, 1),
            num(r.growthMB, 2),
            lastHalf(r),
          ],
    ),
  )
}

function diagnosticsTable(d) {
  return table(
    ['what', 'cost'],
    [
      ['acquire hook, nobody subscribed (ns per acquire, against no hook)', num(d.unsubscribedCostNs, 2)],
      ['what one no-op subscriber on all five events adds (ns per awaited acquire)', num(d.subscribedCostNs, 0)],
      ["an acquire's listing for query() while it waits (ns per acquire)", num(d.waitingListCostNs, 0)],
      ['tryAcquire + release cycle, tmpfs, fsync and heartbeat off: nobody subscribed (µs)', num(d.cycleUsUnsubscribed, 1)],
      ['the same cycle with the no-op subscriber (µs)', num(d.cycleUsSubscribed, 1)],
    ],
  )
}

// ─────────────────────────── targets ───────────────────────────

/**
 * The floors the file rows are also measured against, each with more of what the addon must do (issue 24), and how
 * the Targets table names the bound.
 */
const FLOOR_BOUNDS = [
  // A fair lock whose caller must not block: the floor with the FIFO line and two thread hops.
  ['floor-fifo-hop', 'the bound (floor with FIFO line + 2 thread hops)'],
  // Any Node caller: the same fair protocol behind Node; the addon's own cost is the rest.
  ['node-floor', 'the bound for a Node caller (floor with FIFO line behind Node)'],
  // The same with the addon's way of making the wait cancellable (an agent thread in the line): its cost.
  ['node-floor-agent', 'the bound for a Node caller whose wait can be cancelled (that floor with the line stood in by an agent thread)'],
]

function targets(res) {
  const out = []
  // `bound`: when a target is missed and the least a Node caller can do (a floor behind Node, measured in the same run)
  // misses it too, what that floor makes: the target cannot be met from Node on this machine, and the row says so.
  const add = (target, measured, met, bound) =>
    out.push([target, measured, met === null ? 'n/a' : met ? 'met' : bound ? `**missed**; bound: ${bound}` : '**missed**'])
  /** The bound of a missed ratio target: the best of `peers` ([label, ops/s]) when even it is below `k` × `base`, and
   * above `mine` (a peer the row already beats bounds nothing). */
  const boundOf = (k, base, peers, mine) => {
    const known = peers.filter(([, ops]) => ops > 0)
    if (known.length === 0) return undefined
    const [label, ops] = known.reduce((a, b) => (b[1] > a[1] ? b : a))
    return ops < k * base && ops > mine ? `${label} makes ${ratio(ops, base)}` : undefined
  }
  if (res.file) {
    for (const [dirName, rows] of Object.entries(res.file)) {
      for (const fsync of [false, true]) {
        const fl = rows.find((r) => r.id === 'floor' && r.fsync === fsync && !r.error)
        const a = rows.find((r) => r.id === 'addon-sync' && r.heartbeat === false && r.fsync === fsync && !r.error)
        if (!fl || !a) continue
        const t = a.p50Us / fl.p50Us
        const tOps = fl.opsPerSec / a.opsPerSec
        add(
          `file, 1 process, ${dirName}, fsync ${fsync ? 'on' : 'off'}: sync addon (heartbeat off) ≤ 1.3× floor (per-cycle p50)`,
          `${t.toFixed(2)}× (p50 ${num(a.p50Us)} vs ${num(fl.p50Us)} µs; by ops/s ${tOps.toFixed(2)}×)`,
          t <= 1.3,
        )
      }
    }
  }
  if (res.contended) {
    const all = res.contended.filter((r) => !r.error)
    const overlaps = all.reduce((s, r) => s + r.overlaps + r.intervalOverlaps, 0)
    add('contended: 0 overlapping holders (every run)', `${overlaps} overlaps in ${all.reduce((n, r) => n + (r.runs || 1), 0)} runs`, overlaps === 0 && all.length > 0)
    for (const r of all.filter((x) => x.work === 'counter' && !x.kind.startsWith('floor') && !x.kind.startsWith('node-floor'))) {
      // Paired by directory: the tmpfs rows against the tmpfs floor, the disk rows against the disk floor. The target
      // (issue 24) is the disk's; on tmpfs, where the floor makes no system call that waits, the ratio is shown only.
      const peer = (kind) => all.find((x) => x.work === 'counter' && x.kind === kind && x.procs === r.procs && x.dir === r.dir)
      const row = `file vs its floor, ${r.procs} process${r.procs > 1 ? 'es' : ''}, ${r.dir}: ${r.kind === 'semaphore' ? '`Semaphore`' : 'functions'}`
      const fl = peer('floor')
      const target = r.dir === 'disk'
      if (fl) {
        const nodeFloors = ['node-floor', 'node-floor-agent'].map((k) => [`\`${k}\``, peer(k)?.opsPerSec])
        add(
          `${row} ${target ? '≥ 0.8× floor ops/s' : '(no target on tmpfs)'}`,
          `${ratio(r.opsPerSec, fl.opsPerSec)} (${num(r.opsPerSec)} vs ${num(fl.opsPerSec)})`,
          target ? r.opsPerSec >= 0.8 * fl.opsPerSec : null,
          target && boundOf(0.8, fl.opsPerSec, nodeFloors, r.opsPerSec),
        )
      }
      for (const [kind, bound] of FLOOR_BOUNDS) {
        const b = peer(kind)
        if (fl && b) add(`${row}, ${bound}`, `${ratio(r.opsPerSec, b.opsPerSec)} of that floor (${num(r.opsPerSec)} vs ${num(b.opsPerSec)}), which is ${ratio(b.opsPerSec, fl.opsPerSec)} of the floor`, null)
      }
    }
    for (const r of all.filter((x) => x.kind === 'addon' && x.procs === 8 && x.fsync !== false && x.work !== 'counter')) {
      const pl = all.find((x) => x.kind === 'proper-lockfile' && x.procs === 8 && x.dir === r.dir)
      if (pl) add(`contended, 8 processes, ${r.dir}: ≥ 5× proper-lockfile ops/s`, `${ratio(r.opsPerSec, pl.opsPerSec)} (${num(r.opsPerSec)} vs ${num(pl.opsPerSec)})`, r.opsPerSec >= 5 * pl.opsPerSec)
      add(`contended, 8 processes, ${r.dir}: hand-off p50 ≤ 2 ms`, `${num(r.handoffP50Ms, 3)} ms`, r.handoffP50Ms <= 2)
    }
  }
  if (res.dflockd && res.dflockd.rows) {
    const get = (id, w) => res.dflockd.rows.find((r) => r.id === id && r.workers === w && !r.error && !r.unavailable)
    for (const w of [1, 10]) {
      const a = get('addon-connection', w)
      const go = get('go-official', w)
      const gs = get('go-standin', w)
      if (a && go) add(`dflockd, ${w} workers: ≥ 0.8× Go cmd/bench`, ratio(a.opsPerSec, go.opsPerSec), a.opsPerSec >= 0.8 * go.opsPerSec)
      else if (a) add(`dflockd, ${w} workers: ≥ 0.8× Go cmd/bench`, `Go client unavailable; vs the Go stand-in: ${gs ? ratio(a.opsPerSec, gs.opsPerSec) : 'n/a'}`, null)
    }
    // Issue #24: DistributedLock (the API dflockd-client users and acquire('dflockd://…') call) against the TS client's
    // low-level functions and the blocking floor (one socket and one thread per worker, no runtime).
    // Both drivers: the default (the event loop) and the forced tokio threads (lib/dflockd/common.js loopDriverChosen).
    const dl = (w, id) => get(id, w)
    const issue24 = [
      [1, 'ts-lowlevel', 1.5, 'TS client low-level'],
      [1, 'rust-floor', 1.0, 'blocking floor'],
      [10, 'rust-floor', 0.9, 'blocking floor'],
    ]
    for (const [driver, dlId] of [['default: event loop', 'addon-distributedlock'], ['tokio', 'addon-distributedlock-tokio']]) {
      for (const [w, id, k, what] of issue24) {
        const a = dl(w, dlId)
        const b = get(id, w)
        // Against the blocking floor, the bound is the plain Node `net` loop: the least any JS client does per round trip
        // (on the default driver; the tokio one, for hosts without a usable libuv, is shown as it is).
        const n = id === 'rust-floor' && dlId === 'addon-distributedlock' && get('node-net', w)
        if (a && b) {
          add(
            `dflockd \`DistributedLock\` (${driver}), ${w} worker${w > 1 ? 's' : ''}: ≥ ${k.toFixed(1)}× ${what}`,
            `${ratio(a.opsPerSec, b.opsPerSec)} (${num(a.opsPerSec)} vs ${num(b.opsPerSec)})${n ? `; ${ratio(a.opsPerSec, n.opsPerSec)} of the Node \`net\` loop` : ''}`,
            a.opsPerSec >= k * b.opsPerSec,
            n && boundOf(k, b.opsPerSec, [['the plain Node `net` loop', n.opsPerSec]], a.opsPerSec),
          )
        }
      }
    }
    // A baseline build in the same run (bench/.baseline): this build's DistributedLock rows against it.
    for (const w of P.dflockd.workers) {
      for (const dlId of ['addon-distributedlock', 'addon-distributedlock-tokio']) {
        const a = get(dlId, w)
        const b = get(`${dlId}-baseline`, w)
        const n = get('node-net', w)
        if (a && b) add(`dflockd \`${dlId}\`, ${w} worker${w > 1 ? 's' : ''}: this build vs the baseline build`, `${ratio(a.opsPerSec, b.opsPerSec)} (${num(a.opsPerSec)} vs ${num(b.opsPerSec)})${n ? `; Node \`net\` loop: this ${ratio(a.opsPerSec, n.opsPerSec)}, baseline ${ratio(b.opsPerSec, n.opsPerSec)}` : ''}`, null)
      }
    }
    for (const w of P.dflockd.workers) {
      const a = get('addon-connection', w)
      const n = get('node-net', w)
      if (a && n) add(`dflockd, ${w} workers: ≥ 1.5× plain Node net loop`, `${ratio(a.opsPerSec, n.opsPerSec)} (${num(a.opsPerSec)} vs ${num(n.opsPerSec)})`, a.opsPerSec >= 1.5 * n.opsPerSec)
    }
    // The bound: how far the addon and the Node loop are from the least any client costs (client-bound server).
    const cb = res.dflockd.clientBound && res.dflockd.clientBound.rows
    const cbGet = (id, w) => cb && cb.find((r) => r.id === id && r.workers === w && !r.error && !r.unavailable)
    for (const w of P.dflockd.workers) {
      const a = cbGet('addon-connection', w)
      const n = cbGet('node-net', w)
      const f = cbGet('rust-floor', w)
      if (a && f) {
        add(
          `dflockd client-bound, ${w} workers: bound (Rust blocking floor)`,
          `addon ${ratio(a.opsPerSec, f.opsPerSec)} of the floor's pairs/s, ${num(a.cpuUsPerOp, 1)} vs ${num(f.cpuUsPerOp, 1)} µs CPU/pair, ${num(a.switchesPerOp, 2)} vs ${num(f.switchesPerOp, 2)} switches/pair${n ? `; Node loop ${ratio(n.opsPerSec, f.opsPerSec)}, ${num(n.cpuUsPerOp, 1)} µs, ${num(n.switchesPerOp, 2)} switches` : ''}`,
          null,
        )
      }
    }
  }
  if (res.memory) {
    for (const r of res.memory.filter((x) => !x.error && x.kind !== 'control')) {
      const full = r.kind === 'dflockd' ? r.roundTrips >= 1e6 : r.cycles >= 1e6
      add(`memory: ${r.label}: growth < 20 MB`, `${num(r.growthMB, 2)} MB over ${num(r.kind === 'dflockd' ? r.roundTrips : r.cycles, 0)} ${r.kind === 'dflockd' ? 'round trips' : 'cycles'}${full ? '' : ' (fewer than 1 M)'}`, r.growthMB < 20)
    }
  }
  return table(['target', 'measured', 'verdict'], out)
}

// ─────────────────────────── main ───────────────────────────

function addonAvailable() {
  try {
    const m = require(root)
    return ['tryAcquire', 'Semaphore', 'Connection'].every((k) => typeof m[k] === 'function')
  } catch (e) {
    return false
  }
}

/** Runs each of KIND_SCRIPTS (with --smoke in a smoke run); its table, or its failure. */
function runKinds() {
  return KIND_SCRIPTS.map(([title, file]) => {
    log(`kinds: ${file}`)
    const r = spawnSync(process.execPath, [path.join(__dirname, file), ...(smoke ? ['--smoke'] : [])], { encoding: 'utf8', timeout: 600_000 })
    if (r.status !== 0) return { title, error: fail(`kinds ${file}`, new Error(`exit ${r.status ?? r.signal}: ${(r.stderr || '').trim().slice(-500)}`)).error }
    return { title, table: r.stdout.trim() }
  })
}

async function main() {
  if (renderOnly) {
    const res = JSON.parse(fs.readFileSync(path.join(resultsDir, 'latest.json'), 'utf8'))
    const md = render(res)
    process.stdout.write(md)
    fs.writeFileSync(path.join(resultsDir, 'latest.md'), md)
    return
  }
  const t0 = Date.now()
  if (!addonAvailable()) log('warning: the addon does not load (run `node scripts/setup.js`); its rows will fail')
  const dirs = benchDirs(root)
  const mach = machine(dirs)
  const res = { date: new Date().toISOString(), mode: smoke ? 'smoke' : 'full', sections: only, machine: mach }
  try {
    if (only.includes('file')) {
      try {
        res.file = await runFile(dirs)
      } catch (e) {
        fail('file', e)
      }
    }
    if (only.includes('contended')) {
      res.contended = [...(floorOnly ? [] : await runContended(dirs)), ...(await runFloorCompare(dirs))]
      if (!floorOnly) res.fileHops = runFileHops(dirs)
    }
    if (only.includes('dflockd')) {
      try {
        res.dflockd = await runDflockd()
      } catch (e) {
        res.dflockd = fail('dflockd', e)
      }
    }
    if (only.includes('kinds')) res.kinds = runKinds()
    if (only.includes('memory')) res.memory = await runMemory(dirs)
    if (only.includes('diagnostics')) {
      try {
        res.diagnostics = (await runJson(process.execPath, [path.join(__dirname, 'diagnostics.js'), ...(smoke ? ['--smoke'] : [])], { timeoutMs: 300_000 })).result
      } catch (e) {
        fail('diagnostics', e)
      }
    }
  } finally {
    for (const d of Object.values(dirs)) fs.rmSync(d, { recursive: true, force: true })
  }
  res.seconds = (Date.now() - t0) / 1000
  res.machine.loadAtEnd = os.loadavg().map((v) => Math.round(v * 10) / 10)
  res.failures = failures

  const md = render(res)
  process.stdout.write(md)
  fs.mkdirSync(resultsDir, { recursive: true })
  // a smoke run does not replace the last full run's results
  const base = smoke ? 'latest-smoke' : floorOnly ? 'latest-floor' : 'latest'
  fs.writeFileSync(path.join(resultsDir, `${base}.json`), JSON.stringify(res, null, 2) + '\n')
  fs.writeFileSync(path.join(resultsDir, `${base}.md`), md)
  log(`wrote bench/results/${base}.json and ${base}.md (${res.seconds.toFixed(0)} s)`)

  const overlaps = (res.contended || []).reduce((s, r) => s + (r.overlaps || 0) + (r.intervalOverlaps || 0), 0)
  if (overlaps > 0) log(`OVERLAPS SEEN: ${overlaps}`)
  if (failures.length || overlaps > 0) process.exitCode = 1
}

function render(res) {
  const m = res.machine
  const parts = [
    `## sema-native benchmarks (${res.mode} run, ${res.date})`,
    '',
    `Machine: ${m.cpu}, ${m.cores} cores, ${m.memoryGiB} GiB, ${m.kernel} ${m.arch}, Node ${m.node}. ` +
      (m.loadAtStart ? `Load average (1/5/15 min) at start ${m.loadAtStart.join(' / ')}, at end ${(m.loadAtEnd || []).join(' / ')} (other work shares the machine). ` : '') +
      `Dirs: ${Object.entries(m.dirs)
        .map(([k, v]) => `${k} = ${v.fs}`)
        .join(', ')}.`,
    '',
  ]
  if (res.file) {
    for (const [dirName, rows] of Object.entries(res.file)) {
      parts.push(`### File lock, one process, no contention — ${dirName} (${m.dirs[dirName].fs})`, '', fileTable(rows), '')
    }
  }
  if (res.contended) {
    parts.push('### File lock, contended (real processes, one lock)', '', contendedTable(res.contended.filter((r) => r.work !== 'counter')), '')
    const vsFloor = res.contended.filter((r) => r.work === 'counter')
    if (vsFloor.length) parts.push('### File lock against its floor (same protocol and durability, disk, counter work)', '', floorCompareTable(vsFloor), '')
  }
  if (res.fileHops) {
    const body = res.fileHops.error ? `error: ${res.fileHops.error}` : res.fileHops.table
    parts.push('### Where a file hand-off goes beyond the floor: crossings and thread hops alone (bench/file-hops.js)', '', body, '')
  }
  if (res.dflockd) {
    if (res.dflockd.error) parts.push('### dflockd', '', `error: ${res.dflockd.error}`, '')
    else {
      const s = res.dflockd.server
      parts.push(`### dflockd lock + release round trips (server: ${s.kind} ${s.version}, loopback)`, '', dflockdTable(res.dflockd), '')
      const cb = res.dflockd.clientBound
      if (cb) {
        parts.push('### dflockd clients, client-bound (instant-reply Go stand-in server, not dflockd)', '')
        parts.push(cb.error ? `error: ${cb.error}` : dflockdTable({ rows: cb.rows }), '')
      }
    }
  }
  for (const k of res.kinds || []) parts.push(`### ${k.title}`, '', k.error ? `error: ${k.error}` : k.table, '')
  if (res.memory) parts.push('### Memory (RSS after `global.gc()`, one process)', '', memoryTable(res.memory), '')
  if (res.diagnostics) parts.push('### diagnostics_channel hooks (bench/diagnostics.js)', '', diagnosticsTable(res.diagnostics), '')
  parts.push('### Targets', '', targets(res), '')
  if (res.failures.length) parts.push('### Failures', '', ...res.failures.map((f) => `- ${f.split('\n')[0]}`), '')
  return parts.join('\n')
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e)
  process.exit(1)
})
