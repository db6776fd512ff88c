'use strict'
// query(): the locks this process holds (every thread, every API over the engine, dflockd through the one-string
// API) and the acquisitions it waits for; each goes away when released or settled; no token in the answer.

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { Worker } = require('node:worker_threads')
const u = require('./helpers/file-util')
const d = require('./helpers/dflockd')
const sema = require('..')

const tmp = u.testDir('query-', { name: 'query', realpath: true })

describe('query() over lock files', () => {
  test('held by acquire and by Semaphore, pending while a second acquire waits; gone once released', async () => {
    const a = tmp.fresh()
    const b = tmp.fresh()
    assert.deepEqual(await sema.query(), { held: [], pending: [] })
    const la = await sema.acquire(a, { tag: 'first' })
    const s = new sema.Semaphore(b)
    assert.equal(s.tryAcquire('semats').ok, true)
    const waiting = sema.acquire(a, { timeout: 10000 })
    let q = await sema.query()
    assert.deepEqual(q.held, [
      { name: a, backend: 'file', mode: 'exclusive', pid: process.pid, timestamp: la.value.timestamp, tag: 'first' },
      { name: b, backend: 'file', mode: 'exclusive', pid: process.pid, timestamp: q.held[1].timestamp, tag: 'semats' },
    ])
    assert.equal(q.pending.length, 1)
    assert.equal(q.pending[0].name, a)
    assert.equal(q.pending[0].backend, 'file')
    assert.ok(q.pending[0].since <= Date.now())
    assert.ok(!JSON.stringify(q).includes(la.value.token), 'no ownership token')
    await la.value.release()
    const second = await waiting
    assert.equal(second.ok, true)
    q = await sema.query()
    assert.deepEqual(q.pending, [])
    assert.deepEqual(q.held.map((h) => h.name), [b, a])
    await second.value.release()
    s.release()
    assert.deepEqual(await sema.query(), { held: [], pending: [] })
  })

  test("a worker thread's lock is listed in the main thread's query", async () => {
    const file = tmp.fresh()
    const w = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads')
       const sema = require(workerData.root)
       sema.acquire(workerData.file, { tag: 'worker' }).then((r) => parentPort.postMessage(r.ok))
       parentPort.on('message', () => process.exit(0))`,
      { eval: true, workerData: { root: u.ROOT, file } },
    )
    const ok = await new Promise((resolve, reject) => {
      w.once('message', resolve)
      w.once('error', reject)
    })
    assert.equal(ok, true)
    const q = await sema.query()
    assert.deepEqual(q.held.map((h) => [h.name, h.tag]), [[file, 'worker']])
    w.postMessage('exit')
    await new Promise((resolve) => w.once('exit', resolve))
    assert.deepEqual((await sema.query()).held, [], "the worker's exit released it")
  })
})

describe('query() over dflockd', () => {
  const skip = d.skipReason() || d.goOnly()
  let s
  before(async () => {
    if (!skip) s = await d.startServer({ args: ['--auth-token', 'q-secret'] })
  })
  after(() => d.stopAll())

  test('held and pending dflockd locks, the URL token redacted', { skip }, async () => {
    const url = `dflockd://q-secret@127.0.0.1:${s.port}/query-key`
    const r = await sema.acquire(url)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const waiting = sema.acquire(url, { timeout: 10000 })
    const q = await sema.query()
    const shown = `dflockd://***@127.0.0.1:${s.port}/query-key`
    assert.deepEqual(q.held, [{ name: shown, backend: 'dflockd', mode: 'exclusive', pid: process.pid, timestamp: r.value.timestamp }])
    assert.deepEqual(q.pending.map((p) => [p.name, p.backend]), [[shown, 'dflockd']])
    assert.ok(!JSON.stringify(q).includes('q-secret'))
    await r.value.release()
    const second = await waiting
    assert.equal(second.ok, true, JSON.stringify(second.error))
    assert.deepEqual((await sema.query()).pending, [])
    await second.value.release()
    assert.deepEqual(await sema.query(), { held: [], pending: [] })
  })
})
