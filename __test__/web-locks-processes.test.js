'use strict'
// Web Locks across processes (real child processes, __test__/helpers/web-locks-holder.js), on a lock directory and
// on the real Go dflockd server: `ifAvailable` while another process holds, `query()` seeing another process's held
// and pending requests, and `steal` from another process (files: the holder's request rejects with an AbortError;
// dflockd: refused, the holder keeps it).

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const os = require('node:os')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { createLockManager } = require('..')

let n = 0
const uniqueName = (label) => `proc-${process.pid}-${++n}-${label}`

/** A child holding (or, behind another, waiting for) `name`; resolves once it says `held` when `wait` is true. */
async function holder(base, name, { wait = true, steal = false, mode = 'exclusive' } = {}) {
  const child = u.spawnNode('web-locks-holder.js', [base, name, mode, ...(steal ? ['steal'] : [])])
  const out = u.lines(child)
  if (wait) await out.next(/^held$/, 15000)
  return { child, out }
}

/** query() until `pred(snapshot)` holds (another process's request is seen only once it reached the backend). */
async function queryUntil(locks, pred, what) {
  let s
  for (let i = 0; i < 400; i++) {
    s = await locks.query()
    if (pred(s)) return s
    await new Promise((r) => setTimeout(r, 25))
  }
  assert.fail(`${what}: not seen in query() within 400 tries; last ${JSON.stringify(s)}`)
}

const named = (list, name) => list.filter((l) => l.name === name)

