'use strict'
// node:diagnostics_channel: a subscriber sees every event of an acquire (the TracingChannel sema-native:acquire:
// start, end, asyncStart, asyncEnd; error for a failure with the holder's facts), of a release (sema-native:release)
// and of a loss (sema-native:lost), for file targets and on the real dflockd server; the dflockd URL's token and
// the lock's ownership token never appear in a message.

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const dc = require('node:diagnostics_channel')
const fs = require('node:fs')
const u = require('./helpers/file-util')
const d = require('./helpers/dflockd')
const sema = require('..')

const tmp = u.testDir('diag-', { name: 'diag' })

/** Records every event of the three channels as [name, snapshot of the message] until `stop()`. */
function record() {
  const events = []
  const snap = (name) => (m) => events.push([name, { ...m }])
  const handlers = {
    start: snap('start'),
    end: snap('end'),
    asyncStart: snap('asyncStart'),
    asyncEnd: snap('asyncEnd'),
    error: snap('error'),
  }
  const onRelease = snap('release')
  const onLost = snap('lost')
  const acquire = dc.tracingChannel('sema-native:acquire')
  acquire.subscribe(handlers)
  dc.subscribe('sema-native:release', onRelease)
  dc.subscribe('sema-native:lost', onLost)
  return {
    events,
    names: () => events.map(([n]) => n),
    stop() {
      acquire.unsubscribe(handlers)
      dc.unsubscribe('sema-native:release', onRelease)
      dc.unsubscribe('sema-native:lost', onLost)
    },
  }
}

describe('diagnostics_channel on file targets', () => {
  test('acquire and release: start, end, asyncStart, asyncEnd, then release; facts without the token', async () => {
    const file = tmp.fresh()
    const rec = record()
    try {
      const r = await sema.acquire(file, { tag: 'traced' })
      assert.equal(r.ok, true)
      assert.deepEqual(rec.names(), ['start', 'end', 'asyncStart', 'asyncEnd'])
      const [, start] = rec.events[0]
      assert.deepEqual(start, { target: file, backend: 'file', mode: 'exclusive', wait: true })
      const [, done] = rec.events[3]
      assert.equal(typeof done.waitedMs, 'number')
      assert.deepEqual(done.lock, { target: file, backend: 'file', pid: process.pid, timestamp: r.value.timestamp, tag: 'traced' })
      assert.equal(done.error, undefined)
      await r.value.release()
      assert.deepEqual(rec.names().slice(4), ['release'])
      assert.deepEqual(rec.events[4][1], { target: file, backend: 'file', pid: process.pid, timestamp: r.value.timestamp, tag: 'traced', byPath: false })
      // A second release does nothing, and says nothing.
      await r.value.release()
      assert.equal(rec.events.length, 5)
      assert.ok(!JSON.stringify(rec.events).includes(r.value.token), 'the ownership token is never published')
    } finally {
      rec.stop()
    }
  })

  test('a failed tryAcquire: error with the holder pid between end and asyncStart', async () => {
    const file = tmp.fresh()
    const { child, kill } = await u.holder(file)
    const rec = record()
    try {
      const r = await sema.tryAcquire(file)
      assert.equal(r.ok, false)
      assert.deepEqual(rec.names(), ['start', 'end', 'error', 'asyncStart', 'asyncEnd'])
      const [, e] = rec.events[2]
      assert.equal(e.wait, false)
      assert.ok(e.error instanceof sema.LockError)
      assert.equal(e.error.code, 'ALREADY_LOCKED')
      assert.equal(e.holderPid, child.pid)
    } finally {
      rec.stop()
      kill()
    }
  })

  test('release by path publishes byPath; a lost lock publishes on sema-native:lost with its LockError', { skip: u.WINE_DELETE }, async () => {
    const file = tmp.fresh()
    const rec = record()
    try {
      const r = await sema.acquire(file, { heartbeat: 50 })
      const lostSeen = new Promise((resolve) => r.value.signal.addEventListener('abort', resolve, { once: true }))
      // Another writer replaces the file: the heartbeat finds the lock lost.
      fs.writeFileSync(`${file}.outside`, `pid=1\ntimestamp=${u.nowS()}\n`)
      fs.renameSync(`${file}.outside`, file)
      await u.within(lostSeen, 5000, 'the loss')
      const lost = rec.events.filter(([n]) => n === 'lost')
      assert.equal(lost.length, 1)
      assert.equal(lost[0][1].target, file)
      assert.equal(lost[0][1].pid, process.pid)
      assert.equal(lost[0][1].error.code, 'LOCK_LOST')
      assert.equal(await r.value.release(), false)
      assert.equal(rec.events.filter(([n]) => n === 'release').length, 0, 'a lost lock is not released')
      fs.unlinkSync(file)
      const again = await sema.acquire(file)
      const byPath = await sema.release(file)
      assert.equal(byPath.ok, true)
      assert.deepEqual(rec.events.at(-1), ['release', { target: file, backend: 'file', byPath: true }])
      assert.equal(again.value.released, true)
    } finally {
      rec.stop()
    }
  })

  test('nobody subscribed: nothing published, results unchanged', async () => {
    const ch = dc.tracingChannel('sema-native:acquire')
    assert.equal(ch.start.hasSubscribers || ch.asyncEnd.hasSubscribers, false)
    const r = await sema.acquire(tmp.fresh())
    assert.equal(r.ok, true)
    await r.value.release()
  })
})

describe('diagnostics_channel on dflockd', () => {
  const skip = d.skipReason() || d.goOnly()
  let s
  before(async () => {
    if (!skip) s = await d.startServer({ args: ['--auth-token', 'sekrit-token'] })
  })
  after(() => d.stopAll())

  test('acquire, timeout with error, release: the URL token is redacted', { skip }, async () => {
    const url = `dflockd://sekrit-token@127.0.0.1:${s.port}/diag-key`
    const rec = record()
    try {
      const r = await sema.acquire(url)
      assert.equal(r.ok, true, JSON.stringify(r.error))
      const t = await sema.acquire(url, { timeout: 100 })
      assert.equal(t.ok, false)
      await r.value.release()
      assert.deepEqual(rec.names(), ['start', 'end', 'asyncStart', 'asyncEnd', 'start', 'end', 'error', 'asyncStart', 'asyncEnd', 'release'])
      assert.equal(rec.events[0][1].backend, 'dflockd')
      assert.equal(rec.events[0][1].target, `dflockd://***@127.0.0.1:${s.port}/diag-key`)
      assert.equal(rec.events[6][1].error.code, 'TIMEOUT')
      assert.ok(!JSON.stringify(rec.events).includes('sekrit'), 'no auth token in any message')
      assert.ok(!JSON.stringify(rec.events).includes(r.value.token), 'no lock token in any message')
    } finally {
      rec.stop()
    }
  })
})
