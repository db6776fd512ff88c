'use strict'
// Waiters started in order are granted in order (issue 23 point 5; design §4): nine DistributedLocks (and
// DistributedSemaphores, and acquire('dflockd://…')) call acquire() 0…8 in one tick on a held key; the Go server's
// FIFO grants them in the order their requests were queued, which the client makes the call order (each waiter's
// `e` is sent once the previous one's was answered). 20 runs each, the exact order asserted every run.

const test = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { DistributedLock, DistributedSemaphore, acquire } = require('..')

const RUNS = 20
const WAITERS = 9
const skip = d.goOnly()

const srv = d.serverFixture({ skip })

/** Starts `WAITERS` acquisitions in one tick while `key` is held, then frees it; resolves the grant order. */
async function grantOrder(start, freeHolder) {
  const order = []
  const waits = []
  for (let i = 0; i < WAITERS; i++) {
    waits.push(
      start(i).then(async (release) => {
        order.push(i)
        await release()
      }),
    )
  }
  await freeHolder()
  await Promise.all(waits)
  return order
}

const inOrder = Array.from({ length: WAITERS }, (_, i) => i)

test('DistributedLock: waiters started in order are granted in order, 20 runs of 9', { skip, timeout: u.scaled(120_000) }, async () => {
  const seen = []
  for (let run = 0; run < RUNS; run++) {
    const key = `order-lock-${run}-${process.pid}`
    const opts = { key, host: srv.host, port: srv.port, acquireTimeoutS: 30 }
    const holder = new DistributedLock(opts)
    assert.equal(await holder.acquire(), true)
    const order = await grantOrder(
      async (i) => {
        const l = new DistributedLock(opts)
        assert.equal(await l.acquire(), true, `waiter ${i} timed out`)
        return () => l.release()
      },
      () => holder.release(),
    )
    seen.push(order.join(','))
  }
  assert.deepEqual(seen, Array(RUNS).fill(inOrder.join(',')), `grant orders over ${RUNS} runs:\n${seen.join('\n')}`)
})

test('DistributedSemaphore (limit 2): waiters started in order are granted in order, 20 runs of 9', { skip, timeout: u.scaled(120_000) }, async () => {
  const seen = []
  for (let run = 0; run < RUNS; run++) {
    const key = `order-sem-${run}-${process.pid}`
    const opts = { key, limit: 2, host: srv.host, port: srv.port, acquireTimeoutS: 30 }
    const holders = [new DistributedSemaphore(opts), new DistributedSemaphore(opts)]
    for (const h of holders) assert.equal(await h.acquire(), true)
    // One slot is freed, then each waiter frees its own after recording: the grants go one at a time.
    const order = await grantOrder(
      async (i) => {
        const l = new DistributedSemaphore(opts)
        assert.equal(await l.acquire(), true, `waiter ${i} timed out`)
        return () => l.release()
      },
      () => holders[0].release(),
    )
    await holders[1].release()
    seen.push(order.join(','))
  }
  assert.deepEqual(seen, Array(RUNS).fill(inOrder.join(',')), `grant orders over ${RUNS} runs:\n${seen.join('\n')}`)
})

test("acquire('dflockd://…'): waiters started in order are granted in order, 20 runs of 9", { skip, timeout: u.scaled(120_000) }, async () => {
  const seen = []
  for (let run = 0; run < RUNS; run++) {
    const url = srv.url(`order-url-${run}-${process.pid}`)
    const held = await acquire(url, { timeout: 30_000 })
    assert.equal(held.ok, true)
    const holder = held.value
    const order = await grantOrder(
      async (i) => {
        const r = await acquire(url, { timeout: 30_000 })
        assert.equal(r.ok, true, `waiter ${i}: ${JSON.stringify(r.error)}`)
        return () => r.value.release()
      },
      () => holder.release(),
    )
    seen.push(order.join(','))
  }
  assert.deepEqual(seen, Array(RUNS).fill(inOrder.join(',')), `grant orders over ${RUNS} runs:\n${seen.join('\n')}`)
})
