'use strict'
// SIGINT, SIGTERM and SIGHUP with locks held: when the program has no handler of its own, the locks are released
// and the process still dies of the signal (its parent sees the signal, as without sema-native); when it has its
// own handler, it keeps control (the lock stays, the process runs on) and its own exit releases the lock.
// Real child processes and real signals.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const u = require('./helpers/file-util')

const BOUND = 20_000

const tmp = u.testDir('signals-', { name: 'sig' })
const { fresh } = tmp

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  describe(signal, () => {
    for (const api of ['target', 'semats']) {
      test(`no handler of the program's own (${api} API): lock file gone, the process dies of ${signal}`, async () => {
        const file = fresh()
        const { child, kill } = await u.holder(file, api === 'semats' ? { api } : {}, { timeoutMs: BOUND })
        assert.ok(fs.existsSync(file))
        kill(signal)
        const r = await u.waitExit(child, BOUND, 'holder')
        assert.equal(r.signal, signal, `killed by the signal (code ${r.code}, stderr ${r.stderr})`)
        assert.equal(fs.existsSync(file), false, 'the lock was released')
      })
    }

    test("the program's own handler keeps control: the process runs on holding the lock; its exit releases it", async () => {
      const file = fresh()
      const { child, out, kill } = await u.holder(file, { handle: signal }, { timeoutMs: BOUND })
      kill(signal) // by pid: this holder must still read its stdin after the signal (Deno's ChildProcess.kill() ends it)
      await out.next(new RegExp(`^handled ${signal}$`), BOUND)
      assert.ok(fs.existsSync(file), 'still held while the program decides')
      child.stdin.write('exit\n')
      const r = await u.waitExit(child, BOUND, 'holder')
      assert.deepEqual([r.code, r.signal], [0, null])
      assert.equal(fs.existsSync(file), false, 'released by its own exit')
    })
  })
}

test('a lock recorded for another owner (pid) is not released by a signal: it is that owner\'s', async () => {
  const file = fresh()
  const owner = await u.liveSleeper()
  const { child, kill } = await u.holder(file, { pid: owner.pid }, { timeoutMs: BOUND })
  kill('SIGTERM')
  const r = await u.waitExit(child, BOUND, 'holder')
  assert.equal(r.signal, 'SIGTERM')
  assert.ok(fs.existsSync(file), "the other owner's lock stays")
  assert.ok(fs.readFileSync(file, 'utf8').startsWith(`pid=${owner.pid}\n`))
  owner.kill('SIGKILL')
})
