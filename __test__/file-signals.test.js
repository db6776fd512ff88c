'use strict'
// SIGINT, SIGTERM and SIGHUP with locks held: when the program has no handler of its own, the locks are released
// and the process still dies of the signal (its parent sees the signal, as without sema-native); when it has its
// own handler, it keeps control (the lock stays, the process runs on) and its own exit releases the lock.
// Real child processes and real signals.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const u = require('./helpers/file-util')

const ROOT = path.resolve(__dirname, '..')
const BOUND = 20_000

const tmp = u.testDir('signals-', { name: 'sig' })
const { fresh } = tmp

/**
 * A child that takes `file` through `api` ('target' or 'semats'), optionally installs its own handler for
 * `handled`, prints `held`, and stays alive (stdin open). On `exit` it calls process.exit(0).
 */
function holder(file, api, handled) {
  const script = `
    const sema = require(${JSON.stringify(ROOT)})
    const [file, api, handled] = process.argv.slice(1)
    if (handled) process.on(handled, () => console.log('handled ' + handled))
    ;(async () => {
      const r = api === 'semats' ? new sema.Semaphore(file).tryAcquire() : await sema.acquire(file)
      if (!r.ok) { console.log('failed ' + r.error.message); process.exit(1) }
      console.log('held')
      process.stdin.on('data', (d) => { if (String(d).includes('exit')) process.exit(0) })
    })()
  `
  return u.spawnTracked(process.execPath, ['-e', script, file, api, handled ?? ''])
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  describe(signal, () => {
    for (const api of ['target', 'semats']) {
      test(`no handler of the program's own (${api} API): lock file gone, the process dies of ${signal}`, async () => {
        const file = fresh()
        const child = holder(file, api)
        await u.lines(child).next(/^held$/, BOUND)
        assert.ok(fs.existsSync(file))
        child.kill(signal)
        const r = await u.waitExit(child, BOUND, 'holder')
        assert.equal(r.signal, signal, `killed by the signal (code ${r.code}, stderr ${r.stderr})`)
        assert.equal(fs.existsSync(file), false, 'the lock was released')
      })
    }

    test("the program's own handler keeps control: the process runs on holding the lock; its exit releases it", async () => {
      const file = fresh()
      const child = holder(file, 'target', signal)
      const out = u.lines(child)
      await out.next(/^held$/, BOUND)
      child.kill(signal)
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
  const script = `
    const sema = require(${JSON.stringify(ROOT)})
    sema.acquire(process.argv[1], { pid: Number(process.argv[2]) }).then((r) => {
      console.log(r.ok ? 'held' : 'failed')
      setInterval(() => {}, 1000)
    })
  `
  const child = u.spawnTracked(process.execPath, ['-e', script, file, String(owner.pid)])
  await u.lines(child).next(/^held$/, BOUND)
  child.kill('SIGTERM')
  const r = await u.waitExit(child, BOUND, 'holder')
  assert.equal(r.signal, 'SIGTERM')
  assert.ok(fs.existsSync(file), "the other owner's lock stays")
  assert.ok(fs.readFileSync(file, 'utf8').startsWith(`pid=${owner.pid}\n`))
  owner.kill('SIGKILL')
})
