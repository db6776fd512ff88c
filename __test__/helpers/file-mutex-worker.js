'use strict'
// Mutual-exclusion worker (one of several processes hammering one lock).
//   node file-mutex-worker.js <lockPath> <markerPath> <counterPath> <iterations> <mode>
// mode: 'async'  → `await acquire(path)` … `await lock.release()` (must resolve true)
//       'semats' → `new Semaphore(path).tryAcquire()` in a retry loop (short randomised back-off) … `release().ok`
//       'nolock' → no lock at all (the harness's self-check: its detector must see the overlaps)
// Barrier: prints `ready`, then waits for a `go` line on stdin so that all workers start at the same instant.
// Critical section: `fs.openSync(marker, 'wx')` must succeed (EEXIST = another holder is inside = overlap), then the
// shared counter file is read, incremented and written, then the marker is unlinked.
// Prints one line `result {"acquired","overlaps","failedReleases","wrongOwner","errors","ms"}` and exits 0.

const fs = require('node:fs')
const readline = require('node:readline')
const sema = require('../..')

const [file, marker, counter, iterStr, mode] = process.argv.slice(2)
const iterations = Number(iterStr)
const sleeper = new Int32Array(new SharedArrayBuffer(4))

const stats = { acquired: 0, overlaps: 0, failedReleases: 0, wrongOwner: 0, errors: [], ms: 0 }

/** `holdMs`: how long to stay inside between reading and writing the counter ('nolock' only: a critical section of a
 * few µs let Bun's 4 workers, started a few ms apart on a loaded machine, run one after another with no overlap). */
function critical(expectToken, holdMs = 0) {
  let fd
  try {
    fd = fs.openSync(marker, 'wx')
  } catch (e) {
    if (e.code === 'EEXIST') stats.overlaps++
    else throw e
  }
  // The lock file must be ours while we are inside.
  let text = ''
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch {}
  if (!text.startsWith(`pid=${process.pid}\n`) || (expectToken && !text.includes(`\ntoken=${expectToken}\n`))) {
    stats.wrongOwner++
  }
  const c = Number(fs.readFileSync(counter, 'utf8'))
  if (holdMs > 0) Atomics.wait(sleeper, 0, 0, holdMs) // widens the window the self-check must catch
  fs.writeFileSync(counter, String(c + 1))
  if (fd !== undefined) {
    fs.closeSync(fd)
    fs.unlinkSync(marker)
  }
}

async function runAsync() {
  for (let i = 0; i < iterations; i++) {
    const r = await sema.acquire(file, { timeout: 60000 })
    if (!r.ok) {
      stats.errors.push(r.error)
      if (stats.errors.length > 5) return
      continue
    }
    stats.acquired++
    critical(r.value.token)
    if ((await r.value.release()) !== true) stats.failedReleases++
  }
}

function runSemats() {
  const s = new sema.Semaphore(file)
  for (let i = 0; i < iterations; i++) {
    const deadline = Date.now() + 60000
    let r
    for (;;) {
      r = s.tryAcquire()
      if (r.ok || r.error.type !== 'ALREADY_LOCKED' || Date.now() > deadline) break
      Atomics.wait(sleeper, 0, 0, Math.random() * 2) // back-off, not synchronisation
    }
    if (!r.ok) {
      stats.errors.push(r.error)
      if (stats.errors.length > 5) return
      continue
    }
    stats.acquired++
    critical(null)
    const rel = s.release()
    if (!rel.ok) {
      stats.failedReleases++
      stats.errors.push(rel.error)
    }
  }
}

async function runNoLock() {
  for (let i = 0; i < iterations; i++) {
    stats.acquired++
    fs.writeFileSync(file, `pid=${process.pid}\n`)
    critical(null, 1)
    if (i % 16 === 0) await new Promise((r) => setImmediate(r))
  }
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin })
  console.log('ready')
  for await (const line of rl) if (line === 'go') break
  rl.close()
  const t0 = Date.now()
  if (mode === 'semats') runSemats()
  else if (mode === 'nolock') runNoLock()
  else await runAsync()
  stats.ms = Date.now() - t0
  console.log(`result ${JSON.stringify(stats)}`)
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
