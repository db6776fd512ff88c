'use strict'
// The async target API over file targets: acquire / tryAcquire / release / status / withLock over a plain path and
// a file:// URL; the Lock handle's fields; idempotent release(); Symbol.asyncDispose; token-checked release;
// FIFO order of waiters in one process; timeouts.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { pathToFileURL } = require('node:url')
const u = require('./helpers/file-util')
const sema = require('..')

const HEX32 = /^[0-9a-f]{32}$/

const tmp = u.testDir('api-', { name: 'api', own: true })
const { fresh, left } = tmp

function checkLock(lock, { target, tag }) {
  assert.equal(lock.target, target)
  assert.equal(lock.backend, 'file')
  assert.equal(lock.pid, process.pid)
  assert.ok(Number.isInteger(lock.timestamp))
  assert.ok(Math.abs(lock.timestamp - u.nowS()) <= u.scaled(5), `timestamp ${lock.timestamp} is now, in unix seconds`)
  assert.equal(lock.tag, tag)
  assert.match(lock.token, HEX32)
  assert.ok(lock.signal instanceof AbortSignal)
  assert.equal(lock.signal.aborted, false)
  assert.equal(lock.released, false)
  assert.equal(typeof lock.release, 'function')
  assert.equal(typeof lock[Symbol.asyncDispose], 'function')
}

