'use strict'
// One cancel token for both backends (issue #18 item 3): a dflockd acquire, enqueue or wait takes the cancel id of
// lib/abort.js withAbort, as a file wait does, and `cancelWait(id)` cancels it on both drivers (tokio threads and the
// event loop). The call settles ABORTED and leaves nothing on the server: the next client gets the key at once, and a
// grant that crossed the cancel is closed (the server releases it), never handed out. Against the real server.
const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const native = require('../lib/native')
const { loopAcquire, useEventLoop } = require('../lib/dflockd/common')
const { DistributedLock, stats } = require('..')

const skip = d.skipReason()
/** Bun and Deno have no libuv loop the event-loop driver can use (it falls back to tokio there): its half is Node's. */
const loopHost = !process.versions.bun && !process.versions.deno
const s = d.serverFixture({ skip })

/** Resolves once the server's stats show a waiter on `key`. */
async function queuedOn(key) {
  const waiters = async () => (await stats({ host: s.host, port: s.port })).locks.find((l) => l.key === key)?.waiters ?? 0
  await u.until(async () => (await waiters()) > 0, { intervalMs: 20, what: `a waiter queued on '${key}'` })
}

/** Spins (the JS thread busy, so no result can reach it) until `prim` holds natively; bounded. */
function spinUntilHeld(prim) {
  const end = Date.now() + u.scaled(10_000)
  while (prim.token === null) {
    if (Date.now() > end) throw new Error('the grant never reached the primitive')
  }
}

const lockOn = (key, extra = {}) => new DistributedLock({ key, host: s.host, port: s.port, acquireTimeoutS: 10, ...extra })

/** A native primitive on `driver` ('tokio' or 'event-loop') and its loop id (0 = tokio). */
function primitiveOn(driver, key) {
  process.env.SEMA_NATIVE_DFLOCKD_DRIVER = driver
  try {
    const prim = new native.NativeDflockdPrimitive({ key, limit: 1, acquireTimeoutS: 10, renewRatio: 0.5, server: { host: s.host, port: s.port } })
    const loopId = useEventLoop(prim)
    if (driver === 'tokio') assert.equal(loopId, 0)
    else assert.notEqual(loopId, 0, 'the event-loop driver serves in Node')
    return { prim, loopId }
  } finally {
    delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
  }
}

for (const driver of ['tokio', 'event-loop']) {
  const noLoop = driver === 'event-loop' && !loopHost ? 'the event-loop driver is Node-only (tokio serves Bun and Deno)' : false
  describe(`cancel by id on the ${driver} driver`, { skip: skip || noLoop }, () => {
    test('cancelWait(id) aborts a waiting acquire: ABORTED, and the key goes to the next client at once', async () => {
      const key = `cancel-wait-${driver}`
      const holder = lockOn(key)
      assert.equal(await holder.acquire(), true)
      const { prim, loopId } = primitiveOn(driver, key)
      const id = native.newCancelId()
      try {
        const pending = loopAcquire(prim, loopId, id)
        await queuedOn(key)
        native.cancelWait(id)
        const r = await pending
        assert.equal(r.ok, false, `a cancelled wait must not be granted (got ${JSON.stringify(r)})`)
        assert.equal(r.error.code, 'ABORTED')
        assert.equal(prim.token, null)
      } finally {
        native.forgetCancel(id)
      }
      await holder.release()
      // Had the cancelled waiter stayed queued on the server, the key would be granted to it, and this try would fail.
      const next = lockOn(key, { acquireTimeoutS: 0 })
      assert.equal(await next.acquire(), true, 'the key must be free once its holder released it')
      await next.release()
      prim.close()
    })

    test('a grant that crosses the cancel is closed, never handed out', async () => {
      const key = `cancel-cross-${driver}`
      const holder = lockOn(key)
      assert.equal(await holder.acquire(), true)
      const { prim, loopId } = primitiveOn(driver, key)
      const id = native.newCancelId()
      try {
        // Queued (on the event-loop driver, handed on to tokio: continueAcquire), then granted by the release; the
        // cancel comes after the grant reached the primitive and before its result reached JavaScript.
        // The release is written before this thread spins (the holder's driver writes it at once), and nothing reaches
        // JavaScript until the spin ends: the waiter's grant lands natively meanwhile.
        const pending = loopAcquire(prim, loopId, id)
        await queuedOn(key)
        const released = holder.release()
        spinUntilHeld(prim)
        native.cancelWait(id)
        await released
        const r = await pending
        assert.equal(r.ok, false, `a grant crossing the cancel must not be handed out (got ${JSON.stringify(r)})`)
        assert.equal(r.error.code, 'ABORTED')
        assert.equal(prim.token, null, 'the crossed grant is closed')
      } finally {
        native.forgetCancel(id)
      }
      const next = lockOn(key, { acquireTimeoutS: 2 })
      assert.equal(await next.acquire(), true, 'the server released the crossed grant')
      await next.release()
    })

    test('DistributedLock: an aborted signal cancels the wait, and the same instance acquires next', async () => {
      const key = `cancel-signal-${driver}`
      const holder = lockOn(key)
      assert.equal(await holder.acquire(), true)
      process.env.SEMA_NATIVE_DFLOCKD_DRIVER = driver
      let lock
      try {
        lock = lockOn(key)
      } finally {
        delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
      }
      const ac = new AbortController()
      const pending = lock.acquire({ signal: ac.signal })
      await queuedOn(key)
      ac.abort()
      await assert.rejects(pending, { code: 'ABORTED' })
      assert.equal(lock.token, null)
      await holder.release()
      assert.equal(await lock.acquire(), true, 'the instance serves its next acquisition')
      const other = lockOn(key, { acquireTimeoutS: 0 })
      assert.equal(await other.acquire(), false, 'held by the instance, not by a cancelled leftover')
      await lock.release()
    })
  })
}
