'use strict'
// Run as the first process of its own pid namespace (`unshare -pf --mount-proc node file-pidns-check.js ...`),
// beside a holder in another pid namespace that shares the lock directory. Asks every "is it mine?" question of
// the package about the holder's lock, the read-only ones first, then those that would delete or replace it, and
// prints one line `result <JSON>` with the answers (the test asserts them).
//   node file-pidns-check.js <lockPath> <holderPid>

const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const sema = require('../..')

const [file, holderPidText] = process.argv.slice(2)
const holderPid = Number(holderPidText)
const BIN = path.join(__dirname, '..', '..', 'bin', 'sema-native.js')

/** The holder's token while its file is in place (the heartbeat rewrites the timestamp, never the token). */
const content = () => {
  try {
    return /^token=(.*)$/m.exec(fs.readFileSync(file, 'utf8'))?.[1] ?? null
  } catch {
    return null
  }
}

function cli(...args) {
  const r = spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', timeout: 20000 })
  return { status: r.status, stdout: r.stdout, stderr: r.stderr }
}

async function main() {
  const before = content()
  const out = { pid: process.pid, holderRunningHere: sema.isProcessRunning(holderPid) }
  const s = await sema.status(file)
  out.status = { locked: s.locked, isStale: s.isStale, owned: s.isOwnedByCurrentProcess }
  const sem = new sema.Semaphore(file)
  out.semStatusOwned = sem.status().isOwnedByCurrentProcess
  out.unchangedAfterReads = content() === before

  const r = await sema.release(file)
  out.release = r.ok ? 'ok' : r.error.type
  out.unchangedAfterRelease = content() === before

  const sr = sem.release()
  out.semRelease = sr.ok ? 'ok' : sr.error.type
  out.unchangedAfterSemRelease = content() === before

  const c = cli('release', file, '--pid', String(holderPid), '--json')
  out.cliRelease = c.status
  out.unchangedAfterCliRelease = content() === before

  const t = await sema.tryAcquire(file)
  out.tryAcquire = t.ok ? 'ok' : t.error.type
  if (t.ok) await t.value.release()
  // A short stale timeout (the holder's heartbeat keeps its lock younger than that): still not taken, however
  // the holder's pid looks from here.
  const a = await sema.acquire(file, { timeout: 2500, staleTimeout: 2000 })
  out.acquireShortStale = a.ok ? 'ok' : a.error.type
  if (a.ok) await a.value.release()
  out.cleaned = sem.cleanStale()
  out.unchangedAtEnd = content() === before
  console.log(`result ${JSON.stringify(out)}`)
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
