#!/usr/bin/env node
'use strict'
// Where one file-lock hand-off's time goes, piece by piece, in one process (issue 24): the JS ↔ native crossings
// and thread hops that the addon adds to the floor's system calls (bench/floor/src/bin/file-contended-floor.rs),
// against the lock cycle itself. Each row: one call awaited at a time (latency, not throughput), p50 and mean µs.
//
//   node bench/file-hops.js [dir] [--n=3000]      dir: where lock files go (default: the work disk, bench/results/tmp)
//   node bench/file-hops.js [dir] --cycles[=20000] [--kind=semaphore|functions]
//      the contender's loop in one process (acquire, counter pread + pwrite, release), counted rather than timed:
//      CPU per cycle on the JS thread and on all threads (schedstat), voluntary switches per cycle (issue 24).

const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { summarize } = require('./lib/stats')

const root = path.resolve(__dirname, '..')
const native = require(path.join(root, 'lib', 'native'))
const { Semaphore, acquire } = require(root)

const args = process.argv.slice(2)
const nArg = args.find((a) => a.startsWith('--n='))
const N = nArg ? Number(nArg.slice(4)) : 3000
const baseDir = args.find((a) => !a.startsWith('--')) ?? path.join(__dirname, 'results', 'tmp')
fs.mkdirSync(baseDir, { recursive: true })
const dir = fs.mkdtempSync(path.join(baseDir, 'hops-'))

async function time(label, n, fn) {
  for (let i = 0; i < Math.min(200, n); i++) await fn() // warm-up (JIT, first threads)
  const us = new Float64Array(n)
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint()
    await fn()
    us[i] = Number(process.hrtime.bigint() - t) / 1e3
  }
  const s = summarize(Array.from(us))
  const mean = us.reduce((a, b) => a + b, 0) / n
  return { label, n, p50Us: s.p50, meanUs: mean }
}

/** The Rust floor's cycle in one process (no contention): µs per acquire + work + release. */
function floorCycleUs(rounds) {
  const bin = path.join(__dirname, 'floor', 'target', 'release', 'file-contended-floor')
  if (!fs.existsSync(bin)) return null
  const r = spawnSync(bin, [dir, '1', String(rounds)], { encoding: 'utf8' })
  if (r.status !== 0) return null
  return 1e6 / JSON.parse(r.stdout).opsPerSec
}

/** CPU ns on a CPU so far (schedstat) of the JS thread and of every thread, and voluntary switches of every thread. */
function threadCounts() {
  const jsNs = Number(fs.readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'latin1').split(' ')[0])
  let allNs = 0
  let voluntary = 0
  for (const t of fs.readdirSync('/proc/self/task')) {
    try {
      allNs += Number(fs.readFileSync(`/proc/self/task/${t}/schedstat`, 'latin1').split(' ')[0])
      voluntary += Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(fs.readFileSync(`/proc/self/task/${t}/status`, 'latin1'))[1])
    } catch {} // the thread ended meanwhile
  }
  return { jsNs, allNs, voluntary }
}

