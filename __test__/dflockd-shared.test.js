'use strict'
// Shared (reader/writer) locks on dflockd (issue 19 part 2), built from the server's primitives: the reader-slot
// semaphore `<key>` itself (limit 16) and the gate mutex `<key>/gate` (issue 34: a plain `l <key>` is refused beside
// readers). Real Go server, real child processes holding; a counting
// proxy in front of the real server counts the requests and round trips of each operation.
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { once, EventEmitter } = require('node:events')
const net = require('node:net')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { acquire, tryAcquire, withLock, status } = require('..')
const { DistributedLock, Connection, stats } = require('../lib/dflockd')

const skip = d.goOnly()
const MAX_READERS = 16
let srv
let seq = 0
const key = (name) => `sh-${name}-${process.pid}-${++seq}`

before(async () => {
  if (!skip) srv = await d.startServer()
})
after(async () => {
  u.killAll()
  await d.stopAll()
})

/** Server state of `k`: its gate and its reader slots. */
async function state(k, server = srv) {
  const s = await stats({ host: server.host, port: server.port })
  const gate = s.locks.find((e) => e.key === `${k}/gate`)
  const slots = s.semaphores.find((e) => e.key === k)
  return {
    gateHeld: !!gate && Number(gate.owner_conn_id) !== 0,
    gateWaiters: gate ? gate.waiters : 0,
    readers: slots ? slots.holders : 0,
    slotWaiters: slots ? slots.waiters : 0,
    limit: slots ? slots.limit : undefined,
  }
}

/** Until `pred` holds of the server's state of `k` (its queues have no event to wait on); resolves that state. */
function untilState(k, pred, what) {
  return u.until(async () => {
    const st = await state(k)
    return pred(st) && st
  }, { timeoutMs: 20000, what: `server state: ${what}`, last: () => state(k) })
}

/** Marks when a promise settles, so a test can assert it has not yet. */
function track(p) {
  const t = { settled: false, p }
  p.then(
    () => (t.settled = true),
    () => (t.settled = true),
  )
  return t
}

