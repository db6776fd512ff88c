'use strict'
// The dflockd steal hand-over (lib/locks/dflockd-steal.js) driven directly, on the real Go dflockd server, for the
// races a LockManager in another process cannot be made to hit on cue: a holder's lock lost right after it gave it
// up for a stealer, and a confirmation left over from an earlier steal. Also the steal connections' deadlines on a
// server that accepts and never answers (a scripted server: the real one always answers).

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { randomUUID } = require('node:crypto')
const net = require('node:net')
const { once } = require('node:events')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { Steals, openConnection } = require('../lib/locks/dflockd-steal')
const { createLockManager, tryAcquire } = require('..')

describe('dflockd steal hand-over (Steals, on the real server)', { skip: d.goOnly() }, () => {
  let server
  let n = 0
  before(async () => {
    const s = await d.startServer()
    server = { host: '127.0.0.1', port: s.port, tls: false }
  })
  after(() => d.stopAll())

  /** A Steals of a fresh client on `prefix`; `owner` as the backend gives it. */
  const stealsOf = (prefix, owner) =>
    new Steals(server, prefix, randomUUID(), owner, (key, leaseTtl) =>
      tryAcquire(`dflockd://127.0.0.1:${server.port}/${encodeURIComponent(key)}`, leaseTtl ? { leaseTtl } : undefined),
    )
  /** tryTake for a steal: takes `key` on `conn` itself. */
  const takeOn = (conn, key) => () =>
    conn.acquire(key, 0, 30).then(
      () => ({ ok: true, value: 'taken by the stealer itself' }),
      (e) => (e.name === 'AcquireTimeoutError' ? { ok: false, unavailable: true } : Promise.reject(e)),
    )

  test("a holder whose lock is lost right after it gave it up for a stealer does not confirm: the stealer takes the freed lock itself", async () => {
    const prefix = `race${process.pid}-${++n}/`
    const K = `${prefix}wl-k`
    const kConn = await openConnection(server)
    const kTok = (await kConn.acquire(K, 0, 30)).token // stands for H's native lock on K
    const ctl = new AbortController()
    let surrendered = false
    const H = stealsOf(prefix, {
      exclusiveKeys: () => (surrendered ? [] : [K]),
      surrender: () => {
        surrendered = true
        // The native loss report arrives while the holder still sets its answer up; the server frees K later.
        setImmediate(() => ctl.abort(new Error('lost')))
        setTimeout(() => kConn.release(K, kTok), 300)
        return { signal: ctl.signal, lease: 30, renewRatio: 0.5, token: kTok, release: async () => {} }
      },
    })
    const t = await openConnection(server)
    try {
      assert.ok(await H.ready(), 'the mailbox opened')
      const S = stealsOf(prefix, { exclusiveKeys: () => [], surrender: () => null })
      const r = await S.steal(K, takeOn(t, K))
      assert.equal(r.ok, true, r.error?.message)
      assert.equal(r.value, 'taken by the stealer itself')
      assert.equal(surrendered, true, 'the holder was rung and gave it up')
    } finally {
      kConn.close()
      t.close()
    }
  })

  test('a confirmation left by an earlier steal does not answer a later one (one name per steal)', async () => {
    const prefix = `stale${process.pid}-${++n}/`
    const K = `${prefix}wl-k`
    const kConn = await openConnection(server)
    const kTok = (await kConn.acquire(K, 0, 30)).token
    let surrenders = 0
    const H = stealsOf(prefix, {
      exclusiveKeys: () => (surrenders === 0 ? [K] : []),
      surrender: () => {
        surrenders++
        // The kept lock's release is slow (2.5 s): the first steal's confirmation outlives the stealer's release.
        return {
          signal: new AbortController().signal,
          lease: 30,
          renewRatio: 0.5,
          token: kTok,
          release: async () => {
            await new Promise((r) => setTimeout(r, 2500))
            await kConn.release(K, kTok)
          },
        }
      },
    })
    const t = await openConnection(server)
    try {
      assert.ok(await H.ready(), 'the mailbox opened')
      const S = stealsOf(prefix, { exclusiveKeys: () => [], surrender: () => null })
      const r1 = await S.steal(K, takeOn(t, K))
      assert.equal(r1.ok, true, r1.error?.message)
      assert.equal(typeof r1.value.release, 'function', 'the first steal was answered by the holder')
      await r1.value.release()
      // Nobody answers the second steal: it gets K itself once the holder has let go of it.
      const r2 = await S.steal(K, takeOn(t, K))
      assert.equal(r2.ok, true, r2.error?.message)
      assert.equal(r2.value, 'taken by the stealer itself')
      assert.equal(surrenders, 1)
    } finally {
      kConn.close()
      t.close()
    }
  })
})

