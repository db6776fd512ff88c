'use strict'
// `steal` on a dflockd LockManager: a cooperative hand-over among LockManager clients, built from the server's
// primitives (dflockd v1.10.0 has no eviction and tells a holder nothing; only a blocked waiter is woken, by a grant).
//
// The building block is a BELL: a key held on one connection, and a watcher blocked in `l <key>` on another. Anyone
// who knows the holder's token rings it with `r <key> <token>` (tokens are bearer capabilities, usable from any
// connection): the watcher is granted, so its process wakes, with no polling. The token is published in the NAME of a
// second held key, `<bell>~<token>`, which `stats` lists.
//
// - MAILBOX, one per client (a thread's state of one base), opened in the background while the client holds a lock
//   (closed after MAILBOX_IDLE_MS holding nothing): the bell `<prefix>wl~mbox~<client id>`. Rung, the client reads `stats` once for steal intents on names it holds,
//   and re-arms (the granted watcher becomes the holder and publishes its token; the old holder becomes the watcher).
// - A STEAL of the key K by the client S: S holds the intent `<prefix>wl~steal~<h>~<S>~<P>` (h = a hash of K, P a
//   new X25519 public key per steal) and rings every other mailbox of the prefix. The client H that holds K
//   exclusively answers: its request rejects with an AbortError, and it holds the confirmation
//   `<prefix>wl~stolen~<h>~<S>~<n>~<Q>~<C>` (n: P's first 16 characters; Q: H's own X25519 public key for this answer;
//   C: K's token, encrypted with the key H and S share by X25519) and watches S's intent.
//   PROOF: S accepts a confirmation only once the token it decrypts from it renews K (`n K <token>` answered `ok`):
//   only K's holder knows that token, and only S can decrypt it, so no other client — one that reads `stats` and
//   takes a confirmation-shaped key, or answers for a lock it does not hold — can make S run beside K's holder; a
//   confirmation that does not prove itself is ignored, and a steal that gets no proven answer within ANSWER_MS
//   rejects (nothing taken). The names are public (`stats`); the token never travels in clear. S then knows K's
//   token (it could renew or release K itself): the lock is S's, as a steal means. A server's `--auth-token` keeps
//   clients without the token from reading `stats` or taking keys at all (no such forger can connect); between
//   clients that have it, the proof above is what keeps a hand-over to the real holder and the real stealer. From then on H's connection keeps holding K (and renewing it) FOR S: dflockd ties a lease to
//   its connection (a disconnect releases it) and has no command to move it, so a hand-over of the token alone would
//   not survive H's connection. S takes the lock once it sees its confirmation AND K held, and watches the
//   confirmation. When S is done it releases its intent: H's watch is granted and H releases K, its confirmation, and
//   the intent last, so the server grants K to the next waiter of its FIFO queue (waiters queued before the steal
//   keep their order, after S). If H dies or loses K, its confirmation ends and S's watch is granted: S has lost the
//   lock (its request rejects with an AbortError). If S dies, its intent ends the same way and H releases K.
//   The intent and the confirmation are native held locks (renewed off the JS thread, so a blocked event loop loses
//   neither); the confirmation's lease (confirmLease: from K's lease and renew ratio) ends before K can when H is
//   killed on a server that keeps leases after a disconnect (a lease too short for a margin: steal is refused). While it
//   holds a lock for a stealer, H's process stays alive (its watch of the intent is ref'd); so does S's during the
//   steal and its release.
// - A lock S holds by a steal from another process is not handed over again (S's client does not answer a steal of
//   it, so that steal is refused): its liveness rests on S's JS thread (the watch of H's confirmation), and a second
//   hand-over through S could outlive H's by the time S's blocked event loop takes to notice (two holders at once).
// - Nobody answers within ANSWER_MS (the holder is not a LockManager client — a DistributedLock, another dflockd
//   client — or it is stuck): the steal rejects with a NotSupportedError and nothing is taken. K held in shared mode
//   by another process is refused at once (NotSupportedError): steal of readers is not built (see lock-kinds.md).
//
// Keys on the server (its --max-locks budget counts them, idle ones too for --gc-max-idle, 60 s): a client's
// mailbox is 2 keys, plus 1 per time it is rung (the re-armed token's name); a steal adds 2 (intent, confirmation)
// and rings each other client of the prefix that has a mailbox once (1 key each; again every RERING_MS while nobody
// answers, so at most 4 times). Grants create none.

