'use strict'
// A plain Node `net` dflockd client: one persistent socket, one request in flight, replies split on '\n'.
// The floor for a JavaScript client (no validation, no renewal, nothing but the protocol).

const net = require('node:net')

class NetClient {
  constructor(socket) {
    this.socket = socket
    this.buf = ''
    this.pending = null
    socket.setNoDelay(true)
    socket.setEncoding('utf8')
    socket.on('data', (d) => {
      this.buf += d
      let i
      while (this.pending && (i = this.buf.indexOf('\n')) >= 0) {
        const line = this.buf.slice(0, i)
        this.buf = this.buf.slice(i + 1)
        const p = this.pending
        this.pending = null
        p.resolve(line)
      }
    })
    const fail = (e) => {
      if (this.pending) this.pending.reject(e || new Error('connection closed'))
      this.pending = null
    }
    socket.on('error', fail)
    socket.on('close', () => fail())
  }

  static connect(port, host = '127.0.0.1') {
    return new Promise((resolve, reject) => {
      const s = net.connect({ port, host }, () => {
        s.off('error', reject)
        resolve(new NetClient(s))
      })
      s.once('error', reject)
    })
  }

  request(cmd, key, arg) {
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject }
      this.socket.write(`${cmd}\n${key}\n${arg}\n`)
    })
  }

  async lock(key, timeoutS, leaseS) {
    const line = await this.request('l', key, `${timeoutS} ${leaseS}`)
    const m = /^ok (\S+) (\d+)$/.exec(line)
    if (!m) throw new Error(`l ${key}: unexpected reply '${line}'`)
    return m[1]
  }

  async release(key, token) {
    const line = await this.request('r', key, token)
    if (line !== 'ok') throw new Error(`r ${key}: unexpected reply '${line}'`)
  }

  close() {
    this.socket.destroy()
  }
}

module.exports = { NetClient }
