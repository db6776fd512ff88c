'use strict'
// AbortSignal and process exit:
// - a signal aborted before the call fails at once with ABORTED and creates nothing; aborted during a wait, the
//   wait ends promptly with ABORTED (not at the next poll) and nothing is left, and no "zombie" waiter takes the
//   lock later; withLock rejects with a LockError whose code is ABORTED, or an AcquireTimeoutError (TIMEOUT);
// - child scripts that acquire and release, forget to release, have a pending heartbeat, time out or are aborted
//   exit on their own with code 0; a pending acquire (and only that) keeps a process alive.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const { setTimeout: sleep } = require('node:timers/promises')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('abort-exit-', { name: 'abort', own: true })
const { fresh, left } = tmp

function aborted() {
  const ac = new AbortController()
  ac.abort()
  return ac.signal
}

describe('AbortSignal aborted before the call', () => {
  test('acquire → ABORTED at once, nothing created (even though the lock is free)', async () => {
    const file = fresh()
    const t0 = Date.now()
    const r = await sema.acquire(file, { signal: aborted() })
    assert.ok(Date.now() - t0 < u.scaled(200), 'at once')
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ABORTED')
    assert.deepEqual(left(file), [])
  })

  test('Semaphore#acquire({signal}) → ABORTED, nothing created', async () => {
    const file = fresh()
    const r = await new sema.Semaphore(file).acquire({ signal: aborted() })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ABORTED')
    assert.deepEqual(left(file), [])
  })

  test('withLock → rejects LockError code ABORTED, fn never runs, nothing created', async () => {
    const file = fresh()
    let ran = false
    await assert.rejects(
      sema.withLock(file, () => (ran = true), { signal: aborted() }),
      (e) => e instanceof sema.LockError && e.code === 'ABORTED' && e.type === 'ABORTED',
    )
    assert.equal(ran, false)
    assert.deepEqual(left(file), [])
  })
})

describe('AbortSignal aborted during a wait', () => {
  const flavours = {
    acquire: (file, signal) => sema.acquire(file, { signal, retryInterval: 5000 }),
    'Semaphore#acquire': (file, signal) => new sema.Semaphore(file, { retryInterval: 5000 }).acquire({ signal }),
  }
  for (const [name, start] of Object.entries(flavours)) {
    test(`${name}: resolves ABORTED promptly (poll interval 5 s), nothing left, no later grab`, { timeout: u.scaled(15000) }, async (t) => {
      const file = fresh('wait')
      const held = await sema.acquire(file)
      assert.equal(held.ok, true)
      const ac = new AbortController()
      let settled = false
      const waiting = start(file, ac.signal).finally(() => (settled = true))
      // Stays a sleep: the holder is this process, so the waiter waits in-process and nothing shows it has reached
      // its wait (no queue flock in /proc/locks). The next line checks that it is waiting.
      await sleep(200)
      assert.equal(settled, false, 'waits while the lock is held')
      const t0 = Date.now()
      ac.abort()
      const r = await u.within(waiting, 2000, 'aborted wait')
      const ms = Date.now() - t0
      t.diagnostic(`${name}: resolved ${ms} ms after abort`)
      assert.ok(ms < u.scaled(500, 5000), `promptly (${ms} ms)`)
      assert.equal(r.ok, false)
      assert.equal(r.error.type, 'ABORTED')
      const text = fs.readFileSync(file, 'utf8')
      assert.equal(u.readLockKeys(file).token, held.value.token, 'the holder’s lock is untouched')
      assert.equal(await held.value.release(), true)
      // The aborted waiter must not come back and take the lock: a fresh acquirer gets it and can release it.
      const c = await sema.acquire(file, { timeout: 2000 })
      assert.equal(c.ok, true, `the aborted waiter left the lock alone: ${JSON.stringify(c.error)}`)
      assert.equal(await c.value.release(), true)
      assert.deepEqual(left(file), [], 'nothing left behind')
      assert.ok(text.length > 0)
    })
  }

  test('AbortSignal.timeout(200) ends a wait with ABORTED', async () => {
    const file = fresh('sigtimeout')
    const held = await sema.acquire(file)
    const t0 = Date.now()
    const r = await u.within(sema.acquire(file, { signal: AbortSignal.timeout(200) }), 3000, 'acquire')
    const ms = Date.now() - t0
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ABORTED')
    assert.ok(ms >= 150 && ms < u.scaled(1500), `${ms} ms`)
    await held.value.release()
  })

  test('withLock: aborted during the wait → LockError ABORTED; timeout → AcquireTimeoutError (TIMEOUT); fn never runs', async () => {
    const file = fresh('withlock')
    const held = await sema.acquire(file)
    let ran = 0
    const ac = new AbortController()
    setTimeout(() => ac.abort(), 150) // an abort during the wait, the case under test (see the sleep above)
    await assert.rejects(sema.withLock(file, () => ran++, { signal: ac.signal }), (e) => {
      assert.ok(e instanceof sema.LockError, 'a LockError')
      assert.equal(e.code, 'ABORTED')
      return true
    })
    const t0 = Date.now()
    await assert.rejects(sema.withLock(file, () => ran++, { timeout: 200 }), (e) => {
      assert.ok(e instanceof sema.AcquireTimeoutError, 'an AcquireTimeoutError')
      assert.ok(e instanceof sema.LockError)
      assert.equal(e.code, 'TIMEOUT')
      assert.equal(e.type, 'TIMEOUT')
      return true
    })
    assert.ok(Date.now() - t0 >= 150, 'waited for its timeout')
    assert.equal(ran, 0)
    assert.equal(await held.value.release(), true)
    assert.deepEqual(left(file), [])
  })
})

