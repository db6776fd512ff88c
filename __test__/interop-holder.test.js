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

function facts(e) {
  return { holderPid: e.holderPid, holderTag: e.holderTag, isOwnedByCurrentProcess: e.isOwnedByCurrentProcess, since: typeof e.lockedSince }
}

describe('holder facts in ALREADY_LOCKED and TIMEOUT (lock files)', () => {
  test('another process of ours holds it: every failure names its pid and tag, not this process', async (t) => {
    const file = T.fresh('other')
    const { child, kill } = await u.holder(file, { tag: 'nightly build' })
    t.after(() => kill())
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

// Issue 23 point 3: status says, for a lock whose holder looks dead, when it becomes reclaimable and by which rule.
describe('status: reclaimableAt and reclaimRule (lock files)', () => {
  const fs = require('node:fs')

  test('a crashed real sema holder: semats rule, reclaimable staleTimeout after its timestamp (API and CLI)', async (t) => {
    if (!REAL.bin) return t.skip(REAL.reason)
    const file = T.fresh('crashed-sema')
    // sema's `try` exits at once: its recorded pid is gone, as after a kill -9 of a holder.
    assert.equal((await spawnText(REAL.bin, ['try', file, '--tag', 'job'])).code, 0)
    const ts = Number(/timestamp=(\d+)/.exec(fs.readFileSync(file, 'utf8'))[1])
    const s = await sema.status(file)
    assert.deepEqual(
      { isStale: s.isStale, reclaimRule: s.reclaimRule, reclaimableAt: s.reclaimableAt },
      { isStale: false, reclaimRule: 'age-and-pid-not-running', reclaimableAt: ts + 3601 },
    )
    const short = await sema.status(file, { staleTimeout: 10_000 })
    assert.equal(short.reclaimableAt, ts + 11, 'older than 10 s in whole seconds: from age 11 s')
    const cli = await require('./fixtures/cli/helpers').cli(['status', file, '--json'])
    const j = JSON.parse(cli.stdout)
    assert.deepEqual({ at: j.reclaimableAt, rule: j.reclaimRule }, { at: ts + 3601, rule: 'age-and-pid-not-running' })
    const text = await require('./fixtures/cli/helpers').cli(['status', file])
    assert.match(text.stdout, /\n {2}reclaimable: from .* if pid \d+ is not running then \(a lock of another tool: semats' rule/)
  })

  test("a live holder of ours: holder-dead, no time; once it is killed: stale, reclaimable now", async (t) => {
    const file = T.fresh('ours')
    const { child, kill } = await u.holder(file, {})
    t.after(() => kill())
    const s = await sema.status(file)
    assert.deepEqual({ rule: s.reclaimRule, at: s.reclaimableAt, stale: s.isStale }, { rule: 'holder-dead', at: null, stale: false })
    kill()
    await u.waitExit(child, 10000)
    const dead = await sema.status(file)
    assert.equal(dead.reclaimRule, 'holder-dead')
    assert.equal(dead.isStale, true)
    assert.ok(Math.abs(dead.reclaimableAt - Date.now() / 1000) < u.scaled(5), `reclaimable now: ${dead.reclaimableAt}`)
  })

  test('another host, unparseable, never, free', async () => {
    const other = T.fresh('other-host')
    const ts = Math.floor(Date.now() / 1000)
    fs.writeFileSync(other, `pid=1\ntimestamp=${ts}\nhost=elsewhere:boot:1\nstart=1\ntoken=ab\n`)
    // Another host: its heartbeat's progress on this process's clock (never its timestamp). No `heartbeat=` line:
    // the stale timeout, counted from this process's first look.
    const o = await sema.status(other, { staleTimeout: 60_000 })
    assert.equal(o.reclaimRule, 'heartbeat-unchanged')
    assert.ok(Math.abs(o.reclaimableAt - (Date.now() / 1000 + 60)) < u.scaled(5, 60), String(o.reclaimableAt))
    const garbage = T.fresh('garbage')
    fs.writeFileSync(garbage, 'not a lock')
    const g = await sema.status(garbage, { staleTimeout: 60_000 })
    assert.equal(g.reclaimRule, 'unparseable-age')
    assert.ok(Math.abs(g.reclaimableAt - (Date.now() / 1000 + 60)) < u.scaled(5, 60), String(g.reclaimableAt))
    const never = await sema.status(other, { staleTimeout: null })
    assert.deepEqual({ rule: never.reclaimRule, at: never.reclaimableAt }, { rule: 'never', at: null })
    const free = await sema.status(T.fresh('free'))
    assert.deepEqual({ rule: free.reclaimRule, at: free.reclaimableAt }, { rule: null, at: null })
  })
})
