'use strict'
// The kinds of lock on one dflockd key keep their meaning (issue 34 item 1): a plain acquire of a key never runs beside
// a shared lock's readers, from every entry point (acquire, tryAcquire, DistributedLock, the CLI's run, wait, a
// LockManager's exclusive request). The layout (crates/sema-core/src/dflockd/shared.rs, lib/dflockd/kinds.js): the
// readers' slots are the semaphore `<key>` itself, so the server refuses `l <key>` beside them and the plain acquire
// is made again as a writer, which waits for them. Real Go server, a reader in this process (its lock is native: the
// event loop is free to run the others).
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const net = require('node:net')
const { once } = require('node:events')
const d = require('./helpers/dflockd')
const api = require('..')
const { DistributedLock } = require('../lib/dflockd')
const { cli } = require('./fixtures/cli/helpers')

const skip = d.goOnly()
let srv
let seq = 0
const key = (name) => `kinds-${name}-${process.pid}-${++seq}`

before(async () => {
  if (!skip) srv = await d.startServer()
})
after(() => d.stopAll())

/** One raw request on a fresh socket (what another dflockd client sends): its reply line. */
async function raw(cmd, k, arg) {
  const sock = net.connect(srv.port, '127.0.0.1')
  await once(sock, 'connect')
  sock.write(`${cmd}\n${k}\n${arg}\n`)
  let buf = ''
  for await (const chunk of sock) {
    buf += chunk
    if (buf.includes('\n')) break
  }
  sock.destroy()
  return buf.split('\n')[0]
}

/** Holds `url` as a reader until the returned release is called. */
async function reader(url) {
  const r = await api.acquire(url, { mode: 'shared', timeout: 5000 })
  assert.equal(r.ok, true, JSON.stringify(r.error))
  return r.value
}

/** `pending` settles only after `release()` ran: the acquisition waited for the reader. */
async function grantedOnlyAfter(pending, release) {
  let settled = false
  pending.then(() => (settled = true), () => (settled = true))
  // Long enough for a grant beside the reader to arrive (it came in ~2 ms before the fix).
  await new Promise((r) => setTimeout(r, 300))
  assert.equal(settled, false, 'granted while the reader held')
  await release()
  return pending
}

