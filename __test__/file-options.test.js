'use strict'
// Every input read once, every failure a result (issue 22 point 5). At the boundary of each entry point
// (acquire, tryAcquire, withLock, release, status; the Semaphore class, its config, its acquire options and
// tryAcquireWithInfo's info) the options are read once into a snapshot:
//   - each getter is called exactly once (counted), also for dflockd targets (the snapshot is taken before dispatch);
//   - a getter that answers with another type on its second read changes nothing (nobody reads it twice);
//   - a getter that throws is INVALID_ARGUMENT naming the option (`type` set, never undefined);
//   - an object that is not a usable AbortSignal is refused with INVALID_ARGUMENT before anything is taken;
//   - acquire/tryAcquire never reject, and leave no lock behind: after each bad input the file does not exist and
//     another process's tryAcquire succeeds.

const { test, describe, before } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const net = require('node:net')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('options-')

/** Valid values for every acquire option of a file target (the dflockd-only ones read as undefined). */
const ACQUIRE_VALUES = {
  timeout: 2000,
  signal: new AbortController().signal,
  tag: 'snap',
  onLost: () => {},
  staleTimeout: 3_600_000,
  retryInterval: 50,
  fsync: false,
  heartbeat: 1000,
  maxTagLength: 100,
  pid: undefined,
  leaseTtl: undefined,
  limit: undefined,
  mode: undefined,
  tls: undefined,
  auth: undefined,
  connectTimeoutMs: undefined,
  socketTimeoutMs: undefined,
  renewRatio: undefined,
  renewMaxIntervalMs: undefined,
}

/**
 * An options object whose every key is a getter: `reads[key]` counts the calls; `second` (if given) is what each
 * getter answers from its second read on.
 */
function counted(values, second) {
  const reads = {}
  const options = {}
  for (const [key, value] of Object.entries(values)) {
    reads[key] = 0
    Object.defineProperty(options, key, {
      enumerable: true,
      get() {
        reads[key]++
        return reads[key] > 1 && second ? second(key, value) : value
      },
    })
  }
  return { options, reads }
}

function assertEachReadOnce(reads, what) {
  for (const [key, n] of Object.entries(reads)) assert.equal(n, 1, `${what}: options.${key} read ${n} times`)
}

/** A value of another type than `value` (what a getter answers on a second read). */
function otherType(key, value) {
  if (typeof value === 'number') return 'soon'
  if (typeof value === 'string') return 42
  if (typeof value === 'boolean') return 'yes'
  if (typeof value === 'function' || typeof value === 'object') return 7
  return { surprise: key }
}

/** Another process takes and releases the lock at `file` at once (nothing of ours is left on it). */
function childCanTake(file) {
  const script =
    `require(${JSON.stringify(u.ROOT)}).tryAcquire(${JSON.stringify(file)}).then(async (r) => {` +
    ` console.log(r.ok ? 'took' : 'refused ' + r.error.type); if (r.ok) await r.value.release() })`
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: u.scaled(20000) })
  return r.stdout.trim() || `no answer: ${r.stderr}`
}

/** Nothing was taken: no lock file, and another process gets the lock at once. */
function assertNothingTaken(file, what) {
  assert.equal(fs.existsSync(file), false, `${what}: no lock file left`)
  assert.equal(childCanTake(file), 'took', `${what}: another process takes the lock`)
}

async function settled(promise, what) {
  try {
    return await promise
  } catch (e) {
    assert.fail(`${what} rejected (it must resolve a SemaphoreResult): ${e && e.stack}`)
  }
}

