'use strict'
// The file side of the napi boundary (src/file/*, src/cli.rs), as the JS layer sees it: every fallible call answers
// with the one result shape (`{ok: true, value} | {ok: false, error: {code, message, …}}`, src/result.rs), and each
// call has one kind of answer: `tryAcquire` / `acquire` always a promise (also where the attempt is decided on the
// calling thread), `tryAcquireNow` / `releaseHeldNow` a result now or `null` ("not short here: call the async one"),
// never a promise. A caller that handled only one of the two answers of a `T | Promise<T>` call would have passed
// these tests only on some file systems; now nothing of the kind is left to forget.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const u = require('./helpers/file-util')
const native = require('../lib/native')
const { engineOptions, DEFAULT_CONFIG } = require('../lib/file/engine')
const { settledAcquire } = require('../lib/file/settle')

/** statfs f_type of a memory file system. */
const TMPFS_MAGIC = 0x01021994

const tmp = u.testDir('binding-')
const CODES = new Set(native.errorCodes())

/** Asserts the one result shape, exactly: no other key, no promise; a failure's code is one of the stable codes. */
function assertResult(r, label) {
  assert.ok(r !== null && typeof r === 'object' && !(r instanceof Promise), `${label}: a result object, got ${r}`)
  if (r.ok === true) {
    assert.deepEqual(Object.keys(r), ['ok', 'value'], label)
  } else {
    assert.equal(r.ok, false, label)
    assert.deepEqual(Object.keys(r), ['ok', 'error'], label)
    assert.ok(CODES.has(r.error.code), `${label}: a stable code, got ${r.error.code}`)
    assert.equal(typeof r.error.message, 'string', label)
  }
  return r
}

function lockFile(file, config = {}) {
  const checked = native.checkLockPath(file, false)
  assert.equal(checked.ok, true, checked.error?.message)
  return new native.NativeLockFile(checked.value, engineOptions({ ...DEFAULT_CONFIG, ...config }))
}

async function releaseHeld(id) {
  return native.releaseHeldNow(id) ?? (await native.releaseHeldAsync(id))
}

/** A memory file system (tmpfs, ramfs), where every attempt is short whatever `fsync` says. */
function onMemoryFs(dir) {
  const type = fs.statfsSync(dir).type
  return type === 0x01021994 || type === 0x858458f6
}

/** A directory on a disk (not a memory file system), or null: the temp directory, else one beside the clone. */
function diskDir(t) {
  for (const base of [os.tmpdir(), path.join(u.ROOT, 'target')]) {
    if (fs.existsSync(base) && !onMemoryFs(base)) {
      const dir = fs.mkdtempSync(path.join(base, 'sema-native-binding-'))
      t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
      return dir
    }
  }
  return null
}