describe('acquire / release over a plain path', () => {
  test('Lock fields; the file says the same; release() resolves true then false', async () => {
    const file = fresh()
    // heartbeat off: the file must still say what was written (the default rewrites timestamp= every second)
    const r = await sema.acquire(file, { tag: 'api', heartbeat: false })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const lock = r.value
    checkLock(lock, { target: file, tag: 'api' })
    const keys = u.readLockKeys(file)
    assert.equal(keys.pid, String(process.pid))
    assert.equal(keys.timestamp, String(lock.timestamp))
    assert.equal(keys.tag, 'api')
    assert.equal(keys.token, lock.token)
    assert.equal(await lock.release(), true)
    assert.equal(lock.released, true)
    assert.equal(fs.existsSync(file), false)
    assert.equal(await lock.release(), false, 'idempotent')
    assert.equal(await lock.release(), false)
    assert.deepEqual(left(file), [])
  })

  test('concurrent release() calls: exactly one resolves true', async () => {
    const file = fresh()
    const { value: lock } = await sema.acquire(file)
    const results = await Promise.all([lock.release(), lock.release(), lock.release()])
    assert.equal(results.filter((x) => x === true).length, 1, JSON.stringify(results))
    assert.equal(fs.existsSync(file), false)
  })

  test('tokens differ between acquisitions; no tag → tag undefined', async () => {
    const file = fresh()
    const a = (await sema.acquire(file)).value
    assert.equal(a.tag, undefined)
    await a.release()
    const b = (await sema.acquire(file)).value
    assert.notEqual(a.token, b.token)
    await b.release()
  })

  test('tryAcquire: granted when free; ALREADY_LOCKED (holderPid, lockedSince) when held, even by this process', async () => {
    const file = fresh()
    const r = await sema.tryAcquire(file, { tag: 'try', heartbeat: false }) // lockedSince stays the acquisition time
    assert.equal(r.ok, true)
    checkLock(r.value, { target: file, tag: 'try' })
    const again = await sema.tryAcquire(file)
    assert.equal(again.ok, false)
    assert.equal(again.error.type, 'ALREADY_LOCKED')
    assert.equal(again.error.holderPid, process.pid)
    assert.equal(again.error.lockedSince, r.value.timestamp)
    assert.equal(await r.value.release(), true)
  })

  test('await lock[Symbol.asyncDispose]() releases it', async () => {
    const file = fresh()
    const lock = (await sema.acquire(file)).value
    await lock[Symbol.asyncDispose]()
    assert.equal(lock.released, true)
    assert.equal(fs.existsSync(file), false)
    assert.equal(await lock.release(), false)
  })

  test('a Lock releases only its own file (token check): after an outside release and a new holder, release() is false', async () => {
    const file = fresh()
    const a = (await sema.acquire(file)).value
    const rel = await sema.release(file) // the lock this process holds on the target
    assert.equal(rel.ok, true, JSON.stringify(rel.error))
    assert.equal(fs.existsSync(file), false)
    const b = (await sema.acquire(file)).value
    assert.equal(await a.release(), false, 'a no longer holds it')
    assert.equal(u.readLockKeys(file).token, b.token, 'b’s lock survives a’s release()')
    assert.equal(await b.release(), true)
  })

  test('release(lock) and release(path); NOT_LOCKED when absent; PERMISSION_DENIED for a foreign pid; force', async () => {
    const file = fresh()
    const lock = (await sema.acquire(file)).value
    const r1 = await sema.release(lock)
    assert.equal(r1.ok, true, JSON.stringify(r1.error))
    assert.equal(lock.released, true)
    assert.equal(fs.existsSync(file), false)
    const r2 = await sema.release(file)
    assert.equal(r2.ok, false)
    assert.equal(r2.error.type, 'NOT_LOCKED')
    const sleeper = await u.liveSleeper()
    const foreign = `pid=${sleeper.pid}\ntimestamp=${u.nowS()}\n`
    fs.writeFileSync(file, foreign)
    const r3 = await sema.release(file)
    assert.equal(r3.ok, false)
    assert.equal(r3.error.type, 'PERMISSION_DENIED')
    assert.equal(r3.error.holderPid, sleeper.pid)
    assert.equal(fs.readFileSync(file, 'utf8'), foreign)
    const r4 = await sema.release(file, { force: true })
    assert.equal(r4.ok, true)
    assert.equal(fs.existsSync(file), false)
    sleeper.kill('SIGKILL')
  })

  // In tmpfs the grant is made on the JS thread, inside the tryAcquire() call; semats' synchronous release() then
  // ends the lock before the promise has built its Lock: the engine tells the handle, which is born released.
  test('released by path before its Lock exists: the Lock is born released', {
    // The grant inside the call is the tmpfs fast path (fsync costs nothing there), which only Linux's statfs reveals.
    skip: (process.platform !== 'linux' || !fs.existsSync('/dev/shm')) && 'needs Linux tmpfs (/dev/shm)',
  }, async () => {
    const shm = fs.mkdtempSync('/dev/shm/sema-native-test-')
    try {
      const file = path.join(shm, 'early.lock')
      const pending = sema.tryAcquire(file)
      assert.ok(fs.existsSync(file), 'granted inside the call')
      assert.equal(new sema.Semaphore(file).release().ok, true)
      const r = await pending
      assert.equal(r.ok, true, JSON.stringify(r.error))
      assert.equal(r.value.released, true)
      assert.equal(r.value.signal.aborted, false, 'released, not lost')
      assert.equal(await r.value.release(), false)
      assert.equal(fs.existsSync(file), false)
    } finally {
      u.rmTmp(shm)
    }
  })

  test('status(): free, then held by us (info, isOwnedByCurrentProcess), target and backend', async () => {
    const file = fresh()
    const free = await sema.status(file)
    assert.equal(free.locked, false)
    assert.equal(free.info, null)
    assert.equal(free.isStale, false)
    assert.equal(free.isOwnedByCurrentProcess, false)
    assert.equal(free.backend, 'file')
    assert.equal(free.target, file)
    const lock = (await sema.acquire(file, { tag: 's' })).value
    const held = await sema.status(file)
    assert.equal(held.locked, true)
    assert.deepEqual({ ...held.info }, { pid: process.pid, timestamp: lock.timestamp, tag: 's' })
    assert.equal(held.isOwnedByCurrentProcess, true)
    assert.equal(held.isStale, false)
    await lock.release()
    assert.deepEqual(left(file), [], 'status() creates nothing')
  })

  test('the pid option records another owner (e.g. a calling shell’s $$)', async () => {
    const file = fresh()
    const sleeper = await u.liveSleeper()
    const r = await sema.acquire(file, { pid: sleeper.pid })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(r.value.pid, sleeper.pid)
    assert.equal(u.readLockKeys(file).pid, String(sleeper.pid))
    assert.equal(await r.value.release(), true)
    sleeper.kill('SIGKILL')
  })

  test('50 acquire/release cycles leave nothing behind', async () => {
    const file = fresh()
    for (let i = 0; i < 50; i++) {
      const r = await sema.acquire(file, { tag: `cycle ${i}` })
      assert.equal(r.ok, true)
      assert.equal(await r.value.release(), true)
    }
    assert.deepEqual(left(file), [])
  })
})