describe('each option is read once (file targets)', () => {
  for (const [name, call] of [
    ['acquire', (f, o) => sema.acquire(f, o)],
    ['tryAcquire', (f, o) => sema.tryAcquire(f, o)],
  ]) {
    test(`${name}: every getter called once; a second read of another type changes nothing`, async () => {
      const file = tmp.fresh()
      const { options, reads } = counted(ACQUIRE_VALUES)
      const r = await settled(call(file, options), name)
      assert.equal(r.ok, true, JSON.stringify(r.error))
      assertEachReadOnce(reads, name)
      assert.equal(await r.value.release(), true)

      const flip = counted(ACQUIRE_VALUES, otherType)
      const again = await settled(call(file, flip.options), name)
      assert.equal(again.ok, true, `a getter's second answer was used: ${JSON.stringify(again.error)}`)
      assert.equal(again.value.tag, 'snap')
      assertEachReadOnce(flip.reads, `${name} (flip)`)
      assert.equal(await again.value.release(), true)
    })
  }

  test('withLock: every getter called once', async () => {
    const file = tmp.fresh()
    const { options, reads } = counted(ACQUIRE_VALUES, otherType)
    assert.equal(await sema.withLock(file, (lock) => lock.tag, options), 'snap')
    assertEachReadOnce(reads, 'withLock')
  })

  test('release(path) and status(path): every getter called once', async () => {
    const file = tmp.fresh()
    const r = await sema.tryAcquire(file, { pid: 1 })
    assert.equal(r.ok, true)
    const s = counted({ staleTimeout: 3_600_000, tls: undefined, auth: undefined, connectTimeoutMs: undefined, socketTimeoutMs: undefined }, otherType)
    const st = await sema.status(file, s.options)
    assert.equal(st.locked, true)
    assertEachReadOnce(s.reads, 'status')
    // pid 1 the first time (the recorded owner), a string on a second read: released by the first answer.
    const rel = counted({ force: undefined, pid: 1 }, otherType)
    const done = await sema.release(file, rel.options)
    assert.equal(done.ok, true, JSON.stringify(done.error))
    assertEachReadOnce(rel.reads, 'release')
    assert.equal(fs.existsSync(file), false)
  })

  test('Semaphore: config, acquire options and tryAcquireWithInfo info are each read once', async () => {
    const file = tmp.fresh()
    const config = counted(
      { staleTimeout: 3_600_000, retryInterval: 50, acquireTimeout: 1000, maxTagLength: 100, fsync: false, heartbeat: 1000 },
      otherType,
    )
    const sem = new sema.Semaphore(file, config.options)
    assertEachReadOnce(config.reads, 'Semaphore config')
    const acq = counted({ timeout: 1000, tag: 'snap', signal: new AbortController().signal }, otherType)
    const r = await settled(sem.acquire(acq.options), 'Semaphore#acquire')
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assertEachReadOnce(acq.reads, 'Semaphore#acquire')
    assert.equal(sem.release().ok, true)
    const info = counted({ pid: process.pid, timestamp: 1, tag: 'info' }, otherType)
    const t = sem.tryAcquireWithInfo(info.options)
    assert.equal(t.ok, true, JSON.stringify(t.error))
    assert.equal(t.value.tag, 'info')
    assert.equal(info.reads.pid, 1)
    assert.equal(info.reads.tag, 1)
    assert.equal(sem.release().ok, true)
    assert.equal(fs.existsSync(file), false)
  })

  test("Semaphore config snapshot keeps semats' meaning: an own key that reads undefined replaces the default", async () => {
    const file = tmp.fresh()
    fs.writeFileSync(file, `pid=${await u.deadPid()}\ntimestamp=1\n`) // other tools' file, dead pid, 1970
    assert.equal(new sema.Semaphore(file).status().isStale, true, 'default staleTimeout: 1 h')
    // semats: {...DEFAULT_CONFIG, ...config} with staleTimeout: undefined never expires.
    const getter = Object.defineProperty({}, 'staleTimeout', { enumerable: true, get: () => undefined })
    assert.equal(new sema.Semaphore(file, getter).status().isStale, false)
    assert.equal(new sema.Semaphore(file, { staleTimeout: undefined }).status().isStale, false)
    fs.unlinkSync(file)
  })
})

