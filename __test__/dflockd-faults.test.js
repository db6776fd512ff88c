'use strict'
// Lease safety under network faults, between the client and the REAL Go server through a fault-injecting proxy
// (helpers/fault-proxy.js): a holder whose renewals (or their replies) are lost is told it lost the lock BEFORE any
// competitor is granted the key, every time (20 runs of each fault, in parallel); withLock rejects with LOCK_LOST;
// release() of such a lock resolves false; a server that accepts and never answers gives TIMEOUT, never
// ALREADY_LOCKED; waiters ride out a server restart and a holder learns of it at once.
//
// Each run records, from the holder's acquire: when its holder was told (onLockLost / lock.onLost) and when a
// competitor (another process, helpers/dflockd-competitor.js) connected straight to the server got the key. The
// timings go to the test's diagnostics.
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const { once } = require('node:events')
const path = require('node:path')
const { performance } = require('node:perf_hooks')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { startFaultProxy, closeAllProxies } = require('./helpers/fault-proxy')
const { DistributedLock, DistributedSemaphore, acquire, tryAcquire, withLock, status, stats } = require('..')

const skip = d.goOnly()
const RUNS = 20
const LEASE_S = 2

const s = d.serverFixture({ skip })
after(async () => {
  await closeAllProxies()
})

/** Resolves once the server's stats show `n` waiters on each of `keys` (lock or semaphore). */
async function waitersQueued(r, keys, n = 1) {
  const serverStats = () => stats({ host: r.host, port: r.port })
  const queued = (st) => (key) => (st.locks.find((l) => l.key === key)?.waiters ?? st.semaphores.find((l) => l.key === key)?.waiters ?? 0) === n
  await u.until(async () => keys.every(queued(await serverStats())), { intervalMs: 20, what: `${n} waiter(s) on ${keys}`, last: serverStats })
}

/** min / median / max of a list of ms, rounded. */
function spread(xs) {
  const v = [...xs].sort((a, b) => a - b)
  const r = (x) => Math.round(x)
  return `min ${r(v[0])} / median ${r(v[v.length >> 1])} / max ${r(v[v.length - 1])} ms`
}

/** Now, in ms since the epoch with sub-ms resolution: comparable across processes (the competitor prints the same). */
const epochNow = () => performance.timeOrigin + performance.now()

/** A holder: DistributedLock through `proxy` (lease LEASE_S). Resolves {holder, t0, lost} once held (lost: a promise of
 * the epoch time onLockLost ran). */
async function holdThrough(proxy, key) {
  let toldAt
  let holder
  const lost = new Promise((resolve) => {
    holder = new DistributedLock({
      key,
      servers: [[proxy.host, proxy.port]],
      leaseTtlS: LEASE_S,
      onLockLost: () => resolve((toldAt = epochNow())),
    })
  })
  const t0 = epochNow()
  assert.equal(await holder.acquire(), true)
  assert.ok(holder.remaining() > 0 && holder.remaining() <= LEASE_S * 1000, `remaining ${holder.remaining()}`)
  assert.ok(Math.abs(holder.validUntil - (Date.now() + holder.remaining())) < u.scaled(50), 'validUntil = now + remaining()')
  return { holder, t0, lost, told: () => toldAt }
}

/** The competitor: another process waiting for each key straight at the server. Resolves {key: epoch ms got}. */
function competeFrom(keys) {
  const child = spawn(process.execPath, [path.join(__dirname, 'helpers', 'dflockd-competitor.js'), s.host, String(s.port), String(LEASE_S), ...keys], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  let err = ''
  child.stdout.on('data', (d) => (out += d))
  child.stderr.on('data', (d) => (err += d))
  return new Promise((resolve, reject) => {
    child.on('error', reject)
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`competitor exited ${code}: ${err}`))
      const got = {}
      for (const line of out.trim().split('\n')) {
        const r = JSON.parse(line)
        assert.equal(r.got, true, `the competitor did not get '${r.key}' within 10 s`)
        got[r.key] = r.at
      }
      resolve(got)
    })
  })
}

/**
 * RUNS holders in parallel through a proxy with `fault`, and one competitor process waiting for all their keys
 * straight at the server (from right after the grants): asserts each holder was told before the competitor got its
 * key, and reports the timings from each holder's acquire.
 */
