'use strict'
// Connection.unref() / ref(): whether a pending request keeps the process alive, on both drivers (the JS thread's
// event loop, and tokio: Bun, Deno, SEMA_NATIVE_LIBUV=off). A child process holds a connection with a blocking `l`
// pending on a key this process holds on the real Go server: unref'd, the child exits on its own with the request
// still pending; ref'd (the default, or ref() after unref()), it stays until this process releases the key and the
// grant arrives.

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { Connection } = require('..')

require('node:v8').setFlagsFromString('--expose-gc') // for the garbage-collection test

const pkg = path.resolve(__dirname, '..')
/** A bound on each child, never reached when the behaviour is right (a child that hangs is killed and fails). */
const BOUND_MS = u.scaled(30000)

/**
 * Runs in a child: connects, sends a blocking `l` on `key` (held by the parent), prints `pending <driver>` once the
 * request is written, `granted` when it is granted. `how`: 'unref-before' | 'unref-after' | 'ref' | 'unref-ref'.
 */
const childCode = (port, key, how) => `
  const native = require('./lib/native')
  const { Connection } = require('.')
  const fail = (e) => { console.error(e && e.stack || e); process.exit(3) }
  ;(async () => {
    // The driver this process picks (the same choice Connection.connect makes), closed at once.
    const probe = await new Promise((res) => native.NativeDflockdConnection.connect({ server: { host: '127.0.0.1', port: ${port} } }).then(res))
    if (!probe.ok) fail(probe.error)
    const driver = probe.value.driver
    probe.value.close()
    const c = await Connection.connect({ host: '127.0.0.1', port: ${port} })
    const how = ${JSON.stringify(how)}
    if (how === 'unref-before' || how === 'unref-ref') c.unref()
    if (how === 'unref-ref') c.ref()
    c.acquire(${JSON.stringify(key)}, 3600, 30).then(() => console.log('granted'), fail)
    if (how === 'unref-after') c.unref()
    console.log('pending ' + driver)
  })().catch(fail)`

/** Starts the child; resolves {code, signal, killed, stdout, stderr} at its exit; `pending` resolves at its marker. */
function runChild(code, env) {
  const child = spawn(process.execPath, ['-e', code], { cwd: pkg, env, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  let markPending
  const pending = new Promise((r) => (markPending = r))
  child.stdout.on('data', (b) => {
    stdout += b
    if (/pending /.test(stdout)) markPending()
  })
  child.stderr.on('data', (b) => (stderr += b))
  let killed = false
  const timer = setTimeout(() => {
    killed = true
    child.kill('SIGKILL')
  }, BOUND_MS)
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      markPending()
      resolve({ code, signal, killed, stdout, stderr })
    })
  })
  return { pending, exited }
}

const DRIVERS = [
  { driver: 'event-loop', env: () => ({ ...process.env, SEMA_NATIVE_LIBUV: undefined }) },
  { driver: 'tokio', env: () => ({ ...process.env, SEMA_NATIVE_LIBUV: 'off' }) },
]

