'use strict'
// dflockd shared (reader/writer) locks vs the plain mutex, on the real server installed by setup, through the API
// people call: `await acquire('dflockd://…/key', { mode })` + `await lock.release()`, in one process, W async
// workers on ONE key (so readers share and writers queue), for S seconds per row, three interleaved repetitions
// (median ops/s shown). Rows: mutex (no mode: `l` + `r`), shared (`l` gate, `sl` slot, `r` gate + `sr`: 4
// requests), exclusive (`l` + 16 `sl` pipelined, then `r` + 16 `sr` pipelined: 34 requests).
//
//   node bench/dflockd-shared.js [--smoke] [--seconds=S]
// A separate file from bench/run.js (busy with other branches' rows); the lead may fold it in as a section.

const path = require('node:path')
const { startServer } = require('./dflockd')

const root = path.resolve(__dirname, '..')
const { acquire } = require(root)

const args = process.argv.slice(2)
const smoke = args.includes('--smoke')
const secArg = args.find((a) => a.startsWith('--seconds='))
const SECONDS = secArg ? Number(secArg.split('=')[1]) : smoke ? 0.3 : 2
const REPS = smoke ? 1 : 3

/** W workers acquiring and releasing `url` in `mode` for SECONDS; ops/s, p50/p99 of one pair (ms), the most holders at once. */
async function run(url, mode, workers) {
  const opts = mode ? { mode, timeout: 30000 } : { timeout: 30000 }
  const times = []
  let holding = 0
  let most = 0
  const end = process.hrtime.bigint() + BigInt(Math.round(SECONDS * 1e9))
  async function worker() {
    while (process.hrtime.bigint() < end) {
      const t0 = process.hrtime.bigint()
      const r = await acquire(url, opts)
      if (!r.ok) throw new Error(`${mode ?? 'mutex'}: ${r.error.type} ${r.error.message}`)
      holding++
      most = Math.max(most, holding)
      await new Promise(setImmediate) // let the other workers' grants land while this one holds
      holding--
      await r.value.release()
      times.push(Number(process.hrtime.bigint() - t0) / 1e6)
    }
  }
  const t0 = process.hrtime.bigint()
  await Promise.all(Array.from({ length: workers }, worker))
  const wall = Number(process.hrtime.bigint() - t0) / 1e9
  times.sort((a, b) => a - b)
  const q = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))]
  return { ops: times.length / wall, p50: q(0.5), p99: q(0.99), most }
}

async function main() {
  const server = await startServer()
  const rows = []
  try {
    const variants = []
    for (const workers of [1, 4]) for (const mode of [undefined, 'shared', 'exclusive']) variants.push({ mode, workers })
    const reps = new Map(variants.map((v) => [v, []]))
    let n = 0
    for (let rep = 0; rep < REPS; rep++) {
      for (const v of variants) {
        // A fresh key per run: no queue or idle key state carried over.
        const url = `dflockd://127.0.0.1:${server.port}/bench-shared-${process.pid}-${++n}?leaseTtl=30`
        reps.get(v).push(await run(url, v.mode, v.workers))
      }
    }
    for (const v of variants) {
      const all = reps.get(v).sort((a, b) => a.ops - b.ops)
      const most = Math.max(...all.map((r) => r.most))
      rows.push({ ...v, ...all[Math.floor(all.length / 2)], most, all: all.map((r) => Math.round(r.ops)) })
    }
  } finally {
    await server.stop()
  }
  const base = new Map(rows.filter((r) => r.mode === undefined).map((r) => [r.workers, r.ops]))
  console.log(`dflockd ${SECONDS} s per row, ${REPS} repetition(s), median shown; one key, W async workers in one process\n`)
  console.log('| mode | workers | ops/s | ÷ mutex | p50 ms | p99 ms | most holders at once | all reps ops/s |')
  console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |')
  for (const r of rows) {
    const ratio = r.ops / base.get(r.workers)
    console.log(
      `| ${r.mode ?? 'mutex (no mode)'} | ${r.workers} | ${r.ops.toFixed(0)} | ${ratio.toFixed(2)} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${r.most} | ${r.all.join(', ')} |`,
    )
  }
  // An overlap is a broken lock, not a slow one.
  const overlap = rows.find((r) => r.mode !== 'shared' && r.most > 1)
  if (overlap) {
    console.error(`overlap: ${overlap.mode ?? 'mutex'} had ${overlap.most} holders at once`)
    process.exitCode = 1
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
