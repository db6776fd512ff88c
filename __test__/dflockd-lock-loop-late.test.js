'use strict'
// DistributedLock on the event-loop driver (the default) when its JavaScript thread is late to READ a reply (review of
// issue #24): a grant read after its lease ran out is not reported held (it is renewed first, as on tokio), and a
// holder blocked long enough for many watchdog renews' replies to queue up keeps its lock once it runs again.
const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const d = require('./helpers/dflockd')
const { spawnTracked, lines, until } = require('./helpers/file-util')
const { DistributedLock, stats } = require('..')

delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER

const skip = d.skipReason()
const pkg = path.resolve(__dirname, '..')
let s
before(async () => {
  if (!skip) s = await d.startServer()
})
after(() => d.stopAll())

/**
 * Runs `code` in a child (this package as cwd). `line(prefix)` resolves its first stdout line starting with `prefix`,
 * and rejects if its stdout ends first (or after 240 s × timeScale(): the longest child here blocks about 2 min).
 */
function child(code, { stdin = false } = {}) {
  const c = spawnTracked(process.execPath, ['-e', code], { cwd: pkg, env: process.env })
  if (!stdin) c.stdin.end()
  const out = lines(c)
  return {
    line: (prefix) => out.next((l) => l.startsWith(prefix), 240_000),
    /** Writes a line to the child's stdin (a child started with `stdin` waits for it), then ends it. */
    unblock: () => c.stdin.end('go\n'),
    exited: c.exited.then(({ code }) => code),
    stderr: () => c.stderrText,
  }
}

/** Resolves once the server's stats show a waiter on `key` (polled: the server's queue has no event). */
function queuedOn(key) {
  return until(async () => {
    const st = await stats({ host: s.host, port: s.port })
    return (st.locks.find((l) => l.key === key)?.waiters ?? 0) > 0
  }, { timeoutMs: 30000, intervalMs: 20, what: `a waiter on '${key}' in the server's stats` })
}

/** Resolves once the server's stats show `key` held (polled). */
function heldOnServer(key) {
  return until(async () => (await stats({ host: s.host, port: s.port })).locks.some((l) => l.key === key), {
    timeoutMs: 30000,
    intervalMs: 20,
    what: `'${key}' held in the server's stats`,
  })
}

test('a grant read after its lease ran out (JS blocked between the request and the reply) is never reported held', { skip }, async () => {
  // A (child) asks on a pooled connection (the `l` is written inside acquire()), then blocks 3.5 s before it awaits
  // the reply; its lease is 2 s. The server expires it and grants the key to B (this process). When A runs again its
  // grant must be renewed before it is reported: the server refuses, so A's acquire() fails LOCK_LOST (as on tokio)
  // instead of resolving true while B holds the key.
  const a = child(`
    const { DistributedLock } = require('.')
    ;(async () => {
      const l = new DistributedLock({ key: 'late-grant', servers: [['${s.host}', ${s.port}]], leaseTtlS: 2,
        onLockLost: () => console.log('lost') })
      await l.acquire(); await l.release()
      const p = l.acquire()
      console.log('asked')
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3500)
      const r = await p.then((ok) => 'ok ' + ok + ' aborted=' + l.signal.aborted, (e) => 'error ' + e.code)
      console.log('result ' + r + ' token=' + l.token)
      await l.release().catch(() => {})
    })()`)
  await a.line('asked')
  await heldOnServer('late-grant')
  const b = new DistributedLock({ key: 'late-grant', servers: [[s.host, s.port]], acquireTimeoutS: 10 })
  assert.equal(await b.acquire(), true)
  // B holds the key: whatever A reports now must not be "held".
  const result = await a.line('result ')
  assert.match(result, /^result error LOCK_LOST token=(null|undefined)$/, result)
  await b.release()
  assert.equal(await a.exited, 0, a.stderr())
})

test('a grant read late but within its lease is renewed before it is reported, its lease counted from that renew', { skip }, async () => {
  // Lease 4 s, renewed at half: the reply is read after 2.5 s (first renew due, lease not over). The confirming renew
  // succeeds, acquire() resolves true and the lock stays held past the grant's own lease.
  const a = child(`
    const { DistributedLock } = require('.')
    ;(async () => {
      const l = new DistributedLock({ key: 'late-grant-ok', servers: [['${s.host}', ${s.port}]], leaseTtlS: 4,
        renewRatio: 0.5, onLockLost: () => console.log('lost') })
      await l.acquire(); await l.release()
      const asked = Date.now()
      const p = l.acquire()
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2500)
      console.log('result ' + (await p))
      await new Promise((r) => setTimeout(r, 2500)) // the time under test: 5 s after the request, past its 4 s lease
      console.log('after ' + (Date.now() - asked) + ' ms aborted=' + l.signal.aborted)
      await l.release()
      console.log('released')
    })()`)
  assert.equal(await a.line('result '), 'result true')
  assert.match(await a.line('after '), /aborted=false$/)
  await a.line('released')
  assert.equal(await a.exited, 0, a.stderr())
})

test('a holder blocked while hundreds of watchdog renews were answered keeps its lock when it runs again', { skip, timeout: 300_000 }, async () => {
  // Lease 1 s renewed every 100 ms: the watchdog renews every ~150 ms while A's thread is blocked, and the replies
  // (`ok 1`, 5 bytes) wait unread. A blocks until more than 900 were written (over 4 KiB of replies: more than one
  // read), which takes ~2 min. When A runs again every reply must be read before the lease is judged: the lock was
  // never lost (its release is accepted; B, waiting meanwhile, gets it then).
  const a = child(`
    const { DistributedLock } = require('.')
    const native = require('./lib/native')
    ;(async () => {
      const l = new DistributedLock({ key: 'long-block', servers: [['${s.host}', ${s.port}]], leaseTtlS: 1,
        renewMaxIntervalMs: 100, onLockLost: () => console.log('lost ' + l.signal.reason?.message) })
      await l.acquire()
      const base = native.dflockdWatchdogRenews()
      console.log('held')
      await new Promise((r) => process.stdin.once('data', r))
      while (native.dflockdWatchdogRenews() - base < 900) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000)
      console.log('unblocked watchdog renews ' + (native.dflockdWatchdogRenews() - base))
      // A few renew periods on the loop (its timers and the socket's replies run).
      await new Promise((r) => setTimeout(r, 500))
      console.log('aborted=' + l.signal.aborted)
      console.log('releasing')
      await l.release().then(() => console.log('released ok'), (e) => console.log('released ' + e.code))
    })()`, { stdin: true })
  await a.line('held')
  const b = new DistributedLock({ key: 'long-block', servers: [[s.host, s.port]], acquireTimeoutS: 300 })
  const got = b.acquire()
  await queuedOn('long-block')
  a.unblock()
  const un = await a.line('unblocked ')
  assert.ok(Number(un.split(' ').pop()) >= 900, un)
  assert.equal(await a.line('aborted='), 'aborted=false')
  // Released with its token: the server still had the key as A's (a lost lock's release fails LOCK_LOST).
  assert.equal(await a.line('released '), 'released ok')
  assert.equal(await got, true)
  await b.release()
  assert.equal(await a.exited, 0, a.stderr())
})