const { createHash, createPublicKey, diffieHellman, generateKeyPairSync } = require('node:crypto')
const { Connection } = require('../dflockd/connection')
const { LockError, AcquireTimeoutError, toLockError } = require('../errors')
const { ErrorCode } = require('../codes')
const { MAX_READERS, gateKey } = require('../dflockd/kinds')
const native = require('../native')

/** Lease of the mailbox's bell keys; renewed every RENEW_MS, which also keeps the holding connection under the
 * server's 23 s read timeout. Only the mailbox is renewed from JS: a mailbox that misses a renewal (a blocked event
 * loop) loses nobody's lock, its client is just not answered (the steal is refused). The keys a lock depends on (the
 * intent, the confirmation) are native held locks, renewed off the JS thread. */
const BELL_TTL_S = 60
const RENEW_MS = 10000
/** A watcher's blocking `l`, re-issued when it times out. */
const WATCH_S = 3600
/** How long a stealer waits for the holder's answer. The answer takes 4 round trips after the ring (stats, 2 × l,
 * and the stealer's own stats poll), a few ms on a LAN; 2 s leaves room for a busy holder's event loop. */
const ANSWER_MS = native.DFLOCKD_STEAL_ANSWER_MS
/** The stealer's poll of `stats` for the answer, during a steal only. */
const POLL_MS = 25
/** A client rung without an answer is rung again after this (a lost look at stats): at most 4 rings per steal. */
const RERING_MS = 500
/** A client that has held nothing for this long closes its mailbox: it is not rung (each ring costs a key), and a
 * client taking locks more often than this keeps one mailbox (each re-open costs a key, the new token's name). */
const MAILBOX_IDLE_MS = 10000
/**
 * The confirmation's lease (s) for a lock `handle`, from the lock's own renew schedule (the core's `confirm_lease`: a
 * killed holder's lock lives ≥ (1 − renewRatio) × L after its last renewal, and the confirmation must end before that
 * by more than the server's 1 s expiry sweep: floor((1 − r) × L − 1.5); L = 9 → 3 s, L = 33 → 15 s with r = 0.5). 0
 * when the lease leaves too little.
 */
function confirmLease(handle) {
  return native.dflockdConfirmLease(Number(handle.lease), Number(handle.renewRatio))
}

/** Whether a held lock's `handle` can be kept for a stealer: a native dflockd lock (its lease, renew ratio and token
 * known) of a lease the confirmation has a margin under; not a lock this client holds by a steal (kept elsewhere). */
const canHandOver = (handle) => !handle.keptElsewhere && confirmLease(handle) > 0 && /^[0-9a-f]{32}$/.test(String(handle.token))

/** A new X25519 key pair: `{privateKey, pub}` (pub: the raw public key, base64url, 43 characters). */
function keyPair() {
  const { privateKey, publicKey } = generateKeyPairSync('x25519')
  return { privateKey, pub: publicKey.export({ format: 'jwk' }).x }
}

/** The 16-byte pad both ends derive from their X25519 secret (`ours` private, `theirs` a base64url public key). */
function pad(ours, theirs) {
  const publicKey = createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: theirs }, format: 'jwk' })
  const secret = diffieHellman({ privateKey: ours, publicKey })
  return createHash('sha256').update('sema-native steal v1\0').update(secret).digest().subarray(0, 16)
}

/** A 32-hex token sealed with `p` (base64url, 22 characters), and back (null when it is not one). */
function seal(token, p) {
  const t = Buffer.from(token, 'hex')
  for (let i = 0; i < 16; i++) t[i] ^= p[i]
  return t.toString('base64url')
}
function unseal(sealed, p) {
  const t = Buffer.from(sealed, 'base64url')
  if (t.length !== 16) return null
  for (let i = 0; i < 16; i++) t[i] ^= p[i]
  return t.toString('hex')
}

const B64 = '[A-Za-z0-9_-]'

