'use strict'
// Issue 23 point 4 (files): ALREADY_LOCKED and TIMEOUT say who holds the lock, as the engine read it when it
// refused: holderPid, holderTag, lockedSince and isOwnedByCurrentProcess, in every way the failure travels
// (SemaphoreResult errors of the target API and of the Semaphore class, LockError/AcquireTimeoutError from
// withLock). Holders: a real other process (ours), the real Rust sema, and this process itself.

const { describe, test } = require('node:test')
const assert = require('node:assert/strict')
const u = require('./helpers/file-util')
const { spawnText } = require('./fixtures/cli/helpers')
const { readSema } = require('../scripts/sema-tool')
const sema = require('..')

const REAL = readSema()
const T = u.testDir('interop-holder-')

async function otherHolder(t, file, options) {
  const child = u.spawnNode('file-holder.js', [file, JSON.stringify(options)])
  const out = u.lines(child)
  const held = JSON.parse((await out.next(/^held /, 15000)).slice(5))
  t.after(() => child.kill('SIGKILL'))
  return { child, held }
}

function facts(e) {
  return { holderPid: e.holderPid, holderTag: e.holderTag, isOwnedByCurrentProcess: e.isOwnedByCurrentProcess, since: typeof e.lockedSince }
}

describe('holder facts in ALREADY_LOCKED and TIMEOUT (lock files)', () => {
  test('another process of ours holds it: every failure names its pid and tag, not this process', async (t) => {
    const file = T.fresh('other')
    const { child } = await otherHolder(t, file, { tag: 'nightly build' })
    const want = { holderPid: child.pid, holderTag: 'nightly build', isOwnedByCurrentProcess: false, since: 'number' }

    const tried = await sema.tryAcquire(file)
    assert.equal(tried.error.type, 'ALREADY_LOCKED')
    assert.deepEqual(facts(tried.error), want)

    const waited = await sema.acquire(file, { timeout: 150 })
    assert.deepEqual({ type: waited.error.type, message: waited.error.message }, { type: 'TIMEOUT', message: 'Timeout waiting for lock after 150ms' })
    assert.deepEqual(facts(waited.error), want)

    const s = new sema.Semaphore(file)
    assert.deepEqual(facts(s.tryAcquire().error), want)
    const sw = await s.acquire({ timeout: 120 })
    assert.equal(sw.error.type, 'TIMEOUT')
    assert.deepEqual(facts(sw.error), want)

    await assert.rejects(
      sema.withLock(file, () => {}, { timeout: 100 }),
      (e) => e instanceof sema.AcquireTimeoutError && e.code === 'TIMEOUT' && assert.deepEqual(facts(e), want) === undefined,
    )
    await assert.rejects(
      sema.withLock(file, () => {}, { timeout: 0 }),
      (e) => e instanceof sema.LockError && assert.deepEqual(facts(e), want) === undefined,
    )
  })

  test('this process holds it (a forgotten release): isOwnedByCurrentProcess true, our pid and tag', async () => {
    const file = T.fresh('mine')
    const held = await sema.acquire(file, { tag: 'forgot' })
    assert.ok(held.ok)
    try {
      const want = { holderPid: process.pid, holderTag: 'forgot', isOwnedByCurrentProcess: true, since: 'number' }
      assert.deepEqual(facts((await sema.acquire(file, { timeout: 100 })).error), want)
      assert.deepEqual(facts((await sema.tryAcquire(file)).error), want)
    } finally {
      await held.value.release()
    }
  })

  test('the real sema holds it: its pid, its tag, not this process', async (t) => {
    if (!REAL.bin) return t.skip(REAL.reason)
    const file = T.fresh('real')
    const r = await spawnText(REAL.bin, ['try', file, '--tag', 'from sema'])
    assert.equal(r.code, 0, r.stderr)
    const pid = Number(/pid=(\d+)/.exec(require('node:fs').readFileSync(file, 'utf8'))[1])
    const want = { holderPid: pid, holderTag: 'from sema', isOwnedByCurrentProcess: false, since: 'number' }
    assert.deepEqual(facts((await sema.acquire(file, { timeout: 100 })).error), want)
    assert.deepEqual(facts((await sema.tryAcquire(file)).error), want)
  })
})
