'use strict'
// Automatic renewal keeps a short lease alive and keeps the connection below the server's idle timeout;
// losing the server fires onLockLost once and aborts the lock's signal; a restarted server grants again.
const { test, describe, after } = require('node:test')
const assert = require('node:assert/strict')
const { once } = require('node:events')
const d = require('./helpers/dflockd')
const { DistributedLock, acquireTarget } = require('../lib/dflockd')
const { LockError } = require('../lib/errors')

const skip = d.skipReason()
after(() => d.stopAll())

/** Tries the key with timeout 0 from other clients every `everyMs` until `ms` have passed; returns the attempts. */
async function assertHeldFor(s, key, ms, everyMs = 400) {
  const deadline = Date.now() + ms
  let attempts = 0
  while (Date.now() < deadline) {
    const probe = new DistributedLock({ key, servers: [[s.host, s.port]], acquireTimeoutS: 0 })
    assert.equal(await probe.acquire(), false, `another client got '${key}' after ${attempts} attempts`)
    attempts++
    await new Promise((r) => setTimeout(r, everyMs)) // the sampling interval of the `ms` under test
  }
  return attempts
}

describe('renewal', { skip, concurrency: true }, () => {
  test('a 2 s lease is held for 6 s', async () => {
    const s = await d.startServer()
    const lost = []
    const a = new DistributedLock({ key: 'rn-short', servers: [[s.host, s.port]], leaseTtlS: 2, onLockLost: (...args) => lost.push(args) })
    assert.equal(await a.acquire(), true)
    const token = a.token
    const attempts = await assertHeldFor(s, 'rn-short', 6000)
    assert.ok(attempts >= 10)
    assert.deepEqual(lost, [])
    assert.equal(a.signal.aborted, false)
    assert.equal(a.token, token)
    assert.ok(a.lease >= 1 && a.lease <= 2, `lease ${a.lease}`)
    await a.release()
    const b = new DistributedLock({ key: 'rn-short', servers: [[s.host, s.port]], acquireTimeoutS: 0 })
    assert.equal(await b.acquire(), true)
    b.close()
  })

  test('a 60 s lease is held for 10 s against --read-timeout 3 (renewal stays below the idle limit)', async () => {
    const s = await d.startServer({ args: ['--read-timeout', '3'] })
    const lost = []
    const a = new DistributedLock({
      key: 'rn-idle',
      servers: [[s.host, s.port]],
      leaseTtlS: 60,
      // The server cannot tell its read timeout; the default cap sits below the stock 23 s, so cap it for this server.
      renewMaxIntervalMs: 1000,
      onLockLost: (...args) => lost.push(args),
    })
    assert.equal(await a.acquire(), true)
    await assertHeldFor(s, 'rn-idle', 10000, 1000)
    assert.deepEqual(lost, [])
    assert.equal(a.signal.aborted, false)
    assert.match(a.token, /^[0-9a-f]{32}$/)
    await a.release()
  })

  test('target API: ?leaseTtl=2 held for 5 s', async () => {
    const s = await d.startServer()
    let lostCalls = 0
    const r = await acquireTarget(s.url('rn-target', 'leaseTtl=2'), { onLost: () => lostCalls++ }, { wait: true })
    assert.equal(r.ok, true)
    assert.equal(r.value.lease, 2)
    await assertHeldFor(s, 'rn-target', 5000)
    assert.equal(lostCalls, 0)
    assert.equal(r.value.signal.aborted, false)
    assert.equal(await r.value.release(), true)
  })
})

