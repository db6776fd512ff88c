'use strict'
// The Web Platform Tests for Web Locks that run outside a browser (Node's test/fixtures/wpt/web-locks: acquire,
// ifAvailable, mode-exclusive, mode-shared, mode-mixed, query, query-empty, resource-names, signal, steal), the same
// cases as node:test tests, one describe per WPT file, run against createLockManager on a lock directory and on the
// real Go dflockd server, in one process (web-locks-processes.test.js puts the holder in another process).
//
// Both backends take shared locks (no case skips for them). On dflockd, steal is the cooperative
// hand-over of lib/locks/dflockd-steal.js; a holder that cannot answer (not a LockManager) is tested below. Worker
// cases use worker_threads as the "other context".

const { describe, test, before, after, afterEach } = require('node:test')
const assert = require('node:assert/strict')
const { Worker } = require('node:worker_threads')
const path = require('node:path')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { createLockManager, acquire } = require('..')
const { stemOf } = require('../lib/locks/names')

const never = new Promise(() => {})
let counter = 0
const uniqueName = (label) => `wpt-${process.pid}-${++counter}-${label}`

function makePromiseAndResolveFunc() {
  let resolve
  const p = new Promise((r) => {
    resolve = r
  })
  return [p, resolve]
}

async function rejectsDom(p, name) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof DOMException, `expected a DOMException ${name}, got ${e}`)
    assert.equal(e.name, name)
    return true
  })
}

/** WPT's promise_rejects_exactly (not assert.rejects, which calls then() of a thenable reason). */
function rejectsExactly(p, value) {
  return p.then(
    (v) => assert.fail(`expected a rejection, got ${String(v)}`),
    (e) => assert.equal(e, value),
  )
}

const modes = (list, name) => list.filter((i) => i.name === name).map((i) => i.mode)
const clients = (list, name) => list.filter((i) => i.name === name).map((i) => i.clientId)

