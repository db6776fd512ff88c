'use strict'
// Messages in plain words, against the real Go server: no Rust debug formatting (`Other(`, `Some(`), no library's
// URL, and what to do. An untrusted self-signed server names `tls: { ca }`; a TLS server killed under a held lock
// says the server closed the connection; a token sent to a server started without --auth-token says so instead of
// "wrong token".

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const sema = require('..')

const skip = d.skipReason()
const self = skip ? {} : d.makeSelfSigned('messages')
after(() => d.stopAll())

/** No trace of an implementation in a message a user reads. */
function assertPlain(message) {
  assert.equal(typeof message, 'string')
  for (const bad of ['Other(', 'Some(', 'None', 'OtherError', 'https://', 'docs.rs', 'Kind(', 'Custom {']) {
    assert.ok(!message.includes(bad), `message contains ${JSON.stringify(bad)}: ${message}`)
  }
}

describe('dflockd failures in plain words', { skip: skip || self.skip || false }, () => {
  let tlsServer
  let plainServer
  before(async () => {
    tlsServer = await d.startServer({ args: ['--tls-cert', self.certFile, '--tls-key', self.keyFile] })
    plainServer = await d.startServer()
  })

  test('an untrusted self-signed server: the message says to pass its CA as tls: { ca }', async () => {
    const r = await sema.tryAcquire(tlsServer.url('msg-untrusted', 'tls=1'), { connectTimeoutMs: 5000 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'CONNECTION_ERROR', r.error.message)
    assertPlain(r.error.message)
    assert.match(r.error.message, /self-signed/)
    assert.match(r.error.message, /tls: \{ ca \}/)
  })

  test('a TLS server killed under a held lock: the loss says the server closed the connection', async () => {
    const own = await d.startServer({ args: ['--tls-cert', self.certFile, '--tls-key', self.keyFile] })
    const r = await sema.acquire(own.url('msg-killed', 'tls=1&leaseTtl=30'), { tls: { ca: self.certPem }, timeout: 5000 })
    assert.equal(r.ok, true, r.ok ? '' : r.error.message)
    const lock = r.value
    const lost = new Promise((resolve) => lock.signal.addEventListener('abort', () => resolve(lock.signal.reason), { once: true }))
    own.proc.kill('SIGKILL')
    const reason = await lost
    assert.equal(reason.code, 'LOCK_LOST')
    assertPlain(reason.message)
    assert.equal(await lock.release(), false)
  })

  test('a token sent to a server without --auth-token: the message says the server has no token set', async () => {
    const r = await sema.tryAcquire(plainServer.url('msg-auth').replace('dflockd://', 'dflockd://s3cret@'))
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'AUTH_FAILED')
    assert.match(r.error.message, /no auth token set/)
    assertPlain(r.error.message)
    assert.ok(!r.error.message.includes('s3cret'))
    const lock = new sema.DistributedLock({ key: 'msg-auth', servers: [[plainServer.host, plainServer.port]], auth: 's3cret' })
    await assert.rejects(lock.acquire(), (e) => e instanceof sema.AuthError && /no auth token set/.test(e.message))
    lock.close()
  })
})
