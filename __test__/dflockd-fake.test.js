'use strict'
// Against a scripted server (no real dflockd needed): the Go-only replies (stats JSON, auth handshake, semaphore
// commands, error_limit_mismatch / error_max_waiters / error_lease_expired) surface as the documented results,
// and the exact request lines are what the protocol asks for. The real-server versions of these checks live in
// the other dflockd-*.test.js files (skipped there without the Go server).
const { test, describe, after } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { DistributedLock, DistributedSemaphore, Connection, stats, acquireTarget, statusTarget, releaseTarget } = require('../lib/dflockd')
const { LockError, AcquireTimeoutError, AuthError } = require('../lib/errors')

after(() => d.stopAll())

const TOKEN = 'a'.repeat(32)

/** A tiny in-memory dflockd: one key table, no queue (`e` on a held key answers `queued`, `w` then `timeout`); `extra(lines)` may override any reply. */
function scripted({ auth, statsJson, extra = () => undefined } = {}) {
  const held = new Map()
  let n = 0
  return d.fakeServer(([cmd, key, arg]) => {
    const o = extra([cmd, key, arg])
    if (o !== undefined) return o
    if (auth !== undefined && cmd === 'auth') return arg === auth ? 'ok' : 'error_auth'
    if (cmd === 'stats') return `ok ${JSON.stringify(typeof statsJson === 'function' ? statsJson(held) : statsJson)}`
    if (cmd === 'l' || cmd === 'sl') {
      if (held.has(key)) return 'timeout'
      const tok = String(++n).padStart(32, '0')
      held.set(key, tok)
      const parts = arg.split(' ')
      return `ok ${tok} ${parts[cmd === 'l' ? 1 : 2] ?? 33}`
    }
    if (cmd === 'e' || cmd === 'se') {
      // A blocking acquire enqueues first (call order among this process's waiters): granted at once or queued.
      if (held.has(key)) return 'queued'
      const tok = String(++n).padStart(32, '0')
      held.set(key, tok)
      const parts = arg.split(' ')
      return `acquired ${tok} ${parts[cmd === 'e' ? 0 : 1] || 33}`
    }
    if (cmd === 'w' || cmd === 'sw') return 'timeout'
    if (cmd === 'n' || cmd === 'sn') return held.get(key) === arg.split(' ')[0] ? `ok ${arg.split(' ')[1] ?? 33}` : 'error'
    if (cmd === 'r' || cmd === 'sr') {
      if (held.get(key) !== arg) return 'error'
      held.delete(key)
      return 'ok'
    }
    return 'error'
  })
}

describe('stats and status parsing', () => {
  const json = {
    connections: 3,
    locks: [
      { key: 'held', owner_conn_id: 7, lease_expires_in_s: 12.5, waiters: 2 },
      { key: 'queued-only', owner_conn_id: 0, lease_expires_in_s: 0, waiters: 1 },
    ],
    semaphores: [{ key: 'pool', limit: 4, holders: 3, waiters: 0 }],
    idle_locks: [{ key: 'idle', idle_s: 3.2 }],
    idle_semaphores: [],
  }

  test('stats() and Connection.stats() return the parsed JSON', async () => {
    const f = await scripted({ statsJson: json })
    assert.deepEqual(await stats({ host: '127.0.0.1', port: f.port }), json)
    const c = await Connection.connect({ host: '127.0.0.1', port: f.port })
    assert.deepEqual(await c.stats(), json)
    c.close()
    assert.match(f.received, /^stats\n_\n\n/)
  })

  test('status of held / queued-only / semaphore / idle / unknown keys', async () => {
    const f = await scripted({ statsJson: json })
    const url = (k, q = '') => `dflockd://127.0.0.1:${f.port}/${k}${q}`
    const base = { isStale: false, isOwnedByCurrentProcess: false, backend: 'dflockd', info: null }
    assert.deepEqual(await statusTarget(url('held')), {
      ...base, locked: true, target: url('held'), holders: 1, waiters: 2, limit: 1, leaseExpiresInS: 12.5,
    })
    assert.deepEqual(await statusTarget(url('queued-only')), { ...base, locked: false, target: url('queued-only'), holders: 0, waiters: 1, limit: 1 })
    assert.deepEqual(await statusTarget(url('pool', '?limit=4')), { ...base, locked: true, target: url('pool', '?limit=4'), holders: 3, waiters: 0, limit: 4 })
    assert.deepEqual(await statusTarget(url('idle')), { ...base, locked: false, target: url('idle'), holders: 0, waiters: 0, limit: 1 })
    assert.deepEqual(await statusTarget(url('nobody', '?limit=3')), { ...base, locked: false, target: url('nobody', '?limit=3'), holders: 0, waiters: 0, limit: 3 })
  })

  test('isOwnedByCurrentProcess and info follow this process\'s acquireTarget locks', async () => {
    const f = await scripted({
      statsJson: (held) => ({
        connections: 1,
        locks: [...held.keys()].map((key) => ({ key, owner_conn_id: 1, lease_expires_in_s: 30, waiters: 0 })),
        semaphores: [],
        idle_locks: [],
        idle_semaphores: [],
      }),
    })
    const url = `dflockd://127.0.0.1:${f.port}/mine`
    const r = await acquireTarget(url, { leaseTtl: 30 }, { wait: true })
    assert.equal(r.ok, true)
    const st = await statusTarget(url)
    assert.equal(st.locked, true)
    assert.equal(st.isOwnedByCurrentProcess, true)
    assert.deepEqual(st.info, { pid: process.pid, timestamp: r.value.timestamp })
    // another spelling of the same target (default port omitted is a different server; same host/port/key is the same)
    assert.equal((await statusTarget(`dflockd://127.0.0.1:${f.port}/mine?leaseTtl=5`)).isOwnedByCurrentProcess, true)
    assert.deepEqual(await releaseTarget(url), { ok: true, value: undefined })
    const after = await statusTarget(url)
    assert.equal(after.isOwnedByCurrentProcess, false)
    assert.equal(after.locked, false)
  })

  test('malformed stats JSON → PROTOCOL_ERROR', async () => {
    const f = await d.fakeServer(() => 'ok {not json')
    await assert.rejects(stats({ host: '127.0.0.1', port: f.port }), (e) => e instanceof LockError && e.code === 'PROTOCOL_ERROR' && /malformed JSON/.test(e.message))
    await assert.rejects(statusTarget(`dflockd://127.0.0.1:${f.port}/k`), (e) => e instanceof LockError && e.code === 'PROTOCOL_ERROR')
  })
})

