'use strict'
// `steal` on a dflockd LockManager: a cooperative hand-over among LockManager clients, built from the server's
// primitives (dflockd v1.10.0 has no eviction and tells a holder nothing; only a blocked waiter is woken, by a grant).
//
// The building block is a BELL: a key held on one connection, and a watcher blocked in `l <key>` on another. Anyone
// who knows the holder's token rings it with `r <key> <token>` (tokens are bearer capabilities, usable from any
// connection): the watcher is granted, so its process wakes, with no polling. The token is published in the NAME of a
// second held key, `<bell>~<token>`, which `stats` lists.
//
// - MAILBOX, one per client (thread) per server and prefix: the bell `<prefix>wl~mbox~<clientId>`. Rung, the client
//   reads `stats` once for steal intents on names it holds, and re-arms (the granted watcher becomes the holder and
//   publishes its token; the old holder becomes the watcher).
// - A STEAL of the key K by the client S: S holds the intent `<prefix>wl~steal~<h>~<S>` (h = a hash of K) and rings
//   every other mailbox of the prefix. The client H that holds K exclusively answers: its request rejects with an
//   AbortError, and it holds `<prefix>wl~stolen~<h>~<S>` (the confirmation) and watches S's intent. From then on H's
//   connection keeps holding K (and renewing it) FOR S: dflockd ties a lease to its connection (a disconnect
//   releases it) and has no command to move it, so a hand-over of the token alone would not survive H's connection.
//   S watches the confirmation. When S is done it releases its intent: H's watch is granted and H releases K, so the
//   server grants K to the next waiter of its FIFO queue (waiters queued before the steal keep their order, after S).
//   If H dies, its confirmation is released by the disconnect and S's watch is granted: S has lost the lock (its
//   request rejects with an AbortError). If S dies, its intent is released the same way and H releases K.
//   While it holds a lock for a stealer, H's process stays alive (its watch of the intent is ref'd): the lock dies
//   with H's connection.
// - Nobody answers within ANSWER_MS (the holder is not a LockManager client — a DistributedLock, another dflockd
//   client — or it is stuck): the steal rejects with a NotSupportedError and nothing is taken. K held in shared mode
//   by another process is refused at once (NotSupportedError): steal of readers is not built (see lock-kinds.md).
//
// Keys on the server (its --max-locks budget counts them, idle ones too for --gc-max-idle, 60 s): a client's
// mailbox is 2 keys, plus 1 per time it is rung (the re-armed token's name); a steal adds 2 (intent, confirmation)
// and rings each other client of the prefix once (1 key each; again every RERING_MS while nobody answers, so at most
// 4 times). Grants create none.

const { createHash } = require('node:crypto')
const { Wire } = require('./dflockd-wire')
const { LockError } = require('../errors')

/** Lease of every bell key; renewed every RENEW_MS, which also keeps the holding connection under the server's
 * 23 s read timeout. */
const BELL_TTL_S = 60
const RENEW_MS = 10000
/** A watcher's blocking `l`, re-issued when it times out. */
const WATCH_S = 3600
/** How long a stealer waits for the holder's answer. The answer takes 4 round trips after the ring (stats, 2 × l,
 * and the stealer's own stats poll), a few ms on a LAN; 2 s leaves room for a busy holder's event loop. */
const ANSWER_MS = 2000
/** The stealer's poll of `stats` for the answer, during a steal only. */
const POLL_MS = 25
/** A client rung without an answer is rung again after this (a lost look at stats): at most 4 rings per steal. */
const RERING_MS = 500

const hashOf = (key) => createHash('sha256').update(key).digest('hex').slice(0, 16)

const sleep = (ms) => new Promise((r) => setTimeout(r, ms).unref())

/** The held (owner_conn_id ≠ 0) lock keys of a stats snapshot. */
function heldKeys(s) {
  const out = new Set()
  for (const l of s.locks) if (Number(l.owner_conn_id) !== 0) out.add(l.key)
  return out
}

/** Renews `parts()` ([{key, token}]) on `wire()` every RENEW_MS (unref'd); returns the stop function. */
function renewing(wire, parts, onFail) {
  const t = setInterval(() => {
    const on = wire()
    Promise.all(parts().map((p) => on.renew(p.key, p.token, BELL_TTL_S))).then(
      (ok) => ok.every(Boolean) || onFail(new LockError('a steal key could not be renewed', 'LOCK_LOST')),
      onFail,
    )
  }, RENEW_MS)
  t.unref()
  return () => clearInterval(t)
}

/**
 * Blocks in `l key` on `wire` until granted (re-issued on the server's timeout); resolves the token. The wait keeps
 * the process alive only when `keepAlive` (a holder keeping a lock for a stealer).
 */