describe('binding: one result shape for every fallible file call', () => {
  test('path checks, parsing, attempts, releases, listings and waits all answer {ok, value} or {ok, error}', async () => {
    const file = tmp.fresh()
    assert.equal(assertResult(native.checkLockPath(file, false), 'checkLockPath').value, file)
    assert.equal(assertResult(native.checkLockPath(tmp.dir, false), 'checkLockPath(dir)').ok, false)
    assert.equal(assertResult(native.checkLockPath('a/../b', true), 'checkLockPath(semats, ..)').error.code, 'INVALID_PATH')
    assert.deepEqual(assertResult(native.parseLockInfo('pid=12\ntimestamp=34\ntag=x\n'), 'parseLockInfo').value, { pid: 12, timestamp: 34, tag: 'x' })
    assert.equal(assertResult(native.parseLockInfo('not a lock'), 'parseLockInfo(bad)').error.code, 'PARSE_ERROR')

    const a = lockFile(file)
    // The two exceptions, semats' synchronous hot path (src/file/lock_file.rs): a lock written exactly as asked
    // answers its bare timestamp, a release null; anything else the one shape.
    const ts = a.tryAcquireSync('t', undefined)
    assert.equal(typeof ts, 'number')
    assert.equal(assertResult(a.releaseAsProcess(false) ?? { ok: true, value: undefined }, 'releaseAsProcess').ok, true)
    const cut = assertResult(a.tryAcquireSync('t\nx', undefined), 'tryAcquireSync(tag sanitised)')
    assert.equal(cut.value.pid, process.pid)
    assert.notEqual(cut.value.tag, 't\nx')
    const busy = assertResult(lockFile(file).tryAcquireSync(undefined, undefined), 'tryAcquireSync(busy)')
    assert.equal(busy.error.code, 'ALREADY_LOCKED')
    assert.equal(busy.error.holderPid, process.pid)
    assert.equal(assertResult(a.cleanStale(), 'cleanStale').value, false)
    assert.equal(a.releaseAsProcess(false), null)
    assert.equal(a.releaseAsProcess(false).code, 'NOT_LOCKED')

    const held = assertResult(await settledAcquire(a, 'h', undefined, 1000, undefined), 'acquire')
    assert.deepEqual(Object.keys(held.value).sort(), ['id', 'pid', 'tag', 'timestamp', 'token'])
    const listed = assertResult(await native.listLocks(tmp.dir, engineOptions(DEFAULT_CONFIG)), 'listLocks')
    assert.ok(listed.value.some((l) => l.path === file && l.state === 'held'), JSON.stringify(listed.value))
    const missing = assertResult(await native.listLocks(path.join(tmp.dir, 'none'), engineOptions(DEFAULT_CONFIG)), 'listLocks(missing)')
    assert.equal(missing.error.errno, os.constants.errno.ENOENT)
    assert.deepEqual(assertResult(native.handLockTo('no such token', process.pid), 'handLockTo'), { ok: true, value: false })
    assert.deepEqual(assertResult(await releaseHeld(held.value.id), 'releaseHeld'), { ok: true, value: true })
    assert.deepEqual(assertResult(await releaseHeld(held.value.id), 'releaseHeld(again)'), { ok: true, value: false })
    assert.deepEqual(assertResult(await native.waitLockFree(file, engineOptions(DEFAULT_CONFIG), 1000), 'waitLockFree'), {
      ok: true,
      value: undefined,
    })
  })
})

