'use strict'
// Every reply path the installed server can produce, surfacing as the documented JS result or error code.
// The suites run on the Go server v1.10.0 (CI fails when another is installed, see helpers/dflockd.js).
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { DistributedLock, DistributedSemaphore, Connection, acquireTarget, stats } = require('../lib/dflockd')
const { LockError, AcquireTimeoutError, AuthError } = require('../lib/errors')

const skip = d.skipReason()
const goOnly = d.goOnly()
const TOKEN = /^[0-9a-f]{32}$/
const serverError = (reply, code = 'SERVER_ERROR') => (e) => e instanceof LockError && e.code === code && e.reply === reply

after(() => d.stopAll())

describe('ok / timeout / release / renew', { skip }, () => {
  let s
  const lock = (key, o = {}) => new DistributedLock({ key, servers: [[s.host, s.port]], ...o })
  before(async () => {
    s = await d.startServer()
  })

  test('DistributedLock.acquire: true, then false for a contender (timeout 0 and 1 s)', async () => {
    const a = lock('rp-basic', { leaseTtlS: 20 })
    assert.equal(await a.acquire(), true)
    assert.match(a.token, TOKEN)
    assert.equal(a.lease, 20)
    const b = lock('rp-basic', { acquireTimeoutS: 0 })
    assert.equal(await b.acquire(), false)
    assert.equal(b.token, null)
    const c = lock('rp-basic', { acquireTimeoutS: 1 })
    const t0 = Date.now()
    assert.equal(await c.acquire(), false)
    assert.ok(Date.now() - t0 >= 900, `waited ${Date.now() - t0} ms for a 1 s timeout`)
    await a.release()
    assert.equal(a.token, null)
    assert.equal(await b.acquire(), true, 'free again after release')
    await b.release()
  })

  test('Connection: ok <token> <lease>, timeout → AcquireTimeoutError, renew, release, release again → error', async () => {
    const c1 = await Connection.connect({ host: s.host, port: s.port })
    const c2 = await Connection.connect({ host: s.host, port: s.port })
    try {
      const g = await c1.acquire('rp-conn', 0, 7)
      assert.match(g.token, TOKEN)
      assert.equal(g.lease, 7)
      await assert.rejects(c2.acquire('rp-conn', 0), (e) => e instanceof AcquireTimeoutError && e.code === 'TIMEOUT' && e.message === "timeout acquiring 'rp-conn'")
      const renewed = await c1.renew('rp-conn', g.token, 9)
      // Go answers the TTL applied; Python 0.5.0 answers int(expiry - now), usually TTL - 1.
      if (s.kind === 'go') assert.equal(renewed, 9)
      else assert.ok(renewed === 8 || renewed === 9, `renew answered ${renewed}`)
      await assert.rejects(c2.renew('rp-conn', 'f'.repeat(32), 9), serverError('error'))
      await c1.release('rp-conn', g.token)
      await assert.rejects(c1.release('rp-conn', g.token), serverError('error'))
      const g2 = await c2.acquire('rp-conn', 0)
      assert.equal(g2.lease, 33, 'server default lease')
      await c2.release('rp-conn', g2.token)
    } finally {
      c1.close()
      c2.close()
    }
  })

  test('Connection.request returns raw reply lines', async () => {
    const c = await Connection.connect({ host: s.host, port: s.port })
    try {
      const line = await c.request('l', 'rp-raw', '0 5')
      assert.match(line, /^ok [0-9a-f]{32} 5$/)
      assert.equal(await c.request('r', 'rp-raw', line.split(' ')[1]), 'ok')
    } finally {
      c.close()
    }
  })
})

