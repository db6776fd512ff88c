'use strict'
// Bad input is refused client-side with LockError INVALID_ARGUMENT before anything is sent; CRC-32 sharding
// vectors (the CRC-32 values the Go, Python and TypeScript clients compute); dflockd:// URL parsing; garbage replies from a scripted server.
const { test, describe, after, before } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const {
  DistributedLock,
  DistributedSemaphore,
  Connection,
  stableHashShard,
  parseDflockdUrl,
  acquireTarget,
  releaseTarget,
  statusTarget,
} = require('../lib/dflockd')
const { LockError, AcquireTimeoutError } = require('../lib/errors')

const isInvalid = (e) => e instanceof LockError && e.code === 'INVALID_ARGUMENT'

const BAD_KEYS = {
  empty: '',
  space: 'a b',
  tab: 'a\tb',
  CR: 'a\rb',
  LF: 'a\nb',
  NUL: 'a\0b',
  '257 bytes': 'k'.repeat(257),
  '257 UTF-8 bytes (129 two-byte chars)': 'é'.repeat(129),
}
const BAD_TIMEOUTS = { NaN: NaN, negative: -1, 'non-integer': 1.5, Infinity: Infinity, string: '5' }
const BAD_TTLS = { zero: 0, negative: -3, 'non-integer': 2.5, NaN: NaN, string: '10' }

/** Asserting that nothing arrived needs a bounded grace period: a stray connect would land within it. */
const graceForStrayConnections = () => new Promise((r) => setTimeout(r, 100))

let fake
before(async () => {
  // Counts connections and bytes: every bad call below must leave it untouched.
  fake = await d.fakeServer(() => 'ok')
})
after(() => d.stopAll())