describe('dflockd steal connections on a server that never answers', () => {
  let f
  before(async () => {
    f = await d.fakeServer(() => null) // accepts, never answers
  })
  after(() => f.close())

  test('a request on a steal connection fails with TIMEOUT after its reply deadline (not a hang)', async () => {
    const w = await openConnection({ host: '127.0.0.1', port: f.port }, { socketTimeoutMs: 200 })
    await assert.rejects(w.stats(), (e) => {
      assert.equal(e.code, 'TIMEOUT')
      return true
    })
    // The connection is closed by its missed deadline: the next request fails at once.
    await assert.rejects(w.stats(), { code: 'CONNECTION_ERROR' })
    // Authentication is a request too.
    await assert.rejects(openConnection({ host: '127.0.0.1', port: f.port, auth: 'secret' }, { socketTimeoutMs: 200 }), (e) => {
      assert.equal(e.code, 'TIMEOUT')
      assert.doesNotMatch(e.message, /secret/)
      return true
    })
  })

  test('a LockManager request settles as the native acquisition does: no wait on the steal mailbox', async () => {
    const locks = createLockManager(`dflockd://127.0.0.1:${f.port}/silent`)
    const native = await tryAcquire(`dflockd://127.0.0.1:${f.port}/k`)
    assert.equal(native.ok, false)
    await assert.rejects(
      locks.request('x', { ifAvailable: true }, () => 'granted'),
      (e) => {
        assert.equal(e.code, native.error.type)
        return true
      },
    )
  })

  test("a server that grants the names' locks but never answers on the steal keys: requests are granted all the same", async () => {
    // The mailbox is opened (in the background) once a lock is held; its requests go unanswered here.
    let n = 0
    const g = await d.fakeServer(([cmd, key, arg]) => {
      if (key.includes('wl~')) return null
      const tok = String(++n).padStart(32, '0')
      if (cmd === 'l' || cmd === 'sl') return `ok ${tok} ${arg.split(' ')[cmd === 'l' ? 1 : 2] || 33}`
      if (cmd === 'e' || cmd === 'se') return `acquired ${tok} 33`
      if (cmd === 'n' || cmd === 'sn') return 'ok 33'
      if (cmd === 'r' || cmd === 'sr') return 'ok'
      return 'error'
    })
    try {
      const locks = createLockManager(`dflockd://127.0.0.1:${g.port}/deaf`)
      assert.equal(await locks.request('a', (lock) => lock.name), 'a')
      assert.equal(await locks.request('b', { ifAvailable: true }, (lock) => lock && lock.name), 'b')
      assert.match(g.received, /wl~mbox~/, 'the mailbox was asked for (and never answered)')
    } finally {
      await g.close()
    }
  })
})