describe('binding: the fast synchronous paths have names of their own', () => {
  test('tryAcquire returns a promise even where the attempt is decided on the calling thread', async () => {
    // fsync off on a local file system (or any fsync on a memory one): attempts are short here.
    const file = lockFile(tmp.fresh(), { fsync: false })
    const tried = file.tryAcquire('try', undefined)
    assert.ok(tried instanceof Promise, 'tryAcquire: a promise')
    const first = assertResult(await tried, 'tryAcquire')
    assert.equal(first.ok, true)
    const busy = file.tryAcquire(undefined, undefined)
    assert.ok(busy instanceof Promise, 'tryAcquire(busy): a promise')
    assert.equal(assertResult(await busy, 'tryAcquire(busy)').error.code, 'ALREADY_LOCKED')
    const timedOut = settledAcquire(file, undefined, undefined, 0, undefined)
    assert.ok(timedOut instanceof Promise, 'acquire(busy): a promise')
    assert.equal(assertResult(await timedOut, 'acquire(busy)').error.code, 'TIMEOUT')
    assert.equal((await releaseHeld(first.value.id)).value, true)

    const second = assertResult(await settledAcquire(file, 'acq', undefined, undefined, undefined), 'acquire')
    assert.equal(second.value.tag, 'acq')
    assert.equal((await releaseHeld(second.value.id)).value, true)
  })

  test('acquire answers now where the attempt is short here, else null and settles through the thread\'s channel', async () => {
    const short = lockFile(tmp.fresh(), { fsync: false })
    const unused = new native.NativeFileSettler(() => assert.fail('nothing to settle: decided now'))
    const now = assertResult(short.acquire('now', undefined, undefined, undefined, unused, 1), 'acquire(short)')
    assert.equal(now.value.tag, 'now')
    // The same lock busy: null now, the result later through the channel.
    const later = settledAcquire(short, 'later', undefined, undefined, undefined)
    assert.equal((await releaseHeld(now.value.id)).value, true)
    const got = assertResult(await later, 'acquire(waited)')
    assert.equal(got.value.tag, 'later')
    assert.equal((await releaseHeld(got.value.id)).value, true)
    // fsync on: on a disk the first attempt is not short, so it is made off this thread (null, then the channel);
    // on a memory file system (the suite's tmpfs pass) fsync does nothing and the answer comes now.
    const syncedPath = tmp.fresh()
    const memory = fs.statfsSync(path.dirname(syncedPath)).type === TMPFS_MAGIC
    const synced = lockFile(syncedPath, { fsync: true })
    let settle
    const settled = new Promise((resolve) => {
      settle = resolve
    })
    const channel = new native.NativeFileSettler(settle)
    channel.keepAlive(true)
    const answer = synced.acquire('synced', undefined, undefined, undefined, channel, 7)
    let r
    if (memory) {
      r = assertResult(answer, 'acquire(fsync, tmpfs)')
    } else {
      assert.equal(answer, null, 'a disk with fsync: decided off the JS thread')
      const s = await settled
      assert.equal(s.id, 7)
      r = assertResult(s.result, 'acquire(fsync, disk)')
    }
    channel.keepAlive(false)
    assert.equal(r.value.tag, 'synced')
    assert.equal((await releaseHeld(r.value.id)).value, true)
  })

  test('two copies of the JS layer in one thread each hear their own waits (a channel per module instance)', async () => {
    // Before, the channel was the thread's: the copy loaded second took it over, and a wait of the first copy
    // settled into the second's table (never resolved).
    const settlePath = require.resolve('../lib/file/settle')
    const first = require(settlePath)
    delete require.cache[settlePath]
    const second = require(settlePath)
    assert.notEqual(first, second)
    const file = lockFile(tmp.fresh(), { fsync: false })
    const held = assertResult(await first.settledAcquire(file, 'holder', undefined, undefined, undefined), 'holder')
    const a = first.settledAcquire(file, 'a', undefined, undefined, undefined)
    const b = second.settledAcquire(file, 'b', undefined, undefined, undefined)
    assert.equal((await releaseHeld(held.value.id)).value, true)
    const got = assertResult(await a, 'first copy')
    assert.equal(got.value.tag, 'a')
    assert.equal((await releaseHeld(got.value.id)).value, true)
    const got2 = assertResult(await b, 'second copy')
    assert.equal(got2.value.tag, 'b')
    assert.equal((await releaseHeld(got2.value.id)).value, true)
  })

  test('tryAcquireNow answers now where an attempt is short, never with a promise', async () => {
    const file = lockFile(tmp.fresh(), { fsync: false })
    const now = file.tryAcquireNow('now', undefined)
    const got = assertResult(now, 'tryAcquireNow')
    assert.equal(got.value.tag, 'now')
    assert.equal(assertResult(file.tryAcquireNow(undefined, undefined), 'tryAcquireNow(busy)').error.code, 'ALREADY_LOCKED')
    assert.equal(assertResult(native.releaseHeldNow(got.value.id), 'releaseHeldNow').value, true)
  })

  test('tryAcquireNow answers null where an attempt may block (fsync of a disk) and takes nothing', async (t) => {
    const dir = diskDir(t)
    if (dir === null) return t.skip('no disk directory here (the temp directory and the clone are on memory file systems)')
    const at = path.join(dir, 'disk.lock')
    const file = lockFile(at, { fsync: true })
    assert.equal(file.tryAcquireNow(undefined, undefined), null)
    assert.equal(fs.existsSync(at), false, 'nothing taken by a null answer')
    const r = assertResult(await file.tryAcquire(undefined, undefined), 'tryAcquire(disk)')
    assert.equal(r.ok, true)
    assert.equal((await releaseHeld(r.value.id)).value, true)
  })
})