describe('constructor validation (DistributedLock / DistributedSemaphore)', () => {
  const base = () => ({ key: 'k', servers: [['127.0.0.1', fake.port]] })
  for (const [name, key] of Object.entries(BAD_KEYS)) {
    test(`key with ${name} is refused`, () => {
      assert.throws(() => new DistributedLock({ ...base(), key }), isInvalid)
      assert.throws(() => new DistributedSemaphore({ ...base(), key, limit: 2 }), isInvalid)
    })
  }
  test('a 256-byte key is accepted', () => {
    assert.equal(new DistributedLock({ ...base(), key: 'k'.repeat(256) }).key.length, 256)
  })
  for (const [name, v] of Object.entries(BAD_TIMEOUTS)) {
    test(`acquireTimeoutS ${name} is refused`, () => {
      assert.throws(() => new DistributedLock({ ...base(), acquireTimeoutS: v }), isInvalid)
    })
  }
  test('acquireTimeoutS above an hour (10000: milliseconds meant) is refused, the unit named; 0 and 3600 are taken', () => {
    for (const [Class, extra] of [[DistributedLock, {}], [DistributedSemaphore, { limit: 2 }]]) {
      assert.throws(
        () => new Class({ ...base(), ...extra, acquireTimeoutS: 10000 }),
        (e) => isInvalid(e) && e.message === 'acquireTimeoutS is in seconds: 10000 s is over 2 hours; the most is 3600 (1 hour). For 10000 ms, write acquireTimeoutS: 10',
      )
      assert.throws(() => new Class({ ...base(), ...extra, acquireTimeoutS: 3601 }), isInvalid)
      for (const s of [0, 3600]) assert.equal(new Class({ ...base(), ...extra, acquireTimeoutS: s }).acquireTimeoutS, s)
    }
  })
  for (const [name, v] of Object.entries(BAD_TTLS)) {
    test(`leaseTtlS ${name} is refused`, () => {
      assert.throws(() => new DistributedLock({ ...base(), leaseTtlS: v }), isInvalid)
    })
  }
  test('renewRatio outside (0, 1) is refused', () => {
    for (const r of [0, 1, -0.5, 1.5, NaN, Infinity, -Infinity]) {
      assert.throws(() => new DistributedLock({ ...base(), renewRatio: r }), isInvalid, `renewRatio ${r}`)
    }
    assert.equal(new DistributedLock({ ...base(), renewRatio: 0.25 }).renewRatio, 0.25)
  })
  test('semaphore limit < 1 or non-integer is refused', () => {
    for (const limit of [0, -1, 1.5, NaN, undefined, '3']) {
      assert.throws(() => new DistributedSemaphore({ ...base(), limit }), isInvalid, `limit ${limit}`)
    }
    assert.equal(new DistributedSemaphore({ ...base(), limit: 3 }).limit, 3)
  })
  test('servers, ports, strategy, auth, tls and callbacks are checked', () => {
    assert.throws(() => new DistributedLock({ key: 'k', servers: [] }), isInvalid)
    assert.throws(() => new DistributedLock({ key: 'k', servers: [['127.0.0.1', 0]] }), isInvalid)
    assert.throws(() => new DistributedLock({ key: 'k', servers: [['127.0.0.1', 70000]] }), isInvalid)
    assert.throws(() => new DistributedLock({ key: 'k', servers: [['', 1]] }), isInvalid)
    assert.throws(() => new DistributedLock({ ...base(), shardingStrategy: 3 }), isInvalid)
    assert.throws(() => new DistributedLock({ ...base(), auth: 'a\nb' }), isInvalid)
    assert.throws(() => new DistributedLock({ ...base(), tls: { rejectUnauthorized: 0 } }), isInvalid)
    assert.throws(() => new DistributedLock({ ...base(), tls: { secureContext: {} } }), isInvalid)
    assert.throws(() => new DistributedLock({ ...base(), onLockLost: 'x' }), isInvalid)
    assert.throws(() => new DistributedLock({ ...base(), connectTimeoutMs: -1 }), isInvalid)
    assert.throws(() => new DistributedLock({ ...base(), socketTimeoutMs: NaN }), isInvalid)
    assert.throws(() => new DistributedLock(), isInvalid)
  })
  test('defaults mirror dflockd-client', () => {
    const l = new DistributedLock({ key: 'k' })
    assert.equal(l.acquireTimeoutS, 10)
    assert.equal(l.leaseTtlS, undefined)
    assert.deepEqual(l.servers, [['127.0.0.1', 6388]])
    assert.equal(l.renewRatio, 0.5)
    assert.equal(l.shardingStrategy, stableHashShard)
    assert.equal(l.token, null)
    assert.equal(l.lease, 0)
    assert.equal(l.signal.aborted, false)
    const legacy = new DistributedLock({ key: 'k', host: '::1', port: 7000 })
    assert.deepEqual(legacy.servers, [['::1', 7000]])
    const servers = [['h', 1]]
    const copy = new DistributedLock({ key: 'k', servers })
    servers[0][1] = 2
    assert.deepEqual(copy.servers, [['h', 1]], 'servers are copied')
  })
  test('nothing reached the server', async () => {
    await graceForStrayConnections()
    assert.equal(fake.connections, 0)
  })
})

describe('invalid sharding results fail at acquire time without connecting', () => {
  for (const [name, idx] of Object.entries({ 'too big': 2, negative: -1, 'non-integer': 0.5, NaN: NaN, string: '0' })) {
    test(`strategy returning ${name}`, async () => {
      const l = new DistributedLock({
        key: 'k',
        servers: [['127.0.0.1', fake.port], ['127.0.0.1', fake.port]],
        shardingStrategy: () => idx,
      })
      await assert.rejects(l.acquire(), isInvalid)
      await assert.rejects(l.enqueue(), isInvalid)
      assert.equal(l.token, null)
      await graceForStrayConnections()
      assert.equal(fake.connections, 0)
    })
  }
  test('a throwing strategy becomes INVALID_ARGUMENT', async () => {
    const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', fake.port]], shardingStrategy: () => { throw new Error('boom') } })
    await assert.rejects(l.acquire(), (e) => isInvalid(e) && /boom/.test(e.message))
    await graceForStrayConnections()
    assert.equal(fake.connections, 0)
  })
})