describe('a plain acquire of a key never runs beside its readers (dflockd)', { skip }, () => {
  test('acquire / tryAcquire / withLock: refused or waiting while a reader holds, granted once it left', async () => {
    const url = srv.url(key('api'))
    const r = await reader(url)
    const t = await api.tryAcquire(url)
    assert.equal(t.ok, false, 'tryAcquire granted beside a reader')
    assert.equal(t.error.type, 'ALREADY_LOCKED')
    const timedOut = await api.acquire(url, { timeout: 300 })
    assert.equal(timedOut.ok, false, 'acquire granted beside a reader')
    assert.equal(timedOut.error.type, 'TIMEOUT')
    const plain = await grantedOnlyAfter(api.acquire(url, { timeout: 10000 }), () => r.release())
    assert.equal(plain.ok, true, JSON.stringify(plain.error))
    // Held as a writer: a reader now waits for it.
    assert.equal((await api.tryAcquire(url, { mode: 'shared' })).ok, false)
    assert.equal(await plain.value.release(), true)
    const r2 = await reader(url)
    const ran = await grantedOnlyAfter(api.withLock(url, () => 'ran'), () => r2.release())
    assert.equal(ran, 'ran')
  })

  test('new DistributedLock({ key }): acquire() waits for the readers; enqueue() is refused with a clear LIMIT_MISMATCH', async () => {
    const k = key('dl')
    const url = srv.url(k)
    const r = await reader(url)
    const lock = new DistributedLock({ key: k, servers: [['127.0.0.1', srv.port]], acquireTimeoutS: 1 })
    assert.equal(await lock.acquire(), false, 'DistributedLock granted beside a reader')
    const other = new DistributedLock({ key: k, servers: [['127.0.0.1', srv.port]], acquireTimeoutS: 10 })
    await assert.rejects(other.enqueue(), (e) => {
      assert.equal(e.code, 'LIMIT_MISMATCH')
      assert.match(e.message, /cannot wait for readers.*acquire\(\) waits for them/)
      return true
    })
    assert.equal(await grantedOnlyAfter(other.acquire(), () => r.release()), true)
    assert.match(other.token, /^[0-9a-f]{32}$/)
    // The lock it holds excludes readers and is released as any lock.
    assert.equal((await api.tryAcquire(url, { mode: 'shared' })).ok, false)
    await other.release()
    const again = await api.tryAcquire(url, { mode: 'shared' })
    assert.equal(again.ok, true, JSON.stringify(again.error))
    await again.value.release()
  })

  test('sema-native run and wait: they wait for the readers', async () => {
    const url = srv.url(key('cli'))
    const r = await reader(url)
    const run = await cli(['run', url, '--timeout', '300ms', '--', process.execPath, '-e', 'process.stdout.write("ran")'])
    assert.equal(run.stdout, '', 'the command ran beside a reader')
    assert.equal(run.code, 1, run.stderr)
    const w = await api.wait(url, { timeout: 300 })
    assert.equal(w.ok, false, 'wait said free while a reader held')
    assert.equal(w.error.type, 'TIMEOUT')
    // A shared wait is free: readers do not keep a reader out.
    assert.equal((await api.wait(url, { mode: 'shared', timeout: 300 })).ok, true)
    const cliWait = await cli(['wait', url, '--timeout', '300ms'])
    assert.equal(cliWait.code, 1, cliWait.stderr)
    await r.release()
    assert.equal((await api.wait(url, { timeout: 2000 })).ok, true)
    const ran = await cli(['run', url, '--timeout', '5s', '--', process.execPath, '-e', 'process.stdout.write("ran")'])
    assert.equal(ran.code, 0, ran.stderr)
    assert.equal(ran.stdout, 'ran')
  })

  test('status: readers are holders in mode shared; a writer is one holder in mode exclusive', async () => {
    const url = srv.url(key('status'))
    const r1 = await reader(url)
    const r2 = await reader(url)
    const st = await api.status(url)
    assert.equal(st.locked, true)
    assert.equal(st.holders, 2)
    assert.equal(st.mode, 'shared')
    await r1.release()
    await r2.release()
    const w = await api.acquire(url, { mode: 'exclusive' })
    assert.equal(w.ok, true)
    const sw = await api.status(url)
    assert.deepEqual([sw.locked, sw.holders, sw.mode], [true, 1, 'exclusive'])
    await w.value.release()
  })

  test('a LockManager exclusive request waits for another manager\'s shared holder', async () => {
    const base = `dflockd://127.0.0.1:${srv.port}/${key('wl')}`
    const a = api.createLockManager(base)
    const b = api.createLockManager(base)
    let letGo
    const held = new Promise((r) => (letGo = r))
    let readerIn
    const inside = new Promise((r) => (readerIn = r))
    const reading = a.request('n', { mode: 'shared' }, () => {
      readerIn()
      return held
    })
    await inside
    const writing = b.request('n', () => 'wrote')
    assert.equal(await grantedOnlyAfter(writing, async () => {
      letGo()
      await reading
    }), 'wrote')
  })

  test('the other way round: a reader meeting a plain holder waits (the key is then a mutex: readers one at a time)', async () => {
    const url = srv.url(key('mutex-era'))
    const plain = await api.acquire(url)
    assert.equal(plain.ok, true)
    const t = await api.tryAcquire(url, { mode: 'shared' })
    assert.equal(t.ok, false)
    assert.equal(t.error.type, 'ALREADY_LOCKED')
    const r = await grantedOnlyAfter(api.acquire(url, { mode: 'shared', timeout: 10000 }), () => plain.value.release())
    assert.equal(r.ok, true, JSON.stringify(r.error))
    // Within the GC's idle time the key stays a mutex: a second reader waits for the first, and a plain try is
    // refused as by any holder.
    assert.equal((await api.tryAcquire(url, { mode: 'shared' })).ok, false)
    assert.equal((await api.tryAcquire(url)).ok, false)
    await r.value.release()
  })

  test('what another dflockd client (the TypeScript dflockd-client, a raw `l`) sees beside our readers: error_limit_mismatch', async () => {
    const k = key('raw')
    const r = await reader(srv.url(k))
    assert.equal(await raw('l', k, '0'), 'error_limit_mismatch')
    assert.match(await raw('sl', k, '0 16'), /^ok [0-9a-f]{32} \d+$/, 'a semaphore of limit 16 counts as a reader')
    await r.release()
  })
})
