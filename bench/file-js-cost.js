#!/usr/bin/env node
'use strict'
// The JS thread's CPU per file-lock acquisition + release, of the JS layer over the binding (issue 24): the same
// cycle, one process, no contention, on a memory file system with fsync off so that the native part runs short and
// on the JS thread, three ways:
//   native     the binding alone: NativeLockFile#acquire + releaseHeldNow (what the JS layer adds nothing to);
//   functions  `await acquire(p)` + `await lock.release()`;
//   semaphore  `await sem.acquire()` + `sem.release()`;
//   tokio, blocking  (not by default) one promise round trip through tokio / its blocking pool, no file call.
// Each row: CPU µs per cycle of the JS thread (schedstat), median of `--runs` runs of `--n` cycles; the JS layer's
// cost is a row minus `native`.
//
//   node bench/file-js-cost.js [--n=20000] [--runs=3] [--kind=native,functions,semaphore] [--fsync] [dir (default /dev/shm)]

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const native = require(path.join(root, 'lib', 'native'))
const { engineOptions, DEFAULT_CONFIG } = require(path.join(root, 'lib', 'file', 'engine'))
const { settledAcquire } = require(path.join(root, 'lib', 'file', 'settle'))
const { Semaphore, acquire } = require(root)

const { values: opts, positionals } = require('node:util').parseArgs({
  allowPositionals: true,
  options: {
    n: { type: 'string', default: '20000' },
    runs: { type: 'string', default: '3' },
    kind: { type: 'string', default: 'native,functions,semaphore' },
    // with a disk dir: the default durability, whose file calls run off the JS thread (two thread hops a cycle)
    fsync: { type: 'boolean', default: false },
  },
})
const N = Number(opts.n)
const RUNS = Number(opts.runs)
const KINDS = opts.kind.split(',')
const FSYNC = opts.fsync
const base = positionals[0] ?? (fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir())
const dir = fs.mkdtempSync(path.join(base, 'js-cost-'))

/** CPU ns on a CPU so far of this (the JS) thread. */
function jsThreadNs() {
  return Number(fs.readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'latin1').split(' ')[0])
}

function cycleOf(kind, lockPath) {
  // A promise from the binding resolved on tokio (every waiting acquire pays one), and one from the blocking pool
  // (a release that may block, on a disk): the thread-hop part of the JS thread's cost, without any file call.
  if (kind === 'tokio') return () => native.benchTokioRoundTrip()
  if (kind === 'blocking') return () => native.benchBlockingRoundTrip()
  if (kind === 'native') {
    const file = new native.NativeLockFile(native.checkLockPath(lockPath, false).value, {
      ...engineOptions({ ...DEFAULT_CONFIG, fsync: FSYNC }),
      keepForHandle: true,
    })
    return async () => {
      const r = await settledAcquire(file, undefined, undefined, undefined, undefined)
      if (!r.ok) throw new Error(r.error.message)
      const done = native.releaseHeldNow(r.value.id) ?? (await native.releaseHeldAsync(r.value.id))
      if (!done.ok || !done.value) throw new Error('release failed')
    }
  }
  if (kind === 'functions') {
    const options = { fsync: FSYNC }
    return async () => {
      const r = await acquire(lockPath, options)
      if (!r.ok) throw new Error(r.error.message)
      if (!(await r.value.release())) throw new Error('release returned false')
    }
  }
  if (kind === 'semaphore') {
    const sem = new Semaphore(lockPath, { fsync: FSYNC })
    return async () => {
      const r = await sem.acquire()
      if (!r.ok) throw new Error(r.error.message)
      if (!sem.release().ok) throw new Error('release failed')
    }
  }
  throw new Error(`unknown kind ${kind}`)
}

async function measure(kind) {
  const cycle = cycleOf(kind, path.join(dir, `${kind}.lock`))
  for (let i = 0; i < 2000; i++) await cycle() // warm-up (JIT)
  const runs = []
  for (let r = 0; r < RUNS; r++) {
    const t0 = jsThreadNs()
    for (let i = 0; i < N; i++) await cycle()
    runs.push((jsThreadNs() - t0) / 1e3 / N)
  }
  runs.sort((a, b) => a - b)
  return { kind, jsCpuUsPerCycle: +runs[runs.length >> 1].toFixed(2), runs: runs.map((x) => +x.toFixed(2)) }
}

async function main() {
  const rows = []
  for (const kind of KINDS) rows.push(await measure(kind))
  const floor = rows.find((r) => r.kind === 'native')
  for (const r of rows) {
    if (floor && r !== floor) r.jsLayerUs = +(r.jsCpuUsPerCycle - floor.jsCpuUsPerCycle).toFixed(2)
    console.log(JSON.stringify(r))
  }
  fs.rmSync(dir, { recursive: true, force: true })
}

main().catch((e) => {
  console.error(e)
  process.exitCode = 1
})