describe('stableHashShard (the vectors of the other clients)', () => {
  test('CRC-32/IEEE vectors', () => {
    assert.equal(stableHashShard('test-key', 3), 1) // 0x32db1f79
    assert.equal(stableHashShard('my-key', 3), 2) // 0xd6e33ac1
    assert.equal(stableHashShard('my-key', 5), 2)
    assert.equal(stableHashShard('a', 3), 0) // 0xe8b7be43
    assert.equal(stableHashShard('worker-pool', 5), 3) // 0xe746ac78
    assert.equal(stableHashShard('ключ✓', 3), 2) // 0x91166f7b (UTF-8 bytes)
    assert.equal(stableHashShard('', 7), 0)
    assert.equal(stableHashShard('123456789', 1000003), 0xcbf43926 % 1000003)
    assert.equal(stableHashShard('test-key', 0x7fffffff), 0x32db1f79 % 0x7fffffff)
    assert.equal(stableHashShard('anything', 1), 0)
  })
  test('n <= 0 or non-integer throws INVALID_ARGUMENT', () => {
    for (const n of [0, -1, 1.5, NaN]) assert.throws(() => stableHashShard('k', n), isInvalid, `n=${n}`)
  })
})

describe('parseDflockdUrl', () => {
  test('full form', () => {
    assert.deepEqual(parseDflockdUrl('dflockd://s3cr%40t@db.example:7000/jobs%2Fnightly?limit=3&leaseTtl=20&tls=1'), {
      host: 'db.example',
      port: 7000,
      key: 'jobs/nightly',
      auth: 's3cr@t',
      limit: 3,
      leaseTtl: 20,
      tls: true,
    })
  })
  test('defaults and IPv6', () => {
    assert.deepEqual(parseDflockdUrl('dflockd://127.0.0.1/k'), { host: '127.0.0.1', port: 6388, key: 'k', tls: false })
    assert.deepEqual(parseDflockdUrl('dflockd://[::1]:7001/k'), { host: '::1', port: 7001, key: 'k', tls: false })
    assert.equal(parseDflockdUrl('dflockd://h/%D0%BA%D0%BB%D1%8E%D1%87').key, 'ключ')
    assert.equal(parseDflockdUrl('dflockd://h/k?tls=0').tls, false)
  })
  test('bad URLs and numbers throw INVALID_ARGUMENT', () => {
    for (const url of [
      'dflockd://h',
      'dflockd://h/',
      'dflockd:///k',
      'http://h/k',
      'dflockd://h:99999/k',
      'dflockd://h:0/k',
      'dflockd://h/a%20b',
      'dflockd://h/a%0Ab',
      'dflockd://h/a%00b',
      'dflockd://h/%E0%A4%A',
      `dflockd://h/${'k'.repeat(257)}`,
      'dflockd://h/k?limit=0',
      'dflockd://h/k?limit=1.5',
      'dflockd://h/k?limit=-1',
      'dflockd://h/k?leaseTtl=abc',
      'dflockd://h/k?leaseTtl=0',
      'dflockd://h/k?tls=maybe',
      'dflockd://h/k?lease=3',
      'dflockd://h/k#x',
      'not a url',
      42,
    ]) {
      assert.throws(() => parseDflockdUrl(url), isInvalid, String(url))
    }
  })
})

