'use strict'
// The auth token never leaves the process in text: not in error messages (bad URLs, failed acquisitions, auth
// refused), not in lock.target or status().target, not in the CLI's output (text or JSON), not in the loss reason.
// Every path below is grepped for the token and for every fragment of it (a token with '@', '/', ':' and '%' is
// written percent-encoded in the URL; a redaction that stopped at its first '@' would leave its tail visible), also in
// util.inspect of locks and errors; the server is the real Go server started with that token.
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const util = require('node:util')
const d = require('./helpers/dflockd')
const api = require('..')
const { parseDflockdUrl } = require('../lib/dflockd')
const { LockError } = require('../lib/errors')
const { cli } = require('./fixtures/cli/helpers')

const skip = d.skipReason()
after(() => d.stopAll())

/** Every string reachable from `v` (own enumerable properties, messages, nested objects), joined. */
function allText(v, seen = new Set()) {
  if (v === null || v === undefined) return ''
  if (typeof v !== 'object') return String(v)
  if (seen.has(v)) return ''
  seen.add(v)
  const parts = []
  if (v instanceof Error) parts.push(v.message, String(v.stack))
  for (const k of Object.keys(v)) parts.push(allText(v[k], seen))
  if (typeof v.toJSON === 'function') parts.push(JSON.stringify(v))
  parts.push(util.inspect(v, { depth: 4, showHidden: false }))
  return parts.join('\n')
}

