'use strict'
// The auth token never leaves the process in text: not in error messages (bad URLs, failed acquisitions, auth
// refused), not in lock.target or status().target, not in the CLI's output (text or JSON), not in the loss reason.
// Every path below is grepped for the token; the server is the real Go server started with that token.
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const api = require('..')
const { parseDflockdUrl } = require('../lib/dflockd')
const { LockError } = require('../lib/errors')
const { cli } = require('./fixtures/cli/helpers')

const TOKEN = 's3cretTOKEN'
const skip = d.skipReason()
let s
before(async () => {
  if (!skip) s = await d.startServer({ args: ['--auth-token', TOKEN] })
})
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
  return parts.join('\n')
}

function noToken(v, where) {
  const text = allText(v)
  assert.ok(!text.includes(TOKEN), `${where} shows the token: ${text}`)
  assert.ok(!text.includes(encodeURIComponent(TOKEN)) || encodeURIComponent(TOKEN) === TOKEN)
}

describe('the auth token is never shown', { skip }, () => {
  test('bad URLs: every parse error masks the user info', () => {
    const bad = [
      `dflockd://${TOKEN}@127.0.0.1:99999/k`,
      `dflockd://${TOKEN}@127.0.0.1:1/`,
      `dflockd://${TOKEN}@127.0.0.1:1/k#frag`,
      `dflockd://${TOKEN}@127.0.0.1:1/k?limit=x`,
      `dflockd://${TOKEN}@127.0.0.1:1/k?leaseTtl=0`,
      `dflockd://${TOKEN}@127.0.0.1:1/k?tls=maybe`,
      `dflockd://${TOKEN}@127.0.0.1:1/k?colour=red`,
      `dflockd://${TOKEN}@127.0.0.1:1/%E0%A4%A`,
      `dflockd://${TOKEN}:pass@[::1/k`,
      `dflockd://a@${TOKEN}@127.0.0.1:1/k?x=1`,
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
    const url = `dflockd://${TOKEN}@127.0.0.1:${s.port}/sec-key`
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

    const wrong = await api.acquire(`dflockd://wrong-${TOKEN}@127.0.0.1:${s.port}/sec-key`)
    assert.equal(wrong.ok, false)
    assert.equal(wrong.error.type, 'AUTH_FAILED')
    noToken(wrong, 'an AUTH_FAILED result')
    await assert.rejects(api.withLock(`dflockd://wrong-${TOKEN}@127.0.0.1:${s.port}/sec-key`, () => 1), (e) => {
      noToken(e, 'withLock rejection')
      return e instanceof LockError && e.code === 'AUTH_FAILED'
    })
    await assert.rejects(api.withLock(`dflockd://${TOKEN}@127.0.0.1:${s.port}/sec-key?tls=maybe`, () => 1), (e) => {
      noToken(e, 'withLock rejection of a bad URL')
      return e instanceof LockError && e.code === 'INVALID_ARGUMENT'
    })
  })

  test('the loss reason and the lost handle do not show it', async () => {
    const r = await api.acquire(`dflockd://${TOKEN}@127.0.0.1:${s.port}/sec-loss`)
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
    const url = `dflockd://${TOKEN}@127.0.0.1:${s.port}/sec-cli`
    for (const args of [['status', url, '--json'], ['status', url], ['wait', url, '--json'], ['status', `${url}?tls=maybe`, '--json'],
      ['run', `dflockd://wrong@127.0.0.1:${s.port}/sec-cli`, '--', process.execPath, '-e', '0'],
      ['run', url, '--', process.execPath, '-e', 'process.stdout.write(process.env.SEMA_NATIVE_TARGET ?? "")']]) {
      const r = await cli(args)
      assert.ok(!r.stdout.includes(TOKEN) && !r.stderr.includes(TOKEN), `sema-native ${args.join(' ')} shows the token:\n${r.stdout}\n${r.stderr}`)
    }
    const st = await cli(['status', url, '--json'])
    assert.equal(st.code, 0, st.stderr)
    assert.equal(JSON.parse(st.stdout).target, `dflockd://***@127.0.0.1:${s.port}/sec-cli`)
  })
})