describe('dflockd steal mailbox lifetime', { skip: d.goOnly() }, () => {
  let port
  before(async () => {
    port = (await d.startServer()).port
  })
  after(() => d.stopAll())

  test('a client that holds nothing closes its mailbox (its keys released: nobody rings it) and opens it again when it holds', async () => {
    const server = { host: '127.0.0.1', port, tls: false }
    const prefix = `idle${process.pid}/`
    const steals = new Steals(server, prefix, randomUUID(), { exclusiveKeys: () => [], surrender: () => null }, () => {
      throw new Error('not used')
    })
    const probe = await openConnection(server)
    const mailboxHeld = async () => {
      const s = await probe.stats()
      return s.locks.filter((l) => l.key.startsWith(`${prefix}wl~mbox~`) && Number(l.owner_conn_id) !== 0).length
    }
    // Polled: the server's key table has no event to wait on.
    const untilMailbox = (pred, what) => u.until(async () => pred(await mailboxHeld()), { intervalMs: 25, what, last: mailboxHeld })
    try {
      assert.ok(await steals.ready())
      assert.equal(await mailboxHeld(), 2, 'the mailbox and its published token')
      steals.idle(0)
      await untilMailbox((n) => n === 0, 'the mailbox closed')
      // Holding again: a new mailbox (the old one's close is awaited first, so its key is free).
      assert.ok(await steals.ready())
      assert.equal(await mailboxHeld(), 2)
      // Idle, then holding again before the delay: the mailbox stays.
      steals.idle(60000)
      assert.ok(await steals.ready())
      assert.equal(steals.idleTimer, null)
      steals.idle(0)
      await untilMailbox((n) => n === 0, 'the mailbox closed again')
    } finally {
      probe.close()
    }
  })
})

describe('dflockd steal mailboxes of two bases of one server and prefix', { skip: d.goOnly() }, () => {
  after(() => d.stopAll())

  test('two backends of the same server and prefix in one thread each open their own mailbox', async () => {
    const { DflockdBackend } = require('../lib/locks/dflockd-backend')
    const { port } = await d.startServer()
    // As `localhost` and `127.0.0.1` would be: two states of one thread (one CLIENT_ID).
    const a = new DflockdBackend(`dflockd://127.0.0.1:${port}/two`)
    const b = new DflockdBackend(`dflockd://127.0.0.1:${port}/two`)
    assert.ok(await a.stealsOf().ready(), 'the first mailbox opened')
    assert.ok(await b.stealsOf().ready(), 'the second mailbox opened')
    a.steals.idle(0)
    b.steals.idle(0)
  })
})

describe('LockManager: a backend lock already lost when it is granted', () => {
  test('the request rejects with an AbortError (cause: the loss) instead of running its callback', async () => {
    // A backend that hands out a lock whose loss was reported before the manager listened (the race of a stolen
    // lock's hand-over ending, or an adopted lock lost meanwhile): a stand-in, the race cannot be hit on cue.
    const { managerFor } = require('../lib/locks/manager')
    const ctl = new AbortController()
    ctl.abort(Object.assign(new Error('lost before the grant was seen'), { code: 'LOCK_LOST' }))
    const backend = {
      id: `lost-before-listen-${process.pid}`,
      acquire: async () => ({ ok: true, value: { signal: ctl.signal, release: async () => {} } }),
    }
    let ran = false
    await assert.rejects(
      managerFor(backend).request('n', () => {
        ran = true
      }),
      (e) => {
        assert.equal(e.name, 'AbortError')
        assert.equal(e.cause?.code, 'LOCK_LOST')
        return true
      },
    )
    assert.equal(ran, false)
  })
})

