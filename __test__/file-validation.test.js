'use strict'
// One validation path for every entry point: a wrong option type or value gives INVALID_ARGUMENT naming the option
// and the value, through the channel the typings promise — a failed SemaphoreResult from acquire, tryAcquire,
// release and semats' methods (never a rejection), a LockError rejection from status and withLock, a LockError
// throw from the Semaphore constructor — never a raw napi error, a TypeError or a silent coercion. File and dflockd
// targets agree (the check runs before the backend is chosen: nothing is created, nothing is sent).

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('validation-', { name: 'v' })
const { fresh } = tmp

// Port 1 on loopback: if validation let a bad option through, the attempt would fail with CONNECTION_ERROR instead.
const DFLOCKD = 'dflockd://127.0.0.1:1/validation'

/** [what, options, pattern the message must match (the option's name and the value)]. */
const BAD_ACQUIRE_OPTIONS = [
  ['tag: 123', { tag: 123 }, /^tag must be a string, got 123$/],
  ["pid: '123'", { pid: '123' }, /^pid must be a process id .*, got "123"$/],
  ['signal: {}', { signal: {} }, /^signal must be an AbortSignal, got an object \(Object\)$/],
  ['options: null', null, /^options must be an object, got null$/],
  ["options: 'x'", 'x', /^options must be an object, got "x"$/],
  ['heartbeat: -1', { heartbeat: -1 }, /^heartbeat must be .*, got -1$/],
  ['timeout: NaN', { timeout: NaN }, /^timeout must be .*, got NaN$/],
  ["timeout: '5s'", { timeout: '5s' }, /^timeout must be .*, got "5s"$/],
  ['timeout: -1', { timeout: -1 }, /^timeout must be .*, got -1$/],
  ["retryInterval: 'fast'", { retryInterval: 'fast' }, /^retryInterval must be .*, got "fast"$/],
  ['retryInterval: 0', { retryInterval: 0 }, /^retryInterval must be .*, got 0$/],
  ["staleTimeout: '1h'", { staleTimeout: '1h' }, /^staleTimeout must be .*, got "1h"$/],
  ["fsync: 'no'", { fsync: 'no' }, /^fsync must be true or false, got "no"$/],
  ['maxTagLength: -1', { maxTagLength: -1 }, /^maxTagLength must be an integer >= 0, got -1$/],
  ['pid: NaN', { pid: NaN }, /^pid must be a process id .*, got NaN$/],
  ['pid: 1.5', { pid: 1.5 }, /^pid must be a process id .*, got 1\.5$/],
  ['pid: -1', { pid: -1 }, /^pid must be a process id .*, got -1$/],
  ['pid: 2**32+5', { pid: 2 ** 32 + 5 }, /^pid must be a process id .*, got 4294967301$/],
  ["onLost: 'x'", { onLost: 'x' }, /^onLost must be a function, got "x"$/],
  ["leaseTtl: '10'", { leaseTtl: '10' }, /^leaseTtl must be a whole number of seconds >= 1 \(the protocol's unit, as \?leaseTtl= in a URL\), got "10"$/],
]

function assertInvalid(r, pattern) {
  assert.equal(r.ok, false)
  assert.equal(r.error.type, 'INVALID_ARGUMENT')
  assert.match(r.error.message, pattern)
}

describe('acquire / tryAcquire: a failed result, never a rejection; file and dflockd agree', () => {
  for (const [what, options, pattern] of BAD_ACQUIRE_OPTIONS) {
    test(what, async () => {
      const file = fresh()
      for (const target of [file, DFLOCKD]) {
        assertInvalid(await sema.acquire(target, options), pattern)
        assertInvalid(await sema.tryAcquire(target, options), pattern)
      }
      assert.equal(fs.existsSync(file), false, 'nothing created')
    })
  }
})

describe('release / status / withLock', () => {
  test('release: bad options give a failed result', async () => {
    const file = fresh()
    assertInvalid(await sema.release(file, { force: 'yes' }), /^force must be true or false, got "yes"$/)
    assertInvalid(await sema.release(file, { pid: 1.5 }), /^pid must be a process id .*, got 1\.5$/)
    assertInvalid(await sema.release(file, null), /^options must be an object, got null$/)
  })

  test('status: rejects with a LockError INVALID_ARGUMENT', async () => {
    await assert.rejects(sema.status(fresh(), { staleTimeout: '1h' }), (e) => {
      assert.ok(e instanceof sema.LockError)
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.match(e.message, /^staleTimeout must be .*, got "1h"$/)
      return true
    })
  })

  test('withLock: rejects with a LockError INVALID_ARGUMENT, fn never runs, nothing created', async () => {
    const file = fresh()
    let ran = false
    for (const options of [{ timeout: '5s' }, { tag: 1 }, null]) {
      await assert.rejects(
        sema.withLock(file, () => (ran = true), options),
        (e) => e instanceof sema.LockError && e.code === 'INVALID_ARGUMENT',
      )
    }
    assert.equal(ran, false)
    assert.equal(fs.existsSync(file), false)
  })
})

describe('Semaphore (semats drop-in)', () => {
  test('bad config: the constructor throws a LockError INVALID_ARGUMENT naming config.<option>', () => {
    const cases = [
      [{ staleTimeout: '1h' }, /^config\.staleTimeout must be .*, got "1h"$/],
      [{ retryInterval: 'fast' }, /^config\.retryInterval must be .*, got "fast"$/],
      [{ fsync: 'no' }, /^config\.fsync must be true or false, got "no"$/],
      [{ maxTagLength: -1 }, /^config\.maxTagLength must be an integer >= 0, got -1$/],
      [{ heartbeat: -1 }, /^config\.heartbeat must be .*, got -1$/],
      [{ acquireTimeout: NaN }, /^config\.acquireTimeout must be .*, got NaN$/],
      [null, /^config must be an object, got null$/],
    ]
    for (const [config, pattern] of cases) {
      assert.throws(
        () => new sema.Semaphore(fresh(), config),
        (e) => e instanceof sema.LockError && e.code === 'INVALID_ARGUMENT' && pattern.test(e.message),
        JSON.stringify(config),
      )
    }
  })

  test('methods: failed results, nothing created', async () => {
    const file = fresh()
    const s = new sema.Semaphore(file)
    assertInvalid(s.tryAcquire(123), /^tag must be a string, got 123$/)
    assertInvalid(s.tryAcquireWithInfo({ pid: 1.5, timestamp: 0 }), /^info\.pid must be a process id .*, got 1\.5$/)
    assertInvalid(s.tryAcquireWithInfo({ pid: -1, timestamp: 0 }), /^info\.pid must be .*, got -1$/)
    assertInvalid(s.tryAcquireWithInfo({ pid: process.pid, tag: 5, timestamp: 0 }), /^info\.tag must be a string, got 5$/)
    assertInvalid(await s.acquire({ timeout: '5s' }), /^timeout must be .*, got "5s"$/)
    assertInvalid(await s.acquire({ signal: {} }), /^signal must be an AbortSignal/)
    assertInvalid(await s.acquire(null), /^options must be an object, got null$/)
    assertInvalid(await s.acquireTimeout(NaN), /^timeout must be .*, got NaN$/)
    assert.equal(fs.existsSync(file), false)
  })
})

describe('good values still work (nothing valid is refused)', () => {
  test('null/undefined mean the default; Infinity waits forever; heartbeat false/0 is off', async () => {
    for (const options of [
      undefined,
      {},
      { timeout: null, tag: null, signal: null, pid: null, onLost: null },
      { timeout: Infinity },
      { timeout: 0 },
      { heartbeat: false, staleTimeout: null },
      { heartbeat: 0, retryInterval: null, fsync: null, maxTagLength: null },
      { pid: process.pid, maxTagLength: 0, fsync: false, retryInterval: 5, staleTimeout: 0 },
    ]) {
      const file = fresh()
      const r = await sema.acquire(file, options)
      assert.equal(r.ok, true, `${JSON.stringify(options)}: ${r.ok || r.error.message}`)
      assert.equal(await r.value.release(), true)
    }
  })

  test('a timeout of Infinity is a wait, not a single attempt', async () => {
    const file = fresh()
    const first = await sema.acquire(file)
    assert.equal(first.ok, true)
    const second = sema.acquire(file, { timeout: Infinity })
    // A single attempt would have failed at once (the lock is held until the next line): it must get the lock.
    assert.equal(await first.value.release(), true)
    const r = await second
    assert.equal(r.ok, true, r.ok || r.error.message)
    assert.equal(await r.value.release(), true)
  })
})