describe('shared and exclusive on dflockd (real server, child processes)', { skip, timeout: 60_000 }, () => {
  test('4 shared holders at once; an exclusive waits for every one of them', async () => {
    const k = key('four')
    const url = srv.url(k)
    const readers = [0, 1, 2, 3].map(() => d.holder(url, 'shared'))
    for (const r of readers) assert.equal(await r.next(), 'held')
    let st = await state(k)
    assert.equal(st.readers, 4, 'four readers hold a slot each at once')
    assert.equal(st.gateHeld, false, 'readers let the gate go')
    assert.equal(st.limit, MAX_READERS)
    const w = track(acquire(url, { mode: 'exclusive', timeout: 30000 }))
    // The writer holds the gate and every slot the readers left, and waits for theirs.
    await untilState(k, (s) => s.gateHeld && s.slotWaiters === 1 && s.readers === MAX_READERS, 'writer waiting for readers')
    for (let i = 0; i < 3; i++) await readers[i].release()
    st = await untilState(k, (s) => s.readers === MAX_READERS && s.slotWaiters === 1, 'writer still waiting for the last reader')
    assert.equal(w.settled, false, 'no exclusive while one reader holds')
    await readers[3].release()
    const r = await w.p
    assert.equal(r.ok, true, JSON.stringify(r.error))
    st = await state(k)
    assert.equal(st.readers, MAX_READERS, 'the writer holds every slot')
    assert.equal(st.gateHeld, true)
    await r.value.release()
    st = await state(k)
    assert.equal(st.readers, 0)
    assert.equal(st.gateHeld, false)
  })

  test('an exclusive holder excludes readers and writers; readers come in after it', async () => {
    const k = key('excl')
    const url = srv.url(k)
    const w = d.holder(url, 'exclusive')
    assert.equal(await w.next(), 'held')
    const t = await tryAcquire(url, { mode: 'shared' })
    assert.equal(t.ok, false)
    assert.equal(t.error.type, 'ALREADY_LOCKED')
    const t2 = await tryAcquire(url, { mode: 'exclusive' })
    assert.equal(t2.error.type, 'ALREADY_LOCKED')
    const timed = await acquire(url, { mode: 'shared', timeout: 300 })
    assert.equal(timed.error.type, 'TIMEOUT')
    const reader = track(acquire(url, { mode: 'shared', timeout: 30000 }))
    await untilState(k, (s) => s.gateWaiters === 1, 'reader queued at the gate')
    assert.equal(reader.settled, false)
    await w.release()
    const r = await reader.p
    assert.equal(r.ok, true)
    assert.equal((await state(k)).readers, 1)
    await r.value.release()
  })

  test('tryAcquire shared is granted while readers hold; exclusive is refused and leaves nothing behind', async () => {
    const k = key('try')
    const url = srv.url(k)
    const a = d.holder(url, 'shared')
    assert.equal(await a.next(), 'held')
    const t = await tryAcquire(url, { mode: 'shared' })
    assert.equal(t.ok, true, JSON.stringify(t.error))
    const x = await tryAcquire(url, { mode: 'exclusive' })
    assert.equal(x.ok, false)
    assert.equal(x.error.type, 'ALREADY_LOCKED')
    // The refused writer released the gate and the slots it had got.
    const st = await state(k)
    assert.equal(st.readers, 2)
    assert.equal(st.gateHeld, false)
    await t.value.release()
    await a.release()
    const x2 = await tryAcquire(url, { mode: 'exclusive' })
    assert.equal(x2.ok, true, 'granted once the readers left')
    await x2.value.release()
  })

  test('a plain mutex on the key (no mode) keeps readers and writers out; slots got behind the refused gate are released', async () => {
    const k = key('plain')
    const url = srv.url(k)
    const plain = d.holder(url, 'none')
    assert.equal(await plain.next(), 'held')
    for (const mode of ['shared', 'exclusive']) {
      const t = await tryAcquire(url, { mode })
      assert.equal(t.error.type, 'ALREADY_LOCKED', mode)
      const st = await state(k)
      assert.equal(st.readers, 0, `${mode}: the slots taken right behind the gate were given back`)
    }
    await plain.release()
  })

  test('a stream of readers does not starve a waiting exclusive (readers after it wait behind it, FIFO)', async () => {
    const k = key('starve')
    const url = srv.url(k)
    const first = d.holder(url, 'shared')
    assert.equal(await first.next(), 'held')
    const order = []
    const w = acquire(url, { mode: 'exclusive', timeout: 30000 }).then((r) => {
      order.push('writer')
      return r
    })
    await untilState(k, (s) => s.gateHeld && s.slotWaiters === 1, 'writer waiting')
    // Readers keep arriving while the first still holds: each would be admitted by a reader-preferring lock.
    const later = [d.holder(url, 'shared'), d.holder(url, 'shared'), d.holder(url, 'shared')]
    await untilState(k, (s) => s.gateWaiters === 3, 'later readers queued behind the writer')
    for (const r of later) assert.equal(r.unread(), 0, 'no later reader got in')
    await first.release()
    const wr = await w
    assert.equal(wr.ok, true)
    const st = await state(k)
    assert.equal(st.gateWaiters, 3, 'the later readers are still queued at the gate while the writer holds')
    assert.equal(st.readers, MAX_READERS)
    for (const r of later) assert.equal(r.unread(), 0, 'later readers still wait while the writer holds')
    await wr.value.release()
    for (const r of later) {
      assert.equal(await r.next(), 'held')
      order.push('reader')
    }
    assert.deepEqual(order, ['writer', 'reader', 'reader', 'reader'])
    assert.equal((await state(k)).readers, 3, 'the later readers hold together')
    for (const r of later) await r.release()
  })

  test('waiters of one process are granted in the order they were started, across modes', async () => {
    const k = key('order')
    const url = srv.url(k)
    const first = await acquire(url, { mode: 'exclusive' })
    assert.equal(first.ok, true)
    const order = []
    const modes = ['exclusive', 'shared', 'exclusive', 'shared', 'shared', 'exclusive', 'shared', 'exclusive']
    const all = modes.map((mode, i) =>
      acquire(url, { mode, timeout: 30000 }).then(async (r) => {
        assert.equal(r.ok, true, JSON.stringify(r.error))
        order.push(i)
        // Held a moment (one event-loop turn), so readers granted together are seen together.
        await new Promise(setImmediate)
        await r.value.release()
      }),
    )
    // Every one of them has reached the server (queued at the gate) before the first holder leaves.
    await untilState(k, (s) => s.gateWaiters === modes.length, 'all queued at the gate')
    await first.value.release()
    await Promise.all(all)
    assert.deepEqual(order, modes.map((_, i) => i))
  })

  test('readers queued behind a writer are granted in call order, also when the reply to the first one\'s gate release is late', async () => {
    // The first reader lets the gate go (`r`) and the server grants it to the second at once; the second's replies
    // (`w`, `sl`, on its own connection) can reach this process before the first's `ok`. A proxy holds the reply to
    // the first `r` that passes it for 300 ms: before the fix the second reader returned (and its caller ran) first.
    for (let run = 0; run < 3; run++) {
      const proxy = await lateFirstRelease(srv, 300)
      try {
        const k = key(`rorder${run}`)
        const first = await acquire(srv.url(k), { mode: 'exclusive' })
        assert.equal(first.ok, true)
        const url = `dflockd://127.0.0.1:${proxy.port}/${k}`
        const order = []
        const all = Array.from({ length: 4 }, (_, i) =>
          acquire(url, { mode: 'shared', timeout: 30000 }).then((r) => {
            assert.equal(r.ok, true, JSON.stringify(r.error))
            order.push(i)
            return r.value
          }),
        )
        await untilState(k, (st) => st.gateWaiters === 4, 'all queued at the gate')
        await first.value.release()
        const held = await Promise.all(all)
        assert.equal(proxy.delayed(), 1, 'the first release reply was held')
        assert.deepEqual(order, [0, 1, 2, 3], `run ${run}`)
        await Promise.all(held.map((l) => l.release()))
      } finally {
        proxy.close()
      }
    }
  })

  test('a writer that times out waiting for readers gives back the gate and the slots it had', async () => {
    const k = key('wtimeout')
    const url = srv.url(k)
    const r = d.holder(url, 'shared')
    assert.equal(await r.next(), 'held')
    const w = await acquire(url, { mode: 'exclusive', timeout: 1500 })
    assert.equal(w.ok, false)
    assert.equal(w.error.type, 'TIMEOUT')
    const st = await state(k)
    assert.equal(st.gateHeld, false)
    assert.equal(st.readers, 1, 'only the reader holds a slot')
    const t = await tryAcquire(url, { mode: 'shared' })
    assert.equal(t.ok, true, 'readers come in again at once')
    await t.value.release()
    await r.release()
  })

  test('an aborted waiting reader settles ABORTED and leaves nothing behind', async () => {
    const k = key('abort')
    const url = srv.url(k)
    const w = await acquire(url, { mode: 'exclusive' })
    const ac = new AbortController()
    const waiting = acquire(url, { mode: 'shared', timeout: 20000, signal: ac.signal })
    await untilState(k, (s) => s.gateWaiters === 1, 'reader queued')
    ac.abort()
    const r = await waiting
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ABORTED')
    await w.value.release()
    const again = await acquire(url, { mode: 'exclusive', timeout: 10000 })
    assert.equal(again.ok, true, JSON.stringify(again.error))
    await again.value.release()
    const st = await state(k)
    assert.equal(st.readers + Number(st.gateHeld), 0)
  })

  test('a SIGKILLed reader frees its slot by disconnect: the waiting exclusive gets the lock before its lease ends', async () => {
    const k = key('kill')
    // A 60 s lease: the writer's 20 s timeout can only be met by the disconnect.
    const url = srv.url(k, 'leaseTtl=60')
    const r = d.holder(url, 'shared')
    assert.equal(await r.next(), 'held')
    const w = track(acquire(url, { mode: 'exclusive', timeout: 20000 }))
    await untilState(k, (s) => s.gateHeld && s.slotWaiters === 1, 'writer waiting')
    await r.kill()
    const got = await w.p
    assert.equal(got.ok, true, JSON.stringify(got.error))
    await got.value.release()
  })

  test('a SIGKILLed writer frees the gate and every slot by disconnect', async () => {
    const k = key('killw')
    const url = srv.url(k, 'leaseTtl=60')
    const w = d.holder(url, 'exclusive')
    assert.equal(await w.next(), 'held')
    assert.equal((await state(k)).readers, MAX_READERS)
    const reader = acquire(url, { mode: 'shared', timeout: 20000 })
    await untilState(k, (s) => s.gateWaiters === 1, 'reader waiting')
    await w.kill()
    const r = await reader
    assert.equal(r.ok, true)
    await r.value.release()
  })
})

