'use strict'
// TLS through a Node TLS-terminating proxy in front of the real server (certificates made with the openssl CLI):
// trusted CA works, unknown CA fails with a LockError, a plain client on the TLS port fails within its socket
// timeout. Auth (Go-only) lives in dflockd-replies.test.js ('error_auth').
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { DistributedLock, Connection, stats, acquireTarget, statusTarget } = require('../lib/dflockd')
const { LockError, AcquireTimeoutError } = require('../lib/errors')

const skip = d.skipReason()
// makeCerts is synchronous: run it now so the skip decisions below see its outcome.
const certs = skip ? {} : d.makeCerts()
let s
let proxy
before(async () => {
  if (skip || certs.skip) return
  s = await d.startServer()
  proxy = await d.startTlsProxy(s, certs)
})
after(() => d.stopAll())

const tlsSkip = () => skip || certs.skip || false

describe('TLS', () => {
  test('trusted CA: acquire, contention and release over TLS (IP SAN and servername)', { skip: tlsSkip() }, async () => {
    const a = new DistributedLock({ key: 'tls-ok', servers: [[proxy.host, proxy.port]], tls: { ca: certs.caPem }, leaseTtlS: 5 })
    assert.equal(await a.acquire(), true)
    assert.match(a.token, /^[0-9a-f]{32}$/)
    // the same key through the plain port is held (the proxy reaches the same server)
    const plain = new DistributedLock({ key: 'tls-ok', servers: [[s.host, s.port]], acquireTimeoutS: 0 })
    assert.equal(await plain.acquire(), false)
    const byName = new DistributedLock({
      key: 'tls-ok',
      servers: [[proxy.host, proxy.port]],
      tls: { ca: Buffer.from(certs.caPem), servername: 'localhost' },
      acquireTimeoutS: 0,
    })
    assert.equal(await byName.acquire(), false)
    await a.release()
    assert.equal(await byName.acquire(), true)
    await byName.release()
  })

  test('several CAs (array of PEM strings and Buffers) are all trusted', { skip: tlsSkip() }, async () => {
    const a = new DistributedLock({
      key: 'tls-multi',
      servers: [['localhost', proxy.port]],
      tls: { ca: [certs.otherCaPem, Buffer.from(certs.caPem)] },
    })
    assert.equal(await a.acquire(), true)
    await a.release()
  })

  test('low-level Connection over TLS', { skip: tlsSkip() }, async () => {
    const c = await Connection.connect({ host: proxy.host, port: proxy.port, tls: { ca: certs.caPem } })
    try {
      const g = await c.acquire('tls-conn', 0, 5)
      await assert.rejects(c.acquire('tls-conn', 0), AcquireTimeoutError)
      await c.release('tls-conn', g.token)
    } finally {
      c.close()
    }
  })

  test('unknown CA fails with a LockError (not a timeout), nothing held', { skip: tlsSkip() }, async () => {
    const a = new DistributedLock({ key: 'tls-bad', servers: [[proxy.host, proxy.port]], tls: { ca: certs.otherCaPem }, connectTimeoutMs: 5000 })
    await assert.rejects(a.acquire(), (e) => e instanceof LockError && !(e instanceof AcquireTimeoutError) && e.code !== 'TIMEOUT')
    assert.equal(a.token, null)
    await assert.rejects(Connection.connect({ host: proxy.host, port: proxy.port, tls: { ca: certs.otherCaPem } }), LockError)
    // system roots do not know the test CA either
    await assert.rejects(Connection.connect({ host: proxy.host, port: proxy.port, tls: {} }), LockError)
    const r = await acquireTarget(`dflockd://127.0.0.1:${proxy.port}/tls-bad?tls=1`, {}, { wait: true })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'CONNECTION_ERROR')
  })

  test('a wrong servername fails verification', { skip: tlsSkip() }, async () => {
    const a = new DistributedLock({ key: 'tls-name', servers: [[proxy.host, proxy.port]], tls: { ca: certs.caPem, servername: 'not-the-server.example' } })
    await assert.rejects(a.acquire(), LockError)
  })

  test('a plain client against the TLS port fails cleanly within its socket timeout', { skip: tlsSkip() }, async () => {
    const a = new DistributedLock({ key: 'tls-plain', servers: [[proxy.host, proxy.port]], socketTimeoutMs: 2000, connectTimeoutMs: 2000, acquireTimeoutS: 1 })
    const t0 = Date.now()
    await assert.rejects(a.acquire(), (e) => e instanceof LockError && !(e instanceof AcquireTimeoutError))
    assert.ok(Date.now() - t0 < u.scaled(4500), `failed after ${Date.now() - t0} ms`)
    assert.equal(a.token, null)
    const c = await Connection.connect({ host: proxy.host, port: proxy.port, socketTimeoutMs: 2000 }).catch((e) => e)
    if (c instanceof Connection) {
      const t1 = Date.now()
      await assert.rejects(c.request('l', 'tls-plain', '0'), LockError)
      assert.ok(Date.now() - t1 < u.scaled(4500))
      c.close()
    } else {
      assert.ok(c instanceof LockError)
    }
  })

  test('target API: tls option with a CA, and ?tls=1', { skip: tlsSkip() }, async () => {
    const url = `dflockd://127.0.0.1:${proxy.port}/tls-target`
    const r = await acquireTarget(url, { tls: { ca: certs.caPem } }, { wait: true })
    assert.equal(r.ok, true)
    const held = await acquireTarget(`${url}?tls=1`, { tls: { ca: certs.caPem } }, { wait: false })
    assert.equal(held.ok, false)
    assert.equal(held.error.type, 'ALREADY_LOCKED')
    assert.equal(await r.value.release(), true)
  })

  test('stats and status over TLS', { skip: tlsSkip() || d.goOnly() }, async () => {
    const st = await stats({ host: proxy.host, port: proxy.port, tls: { ca: certs.caPem } })
    assert.ok(st.connections >= 1)
    const status = await statusTarget(`dflockd://127.0.0.1:${proxy.port}/tls-st`, { tls: { ca: certs.caPem } })
    assert.equal(status.locked, false)
  })
})

