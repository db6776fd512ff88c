#!/usr/bin/env node
'use strict'
// Where one file-lock hand-off's time goes, piece by piece, in one process (issue 24): the JS ↔ native crossings
// and thread hops that the addon adds to the floor's system calls (bench/floor/src/bin/file-contended-floor.rs),
// against the lock cycle itself. Each row: one call awaited at a time (latency, not throughput), p50 and mean µs.
//
//   node bench/file-hops.js [dir] [--n=3000]      dir: where lock files go (default: the work disk, bench/results/tmp)

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

async function main() {
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