const hashOf = (key) => createHash('sha256').update(key).digest('hex').slice(0, 16)

/** A timer that keeps the process alive while a steal runs (a steal is a pending request, like an acquire). */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** The held (owner_conn_id ≠ 0) lock keys of a stats snapshot. */
function heldKeys(s) {
  const out = new Set()
  for (const l of s.locks) if (Number(l.owner_conn_id) !== 0) out.add(l.key)
  return out
}

/**
 * The key whose token an exclusive holder of `key` holds, from a stats snapshot `s`, or null when nobody holds `key`
 * exclusively: `key` itself when it is a held mutex (a plain lock, or a writer on a key that is a mutex), its gate when
 * a writer holds the gate and every reader slot of the key (lib/dflockd/kinds.js; the writer's token is its gate's).
 */
function exclusiveHolder(s, key) {
  if (s.locks.some((l) => l.key === key && Number(l.owner_conn_id) !== 0)) return key
  const slots = s.semaphores.find((x) => x.key === key)
  const gate = gateKey(key)
  if (slots && Number(slots.holders) >= MAX_READERS && s.locks.some((l) => l.key === gate && Number(l.owner_conn_id) !== 0)) return gate
  return null
}

/** A promise resolved when `signal` aborts (at once when it already has). */
const aborted = (signal) =>
  new Promise((r) => (signal.aborted ? r() : signal.addEventListener('abort', () => r(), { once: true })))

/** The native Connection's options for `server` ({host, port, auth?, tls, ca?} as lib/dflockd/url.js parses it). */
function connectionOptions(server) {
  return {
    host: server.host,
    port: server.port,
    ...(server.auth !== undefined ? { auth: server.auth } : {}),
    ...(server.ca !== undefined ? { tls: { ca: server.ca } } : server.tls ? { tls: true } : {}),
  }
}

/**
 * A connection of the steal protocol: lib/dflockd's low-level Connection (its framing, deadlines — 10 s to connect,
 * 30 s for a reply, plus a blocking `l`'s wait —, auth and TLS). A pending request keeps the process alive until
 * `unref()` (a mailbox's). `extra` (tests): more Connection options, e.g. `socketTimeoutMs`.
 */
function openConnection(server, extra = {}) {
  return Connection.connect({ ...connectionOptions(server), ...extra })
}

/** `l key timeout ttl` on `conn`: the token, or null when the server answers `timeout`; rejects on anything else. */
async function lock(conn, key, timeoutS, ttlS) {
  try {
    return (await conn.acquire(key, timeoutS, ttlS)).token
  } catch (e) {
    if (e instanceof AcquireTimeoutError) return null
    throw e
  }
}

/** `r key token`: true when released, false when the server refused (the token holds nothing there); rejects on a
 * connection failure. */
function release(conn, key, token) {
  return conn.release(key, token).then(
    () => true,
    (e) => {
      if (e.code === ErrorCode.SERVER_ERROR) return false
      throw e
    },
  )
}

/**
 * Blocks in `l key` on `conn` until granted (re-issued on the server's timeout); resolves the token. The wait keeps
 * the process alive only when `keepAlive` (else the connection is unref'd).
 */
async function watch(conn, key, keepAlive = false) {
  if (keepAlive) conn.ref()
  else conn.unref()
  for (;;) {
    const t = await lock(conn, key, WATCH_S, BELL_TTL_S)
    if (t !== null) return t
  }
}

class Steals {
  /**
   * @param server {host, port, auth?, tls?, ca?} (lib/dflockd/url.js)
   * @param prefix the LockManager's key prefix
   * @param clientId this thread's client id
   * @param owner {exclusiveKeys(): string[], surrender(key): handle|null} (the manager's state, via the backend)
   * @param hold (key, leaseTtlS?) → Promise<SemaphoreResult>: a native tryAcquire of `key` with the base's query
   *   (default lease: the base's, as the names' locks), renewed off-thread, `signal` aborted on loss
   */
  constructor(server, prefix, clientId, owner, hold) {
    this.server = server
    this.prefix = prefix
    this.clientId = clientId
    this.owner = owner
    this.hold = hold
    this.mbox = `${prefix}wl~mbox~${clientId}`
    /** How long the mailbox stays open holding nothing (tests shorten it). */
    this.idleMs = MAILBOX_IDLE_MS
    /** The mailbox: a promise of {holder: {conn, token, nameKey, nameToken}, watcher: conn}, or null. */
    this.opening = null
    /** Intent keys this client is answering or keeping a lock for (a second ring does not answer twice). */
    this.proxies = new Set()
    /** The pending close of an idle mailbox (a timer), and the close under way (a promise). */
    this.idleTimer = null
    this.closing = null
  }