describe('leases of every part', { skip, timeout: 30_000 }, () => {
  test("a reader's slot lost (released behind its back) is reported: onLost and signal", async () => {
    const k = key('lost-r')
    const url = srv.url(k, 'leaseTtl=2')
    let onLost
    const lost = new Promise((resolve) => (onLost = resolve))
    const r = await acquire(url, { mode: 'shared', onLost: (lock, err) => onLost(err) })
    assert.equal(r.ok, true)
    const c = await Connection.connect({ host: srv.host, port: srv.port })
    // Tokens are bearer capabilities: another connection may release the slot.
    assert.equal(await c.request('sr', k, r.value.token), 'ok')
    c.close()
    const err = await lost
    assert.equal(err.code, 'LOCK_LOST')
    assert.equal(r.value.signal.aborted, true)
    assert.ok(err.message.includes(`'${k}'`), err.message)
  })

  test("a writer's gate lost is reported through DistributedLock's onLockLost", async () => {
    const k = key('lost-w')
    let onLost
    const lost = new Promise((resolve) => (onLost = resolve))
    const l = new DistributedLock({ key: k, servers: [[srv.host, srv.port]], leaseTtlS: 2, mode: 'exclusive', onLockLost: (...a) => onLost(a) })
    assert.equal(await l.acquire(), true)
    const c = await Connection.connect({ host: srv.host, port: srv.port })
    assert.equal(await c.request('r', `${k}/gate`, l.token), 'ok')
    c.close()
    await lost
    assert.equal(l.signal.aborted, true)
    l.close()
  })

  test('granted after waiting longer than the lease: the fresh grant is renewed and held, not failed', async () => {
    const k = key('longwait')
    const url = srv.url(k, 'leaseTtl=2')
    const first = await acquire(url, { mode: 'exclusive' })
    const waiters = [acquire(url, { mode: 'shared', timeout: 20000 }), acquire(url, { mode: 'exclusive', timeout: 20000 })]
    await untilState(k, (s) => s.gateWaiters === 2, 'both queued')
    // Past the waiters' 2 s lease clock (the holder renews meanwhile): an event-free wait, time itself is the point.
    await new Promise((r) => setTimeout(r, 3000))
    await first.value.release()
    const r = await waiters[0]
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(r.value.signal.aborted, false)
    await r.value.release()
    const w = await waiters[1]
    assert.equal(w.ok, true, JSON.stringify(w.error))
    await w.value.release()
  })

  test('renewal keeps every part: held across three renewals of gate and slots, then released cleanly', async () => {
    const p = await countingProxy(srv)
    try {
      const k = key('renew')
      const w = await acquire(`dflockd://127.0.0.1:${p.port}/${k}?leaseTtl=1`, { mode: 'exclusive' })
      assert.equal(w.ok, true)
      const from = p.bursts.length
      await new Promise((resolve) => {
        p.ev.on('burst', function f() {
          const renews = p.bursts.slice(from).filter((b) => b.length === 1 + MAX_READERS)
          if (renews.length >= 3) {
            p.ev.off('burst', f)
            resolve()
          }
        })
      })
      assert.equal(w.value.signal.aborted, false)
      const st = await state(k)
      assert.equal(st.readers, MAX_READERS)
      assert.equal(st.gateHeld, true)
      assert.equal(await w.value.release(), true)
    } finally {
      p.close()
    }
  })
})

