'use strict'
// Test helper: a fault-injecting TCP proxy between a client and a REAL dflockd server, for the network faults the
// server itself never produces (a lost request, a lost reply, a slow link, a reply cut in the middle, a server that
// accepts and never answers).
//
//   const { startFaultProxy } = require('./helpers/fault-proxy')
//   const p = await startFaultProxy(server, fault)      server = {host, port} (e.g. from helpers/dflockd startServer)
//       p.host, p.port, p.url(key, query?) → 'dflockd://127.0.0.1:<proxy port>/<key>[?query]'
//       p.fault = {...}                    the fault for connections accepted from now on
//       p.on('drop', ({dir, bytes}))       bytes swallowed ('up' = client→server, 'down' = server→client)
//       p.connections                      connections accepted so far
//       await p.close()                    destroys every socket and stops listening
//   await closeAllProxies()                (use in after())
//
// A fault, per connection (all fields optional; none = a plain pipe):
//   upLines: N       forward the first N lines client→server, then swallow the rest of that direction
//   downLines: N     forward the first N lines server→client, then swallow the rest of that direction
//   downPartial: K   with downLines: forward K more bytes after those N lines (a reply cut mid-line), then swallow
//   delayMs: D       every chunk (and the end of the stream) reaches the other side D ms later, both directions
//   silent: true     accept and never answer: no upstream connection, nothing written back
// A direction that swallows also swallows the end of its stream (a partition does not carry a FIN): when the client
// closes after its requests were swallowed, the server does not hear of it until the proxy closes.

const net = require('node:net')
const { EventEmitter } = require('node:events')

const proxies = new Set()

/** Counts lines in `chunk` and returns how many of its bytes fit before the `left`-th newline (inclusive). */
function cutAfterLines(chunk, left) {
  let i = -1
  for (let n = 0; n < left; n++) {
    i = chunk.indexOf(0x0a, i + 1)
    if (i < 0) return { keep: chunk.length, lines: n }
  }
  return { keep: i + 1, lines: left }
}

/** One direction of a connection: forwards, counts lines, swallows after the limit, delays. */
function direction(from, to, { lines, partial = 0, delayMs = 0 }, emit) {
  let linesLeft = lines === undefined ? Infinity : lines
  let partialLeft = partial
  let swallowing = false
  const send = (fn) => (delayMs > 0 ? setTimeout(fn, delayMs) : fn())
  from.on('data', (chunk) => {
    let out = chunk
    if (!swallowing && linesLeft !== Infinity) {
      const { keep, lines: seen } = cutAfterLines(chunk, linesLeft)
      linesLeft -= seen
      let n = keep
      if (linesLeft === 0) {
        const extra = Math.min(partialLeft, chunk.length - keep)
        partialLeft -= extra
        n += extra
        if (partialLeft === 0) swallowing = true
      }
      out = chunk.subarray(0, n)
      if (n < chunk.length) emit(chunk.length - n)
    } else if (swallowing) {
      out = chunk.subarray(0, 0)
      emit(chunk.length)
    }
    if (out.length > 0) send(() => to.destroyed || to.write(out))
  })
  from.on('end', () => {
    if (!swallowing) send(() => to.destroyed || to.end())
  })
  return { get swallowing() { return swallowing } }
}

async function startFaultProxy(target, fault = {}) {
  const sockets = new Set()
  const p = new EventEmitter()
  p.host = '127.0.0.1'
  p.fault = fault
  p.connections = 0
  p.url = (key, query) => `dflockd://${p.host}:${p.port}/${encodeURIComponent(key)}${query ? `?${query}` : ''}`
  const srv = net.createServer((client) => {
    p.connections++
    const f = p.fault
    sockets.add(client)
    client.on('error', () => {})
    client.on('close', () => sockets.delete(client))
    if (f.silent) return
    const upstream = net.connect({ host: target.host, port: target.port })
    sockets.add(upstream)
    upstream.setNoDelay(true)
    client.setNoDelay(true)
    upstream.on('error', () => {})
    upstream.on('close', () => sockets.delete(upstream))
    const up = direction(client, upstream, { lines: f.upLines, delayMs: f.delayMs }, (bytes) => p.emit('drop', { dir: 'up', bytes }))
    const down = direction(upstream, client, { lines: f.downLines, partial: f.downPartial, delayMs: f.delayMs }, (bytes) =>
      p.emit('drop', { dir: 'down', bytes }),
    )
    // A reset or close on one side reaches the other (after the delay), unless that direction is swallowing.
    const later = (fn) => (f.delayMs > 0 ? setTimeout(fn, f.delayMs) : fn())
    client.on('close', () => {
      if (!up.swallowing) later(() => upstream.destroy())
    })
    upstream.on('close', () => {
      if (!down.swallowing) later(() => client.destroy())
    })
  })
  await new Promise((resolve, reject) => {
    srv.once('error', reject)
    srv.listen(0, p.host, resolve)
  })
  p.port = srv.address().port
  p.close = async () => {
    proxies.delete(p)
    for (const s of sockets) s.destroy()
    await new Promise((r) => srv.close(() => r()))
  }
  proxies.add(p)
  return p
}

async function closeAllProxies() {
  await Promise.all([...proxies].map((p) => p.close()))
}

module.exports = { startFaultProxy, closeAllProxies }
