'use strict'
// The low-level Connection against a raw scripted socket server (no real dflockd needed): one request on the wire at a
// time in call order, results in call order, reply deadlines, close() mid-request, a server that hangs up while the
// connection is idle, and bounded replies.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const u = require('./helpers/file-util')
const net = require('node:net')
const { once } = require('node:events')
const { Connection } = require('../lib/dflockd')

const servers = []
after(() => Promise.all(servers.map((s) => new Promise((r) => s.close(() => r())))))

/**
 * A server that calls `onRequest([cmd, key, arg], sock, state)` for every complete request; `state.outstanding`
 * counts requests received and not answered yet (answer with `reply(sock, line)`).
 */
async function server(onRequest) {
  const state = { maxOutstanding: 0, outstanding: 0, requests: [], sockets: new Set() }
  const srv = net.createServer((sock) => {
    state.sockets.add(sock)
    let buf = ''
    const lines = []
    sock.on('data', (d) => {
      buf += d.toString('utf8')
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        lines.push(buf.slice(0, i))
        buf = buf.slice(i + 1)
      }
      while (lines.length >= 3) {
        const req = lines.splice(0, 3)
        state.requests.push(req)
        state.outstanding++
        state.maxOutstanding = Math.max(state.maxOutstanding, state.outstanding)
        onRequest(req, sock, state)
      }
    })
    sock.on('error', () => {})
    sock.on('close', () => state.sockets.delete(sock))
  })
  await new Promise((r) => srv.listen(0, '127.0.0.1', r))
  servers.push(srv)
  state.port = srv.address().port
  return state
}

function reply(sock, state, line) {
  state.outstanding--
  sock.write(line + '\n')
}

const code = (c) => (e) => e && e.code === c

test('requests queued without awaiting go out one at a time and resolve in call order', async () => {
  let n = 0
  // Answers late (and in a varying delay) so a second request written early would be seen as outstanding.
  const s = await server(([cmd, key, arg], sock, state) => {
    const tok = String(++n).padStart(32, '0')
    setTimeout(() => reply(sock, state, cmd === 'l' ? `ok ${tok} ${arg.split(' ')[1]}` : 'ok'), 5 + (n % 3) * 5)
  })
  const c = await Connection.connect({ host: '127.0.0.1', port: s.port })
  const ps = []
  for (let i = 0; i < 20; i++) ps.push(c.acquire(`k${i}`, 0, 10 + i))
  ps.push(c.release('k0', 'x'))
  const rs = await Promise.all(ps)
  for (let i = 0; i < 20; i++) assert.deepEqual(rs[i], { token: String(i + 1).padStart(32, '0'), lease: 10 + i })
  assert.equal(rs[20], undefined)
  assert.deepEqual(
    s.requests.map((r) => r[1]),
    [...Array.from({ length: 20 }, (_, i) => `k${i}`), 'k0'],
  )
  assert.equal(s.maxOutstanding, 1)
  // And again after the connection went idle (the first request of a burst is written differently). The pause is
  // the state under test (a gap between bursts), not a wait for an event.
  await new Promise((r) => setTimeout(r, 20))
  const again = await Promise.all([c.acquire('a', 0, 5), c.acquire('b', 0, 6)])
  assert.deepEqual(again.map((g) => g.lease), [5, 6])
  assert.equal(s.maxOutstanding, 1)
  c.close()
})

test('a silent server: the request fails TIMEOUT after socketTimeoutMs, the queued one and later ones CONNECTION_ERROR', async () => {
  const s = await server(() => {})
  const c = await Connection.connect({ host: '127.0.0.1', port: s.port, socketTimeoutMs: 300 })
  const t0 = Date.now()
  const p1 = c.release('k', 't')
  const p2 = c.release('k2', 't')
  await assert.rejects(p1, (e) => e.code === 'TIMEOUT' && /^no reply from 127\.0\.0\.1:\d+ within 300ms$/.test(e.message))
  const ms = Date.now() - t0
  assert.ok(ms >= 290 && ms < u.scaled(3000), `timed out after ${ms} ms`)
  const closedMsg = (e) => e.code === 'CONNECTION_ERROR' && /^connection to 127\.0\.0\.1:\d+ is closed$/.test(e.message)
  await assert.rejects(p2, closedMsg)
  await assert.rejects(c.release('k3', 't'), closedMsg)
  assert.equal(s.requests.length, 1)
  c.close()
})

