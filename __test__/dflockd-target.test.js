'use strict'
// The one-string API on dflockd:// targets, through the package entry point (index.js → lib/target.js →
// lib/dflockd/): acquire, tryAcquire, withLock, release, async dispose, ?leaseTtl=, abort, status.
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const api = require('..')
const { LockError, AcquireTimeoutError } = api

const skip = d.skipReason()
const goOnly = d.goOnly()
let s
before(async () => {
  if (!skip) s = await d.startServer()
})
after(() => d.stopAll())

describe('dflockd:// targets', { skip }, () => {
  test('acquire → Lock handle; tryAcquire while held → ALREADY_LOCKED; release(url)', async () => {
    const url = s.url('tg-basic')
    const before = Math.floor(Date.now() / 1000)
    const r = await api.acquire(url)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const lock = r.value
    assert.equal(lock.backend, 'dflockd')
    assert.equal(lock.target, url)
    assert.equal(lock.pid, process.pid)
    assert.ok(lock.timestamp >= before && lock.timestamp <= Math.floor(Date.now() / 1000))
    assert.match(lock.token, /^[0-9a-f]{32}$/)
    assert.equal(lock.lease, 33)
    assert.equal(lock.released, false)
    assert.equal(lock.signal.aborted, false)
    const t = await api.tryAcquire(url)
    // This process's own holder, named (dflockd-holder covers another process's).
    const { leaseExpiresInS, ...facts } = t.error
    assert.ok(leaseExpiresInS > 0 && leaseExpiresInS <= 33, String(leaseExpiresInS))
    assert.deepEqual(facts, { type: 'ALREADY_LOCKED', message: 'Lock already held', isOwnedByCurrentProcess: true, holderPid: process.pid, lockedSince: lock.timestamp, waiters: 0 })
    assert.deepEqual(await api.release(url), { ok: true, value: undefined })
    assert.equal(lock.released, true)
    assert.deepEqual(await api.release(url), { ok: false, error: { type: 'NOT_LOCKED', message: 'Lock not held' } })
    assert.equal(await lock.release(), false)
    const again = await api.tryAcquire(url)
    assert.equal(again.ok, true)
    assert.deepEqual(await api.release(again.value), { ok: true, value: undefined })
    assert.equal(again.value.released, true)
  })

  test('acquire timeout: TIMEOUT after the timeout (to the ms, not rounded up to the protocol\'s seconds)', async () => {
    const url = s.url('tg-timeout')
    const holder = await api.acquire(url)
    assert.equal(holder.ok, true)
    for (const [timeout, below] of [[1000, 5000], [1, 1000]]) {
      const t0 = performance.now()
      const r = await api.acquire(url, { timeout })
      const waited = performance.now() - t0
      const since = new Date(holder.value.timestamp * 1000).toISOString()
      assert.deepEqual(r, {
        ok: false,
        error: {
          type: 'TIMEOUT',
          message: `timeout acquiring 'tg-timeout' (held by this process, pid ${process.pid}, since ${since})`,
          isOwnedByCurrentProcess: true,
          holderPid: process.pid,
          lockedSince: holder.value.timestamp,
        },
      })
      assert.ok(waited >= timeout - 1 && waited < below, `timeout ${timeout} ms waited ${waited} ms`)
    }
    const zero = await api.acquire(url, { timeout: 0 })
    assert.equal(zero.error.type, 'TIMEOUT')
    assert.equal(await holder.value.release(), true)
  })

  test('a waiting acquire is granted on release', async () => {
    const url = s.url('tg-wait')
    const a = await api.acquire(url)
    const pending = api.acquire(url, { timeout: 10000 })
    await a.value.release()
    const b = await pending
    assert.equal(b.ok, true)
    assert.notEqual(b.value.token, a.value.token)
    await b.value.release()
  })

  test('withLock: value, release afterwards, AcquireTimeoutError when held, fn error wins', async () => {
    const url = s.url('tg-with')
    let seen
    assert.equal(await api.withLock(url, (lock) => ((seen = lock), 'done')), 'done')
    assert.equal(seen.backend, 'dflockd')
    assert.equal(seen.released, true)
    const holder = await api.acquire(url)
    await assert.rejects(api.withLock(url, () => 'never', { timeout: 0 }), (e) => e instanceof AcquireTimeoutError && e.code === 'TIMEOUT')
    await holder.value.release()
    const boom = new Error('boom')
    await assert.rejects(api.withLock(url, () => { throw boom }), (e) => e === boom)
    const free = await api.tryAcquire(url)
    assert.equal(free.ok, true, 'released after fn threw')
    await free.value.release()
  })

  test('lock[Symbol.asyncDispose]() releases (await using)', async () => {
    const url = s.url('tg-dispose')
    const r = await api.acquire(url)
    await r.value[Symbol.asyncDispose]()
    assert.equal(r.value.released, true)
    const again = await api.tryAcquire(url)
    assert.equal(again.ok, true)
    await again.value[Symbol.asyncDispose]()
  })

  test('?leaseTtl= and the leaseTtl option (which wins)', async () => {
    const r = await api.acquire(s.url('tg-lease', 'leaseTtl=5'))
    assert.equal(r.value.lease, 5)
    await r.value.release()
    const o = await api.acquire(s.url('tg-lease', 'leaseTtl=5'), { leaseTtl: 7 })
    assert.equal(o.value.lease, 7)
    await o.value.release()
  })

  test('signal: abort cancels a waiting acquire; an aborted signal fails without connecting', async () => {
    const url = s.url('tg-abort')
    const holder = await api.acquire(url)
    const ac = new AbortController()
    const t0 = Date.now()
    const p = api.acquire(url, { timeout: 30000, signal: ac.signal })
    setTimeout(() => ac.abort(), 100)
    const r = await p
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ABORTED')
    assert.ok(Date.now() - t0 < 5000)
    await holder.value.release()

    const fake = await d.fakeServer(() => 'ok')
    const a = await api.acquire(`dflockd://127.0.0.1:${fake.port}/tg-abort`, { signal: AbortSignal.abort() })
    assert.equal(a.error.type, 'ABORTED')
    await new Promise((r) => setTimeout(r, 100)) // a stray connect would land within this grace period
    assert.equal(fake.connections, 0)
  })

  test('connection refused → CONNECTION_ERROR result', async () => {
    const port = await d.freePort()
    const r = await api.acquire(`dflockd://127.0.0.1:${port}/tg-refused`, { connectTimeoutMs: 2000 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'CONNECTION_ERROR')
    await assert.rejects(api.withLock(`dflockd://127.0.0.1:${port}/tg-refused`, () => 1), (e) => e instanceof LockError && e.code === 'CONNECTION_ERROR')
  })

  test('status on a server without stats (scripted: the Python 0.5.0 reply) rejects with SERVER_ERROR', async () => {
    const f = await d.fakeServer(() => 'error')
    await assert.rejects(api.status(`dflockd://${f.host}:${f.port}/tg-status`), (e) => e instanceof LockError && e.code === 'SERVER_ERROR' && /no stats command/.test(e.message))
  })

  test('status: locked / holders / waiters / owned by this process', { skip: goOnly }, async () => {
    const url = s.url('tg-status-go')
    const free = await api.status(url)
    assert.equal(free.locked, false)
    assert.equal(free.backend, 'dflockd')
    assert.equal(free.target, url)
    assert.equal(free.isOwnedByCurrentProcess, false)
    assert.equal(free.isStale, false)
    const r = await api.acquire(url, { leaseTtl: 20 })
    const held = await api.status(url)
    assert.equal(held.locked, true)
    assert.equal(held.holders, 1)
    assert.equal(held.waiters, 0)
    assert.equal(held.limit, 1)
    assert.equal(held.isOwnedByCurrentProcess, true)
    assert.deepEqual(held.info, { pid: process.pid, timestamp: r.value.timestamp })
    assert.ok(held.leaseExpiresInS > 15 && held.leaseExpiresInS <= 20)
    await r.value.release()
    assert.equal((await api.status(url)).isOwnedByCurrentProcess, false)
  })

  test('?limit=2 semaphore: two holders, a third try fails', { skip: goOnly }, async () => {
    const url = s.url('tg-sem', 'limit=2')
    const a = await api.acquire(url)
    const b = await api.acquire(url)
    assert.equal(a.ok && b.ok, true)
    assert.equal((await api.tryAcquire(url)).error.type, 'ALREADY_LOCKED')
    const st = await api.status(url)
    assert.equal(st.holders, 2)
    assert.equal(st.limit, 2)
    await a.value.release()
    await b.value.release()
  })
})
