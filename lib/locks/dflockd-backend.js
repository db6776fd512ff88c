'use strict'
// Web Locks on a dflockd server: one key per granted request, `[<path>/]wl-<encoded name>` (./names.js) under the
// base `dflockd://[token@]host[:port][/<path>][?tls=1&ca=…]`, taken through the one-string API (lib/target.js:
// FIFO queue on the server, lease renewal, loss detection). The URL is parsed and redacted by lib/dflockd/url.js.
//
// steal: the protocol has no command that evicts a holder, so a steal is a cooperative hand-over among LockManager
// clients (./dflockd-steal.js: a mailbox per client, the holder keeps the lock on its connection for the stealer).
//
// What the server cannot do, and so neither can this backend:
// - query() of other processes: `stats` tells per key whether it is held and how many wait, not by whom: their
//   entries carry `name` (and `mode: 'exclusive'` for a held plain lock) but no clientId, pid or host.

const { randomUUID } = require('node:crypto')
const target = require('../target')
const { parseDflockdUrl, redactTarget } = require('../dflockd/url')
const { stats } = require('../dflockd/connection')
const { invalidArgument } = require('../errors')
const { stemOf, nameOfStem } = require('./names')
const { Steals, connectionOptions } = require('./dflockd-steal')
const { ErrorCode } = require('../codes')
const { MAX_READERS, gateKey } = require('../dflockd/kinds')

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
    /** The manager's state of this base in this thread (./manager.js BaseState), for the steal hand-over. */
    this.state = null
    this.steals = null
  }

  attach(state) {
    this.state = state
  }

  /**
   * This client's steal machinery (its mailbox is opened when it holds a lock). Its id is this backend's own, not the
   * thread's `clientId`: two bases of one server and prefix spelt differently (`localhost`, `127.0.0.1`) are two
   * states here, each needing its own mailbox.
   */
  stealsOf() {
    if (!this.steals) {
      this.steals = new Steals(
        this.server,
        this.prefix,
        randomUUID(),
        {
          exclusiveKeys: (canGive) => this.state.heldKeys((name) => this.key(name), canGive),
          surrender: (key, canGive) => this.state.surrender((name) => this.key(name) === key, canGive),
        },
        // The intent and the confirmation: native held locks with the names' query (their leaseTtl: the same lease).
        (key, leaseTtl) => target.tryAcquire(`${this.origin}/${encodeURIComponent(key)}${this.query}`, leaseTtl ? { leaseTtl } : undefined),
      )
    }
    return this.steals
  }

  key(name) {
    return this.prefix + stemOf(name)
  }

  url(name) {
    return `${this.origin}/${encodeURIComponent(typeof name === 'string' ? this.key(name) : name)}${this.query}`
  }

  async acquire(name, mode, { wait, signal, clientId }) {
    const r = await this.take(name, mode, { wait, signal })
    // Other clients can steal from this one once its mailbox exists: opened (once, 2 keys) in the background when it
    // first holds a lock, never waited for (a server that does not answer fails the acquisition, not the mailbox),
    // never where steal is refused (several servers).
    if (r.ok && clientId !== undefined && !this.stealRefused) this.stealsOf().ready()
    return r
  }

  async take(name, mode, { wait, signal }) {
    // `mode` also on exclusive requests: the name's key is then always the readers' semaphore (lib/dflockd/kinds.js),
    // so shared requests share it; a plain mutex on it would make it a mutex, on which readers go one at a time.
    const options = { signal, timeout: wait ? Infinity : undefined, mode }
    for (;;) {
      const r = await (wait ? target.acquire : target.tryAcquire)(this.url(name), options)
      if (r.ok) return r
      if (r.error.type === ErrorCode.ALREADY_LOCKED) return { ok: false, unavailable: true }
      // The server's longest wait ran out: a Web Lock waits until granted or aborted.
      if (wait && r.error.type === ErrorCode.TIMEOUT && !signal?.aborted) continue
      return { ok: false, error: lockError(r.error) }
    }
  }

  /** The manager's state here holds no lock: the steal mailbox closes if it stays so (./dflockd-steal.js). */
  idle() {
    this.steals?.idle()
  }

  /** The manager's state here holds a lock again (also one adopted by a local steal, which acquire() did not see):
   * the mailbox stays (or opens again). */
  held() {
    if (!this.stealRefused) this.steals?.ready()
  }

  /** Why a steal is refused (the manager rejects it with a NotSupportedError before touching any lock), or null. */
  get stealRefused() {
    // The mailboxes and the hand-over keys live on one server; a fleet shards names over several.
    return this.server.servers ? 'steal is not supported on a dflockd LockManager over several servers' : null
  }

  /** A local exclusive holder's backend lock is given to the stealer as it is (the server's queue keeps its order). */
  get adoptsHeld() {
    return true
  }

  /** Steals `name` from another client (./dflockd-steal.js); takes it at once when nobody holds it. */
  async steal(name, { clientId }) {
    const r = await this.stealsOf().steal(this.key(name), () => this.acquire(name, 'exclusive', { wait: false, clientId }))
    // A stolen lock can be stolen in turn: its holder needs a mailbox too.
    if (r.ok) this.steals.ready()
    return r
  }

  /**
   * Other clients' requests, from the server's `stats`. A name's exclusive lock is the mutex on its key; with shared
   * locks (lib/dflockd/kinds.js: the readers' slots are the key itself, a semaphore of MAX_READERS, all taken by a
   * writer, whose gate is the mutex `<key>/gate`) the slots tell the readers. What the gate holder is, is inferred:
   * readers holding slots and the gate held = a writer waiting for them to leave (or a reader between its two steps).
   */
  async others(local) {
    const s = await stats(connectionOptions(this.server))
    const byName = new Map()
    const suffix = gateKey('')
    const at = (key) => {
      if (typeof key !== 'string' || !key.startsWith(this.prefix)) return null
      const rest = key.slice(this.prefix.length)
      const gate = rest.endsWith(suffix)
      const name = nameOfStem(gate ? rest.slice(0, -suffix.length) : rest)
      if (name == null) return null
      if (!byName.has(name)) byName.set(name, { mutex: false, mutexWaiters: 0, gate: false, gateWaiters: 0, readers: 0, readerWaiters: 0 })
      return { e: byName.get(name), gate }
    }
    for (const l of s.locks) {
      const x = at(l.key)
      if (!x) continue
      if (x.gate) {
        x.e.gate = Number(l.owner_conn_id) !== 0
        x.e.gateWaiters = Number(l.waiters) || 0
      } else {
        x.e.mutex = Number(l.owner_conn_id) !== 0
        x.e.mutexWaiters = Number(l.waiters) || 0
      }
    }
    for (const l of s.semaphores) {
      const x = at(l.key)
      if (!x || x.gate) continue
      x.e.readers = Number(l.holders) || 0
      x.e.readerWaiters = Number(l.waiters) || 0
    }
    const held = []
    const pending = []
    for (const [name, e] of byName) {
      const theirs = { held: [], pending: [] }
      if (e.mutex) theirs.held.push('exclusive')
      if (e.readers >= MAX_READERS && e.gate) theirs.held.push('exclusive')
      else {
        for (let i = 0; i < e.readers; i++) theirs.held.push('shared')
        if (e.gate) (e.readers > 0 ? theirs.pending : theirs.held).push('exclusive')
      }
      for (let i = 0; i < e.mutexWaiters + e.gateWaiters + e.readerWaiters; i++) theirs.pending.push(undefined)
      // This thread's own requests (held, or waiting at the server) are listed from its state: take them out, by
      // mode where the server tells it; one whose try is under way may already be granted at the server (one whose
      // try was refused waits behind a holder, or has not reached the server's queue yet: the holder stays listed).
      for (const r of local(name)) {
        if (takeOut(r.state === 'held' ? theirs.held : theirs.pending, r.mode)) continue
        if (r.state === 'acquiring') takeOut(theirs.held, r.mode)
      }
      for (const mode of theirs.held) held.push(mode ? { name, mode } : { name })
      for (const mode of theirs.pending) pending.push(mode ? { name, mode } : { name })
    }
    return { held, pending }
  }
}

/** Removes one entry of `mode` (else one of unknown mode) from `list`; false when there is none. */
function takeOut(list, mode) {
  let i = list.indexOf(mode)
  if (i < 0) i = list.indexOf(undefined)
  if (i < 0) return false
  list.splice(i, 1)
  return true
}

function lockError(e) {
  const { toLockError } = require('../errors')
  return toLockError(e)
}

module.exports = { DflockdBackend }