/** The WPT cases against one backend. `ctx.locks` is its manager, `ctx.kind` 'file' or 'dflockd'. */
function wptSuites(ctx) {
  /** WPT's requestLockAndHold: held until the test ends. */
  const holds = []
  const requestLockAndHold = (name, options = {}) => {
    const [p, release] = makePromiseAndResolveFunc()
    holds.push(release)
    return ctx.locks.request(name, options, () => p)
  }
  const releaseHolds = () => {
    for (const r of holds.splice(0)) r()
  }

  describe('acquire', () => {
    afterEach(releaseHolds)
    test('request requires a name and a callback', async () => {
      const res = uniqueName('a1')
      await assert.rejects(ctx.locks.request(), TypeError)
      await assert.rejects(ctx.locks.request(res), TypeError)
    })
    test('mode must be "shared" or "exclusive"', async () => {
      const res = uniqueName('a2')
      await assert.rejects(ctx.locks.request(res, { mode: 'foo' }, () => {}), TypeError)
      await assert.rejects(ctx.locks.request(res, { mode: null }, () => {}), TypeError)
      assert.equal(await ctx.locks.request(res, { mode: 'exclusive' }, (l) => l.mode), 'exclusive')
      assert.equal(await ctx.locks.request(res, { mode: 'shared' }, (l) => l.mode), 'shared')
    })
    test("the 'steal' and 'ifAvailable' options are mutually exclusive", async () => {
      await rejectsDom(ctx.locks.request(uniqueName('a3'), { steal: true, ifAvailable: true }, () => {}), 'NotSupportedError')
    })
    test("the 'steal' option must be used with exclusive locks", async () => {
      await rejectsDom(ctx.locks.request(uniqueName('a4'), { mode: 'shared', steal: true }, () => {}), 'NotSupportedError')
    })
    test("the 'signal' and 'steal' options are mutually exclusive", async () => {
      const c = new AbortController()
      await rejectsDom(ctx.locks.request(uniqueName('a5'), { signal: c.signal, steal: true }, () => {}), 'NotSupportedError')
    })
    test("the 'signal' and 'ifAvailable' options are mutually exclusive", async () => {
      const c = new AbortController()
      await rejectsDom(ctx.locks.request(uniqueName('a6'), { signal: c.signal, ifAvailable: true }, () => {}), 'NotSupportedError')
    })
    test('callback must be a function', async () => {
      const res = uniqueName('a7')
      for (const cb of [undefined, null, 123, 'abc', [], {}, new Promise(() => {})]) {
        await assert.rejects(ctx.locks.request(res, cb), TypeError)
      }
    })
    test("request's returned promise resolves after lock is released", async () => {
      const res = uniqueName('a8')
      let release
      const promise = new Promise((r) => {
        release = r
      })
      const returned = ctx.locks.request(res, () => promise)
      const order = []
      returned.then(() => order.push('returned'))
      promise.then(() => order.push('holding'))
      release()
      await Promise.all([returned, promise])
      assert.deepEqual(order, ['holding', 'returned'])
    })
    test('returned Promise rejects if callback throws synchronously', async () => {
      const err = { name: 'test' }
      const p = ctx.locks.request(uniqueName('a9'), () => {
        throw err
      })
      assert.equal(Promise.resolve(p), p)
      await rejectsExactly(p, err)
    })
    test('returned Promise rejects if callback throws asynchronously', async () => {
      const err = { name: 'test' }
      const p = ctx.locks.request(uniqueName('a10'), async () => {
        throw err
      })
      assert.equal(Promise.resolve(p), p)
      await rejectsExactly(p, err)
    })
    test('if callback throws a thenable, its then() is not invoked', async () => {
      let thenInvoked = false
      const err = {
        then: () => {
          thenInvoked = true
        },
      }
      const p = ctx.locks.request(uniqueName('a11'), async () => {
        throw err
      })
      await rejectsExactly(p, err)
      assert.equal(thenInvoked, false)
    })
  })

  describe('ifAvailable', () => {
    afterEach(releaseHolds)
    test('lock available', async () => {
      let called = false
      await ctx.locks.request(uniqueName('i1'), { ifAvailable: true }, async (lock) => {
        called = true
        assert.notEqual(lock, null)
      })
      assert.ok(called)
    })
    test('lock not available', async () => {
      const res = uniqueName('i2')
      let called = false
      await ctx.locks.request(res, async () => {
        const result = await ctx.locks.request(res, { ifAvailable: true }, async (lock) => {
          called = true
          assert.equal(lock, null)
          return 123
        })
        assert.equal(result, 123)
      })
      assert.ok(called)
    })
    test('lock not available, callback throws', async () => {
      const res = uniqueName('i3')
      let called = false
      await ctx.locks.request(res, async () => {
        await rejectsExactly(
          ctx.locks.request(res, { ifAvailable: true }, async (lock) => {
            called = true
            assert.equal(lock, null)
            throw 123
          }),
          123,
        )
      })
      assert.ok(called)
    })
    test('unrelated lock held', async () => {
      let called = false
      await ctx.locks.request(uniqueName('i4'), async () => {
        await ctx.locks.request(uniqueName('different'), { ifAvailable: true }, async (lock) => {
          called = true
          assert.notEqual(lock, null)
        })
      })
      assert.ok(called)
    })
    test('shared lock request with ifAvailable - shared lock held', async () => {
      const res = uniqueName('i5')
      let called = false
      await ctx.locks.request(res, { mode: 'shared' }, async () => {
        await ctx.locks.request(res, { mode: 'shared', ifAvailable: true }, async (lock) => {
          called = true
          assert.notEqual(lock, null)
        })
      })
      assert.ok(called)
    })
    test('exclusive lock request with ifAvailable - shared lock held', async () => {
      const res = uniqueName('i6')
      let called = false
      await ctx.locks.request(res, { mode: 'shared' }, async () => {
        await ctx.locks.request(res, { ifAvailable: true }, async (lock) => {
          called = true
          assert.equal(lock, null)
        })
      })
      assert.ok(called)
    })
    test('shared lock request with ifAvailable - exclusive lock held', async () => {
      const res = uniqueName('i7')
      let called = false
      await ctx.locks.request(res, async () => {
        await ctx.locks.request(res, { mode: 'shared', ifAvailable: true }, async (lock) => {
          called = true
          assert.equal(lock, null)
        })
      })
      assert.ok(called)
    })
    test('returned Promise rejects if callback throws synchronously', async () => {
      const res = uniqueName('i8')
      await ctx.locks.request(res, async () => {
        const err = { name: 'test' }
        const p = ctx.locks.request(res, { ifAvailable: true }, (lock) => {
          assert.equal(lock, null)
          throw err
        })
        assert.equal(Promise.resolve(p), p)
        await rejectsExactly(p, err)
      })
    })
    test('returned Promise rejects if async callback yields rejected promise', async () => {
      const res = uniqueName('i9')
      await ctx.locks.request(res, async () => {
        const err = { name: 'test' }
        const p = ctx.locks.request(res, { ifAvailable: true }, async (lock) => {
          assert.equal(lock, null)
          throw err
        })
        await rejectsExactly(p, err)
      })
    })
    test('locks are available once previous release is processed', async () => {
      const res1 = uniqueName('i10a')
      const res2 = uniqueName('i10b')
      let c2 = false
      let c3 = false
      await ctx.locks.request(res1, async () => {
        await ctx.locks.request(res2, async () => {
          c2 = true
        })
        await ctx.locks.request(res2, { ifAvailable: true }, async (lock) => {
          c3 = true
          assert.notEqual(lock, null)
        })
      })
      assert.ok(c2 && c3)
    })
  })

  describe('mode-exclusive', () => {
    test('lock requests are granted in order', async () => {
      const granted = []
      const log = (n) => () => granted.push(n)
      const a = uniqueName('e1')
      await Promise.all([ctx.locks.request(a, log(1)), ctx.locks.request(a, log(2)), ctx.locks.request(a, log(3))])
      assert.deepEqual(granted, [1, 2, 3])
    })
    test('requests for distinct resources can be granted', async () => {
      const granted = []
      const log = (n) => () => granted.push(n)
      const a = uniqueName('e2a')
      const b = uniqueName('e2b')
      let inner
      // The WPT case lets go of `a` at once and expects `b` first: in a browser `b` is granted with no I/O. Here each
      // grant takes the backend lock (a shared-capable dflockd writer: 2 round trips), so `a`'s holder waits for
      // `b`'s grant: the same property (a held `a` does not block `b`), without a race.
      await ctx.locks.request(a, async () => {
        let bGranted
        const seen = new Promise((r) => {
          bGranted = r
        })
        inner = Promise.all([
          ctx.locks.request(a, log(1)),
          ctx.locks.request(b, () => {
            log(2)()
            bGranted()
          }),
        ])
        await seen
      })
      await inner
      assert.deepEqual(granted, [2, 1])
    })
  })

  describe('mode-shared', () => {
    test('lock requests are granted in order', async () => {
      const granted = []
      const log = (n) => () => granted.push(n)
      const [a, b, c] = [uniqueName('s1a'), uniqueName('s1b'), uniqueName('s1c')]
      await Promise.all([a, b, c, a, b, c].map((n, i) => ctx.locks.request(n, { mode: 'shared' }, log(i + 1))))
      // A browser grants with no I/O, so the WPT case expects 1-6 across the three names. Here each grant waits for
      // its own backend lock and names do not wait for each other (a slow `a` must not hold back `b`): the order
      // holds per name, as the spec's queue orders it. (Under load the dflockd run gave 2, 3, 5, 1, 4, 6.)
      for (const [first, second] of [
        [1, 4],
        [2, 5],
        [3, 6],
      ]) {
        assert.ok(granted.indexOf(first) < granted.indexOf(second), `per-name order: ${granted}`)
      }
      assert.deepEqual([...granted].sort(), [1, 2, 3, 4, 5, 6])
    })
    test('shared locks are not exclusive', async () => {
      const a = uniqueName('s2')
      let again = false
      await ctx.locks.request(a, { mode: 'shared' }, async () => {
        await ctx.locks.request(a, { mode: 'shared' }, () => {
          again = true
        })
      })
      assert.ok(again)
    })
  })

  describe('mode-mixed', () => {
    afterEach(releaseHolds)
    test('lock requests are granted in order', async () => {
      const a = uniqueName('m1a')
      const b = uniqueName('m1b')
      let unblock
      const blocked = new Promise((r) => {
        unblock = r
      })
      const granted = []
      for (const i of [1, 2, 3]) {
        ctx.locks.request(a, { mode: 'shared' }, async () => {
          granted.push(`a-shared-${i}`)
          await blocked
        })
      }
      let exclusiveLock
      const exclusive = ctx.locks.request(a, async (lock) => {
        granted.push('a-exclusive')
        exclusiveLock = lock
      })
      // The shared grants need the backend first (asynchronous): wait for them as the browser's queue would have.
      while (granted.length < 3) await new Promise((r) => setImmediate(r))
      await ctx.locks.request(b, { mode: 'exclusive' }, () => {
        granted.push('b-exclusive')
      })
      assert.deepEqual(granted, ['a-shared-1', 'a-shared-2', 'a-shared-3', 'b-exclusive'])
      unblock()
      await exclusive
      assert.equal(exclusiveLock.mode, 'exclusive')
      assert.deepEqual(granted, ['a-shared-1', 'a-shared-2', 'a-shared-3', 'b-exclusive', 'a-exclusive'])
    })
    test('releasing exclusive lock grants multiple shared locks', async () => {
      const res = uniqueName('m2')
      const [promise, resolve] = makePromiseAndResolveFunc()
      let held
      const exclusive = ctx.locks.request(res, () => {
        held = true
        return promise
      })
      for (let i = 0; i < 5; i++) requestLockAndHold(res, { mode: 'shared' })
      while (!held) await new Promise((r) => setImmediate(r))
      let answer = await ctx.locks.query()
      assert.equal(modes(answer.held, res).length, 1)
      assert.equal(modes(answer.pending, res).length, 5)
      resolve()
      await exclusive
      answer = await ctx.locks.query()
      for (let i = 0; modes(answer.held, res).length < 5 && i < 1000; i++) answer = await ctx.locks.query()
      assert.deepEqual(modes(answer.held, res), ['shared', 'shared', 'shared', 'shared', 'shared'])
    })
  })

  describe('query-empty', () => {
    test('query() returns dictionary with empty arrays when no locks are held', async () => {
      const state = await ctx.fresh().query()
      assert.ok(Array.isArray(state.pending) && Array.isArray(state.held))
      assert.deepEqual(state.pending, [])
      assert.deepEqual(state.held, [])
    })
  })

  describe('query', () => {
    afterEach(releaseHolds)
    test('query() returns dictionaries with expected properties', async () => {
      const res = uniqueName('q1')
      await ctx.locks.request(res, async () => {
        let acquired2 = false
        ctx.locks.request(res, () => {
          acquired2 = true
        })
        await ctx.locks.request(res, { ifAvailable: true }, async (lock3) => {
          assert.equal(acquired2, false)
          assert.equal(lock3, null)
          const state = await ctx.locks.query()
          for (const k of ['name', 'mode', 'clientId']) {
            assert.ok(Object.hasOwn(state.pending[0], k), `pending ${k}`)
            assert.ok(Object.hasOwn(state.held[0], k), `held ${k}`)
          }
        })
      })
    })
    test('query() reports individual held locks', async () => {
      const res = uniqueName('q2')
      await ctx.locks.request(res, async () => {
        assert.deepEqual(modes((await ctx.locks.query()).held, res), ['exclusive'])
      })
      await ctx.locks.request(res, { mode: 'shared' }, async () => {
        assert.deepEqual(modes((await ctx.locks.query()).held, res), ['shared'])
      })
    })
    test('query() reports multiple held locks', async () => {
      const [res1, res2] = [uniqueName('q3a'), uniqueName('q3b')]
      await ctx.locks.request(res1, async () => {
        await ctx.locks.request(res2, { mode: 'shared' }, async () => {
          const state = await ctx.locks.query()
          assert.deepEqual(modes(state.held, res1), ['exclusive'])
          assert.deepEqual(modes(state.held, res2), ['shared'])
        })
      })
    })
    test('query() reports pending and held locks', async () => {
      const res = uniqueName('q4')
      await ctx.locks.request(res, async () => {
        let acquired2 = false
        ctx.locks.request(res, () => {
          acquired2 = true
        })
        await ctx.locks.request(res, { ifAvailable: true }, async (lock3) => {
          assert.equal(acquired2, false)
          assert.equal(lock3, null)
          const state = await ctx.locks.query()
          assert.deepEqual(modes(state.pending, res), ['exclusive'])
          assert.deepEqual(modes(state.held, res), ['exclusive'])
        })
      })
    })
    test('query() reports held shared locks with appropriate count', async () => {
      const res = uniqueName('q5')
      await ctx.locks.request(res, { mode: 'shared' }, async () => {
        await ctx.locks.request(res, { mode: 'shared' }, async () => {
          assert.deepEqual(modes((await ctx.locks.query()).held, res), ['shared', 'shared'])
        })
      })
    })
    test('query() reports pending shared locks with appropriate count', async () => {
      const res = uniqueName('q6')
      await ctx.locks.request(res, async () => {
        let a2 = false
        let a3 = false
        ctx.locks.request(res, { mode: 'shared' }, () => {
          a2 = true
        })
        ctx.locks.request(res, { mode: 'shared' }, () => {
          a3 = true
        })
        await ctx.locks.request(res, { ifAvailable: true }, async (lock4) => {
          assert.equal(lock4, null)
          assert.ok(!a2 && !a3)
          const state = await ctx.locks.query()
          assert.deepEqual(modes(state.held, res), ['exclusive'])
          assert.deepEqual(modes(state.pending, res), ['shared', 'shared'])
        })
      })
    })
    test('query() reports the same clientId for held locks from the same context', async () => {
      const [res1, res2] = [uniqueName('q7a'), uniqueName('q7b')]
      await ctx.locks.request(res1, async () => {
        await ctx.locks.request(res2, async () => {
          const state = await ctx.locks.query()
          const c1 = clients(state.held, res1)
          const c2 = clients(state.held, res2)
          assert.equal(c1.length, 1)
          assert.equal(c2.length, 1)
          assert.deepEqual(c1, c2)
        })
      })
    })
    test('query() reports different ids for held locks from different contexts (a worker thread)', async () => {
      const res = uniqueName('q8')
      const worker = new Worker(path.join(__dirname, 'helpers', 'web-locks-holder.js'), {
        argv: [ctx.base, res, 'exclusive'],
        stdout: true,
      })
      try {
        await new Promise((resolve, reject) => {
          worker.once('message', (m) => (m === 'held' ? resolve() : reject(new Error(String(m)))))
          worker.once('error', reject)
        })
        // Exclusive here (the WPT case holds two shared locks, which needs shared mode): the worker's lock is listed
        // once, and not with this thread's clientId.
        const held = clients((await ctx.locks.query()).held, res)
        assert.equal(held.length, 1)
        assert.notEqual(held[0], await ownClientId(ctx.locks))
      } finally {
        await worker.terminate()
      }
    })
    test('query() can observe a deadlock', (t) => {
      t.skip(
        'a request pending in another context is listed from the backend\'s count of waiting processes (files) or ' +
          'of waiters (dflockd), without its clientId: the case compares clientIds of pending requests',
      )
    })
  })

  describe('resource-names', () => {
    for (const name of ['', 'abc\x00def', '\uD800', '\uDC00', '\uDC00\uD800', '\uFFFF']) {
      const codePoints = [...name].map((c) => '0x' + c.charCodeAt(0).toString(16).toUpperCase()).join(' ')
      test(`DOMString: ${codePoints}`, async () => {
        await ctx.locks.request(name, (lock) => {
          assert.equal(lock.name, name)
        })
      })
    }
    test('resource names that are not valid UTF-16 are not mangled', async () => {
      await ctx.locks.request('\uD800', async (lock) => {
        assert.equal(lock.name, '\uD800')
        await ctx.locks.request('\uFFFD', (lock2) => {
          assert.equal(lock2.name, '\uFFFD')
        })
      })
    })
    test('names cannot start with "-"', async () => {
      for (const name of ['-', '-foo']) await rejectsDom(ctx.locks.request(name, () => {}), 'NotSupportedError')
      let got = false
      await ctx.locks.request('x-anything', () => {
        got = true
      })
      assert.ok(got)
    })
  })

  describe('signal', () => {
    afterEach(releaseHolds)
    test('the signal option must be an AbortSignal', async () => {
      for (const signal of ['string', 12.34, false, {}, Symbol(), () => {}, globalThis]) {
        await assert.rejects(ctx.locks.request(uniqueName('g1'), { signal }, () => assert.fail('callback ran')), TypeError)
      }
    })
    test('passing an already aborted signal aborts', async () => {
      const c = new AbortController()
      c.abort()
      await rejectsDom(ctx.locks.request(uniqueName('g2'), { signal: c.signal }, () => assert.fail('callback ran')), 'AbortError')
    })
    test('passing an already aborted signal rejects with the custom abort reason', async () => {
      const c = new AbortController()
      const reason = 'My dog ate it.'
      c.abort(reason)
      await rejectsExactly(ctx.locks.request(uniqueName('g3'), { signal: c.signal }, () => assert.fail('callback ran')), reason)
    })
    test('passing an already aborted signal rejects with the default abort reason', async () => {
      const c = new AbortController()
      c.abort()
      await rejectsExactly(ctx.locks.request(uniqueName('g4'), { signal: c.signal }, () => assert.fail('callback ran')), c.signal.reason)
    })
    for (const [label, later] of [
      ['an aborted request results in AbortError', (f) => f()],
      ['abort after a timeout', (f) => setTimeout(f, 10)],
    ]) {
      test(label, async () => {
        const res = uniqueName('g5')
        const [held, isHeld] = makePromiseAndResolveFunc()
        const [p, release] = makePromiseAndResolveFunc()
        holds.push(release)
        ctx.locks.request(res, () => {
          isHeld()
          return p
        })
        await held
        const c = new AbortController()
        const promise = ctx.locks.request(res, { signal: c.signal }, () => assert.fail('callback ran'))
        const state = await ctx.locks.query()
        assert.equal(state.held.filter((l) => l.name === res).length, 1)
        assert.equal(state.pending.filter((l) => l.name === res).length, 1)
        const rejected = rejectsDom(promise, 'AbortError')
        later(() => c.abort())
        await rejected
      })
    }
    test('signal that is not aborted', async () => {
      const c = new AbortController()
      let got = false
      await ctx.locks.request(uniqueName('g7'), { signal: c.signal }, async () => {
        got = true
      })
      assert.ok(got)
    })
    test('synchronously signaled abort', async () => {
      const res = uniqueName('g8')
      const c = new AbortController()
      let got = false
      const p = ctx.locks.request(res, { signal: c.signal }, () => {
        got = true
      })
      c.abort()
      await rejectsDom(p, 'AbortError')
      assert.equal(got, false)
      await ctx.locks.request(res, () => {
        got = true
      })
      assert.ok(got)
    })
    for (const releaseFirst of [false, true]) {
      test(`abort signaled after lock ${releaseFirst ? 'released' : 'granted'}`, async () => {
        const c = new AbortController()
        const [acquired, acquiredFunc] = makePromiseAndResolveFunc()
        let releaseFunc
        const released = ctx.locks.request(uniqueName('g9'), { signal: c.signal }, () => {
          acquiredFunc()
          const [waiting, waitingFunc] = makePromiseAndResolveFunc()
          releaseFunc = waitingFunc
          return waiting
        })
        await acquired
        if (releaseFirst) {
          releaseFunc('resolved ok')
          c.abort()
        } else {
          c.abort()
          releaseFunc('resolved ok')
        }
        assert.equal(await released, 'resolved ok')
      })
    }
    test('abort should process the next pending lock request', async () => {
      const res = uniqueName('g10')
      const c = new AbortController()
      const first = requestLockAndHold(res, { signal: c.signal })
      const next = ctx.locks.request(res, () => 'resolved')
      c.abort()
      await rejectsDom(first, 'AbortError')
      assert.equal(await next, 'resolved')
    })
    test('aborted promise should reject with the custom abort reason', async () => {
      const c = new AbortController()
      const promise = requestLockAndHold(uniqueName('g11'), { signal: c.signal })
      const reason = 'My cat handled it'
      c.abort(reason)
      await rejectsExactly(promise, reason)
    })
    test('aborted promise should reject with the default abort reason', async () => {
      const c = new AbortController()
      const promise = requestLockAndHold(uniqueName('g12'), { signal: c.signal })
      c.abort()
      await rejectsExactly(promise, c.signal.reason)
    })
  })

  describe('steal', () => {
    afterEach(releaseHolds)
    test('lock available', async () => {
      let called = false
      await ctx.locks.request(uniqueName('t1'), { steal: true }, (lock) => {
        called = true
        assert.notEqual(lock, null)
      })
      assert.ok(called)
    })
    test('lock not available', async () => {
      const res = uniqueName('t2')
      ctx.locks.request(res, () => never).catch(() => {})
      let called = false
      await ctx.locks.request(res, { steal: true }, (lock) => {
        called = true
        assert.notEqual(lock, null)
      })
      assert.ok(called)
    })
    test("broken lock's release promise rejects", async () => {
      const res = uniqueName('t3')
      const promise = ctx.locks.request(res, () => never)
      const assertion = rejectsDom(promise, 'AbortError')
      await ctx.locks.request(res, { steal: true }, () => {})
      await assertion
    })
    test("requested lock's release promise is deferred", async () => {
      const res = uniqueName('t4')
      ctx.locks.request(res, () => never).catch(() => {})
      let granted = false
      const promise = ctx.locks.request(res, () => {
        granted = true
      })
      await ctx.locks.request(res, { steal: true }, () => {
        assert.equal(granted, false, 'steal overrides the request')
      })
      await promise
      assert.ok(granted)
    })
    test('last caller wins', async () => {
      const res = uniqueName('t5')
      ctx.locks.request(res, () => never).catch(() => {})
      let sawAbort = false
      const first = ctx.locks.request(res, { steal: true }, () => never).catch(() => {
        sawAbort = true
      })
      await ctx.locks.request(res, { steal: true }, () => {})
      await first
      assert.ok(sawAbort)
    })
  })
}

