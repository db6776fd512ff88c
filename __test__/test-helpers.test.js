'use strict'
// The test-helpers module itself (__test__/helpers/file-util.js): the one time factor, until() and holder(), so
// that a helper every suite relies on cannot quietly stop bounding or stop waiting.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const u = require('./helpers/file-util')

const tmp = u.testDir('helpers-', { name: 'h' })

/** scaled(...args) as a process with SEMA_TEST_TIME_SCALE=`scale` computes it. */
function scaledWith(scale, ...args) {
  const env = { ...process.env, SEMA_TEST_TIME_SCALE: scale }
  const code = `console.log(require(${JSON.stringify(path.join(__dirname, 'helpers', 'file-util'))}).scaled(...${JSON.stringify(args)}))`
  const r = spawnSync(process.execPath, ['-e', code], { env, encoding: 'utf8', timeout: u.scaled(15_000) })
  assert.equal(r.status, 0, r.stderr)
  return Number(r.stdout)
}

test('scaled(): SEMA_TEST_TIME_SCALE widens a bound, never past `below`, and never tightens it', () => {
  assert.equal(scaledWith('4', 500), 2000)
  assert.equal(scaledWith('4', 500, 1000), 1000, 'capped at the duration the defect would take')
  assert.equal(scaledWith('0.5', 500), 500, 'a factor under 1 is read as 1')
  assert.equal(scaledWith('nonsense', 500), 500)
  assert.equal(scaledWith('', 500), 500)
})

test('until(): resolves the first truthy value; rejects at its deadline naming what and the state last seen', async () => {
  let n = 0
  assert.equal(await u.until(() => ++n >= 3 && 'ready', { intervalMs: 1 }), 'ready')
  assert.equal(n, 3)
  assert.equal(await u.until(async () => 42), 42, 'an async predicate')
  const t0 = Date.now()
  await assert.rejects(u.until(() => false, { timeoutMs: 50, what: 'never', last: () => ({ n }) }), /^Error: never: not reached within \d+ ms; last seen: \{"n":3\}$/)
  assert.ok(Date.now() - t0 >= 50, 'not before its deadline')
  await assert.rejects(u.until(() => {
    throw new Error('boom')
  }), /boom/, "a predicate's error is not swallowed")
})

test('holder(): resolves once the child holds; release() releases, kill() crashes it, leaving its file', async () => {
  const file = tmp.fresh()
  const a = await u.holder(file, { tag: 'a' })
  assert.equal(a.held.pid, a.child.pid)
  assert.equal(u.readLockKeys(file).tag, 'a')
  assert.equal(await a.release(), true)
  assert.equal(fs.existsSync(file), false)
  assert.equal((await u.waitExit(a.child, 5000)).code, 0, 'its stdin ended: it exits')

  const b = await u.holder(file)
  const waiting = u.spawnHolder(file, { timeout: 10_000 })
  const { signal } = await b.kill()
  assert.equal(signal, 'SIGKILL')
  assert.equal((await waiting.held).pid, waiting.child.pid, 'the waiter took the crashed holder’s lock')
  await waiting.kill()
})

test('spawnHolder(): `held` rejects when the child cannot take the lock', async () => {
  const file = tmp.fresh()
  const a = await u.holder(file)
  const b = u.spawnHolder(file, { timeout: 0 })
  await assert.rejects(b.held, /stdout ended before a line matching/)
  assert.match(b.child.stdoutText, /^failed .*TIMEOUT/)
  await a.kill()
})

test('lines(): next() without a predicate is the next line; unread() counts the lines nobody consumed', async () => {
  const child = u.spawnTracked(process.execPath, ['-e', "console.log('a\\nb\\nc')"])
  child.stdin.end()
  await child.closed
  const out = u.lines(child)
  assert.equal(out.unread(), 3)
  assert.equal(await out.next(/^b$/), 'b')
  assert.equal(out.unread(), 2)
  assert.equal(await out.next(), 'a')
  assert.equal(await out.next(), 'c')
  assert.equal(out.unread(), 0)
  await assert.rejects(out.next(), /stdout ended before a line matching/)
})

test('signalChild(): signals by pid, so a stopped and continued holder still reads its stdin', { skip: process.platform === 'win32' && 'POSIX signals' }, async () => {
  const h = await u.holder(tmp.fresh())
  u.signalChild(h.child, 'SIGSTOP')
  u.signalChild(h.child, 'SIGCONT')
  assert.equal(await h.release(), true, 'its stdin stayed open across the signals')
  assert.equal((await u.waitExit(h.child, 5000)).code, 0)
})