/** A TCP proxy in front of `server` that holds the reply to the first `r` request passing it for `ms` (that
 * connection's later replies wait behind it, in order). */
async function lateFirstRelease(server, ms) {
  let delayed = 0
  const sockets = new Set()
  const front = net.createServer((client) => {
    const upstream = net.connect(server.port, '127.0.0.1')
    sockets.add(client).add(upstream)
    const cmds = []
    let pending = ''
    client.on('data', (c) => {
      pending += c
      const lines = pending.split('\n')
      pending = lines.pop()
      // 3 lines per request: the first is the command (the proxy only sees whole requests' lines in order).
      for (const l of lines) cmds.push(l)
      upstream.write(c)
    })
    let replyBuf = ''
    let held = null
    let requestLine = 0
    upstream.on('data', (c) => {
      replyBuf += c
      let i
      while ((i = replyBuf.indexOf('\n')) >= 0) {
        const line = replyBuf.slice(0, i + 1)
        replyBuf = replyBuf.slice(i + 1)
        const cmd = cmds[requestLine]
        requestLine += 3
        if (cmd === 'r' && delayed === 0 && held === null) {
          delayed++
          held = [line]
          setTimeout(() => {
            client.write(held.join(''))
            held = null
          }, ms)
        } else if (held !== null) held.push(line)
        else client.write(line)
      }
    })
    for (const [a, b] of [[client, upstream], [upstream, client]]) {
      a.on('error', () => b.destroy())
      a.on('close', () => b.destroy())
    }
  })
  await new Promise((r) => front.listen(0, '127.0.0.1', r))
  return {
    port: front.address().port,
    delayed: () => delayed,
    close() {
      for (const x of sockets) x.destroy()
      front.close()
    },
  }
}

