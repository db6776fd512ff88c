'use strict'
// One dflockd client variant in a fresh process: `workers` concurrent workers, each with its own key
// (`bench_<random>`, as the Go cmd/bench) and its own persistent connection, each doing lock (`l`, timeout 30,
// lease 10) + release (`r`) round trips until `seconds` have passed (or `maxRounds` per worker).
// Prints {ops, seconds, opsPerSec, p50Ms, p99Ms, cpuUsPerOp, switchesPerOp} (client process CPU and context switches,
// voluntary + involuntary, all threads: getrusage); one op = one l + r pair (two round trips), as cmd/bench counts.

const path = require('node:path')
const { summarize } = require('../lib/stats')
const { NetClient } = require('../lib/netclient')

const cfg = JSON.parse(process.argv[2])
// `cfg.root`: another build of the package to load instead (bench/.baseline, see bench/README.md).
const root = cfg.root ?? path.resolve(__dirname, '..', '..')

const randomKey = (i) => `bench_${cfg.keyPrefix ?? ''}${i}_${100000 + Math.floor(Math.random() * 9900000)}`

/** Returns an object with `round()` (one lock + release) and `close()`. */
async function makeWorker(i) {
  const key = randomKey(i)
  switch (cfg.kind) {
    case 'addon-connection': {
      const { Connection } = require(root)
      const conn = await Connection.connect({ host: '127.0.0.1', port: cfg.port })
      return {
        async round() {
          const g = await conn.acquire(key, 30, 10)
          await conn.release(key, g.token)
        },
        close: () => conn.close(),
      }
    }
    case 'addon-distributedlock': {
      const { DistributedLock } = require(root)
      const lock = new DistributedLock({ key, servers: [['127.0.0.1', cfg.port]], acquireTimeoutS: 30, leaseTtlS: 10 })
      return {
        async round() {
          if (!(await lock.acquire())) throw new Error('acquire timed out')
          await lock.release()
        },
        close: () => lock.close(),
      }
    }
    case 'addon-loop-shape': {
      // DistributedLock's wire shape on the event-loop `Connection`: `e` (answered `acquired`) + `r`, with an unref'd
      // renewal timer armed at the grant and cleared at the release. Not a lock API: the ceiling of a DistributedLock
      // whose round trips ran on the event-loop driver (issue #24), measured before building it.
      const { Connection } = require(root)
      const conn = await Connection.connect({ host: '127.0.0.1', port: cfg.port })
      return {
        async round() {
          const g = await conn.enqueue(key, 10)
          if (g.status !== 'acquired') throw new Error(`not acquired: ${g.status}`)
          const renew = setTimeout(() => {}, 5000)
          renew.unref()
          clearTimeout(renew)
          await conn.release(key, g.token)
        },
        close: () => conn.close(),
      }
    }
    case 'ts-lowlevel': {
      // dflockd-client's low-level functions on one persistent socket (as its docs show them).
      const ts = require(cfg.tsClient)
      const net = require('node:net')
      const sock = net.createConnection({ host: '127.0.0.1', port: cfg.port })
      await new Promise((resolve, reject) => sock.once('connect', resolve).once('error', reject))
      sock.setNoDelay(true)
      return {
        async round() {
          const { token } = await ts.acquire(sock, key, 30, 10)
          await ts.release(sock, key, token)
        },
        close: () => sock.destroy(),
      }
    }
    case 'ts-distributedlock': {
      // dflockd-client's DistributedLock reused (acquire() + release()): it opens a connection per acquisition.
      const ts = require(cfg.tsClient)
      const lock = new ts.DistributedLock({ key, servers: [['127.0.0.1', cfg.port]], acquireTimeoutS: 30, leaseTtlS: 10 })
      return {
        async round() {
          if (!(await lock.acquire())) throw new Error('acquire timed out')
          await lock.release()
        },
        close: () => lock.close(),
      }
    }
    case 'node-net': {
      const c = await NetClient.connect(cfg.port)
      return {
        async round() {
          const token = await c.lock(key, 30, 10)
          await c.release(key, token)
        },
        close: () => c.close(),
      }
    }
    default:
      throw new Error(`unknown kind ${cfg.kind}`)
  }
}

async function main() {
  const workers = []
  for (let i = 0; i < cfg.workers; i++) workers.push(await makeWorker(i))
  for (const w of workers) await w.round() // warm-up: one round each
  const lat = []
  const cpu0 = process.cpuUsage()
  const ru0 = process.resourceUsage()
  const t0 = process.hrtime.bigint()
  const end = t0 + BigInt(Math.round(cfg.seconds * 1e9))
  const maxRounds = cfg.maxRounds ?? Infinity
  await Promise.all(
    workers.map(async (w) => {
      for (let n = 0; n < maxRounds; n++) {
        const t = process.hrtime.bigint()
        await w.round()
        const t1 = process.hrtime.bigint()
        lat.push(Number(t1 - t) / 1e6)
        if (t1 >= end) break
      }
    }),
  )
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const cpu = process.cpuUsage(cpu0)
  const ru = process.resourceUsage()
  const switches = ru.voluntaryContextSwitches + ru.involuntaryContextSwitches - ru0.voluntaryContextSwitches - ru0.involuntaryContextSwitches
  for (const w of workers) w.close()
  const s = summarize(lat)
  process.stdout.write(JSON.stringify({ ops: lat.length, seconds, opsPerSec: lat.length / seconds, meanMs: s.mean, p50Ms: s.p50, p99Ms: s.p99, cpuUsPerOp: (cpu.user + cpu.system) / lat.length, switchesPerOp: switches / lat.length }) + '\n')
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e)
  process.exit(1)
})