/** `--cycles`: the contender's loop (bench/workers/contender.js, counter work) with nobody contending. */
async function cycleLoop(n, kind) {
  const lockPath = path.join(dir, 'cycles.lock')
  const counterPath = path.join(dir, 'counter')
  fs.writeFileSync(counterPath, '0\n')
  const fd = fs.openSync(counterPath, 'r+')
  const buf = Buffer.alloc(32)
  const work = () => {
    const k = fs.readSync(fd, buf, 0, buf.length, 0)
    fs.writeSync(fd, `${Number(buf.toString('latin1', 0, k).trim()) + 1}\n`, 0)
  }
  const tag = `bench ${process.pid}`
  const sem = new Semaphore(lockPath)
  const options = { tag }
  const cycle =
    kind === 'functions'
      ? async () => {
          const r = await acquire(lockPath, options)
          if (!r.ok) throw new Error(r.error.message)
          work()
          if (!(await r.value.release())) throw new Error('release returned false')
        }
      : async () => {
          const r = await sem.acquire({ tag })
          if (!r.ok) throw new Error(r.error.message)
          work()
          if (!sem.release().ok) throw new Error('release failed')
        }
  for (let i = 0; i < 500; i++) await cycle() // warm-up (JIT, first threads)
  const c0 = threadCounts()
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) await cycle()
  const wallNs = Number(process.hrtime.bigint() - t0)
  const c1 = threadCounts()
  fs.closeSync(fd)
  const where = dir.startsWith('/dev/shm') ? 'tmpfs' : 'disk'
  console.log(
    JSON.stringify({
      kind,
      where,
      cycles: n,
      jsCpuUsPerCycle: +((c1.jsNs - c0.jsNs) / 1e3 / n).toFixed(2),
      allCpuUsPerCycle: +((c1.allNs - c0.allNs) / 1e3 / n).toFixed(2),
      voluntaryPerCycle: +((c1.voluntary - c0.voluntary) / n).toFixed(3),
      wallUsPerCycle: +(wallNs / 1e3 / n).toFixed(2),
    }),
  )
}

async function main() {
  const cyclesArg = args.find((a) => a === '--cycles' || a.startsWith('--cycles='))
  if (cyclesArg) {
    const kindArg = args.find((a) => a.startsWith('--kind='))
    await cycleLoop(cyclesArg.includes('=') ? Number(cyclesArg.slice(9)) : 20_000, kindArg ? kindArg.slice(7) : 'semaphore')
    fs.rmSync(dir, { recursive: true, force: true })
    return
  }
  const rows = []
  const syncN = N * 30
  rows.push(await time('sync napi call (takeHeldEnd)', syncN, () => native.takeHeldEnd(0)))
  rows.push(await time('promise round trip through a tokio worker (spawn_future, nothing done)', N, () => native.benchTokioRoundTrip()))
  rows.push(await time('… + a blocking-pool thread (off_thread, nothing done)', N, () => native.benchBlockingRoundTrip()))
  rows.push(await time('Node fs.promises.stat (libuv pool), for reference', N, () => fs.promises.stat(dir)))
  const lockPath = path.join(dir, 'hops.lock')
  const sem = new Semaphore(lockPath)
  const cycles = Math.max(200, Math.floor(N / 5))
  rows.push(
    await time('Semaphore: await acquire() + release() (fsync, disk: attempt on tokio)', cycles, async () => {
      const r = await sem.acquire({ tag: 'hops' })
      if (!r.ok) throw new Error(r.error.message)
      sem.release()
    }),
  )
  rows.push(
    await time('Semaphore: tryAcquire() + release() ON the JS thread (fsync, disk; not a product path)', cycles, () => {
      const r = sem.tryAcquire('hops')
      if (!r.ok) throw new Error(r.error.message)
      sem.release()
    }),
  )
  rows.push(
    await time('acquire(p) + lock.release() (fsync, disk)', cycles, async () => {
      const r = await acquire(lockPath, { tag: 'hops' })
      if (!r.ok) throw new Error(r.error.message)
      await r.value.release()
    }),
  )
  const floor = floorCycleUs(cycles)
  console.log(`| piece (${dir.startsWith('/dev/shm') ? 'tmpfs' : 'disk'}) | calls | p50 µs | mean µs |`)
  console.log('| --- | ---: | ---: | ---: |')
  for (const r of rows) console.log(`| ${r.label} | ${r.n} | ${r.p50Us.toFixed(2)} | ${r.meanUs.toFixed(2)} |`)
  if (floor !== null) console.log(`| floor: the same cycle in Rust, one process (acquire + counter work + release) | ${cycles} | | ${floor.toFixed(2)} |`)
  fs.rmSync(dir, { recursive: true, force: true })
}

main().catch((e) => {
  console.error(e)
  fs.rmSync(dir, { recursive: true, force: true })
  process.exit(1)
})