// The Python dflockd 0.5.0 answers `error` to the commands it lacks (stats, semaphores); only a scripted server
// reproduces that against the Go server the suites run on.
describe('a server without stats and semaphores (scripted: the Python 0.5.0 replies)', () => {
  test('stats and sl → SERVER_ERROR reply "error", nothing held', async () => {
    const f = await d.fakeServer(() => 'error')
    await assert.rejects(stats({ host: f.host, port: f.port }), serverError('error'))
    const c = await Connection.connect({ host: f.host, port: f.port })
    try {
      await assert.rejects(c.stats(), serverError('error'))
    } finally {
      c.close()
    }
    // On both drivers (Bun and Deno use the tokio one): the bare `error` to the first `se` is a refusal, reported at
    // once on the one connection, not retried as a stopping server's until the timeout's end (the tokio driver
    // opened 14 connections in 10 s and, under load, crossed its deadline and resolved false).
    for (const driver of ['event-loop', 'tokio']) {
      const before = f.connections
      const saved = process.env.SEMA_NATIVE_DFLOCKD_DRIVER
      process.env.SEMA_NATIVE_DFLOCKD_DRIVER = driver
      let sem
      try {
        sem = new DistributedSemaphore({ key: 'py-sem', limit: 2, servers: [[f.host, f.port]] })
      } finally {
        if (saved === undefined) delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
        else process.env.SEMA_NATIVE_DFLOCKD_DRIVER = saved
      }
      await assert.rejects(sem.acquire(), serverError('error'), driver)
      assert.equal(sem.token, null)
      assert.equal(f.connections - before, 1, `${driver}: one connection, no rejoin`)
      sem.close()
    }
    await f.close()
  })
})

describe('two-phase replies', { skip }, () => {
  let s
  before(async () => {
    s = await d.startServer()
  })

  test('enqueue: acquired, then queued for a contender; wait grants after release', async () => {
    const c1 = await Connection.connect({ host: s.host, port: s.port })
    const c2 = await Connection.connect({ host: s.host, port: s.port })
    try {
      const e1 = await c1.enqueue('rp-two', 10)
      assert.equal(e1.status, 'acquired')
      assert.match(e1.token, TOKEN)
      assert.equal(e1.lease, 10)
      assert.deepEqual(await c2.enqueue('rp-two'), { status: 'queued', token: null, lease: null })
      const w1 = await c1.waitForLock('rp-two', 0)
      assert.equal(w1.token, e1.token, 'fast path returns the same token')
      const waiting = c2.waitForLock('rp-two', 10)
      await c1.release('rp-two', e1.token)
      const w2 = await waiting
      assert.match(w2.token, TOKEN)
      assert.notEqual(w2.token, e1.token)
      assert.equal(w2.lease, 33)
      await c2.release('rp-two', w2.token)
    } finally {
      c1.close()
      c2.close()
    }
  })

  test('wait timeout → AcquireTimeoutError (low level) / false (DistributedLock)', async () => {
    const holder = new DistributedLock({ key: 'rp-wt', servers: [[s.host, s.port]] })
    assert.equal(await holder.acquire(), true)
    const c = await Connection.connect({ host: s.host, port: s.port })
    try {
      assert.equal((await c.enqueue('rp-wt')).status, 'queued')
      await assert.rejects(c.waitForLock('rp-wt', 0), AcquireTimeoutError)
    } finally {
      c.close()
    }
    const l = new DistributedLock({ key: 'rp-wt', servers: [[s.host, s.port]] })
    assert.equal(await l.enqueue(), 'queued')
    assert.equal(await l.wait(0), false)
    assert.equal(l.token, null)
    await assert.rejects(l.wait(0), (e) => e instanceof LockError && e.code === 'NOT_LOCKED' && /enqueue\(\) again/.test(e.message))
    await holder.release()
  })

  test('error_already_enqueued (Go) / bare error (Python 0.5.0)', async () => {
    const c1 = await Connection.connect({ host: s.host, port: s.port })
    const c2 = await Connection.connect({ host: s.host, port: s.port })
    try {
      const e1 = await c1.enqueue('rp-dup')
      assert.equal(e1.status, 'acquired')
      await assert.rejects(c1.enqueue('rp-dup'), serverError(s.kind === 'go' ? 'error_already_enqueued' : 'error'))
      // queued twice on one connection
      assert.equal((await c2.enqueue('rp-dup')).status, 'queued')
      await assert.rejects(c2.enqueue('rp-dup'), serverError(s.kind === 'go' ? 'error_already_enqueued' : 'error'))
      // Both servers keep the connection after this error.
      await c1.release('rp-dup', e1.token)
      const w = await c2.waitForLock('rp-dup', 5)
      await c2.release('rp-dup', w.token)
    } finally {
      c1.close()
      c2.close()
    }
  })

  test('error_not_enqueued (Go) / bare error (Python 0.5.0)', async () => {
    const c = await Connection.connect({ host: s.host, port: s.port })
    try {
      await assert.rejects(c.waitForLock('rp-never', 0), serverError(s.kind === 'go' ? 'error_not_enqueued' : 'error'))
      // after a completed wait the state is gone too
      const e = await c.enqueue('rp-once')
      await c.waitForLock('rp-once', 0)
      await assert.rejects(c.waitForLock('rp-once', 0), serverError(s.kind === 'go' ? 'error_not_enqueued' : 'error'))
      await c.release('rp-once', e.token)
    } finally {
      c.close()
    }
  })

  test('a grant whose lease expired before wait() → LockError LOCK_LOST (stale-token trap)', async () => {
    const holder = await Connection.connect({ host: s.host, port: s.port })
    const w = new DistributedLock({ key: 'rp-stale', servers: [[s.host, s.port]], leaseTtlS: 1 })
    try {
      const g = await holder.acquire('rp-stale', 0, 30)
      assert.equal(await w.enqueue(), 'queued')
      await holder.release('rp-stale', g.token) // grants w's queued entry a 1 s lease that nobody renews
      // No event exists for a server-side lease expiry: poll until another client can take the key.
      const taken = async () => {
        try {
          await holder.release('rp-stale', (await holder.acquire('rp-stale', 0)).token)
          return true
        } catch (err) {
          if (err instanceof AcquireTimeoutError) return false
          throw err
        }
      }
      await u.until(taken, { timeoutMs: 6000, intervalMs: 100, what: "'rp-stale' free again once its unrenewed lease expired" })
      await assert.rejects(w.wait(1), (e) => e instanceof LockError && e.code === 'LOCK_LOST')
      assert.equal(w.token, null)
    } finally {
      holder.close()
      w.close()
    }
  })

  test('error_lease_expired', { skip: goOnly }, async () => {
    // The Go server answers error_lease_expired only when the lease ran out before its sweep removed the
    // enqueued state (after the sweep the reply is error_not_enqueued): a server whose sweep never runs.
    const slow = await d.startServer({ args: ['--lease-sweep-interval', '3600'] })
    const c = await Connection.connect({ host: slow.host, port: slow.port })
    try {
      const e = await c.enqueue('rp-expired', 1)
      assert.equal(e.status, 'acquired')
      // No event marks a lease running out on the server's clock: let its one second pass.
      await new Promise((r) => setTimeout(r, 1100))
      await assert.rejects(c.waitForLock('rp-expired', 0), serverError('error_lease_expired'))
    } finally {
      c.close()
      await slow.stop()
    }
  })
})