describe('dflockd steal among LockManager clients of one thread (one backend each, as several processes would be)', { skip: d.goOnly() }, () => {
  const { DflockdBackend } = require('../lib/locks/dflockd-backend')
  const { managerFor } = require('../lib/locks/manager')
  let port
  let n = 0
  before(async () => {
    port = (await d.startServer()).port
  })
  after(() => d.stopAll())

  /** A LockManager on `base` with its own state and mailbox (its backend's id made unique), and its backend. */
  const client = (base) => {
    const b = new DflockdBackend(base)
    b.id += `#client${++n}`
    return { locks: managerFor(b), backend: b }
  }
  /** A request holding `name` until `let go` is called; `held` resolves when its callback runs. */
  const holding = (locks, name, options = {}) => {
    let letGo
    let held
    const running = new Promise((r) => (held = r))
    const request = locks.request(name, options, () => {
      held()
      return new Promise((r) => (letGo = r))
    })
    return { request, running, letGo: (v) => letGo(v) }
  }

  test('a lock held by a steal from another client is not stolen again by a third: refused, and its holder keeps it', async () => {
    const base = `dflockd://127.0.0.1:${port}/again${process.pid}`
    const H = client(base)
    const S = client(base)
    const T = client(base)
    const h = holding(H.locks, 'k')
    await h.running
    assert.ok(await H.backend.steals.ready(), "H's mailbox opened")
    const hStolen = assert.rejects(h.request, { name: 'AbortError' })
    const s = holding(S.locks, 'k', { steal: true })
    await s.running
    await hStolen
    assert.ok(await S.backend.steals.ready(), "S's mailbox opened")
    let sSettled = false
    s.request.finally(() => (sSettled = true)).catch(() => {})
    // H's connection keeps `k` for S; a hand-over of it by S (a third holder) would rest on S's JS thread.
    await assert.rejects(T.locks.request('k', { steal: true }, () => 'T got it'), (e) => {
      assert.equal(e.name, 'NotSupportedError')
      assert.match(e.message, /steal from another process/)
      return true
    })
    assert.equal(sSettled, false, 'S still holds k')
    s.letGo('S done')
    assert.equal(await s.request, 'S done')
    // Given back by H's connection: the name is free again.
    assert.equal(await T.locks.request('k', () => 'T got it after S'), 'T got it after S')
  })

  test('steal with a lease under 9 s is refused (NotSupportedError naming the lease): the holder keeps its lock', async () => {
    const base = `dflockd://127.0.0.1:${port}/short${process.pid}?leaseTtl=3`
    const H = client(base)
    const S = client(base)
    const h = holding(H.locks, 'k')
    await h.running
    assert.ok(await H.backend.steals.ready(), "H's mailbox opened")
    let hSettled = false
    h.request.finally(() => (hSettled = true)).catch(() => {})
    await assert.rejects(S.locks.request('k', { steal: true }, () => 'S got it'), (e) => {
      assert.equal(e.name, 'NotSupportedError')
      assert.match(e.message, /lease of its locks \(3 s/)
      return true
    })
    assert.equal(hSettled, false, 'H still holds k')
    h.letGo('H done')
    assert.equal(await h.request, 'H done')
  })

  test("a steal of a lock held in the same thread keeps the mailbox open (the idle close of the handed-over lock's holder is cancelled)", async () => {
    const A = client(`dflockd://127.0.0.1:${port}/adopt${process.pid}`)
    const first = holding(A.locks, 'k')
    await first.running
    const steals = A.backend.steals
    assert.ok(await steals.ready(), 'the mailbox opened')
    steals.idleMs = 0 // an idle client closes its mailbox at once
    const firstStolen = assert.rejects(first.request, { name: 'AbortError' })
    const second = holding(A.locks, 'k', { steal: true })
    await second.running
    await firstStolen
    assert.equal(steals.idleTimer, null, 'no idle close pending while k is held')
    // A 0 ms idle close, had it been armed, has run by now.
    await new Promise((r) => setTimeout(r, 20))
    assert.ok(steals.opening, 'the mailbox is still open')
    second.letGo('done')
    assert.equal(await second.request, 'done')
  })

  /**
   * Another client of the server with a raw socket (issue 34 item 2): it polls `stats` and, as a steal intent appears,
   * takes every confirmation-shaped key it can derive from it with one `l` each — the name of the old scheme
   * (`wl~stolen~<h>~<S>~<nonce>`) and one of the current shape with its own public key and a forged proof.
   */
  function faker() {
    const sock = net.connect(port, '127.0.0.1')
    const taken = []
    let buf = ''
    const waiting = []
    sock.on('data', (c) => {
      buf += c
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i)
        buf = buf.slice(i + 1)
        waiting.shift()?.(line)
      }
    })
    sock.on('error', () => {})
    const ask = (cmd, k, arg) =>
      new Promise((r) => {
        waiting.push(r)
        sock.write(`${cmd}\n${k}\n${arg}\n`)
      })
    let stop = false
    const done = (async () => {
      await once(sock, 'connect')
      const seen = new Set()
      while (!stop) {
        const s = JSON.parse((await ask('stats', '_', '')).slice(3))
        for (const l of s.locks) {
          const m = /^(.*)wl~steal~([0-9a-f]{16})~([0-9a-f-]{36})~(\S+)$/.exec(l.key)
          if (!m || seen.has(l.key)) continue
          seen.add(l.key)
          const [, prefix, h, stealer, last] = m
          const forged = require('node:crypto').generateKeyPairSync('x25519').publicKey.export({ format: 'jwk' }).x
          for (const k of [
            `${prefix}wl~stolen~${h}~${stealer}~${last}`,
            `${prefix}wl~stolen~${h}~${stealer}~${last.slice(0, 16)}~${forged}~${'A'.repeat(22)}`,
          ]) {
            if ((await ask('l', k, '0 30')).startsWith('ok ')) taken.push(k)
          }
        }
        await new Promise((r) => setTimeout(r, 2)) // polls stats: a new steal intent has no event to wait on
      }
    })()
    return {
      taken,
      async close() {
        stop = true
        await done.catch(() => {})
        sock.destroy()
      },
    }
  }

  test('a faked confirmation (a raw client taking confirmation keys) is never taken for a hand-over: the holder is not a LockManager client, the steal is refused and its callback never runs', async () => {
    const base = `dflockd://127.0.0.1:${port}/fake-plain${process.pid}`
    const S = client(base)
    // The holder: a plain lock on the name's key through the target API, which answers no steal.
    const held = await tryAcquire(S.backend.url('k'))
    assert.equal(held.ok, true)
    const f = faker()
    let ran = false
    await assert.rejects(
      S.locks.request('k', { steal: true }, () => {
        ran = true
      }),
      (e) => {
        assert.ok(e instanceof Error, String(e))
        assert.equal(e.name, 'NotSupportedError')
        return true
      },
    )
    await f.close()
    assert.ok(f.taken.length > 0, 'the faker took its keys')
    assert.equal(ran, false, 'the stealer ran beside the holder')
    assert.equal(held.value.signal.aborted, false)
    assert.equal(await held.value.release(), true)
  })

  test('a faked confirmation does not break a real hand-over: the holder gives the lock to the stealer, a waiter is granted only after the stealer', async () => {
    const base = `dflockd://127.0.0.1:${port}/fake-real${process.pid}`
    const H = client(base)
    const S = client(base)
    const W = client(base)
    const h = holding(H.locks, 'k')
    await h.running
    assert.ok(await H.backend.steals.ready(), "H's mailbox opened")
    const hStolen = assert.rejects(h.request, { name: 'AbortError' })
    // A waiter of another client, queued at the server before the steal.
    let wRan = false
    const w = W.locks.request('k', () => {
      wRan = true
      return 'W'
    })
    const f = faker()
    const s = holding(S.locks, 'k', { steal: true })
    await s.running
    await hStolen
    // While the stealer holds: the waiter is not granted (no second holder), for longer than a grant takes.
    await new Promise((r) => setTimeout(r, 500))
    assert.equal(wRan, false, 'the waiter was granted while the stealer held')
    s.letGo('S done')
    assert.equal(await s.request, 'S done')
    assert.equal(await w, 'W')
    await f.close()
    assert.ok(f.taken.length > 0, 'the faker took its keys')
  })
})