async function raceUnder(t, fault, name, { withinLease = true } = {}) {
  const proxy = await startFaultProxy(s, fault)
  try {
    const keys = Array.from({ length: RUNS }, (_, i) => `${name}-${i}`)
    const held = await Promise.all(keys.map((k) => holdThrough(proxy, k)))
    const got = await competeFrom(keys)
    await Promise.all(held.map((h) => h.lost))
    const runs = held.map((h, i) => ({ told: h.told() - h.t0, got: got[keys[i]] - h.t0 }))
    for (const [i, h] of held.entries()) {
      const r = runs[i]
      assert.ok(r.told < r.got, `run ${i}: holder told at ${r.told.toFixed(1)} ms, competitor got the key at ${r.got.toFixed(1)} ms`)
      // The lease clock runs from the acquire's send: the loss comes before the lease could end on the server. (With a
      // slow link the grant is confirmed by a renew at once, and the clock runs from that renew.)
      if (withinLease) assert.ok(r.told < LEASE_S * 1000, `run ${i}: told at ${r.told.toFixed(1)} ms, after the ${LEASE_S} s lease`)
      assert.equal(h.holder.signal.aborted, true)
      assert.equal(h.holder.signal.reason.code, 'LOCK_LOST')
      assert.equal(h.holder.token, null)
      assert.equal(h.holder.remaining(), 0)
    }
    t.diagnostic(`${name}: holder told ${spread(runs.map((r) => r.told))}; competitor (another process) got the key ${spread(runs.map((r) => r.got))}; ` +
      `margin ${spread(runs.map((r) => r.got - r.told))}`)
  } finally {
    await proxy.close()
  }
}

describe('lease safety through a faulty network (real server)', { skip, concurrency: false }, () => {
  test('client→server dropped after the acquire (renewals never arrive): told before the server expires the lease', (t) =>
    raceUnder(t, { upLines: 3 }, 'drop-up'))

  test('server→client dropped after the grant (renewal replies lost): told before the key is free', (t) =>
    raceUnder(t, { downLines: 1 }, 'drop-down'))

  test('a renewal reply stalled mid-line: told before the key is free', (t) =>
    raceUnder(t, { downLines: 1, downPartial: 2 }, 'stall-mid-reply'))

  test('a 700 ms delay each way (a round trip longer than the renew budget): told first', (t) =>
    raceUnder(t, { delayMs: 700 }, 'delay', { withinLease: false }))

  test('a 50 ms delay each way: the lock is kept and renewed, no false loss', async () => {
    const proxy = await startFaultProxy(s, { delayMs: 50 })
    const lost = []
    const a = new DistributedLock({ key: 'delay-ok', servers: [[proxy.host, proxy.port]], leaseTtlS: LEASE_S, onLockLost: () => lost.push(1) })
    assert.equal(await a.acquire(), true)
    const validAtStart = a.validUntil
    // Two renewals later (renew every 1 s for a 2 s lease) the validity moved forward and nobody else got the key.
    const probe = new DistributedLock({ key: 'delay-ok', servers: [[s.host, s.port]], acquireTimeoutS: 3 })
    assert.equal(await probe.acquire(), false, 'a competitor got a key whose holder renews through a slow link')
    assert.deepEqual(lost, [])
    assert.ok(a.validUntil > validAtStart, `validity extended: ${validAtStart} → ${a.validUntil}`)
    await a.release()
    await proxy.close()
  })

  test('DistributedLock.withLock: fn outlives a lease whose renewals are lost → rejects LOCK_LOST', async () => {
    const proxy = await startFaultProxy(s, { downLines: 1 })
    const lost = []
    const a = new DistributedLock({ key: 'wl-dl', servers: [[proxy.host, proxy.port]], leaseTtlS: LEASE_S, onLockLost: (k) => lost.push(k) })
    let ranWith
    await assert.rejects(
      a.withLock(async () => {
        ranWith = a.signal
        await once(a.signal, 'abort')
        return 'fn done'
      }),
      (e) => e.code === 'LOCK_LOST',
    )
    assert.equal(ranWith.aborted, true)
    assert.deepEqual(lost, ['wl-dl'])
    await proxy.close()
  })

  test('DistributedLock.withLock: fn that finishes after the validity, before the loss report ran → rejects LOCK_LOST', async () => {
    const proxy = await startFaultProxy(s, { downLines: 1 })
    const a = new DistributedLock({ key: 'wl-busy', servers: [[proxy.host, proxy.port]], leaseTtlS: LEASE_S })
    await assert.rejects(
      a.withLock(() => {
        // A busy JS thread: the native loss report cannot run until fn returns.
        const end = Date.now() + a.remaining() + 100
        while (Date.now() < end);
        return 'fn done'
      }),
      (e) => e.code === 'LOCK_LOST',
    )
    assert.equal(a.signal.aborted, true)
    await proxy.close()
  })

  test('target withLock: fn outlives the lease → rejects LOCK_LOST; lock.onLost called once', async () => {
    const proxy = await startFaultProxy(s, { downLines: 1 })
    const lost = []
    await assert.rejects(
      withLock(
        proxy.url('wl-target', `leaseTtl=${LEASE_S}`),
        async (lock) => {
          assert.ok(lock.remaining() > 0 && lock.validUntil > Date.now())
          await once(lock.signal, 'abort')
          assert.equal(lock.remaining(), 0)
          return 'fn done'
        },
        { onLost: (lock, e) => lost.push(e.code) },
      ),
      (e) => e.code === 'LOCK_LOST',
    )
    assert.deepEqual(lost, ['LOCK_LOST'])
    await proxy.close()
  })

  test('release() while a renewal reply is lost resolves false (never TIMEOUT), before the lease could end', async () => {
    const proxy = await startFaultProxy(s, { downLines: 1 })
    const r = await acquire(proxy.url('rel-lost', `leaseTtl=${LEASE_S}`))
    assert.equal(r.ok, true)
    const lock = r.value
    const t0 = performance.now()
    // The first renewal's reply is swallowed: release while it is in flight.
    await once(proxy, 'drop')
    assert.equal(await lock.release(), false)
    const took = performance.now() - t0
    // Not scaled: the lease is the defect's duration (a release left waiting for the swallowed reply).
    assert.ok(took < LEASE_S * 1000, `release settled after ${took} ms`)
    assert.equal(lock.released, true)
    assert.equal(lock.signal.aborted, true)
    assert.equal(lock.signal.reason.code, 'LOCK_LOST')
    // The key is free for the next holder (the connection was dropped, or the lease ended).
    const next = await acquire(s.url('rel-lost'), { timeout: 5000 })
    assert.equal(next.ok, true, JSON.stringify(next.error))
    await next.value.release()
    await proxy.close()
  })

  test('release() of a lock lost earlier resolves false', async () => {
    const proxy = await startFaultProxy(s, { upLines: 3 })
    const r = await acquire(proxy.url('rel-after', `leaseTtl=${LEASE_S}`))
    assert.equal(r.ok, true)
    await once(r.value.signal, 'abort')
    assert.equal(await r.value.release(), false)
    await proxy.close()
  })
})

