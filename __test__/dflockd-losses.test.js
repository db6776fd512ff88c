'use strict'
// One loss channel per JS thread for both backends (issue #18 item 3): file locks, DistributedLock and
// acquire('dflockd://…') are told of a loss through the thread's one callback, addressed by id (lib/losses.js,
// src/losses.rs). Against real servers: the right holder hears of a loss when several are held on one thread, and a
// loss that reaches JavaScript before the grant's result is told once, after acquire() resolved. And the review
// findings of s9: a loss report that comes after the hold ended (close(), withLock) leaves no end behind that would hide
// the next hold's loss; a late report of a lost hold never reaches the acquisition that replaces it; two wait()/acquire()
// in one tick never leave the key held for nobody.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { once } = require('node:events')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const d = require('./helpers/dflockd')
const { DistributedLock, acquire } = require('..')

const skip = d.skipReason()
const pkg = path.resolve(__dirname, '..')
after(() => d.stopAll())

/** Runs `code` in a child process, synchronously (this thread stays blocked); its stdout. */
function childSync(code) {
  const r = spawnSync(process.execPath, ['-e', code], { cwd: pkg, encoding: 'utf8', timeout: 10_000 })
  if (r.status !== 0) throw new Error(`child failed: ${r.stderr || r.error}`)
  return r.stdout
}