  /** This client holds nothing now: its mailbox closes after `ms` unless it holds a lock again meanwhile. */
  idle(ms = this.idleMs) {
    if (!this.opening || this.idleTimer) return
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null
      const opening = this.opening
      this.opening = null
      this.closing = this.#close(opening).finally(() => {
        this.closing = null
      })
    }, ms)
    this.idleTimer.unref()
  }

  /** Closes the mailbox `opening` resolves to: its keys released (not left to a lease where a disconnect keeps them). */
  async #close(opening) {
    const box = await opening
    if (!box || box.broken) return
    box.broken = true
    clearInterval(box.timer)
    box.watcher.close()
    const h = box.holder
    await h.conn.release(h.nameKey, h.nameToken).catch(() => {})
    await h.conn.release(this.mbox, h.token).catch(() => {})
    h.conn.close()
  }

  /**
   * Opens the mailbox once (again after a failure), in the background: called when this client holds a lock (a client
   * that holds none needs none, and is not rung). Never rejects, and nothing waits for it: a client whose mailbox is
   * not open (yet) is not answered, so a steal of its lock is refused (NotSupportedError).
   */
  ready() {
    clearTimeout(this.idleTimer)
    this.idleTimer = null
    if (!this.opening) {
      this.opening = this.#open().catch(() => {
        this.opening = null
        return null
      })
    }
    return this.opening
  }

  async #open() {
    // An idle mailbox still closing holds the key this one takes.
    await this.closing
    const a = await openConnection(this.server)
    let b
    try {
      b = await openConnection(this.server)
      // A mailbox never keeps the process alive: its watcher waits in `l` for minutes.
      a.unref()
      b.unref()
      const token = await lock(a, this.mbox, 0, BELL_TTL_S)
      if (token === null) throw new LockError(`mailbox ${this.mbox} is taken`, ErrorCode.ALREADY_LOCKED)
      const box = { holder: null, watcher: b, timer: null, broken: false }
      box.holder = await this.#publish(a, token)
      box.timer = setInterval(() => {
        const h = box.holder
        Promise.all([h.conn.renew(this.mbox, h.token, BELL_TTL_S), h.conn.renew(h.nameKey, h.nameToken, BELL_TTL_S)]).then(
          () => {},
          () => this.#broken(box),
        )
      }, RENEW_MS)
      box.timer.unref()
      this.#arm(box)
      return box
    } catch (e) {
      a.close()
      b?.close()
      throw e
    }
  }

  /** Holds the key naming `token` on `conn`. */
  async #publish(conn, token) {
    const nameKey = `${this.mbox}~${token}`
    const nameToken = await lock(conn, nameKey, 0, BELL_TTL_S)
    if (nameToken === null) throw new LockError(`mailbox name ${nameKey} is taken`, ErrorCode.ALREADY_LOCKED)
    return { conn, token, nameKey, nameToken }
  }

  /** The watcher waits for a ring; rung, it becomes the holder and the old holder watches. */
  #arm(box) {
    const w = box.watcher
    watch(w, this.mbox)
      .then(async (token) => {
        const old = box.holder
        box.holder = await this.#publish(w, token)
        box.watcher = old.conn
        await release(old.conn, old.nameKey, old.nameToken)
        this.#arm(box)
        // A failed look (stats) loses this ring only: the stealer rings again while it waits.
        await this.#rung().catch(() => {})
      })
      .catch(() => this.#broken(box))
  }

  /** A mailbox connection failed: closed; the next grant opens a new one. */
  #broken(box) {
    if (box.broken) return
    box.broken = true
    clearInterval(box.timer)
    box.holder?.conn.close()
    box.watcher?.close()
    this.opening = null
  }

  /** Rung: answers every steal intent on a key this client holds exclusively. */
  async #rung() {
    const box = await this.opening
    if (!box) return
    const held = heldKeys(await box.holder.conn.stats())
    const mine = new Map(this.owner.exclusiveKeys(canHandOver).map((k) => [hashOf(k), k]))
    const intent = new RegExp(`^${escape(this.prefix)}wl~steal~([0-9a-f]{16})~([0-9a-f-]{36})~(${B64}{43})$`)
    for (const k of held) {
      const m = intent.exec(k)
      if (!m || m[2] === this.clientId || this.proxies.has(k) || !mine.has(m[1])) continue
      this.#answer(mine.get(m[1]), k, { h: m[1], stealer: m[2], pub: m[3] }).catch(() => {})
    }
  }

  /**
   * Gives `key` to the stealer of `intentKey` (`intent`: its hash, client id and public key): holds it for them until
   * the intent is released (or lost), and holds the confirmation (a native lock, see confirmLease), which carries the
   * proof (the lock's token sealed for the stealer), only while it holds `key` for them.
   */
  async #answer(key, intentKey, intent) {
    this.proxies.add(intentKey)
    let q
    let handle = null
    let confirm = null
    let intentToken = null
    // The decisions (surrender before the proof exists, the release order) are the core's (`steal::Answer`).
    let step = { step: 'done' }
    try {
      q = await openConnection(this.server)
      // Only a lock that can be handed over is given up (checked again: the holder may have changed meanwhile).
      handle = this.owner.surrender(key, canHandOver)
      if (!handle) return
      const answer = new native.NativeStealAnswer(Number(handle.lease), Number(handle.renewRatio))
      // Surrendered (above) first, then proven: no proof exists while this client's request still holds `key`.
      if (answer.start().step !== 'surrender') return
      step = answer.surrendered(true)
      if (step.step !== 'hold-confirmation') return
      const mine = keyPair()
      const confirmKey = confirmKeyOf(this.prefix, intent, mine.pub, seal(handle.token, pad(mine.privateKey, intent.pub)))
      // Attached now, before any await: a loss of `key` from here on ends the hand-over (the confirmation goes, so
      // the stealer hears of it).
      const lost = aborted(handle.signal)
      // The confirmation must end before `key` can (its lease: the core's confirm_lease of the lock's own lease and
      // renew ratio): a holder killed on a server that keeps leases after a disconnect stops renewing both, and the
      // stealer must hear of it (the confirmation expires) before the server can grant `key` to a waiter.
      const c = await this.hold(confirmKey, step.leaseS)
      if (c.ok) confirm = c.value
      step = answer.confirmationHeld(c.ok, handle.signal.aborted)
      if (step.step !== 'keep') return
      // The lock is now the stealer's: this process stays alive while it holds it for them (the watch is ref'd).
      // Ends when the stealer releases its intent (or dies, or loses it), when `key` or the confirmation is lost, or
      // when the watch's connection fails: then too the lock and the confirmation are released.
      const done = watch(q, intentKey, true).then(
        (t) => {
          intentToken = t
          return 'intent'
        },
        () => 'intent',
      )
      const end = await Promise.race([done, lost.then(() => 'lock'), aborted(confirm.signal).then(() => 'confirmation')])
      step = answer.ended(handle.signal.aborted ? 'lock' : end)
    } finally {
      // The core's order: `key` first, then the confirmation (the stealer's watch of it is granted: it learns that it
      // is over, after `key` is free); a `key` already lost: the confirmation first, so the stealer hears of it without
      // waiting for that release. The intent LAST: while we hold it, no later steal by that client can reuse its name.
      // A hand-over that never got as far as its release step (a failure, or nothing given up) releases what it has in
      // the same order (the core's release_order).
      const parts = step.step === 'release' ? step.parts : native.dflockdStealReleaseOrder(confirm !== null, Boolean(handle?.signal.aborted))
      for (const part of parts) await (part === 'lock' ? handle : confirm)?.release().catch(() => {})
      if (intentToken !== null) await q.release(intentKey, intentToken).catch(() => {})
      this.proxies.delete(intentKey)
      q?.close()
    }
  }

  /**
   * Steals `key` from the client that holds it: `{ok: true, value: handle}` (signal, release()) or `{ok: false,
   * error}`. When nobody holds it, `tryTake()` takes it (its result is returned).
   */
  async steal(key, tryTake) {
    const h = hashOf(key)
    // One key pair per steal: a confirmation left by an earlier steal (still held while its holder lets go) is not
    // ours, nor can it prove itself to this one.
    const mine = keyPair()
    const intentKey = `${this.prefix}wl~steal~${h}~${this.clientId}~${mine.pub}`
    const answers = new RegExp(
      `^${escape(confirmKeyOf(this.prefix, { h, stealer: this.clientId, pub: mine.pub }, '', ''))}(${B64}{43})~(${B64}{22})$`,
    )
    let confirmKey = null
    let w = null
    let watcher = null
    let intent = null
    try {
      const i = await this.hold(intentKey)
      if (!i.ok) throw i.error ? toLockError(i.error) : new LockError('the steal intent could not be taken', ErrorCode.ALREADY_LOCKED)
      intent = i.value
      w = await openConnection(this.server)
      /** clientId → when it was last rung */
      const rung = new Map()
      const boxes = new RegExp(`^${escape(this.prefix)}wl~mbox~([0-9a-f-]{36})~(\\S+)$`)
      // The decisions (which confirmation proves itself, take, refuse, wait) are the core's (`steal::Stealer`).
      const stealer = new native.NativeStealer()
      const leaseRoom = confirmLease(intent) > 0
      /** confirmation key → the token unsealed from it (null: none), one X25519 agreement per key, not per poll. */
      const unsealed = new Map()
      for (;;) {
        if (intent.signal.aborted) throw intentLost(key, intent)
        const s = await w.stats()
        const held = heldKeys(s)
        const exclusive = exclusiveHolder(s, key)
        const confirmations = []
        for (const k of held) {
          const m = answers.exec(k)
          if (!m) continue
          if (!unsealed.has(k)) unsealed.set(k, unseal(m[2], pad(mine.privateKey, m[1])))
          confirmations.push({ key: k, token: unsealed.get(k) })
        }
        // A shared lock's readers (or a writer) hold slots of the key itself (lib/dflockd/kinds.js).
        const readers = s.semaphores.find((x) => x.key === key)
        const sharedHolders = exclusive === null ? Number(readers?.holders) || 0 : 0
        const look = () => stealer.look(exclusive ?? undefined, confirmations, sharedHolders, leaseRoom)
        let step = look()
        // Answered: a confirmation of THIS steal that proves itself (the token sealed in it renews the lock: only its
        // holder knows it), and the lock still held (by the holder's side: we do not hold it).
        while (step.step === 'prove') {
          if (stealer.proved(step.confirmation, await renewed(w, step.lock, step.token, intent.lease))) {
            confirmKey = step.confirmation
            break
          }
          step = look()
        }
        if (confirmKey !== null) break
        if (step.step === 'take') {
          const r = await tryTake()
          if (r.ok || !r.unavailable) {
            await intent.release().catch(() => {})
            w.close()
            return r
          }
          // Taken meanwhile: looked at again after POLL_MS, within the same deadline.
        } else if (step.step === 'refuse') {
          throw refusal(step.refusal, intent)
        }
        for (const k of held) {
          const m = boxes.exec(k)
          if (!m || m[1] === this.clientId || Date.now() - (rung.get(m[1]) ?? -Infinity) < RERING_MS) continue
          // A stale token (the client was rung meanwhile and re-armed) fails: rung again on the next round.
          if (await release(w, `${this.prefix}wl~mbox~${m[1]}`, m[2])) rung.set(m[1], Date.now())
        }
        await sleep(POLL_MS)
      }
      w.close()
      w = null
      // Answered: the holder's connection holds `key` for us until we release the intent. Its confirmation lives
      // exactly as long (its lease is the names' lease): our watch of it is granted when it ends.
      watcher = await openConnection(this.server)
      const ctl = new AbortController()
      let releasing = false
      const ended = watch(watcher, confirmKey).then(
        (t) => watcher.release(confirmKey, t).catch(() => {}),
        () => {},
      )
      const finish = (reason) => {
        if (releasing || ctl.signal.aborted) return
        watcher.close()
        intent.release().catch(() => {})
        ctl.abort(reason)
      }
      ended.then(() =>
        finish(
          new LockError(
            `lock '${key}' lost: the process it was stolen from, which keeps it on its connection for this one, ` +
              'released it (it lost it, or its connection or process ended)',
            ErrorCode.LOCK_LOST,
          ),
        ),
      )
      // Our intent is what keeps the lock ours: lost (a renewal failed), the holder lets go of the lock.
      aborted(intent.signal).then(() => finish(intentLost(key, intent)))
      const handle = {
        signal: ctl.signal,
        /** Kept by another process's connection: not handed over again (canHandOver). */
        keptElsewhere: true,
        async release() {
          if (releasing) return
          releasing = true
          // While the hand-over ends, its connection keeps the process alive (a release is a pending request).
          watcher.ref()
          await intent.release().catch(() => {})
          // The holder releases the lock, then its confirmation: our watch is granted (bounded, in case it hangs).
          let t
          await Promise.race([ended, new Promise((r) => (t = setTimeout(r, ANSWER_MS)))])
          clearTimeout(t)
          watcher.close()
        },
      }
      if (intent.signal.aborted) finish(intentLost(key, intent))
      return { ok: true, value: handle }
    } catch (e) {
      await intent?.release().catch(() => {})
      w?.close()
      watcher?.close()
      // Every rejection is an Error: a failure that arrives as a result object ({type, message, reply}) is a LockError.
      return { ok: false, error: e instanceof Error || e instanceof DOMException ? e : toLockError(e) }
    }
  }
}

