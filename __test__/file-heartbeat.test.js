'use strict'
// Heartbeat: a held lock refreshes its `timestamp=`; when the file is removed, replaced (rename over it), or
// overwritten in place from outside, `lock.signal` aborts (LOCK_LOST), `onLost` runs exactly once, the
// replacement is left alone, and the holder process then exits normally on its own.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const u = require('./helpers/file-util')
const sema = require('..')

const HEARTBEAT = 100

const tmp = u.testDir('heartbeat-', { name: 'hb', own: true })
const { fresh } = tmp

describe('heartbeat keeps a held lock fresh', () => {
  test('timestamp= is refreshed while held; pid, token and the other lines stay; the lock is not lost', { timeout: u.scaled(10000) }, async () => {
    const file = fresh('refresh')
    const r = await sema.acquire(file, { heartbeat: HEARTBEAT, tag: 'hb' })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const lock = r.value
    try {
      const first = u.readLockKeys(file)
      const t0 = Number(first.timestamp)
      const later = await u.whenFile(file, (c) => c && Number(/^timestamp=(\d+)$/m.exec(c)?.[1]) > t0, 4000, 'timestamp refresh')
      const keys = u.readLockKeys(file)
      assert.ok(Number(keys.timestamp) > t0)
      assert.equal(keys.pid, String(process.pid))
      assert.equal(keys.token, lock.token)
      assert.equal(keys.tag, 'hb')
      const { timestamp: _a, ...restBefore } = first
      const { timestamp: _b, heartbeat, ...restAfter } = keys
      // The beats record their period: waiters on another host judge the holder by it (stale::remote).
      assert.equal(heartbeat, String(HEARTBEAT), 'heartbeat= names the period')
      assert.deepEqual(restAfter, restBefore, 'only the timestamp changes (and the period is recorded)')
      assert.ok(later.startsWith(`pid=${process.pid}\ntimestamp=`), 'layout kept')
      assert.equal(lock.signal.aborted, false)
      assert.equal(lock.released, false)
    } finally {
      assert.equal(await lock.release(), true)
    }
    assert.equal(fs.existsSync(file), false)
    assert.deepEqual(u.ls(path.dirname(file)), [], 'nothing left behind')
  })
})

/** A foreign lock held by this (live) test process: nobody may treat it as stale. */
const replacement = () => `pid=${process.pid}\ntimestamp=${u.nowS()}\ntag=replacement\n`

const disturbances = {
  'removed (unlink)': (file) => {
    fs.unlinkSync(file)
    return null
  },
  'replaced (rename a new file over it)': (file) => {
    const tmp = `${file}.outside`
    const body = replacement()
    fs.writeFileSync(tmp, body)
    fs.renameSync(tmp, file)
    return body
  },
  'overwritten in place (same inode)': (file) => {
    const ino = fs.statSync(file).ino
    const body = replacement()
    fs.writeFileSync(file, body) // O_TRUNC on the same inode
    assert.equal(fs.statSync(file).ino, ino)
    return body
  },
  'overwritten in place with our own lines but another token': (file) => {
    const body = fs.readFileSync(file, 'utf8').replace(/^token=.*$/m, `token=${'0'.repeat(32)}`)
    assert.match(body, new RegExp(`^token=${'0'.repeat(32)}$`, 'm'))
    fs.writeFileSync(file, body)
    return body
  },
}

describe('heartbeat detects loss: signal aborted, onLost once, process exits normally', () => {
  for (const [name, disturb] of Object.entries(disturbances)) {
    test(name, { timeout: u.scaled(20000), skip: (name.startsWith('replaced') && u.underWine && 'Wine refuses a rename over an open file') || (name.startsWith('removed') && u.WINE_DELETE) }, async (t) => {
      const file = fresh('lost')
      const child = u.spawnNode('file-heartbeat-child.js', [file, HEARTBEAT])
      const out = u.lines(child)
      const held = JSON.parse((await out.next(/^held /, 10000)).slice(5))
      assert.equal(held.pid, child.pid)
      assert.equal(u.readLockKeys(file).token, held.token)
      const t0 = Date.now()
      const body = disturb(file)
      const aborted = await out.next(/^aborted /, 5000)
      const ms = Date.now() - t0
      t.diagnostic(`loss detected after ${ms} ms (heartbeat ${HEARTBEAT} ms)`)
      assert.equal(aborted, 'aborted LOCK_LOST released=true')
      assert.equal(await out.next(/^onLost /, 5000), 'onLost 1 LOCK_LOST sameLock=true')
      assert.equal(await out.next(/^release-after-loss /, 5000), 'release-after-loss false')
      const ex = await u.waitExit(child, 5000, 'heartbeat child after loss')
      assert.equal(ex.code, 0, ex.stdout + ex.stderr)
      assert.match(ex.stdout, /^exit onLost=1$/m, 'onLost called exactly once')
      assert.doesNotMatch(ex.stdout, /crashed|failed/)
      assert.equal(ex.stderr, '', 'no warnings or errors')
      // The lost holder must not have removed or rewritten what replaced its lock.
      if (body === null) assert.equal(fs.existsSync(file), false, 'the lost holder did not recreate the file')
      else assert.equal(fs.readFileSync(file, 'utf8'), body, 'the replacement is left alone')
      assert.deepEqual(
        u.ls(path.dirname(file)).filter((f) => f !== path.basename(file)),
        [],
        'no temp files left',
      )
      if (body !== null) fs.unlinkSync(file)
    })
  }
})