test('a loss reaches the right holder when two DistributedLocks, a dflockd Lock and a file lock are held on one thread', { skip }, async () => {
  const a = await d.startServer()
  const b = await d.startServer()
  const told = { lockA: [], lockB: [], targetA: 0, file: 0 }
  const lockA = new DistributedLock({ key: 'channel-a', host: a.host, port: a.port, onLockLost: (_key, token) => told.lockA.push(token) })
  const lockB = new DistributedLock({ key: 'channel-b', host: b.host, port: b.port, onLockLost: (_key, token) => told.lockB.push(token) })
  assert.equal(await lockA.acquire(), true)
  assert.equal(await lockB.acquire(), true)
  const tokenA = lockA.token
  const targetA = await acquire(a.url('channel-target'), { onLost: () => told.targetA++ })
  assert.equal(targetA.ok, true, JSON.stringify(targetA.error))
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sema-losses-'))
  const file = await acquire(path.join(dir, 'held.lock'), { onLost: () => told.file++ })
  assert.equal(file.ok, true, JSON.stringify(file.error))
  try {
    const lostA = once(lockA.signal, 'abort')
    const lostTarget = once(targetA.value.signal, 'abort')
    await a.kill('SIGKILL')
    await lostA
    await lostTarget
    // One more turn of the loop for any stray report to arrive.
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(told.lockA, [tokenA], 'onLockLost once, with the lost token')
    assert.equal(lockA.signal.reason.code, 'LOCK_LOST')
    assert.equal(told.targetA, 1)
    assert.equal(targetA.value.signal.reason.code, 'LOCK_LOST')
    assert.deepEqual(told.lockB, [], 'the lock on the other server was not lost')
    assert.equal(lockB.signal.aborted, false)
    assert.notEqual(lockB.token, null)
    assert.equal(told.file, 0, 'the file lock was not lost')
    assert.equal(file.value.signal.aborted, false)
  } finally {
    await lockB.release()
    await file.value.release()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('a loss that reaches JavaScript before the grant is told once, after acquire() resolved', { skip }, async () => {
  const srv = await d.startServer()
  const events = []
  // The tokio driver: grant and loss are both read off this thread, and both wait for it while it is blocked.
  process.env.SEMA_NATIVE_DFLOCKD_DRIVER = 'tokio'
  let lock
  try {
    lock = new DistributedLock({ key: 'early-loss', host: srv.host, port: srv.port, onLockLost: () => events.push('onLockLost') })
  } finally {
    delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
  }
  const acquired = lock.acquire().then((v) => {
    events.push(`resolved ${v}`)
    return v
  })
  // Blocked here until the server has granted the key (asked from a child: this thread does no I/O meanwhile), then
  // the server is killed and the child waits until its port refuses connections: the native side reads the grant and
  // then the dropped connection while both results wait for this thread. The loss report is queued on the thread's
  // loss channel (made at load, so libuv runs it first) before the grant's own.
  childSync(`
    const { stats } = require('.')
    ;(async () => {
      for (let i = 0; i < 200; i++) {
        const st = await stats({ host: ${JSON.stringify(srv.host)}, port: ${srv.port} })
        if (st.locks.some((l) => l.key === 'early-loss' && l.owner_conn_id)) return
      }
      throw new Error('never granted')
    })()`)
  srv.proc.kill('SIGKILL')
  childSync(`
    const net = require('node:net')
    const tryOnce = () => new Promise((res) => { const s = net.connect(${srv.port}, ${JSON.stringify(srv.host)}); s.on('connect', () => { s.destroy(); res(true) }); s.on('error', () => res(false)) })
    ;(async () => { for (let i = 0; i < 500; i++) if (!(await tryOnce())) return; throw new Error('still accepting') })()`)
  assert.equal(await acquired, true, 'the grant came before the loss: acquire() resolves true')
  if (!lock.signal.aborted) await once(lock.signal, 'abort')
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(events, ['resolved true', 'onLockLost'], 'told once, after the resolution')
  assert.equal(lock.signal.reason.code, 'LOCK_LOST')
  assert.equal(lock.token, null)
  lock.close()
})

/** A DistributedLock on the driver `driver` ('tokio' or undefined: the default). */
function lockOn(driver, opts) {
  if (driver) process.env.SEMA_NATIVE_DFLOCKD_DRIVER = driver
  try {
    return new DistributedLock(opts)
  } finally {
    delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
  }
}

/** Spins (bounded, this thread blocked) until the native side has marked `lock` lost: its loss report then waits
 * queued on this thread's loss channel, not yet run. */
function lostNatively(lock) {
  const end = Date.now() + 10_000
  while (lock.token !== null && Date.now() < end) {}
  assert.equal(lock.token, null, 'the native side saw the loss')
}

/** A plain TCP relay to `srv`: `cut()` drops every connection through it (this client's only; the server lives on). */
async function relay(srv) {
  const net = require('node:net')
  const socks = new Set()
  const server = net.createServer((c) => {
    const u = net.connect(srv.port, srv.host)
    for (const s of [c, u]) {
      socks.add(s)
      s.on('error', () => {})
      s.on('close', () => socks.delete(s))
    }
    c.pipe(u)
    u.pipe(c)
    c.on('close', () => u.destroy())
    u.on('close', () => c.destroy())
  })
  await new Promise((r) => server.listen(0, '127.0.0.1', r))
  return {
    port: server.address().port,
    cut: () => {
      for (const s of socks) s.destroy()
    },
    close: () => {
      server.close()
      for (const s of socks) s.destroy()
    },
  }
}

// The tokio driver: there the loss is read off this thread while it spins, and its report waits queued on the channel
// until after the hold ended (the event-loop driver reads a loss on this thread's loop, which the spin blocks).
for (const variant of ['close()', 'withLock']) {
  const driver = 'tokio'
  test(`a loss report that comes after ${variant} ended the hold leaves nothing behind: the next hold's loss is told (tokio driver)`, { skip, timeout: 20_000 }, async () => {
    const srv = await d.startServer()
    const told = []
    const lock = lockOn(driver, { key: 'stale-end', host: srv.host, port: srv.port, onLockLost: (_k, t) => told.push(t) })
    if (variant === 'close()') {
      assert.equal(await lock.acquire(), true)
      srv.proc.kill('SIGKILL')
      lostNatively(lock)
      lock.close() // same tick: hold #1's report is still queued, and nobody watches any more when it runs
    } else {
      await assert.rejects(
        lock.withLock(() => {
          srv.proc.kill('SIGKILL')
          lostNatively(lock)
        }),
        { code: 'LOCK_LOST' },
      )
    }
    // The server comes back (a restart takes far longer than the queued report takes to run).
    await srv.restart()
    const told1 = told.length
    assert.equal(await lock.acquire(), true)
    const token2 = lock.token
    const signal = lock.signal
    await srv.kill('SIGKILL')
    if (!signal.aborted) await once(signal, 'abort')
    assert.equal(signal.reason.code, 'LOCK_LOST')
    await new Promise((r) => setImmediate(r))
    assert.deepEqual(told.slice(told1), [token2], "hold #2's loss told once, with its token")
    lock.close()
  })
}

test('a late loss report of hold #1 never reaches acquisition #2 started in the same tick (tokio driver, 30 rounds)', { skip, timeout: 120_000 }, async () => {
  const srv = await d.startServer()
  const r = await relay(srv)
  const told = []
  const lock = lockOn('tokio', { key: 'late-loss', host: '127.0.0.1', port: r.port, onLockLost: (_k, t) => told.push(t) })
  const wrong = []
  try {
    for (let i = 0; i < 30; i++) {
      told.length = 0
      assert.equal(await lock.acquire(), true)
      const t1 = lock.token
      r.cut()
      lostNatively(lock)
      const p2 = lock.acquire() // same tick: #1's report is still queued
      const signal = lock.signal
      assert.equal(await p2, true)
      const t2 = lock.token
      // #1's report has run once a loss report made after it has (one channel, in order): cut #2 and wait for it.
      r.cut()
      if (!signal.aborted) await once(signal, 'abort')
      await new Promise((res) => setImmediate(res))
      if (told.includes(t1) || told.length !== 1 || told[0] !== t2) wrong.push({ i, told: told.map((t) => (t === t1 ? 't1' : t === t2 ? 't2' : t)) })
      lock.close()
    }
  } finally {
    lock.close()
    r.close()
  }
  assert.deepEqual(wrong, [], 'each round: only hold #2 told, once')
})

/** After two calls in one tick: the lock is held by `lock`, or another client can take the key (never held for nobody). */
async function keyNotOrphaned(lock, srv, key) {
  if (lock.token !== null) return
  const other = new DistributedLock({ key, host: srv.host, port: srv.port, acquireTimeoutS: 0 })
  const got = await other.acquire()
  if (got) await other.release()
  assert.equal(got, true, 'neither call holds the key, so another client can take it')
}

test('two wait() in one tick on a queued lock: one is granted, the other refused, the key never held for nobody', { skip, timeout: 120_000 }, async () => {
  const srv = await d.startServer()
  const opts = { key: 'double-wait', host: srv.host, port: srv.port }
  const holder = new DistributedLock(opts)
  const b = new DistributedLock(opts)
  const bad = []
  for (let i = 0; i < 30; i++) {
    assert.equal(await holder.acquire(), true)
    assert.equal(await b.enqueue(), 'queued')
    const f = (e) => `rej ${e.code}`
    const w1 = b.wait(10).then((v) => `res ${v}`, f)
    const w2 = b.wait(10).then((v) => `res ${v}`, f)
    await holder.release()
    const got = [await w1, await w2].sort()
    if (got[0] !== 'rej ALREADY_LOCKED' && got[0] !== 'rej NOT_LOCKED') bad.push({ i, got })
    else if (got[1] !== 'res true') bad.push({ i, got })
    else if (b.token === null) bad.push({ i, got, held: false })
    await keyNotOrphaned(b, srv, opts.key)
    if (b.token !== null) await b.release()
    b.close()
  }
  assert.deepEqual(bad, [], 'each round: one wait() granted (the lock held), the other refused')
})

test('two acquire() in one tick after a loss: one is granted, the other refused, the key never held for nobody (tokio driver)', { skip, timeout: 120_000 }, async () => {
  const srv = await d.startServer()
  const r = await relay(srv)
  const key = 'double-acquire'
  const lock = lockOn('tokio', { key, host: '127.0.0.1', port: r.port })
  const bad = []
  try {
    for (let i = 0; i < 30; i++) {
      assert.equal(await lock.acquire(), true)
      r.cut()
      lostNatively(lock)
      const f = (e) => `rej ${e.code}`
      const a = lock.acquire().then((v) => `res ${v}`, f)
      const b = lock.acquire().then((v) => `res ${v}`, f)
      const got = [await a, await b].sort()
      if (got[0] !== 'rej ALREADY_LOCKED' || got[1] !== 'res true' || lock.token === null) bad.push({ i, got, held: lock.token !== null })
      await keyNotOrphaned(lock, srv, key)
      lock.close()
    }
  } finally {
    lock.close()
    r.close()
  }
  assert.deepEqual(bad, [], 'each round: one acquire() granted (the lock held), the other refused ALREADY_LOCKED')
})

test('two native acquire() in one tick on one primitive: the grant is kept by its call, never settled ABORTED and left held', { skip, timeout: 60_000 }, async () => {
  const native = require('../lib/native')
  const srv = await d.startServer()
  const key = 'double-native'
  const bad = []
  for (let i = 0; i < 20; i++) {
    // No event-loop driver: both calls run on tokio, and whichever starts second finds the first busy (or holding).
    const prim = new native.NativeDflockdPrimitive({ key, limit: 1, acquireTimeoutS: 5, renewRatio: 0.5, server: { host: srv.host, port: srv.port } })
    const rs = await Promise.all([prim.acquire(), prim.acquire()])
    const granted = rs.filter((r) => r.ok && r.value === true).length
    if (granted !== 1 || prim.token === null) bad.push({ i, rs: rs.map((r) => (r.ok ? r.value : r.error.code)), held: prim.token !== null })
    prim.close()
  }
  assert.deepEqual(bad, [], 'each round: one call granted, and the primitive holds it')
})