function suite(ctx) {
  test('ifAvailable while another process holds: the callback gets null; once it exits, the lock is granted', async () => {
    const name = uniqueName('ifavail')
    const { child } = await holder(ctx.base, name)
    assert.equal(await ctx.locks.request(name, { ifAvailable: true }, (lock) => lock), null)
    child.kill('SIGKILL')
    await child.exited
    // The dead holder is reclaimed at once (files: its pid is gone; dflockd: its connection closed).
    const got = await ctx.locks.request(name, async (lock) => lock && lock.name)
    assert.equal(got, name)
  })

  test("query() lists another process's held request and a third process's pending one", async () => {
    const name = uniqueName('query')
    const a = await holder(ctx.base, name)
    const b = await holder(ctx.base, name, { wait: false })
    try {
      const s = await queryUntil(ctx.locks, (x) => named(x.pending, name).length === 1, "the second child's request")
      const held = named(s.held, name)
      assert.equal(held.length, 1, JSON.stringify(s))
      assert.equal(held[0].mode, 'exclusive')
      if (ctx.kind === 'file') {
        assert.equal(held[0].pid, a.child.pid)
        assert.equal(held[0].host, os.hostname())
        assert.match(held[0].clientId, /^[0-9a-f-]{36}$/)
      } else {
        // dflockd's stats do not say who holds or waits.
        assert.equal(held[0].pid, undefined)
        assert.equal(held[0].clientId, undefined)
      }
      // This process's own requests appear beside them, with its pid and clientId.
      const mine = await ctx.locks.request(uniqueName('own'), async (lock) => named((await ctx.locks.query()).held, lock.name))
      assert.equal(mine.length, 1)
      assert.equal(mine[0].pid, process.pid)
      if (ctx.kind === 'file') assert.notEqual(mine[0].clientId, held[0].clientId)
      // When the holder dies, the waiting process gets it, and query() says so.
      a.child.kill('SIGKILL')
      await b.out.next(/^held$/, 15000)
      const after = await queryUntil(ctx.locks, (x) => named(x.pending, name).length === 0 && named(x.held, name).length === 1, 'the hand-over')
      if (ctx.kind === 'file') assert.equal(named(after.held, name)[0].pid, b.child.pid)
    } finally {
      a.child.kill('SIGKILL')
      b.child.kill('SIGKILL')
      await Promise.all([a.child.exited, b.child.exited])
    }
  })

  test('shared holders in two other processes: a shared request is granted beside them, an exclusive one is not', async (t) => {
    const probe = await ctx.locks.request(uniqueName('probe'), { mode: 'shared' }, () => null).catch((e) => e)
    if (probe && probe.code === 'INVALID_ARGUMENT' && /'mode'/.test(probe.message)) {
      t.skip(`shared locks refused by this backend: ${probe.message}`)
      return
    }
    assert.equal(probe, null)
    const name = uniqueName('shared')
    const a = await holder(ctx.base, name, { mode: 'shared' })
    const b = await holder(ctx.base, name, { mode: 'shared' })
    try {
      assert.equal(await ctx.locks.request(name, { ifAvailable: true }, (lock) => lock), null)
      const s = await ctx.locks.request(name, { mode: 'shared', ifAvailable: true }, async (lock) => {
        assert.equal(lock && lock.mode, 'shared')
        return ctx.locks.query()
      })
      assert.deepEqual(named(s.held, name).map((h) => h.mode), ['shared', 'shared', 'shared'], JSON.stringify(s))
      if (ctx.kind === 'file') assert.deepEqual(named(s.held, name).slice(1).map((h) => h.pid).sort(), [a.child.pid, b.child.pid].sort())
    } finally {
      a.child.kill('SIGKILL')
      b.child.kill('SIGKILL')
      await Promise.all([a.child.exited, b.child.exited])
    }
    // Both readers crashed: the exclusive request is granted.
    assert.equal(await ctx.locks.request(name, (lock) => lock.mode), 'exclusive')
  })

  if (ctx.kind === 'file') {
    test("steal from another process: granted here at once; the holder's request rejects with an AbortError", async () => {
      const name = uniqueName('steal')
      const { child, out } = await holder(ctx.base, name)
      const t0 = Date.now()
      const r = await ctx.locks.request(name, { steal: true }, async (lock) => {
        const told = await out.next(/^rejected /, 15000)
        return { lock: lock && lock.name, told, ms: Date.now() - t0 }
      })
      assert.equal(r.lock, name)
      assert.equal(r.told, 'rejected AbortError')
      console.log(`# the other process heard of the steal after ${r.ms} ms`)
      const { code } = await u.waitExit(child, 15000, 'holder')
      assert.equal(code, 0)
    })

    test('a steal from another process takes the lock from this process: its request rejects with an AbortError', async () => {
      const name = uniqueName('stolen-here')
      let granted
      const held = new Promise((r) => {
        granted = r
      })
      const mine = ctx.locks.request(name, () => {
        granted()
        return new Promise(() => {})
      })
      await held
      const { child, out } = await holder(ctx.base, name, { wait: false, steal: true })
      await out.next(/^held$/, 15000)
      await assert.rejects(mine, (e) => {
        assert.equal(e.name, 'AbortError')
        assert.ok(e instanceof DOMException)
        assert.equal(e.cause?.code, 'LOCK_LOST')
        return true
      })
      child.kill('SIGKILL')
      await child.exited
    })
  } else {
    test('steal on dflockd is refused (NotSupportedError); the other process keeps the lock', async () => {
      const name = uniqueName('steal')
      const { child } = await holder(ctx.base, name)
      try {
        await assert.rejects(ctx.locks.request(name, { steal: true }, () => assert.fail('granted')), { name: 'NotSupportedError' })
        assert.equal(named((await ctx.locks.query()).held, name).length, 1)
        assert.equal(child.exitCode, null)
      } finally {
        child.kill('SIGKILL')
        await child.exited
      }
    })
  }
}

describe('Web Locks across processes, on a lock directory', () => {
  const ctx = { kind: 'file' }
  before(() => {
    ctx.base = u.mkTmp('web-locks-proc-')
    ctx.locks = createLockManager(ctx.base)
  })
  after(() => {
    u.killAll()
    u.rmTmp(ctx.base)
  })
  suite(ctx)
})

describe('Web Locks across processes, on dflockd', { skip: d.goOnly() }, () => {
  const ctx = { kind: 'dflockd' }
  before(async () => {
    const s = await d.startServer()
    ctx.base = `dflockd://127.0.0.1:${s.port}/procs`
    ctx.locks = createLockManager(ctx.base)
  })
  after(async () => {
    u.killAll()
    await d.stopAll()
  })
  suite(ctx)
})