describe('Connection.unref() / ref(): a pending request and the process lifetime', { skip: d.goOnly() }, () => {
  let port
  let holder
  let n = 0
  before(async () => {
    port = (await d.startServer()).port
    holder = await Connection.connect({ host: '127.0.0.1', port })
  })
  after(async () => {
    holder?.close()
    await d.stopAll()
  })

  /** Waiters the server counts on `key` (its `stats`). */
  const waiters = async (key) => Number((await holder.stats()).locks.find((l) => l.key === key)?.waiters) || 0

  for (const { driver, env } of DRIVERS) {
    for (const how of ['unref-before', 'unref-after']) {
      test(`${driver}: ${how === 'unref-before' ? 'unref() before' : 'unref() after'} a blocking acquire → the child exits on its own, the request still pending`, async () => {
        const key = `unref-${process.pid}-${++n}`
        const g = await holder.acquire(key, 0, 60)
        try {
          const r = await runChild(childCode(port, key, how), env()).exited
          assert.equal(r.killed, false, `the child was still running after ${BOUND_MS} ms (the unref'd request kept it alive)\n${r.stderr}`)
          assert.equal(r.code, 0, r.stderr)
          assert.equal(r.stdout.trim(), `pending ${driver}`, 'exited with the request pending, never granted')
        } finally {
          await holder.release(key, g.token)
        }
      })
    }

    for (const how of ['ref', 'unref-ref']) {
      test(`${driver}: ${how === 'ref' ? 'the default (ref\'d)' : 'unref() then ref()'} → the child stays until the grant`, async () => {
        const key = `ref-${process.pid}-${++n}`
        const g = await holder.acquire(key, 0, 60)
        const child = runChild(childCode(port, key, how), env())
        await child.pending
        // The child's `l` is queued at the server: only then is the key released (a child that had exited with its
        // request pending would never print `granted`).
        await u.until(async () => (await waiters(key)) > 0, { timeoutMs: 4000, what: "the child's request queued" })
        assert.equal(await waiters(key), 1, "the child's request is queued at the server")
        await holder.release(key, g.token)
        const r = await child.exited
        assert.equal(r.killed, false, r.stderr)
        assert.equal(r.code, 0, r.stderr)
        assert.equal(r.stdout.trim(), `pending ${driver}\ngranted`)
      })
    }
  }

  test("a LockManager holding a lock with its steal mailbox open exits on its own (the mailbox's connections are unref'd)", async () => {
    // The mailbox's watcher waits in a blocking `l` for up to an hour; the lock is held by a callback that never
    // settles, so the mailbox never goes idle: only unref'd connections let the process end.
    const code = `
      const { DflockdBackend } = require('./lib/locks/dflockd-backend')
      const { managerFor } = require('./lib/locks/manager')
      const b = new DflockdBackend('dflockd://127.0.0.1:${port}/unref-mbox-${process.pid}')
      managerFor(b).request('n', async () => {
        // The mailbox opens unref'd too: a timer keeps the process alive until it is open.
        const alive = setInterval(() => {}, 1000)
        console.log((await b.stealsOf().ready()) ? 'pending mailbox' : 'no mailbox')
        clearInterval(alive)
        return new Promise(() => {})
      })`
    const r = await runChild(code, process.env).exited
    assert.equal(r.killed, false, `the child was still running after ${BOUND_MS} ms (its mailbox kept it alive)\n${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'pending mailbox')
  })

  test('a Connection dropped with a request pending is not collected under it: the request still settles', { timeout: u.scaled(30000) }, async () => {
    // Each request's promise is settled natively (its deferred, a GC root, keeps the awaiting call and so the
    // Connection alive): nothing on the JS side holds the object, as a pending-request queue used to.
    const gc = require('node:vm').runInNewContext('gc')
    const key = `gc-${process.pid}`
    const g = await holder.acquire(key, 0, 60)
    const collected = []
    const registry = new FinalizationRegistry((what) => collected.push(what))
    const granted = await (async () => {
      const c = await Connection.connect({ host: '127.0.0.1', port })
      registry.register(c, 'connection')
      return { p: c.acquire(key, 30, 10) }
    })()
    for (let i = 0; i < 5; i++) {
      gc()
      await new Promise(setImmediate)
    }
    assert.deepEqual(collected, [], 'the connection was collected with its request pending')
    await holder.release(key, g.token)
    const grant = await granted.p
    assert.match(grant.token, /^[0-9a-f]{32}$/)
    // Settled, it is collectable: it is collected (so the registry above would have seen it).
    delete granted.p
    // gc() until the FinalizationRegistry's callback (the event) has run; bounded.
    await u.until(() => (gc(), collected.length > 0), { timeoutMs: 500, what: 'the settled connection collected' })
    assert.deepEqual(collected, ['connection'])
  })

  test('unref() and ref() return the connection, and are no-ops once it is closed', async () => {
    const c = await Connection.connect({ host: '127.0.0.1', port })
    assert.equal(c.unref(), c)
    assert.equal(c.ref(), c)
    c.close()
    assert.equal(c.unref(), c)
    assert.equal(c.ref(), c)
  })
})