describe('loss while inside withLock', () => {
  test('withLock rejects with LockError LOCK_LOST when the lock is lost while fn runs; fn saw the abort', { timeout: u.scaled(10000), skip: u.WINE_DELETE }, async () => {
    const file = fresh('withlock-lost')
    let sawAbort = false
    const replacementBody = replacement()
    await assert.rejects(
      sema.withLock(
        file,
        async (lock) => {
          const aborted = new Promise((resolve) => lock.signal.addEventListener('abort', resolve, { once: true }))
          const tmp = `${file}.outside`
          fs.writeFileSync(tmp, replacementBody)
          fs.renameSync(tmp, file)
          await u.within(aborted, 5000, 'lock.signal abort inside withLock')
          sawAbort = lock.signal.aborted && lock.signal.reason?.code === 'LOCK_LOST'
          return 'work done without exclusivity'
        },
        { heartbeat: HEARTBEAT },
      ),
      (e) => e instanceof sema.LockError && e.code === 'LOCK_LOST',
    )
    assert.equal(sawAbort, true)
    assert.equal(fs.readFileSync(file, 'utf8'), replacementBody, 'withLock’s release left the replacement alone')
    fs.unlinkSync(file)
    assert.deepEqual(u.ls(path.dirname(file)), [])
  })
})

describe('lock.signal read for the first time after the lock ended', () => {
  // The handle makes its AbortSignal on the first read (lib/lock-handle.js): what that read sees must be what an
  // AbortSignal made at acquisition would show by then.
  test('after a loss: already aborted, its reason the LockError LOCK_LOST that onLost got; the same signal on every read', { timeout: u.scaled(10000), skip: u.WINE_DELETE }, async () => {
    const file = fresh('lazy-signal-lost')
    let onLost
    const lostWith = new Promise((resolve) => (onLost = (lock, error) => resolve({ lock, error })))
    const r = await sema.acquire(file, { heartbeat: HEARTBEAT, onLost })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const lock = r.value
    fs.unlinkSync(file)
    const lost = await u.within(lostWith, 5000, 'onLost')
    assert.equal(lost.lock, lock)
    const signal = lock.signal // the first read
    assert.ok(signal instanceof AbortSignal)
    assert.equal(signal.aborted, true)
    assert.equal(signal.reason, lost.error, 'the reason is the error onLost was given')
    assert.ok(signal.reason instanceof sema.LockError)
    assert.equal(signal.reason.code, 'LOCK_LOST')
    assert.equal(lock.signal, signal, 'one signal per lock')
    assert.throws(() => signal.throwIfAborted(), (e) => e === lost.error)
    assert.equal(lock.released, true)
    assert.equal(await lock.release(), false)
    assert.deepEqual(u.ls(path.dirname(file)), [])
  })

  test('after a release: not aborted, also after a second release', { timeout: u.scaled(10000) }, async () => {
    const file = fresh('lazy-signal-released')
    const r = await sema.acquire(file, { heartbeat: HEARTBEAT })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(await r.value.release(), true)
    const signal = r.value.signal
    assert.equal(signal.aborted, false)
    assert.equal(signal.reason, undefined)
    assert.equal(r.value.signal, signal)
    assert.equal(await r.value.release(), false)
    assert.equal(signal.aborted, false)
  })

  test('read before the loss: the abort event fires once, with the same reason a later first read would see', { timeout: u.scaled(10000), skip: u.WINE_DELETE }, async () => {
    const file = fresh('lazy-signal-early')
    const r = await sema.acquire(file, { heartbeat: HEARTBEAT })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    let events = 0
    const aborted = new Promise((resolve) =>
      r.value.signal.addEventListener('abort', () => {
        events++
        resolve()
      }),
    )
    fs.unlinkSync(file)
    await u.within(aborted, 5000, 'lock.signal abort')
    assert.equal(events, 1)
    assert.equal(r.value.signal.reason.code, 'LOCK_LOST')
    assert.equal(await r.value.release(), false)
    assert.equal(events, 1)
  })
})

describe('two copies of the JS layer in one thread', () => {
  test('a lock of the first copy is told of its loss after a second copy loaded (each copy hears its own locks)', { timeout: u.scaled(20000), skip: u.WINE_DELETE }, async () => {
    // A test runner's fresh module registry, or two installs over one binary: before, the copy loaded second took the
    // thread's one loss callback over, and the first copy's locks were never told they were lost.
    const root = path.resolve(__dirname, '..')
    const file = fresh('two-copies')
    let onLost
    const lostWith = new Promise((resolve) => (onLost = (lock, error) => resolve(error)))
    const r = await sema.acquire(file, { heartbeat: HEARTBEAT, onLost })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const kept = {}
    for (const k of Object.keys(require.cache)) if (k.startsWith(path.join(root, 'lib')) || k === path.join(root, 'index.js')) kept[k] = require.cache[k]
    for (const k of Object.keys(kept)) delete require.cache[k]
    try {
      const second = require(root)
      assert.notEqual(second.acquire, sema.acquire, 'a second copy of the JS layer')
      const other = await second.acquire(fresh('two-copies-other'), { heartbeat: HEARTBEAT })
      assert.equal(other.ok, true)
      fs.unlinkSync(file)
      const error = await u.within(lostWith, 5000, "the first copy's onLost")
      assert.equal(error.code, 'LOCK_LOST')
      assert.equal(r.value.signal.aborted, true)
      assert.equal(other.value.signal.aborted, false, "the second copy's lock is not lost")
      assert.equal(await other.value.release(), true)
    } finally {
      for (const k of Object.keys(require.cache)) if (k.startsWith(path.join(root, 'lib')) || k === path.join(root, 'index.js')) delete require.cache[k]
      Object.assign(require.cache, kept)
    }
  })
})