describe('auth handshake', () => {
  test('auth is sent first; right token works, wrong → AuthError("authentication failed: the server refused the token sent")', async () => {
    const f = await scripted({ auth: 'sesame' })
    const ok = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]], auth: 'sesame' })
    assert.equal(await ok.acquire(), true)
    await ok.release()
    assert.match(f.received, /^auth\n_\nsesame\ne\nk\n\n/)
    const bad = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]], auth: 'nope' })
    await assert.rejects(bad.acquire(), (e) => e instanceof AuthError && e.code === 'AUTH_FAILED' && e.message === 'authentication failed: the server refused the token sent (error_auth)')
    await assert.rejects(Connection.connect({ host: '127.0.0.1', port: f.port, auth: 'nope' }), AuthError)
    await assert.rejects(stats({ host: '127.0.0.1', port: f.port, auth: 'nope' }), AuthError)
    const r = await acquireTarget(`dflockd://nope@127.0.0.1:${f.port}/k`, {}, { wait: true })
    assert.deepEqual(r, { ok: false, error: { type: 'AUTH_FAILED', message: 'authentication failed: the server refused the token sent (error_auth)' } })
    const good = await acquireTarget(`dflockd://s%65same@127.0.0.1:${f.port}/k`, {}, { wait: true })
    assert.equal(good.ok, true, 'URL-decoded token')
    await good.value.release()
  })
})

describe('Go-only replies surface as SERVER_ERROR (LIMIT_MISMATCH for a limit mismatch) with the reply word', () => {
  for (const reply of ['error_limit_mismatch', 'error_max_waiters', 'error_max_locks', 'error_not_enqueued', 'error_already_enqueued']) {
    // The one code for "taken with another limit", as a lock file's slots give it.
    const code = reply === 'error_limit_mismatch' ? 'LIMIT_MISMATCH' : 'SERVER_ERROR'
    test(reply, async () => {
      const f = await d.fakeServer(() => reply)
      const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]] })
      await assert.rejects(l.acquire(), (e) => e instanceof LockError && e.code === code && e.reply === reply)
      await assert.rejects(l.enqueue(), (e) => e instanceof LockError && e.code === code && e.reply === reply)
      const r = await acquireTarget(`dflockd://127.0.0.1:${f.port}/k`, {}, { wait: true })
      assert.equal(r.error.type, code)
      assert.equal(r.error.reply, reply)
    })
  }
  test('error_lease_expired from w → SERVER_ERROR, never true', async () => {
    const f = await d.fakeServer(([cmd]) => (cmd === 'e' ? 'queued' : cmd === 'w' ? 'error_lease_expired' : 'error'))
    const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]] })
    assert.equal(await l.enqueue(), 'queued')
    await assert.rejects(l.wait(1), (e) => e instanceof LockError && e.code === 'SERVER_ERROR' && e.reply === 'error_lease_expired')
    assert.equal(l.token, null)
    const c = await Connection.connect({ host: '127.0.0.1', port: f.port })
    await assert.rejects(c.waitForLock('k', 0), (e) => e.code === 'SERVER_ERROR' && e.reply === 'error_lease_expired')
    c.close()
  })
})

