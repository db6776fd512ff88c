'use strict'
// `npm run demo`: several processes coordinate through one lock file, no server needed.
// 1. Four workers take turns on the lock, three rounds each: every hand-off is printed (in the order of one
//    monotonic clock shared by the processes) with how long the waiter waited (waiters wake on the release
//    through inotify, not by polling).
// 2. A holder is killed with SIGKILL while it holds the lock. Its file stays behind, but it names this host and a
//    dead pid, so the next worker reclaims it at once instead of waiting for a stale timeout.
// 3. The lock file is plain `pid=` / `timestamp=` / `tag=` lines that the sema and semats tools and shell scripts read.

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const readline = require('node:readline')

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sema-demo-'))
const lockPath = path.join(dir, 'build.lock')
const worker = path.join(__dirname, 'demo-worker.js')
const t0 = Date.now()
const stamp = (t) => `+${String(t - t0).padStart(5)} ms`

function start(name, rounds, mode) {
  const child = spawn(process.execPath, [worker, lockPath, name, String(rounds), ...(mode ? [mode] : [])], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const events = readline.createInterface({ input: child.stdout })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  return { child, events, exited, name }
}

function describe(e) {
  switch (e.event) {
    case 'acquired':
      return `${e.name} (pid ${e.pid}) acquired the lock, round ${e.round}, after waiting ${e.waitedMs} ms`
    case 'leaving':
      return `${e.name} releases it`
    case 'released':
      return `${e.name} released it`
    case 'holding':
      return `${e.name} holds it; the lock file reads:\n${e.content.replace(/^/gm, '              | ')}`
    default:
      return `${e.name}: ${e.event} ${e.error ?? e.message ?? ''}`
  }
}

async function main() {
  console.log(`lock file: ${lockPath}\n`)
  console.log('1. four processes take turns on one lock file')
  const workers = ['alpha', 'bravo', 'charlie', 'delta'].map((n) => start(n, 3))
  const events = []
  for (const w of workers) w.events.on('line', (line) => events.push(JSON.parse(line)))
  const results = await Promise.all(workers.map((w) => w.exited))
  const byClock = (a, b) => (BigInt(a.hr) < BigInt(b.hr) ? -1 : BigInt(a.hr) > BigInt(b.hr) ? 1 : 0)
  for (const e of [...events].sort(byClock)) {
    if (e.event !== 'released') console.log(`${stamp(e.t)}  ${describe(e)}`)
  }
  const failedWorkers = results.filter((r) => r.code !== 0).length // a worker fails if its O_EXCL marker collides
  // Lines from different pipes can arrive out of order, so count holders from the shared monotonic clock:
  // a holder is inside from 'acquired' to 'leaving' (reported before it releases).
  let inside = 0
  let maxInside = 0
  const sweep = events
    .filter((e) => e.event === 'acquired' || e.event === 'leaving')
    .sort(byClock)
  for (const e of sweep) {
    inside += e.event === 'acquired' ? 1 : -1
    maxInside = Math.max(maxInside, inside)
  }
  const acquisitions = events.filter((e) => e.event === 'acquired')
  const handoffs = acquisitions.length
  const waits = acquisitions.sort((a, b) => a.t - b.t).map((e) => e.waitedMs)

  console.log('\n2. a holder crashes (SIGKILL) while holding the lock')
  const victim = start('crasher', 1, '--hold')
  await new Promise((resolve) =>
    victim.events.on('line', (line) => {
      const e = JSON.parse(line)
      console.log(`${stamp(e.t)}  ${describe(e)}`)
      if (e.event === 'holding') resolve()
    }),
  )
  victim.child.kill('SIGKILL')
  await victim.exited
  fs.rmSync(`${lockPath}.inside`, { force: true }) // the crashed holder's own marker; the lock file stays
  const killedAt = Date.now()
  console.log(`${stamp(killedAt)}  crasher killed; its lock file is still there: ${fs.existsSync(lockPath)}`)
  const rescuer = start('echo', 1)
  let reclaimMs = -1
  rescuer.events.on('line', (line) => {
    const e = JSON.parse(line)
    if (e.event === 'acquired') reclaimMs = e.t - killedAt
    console.log(`${stamp(e.t)}  ${describe(e)}`)
  })
  const rescued = await rescuer.exited

  console.log('\nsummary')
  console.log(`  acquisitions: ${handoffs} across 4 processes; most holders at once: ${maxInside} (must be 1)`)
  console.log(`  overlaps caught by the O_EXCL marker file inside the critical section: ${failedWorkers}`)
  console.log(`  wait before each acquisition (ms): ${waits.join(', ')}`)
  console.log(`  crashed holder's lock reclaimed ${reclaimMs} ms after the kill, including the new process's start-up (the stale timeout is 1 hour: not needed)`)
  fs.rmSync(dir, { recursive: true, force: true })
  const ok = maxInside === 1 && failedWorkers === 0 && rescued.code === 0 && reclaimMs >= 0
  if (!ok) {
    console.error('demo FAILED')
    process.exit(1)
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