test('a blocking request gets its own timeout plus the margin, not socketTimeoutMs', async () => {
  const s = await server(([cmd], sock, state) => {
    if (cmd === 'l') setTimeout(() => reply(sock, state, 'timeout'), 700)
  })
  const c = await Connection.connect({ host: '127.0.0.1', port: s.port, socketTimeoutMs: 200 })
  await assert.rejects(c.acquire('k', 1, 10), (e) => e.name === 'AcquireTimeoutError' || e.code === 'TIMEOUT')
  assert.equal(s.requests.length, 1)
  // The connection is still usable: the server's `timeout` is a normal reply.
  const p = c.acquire('k', 1, 10)
  await assert.rejects(p, (e) => e.code === 'TIMEOUT' && e.message !== undefined && !/no reply/.test(e.message))
  c.close()
})

test('close() mid-request: the request in flight fails ABORTED, the queued one CONNECTION_ERROR', async () => {
  const s = await server(() => {})
  const c = await Connection.connect({ host: '127.0.0.1', port: s.port })
  const p1 = c.acquire('k', 30, 10)
  const p2 = c.release('k', 't')
  await u.until(() => s.requests.length === 1, { what: 'the acquire in flight at the server' })
  c.close()
  await assert.rejects(p1, (e) => e.code === 'ABORTED' && e.message === 'connection closed during the request')
  await assert.rejects(p2, (e) => e.code === 'CONNECTION_ERROR' && e.message === 'connection is closed')
  await assert.rejects(c.release('k', 't'), code('CONNECTION_ERROR'))
})

test('the server hangs up while the connection is idle: the next request says so, later ones CONNECTION_ERROR', async () => {
  const s = await server(([cmd], sock, state) => reply(sock, state, 'ok'))
  const c = await Connection.connect({ host: '127.0.0.1', port: s.port })
  await c.release('k', 't')
  for (const sock of s.sockets) sock.destroy()
  // Stays a sleep: nothing outside the native reader shows that the client has read the hang-up (its EOF).
  await new Promise((r) => setTimeout(r, 100))
  await assert.rejects(c.release('k', 't'), (e) => e.code === 'CONNECTION_ERROR' && /^server 127\.0\.0\.1:\d+ closed the connection$/.test(e.message))
  await assert.rejects(c.release('k', 't'), (e) => e.code === 'CONNECTION_ERROR' && /^connection to 127\.0\.0\.1:\d+ is closed$/.test(e.message))
  c.close()
})

test('a reply line longer than the bound fails PROTOCOL_ERROR and closes the connection', async () => {
  const s = await server(([cmd], sock, state) => {
    state.outstanding--
    sock.write('x'.repeat(1024 * 1024 + 16))
  })
  const c = await Connection.connect({ host: '127.0.0.1', port: s.port })
  await assert.rejects(c.release('k', 't'), code('PROTOCOL_ERROR'))
  await assert.rejects(c.release('k', 't'), code('CONNECTION_ERROR'))
  c.close()
})

test('a line the server sends unprompted ends the connection with the same words on both drivers', async () => {
  const s = await server(([cmd], sock, state) => reply(sock, state, 'ok'))
  const c = await Connection.connect({ host: '127.0.0.1', port: s.port })
  await c.release('k', 't')
  // Nothing asked: what a server writes before closing a connection idle past its --read-timeout. The client closes
  // the connection on reading it (the server sees the close).
  for (const sock of s.sockets) {
    const closed = once(sock, 'close')
    sock.write('error\n')
    await closed
  }
  await assert.rejects(
    c.release('k', 't'),
    (e) =>
      e.code === 'PROTOCOL_ERROR' &&
      /^server 127\.0\.0\.1:\d+ sent an unsolicited reply: error \(a dflockd server writes `error` and closes a connection that sent nothing for its --read-timeout/.test(e.message),
  )
  await assert.rejects(c.release('k', 't'), code('CONNECTION_ERROR'))
  c.close()
})
