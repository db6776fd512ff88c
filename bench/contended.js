'use strict'
// File locks under contention: N real processes (child_process.fork) on one lock, released together by an IPC
// barrier. See bench/README.md for the definitions of every column.

const { fork } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { summarize } = require('./lib/stats')

/**
 * @param {{kind: 'addon'|'proper-lockfile', procs: number, rounds: number, dir: string, timeoutMs?: number}} cfg
 */
async function contend(cfg) {
  if (cfg.kind === 'floor' || cfg.kind.startsWith('floor-')) return floorRun(cfg)
  const tag = `${cfg.kind}-${cfg.procs}-${process.pid}-${Date.now()}`
  const lockPath = path.join(cfg.dir, `contended-${tag}.lock`)
  const markerPath = path.join(cfg.dir, `contended-${tag}.marker`)
  const counterPath = `${lockPath}.counter`
  if (cfg.kind === 'proper-lockfile') fs.writeFileSync(lockPath, '') // it locks `${file}.lock` and needs `file`
  if (cfg.work === 'counter') fs.writeFileSync(counterPath, '0\n')
  const childCfg = JSON.stringify({ ...cfg, lockPath, markerPath, counterPath })
  const children = []
  const ready = []
  const done = []
  for (let i = 0; i < cfg.procs; i++) {
    const child = fork(path.join(__dirname, 'workers', 'contender.js'), [childCfg], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    children.push(child)
    let readyResolve, doneResolve, doneReject
    ready.push(new Promise((r, j) => ((readyResolve = r), child.once('exit', (c) => j(new Error(`contender exited with ${c} before ready`))))))
    done.push(new Promise((r, j) => ((doneResolve = r), (doneReject = j))))
    child.on('message', (m) => {
      if (m.type === 'ready') readyResolve()
      else if (m.type === 'done') doneResolve(m)
      else if (m.type === 'error') doneReject(new Error(`contender ${m.pid}: ${m.error}`))
    })
    child.on('exit', (code) => {
      if (code !== 0) doneReject(new Error(`contender exited with ${code}`))
    })
  }
  const killAll = () => children.forEach((c) => c.exitCode === null && c.kill('SIGKILL'))
  const timer = setTimeout(killAll, cfg.timeoutMs ?? 300_000)
  try {
    await Promise.all(ready)
    const base = process.hrtime.bigint()
    for (const c of children) c.send({ type: 'go', base: String(base) })
    const results = await Promise.all(done)
    const r = analyse(cfg, results)
    if (cfg.work === 'counter') {
      // Every hold added one: a smaller final value is an update lost to two holders at once.
      const counter = Number(fs.readFileSync(counterPath, 'utf8').trim())
      r.overlaps += r.ops - counter
    }
    return r
  } catch (e) {
    killAll()
    throw e
  } finally {
    clearTimeout(timer)
    for (const p of [lockPath, markerPath, counterPath, `${lockPath}.lock`, `${lockPath}.queue`]) fs.rmSync(p, { force: true, recursive: true })
  }
}

/** The Rust floor of the same protocol (bench/floor/src/bin/file-contended-floor.rs), `counter` work; `floor-after`
 * syncs the lock content after the link instead of before the wait (the engine's order before issue 24);
 * `floor-fifo` adds a FIFO line of waiters (a queue file's `flock`, as the engine's), `floor-fifo-hop` that and each
 * acquisition made by a second thread (two thread hops per acquisition, as a caller that must not block pays). */
async function floorRun(cfg) {
  const { runJson } = require('./lib/proc')
  const bin = path.join(__dirname, 'floor', 'target', 'release', 'file-contended-floor')
  const order = cfg.kind === 'floor' ? 'before' : cfg.kind.slice('floor-'.length)
  const { result } = await runJson(bin, [cfg.dir, String(cfg.procs), String(cfg.rounds), order], { timeoutMs: cfg.timeoutMs ?? 300_000 })
  return { kind: cfg.kind, procs: cfg.procs, rounds: cfg.rounds, ops: result.ops, seconds: result.seconds, opsPerSec: result.opsPerSec, overlaps: result.lostUpdates, intervalOverlaps: 0, cpuUsPerOp: result.cpuUsPerOp, vcswPerOp: result.vcswPerOp, ivcswPerOp: result.ivcswPerOp, threadsPerProc: 1 }
}

function analyse(cfg, results) {
  const holds = []
  let markerOverlaps = 0
  let cpuUs = 0
  let vcsw = 0
  let ivcsw = 0
  let threads = 0
  let switchesKnown = true
  const byThread = {}
  const cpuNsByThread = {}
  for (const r of results) {
    markerOverlaps += r.overlaps
    cpuUs += r.cpuUs || 0
    if (r.switches) {
      vcsw += r.switches.voluntary
      ivcsw += r.switches.involuntary
      threads += r.switches.threads
      for (const [name, v] of Object.entries(r.switches.byThread ?? {})) byThread[name] = (byThread[name] ?? 0) + v
      for (const [name, v] of Object.entries(r.switches.cpuNsByThread ?? {})) cpuNsByThread[name] = (cpuNsByThread[name] ?? 0) + v
    } else switchesKnown = false
    for (let i = 0; i < r.times.length; i += 4) {
      holds.push({ pid: r.pid, called: r.times[i], acquired: r.times[i + 1], releaseCalled: r.times[i + 2], released: r.times[i + 3] })
    }
  }
  holds.sort((a, b) => a.acquired - b.acquired)
  const handoffMs = []
  let intervalOverlaps = 0
  let sameHolder = 0
  for (let i = 1; i < holds.length; i++) {
    const prev = holds[i - 1]
    const cur = holds[i]
    if (cur.acquired < prev.releaseCalled) intervalOverlaps++
    else handoffMs.push((cur.acquired - prev.releaseCalled) / 1e6)
    if (cur.pid === prev.pid) sameHolder++
  }
  const waitMs = holds.map((h) => (h.acquired - h.called) / 1e6)
  const start = Math.min(...holds.map((h) => h.called))
  const end = Math.max(...holds.map((h) => h.released))
  const seconds = (end - start) / 1e9
  const hand = summarize(handoffMs)
  const wait = summarize(waitMs)
  return {
    kind: cfg.kind,
    ...(cfg.fsync === false ? { fsync: false } : {}),
    procs: cfg.procs,
    rounds: cfg.rounds,
    ops: holds.length,
    seconds,
    opsPerSec: holds.length / seconds,
    handoffP50Ms: hand.p50,
    handoffP99Ms: hand.p99,
    waitP50Ms: wait.p50,
    waitP99Ms: wait.p99,
    overlaps: markerOverlaps,
    intervalOverlaps,
    sameHolderShare: holds.length > 1 ? sameHolder / (holds.length - 1) : 0,
    // CPU (user + system, every thread of every contender) per hand-off: on a machine with few cores a hand-off
    // that costs more CPU than the floor's cannot go as fast, whatever its latency.
    cpuUsPerOp: cpuUs / holds.length,
    // Context switches per hand-off (all processes, every thread): voluntary = a thread went to sleep and was
    // woken (the thread hops of a wake-up), involuntary = preempted. Counts, not times: stable on a shared machine.
    ...(switchesKnown
      ? {
          vcswPerOp: vcsw / holds.length,
          ivcswPerOp: ivcsw / holds.length,
          threadsPerProc: threads / results.length,
          // by thread name (a name shared by threads, e.g. tokio's workers and blocking pool, sums them)
          vcswPerOpByThread: Object.fromEntries(Object.entries(byThread).map(([n, v]) => [n, Math.round((v / holds.length) * 100) / 100])),
          cpuUsPerOpByThread: Object.fromEntries(Object.entries(cpuNsByThread).map(([n, v]) => [n, Math.round(v / 1000 / holds.length)])),
        }
      : {}),
  }
}

module.exports = { contend }

if (require.main === module) {
  const [kind = 'proper-lockfile', procs = '8', rounds = '300', dir = '/dev/shm'] = process.argv.slice(2)
  contend({ kind, procs: Number(procs), rounds: Number(rounds), dir }).then(
    (r) => console.log(JSON.stringify(r)),
    (e) => {
      console.error(e)
      process.exit(1)
    },
  )
}
