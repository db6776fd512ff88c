'use strict'
// Connections stay bounded: instances created per request, acquired and released without close() (the dflockd
// TypeScript client's usage), share an idle pool per server (bounded, closed after 2 s unused) instead of leaving
// a connection each until the server's idle timeout. Counted by the real Go server's `stats`. Also: a lease lost
// while DistributedLock.withLock's fn runs rejects with LOCK_LOST, and the loss message names the likely cause.
const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { DistributedLock, stats } = require('../lib/dflockd')
const { LockError } = require('../lib/errors')

const skip = d.skipReason()
const s = d.serverFixture({ skip })

/** The server's open connections, not counting the one asking. */
async function serverConnections() {
  return (await stats({ host: s.host, port: s.port })).connections - 1
}

describe('bounded connections', { skip }, () => {
  test('400 DistributedLocks acquired and released without close() leave as many connections as ran at once, none after 2 s', async () => {
    const before = await serverConnections()
    for (let i = 0; i < 300; i++) {
      const l = new DistributedLock({ key: `pool-${i % 7}`, servers: [[s.host, s.port]] })
      assert.equal(await l.acquire(), true)
      await l.release()
    }
    const sequential = await serverConnections()
    assert.ok(sequential - before <= 1, `${sequential - before} connections left open by 300 instances one after the other`)
    // 10 at a time: each needs its own connection while it holds, then they go back to the pool.
    for (let round = 0; round < 10; round++) {
      const locks = Array.from({ length: 10 }, (_, i) => new DistributedLock({ key: `pool-par-${i}`, servers: [[s.host, s.port]] }))
      assert.deepEqual(await Promise.all(locks.map((l) => l.acquire())), Array(10).fill(true))
      await Promise.all(locks.map((l) => l.release()))
    }
    const after = await serverConnections()
    if (process.env.SEMA_NATIVE_REPORT) console.error(`pool: ${sequential - before} then ${after - before} connections left open after 400 instances`)
    assert.ok(after - before <= 10, `${after - before} connections left open (before: ${before}, after: ${after})`)
    // The idle ones close after 2 s unused: poll the server's count (no event exists for it), bounded.
    await u.until(async () => (await serverConnections()) <= before, { timeoutMs: 6000, intervalMs: 100, what: 'idle pooled connections closed', last: serverConnections })
    assert.equal(await serverConnections(), before, 'idle pooled connections were closed')
  })

  test('one instance reused in a loop keeps using one connection', async () => {
    const l = new DistributedLock({ key: 'pool-one', servers: [[s.host, s.port]] })
    const before = await serverConnections()
    for (let i = 0; i < 50; i++) {
      assert.equal(await l.acquire(), true)
      await l.release()
    }
    assert.ok((await serverConnections()) - before <= 1)
    l.close()
  })
})

describe('loss while withLock runs', { skip }, () => {
  test('DistributedLock.withLock rejects with LOCK_LOST, and the message names --read-timeout', async () => {
    // A server that drops connections silent for 1 s, and a renew interval of 3 s: the lease is lost mid-work.
    const short = await d.startServer({ args: ['--read-timeout', '1'] })
    try {
      const l = new DistributedLock({ key: 'wl-lost', servers: [[short.host, short.port]], leaseTtlS: 60, renewMaxIntervalMs: 3000 })
      let ran = false
      await assert.rejects(
        l.withLock(async () => {
          // A bounded timer keeps Node alive meanwhile (a held lock never does).
          let keepAlive
          await new Promise((resolve, reject) => {
            keepAlive = setTimeout(() => reject(new Error(`no loss within ${u.scaled(10_000)} ms`)), u.scaled(10_000))
            l.signal.addEventListener('abort', resolve, { once: true })
          }).finally(() => clearTimeout(keepAlive))
          ran = true
          return 'done'
        }),
        (e) => e instanceof LockError && e.code === 'LOCK_LOST' && /--read-timeout/.test(e.message),
      )
      assert.equal(ran, true)
      assert.equal(l.token, null)
      // The key is free again on the server (it released the lock when it dropped the connection).
      const again = new DistributedLock({ key: 'wl-lost', servers: [[short.host, short.port]], acquireTimeoutS: 0 })
      assert.equal(await again.acquire(), true)
      await again.release()
      again.close()
    } finally {
      await short.stop()
    }
  })
})