describe('a getter that throws is INVALID_ARGUMENT naming the option; nothing is taken', () => {
  const boom = () => {
    throw new RangeError('getter exploded')
  }
  const throwing = (key) => Object.defineProperty({}, key, { enumerable: true, get: boom })

  for (const key of ['timeout', 'signal', 'tag', 'onLost', 'staleTimeout', 'fsync', 'pid']) {
    test(`acquire / tryAcquire with options.${key} throwing`, async () => {
      for (const [name, call] of [
        ['acquire', sema.acquire],
        ['tryAcquire', sema.tryAcquire],
      ]) {
        const file = tmp.fresh()
        const r = await settled(call(file, throwing(key)), name)
        assert.equal(r.ok, false)
        assert.equal(r.error.type, 'INVALID_ARGUMENT', `${name}: ${JSON.stringify(r.error)}`)
        assert.match(r.error.message, new RegExp(`\\b${key}\\b.*getter exploded`))
        assertNothingTaken(file, `${name} options.${key}`)
      }
    })
  }

  test('a revoked proxy as options: INVALID_ARGUMENT, never a rejection', async () => {
    const file = tmp.fresh()
    const { proxy, revoke } = Proxy.revocable({}, {})
    revoke()
    for (const call of [sema.acquire, sema.tryAcquire, sema.release]) {
      const r = await settled(call(file, proxy), call.name)
      assert.deepEqual([r.ok, r.error.type], [false, 'INVALID_ARGUMENT'], JSON.stringify(r.error))
    }
    await assert.rejects(sema.status(file, proxy), { code: 'INVALID_ARGUMENT' })
    assertNothingTaken(file, 'revoked proxy')
  })

  test('withLock rejects, status rejects, release resolves: all INVALID_ARGUMENT with the option named', async () => {
    const file = tmp.fresh()
    await assert.rejects(sema.withLock(file, () => assert.fail('fn must not run'), throwing('timeout')), (e) => {
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.equal(e.type, 'INVALID_ARGUMENT')
      assert.match(e.message, /timeout could not be read/)
      return true
    })
    await assert.rejects(sema.status(file, throwing('staleTimeout')), { code: 'INVALID_ARGUMENT', message: /staleTimeout could not be read/ })
    const rel = await settled(sema.release(file, throwing('force')), 'release')
    assert.deepEqual([rel.ok, rel.error.type], [false, 'INVALID_ARGUMENT'])
    assert.match(rel.error.message, /force could not be read/)
    assertNothingTaken(file, 'withLock')
  })

  test('Semaphore: config getter throws → the constructor throws INVALID_ARGUMENT; acquire/info → failed results', async () => {
    const file = tmp.fresh()
    assert.throws(() => new sema.Semaphore(file, throwing('staleTimeout')), {
      code: 'INVALID_ARGUMENT',
      message: /config\.staleTimeout could not be read/,
    })
    const sem = new sema.Semaphore(file)
    const r = await settled(sem.acquire(throwing('timeout')), 'Semaphore#acquire')
    assert.deepEqual([r.ok, r.error.type], [false, 'INVALID_ARGUMENT'])
    assert.match(r.error.message, /timeout could not be read/)
    const t = sem.tryAcquireWithInfo(throwing('pid'))
    assert.deepEqual([t.ok, t.error.type], [false, 'INVALID_ARGUMENT'])
    assert.match(t.error.message, /info\.pid could not be read/)
    assertNothingTaken(file, 'Semaphore')
  })
})