describe('low-level Connection refuses bad input before sending', () => {
  let conn
  before(async () => {
    conn = await Connection.connect({ host: '127.0.0.1', port: fake.port })
    // The client may see the connection before this process's server handles the accept.
    await u.until(() => fake.connections > 0, { intervalMs: 5, what: 'the fake server accepted the connection' })
  })
  after(() => conn && conn.close())

  test('bad keys', async () => {
    for (const [name, key] of Object.entries(BAD_KEYS)) {
      await assert.rejects(conn.acquire(key, 1), isInvalid, name)
      await assert.rejects(conn.enqueue(key), isInvalid, name)
      await assert.rejects(conn.waitForLock(key, 1), isInvalid, name)
      await assert.rejects(conn.release(key, 'tok'), isInvalid, name)
      await assert.rejects(conn.renew(key, 'tok'), isInvalid, name)
      await assert.rejects(conn.semAcquire(key, 1, 2), isInvalid, name)
    }
  })
  test('bad timeouts, TTLs, limits and tokens', async () => {
    for (const [name, t] of Object.entries(BAD_TIMEOUTS)) {
      await assert.rejects(conn.acquire('k', t), isInvalid, `timeout ${name}`)
      await assert.rejects(conn.waitForLock('k', t), isInvalid, `wait ${name}`)
      await assert.rejects(conn.semAcquire('k', t, 2), isInvalid, `sem timeout ${name}`)
    }
    for (const [name, ttl] of Object.entries(BAD_TTLS)) {
      await assert.rejects(conn.acquire('k', 1, ttl), isInvalid, `ttl ${name}`)
      await assert.rejects(conn.enqueue('k', ttl), isInvalid, `enqueue ttl ${name}`)
      await assert.rejects(conn.renew('k', 'tok', ttl), isInvalid, `renew ttl ${name}`)
    }
    for (const limit of [0, -2, 1.5]) await assert.rejects(conn.semAcquire('k', 1, limit), isInvalid, `limit ${limit}`)
    for (const tok of ['', 'a b', 'a\nb', 'a\0b']) await assert.rejects(conn.release('k', tok), isInvalid, JSON.stringify(tok))
    await assert.rejects(conn.request('l', 'k\nr', '1'), isInvalid)
    await assert.rejects(conn.request('l\r', 'k', '1'), isInvalid)
  })
  test('an implausible lease (30000: milliseconds meant) is refused by every method, the unit named, as leaseTtl is', async () => {
    const unit = (e) => isInvalid(e) && /leaseTtlS is in seconds: 30000 s is over 8 hours/.test(e.message)
    await assert.rejects(conn.acquire('k', 1, 30000), unit)
    await assert.rejects(conn.enqueue('k', 30000), unit)
    await assert.rejects(conn.renew('k', 'tok', 30000), unit)
    await assert.rejects(conn.semAcquire('k', 1, 2, 30000), unit)
    await assert.rejects(conn.semEnqueue('k', 2, 30000), unit)
    await assert.rejects(conn.semRenew('k', 'tok', 30000), unit)
  })
  test('nothing was sent on the connection', async () => {
    await graceForStrayConnections()
    assert.equal(fake.received, '')
  })
})

describe('target API refuses bad options before connecting', () => {
  test('negative / NaN timeouts, bad lease, limit, URL → {ok:false, INVALID_ARGUMENT}', async () => {
    const url = `dflockd://127.0.0.1:${fake.port}/k`
    const cases = [
      [url, { timeout: -1 }],
      [url, { timeout: NaN }],
      [url, { timeout: '5' }],
      [url, { leaseTtl: 0 }],
      [url, { leaseTtl: 1.5 }],
      [url, { limit: 0 }],
      [url, { renewRatio: 1 }],
      [url, { signal: 'nope' }],
      [`${url}?leaseTtl=-1`, {}],
      ['dflockd://127.0.0.1/bad%20key', {}],
      ['dflockd://127.0.0.1', {}],
    ]
    for (const [u, o] of cases) {
      // tryAcquire (wait: false) ignores `timeout`, as for file targets
      for (const wait of 'timeout' in o ? [true] : [true, false]) {
        const r = await acquireTarget(u, o, { wait })
        assert.equal(r.ok, false, `${u} ${JSON.stringify(o)}`)
        assert.equal(r.error.type, 'INVALID_ARGUMENT', `${u} ${JSON.stringify(o)}: ${r.error.message}`)
      }
    }
    const rel = await releaseTarget('dflockd://127.0.0.1/bad%0Akey')
    assert.equal(rel.error.type, 'INVALID_ARGUMENT')
    await assert.rejects(statusTarget('dflockd://127.0.0.1/'), isInvalid)
    await graceForStrayConnections()
    assert.equal(fake.connections, 1, 'only the low-level Connection above connected')
  })
})