describe('TLS on the Go server itself (--tls-cert/--tls-key)', () => {
  const self = skip ? {} : d.makeSelfSigned()
  const other = skip || self.skip ? {} : d.makeSelfSigned('other')
  const selfSkip = () => skip || self.skip || false
  let g
  before(async () => {
    if (selfSkip()) return
    g = await d.startServer({ args: ['--tls-cert', self.certFile, '--tls-key', self.keyFile] })
  })

  test('a self-signed certificate that is its own CA, given as tls.ca, is trusted', { skip: selfSkip() }, async () => {
    const a = new DistributedLock({ key: 'tls-self', servers: [[g.host, g.port]], tls: { ca: self.certPem } })
    assert.equal(await a.acquire(), true)
    const b = new DistributedLock({ key: 'tls-self', servers: [['localhost', g.port]], tls: { ca: Buffer.from(self.certPem) }, acquireTimeoutS: 0 })
    assert.equal(await b.acquire(), false)
    await a.release()
    b.close()
    const r = await acquireTarget(`dflockd://127.0.0.1:${g.port}/tls-self?tls=1`, { tls: { ca: self.certPem } }, { wait: false })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    await r.value.release()
  })

  test('another self-signed certificate for the same name is no anchor; a wrong name fails', { skip: selfSkip() }, async () => {
    const a = new DistributedLock({ key: 'tls-self-other', servers: [[g.host, g.port]], tls: { ca: other.certPem } })
    await assert.rejects(a.acquire(), (e) => e instanceof LockError && e.code === 'CONNECTION_ERROR' && /certificate/.test(e.message))
    const b = new DistributedLock({ key: 'tls-self-other', servers: [[g.host, g.port]], tls: { ca: self.certPem, servername: 'other.example' } })
    await assert.rejects(b.acquire(), (e) => e instanceof LockError && e.code === 'CONNECTION_ERROR' && /name/i.test(e.message))
  })

  test('rejectUnauthorized: false accepts an unknown certificate; true (the default) refuses it', { skip: selfSkip() }, async () => {
    const a = new DistributedLock({ key: 'tls-any', servers: [[g.host, g.port]], tls: { rejectUnauthorized: false } })
    assert.equal(await a.acquire(), true)
    await a.release()
    const b = new DistributedLock({ key: 'tls-any', servers: [[g.host, g.port]], tls: { rejectUnauthorized: true } })
    await assert.rejects(b.acquire(), (e) => e instanceof LockError && e.code === 'CONNECTION_ERROR')
  })

  test('tls.ConnectionOptions fields: the supported ones are checked, the rest refused by name', () => {
    const bad = (tls, re) =>
      assert.throws(() => new DistributedLock({ key: 'k', servers: [['127.0.0.1', 1]], tls }), (e) => e instanceof LockError && e.code === 'INVALID_ARGUMENT' && re.test(e.message))
    bad({ checkServerIdentity: () => undefined }, /unsupported tls option 'checkServerIdentity' \(supported: ca, servername, rejectUnauthorized, cert, key\)/)
    bad({ pfx: Buffer.alloc(1) }, /'pfx'/)
    bad({ rejectUnauthorized: 'no' }, /tls\.rejectUnauthorized must be a boolean/)
    bad({ cert: 'x' }, /tls\.cert and tls\.key go together/)
    bad({ key: 'SECRET-KEY-TEXT' }, /tls\.cert and tls\.key go together/)
    bad({ cert: 'x', key: 42 }, /tls\.key must be a PEM string or Buffer, got number/)
    bad({ ca: 12 }, /tls\.ca must be a PEM string/)
  })

  test('a client certificate that is not PEM is refused without echoing the key', { skip: selfSkip() }, async () => {
    assert.throws(() => new DistributedLock({ key: 'tls-cc', servers: [[g.host, g.port]], tls: { ca: self.certPem, cert: self.certPem, key: 'SECRET-KEY-TEXT' } }), (e) => e instanceof LockError && e.code === 'INVALID_ARGUMENT' && /tls\.key/.test(e.message) && !/SECRET/.test(e.message))
    const ok = new DistributedLock({ key: 'tls-cc', servers: [[g.host, g.port]], tls: { ca: self.certPem, cert: self.certPem, key: self.keyPem } })
    assert.equal(await ok.acquire(), true)
    await ok.release()
  })
})
