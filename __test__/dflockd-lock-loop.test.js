'use strict'
// DistributedLock on the event-loop driver (issue #24, the default), against the real server: which driver a primitive
// gets, a holder whose JavaScript is blocked keeping its lock through the renew watchdog (and told of a loss the
// watchdog's renew found once it runs again), loss reported at once when the server dies (the idle held socket's close,
// not the next renewal), renewal on the loop timer with no watchdog traffic, an idle held lock and an idle pooled
// connection never keeping the process alive, and a contended (`queued`) acquisition handed to tokio.
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { once } = require('node:events')
const path = require('node:path')
const d = require('./helpers/dflockd')
const { startFaultProxy } = require('./helpers/fault-proxy')
const { spawnTracked, waitExit, lines, until } = require('./helpers/file-util')
const native = require('../lib/native')
const { Worker } = require('node:worker_threads')
const { DistributedLock, DistributedSemaphore, LockError, stats, Connection } = require('..')

// The event-loop driver is the default (lib/dflockd/common.js loopDriverChosen): this file tests it, and so do its
// children, which inherit this environment.
delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER

const skip = d.skipReason()
const pkg = path.resolve(__dirname, '..')
let s
before(async () => {
  if (!skip) s = await d.startServer()
})
after(() => d.stopAll())

function runChild(code, boundMs, env = process.env) {
  const child = spawnTracked(process.execPath, ['-e', code], { cwd: pkg, env })
  child.stdin.end()
  return waitExit(child, boundMs, 'child')
}

/** Resolves once the server's stats show a waiter on `key` (lock or semaphore): polled, the server's queue has no event. */
function queuedOn(key) {
  return until(async () => {
    const st = await stats({ host: s.host, port: s.port })
    return (st.locks.find((l) => l.key === key)?.waiters ?? st.semaphores.find((l) => l.key === key)?.waiters ?? 0) > 0
  }, { intervalMs: 20, what: `a waiter on '${key}' in the server's stats` })
}

const primitiveOptions = (port, extra = {}) => ({
  key: 'loop-driver',
  limit: 1,
  acquireTimeoutS: 5,
  server: { host: '127.0.0.1', port },
  renewRatio: 0.5,
  ...extra,
})