describe('file:// URL targets', () => {
  test('acquire / status / tryAcquire / release through a file:// URL address the same file', async () => {
    const file = fresh('url')
    const url = pathToFileURL(file).href
    const r = await sema.acquire(url, { tag: 'url' })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const lock = r.value
    assert.equal(lock.backend, 'file')
    assert.ok(lock.target === url || lock.target === file, `target ${lock.target}`)
    assert.ok(fs.existsSync(file), 'the lock file is at the URL’s path')
    assert.equal(u.readLockKeys(file).token, lock.token)
    const byPath = await sema.tryAcquire(file)
    assert.equal(byPath.ok, false)
    assert.equal(byPath.error.type, 'ALREADY_LOCKED')
    const st = await sema.status(url)
    assert.equal(st.locked, true)
    assert.equal(st.info.tag, 'url')
    assert.equal(st.isOwnedByCurrentProcess, true)
    const rel = await sema.release(url)
    assert.equal(rel.ok, true, JSON.stringify(rel.error))
    assert.equal(fs.existsSync(file), false)
    assert.equal(await lock.release(), false)
  })

  test('a URL with percent-encoded characters maps to the decoded path', async () => {
    const file = fresh('with space é')
    const url = pathToFileURL(file).href
    assert.match(url, /%20/)
    const v = await sema.withLock(url, () => {
      assert.ok(fs.existsSync(file), 'held at the decoded path')
      return 'ok'
    })
    assert.equal(v, 'ok')
    assert.deepEqual(left(file), [])
  })
})

describe('withLock', () => {
  test('returns fn’s value (sync and async), passes the Lock, releases afterwards', async () => {
    const file = fresh('with')
    let seen
    const v = await sema.withLock(file, (lock) => {
      seen = lock
      checkLock(lock, { target: file, tag: 'w' })
      assert.equal(u.readLockKeys(file).token, lock.token)
      return 41
    }, { tag: 'w' })
    assert.equal(v, 41)
    assert.equal(seen.released, true)
    assert.equal(fs.existsSync(file), false)
    const v2 = await sema.withLock(file, async () => {
      await new Promise((r) => setImmediate(r))
      return 'async'
    })
    assert.equal(v2, 'async')
    assert.deepEqual(left(file), [])
  })

  test('fn’s error wins and the lock is still released', async () => {
    const file = fresh('with-err')
    const boom = new Error('boom')
    await assert.rejects(sema.withLock(file, async () => {
      throw boom
    }), (e) => e === boom)
    assert.equal(fs.existsSync(file), false)
    await assert.rejects(sema.withLock(file, () => {
      throw boom
    }), (e) => e === boom)
    assert.equal(fs.existsSync(file), false)
  })

  test('serialises concurrent callers in one process', async () => {
    const file = fresh('with-serial')
    let inside = 0
    let maxInside = 0
    await Promise.all(
      Array.from({ length: 10 }, () =>
        sema.withLock(file, async () => {
          inside++
          maxInside = Math.max(maxInside, inside)
          await new Promise((r) => setTimeout(r, 5)) // the hold under test: overlapping callers would be counted
          inside--
        }, { timeout: 10000 }),
      ),
    )
    assert.equal(maxInside, 1)
    assert.deepEqual(left(file), [])
  })
})