/** A TCP proxy in front of the real server that logs each connection's requests (command and key) in bursts: one
 * burst = what the client sent before it next heard from the server, so a burst is one round trip. */
async function countingProxy(target) {
  const ev = new EventEmitter()
  const bursts = []
  const sockets = new Set()
  const server = net.createServer((c) => {
    const up = net.connect(target.port, target.host)
    sockets.add(c).add(up)
    let buf = ''
    let lines = []
    let cur = null
    c.on('data', (chunk) => {
      if (cur === null) {
        cur = []
        bursts.push(cur)
      }
      buf += chunk
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        lines.push(buf.slice(0, i))
        buf = buf.slice(i + 1)
        if (lines.length === 3) {
          cur.push(`${lines[0]} ${lines[1]}`)
          lines = []
        }
      }
      up.write(chunk)
      ev.emit('burst')
    })
    up.on('data', (chunk) => {
      cur = null
      c.write(chunk)
    })
    const end = () => {
      c.destroy()
      up.destroy()
    }
    c.on('close', end).on('error', end)
    up.on('close', end).on('error', end)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    port: server.address().port,
    bursts,
    ev,
    /** Bursts logged while `fn` runs. */
    async during(fn) {
      const from = bursts.length
      const v = await fn()
      return { v, bursts: bursts.slice(from) }
    },
    close() {
      for (const s of sockets) s.destroy()
      server.close()
    },
  }
}

const cmds = (bursts) => bursts.flat().map((r) => r.split(' ')[0])
const count = (list) => list.reduce((m, c) => ((m[c] = (m[c] ?? 0) + 1), m), {})

describe('requests and round trips on the wire (counting proxy in front of the real server)', { skip, timeout: 30_000 }, () => {
  test('reader: acquire 4 requests in 2 round trips, renew 1, release 1; writer: acquire 2+16, renew and release 1+16, 1 round trip each', async () => {
    const p = await countingProxy(srv)
    try {
      const k = key('wire')
      const url = `dflockd://127.0.0.1:${p.port}/${k}?leaseTtl=2`
      const ra = await p.during(() => acquire(url, { mode: 'shared' }))
      assert.equal(ra.v.ok, true)
      // A blocking acquire enqueues at the gate (`e`, answered at once: this process's next waiter may send its own),
      // waits (`w`, at once `ok` here) and takes its slot, in one write; then lets the gate go.
      assert.deepEqual(ra.bursts.map(cmds), [['e', 'w', 'sl'], ['r']], 'reader acquire: 2 round trips')
      // The next renew (every second with a 2 s lease): one burst of one `sn`.
      const renew = await new Promise((resolve) => {
        const from = p.bursts.length
        p.ev.on('burst', function f() {
          if (p.bursts.length > from) {
            p.ev.off('burst', f)
            setImmediate(() => resolve(p.bursts.slice(from)))
          }
        })
      })
      assert.deepEqual(cmds(renew), ['sn'])
      const rr = await p.during(() => ra.v.value.release())
      assert.deepEqual(cmds(rr.bursts), ['sr'])
      assert.equal(rr.bursts.length, 1)

      const wa = await p.during(() => acquire(url, { mode: 'exclusive' }))
      assert.equal(wa.v.ok, true)
      assert.equal(wa.bursts.length, 1, 'writer acquire: 1 round trip')
      assert.deepEqual(cmds(wa.bursts).slice(0, 2), ['e', 'w'], 'the gate first')
      assert.deepEqual(count(cmds(wa.bursts)), { e: 1, w: 1, sl: MAX_READERS })
      // A try sends `l … 0` for the gate, the same shape.
      const wt = await p.during(async () => {
        const t = await tryAcquire(url, { mode: 'exclusive' })
        assert.equal(t.error.type, 'ALREADY_LOCKED')
      })
      assert.equal(cmds(wt.bursts)[0], 'l')
      const wrenew = await new Promise((resolve) => {
        const from = p.bursts.length
        p.ev.on('burst', function f() {
          const got = p.bursts.slice(from).flat().length
          if (got >= 1 + MAX_READERS) {
            p.ev.off('burst', f)
            resolve(p.bursts.slice(from))
          }
        })
      })
      assert.equal(wrenew.length, 1, 'writer renew: 1 round trip')
      assert.deepEqual(count(cmds(wrenew)), { n: 1, sn: MAX_READERS })
      const wr = await p.during(() => wa.v.value.release())
      assert.equal(wr.bursts.length, 1, 'writer release: 1 round trip')
      assert.deepEqual(count(cmds(wr.bursts)), { r: 1, sr: MAX_READERS })
      assert.equal(cmds(wr.bursts).at(-1), 'r', 'the gate last: the next writer finds every slot free')
    } finally {
      p.close()
    }
  })
})