/** This thread's clientId, as query() reports it for a lock it holds. */
async function ownClientId(locks) {
  const name = uniqueName('me')
  return locks.request(name, async () => clients((await locks.query()).held, name)[0])
}

describe('createLockManager on a lock directory', () => {
  const ctx = { kind: 'file' }
  let dir
  before(async () => {
    dir = u.mkTmp('web-locks-wpt-')
    ctx.base = dir
    ctx.locks = createLockManager(dir)
    ctx.fresh = () => createLockManager(u.mkTmp('web-locks-empty-'))
  })
  after(() => u.rmTmp(dir))
  wptSuites(ctx)
})

describe('createLockManager on dflockd', { skip: d.goOnly() }, () => {
  const ctx = { kind: 'dflockd' }
  before(async () => {
    const s = await d.startServer()
    ctx.port = s.port
    ctx.base = `dflockd://127.0.0.1:${s.port}/wpt`
    ctx.locks = createLockManager(ctx.base)
    ctx.fresh = () => createLockManager(`dflockd://127.0.0.1:${s.port}/empty`)
  })
  after(() => d.stopAll())
  wptSuites(ctx)

  test('shared requests of one name are granted in request order even when the backend answers out of order', async () => {
    // The real backend and server: two shared requests wait behind another holder (their tries are refused), and the
    // first one's answer to its wait is held back until the second one's has come: what a slow connection does
    // (under load the WPT run saw 4 granted before 1). Before the per-name settle order: [2, 1].
    const { DflockdBackend } = require('../lib/locks/dflockd-backend')
    const res = uniqueName('sorder')
    const holder = await acquire(`dflockd://127.0.0.1:${ctx.port}/${encodeURIComponent(`wpt/${stemOf(res)}`)}`, { mode: 'exclusive' })
    assert.ok(holder.ok, JSON.stringify(holder.error))
    const real = DflockdBackend.prototype.acquire
    let secondAnswered
    const second = new Promise((r) => {
      secondAnswered = r
    })
    let bothWaiting
    const waiting = new Promise((r) => {
      bothWaiting = r
    })
    let waits = 0
    DflockdBackend.prototype.acquire = async function (name, mode, options) {
      if (name !== res || !options.wait) return real.call(this, name, mode, options)
      const n = ++waits
      if (n === 2) bothWaiting()
      const r = await real.call(this, name, mode, options)
      if (n === 1) await second
      else secondAnswered()
      return r
    }
    try {
      const granted = []
      const requests = Promise.all([1, 2].map((n) => ctx.locks.request(res, { mode: 'shared' }, () => granted.push(n))))
      await waiting
      await holder.value.release()
      await requests
      assert.deepEqual(granted, [1, 2])
      assert.equal(waits, 2)
    } finally {
      DflockdBackend.prototype.acquire = real
    }
  })

  test('steal from a holder that is not a LockManager client: NotSupportedError after the bounded wait; it keeps the lock', async () => {
    const res = uniqueName('dsteal')
    // A DistributedLock-style holder (the one-string API) of the name's key: it has no mailbox and cannot answer.
    const key = `wpt/${stemOf(res)}`
    const held = await acquire(`dflockd://127.0.0.1:${ctx.port}/${encodeURIComponent(key)}`)
    assert.ok(held.ok, JSON.stringify(held.error))
    try {
      const t0 = Date.now()
      await assert.rejects(ctx.locks.request(res, { steal: true }, () => assert.fail('callback ran')), (e) => {
        assert.equal(e.name, 'NotSupportedError')
        assert.match(e.message, /did not answer within 2000 ms/)
        return true
      })
      console.log(`# the steal gave up after ${Date.now() - t0} ms`)
      assert.equal(held.value.signal.aborted, false)
      assert.equal(await ctx.locks.request(res, { ifAvailable: true }, (l) => l), null)
    } finally {
      await held.value.release()
    }
    assert.equal(await ctx.locks.request(res, { steal: true }, (l) => l.name), res)
  })
})