describe('a held lock whose JavaScript thread is blocked past the server idle limit', { skip }, () => {
  // A child holds a 4 s lease on a server with a 3 s read timeout, then blocks its thread for 7 s (a long execSync
  // inside withLock); this process asks for the key meanwhile. Both drivers renew while the thread is blocked (tokio
  // threads; on the event loop, the renew watchdog), so the key is not granted until the child released it.
  async function blockedHolder(env) {
    const srv = await d.startServer({ args: ['--read-timeout', '3'] })
    const child = spawnTracked(
      process.execPath,
      [
        '-e',
        `const { DistributedLock } = require('.')
         ;(async () => {
           const l = new DistributedLock({ key: 'blocked', servers: [['${srv.host}', ${srv.port}]], leaseTtlS: 4,
             onLockLost: () => console.log('lost') })
           if (!(await l.acquire())) throw new Error('not acquired')
           console.log('held')
           await new Promise((r) => process.stdin.once('data', r))
           Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 7000)
           console.log('unblocked ' + Date.now())
           await l.release()
           console.log('released, watchdog renews ' + require('./lib/native').dflockdWatchdogRenews())
         })()`,
      ],
      { cwd: pkg, env },
    )
    await lines(child).next(/^held$/, 20000)
    const waiter = new DistributedLock({ key: 'blocked', servers: [[srv.host, srv.port]], acquireTimeoutS: 15 })
    child.stdin.end('go\n')
    assert.equal(await waiter.acquire(), true)
    const grantedAt = Date.now()
    await waiter.release()
    const ex = await waitExit(child, 20000, 'blocked holder')
    assert.equal(ex.code, 0, ex.stderr)
    assert.doesNotMatch(ex.stdout, /lost/)
    const unblockedAt = Number(/unblocked (\d+)/.exec(ex.stdout)?.[1])
    const watchdogRenews = Number(/watchdog renews (\d+)/.exec(ex.stdout)?.[1])
    return { grantedAt, unblockedAt, watchdogRenews }
  }

  test('tokio driver (SEMA_NATIVE_DFLOCKD_DRIVER=tokio): renewals go on; the waiter gets the key only after the holder woke and released', async () => {
    const { grantedAt, unblockedAt, watchdogRenews } = await blockedHolder({ ...process.env, SEMA_NATIVE_DFLOCKD_DRIVER: 'tokio' })
    assert.ok(grantedAt >= unblockedAt, `granted ${grantedAt - unblockedAt} ms before the holder's thread ran again`)
    assert.equal(watchdogRenews, 0)
  })

  test('event-loop driver (default): the watchdog renews while blocked; the waiter gets the key only after the holder woke and released', async () => {
    const { grantedAt, unblockedAt, watchdogRenews } = await blockedHolder(process.env)
    assert.ok(grantedAt >= unblockedAt, `granted ${grantedAt - unblockedAt} ms before the holder's thread ran again`)
    assert.ok(watchdogRenews >= 2, `${watchdogRenews} watchdog renews over a 7 s block of a lease renewed every 2 s`)
  })

  test('a holder late for its renew awaits the watchdog\'s renew in flight instead of sending a second one', async () => {
    // A pipe to the server that delays each chunk 300 ms both ways and counts the renew requests (`n` lines) going up:
    // the watchdog's renew is still unanswered when the child's thread runs again.
    let renews = 0
    const sockets = new Set()
    const proxy = require('node:net').createServer((c) => {
      const up = require('node:net').connect(s.port, s.host)
      sockets.add(c).add(up)
      c.on('data', (d) => {
        renews += d.toString('latin1').split('\n').filter((l) => l === 'n').length
        setTimeout(() => up.write(d), 300)
      })
      up.on('data', (d) => setTimeout(() => c.write(d), 300))
      for (const x of [c, up]) x.on('error', () => {}).on('close', () => (c.destroy(), up.destroy()))
    })
    await once(proxy.listen(0, '127.0.0.1'), 'listening')
    const child = spawnTracked(
      process.execPath,
      [
        '-e',
        `const { DistributedLock } = require('.')
         const { Worker } = require('node:worker_threads')
         ;(async () => {
           const l = new DistributedLock({ key: 'wd-late', servers: [['127.0.0.1', ${proxy.address().port}]], leaseTtlS: 4,
             onLockLost: () => console.log('lost') })
           if (!(await l.acquire())) throw new Error('not acquired')
           const sab = new SharedArrayBuffer(4)
           // Wakes this thread once the watchdog wrote a renew: past the renew instant, its reply 600 ms away.
           new Worker(\`
             const native = require(\${JSON.stringify(require.resolve('./lib/native'))})
             const flag = new Int32Array(require('node:worker_threads').workerData)
             const seen = native.dflockdWatchdogRenews()
             const wait = () => native.dflockdWatchdogRenews() > seen ? (Atomics.store(flag, 0, 1), Atomics.notify(flag, 0)) : setTimeout(wait, 10)
             wait()\`, { eval: true, workerData: sab }).unref()
           const provenUntil = () => performance.now() + l.remaining()
           const before = provenUntil()
           Atomics.wait(new Int32Array(sab), 0, 0)
           // Renewed by the watchdog's renew (sent 2 s after the grant's request) once its reply is read: the lease is
           // then proven about 2 s longer (the thread's own next renew is due 2 s after the watchdog's).
           // Polled: nothing announces that the renew's reply was read (remaining() grows).
           while (!(provenUntil() > before + 1000)) await new Promise((r) => setTimeout(r, 20))
           console.log('renewed, watchdog renews ' + require('./lib/native').dflockdWatchdogRenews())
           await l.release()
           console.log('released')
         })().catch((e) => { console.error(e); process.exit(3) })`,
      ],
      { cwd: pkg },
    )
    try {
      const ex = await waitExit(child, 20000, 'late holder')
      assert.equal(ex.code, 0, ex.stderr)
      assert.equal(ex.stdout, 'renewed, watchdog renews 1\nreleased\n')
      assert.equal(renews, 1, 'one renew for the period (the watchdog\'s), none of the late thread\'s own')
    } finally {
      for (const x of sockets) x.destroy()
      proxy.close()
    }
  })

  test('a watchdog renew answered "error" (the lock released behind the holder\'s back) is reported as lost once JavaScript runs again', async () => {
    const marker = path.join(require('node:os').tmpdir(), `sema-wd-${process.pid}-${Date.now()}`)
    // The child's main thread blocks until its worker has seen a watchdog renew written after this process released
    // the child's token from another connection (the server answers that renew `error`).
    const child = spawnTracked(
      process.execPath,
      [
        '-e',
        `const { DistributedLock } = require('.')
         const { Worker } = require('node:worker_threads')
         const fs = require('node:fs')
         ;(async () => {
           const l = new DistributedLock({ key: 'wd-gone', servers: [['${s.host}', ${s.port}]], leaseTtlS: 30,
             renewMaxIntervalMs: 1000, onLockLost: () => console.log('onLockLost') })
           if (!(await l.acquire())) throw new Error('not acquired')
           const sab = new SharedArrayBuffer(4)
           new Worker(\`
             const { workerData } = require('node:worker_threads')
             const native = require(\${JSON.stringify(require.resolve('./lib/native'))})
             const fs = require('node:fs')
             const flag = new Int32Array(workerData.sab)
             const tick = () => {
               if (!fs.existsSync(workerData.marker)) return setTimeout(tick, 10)
               const seen = native.dflockdWatchdogRenews()
               const wait = () => native.dflockdWatchdogRenews() > seen ? (Atomics.store(flag, 0, 1), Atomics.notify(flag, 0)) : setTimeout(wait, 10)
               wait()
             }
             tick()\`, { eval: true, workerData: { sab, marker: ${JSON.stringify(marker)} } }).unref()
           fs.writeSync(1, 'blocking ' + l.token + '\\n')
           Atomics.wait(new Int32Array(sab), 0, 0)
           console.log('unblocked')
           const reason = l.signal.aborted ? l.signal.reason : await new Promise((r) => l.signal.addEventListener('abort', () => r(l.signal.reason)))
           console.log(JSON.stringify({ code: reason.code, message: reason.message, token: l.token }))
           await l.release().catch((e) => console.log('release ' + e.code))
         })().catch((e) => { console.error(e); process.exit(3) })`,
      ],
      { cwd: pkg },
    )
    const token = (await lines(child).next(/^blocking \S+$/, 20000)).slice('blocking '.length)
    const conn = await Connection.connect({ host: s.host, port: s.port })
    await conn.release('wd-gone', token)
    conn.close()
    require('node:fs').writeFileSync(marker, '')
    try {
      const ex = await waitExit(child, 20000, 'holder told of the loss')
      assert.equal(ex.code, 0, ex.stderr)
      const lines = ex.stdout.trim().split('\n')
      assert.equal(lines[1], 'unblocked')
      assert.equal(lines[2], 'onLockLost', 'reported after the thread ran again')
      const r = JSON.parse(lines[3])
      assert.equal(r.code, 'LOCK_LOST')
      assert.match(
        r.message,
        /renew sent by the watchdog while JavaScript was blocked: server answered 'error'/,
        'from the watchdog renew\'s reply, not the thread\'s own renew nor the lease clock (30 s)',
      )
      assert.equal(r.token, null)
      assert.equal(lines[4], 'release NOT_LOCKED')
    } finally {
      require('node:fs').rmSync(marker, { force: true })
    }
  })
})

