'use strict'
// wait(target): resolves when the lock is free without taking it. Files: woken by the release of a real holder
// process, nothing created in the directory; stale locks count as free; timeout, abort and bad input as acquire's.
// dflockd: the real Go server, a holder in this process.

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const u = require('./helpers/file-util')
const d = require('./helpers/dflockd')
const sema = require('..')

const tmp = u.testDir('wait-', { name: 'wait', own: true })
const { fresh, left } = tmp

describe('wait() on a lock file', () => {
  test('a free path: resolves at once and creates nothing', async () => {
    const file = fresh()
    const r = await sema.wait(file)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(typeof r.value.waitedMs, 'number')
    assert.deepEqual(left(file), [])
  })

  test('held by another process: resolves only after its release, and never creates the file', async () => {
    const file = fresh()
    const h = await u.holder(file)
    const waiting = sema.wait(file).then((r) => ({ r, fileThere: fs.existsSync(file) }))
    // The wait has not resolved while the lock is held: a zero-timeout wait (one look) says TIMEOUT meanwhile.
    const look = await sema.wait(file, { timeout: 0 })
    assert.equal(look.ok, false)
    assert.equal(look.error.type, 'TIMEOUT')
    h.child.stdin.write('release\n')
    await h.out.next(/^released true/)
    const { r, fileThere } = await u.within(waiting, 10000, 'wait() after the release')
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(fileThere, false)
    assert.deepEqual(left(file), [], 'wait() left no file behind')
  })

  test('a stale lock (dead holder) counts as free and is left in place', async () => {
    const file = fresh()
    const dead = await u.deadPid()
    fs.writeFileSync(file, `pid=${dead}\ntimestamp=${u.nowS() - 7200}\n`)
    u.backdate(file, 7200)
    const r = await sema.wait(file, { timeout: 5000 })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.ok(fs.existsSync(file), 'wait() breaks nothing')
  })

  test('timeout: TIMEOUT with the time in the message; the holder keeps its lock', async () => {
    const file = fresh()
    const h = await u.holder(file)
    const r = await sema.wait(file, { timeout: 50 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'TIMEOUT')
    assert.match(r.error.message, /Timeout waiting for lock to be released after 50ms/)
    assert.ok(fs.existsSync(file))
    h.child.stdin.end()
  })

  test('signal: aborted during the wait or before it → ABORTED', async () => {
    const file = fresh()
    const h = await u.holder(file)
    const ac = new AbortController()
    const p = sema.wait(file, { signal: ac.signal })
    ac.abort(new Error('enough'))
    const r = await u.within(p, 5000, 'aborted wait')
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ABORTED')
    const r2 = await sema.wait(file, { signal: AbortSignal.abort() })
    assert.equal(r2.error.type, 'ABORTED')
    h.child.stdin.end()
  })

  test('bad input: a failed result with INVALID_ARGUMENT / INVALID_PATH, never a throw', async () => {
    assert.equal((await sema.wait(42)).error.type, 'INVALID_ARGUMENT')
    assert.equal((await sema.wait('http://x/y')).error.type, 'INVALID_ARGUMENT')
    assert.equal((await sema.wait(fresh(), { timeout: -1 })).error.type, 'INVALID_ARGUMENT')
    assert.equal((await sema.wait(fresh(), { signal: 'no' })).error.type, 'INVALID_ARGUMENT')
    assert.equal((await sema.wait(fresh(), 'x')).error.type, 'INVALID_ARGUMENT')
    assert.equal((await sema.wait(tmp.dir)).error.type, 'INVALID_PATH')
  })

  test('a symlink at the lock path is refused, not followed', { skip: process.platform === 'win32' }, async () => {
    const file = fresh()
    fs.symlinkSync('/nonexistent-target', file)
    const r = await sema.wait(file, { timeout: 1000 })
    assert.equal(r.ok, false)
    assert.notEqual(r.error.type, 'TIMEOUT')
    assert.match(r.error.message, /symlink|symbolic link/i)
  })
})

describe('wait() with limit or mode on a lock file: the kind acquire would take', () => {
  test('limit 2: one slot held elsewhere → free at once; both held → TIMEOUT; one released → resolves; nothing created', async () => {
    const file = fresh()
    const a = await u.holder(file, { limit: 2 }) // slot 0: the path itself
    const one = await sema.wait(file, { limit: 2, timeout: 0 })
    assert.equal(one.ok, true, `a second slot is free: ${JSON.stringify(one.error)}`)
    const b = await u.holder(file, { limit: 2 })
    const full = await sema.wait(file, { limit: 2, timeout: 0 })
    assert.equal(full.ok, false)
    assert.equal(full.error.type, 'TIMEOUT')
    const before = left(file)
    const waiting = sema.wait(file, { limit: 2 })
    b.child.stdin.write('release\n')
    await b.out.next(/^released true/)
    const r = await u.within(waiting, 10000, 'wait({limit: 2}) after a release')
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.ok(left(file).every((n) => before.includes(n)), `wait() created nothing: ${left(file)} vs ${before}`)
    a.child.stdin.write('release\n')
    await a.out.next(/^released true/)
  })

  test('limit 2 while the path is held with limit 3 (a sibling slot taken): LIMIT_MISMATCH, as acquire', async () => {
    const file = fresh()
    const a = await u.holder(file, { limit: 3 })
    const b = await u.holder(file, { limit: 3 })
    const r = await sema.wait(file, { limit: 2, timeout: 0 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'LIMIT_MISMATCH')
    for (const h of [a, b]) {
      h.child.stdin.write('release\n')
      await h.out.next(/^released true/)
    }
  })

  test("mode 'shared': free while another process reads, not while one writes; 'exclusive' waits for the readers", async () => {
    const file = fresh()
    const reader = await u.holder(file, { mode: 'shared' })
    const shared = await sema.wait(file, { mode: 'shared', timeout: 0 })
    assert.equal(shared.ok, true, `a reader does not keep out another: ${JSON.stringify(shared.error)}`)
    const excl = await sema.wait(file, { mode: 'exclusive', timeout: 0 })
    assert.equal(excl.ok, false)
    assert.equal(excl.error.type, 'TIMEOUT')
    const waiting = sema.wait(file, { mode: 'exclusive' })
    reader.child.stdin.write('release\n')
    await reader.out.next(/^released true/)
    const r = await u.within(waiting, 10000, "wait({mode: 'exclusive'}) after the last reader left")
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const writer = await u.holder(file, { mode: 'exclusive' })
    const blocked = await sema.wait(file, { mode: 'shared', timeout: 0 })
    assert.equal(blocked.ok, false)
    assert.equal(blocked.error.type, 'TIMEOUT')
    writer.child.stdin.write('release\n')
    await writer.out.next(/^released true/)
    assert.deepEqual(left(file), [])
  })
})

describe('wait() on dflockd', () => {
  const skip = d.skipReason() || d.goOnly()
  let s
  before(async () => {
    if (!skip) s = await d.startServer()
  })
  after(() => d.stopAll())

  test('resolves after the holder releases; TIMEOUT while held', { skip }, async () => {
    const url = s.url('wait-key')
    const free = await sema.wait(url, { timeout: 2000 })
    assert.equal(free.ok, true, JSON.stringify(free.error))
    const r = await sema.acquire(url)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const t = await sema.wait(url, { timeout: 100 })
    assert.equal(t.error.type, 'TIMEOUT')
    const waiting = sema.wait(url, { timeout: 10000 })
    await r.value.release()
    const w = await waiting
    assert.equal(w.ok, true, JSON.stringify(w.error))
    // Waiting never enqueued: the server shows no waiter and no holder.
    const st = await sema.status(url)
    assert.equal(st.locked, false)
    assert.equal(st.waiters, 0)
  })

  test('abort ends a dflockd wait with ABORTED', { skip }, async () => {
    const url = s.url('wait-abort')
    const r = await sema.acquire(url)
    const ac = new AbortController()
    const p = sema.wait(url, { signal: ac.signal })
    ac.abort()
    assert.equal((await u.within(p, 5000, 'aborted dflockd wait')).error.type, 'ABORTED')
    await r.value.release()
  })
})
