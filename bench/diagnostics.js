#!/usr/bin/env node
'use strict'
// The cost of the diagnostics_channel hooks (lib/diagnostics.js) per acquire:
// - `hook, nobody subscribed`: traceAcquire() around a function that returns at once, against calling that function
//   directly, in ns per call (the hook is then one `hasSubscribers` read);
// - `acquire's listing for query()`: the same for an acquire that waits (listed in `pending` until it settles);
// - `hook, one no-op subscriber`: what a subscriber on all five events adds to an awaited acquire (the context
//   object, the publishes, the facts of the lock);
// - real tryAcquire + release cycles on a memory file system, unsubscribed and subscribed, in µs per cycle.
//   node bench/diagnostics.js [--smoke]     prints JSON; bench/run.js --only=diagnostics renders it as rows.

const dc = require('node:diagnostics_channel')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { median } = require('./lib/stats')

const root = path.resolve(__dirname, '..')

function nsPerCall(fn, n) {
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) fn()
  return Number(process.hrtime.bigint() - t0) / n
}

/** ns per call of `await fn()`, one call at a time (as acquires are awaited). */
async function nsPerAwait(fn, n) {
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) await fn()
  return Number(process.hrtime.bigint() - t0) / n
}

async function usPerCycle(sema, file, n) {
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) {
    const r = await sema.tryAcquire(file, { fsync: false, heartbeat: null })
    if (!r.ok) throw new Error(`tryAcquire failed: ${r.error.message}`)
    await r.value.release()
  }
  return Number(process.hrtime.bigint() - t0) / n / 1000
}

async function measure({ smoke = false } = {}) {
  const { traceAcquire } = require(path.join(root, 'lib', 'diagnostics'))
  const sema = require(root)
  const calls = smoke ? 200_000 : 5_000_000
  const cycles = smoke ? 500 : 20_000
  const reps = smoke ? 1 : 5
  const done = { ok: true, value: { target: 'x', backend: 'file', pid: 1, timestamp: 0 } }
  const run = () => done
  const direct = () => run()
  // tryAcquire's path (wait false): the channel check alone. acquire's (wait true) also lists the call for query()
  // while it waits: one Set entry and one promise reaction.
  const hooked = () => traceAcquire('/tmp/x.lock', 'file', 'exclusive', false, run)
  const done$ = Promise.resolve(done)
  const directWaiting = () => done$
  const hookedWaiting = () => traceAcquire('/tmp/x.lock', 'file', 'exclusive', true, directWaiting)
  const noop = { start() {}, end() {}, asyncStart() {}, asyncEnd() {}, error() {} }
  const channel = dc.tracingChannel('sema-native:acquire')
  const dir = fs.existsSync('/dev/shm') ? fs.mkdtempSync('/dev/shm/sema-native-bench-diag-') : fs.mkdtempSync(path.join(os.tmpdir(), 'sema-native-bench-diag-'))
  const file = path.join(dir, 'diag.lock')
  const samples = { direct: [], unsubscribed: [], subscribed: [], directWaiting: [], waiting: [], cycleOff: [], cycleOn: [] }
  try {
    nsPerCall(direct, calls / 10) // warm-up of both paths
    nsPerCall(hooked, calls / 10)
    await usPerCycle(sema, file, Math.max(50, cycles / 20))
    for (let rep = 0; rep < reps; rep++) {
      samples.direct.push(nsPerCall(direct, calls))
      samples.unsubscribed.push(nsPerCall(hooked, calls))
      samples.directWaiting.push(await nsPerAwait(directWaiting, calls / 10))
      samples.waiting.push(await nsPerAwait(hookedWaiting, calls / 10))
      samples.cycleOff.push(await usPerCycle(sema, file, cycles))
      channel.subscribe(noop)
      try {
        // What a subscriber adds to an awaited acquire: against the same awaited call unsubscribed.
        samples.subscribed.push((await nsPerAwait(hookedWaiting, calls / 10)) - samples.waiting.at(-1))
        samples.cycleOn.push(await usPerCycle(sema, file, cycles))
      } finally {
        channel.unsubscribe(noop)
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const m = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)]))
  return {
    calls,
    cycles,
    reps,
    directNs: m.direct,
    unsubscribedNs: m.unsubscribed,
    unsubscribedCostNs: m.unsubscribed - m.direct,
    subscribedCostNs: m.subscribed,
    waitingListCostNs: m.waiting - m.directWaiting,
    cycleUsUnsubscribed: m.cycleOff,
    cycleUsSubscribed: m.cycleOn,
  }
}

module.exports = { measure }

if (require.main === module) {
  measure({ smoke: process.argv.includes('--smoke') }).then(
    (r) => console.log(JSON.stringify(r)),
    (e) => {
      console.error(e && e.stack ? e.stack : e)
      process.exit(1)
    },
  )
}
