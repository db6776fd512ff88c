'use strict'
// status() returns the status itself, not a SemaphoreResult, so it rejects on every failure, where the functions
// that return a SemaphoreResult (acquire, tryAcquire, release, wait) resolve `{ ok: false }` (index.d.ts, status).
// The rejection carries the code and the message tryAcquire's failed result gives for the same input: a bad option,
// a bad target, a dflockd URL out of range, an unreachable server. Every option is checked alike.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const net = require('node:net')
const path = require('node:path')
const sema = require('..')
const u = require('./helpers/file-util')

/** A port nobody listens on: one the OS gave us, closed again. */
function closedPort() {
  return new Promise((resolve) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

test('status() rejects with the code and message of the { ok: false } tryAcquire gives, for each bad input', async (t) => {
  const dir = u.mkTmp('status-contract-')
  t.after(() => u.rmTmp(dir))
  const file = path.join(dir, 'x.lock')
  const port = await closedPort()
  const cases = [
    [file, { staleTimeout: 'x' }, 'INVALID_ARGUMENT'],
    [file, { limit: 0 }, 'INVALID_ARGUMENT'],
    [file, { timeOut: 5 }, 'INVALID_ARGUMENT'],
    ['', {}, 'INVALID_PATH'],
    [`dflockd://127.0.0.1:${port}/k?limit=0`, {}, 'INVALID_ARGUMENT'],
    [`dflockd://127.0.0.1:${port}/k`, { connectTimeoutMs: 2000 }, 'CONNECTION_ERROR'],
  ]
  for (const [target, options, code] of cases) {
    const r = await sema.tryAcquire(target, options)
    assert.equal(r.ok, false, `${target} ${JSON.stringify(options)}`)
    assert.equal(r.error.type, code, `${target} ${JSON.stringify(options)}: ${r.error.message}`)
    // An option status does not take (timeOut: a typo of acquire's timeout) is refused by status too, in its words.
    const same = (e) => e instanceof sema.LockError && e.code === code && (code === 'INVALID_ARGUMENT' && options.timeOut ? /unknown option 'timeOut'/.test(e.message) : e.message === r.error.message)
    await assert.rejects(sema.status(target, options), same, `${target} ${JSON.stringify(options)}`)
  }
})