describe('a server that accepts and never answers (real proxy, no server behind it)', { skip, concurrency: true }, () => {
  let proxy
  before(async () => {
    proxy = await startFaultProxy(s, { silent: true })
  })

  test('tryAcquire honours socketTimeoutMs: TIMEOUT, not ALREADY_LOCKED', async () => {
    const t0 = performance.now()
    const r = await tryAcquire(proxy.url('silent'), { socketTimeoutMs: 1000 })
    const took = performance.now() - t0
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'TIMEOUT', r.error.message)
    assert.ok(took >= 1000 && took < u.scaled(4000), `settled after ${took} ms`)
  })

  test('acquire with a timeout: TIMEOUT', async () => {
    const r = await acquire(proxy.url('silent2'), { timeout: 1200, socketTimeoutMs: 1000 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'TIMEOUT')
  })

  test('DistributedLock acquireTimeoutS 0 (a try): throws TIMEOUT, not false', async () => {
    const a = new DistributedLock({ key: 'silent3', servers: [[proxy.host, proxy.port]], acquireTimeoutS: 0, socketTimeoutMs: 1000 })
    await assert.rejects(a.acquire(), (e) => e.code === 'TIMEOUT')
  })

  test('status honours socketTimeoutMs: rejects TIMEOUT', async () => {
    const t0 = performance.now()
    await assert.rejects(status(proxy.url('silent4'), { socketTimeoutMs: 1000 }), (e) => e.code === 'TIMEOUT')
    assert.ok(performance.now() - t0 < u.scaled(4000))
  })

  test('stats honours socketTimeoutMs: rejects TIMEOUT', async () => {
    const t0 = performance.now()
    await assert.rejects(stats({ host: proxy.host, port: proxy.port, socketTimeoutMs: 1000 }), (e) => e.code === 'TIMEOUT')
    assert.ok(performance.now() - t0 < u.scaled(4000))
  })
})