describe('error_max_locks (--max-locks 1)', { skip }, () => {
  let s
  before(async () => {
    s = await d.startServer({ args: ['--max-locks', '1'] })
  })

  test('a second key is refused on every path', async () => {
    const a = new DistributedLock({ key: 'ml-a', servers: [[s.host, s.port]] })
    assert.equal(await a.acquire(), true)
    const b = new DistributedLock({ key: 'ml-b', servers: [[s.host, s.port]], acquireTimeoutS: 0 })
    await assert.rejects(b.acquire(), serverError('error_max_locks'))
    assert.equal(b.token, null)
    await assert.rejects(b.enqueue(), serverError('error_max_locks'))
    const c = await Connection.connect({ host: s.host, port: s.port })
    try {
      await assert.rejects(c.acquire('ml-c', 0), (e) => serverError('error_max_locks')(e) && e.message === "acquire failed: 'error_max_locks'")
      await assert.rejects(c.enqueue('ml-c'), serverError('error_max_locks'))
    } finally {
      c.close()
    }
    const r = await acquireTarget(s.url('ml-d'), { timeout: 0 }, { wait: true })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'SERVER_ERROR')
    assert.equal(r.error.reply, 'error_max_locks')
    await a.release()
  })
})

describe('Go-only replies', () => {
  let s
  before(async () => {
    if (!(skip || goOnly)) s = await d.startServer({ args: ['--max-waiters', '1'] })
  })

  test('error_limit_mismatch', { skip: skip || goOnly }, async () => {
    const sem = new DistributedSemaphore({ key: 'go-mm', limit: 3, servers: [[s.host, s.port]] })
    assert.equal(await sem.acquire(), true)
    const l = new DistributedLock({ key: 'go-mm', servers: [[s.host, s.port]], acquireTimeoutS: 0 })
    await assert.rejects(l.acquire(), serverError('error_limit_mismatch', 'LIMIT_MISMATCH'))
    const other = new DistributedSemaphore({ key: 'go-mm', limit: 2, servers: [[s.host, s.port]], acquireTimeoutS: 0 })
    await assert.rejects(other.acquire(), serverError('error_limit_mismatch', 'LIMIT_MISMATCH'))
    await sem.release()
  })

  test('error_max_waiters', { skip: skip || goOnly }, async () => {
    const holder = new DistributedLock({ key: 'go-mw', servers: [[s.host, s.port]] })
    assert.equal(await holder.acquire(), true)
    const w1 = new DistributedLock({ key: 'go-mw', servers: [[s.host, s.port]] })
    assert.equal(await w1.enqueue(), 'queued')
    const w2 = new DistributedLock({ key: 'go-mw', servers: [[s.host, s.port]], acquireTimeoutS: 5 })
    await assert.rejects(w2.acquire(), serverError('error_max_waiters'))
    await assert.rejects(w2.enqueue(), serverError('error_max_waiters'))
    w1.close()
    await holder.release()
  })

  test('semaphore ok/timeout/release via sl/sw/sr/sn', { skip: skip || goOnly }, async () => {
    const c = await Connection.connect({ host: s.host, port: s.port })
    try {
      const g1 = await c.semAcquire('go-sem', 0, 2, 9)
      const g2 = await c.semAcquire('go-sem', 0, 2)
      assert.notEqual(g1.token, g2.token)
      await assert.rejects(c.semAcquire('go-sem', 0, 2), AcquireTimeoutError)
      assert.equal(await c.semRenew('go-sem', g1.token, 9), 9)
      await c.semRelease('go-sem', g1.token)
      await c.semRelease('go-sem', g2.token)
      const st = await c.stats()
      assert.ok(Array.isArray(st.semaphores))
    } finally {
      c.close()
    }
  })
})

