'use strict'
// One uncontended file-lock variant in a fresh process: acquire + release in a loop for `seconds`
// (after `warmup` cycles), timing every cycle. Prints {cycles, seconds, opsPerSec, meanUs, p50Us, p99Us}.
//
//   node bench/workers/file-single.js '{"kind":"addon-sync","dir":"/dev/shm/x","fsync":true,"heartbeat":false,"seconds":1}'

const fs = require('node:fs')
const path = require('node:path')
const { summarize } = require('../lib/stats')

const cfg = JSON.parse(process.argv[2])
const root = path.resolve(__dirname, '..', '..')
const lockPath = path.join(cfg.dir, `single-${cfg.kind}-${process.pid}.lock`)

/** Each variant: {sync: () => void} or {async: () => Promise<void>} doing one acquire + release. */
function variant() {
  switch (cfg.kind) {
    case 'addon-sync': {
      const { Semaphore } = require(root)
      const sem = new Semaphore(lockPath, { fsync: cfg.fsync, heartbeat: cfg.heartbeat })
      return {
        sync() {
          const r = sem.tryAcquire('bench')
          if (!r.ok) throw new Error(`tryAcquire failed: ${r.error.type} ${r.error.message}`)
          const u = sem.release()
          if (!u.ok) throw new Error(`release failed: ${u.error.type} ${u.error.message}`)
        },
      }
    }
    case 'addon-async': {
      const { tryAcquire } = require(root)
      const options = { fsync: cfg.fsync, heartbeat: cfg.heartbeat, tag: 'bench' }
      return {
        async async() {
          const r = await tryAcquire(lockPath, options)
          if (!r.ok) throw new Error(`tryAcquire failed: ${r.error.type} ${r.error.message}`)
          if (!(await r.value.release())) throw new Error('release returned false')
        },
      }
    }
    case 'proper-lockfile-sync': {
      const lockfile = require('proper-lockfile')
      fs.writeFileSync(lockPath, '')
      return {
        sync() {
          lockfile.lockSync(lockPath)
          lockfile.unlockSync(lockPath)
        },
      }
    }
    case 'proper-lockfile-async': {
      const lockfile = require('proper-lockfile')
      fs.writeFileSync(lockPath, '')
      return {
        async async() {
          const release = await lockfile.lock(lockPath)
          await release()
        },
      }
    }
    case 'lockfile-sync': {
      const lockfile = require('lockfile')
      return {
        sync() {
          lockfile.lockSync(lockPath)
          lockfile.unlockSync(lockPath)
        },
      }
    }
    default:
      throw new Error(`unknown kind ${cfg.kind}`)
  }
}

async function main() {
  const v = variant()
  const warmup = cfg.warmup ?? 200
  const maxCycles = cfg.maxCycles ?? Infinity
  const lat = []
  const deadline = (t0) => t0 + BigInt(Math.round(cfg.seconds * 1e9))
  if (v.sync) {
    for (let i = 0; i < warmup; i++) v.sync()
    const t0 = process.hrtime.bigint()
    const end = deadline(t0)
    let t = t0
    while (lat.length < maxCycles) {
      v.sync()
      const t1 = process.hrtime.bigint()
      lat.push(Number(t1 - t) / 1e3)
      t = t1
      if (t1 >= end) break
    }
    report(Number(t - t0) / 1e9, lat)
  } else {
    for (let i = 0; i < warmup; i++) await v.async()
    const t0 = process.hrtime.bigint()
    const end = deadline(t0)
    let t = t0
    while (lat.length < maxCycles) {
      await v.async()
      const t1 = process.hrtime.bigint()
      lat.push(Number(t1 - t) / 1e3)
      t = t1
      if (t1 >= end) break
    }
    report(Number(t - t0) / 1e9, lat)
  }
}

function report(seconds, lat) {
  const s = summarize(lat)
  try {
    fs.rmSync(lockPath, { force: true })
  } catch {}
  process.stdout.write(
    JSON.stringify({ cycles: lat.length, seconds, opsPerSec: lat.length / seconds, meanUs: s.mean, p50Us: s.p50, p99Us: s.p99 }) + '\n',
  )
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e)
  process.exit(1)
})