// A plain token, and one with every character that needs percent-encoding in the user info.
for (const TOKEN of ['s3cretTOKEN', 'Al1ce@Wonder/Land:Sec%Ret99']) {
  /** The token as written in a URL's user info. */
  const ENC = encodeURIComponent(TOKEN)
  /** The token, its encoded form, and each piece between its special characters. */
  const fragments = [...new Set([TOKEN, ENC, ...TOKEN.split(/[@/:%]/).filter((f) => f.length >= 3)])]

  function noToken(v, where) {
    const text = typeof v === 'string' ? v : allText(v)
    for (const f of fragments) assert.ok(!text.includes(f), `${where} shows ${JSON.stringify(f)} of the token: ${text}`)
  }

describe(`the auth token is never shown (${TOKEN === ENC ? 'plain' : "with '@', '/', ':' and '%'"})`, { skip }, () => {
  let s
  before(async () => {
    if (!skip) s = await d.startServer({ args: ['--auth-token', TOKEN] })
  })

  test('bad URLs: every parse error masks the user info', () => {
    const bad = [
      `dflockd://${ENC}@127.0.0.1:99999/k`,
      `dflockd://${ENC}@127.0.0.1:1/`,
      `dflockd://${ENC}@127.0.0.1:1/k#frag`,
      `dflockd://${ENC}@127.0.0.1:1/k?limit=x`,
      `dflockd://${ENC}@127.0.0.1:1/k?leaseTtl=0`,
      `dflockd://${ENC}@127.0.0.1:1/k?tls=maybe`,
      `dflockd://${ENC}@127.0.0.1:1/k?colour=red`,
      `dflockd://${ENC}@127.0.0.1:1/%E0%A4%A`,
      `dflockd://${ENC}:pass@[::1/k`,
      `dflockd://a@${ENC}@127.0.0.1:1/k?x=1`,
    ]
    for (const url of bad) {
      const e = (() => {
        try {
          parseDflockdUrl(url)
        } catch (err) {
          return err
        }
        return null
      })()
      assert.ok(e instanceof LockError && e.code === 'INVALID_ARGUMENT', `${url} must be refused`)
      noToken(e, `the error for ${url}`)
      assert.match(e.message, /\*\*\*@/)
    }
  })

  test('target API: acquire / lock.target / status().target / a refused acquisition / withLock', async () => {
    const url = `dflockd://${ENC}@127.0.0.1:${s.port}/sec-key`
    const r = await api.acquire(url)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const lock = r.value
    assert.equal(lock.target, `dflockd://***@127.0.0.1:${s.port}/sec-key`)
    noToken(lock, 'the lock handle')
    const st = await api.status(url)
    assert.equal(st.locked, true)
    assert.equal(st.target, `dflockd://***@127.0.0.1:${s.port}/sec-key`)
    noToken(st, 'status()')
    const busy = await api.tryAcquire(url)
    assert.equal(busy.ok, false)
    noToken(busy, 'a failed tryAcquire')
    assert.equal(await lock.release(), true)

    const wrong = await api.acquire(`dflockd://wrong-${ENC}@127.0.0.1:${s.port}/sec-key`)
    assert.equal(wrong.ok, false)
    assert.equal(wrong.error.type, 'AUTH_FAILED')
    noToken(wrong, 'an AUTH_FAILED result')
    await assert.rejects(api.withLock(`dflockd://wrong-${ENC}@127.0.0.1:${s.port}/sec-key`, () => 1), (e) => {
      noToken(e, 'withLock rejection')
      return e instanceof LockError && e.code === 'AUTH_FAILED'
    })
    await assert.rejects(api.withLock(`dflockd://${ENC}@127.0.0.1:${s.port}/sec-key?tls=maybe`, () => 1), (e) => {
      noToken(e, 'withLock rejection of a bad URL')
      return e instanceof LockError && e.code === 'INVALID_ARGUMENT'
    })
  })

  test("the scheme in any case (DFLOCKD://, Dflockd://) is a dflockd target everywhere, its token never shown", async () => {
    for (const scheme of ['DFLOCKD', 'Dflockd']) {
      const url = `${scheme}://${ENC}@127.0.0.1:${s.port}/sec-case`
      const r = await api.acquire(url)
      assert.equal(r.ok, true, JSON.stringify(r.error))
      assert.equal(r.value.backend, 'dflockd')
      assert.equal(r.value.target, `${scheme}://***@127.0.0.1:${s.port}/sec-case`)
      noToken(r.value, `the lock of ${scheme}://`)
      const st = await api.status(url)
      assert.equal(st.locked, true)
      noToken(st, `status() of ${scheme}://`)
      // The same lock whatever the scheme's case: a try on the lower-case spelling is refused.
      const busy = await api.tryAcquire(`dflockd://${ENC}@127.0.0.1:${s.port}/sec-case`)
      assert.equal(busy.ok, false)
      assert.equal(busy.error.type, 'ALREADY_LOCKED')
      assert.deepEqual(await api.release(url), { ok: true, value: undefined })
      assert.equal(await api.withLock(url, (lock) => lock.backend), 'dflockd')
      const manager = api.createLockManager(`${scheme}://${ENC}@127.0.0.1:${s.port}/sec-case-wl`)
      assert.equal(await manager.request('n', async () => 'granted'), 'granted')
      const bad = await api.acquire(`${scheme}://${ENC}@127.0.0.1:${s.port}/sec-case?colour=red`)
      assert.equal(bad.error.type, 'INVALID_ARGUMENT')
      noToken(bad, `a bad ${scheme}:// URL`)
      for (const args of [['status', url, '--json'], ['run', url, '--', process.execPath, '-e', '0']]) {
        const c = await cli(args)
        assert.equal(c.code, 0, `sema-native ${args.join(' ')}: ${c.stderr}`)
        noToken(`${c.stdout}\n${c.stderr}`, `sema-native ${args.join(' ')}`)
      }
    }
    // Not a dflockd target (one slash): refused as an unsupported target, its user info masked all the same.
    const typo = await api.acquire(`dflockd:/${ENC}@127.0.0.1:${s.port}/k`)
    assert.equal(typo.error.type, 'INVALID_ARGUMENT')
    noToken(typo, 'an unsupported target')
    // Every LockError's message goes through the redaction, whoever wrote it.
    noToken(new LockError(`cannot lock 'dflockd://${ENC}@h/k'`), 'a LockError naming a target')
  })

  test('the loss reason and the lost handle do not show it', async () => {
    const r = await api.acquire(`dflockd://${ENC}@127.0.0.1:${s.port}/sec-loss`)
    assert.equal(r.ok, true)
    // A held lock never keeps Node alive (its loss arrives from native code without a handle): a bounded timer does,
    // or the runner would see an empty event loop and cancel the test while the loss is on its way.
    let keepAlive
    const lost = new Promise((resolve, reject) => {
      keepAlive = setTimeout(() => reject(new Error('no loss within 10 s')), 10000)
      r.value.signal.addEventListener('abort', () => resolve(r.value.signal.reason), { once: true })
    }).finally(() => clearTimeout(keepAlive))
    await s.kill('SIGKILL')
    const reason = await lost
    noToken(reason, 'the loss reason')
    noToken(r.value, 'the lost handle')
    await s.restart()
  })

  test('CLI: status --json, status, wait and run with a token URL', async () => {
    const url = `dflockd://${ENC}@127.0.0.1:${s.port}/sec-cli`
    // A raw '@' before the token's own: URL parsing ends the user info at the last '@' (the whole of it is redacted).
    const twoAt = `dflockd://x@${ENC}@127.0.0.1:${s.port}/sec-cli`
    for (const args of [['status', url, '--json'], ['status', url], ['wait', url, '--json'], ['status', `${url}?tls=maybe`, '--json'],
      ['status', twoAt, '--json'], ['status', `${twoAt}?tls=maybe`],
      ['run', `dflockd://wrong@127.0.0.1:${s.port}/sec-cli`, '--', process.execPath, '-e', '0'],
      ['run', url, '--', process.execPath, '-e', 'process.stdout.write(process.env.SEMA_NATIVE_TARGET ?? "")']]) {
      const r = await cli(args)
      noToken(`${r.stdout}\n${r.stderr}`, `sema-native ${args.join(' ')}`)
    }
    const st = await cli(['status', url, '--json'])
    assert.equal(st.code, 0, st.stderr)
    assert.equal(JSON.parse(st.stdout).target, `dflockd://***@127.0.0.1:${s.port}/sec-cli`)
  })
})
}
