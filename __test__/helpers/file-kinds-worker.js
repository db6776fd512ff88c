'use strict'
// The lock kinds' contention worker in Node, the twin of crates/sema-core/examples/lock_worker.rs's marks kinds (its
// docs give the protocol): one of several processes hammering one lock with `limit` or `mode`.
//   node file-kinds-worker.js <kind> <lockPath> <marksDir> <counterPath> <iterations>
// kind: `limit:<N>` → `acquire(path, { limit: N })`; `shared` / `exclusive` → `acquire(path, { mode })`; `mixed` →
// each round shared or exclusive (3 in 10 exclusive, seeded by the pid); `unlocked-exclusive` → no lock (the
// self-check). Barrier: prints `ready`, waits for `go`. Critical section: a mark `<s|e|n>-<pid>-<round>` made after
// the grant and removed before the release, the marks listed (more than N, any other for an exclusive holder, an
// `e-` one for a shared holder: an overlap), the counter incremented by an exclusive holder, then up to 300 µs of
// work while held. Prints `result {"acquired","overlaps","failedReleases","wrongOwner","exclusive","together",
// "errors"}`.

const fs = require('node:fs')
const path = require('node:path')
const readline = require('node:readline')
const sema = require('../..')

const [kind, file, marks, counter, iterStr] = process.argv.slice(2)
const iterations = Number(iterStr)
const stats = { acquired: 0, overlaps: 0, failedReleases: 0, wrongOwner: 0, exclusive: 0, together: 0, errors: [] }
const sleeper = new Int32Array(new SharedArrayBuffer(4))
let seed = BigInt(process.pid)
/** The Rust worker's LCG: the mix and the hold times. */
function next() {
  seed = (seed * 6364136223846793005n + 1442695040888963407n) & 0xffffffffffffffffn
  return Number(seed >> 33n)
}

/** This round's acquire options and how its holder may share: 'alone', 'readers' or a slot count. */
function round() {
  const limit = /^limit:(\d+)$/.exec(kind)
  if (limit) return { options: { limit: Number(limit[1]) }, share: Number(limit[1]) }
  const mode = kind === 'mixed' ? (next() % 10 < 3 ? 'exclusive' : 'shared') : kind
  if (mode === 'shared') return { options: { mode }, share: 'readers' }
  if (mode === 'exclusive') return { options: { mode }, share: 'alone' }
  if (kind === 'unlocked-exclusive') return { options: null, share: 'alone' }
  throw new Error(`unknown kind "${kind}"`)
}

function critical(share, i) {
  const name = `${share === 'alone' ? 'e' : share === 'readers' ? 's' : 'n'}-${process.pid}-${i}`
  const mark = path.join(marks, name)
  fs.closeSync(fs.openSync(mark, 'wx'))
  const others = fs.readdirSync(marks).filter((n) => n !== name)
  const overlap = share === 'alone' ? others.length > 0 : share === 'readers' ? others.some((n) => n.startsWith('e-')) : others.length + 1 > share
  if (overlap) stats.overlaps++
  else if (others.length > 0) stats.together++
  if (share === 'alone') {
    stats.exclusive++
    fs.writeFileSync(counter, String(Number(fs.readFileSync(counter, 'utf8')) + 1))
  }
  Atomics.wait(sleeper, 0, 0, (next() % 300) / 1000) // work while held, not synchronisation
  fs.unlinkSync(mark)
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin })
  console.log('ready')
  for await (const line of rl) if (line === 'go') break
  rl.close()
  for (let i = 0; i < iterations; i++) {
    const { options, share } = round()
    const r = options ? await sema.acquire(file, { ...options, timeout: 60000 }) : { ok: true, value: null }
    if (!r.ok) {
      stats.errors.push(r.error)
      if (stats.errors.length > 5) break
      continue
    }
    stats.acquired++
    critical(share, i)
    if (r.value && (await r.value.release()) !== true) stats.failedReleases++
  }
  console.log(`result ${JSON.stringify(stats)}`)
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