describe('wire format', () => {
  test('lock and semaphore requests carry timeout, limit and TTL as the protocol says', async () => {
    const f = await scripted({ extra: ([cmd]) => (cmd === 'se' ? 'queued' : cmd === 'sw' ? 'timeout' : cmd === 'e' ? `acquired ${TOKEN} 9` : undefined) })
    const c = await Connection.connect({ host: '127.0.0.1', port: f.port })
    const g = await c.acquire('lk', 5, 20)
    assert.equal(g.lease, 20)
    assert.equal(await c.renew('lk', g.token, 20), 20)
    await c.release('lk', g.token)
    const s1 = await c.semAcquire('sk', 3, 4, 15)
    assert.equal(await c.semRenew('sk', s1.token), 33)
    await c.semRelease('sk', s1.token)
    assert.deepEqual(await c.semEnqueue('sk', 4, 15), { status: 'queued', token: null, lease: null })
    await assert.rejects(c.semWaitForLock('sk', 2), AcquireTimeoutError)
    assert.deepEqual(await c.enqueue('ek'), { status: 'acquired', token: TOKEN, lease: 9 })
    c.close()
    assert.equal(
      f.received,
      [
        'l\nlk\n5 20\n',
        `n\nlk\n${g.token} 20\n`,
        `r\nlk\n${g.token}\n`,
        'sl\nsk\n3 4 15\n',
        `sn\nsk\n${s1.token}\n`,
        `sr\nsk\n${s1.token}\n`,
        'se\nsk\n4 15\n',
        'sw\nsk\n2\n',
        'e\nek\n\n',
      ].join(''),
    )
  })

  test('DistributedSemaphore sends se with its limit and TTL; DistributedLock sends e (then sw/w with the timeout when queued)', async () => {
    const f = await scripted()
    const sem = new DistributedSemaphore({ key: 'pool', limit: 5, servers: [['127.0.0.1', f.port]], leaseTtlS: 12, acquireTimeoutS: 3 })
    assert.equal(await sem.acquire(), true)
    assert.equal(sem.lease, 12)
    await sem.release()
    const l = new DistributedLock({ key: 'one', servers: [['127.0.0.1', f.port]], leaseTtlS: 12, acquireTimeoutS: 3 })
    assert.equal(await l.acquire(), true)
    await l.release()
    const holder = new DistributedLock({ key: 'held', servers: [['127.0.0.1', f.port]] })
    assert.equal(await holder.acquire(), true)
    const waiter = new DistributedLock({ key: 'held', servers: [['127.0.0.1', f.port]], leaseTtlS: 12, acquireTimeoutS: 3 })
    assert.equal(await waiter.acquire(), false)
    holder.close()
    assert.match(f.received, /^se\npool\n5 12\nsr\npool\n[0-9]{32}\ne\none\n12\nr\none\n[0-9]{32}\ne\nheld\n\ne\nheld\n12\nw\nheld\n3\n$/)
  })

  test('target ?limit= and timeout rounding reach the wire', async () => {
    const f = await scripted()
    const r = await acquireTarget(`dflockd://127.0.0.1:${f.port}/pool?limit=3&leaseTtl=8`, { timeout: 1500 }, { wait: true })
    assert.equal(r.ok, true)
    // Queued behind itself (the fake has no queue): the wait carries the ceiling of what is left of 1500 ms.
    const q = await acquireTarget(`dflockd://127.0.0.1:${f.port}/pool?limit=3&leaseTtl=8`, { timeout: 1500 }, { wait: true })
    assert.equal(q.error.type, 'TIMEOUT')
    await r.value.release()
    const t = await acquireTarget(`dflockd://127.0.0.1:${f.port}/one`, { timeout: 99999, leaseTtl: 4 }, { wait: false })
    await t.value.release()
    assert.match(f.received, /^se\npool\n3 8\nse\npool\n3 8\nsw\npool\n2\nsr\npool\n[0-9]{32}\nl\none\n0 4\nr\none\n[0-9]{32}\n$/)
  })
})