describe('waiting', () => {
  test('FIFO: 5 in-process waiters on one path are granted in call order (20 rounds)', { timeout: u.scaled(30000) }, async (t) => {
    const file = fresh('fifo')
    const bad = []
    for (let round = 0; round < 20; round++) {
      const first = (await sema.acquire(file)).value
      const order = []
      const waiters = Array.from({ length: 5 }, (_, i) =>
        sema.acquire(file, { timeout: 10000, tag: `w${i}` }).then(async (r) => {
          assert.equal(r.ok, true, JSON.stringify(r.error))
          order.push(i)
          assert.equal(u.readLockKeys(file).tag, `w${i}`, 'the file is the granted waiter’s')
          await new Promise((res) => setImmediate(res))
          assert.equal(await r.value.release(), true)
        }),
      )
      // Odd rounds: the waiters have been parked for a while (the pause is the case under test); even rounds:
      // released straight away.
      if (round % 2) await new Promise((r) => setTimeout(r, 20))
      assert.deepEqual(order, [], 'nobody is granted while the first holder holds it')
      assert.equal(await first.release(), true)
      await Promise.all(waiters)
      if (order.join() !== '0,1,2,3,4') bad.push(`round ${round}: ${order.join(',')}`)
    }
    t.diagnostic(`out-of-order rounds: ${bad.length} of 20 ${JSON.stringify(bad)}`)
    assert.deepEqual(bad, [], 'grants follow call order in every round')
    assert.deepEqual(left(file), [])
  })

  test('timeout 0 = one attempt: TIMEOUT at once when held', async () => {
    const file = fresh('t0')
    const held = (await sema.acquire(file)).value
    const t0 = Date.now()
    const r = await sema.acquire(file, { timeout: 0 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'TIMEOUT')
    assert.ok(Date.now() - t0 < u.scaled(300), 'at once')
    const r2 = await sema.acquire(file, { timeout: 300 })
    assert.equal(r2.ok, false)
    assert.equal(r2.error.type, 'TIMEOUT')
    await held.release()
  })

  test('acquire({timeout: 300}) on a held lock: TIMEOUT after ~300 ms; nothing left behind', async () => {
    const file = fresh('t300')
    const held = (await sema.acquire(file)).value
    const t0 = Date.now()
    const r = await sema.acquire(file, { timeout: 300 })
    const ms = Date.now() - t0
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'TIMEOUT')
    assert.ok(ms >= 250 && ms < u.scaled(1500), `${ms} ms`)
    assert.deepEqual(left(file), [path.basename(file)], 'only the holder’s file')
    await held.release()
    assert.deepEqual(left(file), [])
  })

  test('a waiter in this process is woken by the release, not by its 10 s poll', async () => {
    const file = fresh('wake')
    const held = (await sema.acquire(file)).value
    const pending = sema.acquire(file, { retryInterval: 10000, timeout: 15000 })
    // Stays a sleep: the holder is this process, so nothing shows the waiter has reached its wait (no queue flock).
    await new Promise((r) => setTimeout(r, 100))
    const t0 = Date.now()
    await held.release()
    const r = await pending
    assert.equal(r.ok, true)
    assert.ok(Date.now() - t0 < u.scaled(1000, 10_000), `${Date.now() - t0} ms`)
    await r.value.release()
  })
})

describe('one target acquired again and again (the engine handle cached per path and options)', () => {
  test('each acquire uses its own options: maxTagLength given, then absent, then given again', async () => {
    const file = fresh('same-path-options')
    for (const [options, tag] of [
      [{ tag: 'abcdef', maxTagLength: 3 }, 'abc'],
      [{ tag: 'abcdef' }, 'abcdef'],
      [{ tag: 'abcdef', maxTagLength: 3 }, 'abc'],
      [{ tag: 'abcdef', maxTagLength: null }, 'abcdef'],
      [{ tag: 'abcdef', maxTagLength: 4 }, 'abcd'],
    ]) {
      const r = await sema.acquire(file, options)
      assert.equal(r.ok, true, JSON.stringify(r.error))
      assert.equal(u.readLockKeys(file).tag, tag, JSON.stringify(options))
      assert.equal(await r.value.release(), true)
    }
    assert.deepEqual(left(file), [])
  })

  test('a relative path after process.chdir() is the file in the new working directory', async () => {
    const a = path.dirname(fresh('chdir-a'))
    const b = path.dirname(fresh('chdir-b'))
    const cwd = process.cwd()
    try {
      for (const dir of [a, b, a]) {
        process.chdir(dir)
        const r = await sema.acquire('rel.lock', { tag: 'rel' })
        assert.equal(r.ok, true, JSON.stringify(r.error))
        assert.equal(u.readLockKeys(path.join(dir, 'rel.lock')).tag, 'rel', dir)
        assert.equal(fs.existsSync(path.join(dir === a ? b : a, 'rel.lock')), false)
        assert.equal(await r.value.release(), true)
        assert.equal(fs.existsSync(path.join(dir, 'rel.lock')), false)
      }
    } finally {
      process.chdir(cwd)
    }
  })
})
