'use strict'
// One loss channel per JS thread for both backends (issue #18 item 3): file locks, DistributedLock and
// acquire('dflockd://…') are told of a loss through the thread's one callback, addressed by id (lib/losses.js,
// src/losses.rs). Against real servers: the right holder hears of a loss when several are held on one thread, and a
// loss that reaches JavaScript before the grant's result is told once, after acquire() resolved.
const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { once } = require('node:events')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const d = require('./helpers/dflockd')
const { DistributedLock, acquire } = require('..')

const skip = d.skipReason()
const pkg = path.resolve(__dirname, '..')
after(() => d.stopAll())

/** Runs `code` in a child process, synchronously (this thread stays blocked); its stdout. */
function childSync(code) {
  const r = spawnSync(process.execPath, ['-e', code], { cwd: pkg, encoding: 'utf8', timeout: 10_000 })
  if (r.status !== 0) throw new Error(`child failed: ${r.stderr || r.error}`)
  return r.stdout
}

test('a loss reaches the right holder when two DistributedLocks, a dflockd Lock and a file lock are held on one thread', { skip }, async () => {
  const a = await d.startServer()
  const b = await d.startServer()
  const told = { lockA: [], lockB: [], targetA: 0, file: 0 }
  const lockA = new DistributedLock({ key: 'channel-a', host: a.host, port: a.port, onLockLost: (_key, token) => told.lockA.push(token) })
  const lockB = new DistributedLock({ key: 'channel-b', host: b.host, port: b.port, onLockLost: (_key, token) => told.lockB.push(token) })
  assert.equal(await lockA.acquire(), true)
  assert.equal(await lockB.acquire(), true)
  const tokenA = lockA.token
  const targetA = await acquire(a.url('channel-target'), { onLost: () => told.targetA++ })
  assert.equal(targetA.ok, true, JSON.stringify(targetA.error))
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sema-losses-'))
  const file = await acquire(path.join(dir, 'held.lock'), { onLost: () => told.file++ })
  assert.equal(file.ok, true, JSON.stringify(file.error))
  try {
    const lostA = once(lockA.signal, 'abort')
    const lostTarget = once(targetA.value.signal, 'abort')
    await a.kill('SIGKILL')
    await lostA
    await lostTarget
    // One more turn of the loop for any stray report to arrive.
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(told.lockA, [tokenA], 'onLockLost once, with the lost token')
    assert.equal(lockA.signal.reason.code, 'LOCK_LOST')
    assert.equal(told.targetA, 1)
    assert.equal(targetA.value.signal.reason.code, 'LOCK_LOST')
    assert.deepEqual(told.lockB, [], 'the lock on the other server was not lost')
    assert.equal(lockB.signal.aborted, false)
    assert.notEqual(lockB.token, null)
    assert.equal(told.file, 0, 'the file lock was not lost')
    assert.equal(file.value.signal.aborted, false)
  } finally {
    await lockB.release()
    await file.value.release()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('a loss that reaches JavaScript before the grant is told once, after acquire() resolved', { skip }, async () => {
  const srv = await d.startServer()
  const events = []
  // The tokio driver: grant and loss are both read off this thread, and both wait for it while it is blocked.
  process.env.SEMA_NATIVE_DFLOCKD_DRIVER = 'tokio'
  let lock
  try {
    lock = new DistributedLock({ key: 'early-loss', host: srv.host, port: srv.port, onLockLost: () => events.push('onLockLost') })
  } finally {
    delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
  }
  const acquired = lock.acquire().then((v) => {
    events.push(`resolved ${v}`)
    return v
  })
  // Blocked here until the server has granted the key (asked from a child: this thread does no I/O meanwhile), then
  // the server is killed and the child waits until its port refuses connections: the native side reads the grant and
  // then the dropped connection while both results wait for this thread. The loss report is queued on the thread's
  // loss channel (made at load, so libuv runs it first) before the grant's own.
  childSync(`
    const { stats } = require('.')
    ;(async () => {
      for (let i = 0; i < 200; i++) {
        const st = await stats({ host: ${JSON.stringify(srv.host)}, port: ${srv.port} })
        if (st.locks.some((l) => l.key === 'early-loss' && l.owner_conn_id)) return
      }
      throw new Error('never granted')
    })()`)
  srv.proc.kill('SIGKILL')
  childSync(`
    const net = require('node:net')
    const tryOnce = () => new Promise((res) => { const s = net.connect(${srv.port}, ${JSON.stringify(srv.host)}); s.on('connect', () => { s.destroy(); res(true) }); s.on('error', () => res(false)) })
    ;(async () => { for (let i = 0; i < 500; i++) if (!(await tryOnce())) return; throw new Error('still accepting') })()`)
  assert.equal(await acquired, true, 'the grant came before the loss: acquire() resolves true')
  if (!lock.signal.aborted) await once(lock.signal, 'abort')
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(events, ['resolved true', 'onLockLost'], 'told once, after the resolution')
  assert.equal(lock.signal.reason.code, 'LOCK_LOST')
  assert.equal(lock.token, null)
  lock.close()
})
