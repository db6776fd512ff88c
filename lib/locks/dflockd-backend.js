'use strict'
// Web Locks on a dflockd server: one key per granted request, `[<path>/]wl-<encoded name>` (./names.js) under the
// base `dflockd://[token@]host[:port][/<path>][?tls=1&ca=…]`, taken through the one-string API (lib/target.js:
// FIFO queue on the server, lease renewal, loss detection). The URL is parsed and redacted by lib/dflockd/url.js.
//
// What the server cannot do, and so neither can this backend:
// - steal: the protocol has no command that evicts a holder (`r`/`n` need the holder's token, which only the holder
//   has; a lease ends only by expiry). `steal: true` is refused with a NotSupportedError.
// - query() of other processes: `stats` tells per key whether it is held and how many wait, not by whom: their
//   entries carry `name` (and `mode: 'exclusive'` for a held plain lock) but no clientId, pid or host.

const target = require('../target')
const { parseDflockdUrl, redactTarget } = require('../dflockd/url')
const { stats } = require('../dflockd/connection')
const { invalidArgument } = require('../errors')
const { stemOf, nameOfStem } = require('./names')

class DflockdBackend {
  constructor(base) {
    const m = /^(dflockd:\/\/[^/?#]*)(\/[^?#]*)?(\?[^#]*)?$/i.exec(base)
    if (!m) throw invalidArgument(`invalid dflockd base for a LockManager (dflockd://[token@]host[:port][/prefix]): ${redactTarget(base)}`)
    this.origin = m[1]
    this.prefix = m[2] && m[2] !== '/' ? `${decodeURIComponent(m[2].slice(1).replace(/\/$/, ''))}/` : ''
    this.query = m[3] ?? ''
    // Parsed now so that a bad base fails at createLockManager (with a stand-in key, which its message does not show).
    const probe = this.url('x')
    try {
      this.server = parseDflockdUrl(probe)
    } catch (e) {
      if (typeof e.message === 'string') e.message = e.message.split(redactTarget(probe)).join(redactTarget(base))
      throw e
    }
    this.id = `dflockd:${this.server.host.toLowerCase()}|${this.server.port}|${this.prefix}`
    this.kind = 'dflockd'
  }

  key(name) {
    return this.prefix + stemOf(name)
  }

  url(name) {
    return `${this.origin}/${encodeURIComponent(typeof name === 'string' ? this.key(name) : name)}${this.query}`
  }

  async acquire(name, mode, { wait, signal }) {
    const options = { signal, timeout: wait ? Infinity : undefined }
    if (mode === 'shared') options.mode = mode
    for (;;) {
      const r = await (wait ? target.acquire : target.tryAcquire)(this.url(name), options)
      if (r.ok) return r
      if (r.error.type === 'ALREADY_LOCKED') return { ok: false, unavailable: true }
      // The server's longest wait ran out: a Web Lock waits until granted or aborted.
      if (wait && r.error.type === 'TIMEOUT' && !signal?.aborted) continue
      return { ok: false, error: lockError(r.error) }
    }
  }

  /** Why a steal is refused (the manager rejects it with a NotSupportedError before touching any lock). */
  get stealRefused() {
    return (
      'steal is not supported on a dflockd LockManager: the dflockd protocol has no command that evicts ' +
      "another client's holder (release and renew need the holder's token, and a lease ends only when it expires)"
    )
  }

  async others(localCounts) {
    const u = this.server
    const s = await stats({
      host: u.host,
      port: u.port,
      ...(u.auth !== undefined ? { auth: u.auth } : {}),
      ...(u.ca !== undefined ? { tls: { ca: u.ca } } : u.tls ? { tls: true } : {}),
    })
    const held = []
    const pending = []
    const entries = [
      ...s.locks.map((l) => ({ key: l.key, holders: Number(l.owner_conn_id) !== 0 ? 1 : 0, waiters: Number(l.waiters) || 0, mode: 'exclusive' })),
      ...s.semaphores.map((l) => ({ key: l.key, holders: Number(l.holders) || 0, waiters: Number(l.waiters) || 0 })),
    ]
    for (const e of entries) {
      if (typeof e.key !== 'string' || !e.key.startsWith(this.prefix)) continue
      const name = nameOfStem(e.key.slice(this.prefix.length))
      if (name == null) continue
      const mine = localCounts(name)
      for (let i = 0; i < e.holders - mine.held; i++) held.push(e.mode ? { name, mode: e.mode } : { name })
      for (let i = 0; i < e.waiters - mine.waiting; i++) pending.push({ name })
    }
    return { held, pending }
  }
}

function lockError(e) {
  const { toLockError } = require('../errors')
  return toLockError(e)
}

module.exports = { DflockdBackend }