describe('garbage replies from a scripted server', () => {
  let garbage
  before(async () => {
    garbage = await d.fakeServer(([cmd]) => {
      if (cmd === 'l') return 'okay'
      if (cmd === 'e') return 'acquired'
      if (cmd === 'w') return 'ok '
      if (cmd === 'r') return 'ok fine'
      if (cmd === 'n') return 'error_something_new'
      return 'error'
    })
  })

  test('Connection methods reject with LockError, never resolve garbage', async () => {
    // A reply that is not the protocol's is PROTOCOL_ERROR (with the line as `reply`) and closes the connection
    // (the core's rule: the stream can no longer be trusted), so each garbage case gets its own connection.
    const isProtocol = (line) => (e) => e instanceof LockError && e.code === 'PROTOCOL_ERROR' && e.reply === line
    const cases = [
      [(c) => c.acquire('k', 0), isProtocol('okay')],
      [(c) => c.enqueue('k'), isProtocol('acquired')],
      [(c) => c.waitForLock('k', 0), (e) => e instanceof LockError && e.code === 'PROTOCOL_ERROR'],
      [(c) => c.release('k', 'tok'), isProtocol('ok fine')],
    ]
    for (const [call, check] of cases) {
      const c = await Connection.connect({ host: '127.0.0.1', port: garbage.port })
      try {
        await assert.rejects(call(c), check)
        await assert.rejects(c.stats(), (e) => e instanceof LockError && e.code === 'CONNECTION_ERROR', 'closed after garbage')
      } finally {
        c.close()
      }
    }
    const c = await Connection.connect({ host: '127.0.0.1', port: garbage.port })
    try {
      // `error*` replies are the server's own: SERVER_ERROR with the reply, and the connection stays usable.
      await assert.rejects(c.renew('k', 'tok'), (e) => e.code === 'SERVER_ERROR' && e.reply === 'error_something_new')
      await assert.rejects(c.stats(), (e) => e.code === 'SERVER_ERROR' && e.reply === 'error')
      assert.equal(await c.request('x', 'k', ''), 'error')
    } finally {
      c.close()
    }
  })
  test('DistributedLock.acquire rejects a garbage grant with a LockError', async () => {
    const l = new DistributedLock({ key: 'k', servers: [['127.0.0.1', garbage.port]], acquireTimeoutS: 0 })
    await assert.rejects(l.acquire(), (e) => e instanceof LockError && !(e instanceof AcquireTimeoutError))
    assert.equal(l.token, null)
    // The failed attempt closed its connection: a new attempt is allowed without force.
    await assert.rejects(l.acquire(), LockError)
  })
})

describe('synchronous native throws', () => {
  const native = require('../lib/native')
  const prim = { key: 'k', limit: 1, acquireTimeoutS: 1, renewRatio: 0.5, server: { host: '127.0.0.1', port: 6388 } }
  const cases = {
    'stableHashShard(k, 0)': [() => native.stableHashShard('k', 0), /numServers/],
    'dflockdValidateKey("a b")': [() => native.dflockdValidateKey('a b'), /key/],
    'dflockdValidateOptions(limit 0)': [() => native.dflockdValidateOptions({ ...prim, limit: 0 }), /limit/],
    'new NativeDflockdPrimitive(port 0)': [() => new native.NativeDflockdPrimitive({ ...prim, server: { host: '127.0.0.1', port: 0 } }), /port/],
  }
  for (const [name, [call, about]] of Object.entries(cases)) {
    test(`${name}: an Error whose code is the stable code, message without a "CODE: " prefix`, () => {
      assert.throws(call, (e) => {
        assert.ok(e instanceof Error)
        assert.equal(e.code, 'INVALID_ARGUMENT')
        assert.match(e.message, about)
        assert.doesNotMatch(e.message, /^[A-Z_]+: /)
        return true
      })
    })
  }
  test('the JS layer keeps the code and the message, with the native error as cause', () => {
    assert.throws(
      () => stableHashShard('k', 0),
      (e) => isInvalid(e) && /numServers/.test(e.message) && !e.message.startsWith('INVALID_ARGUMENT') && e.cause instanceof Error,
    )
  })
})
