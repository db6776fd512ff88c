'use strict'
// Memory growth over many cycles in one process (run with --expose-gc). Reads RSS after a warm-up and after the
// cycles, each time after global.gc(), and at 10 checkpoints in between (samples: [cycles, MB]) to tell a
// plateau from a leak. Prints {cycles, roundTrips, seconds, rssBeforeMB, rssAfterMB, growthMB, samples, ...}.
//   kind 'control': no lock, allocates what a sync cycle returns to JS (Node/V8's own share of the growth)
//   kind 'file':    Semaphore(path, {heartbeat}).tryAcquire() + release(), `cycles` times
//   kind 'dflockd': `workers` Connection workers doing acquire (l) + release (r) until `cycles` pairs or `seconds`

const path = require('node:path')

const root = path.resolve(__dirname, '..', '..')
const cfg = JSON.parse(process.argv[2])

let lastUsage = null
function rssMB() {
  global.gc()
  global.gc()
  lastUsage = process.memoryUsage()
  return lastUsage.rss / 2 ** 20
}

/** V8 heap and Node "external" (Buffers, napi external memory) in MB, at the last reading. */
function breakdown() {
  const mb = (v) => Math.round((v / 2 ** 20) * 100) / 100
  return { heapTotalMB: mb(lastUsage.heapTotal), heapUsedMB: mb(lastUsage.heapUsed), externalMB: mb(lastUsage.external) }
}

async function fileRun() {
  let cycle
  if (cfg.kind === 'control') {
    // No lock at all: allocates what one sync cycle hands back to JS ({ok, value: {pid, timestamp, tag}} and
    // {ok, value}), to show how much RSS Node/V8 itself takes on for an allocation-heavy loop.
    let sink
    cycle = () => {
      sink = { ok: true, value: { pid: process.pid, timestamp: Math.floor(Date.now() / 1000), tag: 'bench' } }
      sink = { ok: true, value: undefined }
      return sink
    }
  } else {
    cycle = fileCycle()
  }
  for (let i = 0; i < cfg.warmup; i++) cycle()
  const before = rssMB()
  const usageBefore = breakdown()
  const t0 = process.hrtime.bigint()
  // yield to the event loop now and then, as a real program would (lets napi finalizers and timers run)
  const samples = []
  const every = Math.max(1, Math.floor(cfg.cycles / 10))
  for (let i = 0; i < cfg.cycles; i++) {
    cycle()
    if (i % 10_000 === 9_999) await new Promise(setImmediate)
    if ((i + 1) % every === 0) samples.push([i + 1, rssMB()])
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const after = rssMB()
  return { cycles: cfg.cycles, seconds, rssBeforeMB: before, rssAfterMB: after, samples, usageBefore, usageAfter: breakdown() }
}

function fileCycle() {
  const { Semaphore } = require(root)
  const sem = new Semaphore(path.join(cfg.dir, `memory-${process.pid}.lock`), { heartbeat: cfg.heartbeat, fsync: cfg.fsync })
  return () => {
    const r = sem.tryAcquire('bench')
    if (!r.ok) throw new Error(`tryAcquire: ${r.error.message}`)
    const u = sem.release()
    if (!u.ok) throw new Error(`release: ${u.error.message}`)
  }
}

async function dflockdRun() {
  const { Connection } = require(root)
  const conns = []
  for (let i = 0; i < cfg.workers; i++) {
    conns.push({ conn: await Connection.connect({ host: '127.0.0.1', port: cfg.port }), key: `mem_${i}_${process.pid}_${Math.floor(Math.random() * 1e7)}` })
  }
  const pair = async ({ conn, key }) => {
    const g = await conn.acquire(key, 30, 10)
    await conn.release(key, g.token)
  }
  for (let i = 0; i < cfg.warmup; i++) await Promise.all(conns.map(pair))
  const before = rssMB()
  const usageBefore = breakdown()
  const t0 = process.hrtime.bigint()
  const end = t0 + BigInt(Math.round(cfg.seconds * 1e9))
  let done = 0
  let stop = false
  const samples = []
  const every = Math.max(1, Math.floor(cfg.cycles / 10))
  let nextSample = every
  await Promise.all(
    conns.map(async (c) => {
      while (!stop && done < cfg.cycles) {
        await pair(c)
        done++
        if (done >= nextSample) {
          samples.push([done, rssMB()])
          nextSample += every
        }
        if ((done & 1023) === 0 && process.hrtime.bigint() >= end) stop = true
      }
    }),
  )
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const after = rssMB()
  const usageAfter = breakdown()
  for (const c of conns) c.conn.close()
  return { cycles: done, roundTrips: done * 2, seconds, rssBeforeMB: before, rssAfterMB: after, capped: done < cfg.cycles, samples, usageBefore, usageAfter }
}

;(cfg.kind === 'dflockd' ? dflockdRun() : fileRun()).then(
  (r) => process.stdout.write(JSON.stringify({ ...r, growthMB: r.rssAfterMB - r.rssBeforeMB, opsPerSec: r.cycles / r.seconds }) + '\n'),
  (e) => {
    console.error(e && e.stack ? e.stack : e)
    process.exit(1)
  },
)
