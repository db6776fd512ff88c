'use strict'
// A minimal dflockd connection over Node's own socket, for the steal protocol's bells (./dflockd-steal.js) only.
// Why not lib/dflockd's Connection: a bell's watcher sits in a blocking `l` for minutes, and the native connection
// keeps the process alive while a request is pending (right for a user's acquire, wrong for a LockManager's idle
// mailbox); a Node socket can be unref'd (keepAlive(false)). An idle one never keeps the process alive. It speaks
// `l`, `r`, `n`, `auth` and `stats`, requests answered in order, on keys ./dflockd-steal.js builds itself.

const net = require('node:net')
const tls = require('node:tls')
const { LockError, AuthError } = require('../errors')
const { ErrorCode } = require('../codes')

/** The protocol's line limit (256 bytes, excluding the newline) and key rule (no space, tab, CR, LF; not empty). */
const MAX_LINE = 256
/** The native connection's defaults (lib/dflockd): a connect (and TLS handshake, and auth) within 10 s, a reply within
 * 30 s (plus the server-side wait of a blocking `l`). A silent server fails the request, never hangs it. */
const TIMEOUTS = { connectMs: 10000, replyMs: 30000 }

class Wire {
  #socket
  #buffer = ''
  /** FIFO of {resolve, reject} of the requests sent, one reply line each. */
  #waiting = []
  #closed = false
  #error = null
  #ref = true
  #replyMs