describe('loss', { skip }, () => {
  test('the server dropping an idle connection (its read timeout) is reported at once, not at the next renew', async () => {
    // --read-timeout 2: the server writes `error`, closes the idle connection at ~2 s and releases the lock. The
    // first renew of a 60 s lease is due at the 15 s default cap: the loss must come from watching the connection.
    const s = await d.startServer({ args: ['--read-timeout', '2'] })
    const calls = []
    let lostCall
    const called = new Promise((resolve) => {
      lostCall = resolve
    })
    const a = new DistributedLock({
      key: 'ls-idle',
      servers: [[s.host, s.port]],
      leaseTtlS: 60,
      onLockLost: (...args) => {
        calls.push([Date.now(), ...args])
        lostCall(true)
      },
    })
    assert.equal(await a.acquire(), true)
    const token = a.token
    const signal = a.signal
    const t0 = Date.now()
    const aborted = once(signal, 'abort').then(() => Date.now() - t0)
    let timer
    const bound = new Promise((resolve) => {
      timer = setTimeout(resolve, 8000, null)
    })
    const abortedAfter = await Promise.race([aborted, bound])
    const lostReported = await Promise.race([called, bound])
    clearTimeout(timer)
    a.close()
    assert.notEqual(abortedAfter, null, `signal not aborted ${Date.now() - t0} ms after acquire (the server closed the connection at ~2 s)`)
    assert.ok(abortedAfter >= 1500 && abortedAfter < 6000, `aborted after ${abortedAfter} ms`)
    assert.equal(lostReported, true, 'onLockLost not called')
    assert.equal(signal.reason.code, 'LOCK_LOST')
    assert.deepEqual(calls.map((c) => c.slice(1)), [['ls-idle', token]])
    assert.equal(a.token, null)
    // The server has released it: another client gets it at once.
    const b = new DistributedLock({ key: 'ls-idle', servers: [[s.host, s.port]], acquireTimeoutS: 0 })
    assert.equal(await b.acquire(), true)
    b.close()
    assert.equal(calls.length, 1)
  })

  test('server SIGKILLed while held → onLockLost once, signal aborted; restarted server grants again', async () => {
    const s = await d.startServer()
    const calls = []
    const a = new DistributedLock({
      key: 'ls-kill',
      servers: [[s.host, s.port]],
      leaseTtlS: 2,
      socketTimeoutMs: 2000,
      onLockLost: (...args) => calls.push(args),
    })
    assert.equal(await a.acquire(), true)
    const token = a.token
    const signal = a.signal
    const aborted = once(signal, 'abort')
    await s.kill('SIGKILL')
    await aborted
    assert.ok(signal.reason instanceof LockError)
    assert.equal(signal.reason.code, 'LOCK_LOST')
    assert.deepEqual(calls, [['ls-kill', token]])
    assert.equal(a.token, null)
    assert.equal(a.lease, 0)
    // A later renew tick must not report the same loss again: a window (1.5 s, more than the 1 s renew period of the
    // 2 s lease) in which nothing may happen, so no event to wait for.
    await new Promise((r) => setTimeout(r, 1500))
    assert.equal(calls.length, 1)
    await assert.rejects(a.release(), (e) => e instanceof LockError && e.code === 'NOT_LOCKED')
    await s.restart()
    assert.equal(await a.acquire(), true, 'the same instance acquires again after the loss')
    assert.notEqual(a.signal, signal)
    assert.equal(a.signal.aborted, false)
    await a.release()
  })

  test('target API: loss aborts lock.signal and calls onLost(lock, error) once', async () => {
    const s = await d.startServer()
    const calls = []
    const r = await acquireTarget(s.url('ls-target'), { leaseTtl: 2, onLost: (lock, err) => calls.push([lock, err]) }, { wait: true })
    assert.equal(r.ok, true)
    const lock = r.value
    const aborted = once(lock.signal, 'abort')
    await s.kill('SIGKILL')
    await aborted
    assert.equal(lock.released, true)
    assert.equal(calls.length, 1)
    assert.equal(calls[0][0], lock)
    assert.equal(calls[0][1].code, 'LOCK_LOST')
    assert.equal(lock.signal.reason.code, 'LOCK_LOST')
    assert.equal(await lock.release(), false, 'release after loss reports false')
    await s.restart()
    const again = await acquireTarget(s.url('ls-target'), { timeout: 5000 }, { wait: true })
    assert.equal(again.ok, true)
    assert.equal(await again.value.release(), true)
  })
})