describe('error_auth', () => {
  let s
  before(async () => {
    if (!(skip || goOnly)) s = await d.startServer({ args: ['--auth-token', 'sesame'] })
  })
  test('right token works, wrong token → AuthError, none → AuthError', { skip: skip || goOnly }, async () => {
    const ok = new DistributedLock({ key: 'au', servers: [[s.host, s.port]], auth: 'sesame' })
    assert.equal(await ok.acquire(), true)
    await ok.release()
    const bad = new DistributedLock({ key: 'au', servers: [[s.host, s.port]], auth: 'wrong' })
    await assert.rejects(bad.acquire(), (e) => e instanceof AuthError && e.code === 'AUTH_FAILED' && e.message === 'authentication failed: the server refused the token sent (error_auth)')
    await assert.rejects(Connection.connect({ host: s.host, port: s.port, auth: 'wrong' }), AuthError)
    const none = await Connection.connect({ host: s.host, port: s.port })
    try {
      // Says that no token was sent (a token sent and refused is said so above), and shows none.
      await assert.rejects(none.acquire('au', 0), (e) => e instanceof AuthError && /^authentication failed: the server requires a token and none was sent /.test(e.message))
    } finally {
      none.close()
    }
    const anon = await acquireTarget(`dflockd://${s.host}:${s.port}/au`, {}, { wait: true })
    assert.equal(anon.ok, false)
    assert.match(anon.error.message, /^authentication failed: the server requires a token and none was sent /)
    const r = await acquireTarget(`dflockd://wrong@${s.host}:${s.port}/au`, {}, { wait: true })
    assert.deepEqual(r, { ok: false, error: { type: 'AUTH_FAILED', message: 'authentication failed: the server refused the token sent (error_auth)' } })
    const good = await acquireTarget(`dflockd://sesame@${s.host}:${s.port}/au`, {}, { wait: true })
    assert.equal(good.ok, true)
    assert.equal(await good.value.release(), true)
  })
})