/** The confirmation's key for `intent` ({h, stealer, pub}): `pubH` the holder's public key, `sealed` the proof. */
function confirmKeyOf(prefix, intent, pubH, sealed) {
  return `${prefix}wl~stolen~${intent.h}~${intent.stealer}~${intent.pub.slice(0, 16)}~${pubH}${pubH ? '~' : ''}${sealed}`
}

/** `n key token ttl` on `conn`: true when the server renewed (the token holds `key`), false when it refused. */
function renewed(conn, key, token, ttlS) {
  return conn.renew(key, token, ttlS).then(
    () => true,
    (e) => {
      if (e.code === ErrorCode.SERVER_ERROR || e.code === ErrorCode.LOCK_LOST || e.code === ErrorCode.INVALID_ARGUMENT) return false
      throw e
    },
  )
}

/** The steal's refusal (the core's `StealRefusal`) as the NotSupportedError it rejects with; nothing was taken. */
function refusal(why, intent) {
  if (why === 'shared-holders') {
    return notSupported('it is held in shared mode by another process (steal breaks only an exclusive holder on dflockd)')
  }
  if (why === 'lease-too-short') {
    // The intent has the names' lease (the base's query): too short for any holder to hand the lock over.
    return notSupported(
      `the lease of its locks (${intent.lease} s, the base's leaseTtl) is too short for a hand-over that a ` +
        `killed holder cannot break (renewed at ${intent.renewRatio} of it, a confirmation of at least ` +
        `${native.DFLOCKD_STEAL_MIN_CONFIRM_S} s must end 1.5 s before it could); nothing was taken`,
    )
  }
  return notSupported(
    `its holder did not answer within ${ANSWER_MS} ms with a proven hand-over (it is not a LockManager client of this base — e.g. a ` +
      'DistributedLock or another dflockd client —, it holds the lock by a steal from another process, which ' +
      'is not handed over again, or it is not responding); nothing was taken',
  )
}

function intentLost(key, intent) {
  const why = intent.signal.reason
  return new LockError(
    `lock '${key}' lost: this steal's intent key, which keeps the lock ours, was lost${why && why.message ? ` (${why.message})` : ''}`,
    ErrorCode.LOCK_LOST,
  )
}

function notSupported(why) {
  return new DOMException(`steal on a dflockd LockManager: ${why}`, 'NotSupportedError')
}

function escape(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

module.exports = { Steals, hashOf, ANSWER_MS, openConnection, connectionOptions }
