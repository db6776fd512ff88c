'use strict'
// TIMEOUT / ALREADY_LOCKED of a dflockd target carry what is known of the holder (issue 23 point 4, dflockd half):
// whether it is this process (then its pid, lockedSince), and after a try the holder's remaining lease and the queue
// from the server's `stats`. The protocol does not tell another holder's pid or tag, so those stay absent.

const test = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { acquire, tryAcquire } = require('..')

const skip = d.goOnly()
const srv = d.serverFixture({ skip })

test('held by this process: TIMEOUT and ALREADY_LOCKED say so, with pid and lockedSince', { skip }, async () => {
  const url = srv.url(`holder-own-${process.pid}`)
  const h = await acquire(url)
  assert.equal(h.ok, true)
  const t = await tryAcquire(url)
  assert.equal(t.error.type, 'ALREADY_LOCKED')
  assert.equal(t.error.message, 'Lock already held')
  assert.equal(t.error.isOwnedByCurrentProcess, true)
  assert.equal(t.error.holderPid, process.pid)
  assert.equal(t.error.lockedSince, h.value.timestamp)
  assert.ok(t.error.leaseExpiresInS === undefined || t.error.leaseExpiresInS > 0)
  const w = await acquire(url, { timeout: 300 })
  assert.equal(w.error.type, 'TIMEOUT')
  assert.equal(w.error.isOwnedByCurrentProcess, true)
  assert.equal(w.error.holderPid, process.pid)
  assert.match(w.error.message, new RegExp(`held by this process, pid ${process.pid}`))
  await h.value.release()
})

test('held by another process: not ours, the lease left and the queue from stats; no pid or tag', { skip, timeout: u.scaled(30_000) }, async () => {
  const url = srv.url(`holder-other-${process.pid}`, 'leaseTtl=20')
  const child = spawn(process.execPath, ['-e', `
    const { acquire } = require(${JSON.stringify(path.join(__dirname, '..'))})
    acquire(${JSON.stringify(url)}).then((r) => { console.log(r.ok ? 'held' : JSON.stringify(r.error)); process.stdin.resume() })
    process.stdin.on('end', () => process.exit(0))`], { stdio: ['pipe', 'pipe', 'inherit'] })
  const line = await new Promise((resolve) => child.stdout.once('data', (b) => resolve(String(b).trim())))
  assert.equal(line, 'held')
  try {
    const t = await tryAcquire(url)
    assert.equal(t.error.type, 'ALREADY_LOCKED')
    assert.equal(t.error.isOwnedByCurrentProcess, false)
    assert.equal(t.error.holderPid, undefined)
    assert.equal(t.error.holderTag, undefined)
    assert.ok(t.error.leaseExpiresInS > 0 && t.error.leaseExpiresInS <= 20, String(t.error.leaseExpiresInS))
    assert.equal(t.error.waiters, 0)
    const w = await acquire(url, { timeout: 200 })
    assert.equal(w.error.type, 'TIMEOUT')
    assert.equal(w.error.isOwnedByCurrentProcess, false)
  } finally {
    child.stdin.end()
    await new Promise((resolve) => child.once('exit', resolve))
  }
})