describe('dflockd steal hand-over: a lock lost while kept for a stealer', { skip: d.goOnly() }, () => {
  let server
  before(async () => {
    const s = await d.startServer()
    server = { host: '127.0.0.1', port: s.port, tls: false }
  })
  after(() => d.stopAll())

  test('the holder releases its confirmation before the lost lock: the stealer hears of it first', async () => {
    const prefix = `lost${process.pid}/`
    const K = `${prefix}wl-k`
    const hold = (key, leaseTtl) => tryAcquire(`dflockd://127.0.0.1:${server.port}/${encodeURIComponent(key)}`, leaseTtl ? { leaseTtl } : undefined)
    const kConn = await openConnection(server)
    const kTok = (await kConn.acquire(K, 0, 30)).token // stands for H's native lock on K
    const probe = await openConnection(server)
    const ctl = new AbortController()
    let surrendered = false
    /** The connection holding the confirmation for H (stats' owner_conn_id), and whether it still did at K's release. */
    let confirmationConn = null
    let confirmationHeldAtRelease = null
    let kReleased
    const kReleasedP = new Promise((r) => (kReleased = r))
    const H = new Steals(
      server,
      prefix,
      randomUUID(),
      {
        exclusiveKeys: () => (surrendered ? [] : [K]),
        surrender: () => {
          surrendered = true
          return {
            signal: ctl.signal,
            lease: 30,
            renewRatio: 0.5,
            token: kTok,
            release: async () => {
              const s = await probe.stats()
              // (Once H lets go of it, the stealer's watch is granted the confirmation: another connection.)
              confirmationHeldAtRelease = s.locks.some((l) => l.key.startsWith(`${prefix}wl~stolen~`) && l.owner_conn_id === confirmationConn)
              await kConn.release(K, kTok)
              kReleased()
            },
          }
        },
      },
      hold,
    )
    const S = new Steals(server, prefix, randomUUID(), { exclusiveKeys: () => [], surrender: () => null }, hold)
    try {
      assert.ok(await H.ready(), 'the mailbox opened')
      const r = await S.steal(K, async () => ({ ok: false, unavailable: true }))
      assert.equal(r.ok, true, r.error?.message)
      assert.equal(typeof r.value.release, 'function', 'answered by the holder')
      const c = (await probe.stats()).locks.find((l) => l.key.startsWith(`${prefix}wl~stolen~`))
      confirmationConn = c?.owner_conn_id
      assert.ok(Number(confirmationConn) > 0, 'H holds the confirmation')
      const told = new Promise((res) => r.value.signal.addEventListener('abort', res, { once: true }))
      ctl.abort(new Error('lost')) // the holder's kept lock is lost
      await told
      assert.equal(r.value.signal.reason.code, 'LOCK_LOST')
      await r.value.release()
      await kReleasedP
      assert.equal(confirmationHeldAtRelease, false, 'the confirmation was released before the lost lock')
    } finally {
      kConn.close()
      probe.close()
    }
  })
})

describe('a failed steal rejects with an Error', { skip: d.goOnly() }, () => {
  after(() => d.stopAll())

  test('the steal intent refused (its key over the protocol 256-byte limit): a LockError with a code, not { type, message, reply }', async () => {
    const { port } = await d.startServer()
    // The names' keys fit (prefix + 'wl-n'); the intent's (prefix + 'wl~steal~' + hash, client id and nonce, 79
    // bytes) does not, so the server-side step of the steal fails.
    const prefix = `p${process.pid}`.padEnd(200, 'x')
    const locks = require('..').createLockManager(`dflockd://127.0.0.1:${port}/${prefix}`)
    await assert.rejects(locks.request('n', { steal: true }, () => 'granted'), (e) => {
      assert.ok(e instanceof Error, `rejected with ${require('node:util').inspect(e)}`)
      assert.equal(e.name, 'LockError')
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.match(e.message, /key is \d+ bytes; at most 256/)
      assert.ok(typeof e.stack === 'string')
      return true
    })
    // Nothing was taken: the name is free.
    assert.equal(await locks.request('n', { ifAvailable: true }, (l) => l !== null), true)
  })
})
