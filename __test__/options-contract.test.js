'use strict'
// The option contract, walked entry point by entry point: a misspelt name, a wrong type and a wrong unit each give
// INVALID_ARGUMENT naming the option (a failed result where the function returns one, a LockError where it throws),
// and an option of the other backend is refused, not dropped. Nothing is sent or written: every dflockd target points
// at a closed port (a call that got past the check would answer CONNECTION_ERROR), and no lock file is left behind.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('options-contract-', { name: 'options-contract' })

/** A loopback port with nothing listening on it. */
async function closedPort() {
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** Runs `call` and returns the coded error it produced, as a result, a rejection or a throw. */
async function codedError(call) {
  try {
    const r = await call()
    assert.equal(r && r.ok, false, `expected a failure, got ${JSON.stringify(r)}`)
    return { code: r.error.type, message: r.error.message }
  } catch (e) {
    assert.ok(e instanceof sema.LockError, `expected a LockError, got ${e}`)
    return { code: e.code, message: e.message }
  }
}

describe('every entry point refuses a misspelt name, a wrong type and a wrong unit', async () => {
  const port = await closedPort()
  const file = () => tmp.fresh('c')
  const url = `dflockd://127.0.0.1:${port}/contract`
  // [entry point, call with options] — each called with the bad options below.
  const entries = [
    ['acquire(file)', (o) => sema.acquire(file(), o)],
    ['tryAcquire(file)', (o) => sema.tryAcquire(file(), o)],
    ['withLock(file)', (o) => sema.withLock(file(), () => 'ran', o)],
    ['status(file)', (o) => sema.status(file(), o)],
    ['acquire(dflockd)', (o) => sema.acquire(url, o)],
    ['tryAcquire(dflockd)', (o) => sema.tryAcquire(url, o)],
    ['withLock(dflockd)', (o) => sema.withLock(url, () => 'ran', o)],
  ]
  const cases = [
    { what: 'misspelt name', options: { timeOut: 300 }, message: /unknown option 'timeOut' \(did you mean 'timeout'\?\)/ },
    { what: 'misspelt name', options: { staleTimout: 5 }, message: /unknown option 'staleTimout' \(did you mean 'staleTimeout'\?\)/ },
    { what: 'wrong type', options: { timeout: '5s' }, message: /timeout must be a number of milliseconds/ },
  ]
  for (const [name, call] of entries) {
    for (const c of cases) {
      if (name.startsWith('status') && c.options.timeout !== undefined) continue // status has no timeout
      if (name.startsWith('status') && c.options.timeOut !== undefined) {
        test(`${name}: ${c.what} ${JSON.stringify(c.options)}`, async () => {
          const e = await codedError(() => call(c.options))
          assert.equal(e.code, 'INVALID_ARGUMENT')
          assert.match(e.message, /unknown option 'timeOut'/)
        })
        continue
      }
      test(`${name}: ${c.what} ${JSON.stringify(c.options)}`, async () => {
        const e = await codedError(() => call(c.options))
        assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
        assert.match(e.message, c.message)
      })
    }
  }

  test('release: a misspelt name and a wrong type', async () => {
    for (const [options, message] of [
      [{ forse: true }, /unknown option 'forse' \(did you mean 'force'\?\)/],
      [{ force: 'yes' }, /force must be true or false/],
    ]) {
      const r = await sema.release(file(), options)
      assert.equal(r.ok, false)
      assert.equal(r.error.type, 'INVALID_ARGUMENT')
      assert.match(r.error.message, message)
    }
  })

  test('leaseTtl in milliseconds by habit is refused with its unit named', async () => {
    for (const call of [(o) => sema.acquire(url, o), (o) => sema.tryAcquire(url, o), (o) => sema.withLock(url, () => 'ran', o)]) {
      const e = await codedError(() => call({ leaseTtl: 30000 }))
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.match(e.message, /leaseTtl is in seconds: 30000 s is over 8 hours/)
      assert.match(e.message, /leaseTtl: 30\b/)
    }
    const e = await codedError(() => sema.acquire(url, { leaseTTL: 5 }))
    assert.match(e.message, /unknown option 'leaseTTL' \(did you mean 'leaseTtl'\?\)/)
  })

  test("an option of the other backend is refused, not dropped (a file given leaseTtl: 5 has no lease)", async () => {
    const f = file()
    for (const call of [(o) => sema.acquire(f, o), (o) => sema.tryAcquire(f, o), (o) => sema.withLock(f, () => 'ran', o)]) {
      const e = await codedError(() => call({ leaseTtl: 5 }))
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.match(e.message, /option 'leaseTtl' applies to dflockd:\/\/ targets only/)
    }
    assert.equal(fs.existsSync(f), false, 'no lock file was written')
    for (const [options, key] of [
      [{ staleTimeout: 1000 }, 'staleTimeout'],
      [{ fsync: false }, 'fsync'],
      [{ pid: 1 }, 'pid'],
    ]) {
      const e = await codedError(() => sema.tryAcquire(url, options))
      assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
      assert.match(e.message, new RegExp(`option '${key}' applies to file targets only`))
    }
    const s = await codedError(() => sema.status(url, { staleTimeout: 5 }))
    assert.match(s.message, /option 'staleTimeout' applies to file targets only/)
    const r = await sema.release(url, { force: true })
    assert.equal(r.error.type, 'INVALID_ARGUMENT')
    assert.match(r.error.message, /option 'force' applies to file targets only/)
  })

  test('null and undefined still mean the default, also for the other backend', async () => {
    const f = file()
    const r = await sema.tryAcquire(f, { limit: undefined, leaseTtl: null, timeout: undefined })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(await r.value.release(), true)
  })

  test('Semaphore: config and acquire options', async () => {
    assert.throws(() => new sema.Semaphore(file(), { stale: 5 }), (e) => e.code === 'INVALID_ARGUMENT' && /unknown config option 'stale' \(did you mean 'staleTimeout'\?\)/.test(e.message))
    assert.throws(() => new sema.Semaphore(file(), { retryInterval: '1s' }), (e) => e.code === 'INVALID_ARGUMENT' && /config\.retryInterval must be/.test(e.message))
    const s = new sema.Semaphore(file())
    const r = await s.acquire({ timout: 5 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'INVALID_ARGUMENT')
    assert.match(r.error.message, /unknown option 'timout' \(did you mean 'timeout'\?\)/)
    // A LockInfo is data, not options: its timestamp (and any other field) is accepted.
    const w = s.tryAcquireWithInfo({ pid: process.pid, timestamp: 1, tag: 't', extra: true })
    assert.equal(w.ok, true, JSON.stringify(w.error))
    assert.equal(s.release().ok, true)
  })
})

describe('the dflockd classes and functions refuse the same mistakes (thrown, dflockd-client style)', () => {
  const bad = (fn, message) => assert.throws(fn, (e) => e instanceof sema.LockError && e.code === 'INVALID_ARGUMENT' && message.test(e.message))
  test('DistributedLock and DistributedSemaphore: a misspelt name, a wrong type, a wrong unit', () => {
    bad(() => new sema.DistributedLock({ key: 'k', acquireTimeoutMs: 5 }), /unknown option 'acquireTimeoutMs' \(did you mean 'acquireTimeoutS'\?\)/)
    bad(() => new sema.DistributedLock({ key: 'k', renewRatio: '0.5' }), /renewRatio must be a number between 0 and 1/)
    bad(() => new sema.DistributedLock({ key: 'k', leaseTtlS: 30000 }), /leaseTtlS is in seconds: 30000 s is over 8 hours/)
    bad(() => new sema.DistributedSemaphore({ key: 'k', limit: 2, lmit: 3 }), /unknown option 'lmit' \(did you mean 'limit'\?\)/)
    bad(() => new sema.DistributedSemaphore({ key: 'k', limit: 2, leaseTtlS: 7200 }), /leaseTtlS is in seconds/)
  })
  test('Connection.connect and stats: a misspelt name and a wrong type, before any connection', async () => {
    const port = await closedPort()
    await assert.rejects(sema.Connection.connect({ port, socketTimeout: 5 }), (e) => e.code === 'INVALID_ARGUMENT' && /did you mean 'socketTimeoutMs'/.test(e.message))
    await assert.rejects(sema.stats({ port, connectTimeoutMs: '5' }), (e) => e.code === 'INVALID_ARGUMENT' && /connectTimeoutMs must be a positive number of milliseconds/.test(e.message))
  })
  test('a dflockd URL: an unknown parameter and ?leaseTtl= in milliseconds', async () => {
    const port = await closedPort()
    for (const [query, message] of [
      ['leaseTTL=5', /unknown parameter 'leaseTTL'/],
      ['leaseTtl=30000', /\?leaseTtl is in seconds: 30000 s is over 8 hours.*\?leaseTtl=30/],
    ]) {
      const r = await sema.tryAcquire(`dflockd://127.0.0.1:${port}/k?${query}`)
      assert.equal(r.error.type, 'INVALID_ARGUMENT')
      assert.match(r.error.message, message)
    }
  })
})

test('the README sentence on option checking names what is checked', () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')
  assert.match(readme, /unknown option/i)
})