describe('DistributedLock keeps its connection between acquisitions', () => {
  test('acquire/release rounds and enqueue reuse one connection; close() drops it', async () => {
    // No key table: the fake does not release on disconnect, and close() below drops a held lock.
    let m = 0
    const f = await scripted({ extra: ([cmd]) => (cmd === 'e' ? `acquired ${String(++m).padStart(32, '0')} 20` : cmd === 'r' ? 'ok' : undefined) })
    const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]], leaseTtlS: 20 })
    for (let i = 0; i < 3; i++) {
      assert.equal(await l.acquire(), true)
      await l.release()
    }
    assert.equal(await l.enqueue(), 'acquired')
    assert.equal(f.connections, 1)
    l.close() // drops the enqueue's held connection (the fake keeps no queue state)
    assert.equal(await l.acquire(), true, 'after close() a new connection')
    await l.release()
    assert.equal(f.connections, 2)
    l.close()
    await u.until(() => f.open === 0, { timeoutMs: 3000, what: 'the kept connection closed by close()' })
    assert.match(f.received, /^e\nk\n20\nr\nk\n0+1\ne\nk\n20\nr\nk\n0+2\ne\nk\n20\nr\nk\n0+3\ne\nk\n20\ne\nk\n20\nr\nk\n0+5\n$/)
  })

  test('a kept connection the server ends while idle is replaced quietly (no loss reported)', async () => {
    for (const line of ['error', undefined]) {
      const f = await scripted()
      let lost = 0
      const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]], onLockLost: () => lost++ })
      assert.equal(await l.acquire(), true)
      await l.release()
      f.hangUp(line) // as the server's idle timeout: `error` then close (or a plain reset)
      await u.until(() => f.open === 0, { timeoutMs: 3000, what: 'the server dropped the idle connection' })
      // Stays a sleep: nothing outside the native reader shows that the client has read the close.
      await new Promise((r) => setTimeout(r, 50))
      assert.equal(await l.acquire(), true, `acquire after the server ended the idle connection (${line ?? 'reset'})`)
      assert.equal(l.signal.aborted, false)
      await l.release()
      l.close()
      assert.equal(f.connections, 2)
      assert.equal(lost, 0)
    }
  })

  test('a release the server refuses, or another server, opens a new connection', async () => {
    let refuse = true
    const f = await scripted({ extra: ([cmd]) => (cmd === 'e' ? `acquired ${TOKEN} 33` : cmd === 'r' ? (refuse ? 'error' : 'ok') : undefined) })
    const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]] })
    assert.equal(await l.acquire(), true)
    await l.release() // best effort: no throw, but the connection is not kept
    refuse = false
    assert.equal(await l.acquire(), true)
    l.close()
    assert.equal(f.connections, 2)

    const g = await scripted()
    let idx = 0
    const two = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port], ['127.0.0.1', g.port]], shardingStrategy: () => idx })
    assert.equal(await two.acquire(), true)
    await two.release()
    idx = 1
    assert.equal(await two.acquire(), true)
    await two.release()
    two.close()
    assert.equal(f.connections, 3)
    assert.equal(g.connections, 1)
  })
})

describe('loss reasons reach signal.reason and the target Lock', () => {
  test('the server hanging up on a held lock names the cause', async () => {
    const f = await scripted()
    const seen = []
    const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]], onLockLost: (...args) => seen.push(args) })
    assert.equal(await l.acquire(), true)
    const token = l.token
    f.hangUp()
    await new Promise((resolve) => l.signal.addEventListener('abort', resolve, { once: true }))
    assert.equal(l.signal.reason.code, 'LOCK_LOST')
    assert.match(l.signal.reason.message, /^lock 'k' lost: server 127\.0\.0\.1:\d+ closed the connection$/)
    assert.deepEqual(seen, [['k', token]], 'onLockLost keeps its (key, token) signature')
    l.close()

    const g = await scripted()
    const r = await acquireTarget(`dflockd://127.0.0.1:${g.port}/t`, {}, { wait: true })
    assert.equal(r.ok, true)
    g.hangUp('error')
    await new Promise((resolve) => r.value.signal.addEventListener('abort', resolve, { once: true }))
    assert.equal(r.value.signal.reason.code, 'LOCK_LOST')
    assert.match(r.value.signal.reason.message, /^dflockd lock 't' on 127\.0\.0\.1:\d+ lost: server 127\.0\.0\.1:\d+ sent an unsolicited reply: error \(a dflockd server writes `error` and closes a connection that sent nothing for its --read-timeout/)
  })
})

describe('wait() argument checks', () => {
  test('a bad wait() timeout is refused without sending `w` and leaves the enqueue pending', async () => {
    const f = await d.fakeServer(([cmd]) => (cmd === 'e' ? 'queued' : cmd === 'w' ? 'timeout' : 'error'))
    const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', f.port]] })
    assert.equal(await l.enqueue(), 'queued')
    // Fractions are valid (the server gets the ceiling, the client cuts at the deadline); these are not.
    for (const t of [2e9, Infinity, -1, NaN, '1']) {
      await assert.rejects(l.wait(t), (e) => e instanceof LockError && e.code === 'INVALID_ARGUMENT', String(t))
    }
    assert.equal(await l.wait(0), false, 'still enqueued: the real wait is sent')
    assert.equal(f.received, 'e\nk\n\nw\nk\n0\n')
    l.close()
  })
})