async function watch(wire, key, keepAlive = false) {
  wire.keepAlive(keepAlive)
  for (;;) {
    const t = await wire.lock(key, WATCH_S, BELL_TTL_S)
    if (t !== null) return t
  }
}

class Steals {
  /**
   * @param server {host, port, auth?, tls?, ca?} (lib/dflockd/url.js)
   * @param prefix the LockManager's key prefix
   * @param clientId this thread's client id
   * @param owner {exclusiveKeys(): string[], surrender(key): handle|null} (the manager's state, via the backend)
   */
  constructor(server, prefix, clientId, owner) {
    this.server = server
    this.prefix = prefix
    this.clientId = clientId
    this.owner = owner
    this.mbox = `${prefix}wl~mbox~${clientId}`
    /** The mailbox: a promise of {holder: {wire, token, nameKey, nameToken}, watcher: wire}, or null. */
    this.opening = null
    /** Intent keys this client is answering or keeping a lock for (a second ring does not answer twice). */
    this.proxies = new Set()
  }

  /** Opens the mailbox once (again after a failure); never rejects (a client without one is not answered). */
  ready() {
    if (!this.opening) {
      this.opening = this.#open().catch(() => {
        this.opening = null
        return null
      })
    }
    return this.opening
  }

  async #open() {
    const a = await Wire.open(this.server)
    let b
    try {
      b = await Wire.open(this.server)
      const token = await a.lock(this.mbox, 0, BELL_TTL_S)
      if (token === null) throw new LockError(`mailbox ${this.mbox} is taken`, 'ALREADY_LOCKED')
      const box = { holder: null, watcher: b, stop: null, broken: false }
      box.holder = await this.#publish(a, token)
      box.stop = renewing(
        () => box.holder.wire,
        () => [
          { key: this.mbox, token: box.holder.token },
          { key: box.holder.nameKey, token: box.holder.nameToken },
        ],
        () => this.#broken(box),
      )
      this.#arm(box)
      return box
    } catch (e) {
      a.close()
      b?.close()
      throw e
    }
  }

  /** Holds the key naming `token` on `wire`. */
  async #publish(wire, token) {
    const nameKey = `${this.mbox}~${token}`
    const nameToken = await wire.lock(nameKey, 0, BELL_TTL_S)
    if (nameToken === null) throw new LockError(`mailbox name ${nameKey} is taken`, 'ALREADY_LOCKED')
    return { wire, token, nameKey, nameToken }
  }

  /** The watcher waits for a ring; rung, it becomes the holder and the old holder watches. */
  #arm(box) {
    const w = box.watcher
    watch(w, this.mbox)
      .then(async (token) => {
        const old = box.holder
        box.holder = await this.#publish(w, token)
        box.watcher = old.wire
        await old.wire.release(old.nameKey, old.nameToken)
        this.#arm(box)
        // A failed look (stats) loses this ring only: the stealer rings again while it waits.
        await this.#rung().catch(() => {})
      })
      .catch(() => this.#broken(box))
  }

  /** A mailbox connection failed: closed; the next acquisition opens a new one. */
  #broken(box) {
    if (box.broken) return
    box.broken = true
    box.stop?.()
    box.holder?.wire.close()
    box.watcher?.close()
    this.opening = null
  }

  /** Rung: answers every steal intent on a key this client holds exclusively. */
  async #rung() {
    const box = await this.opening
    if (!box) return
    const held = heldKeys(await box.holder.wire.stats())
    const mine = new Map(this.owner.exclusiveKeys().map((k) => [hashOf(k), k]))
    const intent = new RegExp(`^${escape(this.prefix)}wl~steal~([0-9a-f]{16})~([0-9a-f-]{36})$`)
    for (const k of held) {
      const m = intent.exec(k)
      if (!m || m[2] === this.clientId || this.proxies.has(k) || !mine.has(m[1])) continue
      this.#answer(mine.get(m[1]), k, `${this.prefix}wl~stolen~${m[1]}~${m[2]}`).catch(() => {})
    }
  }

  /** Gives `key` to the stealer of `intentKey`: holds it for them until the intent is released. */
  async #answer(key, intentKey, confirmKey) {
    this.proxies.add(intentKey)
    let p
    let q
    try {
      p = await Wire.open(this.server)
      q = await Wire.open(this.server)
      const handle = this.owner.surrender(key)
      if (!handle) return
      const confirm = await p.lock(confirmKey, 0, BELL_TTL_S)
      if (confirm === null) {
        await handle.release().catch(() => {})
        return
      }
      const stop = renewing(
        () => p,
        () => [{ key: confirmKey, token: confirm }],
        () => {},
      )
      // The lock is now the stealer's: this process stays alive while it holds it for them.
      const lost = new Promise((r) => handle.signal.addEventListener('abort', r, { once: true }))
      // Ends when the stealer releases its intent (or dies), when the lock is lost, or when the watch's connection
      // fails: then too the lock and the confirmation are released, so the stealer hears of it (its watch is granted).
      const done = watch(q, intentKey, true).then((t) => q.release(intentKey, t))
      await Promise.race([done.catch(() => {}), lost])
      stop()
      await handle.release().catch(() => {})
      await p.release(confirmKey, confirm).catch(() => {})
    } finally {
      this.proxies.delete(intentKey)
      p?.close()
      q?.close()
    }
  }

  /**
   * Steals `key` from the client that holds it: `{ok: true, value: handle}` (signal, release()) or `{ok: false,
   * error}`. When nobody holds it, `tryTake()` takes it (its result is returned).
   */
  async steal(key, tryTake) {
    await this.ready()
    const h = hashOf(key)
    const intentKey = `${this.prefix}wl~steal~${h}~${this.clientId}`
    const confirmKey = `${this.prefix}wl~stolen~${h}~${this.clientId}`
    const w = await Wire.open(this.server)
    let watcher
    let stopIntent = () => {}
    try {
      const intent = await w.lock(intentKey, 0, BELL_TTL_S)
      if (intent === null) throw new LockError(`a steal of this name by this client is already in progress`, 'ALREADY_LOCKED')
      stopIntent = renewing(
        () => w,
        () => [{ key: intentKey, token: intent }],
        () => {},
      )
      /** clientId → when it was last rung */
      const rung = new Map()
      const deadline = Date.now() + ANSWER_MS
      const boxes = new RegExp(`^${escape(this.prefix)}wl~mbox~([0-9a-f-]{36})~(\\S+)$`)
      for (;;) {
        const s = await w.stats()
        const held = heldKeys(s)
        if (held.has(confirmKey)) break
        const readers = s.semaphores.find((x) => x.key === `${key}${READERS_SUFFIX}`)
        const sharedHolders = Number(readers?.holders) || 0
        if (!held.has(key) && sharedHolders === 0) {
          const r = await tryTake()
          if (r.ok || !r.unavailable) {
            stopIntent()
            await w.release(intentKey, intent).catch(() => {})
            w.close()
            return r
          }
          continue
        }
        if (!held.has(key) && sharedHolders > 0) {
          throw notSupported('it is held in shared mode by another process (steal breaks only an exclusive holder on dflockd)')
        }
        if (Date.now() > deadline) {
          throw notSupported(
            `its holder did not answer within ${ANSWER_MS} ms (it is not a LockManager client of this base — e.g. a ` +
              'DistributedLock or another dflockd client — or it is not responding); nothing was taken',
          )
        }
        for (const k of held) {
          const m = boxes.exec(k)
          if (!m || m[1] === this.clientId || Date.now() - (rung.get(m[1]) ?? -Infinity) < RERING_MS) continue
          // A stale token (the client was rung meanwhile and re-armed) fails: rung again on the next round.
          if (await w.release(`${this.prefix}wl~mbox~${m[1]}`, m[2])) rung.set(m[1], Date.now())
        }
        await sleep(POLL_MS)
      }
      // Answered: the holder's connection holds `key` for us until we release the intent.
      watcher = await Wire.open(this.server)
      const ctl = new AbortController()
      let releasing = false
      const over = watch(watcher, confirmKey).then(
        (t) => watcher.release(confirmKey, t).catch(() => {}),
        () => {},
      )
      over.then(() => {
        if (releasing) return
        stopIntent()
        w.close()
        watcher.close()
        ctl.abort(new LockError(`lock '${key}' lost: the process it was stolen from (which keeps it on its connection) is gone`, 'LOCK_LOST'))
      })
      const handle = {
        signal: ctl.signal,
        async release() {
          if (releasing) return
          releasing = true
          stopIntent()
          await w.release(intentKey, intent).catch(() => {})
          // The holder releases the lock, then its confirmation: our watch is granted (bounded, in case it hangs).
          await Promise.race([over, sleep(ANSWER_MS)])
          w.close()
          watcher.close()
        },
      }
      return { ok: true, value: handle }
    } catch (e) {
      stopIntent()
      w.close()
      watcher?.close()
      return { ok: false, error: e }
    }
  }
}

function notSupported(why) {
  return new DOMException(`steal on a dflockd LockManager: ${why}`, 'NotSupportedError')
}

function escape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/** lib/dflockd's shared mode (sema-core dflockd/shared.rs): the reader-slot key's suffix. */
const READERS_SUFFIX = '/readers'

module.exports = { Steals, hashOf, ANSWER_MS }