describe('API surface', { skip, timeout: 30_000 }, () => {
  test('?mode= in the URL, withLock and DistributedLock take the mode; readers share', async () => {
    const k = key('api')
    const inner = await withLock(
      srv.url(k, 'mode=shared'),
      async () => {
        const l = new DistributedLock({ key: k, servers: [[srv.host, srv.port]], mode: 'shared', acquireTimeoutS: 0 })
        assert.equal(await l.acquire(), true, 'a second reader while the first holds')
        const x = new DistributedLock({ key: k, servers: [[srv.host, srv.port]], mode: 'exclusive', acquireTimeoutS: 0 })
        assert.equal(await x.acquire(), false, 'no writer while readers hold')
        assert.equal((await state(k)).readers, 2)
        await l.release()
        return 'ran'
      },
      { timeout: 5000 },
    )
    assert.equal(inner, 'ran')
    assert.equal((await state(k)).readers, 0)
  })

  test('status() of a key held in shared mode counts the readers; held by a writer, one holder', async () => {
    const k = key('status')
    const url = srv.url(k)
    assert.equal((await status(url)).locked, false)
    const a = await acquire(url, { mode: 'shared' })
    const b = await acquire(url, { mode: 'shared' })
    let st = await status(url)
    assert.equal(st.locked, true, 'readers hold it although the gate is free')
    assert.equal(st.holders, 2)
    assert.equal(st.limit, MAX_READERS)
    assert.equal(st.isOwnedByCurrentProcess, true)
    await a.value.release()
    await b.value.release()
    assert.equal((await status(url)).locked, false)
    const w = await acquire(url, { mode: 'exclusive' })
    st = await status(url)
    assert.equal(st.locked, true)
    assert.equal(st.holders, 1)
    await w.value.release()
  })

  test('bad input: clear INVALID_ARGUMENT, nothing sent', async () => {
    const k = key('bad')
    const r = await acquire(srv.url(k), { mode: 'read' })
    assert.equal(r.error.type, 'INVALID_ARGUMENT')
    assert.match(r.error.message, /mode/)
    const u = await acquire(srv.url(k, 'mode=read'))
    assert.equal(u.error.type, 'INVALID_ARGUMENT')
    assert.match(u.error.message, /mode=read/)
    const both = await acquire(srv.url(k), { mode: 'shared', limit: 3 })
    assert.equal(both.error.type, 'INVALID_ARGUMENT')
    assert.match(both.error.message, /limit and mode/)
    const long = await acquire(srv.url('k'.repeat(252)), { mode: 'shared' })
    assert.equal(long.error.type, 'INVALID_ARGUMENT')
    assert.match(long.error.message, /gate/)
    assert.throws(() => new DistributedLock({ key: k, mode: 'both' }), (e) => e.code === 'INVALID_ARGUMENT' && /mode/.test(e.message))
    const l = new DistributedLock({ key: k, servers: [[srv.host, srv.port]], mode: 'shared' })
    await assert.rejects(l.enqueue(), (e) => e.code === 'INVALID_ARGUMENT' && /enqueue/.test(e.message))
    l.close()
    const st = await state(k)
    assert.equal(st.gateHeld || st.readers > 0, false)
  })

  test('a sharded fleet puts the gate and the reader slots on the server the key maps to', async () => {
    const other = await d.startServer()
    const k = key('fleet')
    const servers = [srv, other]
    const url = `dflockd://${srv.host}:${srv.port},${other.host}:${other.port}/${k}?mode=exclusive`
    const w = await acquire(url)
    assert.equal(w.ok, true)
    const got = await Promise.all(servers.map((s) => state(k, s)))
    const home = got.findIndex((s) => s.gateHeld)
    assert.notEqual(home, -1)
    assert.equal(got[home].readers, MAX_READERS, 'the slots live with the gate')
    assert.equal(got[1 - home].readers + Number(got[1 - home].gateHeld), 0, 'nothing on the other server')
    await w.value.release()
    await other.stop()
  })
})