  constructor(socket, replyMs = TIMEOUTS.replyMs) {
    this.#socket = socket
    this.#replyMs = replyMs
    socket.setEncoding('utf8')
    socket.setNoDelay(true)
    socket.on('data', (chunk) => this.#data(chunk))
    socket.on('error', (e) => this.#fail(new LockError(`dflockd steal connection failed: ${e.message}`, ErrorCode.CONNECTION_ERROR)))
    socket.on('close', () => this.#fail(new LockError('dflockd steal connection closed', ErrorCode.CONNECTION_ERROR)))
    socket.unref()
  }

  /**
   * Connects to `server` ({host, port, auth?, tls?, ca?} as lib/dflockd/url.js parses it); authenticates.
   * `timeouts` (tests): {connectMs, replyMs}, default TIMEOUTS.
   */
  static async open(server, timeouts = TIMEOUTS) {
    const { connectMs = TIMEOUTS.connectMs, replyMs = TIMEOUTS.replyMs } = timeouts
    const socket = await new Promise((resolve, reject) => {
      const o = { host: server.host, port: server.port }
      const s = server.tls ? tls.connect({ ...o, servername: net.isIP(server.host) ? undefined : server.host, ...(server.ca ? { ca: server.ca } : {}) }) : net.connect(o)
      const ready = server.tls ? 'secureConnect' : 'connect'
      const timer = setTimeout(() => {
        s.destroy()
        reject(new LockError(`cannot connect to dflockd ${server.host}:${server.port} for a steal: no connection within ${connectMs} ms`, ErrorCode.TIMEOUT))
      }, connectMs)
      timer.unref()
      s.once(ready, () => {
        clearTimeout(timer)
        s.removeAllListeners('error')
        resolve(s)
      })
      s.once('error', (e) => {
        clearTimeout(timer)
        reject(new LockError(`cannot connect to dflockd ${server.host}:${server.port} for a steal: ${e.message}`, ErrorCode.CONNECTION_ERROR))
      })
    })
    const wire = new Wire(socket, replyMs)
    if (server.auth !== undefined) {
      const r = await wire.request('auth', '_', server.auth).catch((e) => e)
      if (r instanceof LockError && r.code === ErrorCode.TIMEOUT) throw r
      if (r !== 'ok') {
        wire.close()
        // Never the token itself in a message.
        throw new AuthError('dflockd refused the auth token (steal connection)')
      }
    }
    return wire
  }

  #data(chunk) {
    this.#buffer += chunk
    let i
    while ((i = this.#buffer.indexOf('\n')) >= 0) {
      const line = this.#buffer.slice(0, i).replace(/\r$/, '')
      this.#buffer = this.#buffer.slice(i + 1)
      const w = this.#waiting.shift()
      if (w) {
        clearTimeout(w.timer)
        w.resolve(line)
      }
      this.#refresh()
    }
    if (this.#buffer.length > 1 << 20) this.#fail(new LockError('dflockd reply exceeded 1 MiB', ErrorCode.PROTOCOL_ERROR))
  }

  #fail(error) {
    if (!this.#error) this.#error = error
    this.#closed = true
    this.#socket.destroy()
    for (const w of this.#waiting.splice(0)) {
      clearTimeout(w.timer)
      w.reject(this.#error)
    }
  }

  /** Keep the process alive while a request is pending, if `keepAlive(true)` asked for it. */
  #refresh() {
    if (this.#ref && this.#waiting.length > 0) this.#socket.ref()
    else this.#socket.unref()
  }

  /** Whether a pending request keeps the process alive (default: yes; a bell's watcher says no). */
  keepAlive(on) {
    this.#ref = on
    if (!this.#closed) this.#refresh()
  }

  get closed() {
    return this.#closed
  }

  /** Sends `cmd\nkey\narg\n`; resolves the reply line. `waitS`: how long the server may wait before it replies (a
   * blocking `l`), added to the reply deadline; past it the connection fails (TIMEOUT). */
  request(cmd, key, arg, waitS = 0) {
    if (this.#closed) return Promise.reject(this.#error ?? new LockError('dflockd steal connection closed', ErrorCode.CONNECTION_ERROR))
    for (const line of [cmd, key, arg]) {
      if (/[\r\n]/.test(line) || Buffer.byteLength(line) > MAX_LINE) {
        return Promise.reject(new LockError(`invalid dflockd request line for a steal: '${line.slice(0, 40)}'`, ErrorCode.INVALID_ARGUMENT))
      }
    }
    return new Promise((resolve, reject) => {
      // Unref'd: whether a pending request keeps the process alive is the socket's business (#refresh).
      const timer = setTimeout(
        () => this.#fail(new LockError(`dflockd did not answer '${cmd}' within ${waitS * 1000 + this.#replyMs} ms (steal connection)`, ErrorCode.TIMEOUT)),
        waitS * 1000 + this.#replyMs,
      )
      timer.unref()
      this.#waiting.push({ resolve, reject, timer })
      this.#refresh()
      this.#socket.write(`${cmd}\n${key}\n${arg}\n`)
    })
  }

  /** `l key timeout ttl`: the token, or null on `timeout`; throws on any other reply. */
  async lock(key, timeoutS, ttlS) {
    const r = await this.request('l', key, `${timeoutS} ${ttlS}`, timeoutS)
    if (r === 'timeout') return null
    const m = /^ok (\S+)/.exec(r)
    if (!m) throw new LockError(`dflockd refused a steal key (l): '${r}'`, ErrorCode.SERVER_ERROR, { reply: r.split(' ')[0] })
    return m[1]
  }

  /** `r key token`: true when released, false when the token holds nothing (any other reply too). */
  async release(key, token) {
    return (await this.request('r', key, token)) === 'ok'
  }

  /** `n key token ttl`: true when renewed. */
  async renew(key, token, ttlS) {
    return /^ok\b/.test(await this.request('n', key, `${token} ${ttlS}`))
  }

  async stats() {
    const r = await this.request('stats', '_', '')
    if (!r.startsWith('ok ')) throw new LockError(`stats failed: '${r}'`, ErrorCode.SERVER_ERROR, { reply: r.split(' ')[0] })
    const s = JSON.parse(r.slice(3))
    for (const k of ['locks', 'semaphores', 'idle_locks', 'idle_semaphores']) if (!Array.isArray(s[k])) s[k] = []
    return s
  }

  close() {
    if (this.#closed) return
    this.#closed = true
    this.#error = new LockError('dflockd steal connection closed', ErrorCode.CONNECTION_ERROR)
    this.#socket.destroy()
    for (const w of this.#waiting.splice(0)) {
      clearTimeout(w.timer)
      w.reject(this.#error)
    }
  }
}

module.exports = { Wire, TIMEOUTS }