describe('DistributedLock on the event loop', { skip }, () => {
  test('the event loop is the default driver; SEMA_NATIVE_DFLOCKD_DRIVER=tokio turns it off', () => {
    const { useEventLoop } = require('../lib/dflockd/common')
    const prim = () => new native.NativeDflockdPrimitive(primitiveOptions(s.port))
    assert.notEqual(useEventLoop(prim()), 0)
    process.env.SEMA_NATIVE_DFLOCKD_DRIVER = 'tokio'
    try {
      assert.equal(useEventLoop(prim()), 0)
      process.env.SEMA_NATIVE_DFLOCKD_DRIVER = 'event-loop'
      assert.notEqual(useEventLoop(prim()), 0)
    } finally {
      delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
    }
  })

  test('an unknown SEMA_NATIVE_DFLOCKD_DRIVER is ignored (the event loop) with one warning naming it', async () => {
    const r = await runChild(
      `const native = require('./lib/native')
       const { useEventLoop } = require('./lib/dflockd/common')
       const prim = () => new native.NativeDflockdPrimitive(${JSON.stringify(primitiveOptions(s.port))})
       console.log(useEventLoop(prim()) !== 0, useEventLoop(prim()) !== 0)`,
      15000,
      { ...process.env, SEMA_NATIVE_DFLOCKD_DRIVER: 'tokyo' },
    )
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'true true')
    assert.equal(r.stderr.match(/SEMA_NATIVE_DFLOCKD_DRIVER="tokyo" is not 'tokio' or 'event-loop'/g)?.length, 1, r.stderr)
  })

  test('a plain-TCP primitive runs on the event loop; TLS, a shared mode and SEMA_NATIVE_LIBUV=off stay on tokio', async () => {
    const settle = () => {}
    assert.equal(new native.NativeDflockdPrimitive(primitiveOptions(s.port)).useEventLoop(1, settle), true)
    const tls = new native.NativeDflockdPrimitive(primitiveOptions(s.port, { tls: { rejectUnauthorized: false } }))
    assert.equal(tls.useEventLoop(1, settle), false)
    const shared = new native.NativeDflockdPrimitive(primitiveOptions(s.port, { mode: 'shared' }))
    assert.equal(shared.useEventLoop(1, settle), false)
    const r = await runChild(
      `const native = require('./lib/native')
       const p = new native.NativeDflockdPrimitive(${JSON.stringify(primitiveOptions(s.port))})
       console.log(p.useEventLoop(1, () => {}))`,
      15000,
      { ...process.env, SEMA_NATIVE_LIBUV: 'off' },
    )
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'false')
  })

  test('server SIGKILLed while an idle lock is held: the loss is reported from the socket close, long before a renewal', async () => {
    const srv = await d.startServer()
    const calls = []
    // A 30 s lease renews after 15 s: a loss reported within 5 s of the kill can only come from the closed socket.
    const a = new DistributedLock({ key: 'loop-kill', servers: [[srv.host, srv.port]], leaseTtlS: 30, onLockLost: (...args) => calls.push(args) })
    assert.equal(await a.acquire(), true)
    // Some rounds first: the loss reaches the connection that came back from the pool.
    for (let i = 0; i < 20; i++) {
      await a.release()
      assert.equal(await a.acquire(), true)
    }
    const token = a.token
    const aborted = once(a.signal, 'abort')
    const killedAt = Date.now()
    await srv.kill('SIGKILL')
    await aborted
    const after = Date.now() - killedAt
    assert.ok(after < 5000, `loss reported ${after} ms after the kill`)
    assert.deepEqual(calls, [['loop-kill', token]])
    assert.equal(a.signal.reason.code, 'LOCK_LOST')
    assert.equal(a.token, null)
    await assert.rejects(a.release(), (e) => e instanceof LockError && e.code === 'NOT_LOCKED')
    await srv.restart()
    assert.equal(await a.acquire(), true, 'acquires again on a new connection after the loss')
    await a.release()
  })

  test('a 2 s lease is renewed on the loop timer: held for 4 s, and nobody else gets it meanwhile; no watchdog traffic', async () => {
    // How late this loop ran: a watchdog renew is only allowed after a stretch later than its grace (50 ms; a loaded
    // machine can stall the loop that long), never while the loop was on time.
    const delay = require('node:perf_hooks').monitorEventLoopDelay({ resolution: 10 })
    delay.enable()
    const watchdogBefore = native.dflockdWatchdogRenews()
    const a = new DistributedLock({ key: 'loop-renew', servers: [[s.host, s.port]], leaseTtlS: 2, onLockLost: () => assert.fail('lost') })
    assert.equal(await a.acquire(), true)
    const token = a.token
    const other = new DistributedLock({ key: 'loop-renew', servers: [[s.host, s.port]], acquireTimeoutS: 4 })
    assert.equal(await other.acquire(), false, 'the renewed lease kept the key for 4 s')
    assert.equal(a.token, token)
    assert.ok(a.remaining() > 0)
    await a.release()
    assert.equal(await other.acquire(), true)
    await other.release()
    delay.disable()
    const lateMs = delay.max / 1e6
    const wrote = native.dflockdWatchdogRenews() - watchdogBefore
    if (lateMs < 40) assert.equal(wrote, 0, `JavaScript renewed on time (loop at most ${lateMs} ms late): the watchdog wrote nothing`)
    // Late: at most one watchdog renew per renew period (2 in 4 s at a 2 s lease), never one on top of the thread's own.
    else assert.ok(wrote <= 4, `${wrote} watchdog renews with the loop at most ${lateMs} ms late`)
  })

  test('release() while a renew reply is lost waits 5 s at most for it, not the lease (30 s)', async () => {
    // The grant's reply passes, then every reply is swallowed: the first renew (after 1 s) is never answered.
    const proxy = await startFaultProxy(s, { downLines: 1 })
    const lock = new DistributedLock({ key: 'loop-rel-renew', servers: [[proxy.host, proxy.port]], leaseTtlS: 30, renewMaxIntervalMs: 1000 })
    assert.equal(await lock.acquire(), true)
    await once(proxy, 'drop')
    const t0 = performance.now()
    await lock.release()
    const took = performance.now() - t0
    assert.ok(took < 15000, `release settled after ${Math.round(took)} ms`)
    assert.equal(lock.token, null)
    // The connection was closed: the server released the key.
    const next = new DistributedLock({ key: 'loop-rel-renew', servers: [[s.host, s.port]], acquireTimeoutS: 5 })
    assert.equal(await next.acquire(), true)
    await next.release()
    await proxy.close()
  })

  test('a contended acquire (`e` answered `queued`) goes on on tokio and is granted at the release', async () => {
    const a = new DistributedLock({ key: 'loop-queued', servers: [[s.host, s.port]] })
    const b = new DistributedSemaphore({ key: 'loop-queued-sem', limit: 1, servers: [[s.host, s.port]] })
    const c = new DistributedSemaphore({ key: 'loop-queued-sem', limit: 1, servers: [[s.host, s.port]] })
    for (const [holder, waiter, key] of [
      [a, new DistributedLock({ key: 'loop-queued', servers: [[s.host, s.port]] }), 'loop-queued'],
      [b, c, 'loop-queued-sem'],
    ]) {
      assert.equal(await holder.acquire(), true)
      const granted = waiter.acquire()
      await queuedOn(key)
      await holder.release()
      assert.equal(await granted, true)
      assert.ok(waiter.token)
      await waiter.release()
    }
  })

  test('acquire({signal}) aborted while queued settles ABORTED and leaves the instance usable', async () => {
    const holder = new DistributedLock({ key: 'loop-abort', servers: [[s.host, s.port]] })
    assert.equal(await holder.acquire(), true)
    const waiter = new DistributedLock({ key: 'loop-abort', servers: [[s.host, s.port]] })
    const ac = new AbortController()
    const p = waiter.acquire({ signal: ac.signal })
    await queuedOn('loop-abort')
    ac.abort()
    await assert.rejects(p, (e) => e instanceof LockError && e.code === 'ABORTED')
    await holder.release()
    assert.equal(await waiter.acquire(), true)
    await waiter.release()
  })

  test('a worker thread runs its own locks on its own loop, and ends by itself holding one', async () => {
    const main = new DistributedLock({ key: 'loop-worker-main', servers: [[s.host, s.port]] })
    assert.equal(await main.acquire(), true)
    const w = new Worker(
      `const { parentPort } = require('node:worker_threads')
       const { DistributedLock } = require(${JSON.stringify(pkg)})
       ;(async () => {
         const l = new DistributedLock({ key: 'loop-worker', servers: [['127.0.0.1', ${s.port}]], leaseTtlS: 2 })
         for (let i = 0; i < 50; i++) {
           if (!(await l.acquire())) throw new Error('not acquired')
           await l.release()
         }
         const held = new DistributedLock({ key: 'loop-worker-held', servers: [['127.0.0.1', ${s.port}]] })
         parentPort.postMessage(await held.acquire())
       })().catch((e) => parentPort.postMessage(String(e)))`,
      { eval: true },
    )
    const [msg] = await once(w, 'message')
    assert.equal(msg, true)
    const [code] = await once(w, 'exit')
    assert.equal(code, 0)
    // The worker's held lock went with its connection; the main thread's is untouched.
    const again = new DistributedLock({ key: 'loop-worker-held', servers: [[s.host, s.port]], acquireTimeoutS: 5 })
    assert.equal(await again.acquire(), true)
    await again.release()
    assert.ok(main.token)
    await main.release()
  })

  test('an idle held lock and an idle pooled connection do not keep the process alive (the child exits by itself)', async () => {
    const r = await runChild(
      `const { DistributedLock } = require('.')
       ;(async () => {
         const pooled = new DistributedLock({ key: 'loop-exit-pooled', servers: [['127.0.0.1', ${s.port}]] })
         if (!(await pooled.acquire())) throw new Error('not acquired')
         await pooled.release()
         const held = new DistributedLock({ key: 'loop-exit-held', servers: [['127.0.0.1', ${s.port}]], leaseTtlS: 2 })
         if (!(await held.acquire())) throw new Error('not acquired')
         console.log('held')
       })().catch((e) => { console.error(e); process.exit(3) })
       process.on('exit', (c) => console.log('exit ' + c))`,
      15000,
    )
    assert.equal(r.code, 0, r.stderr)
    assert.deepEqual(r.stdout.trim().split('\n'), ['held', 'exit 0'])
  })
})