// A process kept alive by something pending never exits; the bound only has to exceed a slow start and exit: under
// Wine with other suites running, CI once saw a child take over 5 s.
const EXIT_BOUND_MS = 30_000

describe('processes exit on their own, nothing pending', () => {
  const simple = {
    'acquire-release': /^acquired\nreleased true$/m,
    forget: /^acquired$/m,
    heartbeat: /^acquired$/m,
    'semats-forget': /^acquired$/m,
    'with-lock': /^result 7$/m,
  }
  for (const [mode, expected] of Object.entries(simple)) {
    test(`${mode}: exits on its own with code 0`, { timeout: u.scaled(45_000) }, async () => {
      const file = fresh(`exit-${mode}`)
      const child = u.spawnNode('file-exit-child.js', [mode, file])
      child.stdin.end()
      const ex = await u.waitExit(child, EXIT_BOUND_MS, `exit child (${mode})`)
      assert.equal(ex.code, 0, ex.stdout + ex.stderr)
      assert.match(ex.stdout, expected)
      assert.doesNotMatch(ex.stdout, /crashed/)
      if (mode === 'acquire-release' || mode === 'with-lock') assert.equal(fs.existsSync(file), false, 'released')
      if (fs.existsSync(file)) {
        // A forgotten lock of a process that has exited: reclaimable at once (staleTimeout 1 h).
        assert.equal(u.readLockKeys(file).pid, String(child.pid))
        const r = await sema.tryAcquire(file, { staleTimeout: 3_600_000 })
        assert.equal(r.ok, true, `the exited process's lock is reclaimed at once: ${JSON.stringify(r.error)}`)
        assert.equal(await r.value.release(), true)
      }
      assert.deepEqual(left(file), [], 'no temp files left')
    })
  }

  for (const [mode, result] of [
    ['timeout', 'TIMEOUT'],
    ['abort-wait', 'ABORTED'],
  ]) {
    test(`${mode} on a lock held by another process: result ${result}, exits on its own with code 0`, { timeout: u.scaled(45_000) }, async () => {
      const file = fresh(`exit-${mode}`)
      const held = await sema.acquire(file)
      try {
        const child = u.spawnNode('file-exit-child.js', [mode, file])
        child.stdin.end()
        const ex = await u.waitExit(child, EXIT_BOUND_MS, `exit child (${mode})`)
        assert.equal(ex.code, 0, ex.stdout + ex.stderr)
        assert.match(ex.stdout, new RegExp(`^result ${result}$`, 'm'))
        assert.equal(u.readLockKeys(file).token, held.value.token)
      } finally {
        await held.value.release()
      }
      assert.deepEqual(left(file), [])
    })
  }

  test('a pending acquire keeps the process alive until it is granted; then it exits on its own', { timeout: u.scaled(45_000) }, async () => {
    const file = fresh('exit-wait')
    const held = await sema.acquire(file)
    const child = u.spawnNode('file-exit-child.js', ['wait-then-get', file])
    child.stdin.end()
    await u.lines(child).next(/^waiting$/, 5000)
    await sleep(700) // a duration under test: the child must still be alive after it
    assert.equal(child.exitCode, null, `the waiting child is still alive: ${child.stdoutText}${child.stderrText}`)
    assert.equal(await held.value.release(), true)
    const ex = await u.waitExit(child, EXIT_BOUND_MS, 'waiting child')
    assert.equal(ex.code, 0, ex.stdout + ex.stderr)
    assert.match(ex.stdout, /^acquired\nreleased true$/m)
    assert.equal(fs.existsSync(file), false)
  })
})