describe('an object that is not a usable AbortSignal is refused before anything is taken', () => {
  const listeners = { addEventListener() {}, removeEventListener() {} }
  const bad = {
    'no removeEventListener': { aborted: false, addEventListener() {} },
    'no addEventListener': { aborted: false, removeEventListener() {} },
    'no aborted': { ...listeners },
    'aborted is not a boolean': { aborted: 'no', ...listeners },
    'aborted getter throws': Object.defineProperty({ ...listeners }, 'aborted', {
      get() {
        throw new Error('nope')
      },
    }),
    'a function': Object.assign(() => {}, { aborted: false, ...listeners }),
  }
  for (const [what, signal] of Object.entries(bad)) {
    test(`signal: ${what}`, async () => {
      const file = tmp.fresh()
      for (const [name, call] of [
        ['acquire', (o) => sema.acquire(file, o)],
        ['tryAcquire', (o) => sema.tryAcquire(file, o)],
        ['Semaphore#acquire', (o) => new sema.Semaphore(file).acquire(o)],
      ]) {
        const r = await settled(call({ signal, timeout: 500 }), name)
        assert.equal(r.ok, false, `${name} took the lock`)
        assert.equal(r.error.type, 'INVALID_ARGUMENT', `${name}: ${JSON.stringify(r.error)}`)
        assert.match(r.error.message, /signal/)
      }
      assertNothingTaken(file, what)
    })
  }

  test('a stand-in whose removeEventListener throws: the lock is handed over (a usable handle), never stranded', async () => {
    const file = tmp.fresh()
    const signal = {
      aborted: false,
      addEventListener() {},
      removeEventListener() {
        throw new TypeError('cannot detach')
      },
    }
    const r = await settled(sema.acquire(file, { signal }), 'acquire')
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(await r.value.release(), true)
    assertNothingTaken(file, 'after release')
    const s = await settled(new sema.Semaphore(file).acquire({ signal }), 'Semaphore#acquire')
    assert.equal(s.ok, true, JSON.stringify(s.error))
    assert.equal(new sema.Semaphore(file).release().ok, true)
    assertNothingTaken(file, 'after Semaphore release')
  })

  test('a stand-in whose addEventListener throws: INVALID_ARGUMENT, nothing taken', async () => {
    const file = tmp.fresh()
    const signal = {
      aborted: false,
      addEventListener() {
        throw new TypeError('cannot attach')
      },
      removeEventListener() {},
    }
    const r = await settled(sema.acquire(file, { signal, timeout: 500 }), 'acquire')
    assert.deepEqual([r.ok, r.error?.type], [false, 'INVALID_ARGUMENT'])
    assertNothingTaken(file, 'addEventListener throws')
  })
})

describe('dflockd targets: the snapshot is taken before dispatch', () => {
  let url
  before(async () => {
    // A port nothing listens on: a call that got past the boundary fails with CONNECTION_ERROR at once.
    const server = net.createServer()
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address()
    await new Promise((resolve) => server.close(resolve))
    url = `dflockd://127.0.0.1:${port}/options-key`
  })

  const dflockdValues = {
    timeout: 500,
    signal: new AbortController().signal,
    onLost: () => {},
    leaseTtl: 5,
    limit: 1,
    connectTimeoutMs: 500,
    socketTimeoutMs: 500,
    renewRatio: 0.5,
    renewMaxIntervalMs: 1000,
    tag: undefined,
    tls: undefined,
    auth: undefined,
  }

  test('acquire / tryAcquire / status: every getter called once', async () => {
    for (const [name, call] of [
      ['acquire', (o) => sema.acquire(url, o)],
      ['tryAcquire', (o) => sema.tryAcquire(url, o)],
    ]) {
      const { options, reads } = counted(dflockdValues, otherType)
      const r = await settled(call(options), name)
      assert.equal(r.ok, false)
      assert.equal(r.error.type, 'CONNECTION_ERROR', `${name}: ${JSON.stringify(r.error)}`)
      assertEachReadOnce(reads, `${name} (dflockd)`)
    }
    const s = counted({ connectTimeoutMs: 500, socketTimeoutMs: 500, tls: undefined, auth: undefined, staleTimeout: undefined }, otherType)
    await assert.rejects(sema.status(url, s.options), { code: 'CONNECTION_ERROR' })
    assertEachReadOnce(s.reads, 'status (dflockd)')
  })

  test('a throwing getter and an unusable signal: INVALID_ARGUMENT, nothing sent', async () => {
    const throwing = Object.defineProperty({}, 'leaseTtl', {
      enumerable: true,
      get() {
        throw new Error('getter exploded')
      },
    })
    const r = await settled(sema.acquire(url, throwing), 'acquire')
    assert.deepEqual([r.ok, r.error.type], [false, 'INVALID_ARGUMENT'])
    assert.match(r.error.message, /leaseTtl could not be read/)
    const s = await settled(sema.tryAcquire(url, { signal: { aborted: false, addEventListener() {} } }), 'tryAcquire')
    assert.deepEqual([s.ok, s.error.type], [false, 'INVALID_ARGUMENT'])
  })
})
