'use strict'
// Web Locks across processes (real child processes, __test__/helpers/web-locks-holder.js), on a lock directory and
// on the real Go dflockd server: `ifAvailable` while another process holds, `query()` seeing another process's held
// and pending requests, and `steal` from another process (the holder's request rejects with an AbortError; the
// stealer's callback runs at once; a process queued before the steal gets the lock after the stealer).

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const os = require('node:os')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const wl = require('./helpers/web-locks')
const { createLockManager } = require('..')

let n = 0
const uniqueName = (label) => `proc-${process.pid}-${++n}-${label}`

/** query() until `pred(snapshot)` holds (another process's request is seen only once it reached the backend). */
function queryUntil(locks, pred, what) {
  return u.until(async () => {
    const s = await locks.query()
    return pred(s) && s
  }, { intervalMs: 25, what: `${what} in query()`, last: () => locks.query() })
}

const named = (list, name) => list.filter((l) => l.name === name)

function suite(ctx) {
  test('ifAvailable while another process holds: the callback gets null; once it exits, the lock is granted', async () => {
    const name = uniqueName('ifavail')
    const a = await wl.holder(ctx.base, name)
    assert.equal(await ctx.locks.request(name, { ifAvailable: true }, (lock) => lock), null)
    await a.kill()
    // The dead holder is reclaimed at once (files: its pid is gone; dflockd: its connection closed).
    const got = await ctx.locks.request(name, async (lock) => lock && lock.name)
    assert.equal(got, name)
  })

  test("query() lists another process's held request and a third process's pending one", async () => {
    const name = uniqueName('query')
    const a = await wl.holder(ctx.base, name)
    const b = wl.spawnHolder(ctx.base, name)
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
      a.kill()
      await b.held
      const after = await queryUntil(ctx.locks, (x) => named(x.pending, name).length === 0 && named(x.held, name).length === 1, 'the hand-over')
      if (ctx.kind === 'file') assert.equal(named(after.held, name)[0].pid, b.child.pid)
    } finally {
      await Promise.all([a.kill(), b.kill()])
    }
  })

  test('shared holders in two other processes: a shared request is granted beside them, an exclusive one is not', async () => {
    const name = uniqueName('shared')
    const a = await wl.holder(ctx.base, name, { mode: 'shared' })
    const b = await wl.holder(ctx.base, name, { mode: 'shared' })
    try {
      assert.equal(await ctx.locks.request(name, { ifAvailable: true }, (lock) => lock), null)
      const s = await ctx.locks.request(name, { mode: 'shared', ifAvailable: true }, async (lock) => {
        assert.equal(lock && lock.mode, 'shared')
        return ctx.locks.query()
      })
      assert.deepEqual(named(s.held, name).map((h) => h.mode), ['shared', 'shared', 'shared'], JSON.stringify(s))
      if (ctx.kind === 'file') assert.deepEqual(named(s.held, name).slice(1).map((h) => h.pid).sort(), [a.child.pid, b.child.pid].sort())
    } finally {
      await Promise.all([a.kill(), b.kill()])
    }
    // Both readers crashed: the exclusive request is granted.
    assert.equal(await ctx.locks.request(name, (lock) => lock.mode), 'exclusive')
  })

  test("steal from another process: granted here at once; the holder's request rejects with an AbortError", async () => {
    const name = uniqueName('steal')
    const { child, out } = await wl.holder(ctx.base, name)
    const t0 = Date.now()
    const r = await ctx.locks.request(name, { steal: true }, async (lock) => {
      const ms = Date.now() - t0
      const told = await out.next(/^rejected /, 15000)
      return { lock: lock && lock.name, told, ms }
    })
    assert.equal(r.lock, name)
    assert.equal(r.told, 'rejected AbortError')
    console.log(`# ${ctx.kind}: the stealer's callback ran ${r.ms} ms after the request`)
    // dflockd: the holder kept the lock on its connection for us until our release; then it exits on its own.
    const { code } = await u.waitExit(child, 15000, 'holder')
    assert.equal(code, 0)
    assert.equal(await ctx.locks.request(name, { ifAvailable: true }, (lock) => lock && lock.name), name)
  })

  test('a steal from another process takes the lock from this process: its request rejects with an AbortError', async () => {
    const name = uniqueName('stolen-here')
    let granted
    const held = new Promise((r) => {
      granted = r
    })
    const request = ctx.locks.request(name, () => {
      granted()
      return new Promise(() => {})
    })
    // Observed now: on dflockd it rejects before the stealer's callback runs (before the child says held).
    const mine = request.then(
      () => assert.fail('the stolen request resolved'),
      (e) => Promise.reject(e),
    )
    mine.catch(() => {})
    await held
    const stealer = wl.spawnHolder(ctx.base, name, { steal: true })
    await stealer.held
    await assert.rejects(mine, (e) => {
      assert.equal(e.name, 'AbortError')
      assert.ok(e instanceof DOMException)
      if (ctx.kind === 'file') assert.equal(e.cause?.code, 'LOCK_LOST')
      return true
    })
    await stealer.kill()
    // The stealer died holding it: the lock is free again (dflockd: this process, which kept it for the stealer,
    // released it when the stealer's intent went with its connection).
    assert.equal(await ctx.locks.request(name, (lock) => lock.name), name)
  })

  test('a process that used a LockManager exits on its own (no idle lock or mailbox keeps it alive)', async () => {
    const name = uniqueName('once')
    const child = u.spawnNode('web-locks-once.js', [ctx.base, name])
    const out = u.lines(child)
    assert.equal(await out.next(/^(done|failed) /, 15000), `done ${name}`)
    const { code } = await u.waitExit(child, 15000, 'a LockManager user')
    assert.equal(code, 0)
  })

  if (ctx.kind === 'dflockd') {
    // On a directory the steal is a forced release, and a process waiting in the engine's line may be granted in
    // between and then forced out too (docs/lock-kinds.md#steal): the order is kept on dflockd only.
    test('steal keeps the order of the queue: a process queued before the steal gets the lock right after the stealer', async () => {
      const name = uniqueName('steal-order')
      const a = await wl.holder(ctx.base, name)
      const c = wl.spawnHolder(ctx.base, name, { timeoutMs: 60000 })
      try {
        await queryUntil(ctx.locks, (x) => named(x.pending, name).length === 1, "the third process's request")
        let cHeld = false
        const cGot = c.held.then(() => {
          cHeld = true
        })
        await ctx.locks.request(name, { steal: true }, async () => {
          assert.equal(await a.out.next(/^rejected /, 15000), 'rejected AbortError')
          // The third process is still queued while the stealer holds (its request was queued before the steal).
          const s = await ctx.locks.query()
          assert.equal(named(s.pending, name).length, 1, JSON.stringify(s))
          assert.equal(cHeld, false)
        })
        // Released by the stealer: the third process gets it.
        await cGot
      } finally {
        await Promise.all([a.kill(), c.kill()])
      }
    })

    test('the process a lock was stolen from dies while the stealer holds it: the stealer loses it (AbortError)', async () => {
      const name = uniqueName('steal-then-die')
      const a = await wl.holder(ctx.base, name)
      let inside
      const request = ctx.locks.request(name, { steal: true }, async () => {
        assert.equal(await a.out.next(/^rejected /, 15000), 'rejected AbortError')
        // The old holder keeps the lock on its connection for us: killing it ends that lease.
        a.kill()
        inside = 'killed'
        return new Promise(() => {})
      })
      await assert.rejects(request, (e) => {
        assert.equal(e.name, 'AbortError')
        assert.equal(e.cause?.code, 'LOCK_LOST')
        return true
      })
      assert.equal(inside, 'killed')
      await a.child.exited
      assert.equal(await ctx.locks.request(name, (lock) => lock.name), name)
    })

    test('steal of a name held in shared mode by other processes: NotSupportedError at once; the readers keep it', async () => {
      const name = uniqueName('steal-shared')
      const a = await wl.holder(ctx.base, name, { mode: 'shared' })
      try {
        await assert.rejects(ctx.locks.request(name, { steal: true }, () => assert.fail('granted')), (e) => {
          assert.equal(e.name, 'NotSupportedError')
          assert.match(e.message, /shared mode/)
          return true
        })
        assert.deepEqual(named((await ctx.locks.query()).held, name).map((h) => h.mode), ['shared'])
        assert.equal(a.child.exitCode, null)
      } finally {
        await a.kill()
      }
    })

    /** A steal from a child holder on a server started with `args`, through `base(port)`. */
    async function stealOn(args, base, label) {
      const s = await d.startServer({ args })
      const b = base(s.port)
      const locks = createLockManager(b)
      const name = uniqueName(label)
      const a = await wl.holder(b, name)
      try {
        const got = await locks.request(name, { steal: true }, async (lock) => {
          assert.equal(await a.out.next(/^rejected /, 15000), 'rejected AbortError')
          return lock.name
        })
        assert.equal(got, name)
        assert.equal((await u.waitExit(a.child, 15000, 'holder')).code, 0)
      } finally {
        await a.kill()
        await s.stop()
      }
    }

    test('steal on a server that wants an auth token (the hand-over connections authenticate too)', async () => {
      await stealOn(['--auth-token', 'steal-secret'], (port) => `dflockd://steal-secret@127.0.0.1:${port}/auth`, 'steal-auth')
    })

    const self = d.makeSelfSigned()
    test('steal on a TLS server (the hand-over connections verify it with the base\'s ca=)', { skip: self.skip || false }, async () => {
      const ca = encodeURIComponent(self.certFile)
      await stealOn(['--tls-cert', self.certFile, '--tls-key', self.keyFile], (port) => `dflockd://127.0.0.1:${port}/tls?ca=${ca}`, 'steal-tls')
    })

    test('a script that only steals (nothing else keeps it alive) runs its callback, releases and exits 0', async () => {
      const name = uniqueName('steal-alone')
      const a = await wl.holder(ctx.base, name)
      try {
        const child = u.spawnNode('web-locks-stealer.js', [ctx.base, name])
        const { code, stdout } = await u.waitExit(child, 15000, 'stealer')
        assert.equal(stdout, 'held\nunblocked\nresolved 42\n')
        assert.equal(code, 0)
        assert.equal(await a.out.next(/^rejected /, 15000), 'rejected AbortError')
        // Released by the stealer: the lock is free.
        assert.equal(await ctx.locks.request(name, { ifAvailable: true }, (lock) => lock && lock.name), name)
      } finally {
        await a.kill()
      }
    })

    test("a stealer whose event loop is blocked past the server's read timeout keeps the lock: no waiter gets it meanwhile", async () => {
      // The keys the stolen lock depends on (the stealer's intent, the holder's confirmation) are native locks,
      // renewed off the JS thread: a blocked event loop loses nothing. Read timeout 5 s, leases of 9 s (the shortest
      // a hand-over takes; renewed every 4.5 s), the stealer's callback blocks 8 s.
      const s = await d.startServer({ args: ['--read-timeout', '5'] })
      const b = `dflockd://127.0.0.1:${s.port}/blocked?leaseTtl=9`
      const name = uniqueName('steal-blocked')
      const a = await wl.holder(b, name)
      let w
      let st
      try {
        st = u.spawnNode('web-locks-stealer.js', [b, name, '8000', 'alive'])
        const out = u.lines(st)
        await out.next(/^held$/, 15000)
        assert.equal(await a.out.next(/^rejected /, 15000), 'rejected AbortError')
        // Queued behind the stealer at the server: granted only once the stealer's callback has returned.
        w = wl.spawnHolder(b, name, { timeoutMs: 60000 })
        // What the stealer had said when the waiter said `held` (read in the turn its line arrives).
        let stealerSaid
        await w.held.then(() => (stealerSaid = [...st.lineLog]))
        assert.ok(stealerSaid.includes('unblocked'), `a waiter got the lock while the stealer's callback ran: ${JSON.stringify(stealerSaid)}`)
        const { code, stdout } = await u.waitExit(st, 15000, 'stealer')
        assert.equal(stdout, 'held\nunblocked\nresolved 42\n')
        assert.equal(code, 0)
      } finally {
        if (st) u.signalChild(st)
        await Promise.all([a.kill(), w?.kill(), st?.exited])
        await s.stop()
      }
    })

    test('a holder killed on a server that keeps leases after a disconnect: the stealer loses the lock before any waiter gets it', async () => {
      // --auto-release-on-disconnect=false: the killed holder's lease on the name runs out (9 s, renewed every 4.5 s:
      // it lives ≥ 4.5 s after the kill); its confirmation, whose lease is a third of it (3 s, renewed every 1.5 s),
      // ends first, and the stealer hears of it then.
      const s = await d.startServer({ args: ['--auto-release-on-disconnect=false'] })
      const b = `dflockd://127.0.0.1:${s.port}/kept?leaseTtl=9`
      const locks = createLockManager(b)
      const name = uniqueName('steal-kept')
      const a = await wl.holder(b, name)
      let w
      try {
        let lost = false
        let lostThen
        let wHeld
        const request = locks.request(name, { steal: true }, async () => {
          assert.equal(await a.out.next(/^rejected /, 15000), 'rejected AbortError')
          w = wl.spawnHolder(b, name, { timeoutMs: 60000 })
          // Whether the stealer had heard of its loss when the waiter said `held` (read in the turn its line arrives).
          wHeld = w.held.then(() => (lostThen = lost))
          await queryUntil(locks, (x) => named(x.pending, name).length === 1, 'the waiting process')
          a.kill()
          return new Promise(() => {})
        })
        const rejected = assert.rejects(request, (e) => {
          assert.equal(e.name, 'AbortError')
          assert.equal(e.cause?.code, 'LOCK_LOST')
          lost = true
          return true
        })
        await rejected
        await wHeld
        assert.equal(lostThen, true, 'the waiter got the lock before the stealer heard it was lost')
      } finally {
        await Promise.all([a.kill(), w?.kill()])
        await s.stop()
      }
    })

    test("the steal machinery's keys: a client's mailbox is made once; grants create no new keys", async () => {
      const { stats } = require('..')
      const keys = async () => {
        const s = await stats({ host: '127.0.0.1', port: ctx.port })
        return new Set([...s.locks, ...s.idle_locks, ...s.semaphores, ...s.idle_semaphores].map((l) => l.key))
      }
      const name = uniqueName('budget')
      await ctx.locks.request(name, () => {})
      // The mailbox is opened in the background once this client holds a lock: the snapshot is taken when it is there.
      // (Held mailbox keys: this process's; other tests' children are gone, their keys idle.)
      const before = await u.until(async () => {
        const s = await stats({ host: '127.0.0.1', port: ctx.port })
        const seen = await keys()
        return s.locks.filter((l) => /wl~mbox~/.test(l.key) && Number(l.owner_conn_id) !== 0).length >= 2 && seen
      }, { intervalMs: 25, what: 'the mailbox held' })
      for (let i = 0; i < 20; i++) await ctx.locks.request(name, () => {})
      const after = await keys()
      const added = [...after].filter((k) => !before.has(k))
      assert.deepEqual(added, [], 'no key made by 20 grants')
      assert.equal([...before].filter((k) => /wl~mbox~/.test(k)).length >= 2, true, 'the mailbox and its published token')
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
    ctx.port = s.port
    ctx.base = `dflockd://127.0.0.1:${s.port}/procs`
    ctx.locks = createLockManager(ctx.base)
  })
  after(async () => {
    u.killAll()
    await d.stopAll()
  })
  suite(ctx)
})