describe('server restart (real server)', { skip, concurrency: false }, () => {
  test('SIGKILL + start: the holder is told at once; waiters (DistributedLock, target acquire, DistributedSemaphore, enqueue + wait) are served by the restarted server', async (t) => {
    const r = await d.startServer()
    const lost = []
    let killedAt
    const holders = ['rs-a', 'rs-b', 'rs-c'].map((key) => new DistributedLock({ key, servers: [[r.host, r.port]], leaseTtlS: 10, onLockLost: () => lost.push(performance.now()) }))
    for (const h of holders) assert.equal(await h.acquire(), true)
    const semHolders = [0, 1].map(() => new DistributedSemaphore({ key: 'rs-sem', limit: 2, servers: [[r.host, r.port]], leaseTtlS: 10 }))
    for (const h of semHolders) assert.equal(await h.acquire(), true)
    const got = {}
    // When a waiter is served, what the holders' own state says (read synchronously: the JS callbacks of the two
    // events may be run in either order when both are pending in one turn of the event loop).
    const holdersKnew = {}
    const stamp = (name) => () => {
      got[name] = performance.now()
      holdersKnew[name] = holders.every((h) => h.token === null && h.remaining() === 0)
    }
    const waiter = new DistributedLock({ key: 'rs-a', servers: [[r.host, r.port]], acquireTimeoutS: 10 })
    const w1 = waiter.acquire().finally(stamp('DistributedLock'))
    const w2 = acquire(r.url('rs-b'), { timeout: 10000 }).finally(stamp('acquire()'))
    const semWaiter = new DistributedSemaphore({ key: 'rs-sem', limit: 2, servers: [[r.host, r.port]], acquireTimeoutS: 10 })
    const w3 = semWaiter.acquire().finally(stamp('DistributedSemaphore'))
    const twoPhase = new DistributedLock({ key: 'rs-c', servers: [[r.host, r.port]] })
    assert.equal(await twoPhase.enqueue(), 'queued')
    const w4 = twoPhase.wait(10).finally(stamp('enqueue() + wait()'))
    // Every waiter is queued on the server before the kill.
    await waitersQueued(r, ['rs-a', 'rs-b', 'rs-c', 'rs-sem'])
    killedAt = performance.now()
    await r.kill('SIGKILL')
    await r.restart()
    const restartedAt = performance.now()
    const results = await Promise.allSettled([w1, w2, w3, w4])
    const ms = (at) => (at - killedAt).toFixed(1)
    const facts = () =>
      `results ${JSON.stringify(results.map((x) => x.status === 'fulfilled' ? x.value : String(x.reason)))}; ` +
      `told at ${lost.map(ms)} ms, server back at ${ms(restartedAt)} ms, served at ${JSON.stringify(Object.fromEntries(Object.entries(got).map(([n, at]) => [n, ms(at)])))}`
    const [r1, r2, r3, r4] = results.map((x) => x.value)
    assert.equal(r1, true, `DistributedLock waiter: ${facts()}`)
    assert.equal(r2 && r2.ok, true, `acquire() waiter: ${facts()}`)
    assert.equal(r3, true, `DistributedSemaphore waiter: ${facts()}`)
    assert.equal(r4, true, `two-phase waiter: ${facts()}`)
    const w2r = r2
    assert.equal(lost.length, 3, `each holder was told once: ${facts()}`)
    const told = Math.max(...lost)
    for (const name of Object.keys(got)) assert.equal(holdersKnew[name], true, `the holders knew their loss when ${name} got the key: ${facts()}`)
    t.diagnostic(`restart: holders told ${(told - killedAt).toFixed(1)} ms after the kill; server back after ${(restartedAt - killedAt).toFixed(0)} ms; ` +
      Object.entries(got).map(([n, at]) => `${n} served ${(at - killedAt).toFixed(0)} ms after the kill`).join(', '))
    await waiter.release()
    await w2r.value.release()
    await semWaiter.release()
    await twoPhase.release()
    for (const h of holders) h.close()
    for (const h of semHolders) h.close()
    await r.stop()
  })

  test('SIGTERM restart (blocked waits answered `error`): a waiter re-enqueues and is served', async () => {
    const r = await d.startServer()
    const holder = new DistributedLock({ key: 'rt', servers: [[r.host, r.port]], leaseTtlS: 10 })
    assert.equal(await holder.acquire(), true)
    const waiter = new DistributedLock({ key: 'rt', servers: [[r.host, r.port]], acquireTimeoutS: 10 })
    const w = waiter.acquire()
    await waitersQueued(r, ['rt'])
    await r.restart()
    assert.equal(await w, true)
    assert.equal(holder.signal.aborted, true, 'the holder learnt that its lease died with the server')
    await waiter.release()
    holder.close()
    await r.stop()
  })

  test('a waiter whose server does not come back within its timeout reports CONNECTION_ERROR at its deadline', async () => {
    const r = await d.startServer()
    const holder = new DistributedLock({ key: 'rg', servers: [[r.host, r.port]], leaseTtlS: 10 })
    assert.equal(await holder.acquire(), true)
    const waiter = new DistributedLock({ key: 'rg', servers: [[r.host, r.port]], acquireTimeoutS: 2 })
    const t0 = performance.now()
    const w = waiter.acquire()
    await waitersQueued(r, ['rg'])
    await r.kill('SIGKILL')
    await assert.rejects(w, (e) => e.code === 'CONNECTION_ERROR')
    assert.ok(performance.now() - t0 >= 1500, 'it kept trying while its timeout lasted')
    holder.close()
  })
})
