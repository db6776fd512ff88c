'use strict'
// TLS trust without code (issue 23 point 6): `?ca=<path>` in the dflockd URL, and NODE_EXTRA_CA_CERTS honoured as
// Node's own tls does (added to the default roots for `tls: true` / `?tls=1`; not used with an explicit `ca`), on the
// Go server with a self-signed certificate (--tls-cert/--tls-key).

const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { execFile } = require('node:child_process')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { acquire, status, withLock } = require('..')
const { parseDflockdUrl } = require('../lib/dflockd/url')

const skip = d.goOnly()
const self = skip ? {} : d.makeSelfSigned()
const other = skip || self.skip ? {} : d.makeSelfSigned('other')
const tlsSkip = skip || self.skip || other.skip || false

let g
test.before(async () => {
  if (!tlsSkip) g = await d.startServer({ args: ['--tls-cert', self.certFile, '--tls-key', self.keyFile] })
})
test.after(() => d.stopAll())

const url = (key, query) => `dflockd://localhost:${g.port}/${key}${query ? `?${query}` : ''}`

test('?ca=<path> trusts that PEM: acquire, withLock and status over TLS with no code', { skip: tlsSkip }, async () => {
  const q = `ca=${encodeURIComponent(self.certFile)}`
  const r = await acquire(url('ca-url', q), { timeout: 3000 })
  assert.equal(r.ok, true, JSON.stringify(r.error))
  const st = await status(url('ca-url', q))
  assert.equal(st.locked, true)
  await r.value.release()
  assert.equal(await withLock(url('ca-url', `tls=1&${q}`), async () => 'done'), 'done')
  // Another CA is not trusted.
  const bad = await acquire(url('ca-url', `ca=${encodeURIComponent(other.certFile)}`), { timeout: 3000 })
  assert.equal(bad.ok, false)
  assert.notEqual(bad.error.type, 'TIMEOUT')
})

test('?ca= refused with INVALID_ARGUMENT when unreadable, empty, or with tls=0; nothing is sent', { skip: tlsSkip }, async () => {
  const missing = path.join(path.dirname(self.certFile), 'missing.pem')
  assert.throws(() => parseDflockdUrl(`dflockd://h/k?ca=${encodeURIComponent(missing)}`), (e) => e.code === 'INVALID_ARGUMENT' && e.message.includes(missing) && /ENOENT/.test(e.message))
  assert.throws(() => parseDflockdUrl('dflockd://h/k?ca='), (e) => e.code === 'INVALID_ARGUMENT' && /empty ca=/.test(e.message))
  assert.throws(() => parseDflockdUrl(`dflockd://h/k?tls=0&ca=${encodeURIComponent(self.certFile)}`), (e) => e.code === 'INVALID_ARGUMENT' && /tls=0/.test(e.message))
  const r = await acquire(url('ca-missing', `ca=${encodeURIComponent(missing)}`))
  assert.equal(r.ok, false)
  assert.equal(r.error.type, 'INVALID_ARGUMENT')
})

/** Runs a child that acquires `?tls=1` and `tls: true` with `env`; resolves its JSON line and stderr. */
function child(env) {
  const script = `
    const { acquire, DistributedLock } = require(${JSON.stringify(path.join(__dirname, '..'))})
    ;(async () => {
      const r = await acquire('dflockd://localhost:${g.port}/extra-ca?tls=1', { timeout: 3000 })
      if (r.ok) await r.value.release()
      const l = new DistributedLock({ key: 'extra-ca-2', servers: [['localhost', ${g.port}]], tls: true, acquireTimeoutS: 3 })
      let lock
      try { lock = await l.acquire(); await l.release() } catch (e) { lock = e.code }
      // An explicit ca replaces the roots, NODE_EXTRA_CA_CERTS included (as Node's tls).
      const x = new DistributedLock({ key: 'extra-ca-3', servers: [['localhost', ${g.port}]], tls: { ca: ${JSON.stringify(other.certPem)} }, acquireTimeoutS: 3 })
      let explicit
      try { explicit = await x.acquire(); await x.release() } catch (e) { explicit = e.code }
      console.log(JSON.stringify({ url: r.ok || r.error.type, lock, explicit }))
    })()`
  return new Promise((resolve) => {
    execFile(process.execPath, ['-e', script], { env: { ...process.env, ...env }, timeout: u.scaled(30_000) }, (err, stdout, stderr) =>
      resolve({ err, out: stdout.trim() ? JSON.parse(stdout.trim().split('\n').pop()) : null, stderr }),
    )
  })
}

test('NODE_EXTRA_CA_CERTS is added to the default roots for tls: true and ?tls=1, not to an explicit ca', { skip: tlsSkip, timeout: u.scaled(60_000) }, async () => {
  const withExtra = await child({ NODE_EXTRA_CA_CERTS: self.certFile })
  assert.deepEqual(withExtra.out, { url: true, lock: true, explicit: 'CONNECTION_ERROR' }, withExtra.stderr)
  const without = await child({ NODE_EXTRA_CA_CERTS: '' })
  assert.equal(without.out.url, 'CONNECTION_ERROR', without.stderr)
  assert.equal(without.out.lock, 'CONNECTION_ERROR')
  // Unreadable: Node's own rule, a warning and nothing added (no crash, no hang).
  const unreadable = await child({ NODE_EXTRA_CA_CERTS: path.join(path.dirname(self.certFile), 'nope.pem') })
  assert.equal(unreadable.out.url, 'CONNECTION_ERROR')
  assert.match(unreadable.stderr, /SemaNativeWarning: Ignoring extra certs from/)
})
