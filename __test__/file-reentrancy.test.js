'use strict'
// withLock and async call chains: a nested withLock on a target the chain already holds would wait for itself
// forever; it rejects at once with ALREADY_LOCKED (the outer call goes on and releases normally). Independent
// concurrent withLock calls in one process still queue, in call order; a different target nests fine; a task that
// `fn` left running may take the lock after `fn` is done.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('reentrancy-', { name: 're' })
const { fresh } = tmp

/** A bound on a promise that must settle: a hang fails the test instead of stalling the suite. */
function settles(p, what) {
  return u.within(p, 10_000, what)
}

test('nested withLock on the same target rejects at once with ALREADY_LOCKED; the outer completes', async () => {
  const file = fresh()
  let innerRan = false
  const result = await settles(
    sema.withLock(file, async () => {
      await assert.rejects(
        sema.withLock(file, () => (innerRan = true)),
        (e) => {
          assert.ok(e instanceof sema.LockError)
          assert.equal(e.code, 'ALREADY_LOCKED')
          assert.match(e.message, /already holds this lock/)
          return true
        },
      )
      return 'outer done'
    }),
    'the outer withLock',
  )
  assert.equal(result, 'outer done')
  assert.equal(innerRan, false)
  assert.equal(fs.existsSync(file), false, 'released')
})

test('the same file named two ways (relative, file:// URL) is the same lock; deeper nesting is caught too', async () => {
  const file = fresh()
  const relative = path.relative(process.cwd(), file)
  const url = require('node:url').pathToFileURL(file).href
  const other = fresh()
  await settles(
    sema.withLock(file, () =>
      sema.withLock(other, async () => {
        for (const t of [relative, url]) {
          await assert.rejects(sema.withLock(t, () => {}), (e) => e.code === 'ALREADY_LOCKED')
        }
      }),
    ),
    'nested withLock',
  )
  assert.deepEqual(u.ls(tmp.dir).filter((f) => f.endsWith('.lock')), [])
})

test('independent concurrent withLock calls on one target still queue, in call order', async () => {
  const file = fresh()
  const order = []
  let inside = 0
  const results = await settles(
    Promise.all(
      [0, 1, 2, 3, 4].map((i) =>
        sema.withLock(file, async () => {
          inside++
          assert.equal(inside, 1, 'one at a time')
          order.push(i)
          await new Promise((r) => setImmediate(r))
          inside--
          return i
        }),
      ),
    ),
    'five queued withLock calls',
  )
  assert.deepEqual(results, [0, 1, 2, 3, 4])
  assert.deepEqual(order, [0, 1, 2, 3, 4])
})

test('a task fn started and left running may take the lock once fn is done', async () => {
  const file = fresh()
  let later
  await sema.withLock(file, () => {
    later = new Promise((r) => setImmediate(r)).then(() => sema.withLock(file, () => 'later'))
  })
  assert.equal(await settles(later, 'the task fn left running'), 'later')
})
