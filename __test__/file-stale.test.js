'use strict'
// Crashes and stale locks, with real processes:
// - our own lock files whose holder was SIGKILLed are reclaimed at once (staleTimeout 1 h), also by a waiter;
// - a pid recorded in our format that now belongs to a younger process (pid reuse) counts as dead;
// - foreign-format files (the spec's shell writer, pid of a dead process) are reclaimed only once older than
//   staleTimeout (semats' rule), never with staleTimeout null;
// - a LIVE holder's old lock (timestamp 0; this process, a live `sleep`, or one of our own live children) is
//   never taken, whatever the staleTimeout;
// - unparseable / empty files expire by mtime age after staleTimeout, never within the 2 s grace.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const u = require('./helpers/file-util')
const sema = require('..')

const HOUR = 3_600_000

const tmp = u.testDir('stale-', { name: 'stale', own: true })
const { fresh } = tmp

/** Starts a holder child, waits until it holds, SIGKILLs it; returns its (now dead) pid and the file content. */
async function crashHolder(file, opts = {}) {
  const { child, held, kill } = await u.holder(file, opts)
  const { signal } = await kill('SIGKILL')
  assert.equal(signal, 'SIGKILL')
  assert.equal(u.pidAlive(child.pid), false)
  const content = fs.readFileSync(file, 'utf8')
  assert.match(content, new RegExp(`^pid=${child.pid}\\n`), 'the crashed holder left its lock file')
  return { pid: child.pid, content, held }
}

/** Nothing but (at most) the lock file itself next to it: no temp or tombstone files left behind. */
function noTemps(file) {
  const others = u.ls(path.dirname(file)).filter((f) => f !== path.basename(file))
  assert.deepEqual(others, [], 'no temp files left behind')
}

/** `tryAcquire(file, { staleTimeout })` takes the stale lock; its release leaves no temp file behind. */
async function takenWhenStale(file, staleTimeout) {
  const r = await sema.tryAcquire(file, { staleTimeout })
  assert.equal(r.ok, true, JSON.stringify(r.error))
  assert.equal(await r.value.release(), true)
  noTemps(file)
}

describe('crashed holder, our format: reclaimed at once', () => {
  test('async tryAcquire with staleTimeout 1 h takes a SIGKILLed holder’s lock at once', async () => {
    const file = fresh('crash-async')
    const { pid } = await crashHolder(file)
    const t0 = Date.now()
    const r = await sema.tryAcquire(file, { staleTimeout: HOUR })
    assert.equal(r.ok, true, `reclaimed: ${JSON.stringify(r.error)}`)
    assert.ok(Date.now() - t0 < u.scaled(1000), 'promptly')
    assert.equal(r.value.pid, process.pid)
    assert.notEqual(pid, process.pid)
    assert.equal(u.readLockKeys(file).pid, String(process.pid))
    assert.equal(await r.value.release(), true)
    assert.equal(fs.existsSync(file), false)
    noTemps(file)
  })

  test('Semaphore#tryAcquire (default staleTimeout 1 h) takes a SIGKILLed semats-API holder’s lock', async () => {
    const file = fresh('crash-semats')
    await crashHolder(file, { api: 'semats' })
    const s = new sema.Semaphore(file)
    const r = s.tryAcquire('after-crash')
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(s.getLockInfo().pid, process.pid)
    assert.equal(s.release().ok, true)
  })

  test('another process’s acquire (staleTimeout 1 h) succeeds promptly', async () => {
    const file = fresh('crash-child')
    const { pid } = await crashHolder(file)
    const t0 = Date.now()
    const second = u.spawnHolder(file, { staleTimeout: HOUR, timeout: 10000 }, { timeoutMs: 10000 })
    const held = await second.held
    assert.equal(held.pid, second.child.pid)
    assert.notEqual(held.pid, pid)
    assert.ok(Date.now() - t0 < u.scaled(5000), 'promptly (includes node start-up)')
    assert.equal(await second.release(), true)
    assert.equal((await u.waitExit(second.child, 5000)).code, 0)
  })

  test('a waiter blocked on a live holder gets the lock promptly once that holder is SIGKILLed', async (t) => {
    const file = fresh('crash-waiter')
    const { child: holder } = await u.holder(file)
    let settled = false
    const waiting = sema.acquire(file, { staleTimeout: HOUR, timeout: 15000 }).finally(() => (settled = true))
    // The live holder is never evicted: still waiting after several poll intervals (the pause is the case under test).
    await new Promise((r) => setTimeout(r, 400))
    assert.equal(settled, false, 'a live holder is not evicted')
    const t0 = Date.now()
    u.signalChild(holder) // by pid: it ends when its stdin ends, which Deno's ChildProcess.kill() closes first
    const r = await waiting
    const ms = Date.now() - t0
    t.diagnostic(`reclaimed ${ms} ms after SIGKILL`)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.ok(ms < u.scaled(3000), `reclaimed ${ms} ms after the holder died`)
    assert.equal(await r.value.release(), true)
  })

  test('pid reuse: our-format file whose pid now belongs to a younger live process counts as dead', async () => {
    const file = fresh('pid-reuse')
    const { pid, content } = await crashHolder(file, { heartbeat: false })
    const imposter = await u.liveSleeper() // started after the lock was written
    fs.writeFileSync(file, content.replace(`pid=${pid}\n`, `pid=${imposter.pid}\n`))
    assert.equal(new sema.Semaphore(file).getLockInfo().pid, imposter.pid)
    const r = await sema.tryAcquire(file, { staleTimeout: HOUR })
    assert.equal(r.ok, true, `pid ${imposter.pid} is alive but younger than the lock: ${JSON.stringify(r.error)}`)
    assert.equal(await r.value.release(), true)
    assert.ok(u.pidAlive(imposter.pid), 'the imposter itself is of course not touched')
    imposter.kill('SIGKILL')
  })

  test('cleanStale() removes a SIGKILLed holder’s lock and reports true', async () => {
    const file = fresh('crash-clean')
    await crashHolder(file)
    const s = new sema.Semaphore(file)
    assert.equal(s.cleanStale(), true)
    assert.equal(fs.existsSync(file), false)
    assert.equal(s.cleanStale(), false)
  })
})

describe('foreign-format file (shell-written), pid of a dead process: semats’ rule', () => {
  test('refused while younger than staleTimeout, granted once older (backdated timestamp)', async () => {
    const file = fresh('foreign')
    const { pid } = await u.shellWriteLock(file, { tag: 'dead-shell' })
    assert.equal(u.pidAlive(pid), false, 'the shell has exited')
    // Fresh (age 0–1 s < 1.5 s): refused by both APIs, file untouched.
    const before = fs.readFileSync(file)
    const r1 = await sema.tryAcquire(file, { staleTimeout: 1500 })
    assert.equal(r1.ok, false)
    assert.equal(r1.error.type, 'ALREADY_LOCKED')
    assert.equal(r1.error.holderPid, pid)
    const s = new sema.Semaphore(file, { staleTimeout: 1500 })
    assert.equal(s.tryAcquire().ok, false)
    assert.equal(s.cleanStale(), false)
    assert.deepEqual(fs.readFileSync(file), before)
    // Backdated 5 s (> 1.5 s) by the spec's own shell writer: granted.
    await u.shellWriteLock(file, { tag: 'dead-shell', timestamp: u.nowS() - 5 })
    await takenWhenStale(file, 1500)
  })

  test('semats class: backdated dead-pid file granted; cleanStale removes it', async () => {
    const file = fresh('foreign-semats')
    await u.shellWriteLock(file, { timestamp: u.nowS() - 10 })
    const s = new sema.Semaphore(file, { staleTimeout: 1500 })
    assert.equal(s.status().isStale, true)
    assert.equal(s.cleanStale(), true)
    assert.equal(fs.existsSync(file), false)
    await u.shellWriteLock(file, { timestamp: u.nowS() - 10 })
    const r = s.tryAcquire('x')
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(s.release().ok, true)
  })

  test('a waiter is refused at first and granted once the file really ages past staleTimeout', async (t) => {
    const file = fresh('foreign-wait')
    await u.shellWriteLock(file)
    const written = Number(u.readLockKeys(file).timestamp)
    const t0 = Date.now()
    const r = await sema.acquire(file, { staleTimeout: 1500, retryInterval: 100, timeout: 8000 })
    const ms = Date.now() - t0
    t.diagnostic(`granted after ${ms} ms`)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    // Stale means age > 1.5 s in whole seconds, i.e. ≥ 2: our lock's own timestamp (the time it was written)
    // must be at least 2 s after the foreign one.
    assert.ok(r.value.timestamp - written >= 2, `not taken early: foreign ${written}, ours ${r.value.timestamp}`)
    assert.ok(ms < u.scaled(6000, 8000), `taken once stale (${ms} ms)`)
    assert.equal(await r.value.release(), true)
  })

  test('staleTimeout null never breaks it, even with timestamp 0 and a dead pid', async () => {
    const file = fresh('foreign-null')
    await u.shellWriteLock(file, { timestamp: 0 })
    const r = await sema.tryAcquire(file, { staleTimeout: null })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ALREADY_LOCKED')
    const s = new sema.Semaphore(file, { staleTimeout: null })
    assert.equal(s.tryAcquire().ok, false)
    assert.equal(s.cleanStale(), false)
    assert.ok(fs.existsSync(file))
    fs.unlinkSync(file)
  })
})

describe('a lock file naming pid 0 or a negative pid: no process holds it, the age decides', () => {
  for (const pid of [0, -1]) {
    test(`pid=${pid}: taken once older than staleTimeout (1970), kept while fresh, nobody's`, async () => {
      const file = fresh(`pid${pid}`)
      // kill(0, 0) and kill(-1, 0) answer for a process group: semats would keep such a file forever.
      fs.writeFileSync(file, `pid=${pid}\ntimestamp=1\n`)
      const s = await sema.status(file)
      assert.equal(s.isStale, true)
      assert.equal(s.isOwnedByCurrentProcess, false)
      const sem = new sema.Semaphore(file)
      assert.equal(sem.status().isOwnedByCurrentProcess, false)
      assert.equal(sem.release().error?.type, 'PERMISSION_DENIED', 'not ours by pid')
      const r = await sema.tryAcquire(file, { staleTimeout: HOUR })
      assert.equal(r.ok, true, JSON.stringify(r.error))
      assert.equal(r.value.pid, process.pid)
      assert.equal(await r.value.release(), true)

      fs.writeFileSync(file, `pid=${pid}\ntimestamp=${u.nowS()}\n`)
      const young = await sema.tryAcquire(file, { staleTimeout: HOUR })
      assert.equal(young.ok, false)
      assert.equal(young.error.type, 'ALREADY_LOCKED')
      fs.writeFileSync(file, `pid=${pid}\ntimestamp=1\n`)
      assert.equal(sem.cleanStale(), true, 'cleanStale() removes the old one')
      assert.equal(fs.existsSync(file), false)
    })
  }
})

describe('a live holder’s old lock is never taken', () => {
  const holders = {
    'this process': () => ({ pid: process.pid, stop() {} }),
    'a live sleep child': async () => {
      const c = await u.liveSleeper()
      return { pid: c.pid, stop: () => c.kill('SIGKILL') }
    },
  }
  for (const [who, make] of Object.entries(holders)) {
    test(`foreign format, timestamp 0, pid of ${who}`, async () => {
      const h = await make()
      const file = fresh('live-old')
      const content = `pid=${h.pid}\ntimestamp=0\ntag=old-but-alive\n`
      fs.writeFileSync(file, content)
      for (const staleTimeout of [1000, HOUR]) {
        const r = await sema.tryAcquire(file, { staleTimeout })
        assert.equal(r.ok, false, `staleTimeout ${staleTimeout}: must be refused`)
        assert.equal(r.error.type, 'ALREADY_LOCKED')
        assert.equal(r.error.holderPid, h.pid)
      }
      const s = new sema.Semaphore(file, { staleTimeout: 1000 })
      const r2 = s.tryAcquire()
      assert.equal(r2.ok, false)
      assert.equal(r2.error.holderPid, h.pid)
      assert.equal(s.cleanStale(), false)
      const r3 = await sema.acquire(file, { staleTimeout: 1000, timeout: 300 })
      assert.equal(r3.ok, false)
      assert.equal(r3.error.type, 'TIMEOUT')
      assert.equal(fs.readFileSync(file, 'utf8'), content, 'untouched')
      fs.unlinkSync(file)
      h.stop()
    })
  }

  test('the spec shell writer’s genuine lock (shell still running) is kept after it ages past staleTimeout', { timeout: u.scaled(15000) }, async () => {
    const file = fresh('live-shell-aged')
    const { pid, child } = await u.shellWriteLock(file, { tag: 'long job', keep: true })
    const content = fs.readFileSync(file, 'utf8')
    // Wait (as a contender would) well past staleTimeout: the holder lives, so the lock is never broken.
    const t0 = Date.now()
    const r = await sema.acquire(file, { staleTimeout: 1000, retryInterval: 100, timeout: 3000 })
    assert.ok(Date.now() - t0 >= 2500, 'waited for its timeout')
    assert.equal(r.ok, false, 'a live holder is never evicted')
    assert.equal(r.error.type, 'TIMEOUT')
    const r2 = await sema.tryAcquire(file, { staleTimeout: 1000 })
    assert.equal(r2.error.type, 'ALREADY_LOCKED')
    assert.equal(r2.error.holderPid, pid)
    assert.ok(u.nowS() - Number(u.readLockKeys(file).timestamp) >= 2, 'really older than staleTimeout')
    const s = new sema.Semaphore(file, { staleTimeout: 1000 })
    assert.equal(s.tryAcquire().ok, false)
    assert.equal(s.cleanStale(), false)
    assert.equal(fs.readFileSync(file, 'utf8'), content, 'untouched')
    child.kill('SIGKILL')
    await child.exited
    // Now the shell is gone and the file is older than staleTimeout: semats' rule lets it go.
    await takenWhenStale(file, 1000)
  })

  test('our format, held by a live child without heartbeat, timestamp rewritten to 0: not taken; the child still releases it', async () => {
    const file = fresh('live-ours')
    const { child: holder, out } = await u.holder(file, { heartbeat: false })
    const aged = fs.readFileSync(file, 'utf8').replace(/^timestamp=\d+$/m, 'timestamp=0')
    assert.match(aged, /\ntimestamp=0\n/)
    fs.writeFileSync(file, aged)
    const r = await sema.tryAcquire(file, { staleTimeout: 1000 })
    assert.equal(r.ok, false, 'a live holder on this host is never evicted')
    assert.equal(r.error.type, 'ALREADY_LOCKED')
    assert.equal(r.error.holderPid, holder.pid)
    assert.equal(new sema.Semaphore(file, { staleTimeout: 1000 }).cleanStale(), false)
    assert.equal(fs.readFileSync(file, 'utf8'), aged)
    holder.stdin.write('release\n')
    assert.equal(await out.next(/^released /), 'released true')
    assert.equal(fs.existsSync(file), false)
    holder.stdin.end()
    await u.waitExit(holder, 5000)
  })
})

describe('unparseable or empty files expire by mtime age, never within a 2 s grace', () => {
  const bodies = {
    empty: '',
    garbage: Buffer.from([0x00, 0xff, 0xfe, 0x13, 0x37, 0x0a, 0x80]),
    'pid only': 'pid=123\n',
  }
  for (const [name, body] of Object.entries(bodies)) {
    test(`${name}: fresh refused (ALREADY_LOCKED, owner unknown); backdated 1 s still refused; 10 s granted`, async () => {
      const file = fresh(`unparseable-${name.replace(/ /g, '')}`)
      fs.writeFileSync(file, body)
      const r1 = await sema.tryAcquire(file, { staleTimeout: 100 })
      assert.equal(r1.ok, false, 'fresh: within the grace')
      assert.equal(r1.error.type, 'ALREADY_LOCKED')
      assert.equal(r1.error.holderPid, undefined)
      u.backdate(file, 1)
      const r2 = await sema.tryAcquire(file, { staleTimeout: 100 })
      assert.equal(r2.ok, false, '1 s old: still within the 2 s grace')
      u.backdate(file, 10)
      const r3 = await sema.tryAcquire(file, { staleTimeout: 5000 })
      assert.equal(r3.ok, true, `10 s old, staleTimeout 5 s: expired (${JSON.stringify(r3.error)})`)
      assert.equal(u.readLockKeys(file).pid, String(process.pid))
      assert.equal(await r3.value.release(), true)
      noTemps(file)
    })
  }

  test('an old unparseable file is kept while younger than staleTimeout (mtime 10 s, staleTimeout 1 h)', async () => {
    const file = fresh('unparseable-young')
    fs.writeFileSync(file, 'not a lock file at all\n')
    u.backdate(file, 10)
    const r = await sema.tryAcquire(file, { staleTimeout: HOUR })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'ALREADY_LOCKED')
    assert.equal(fs.readFileSync(file, 'utf8'), 'not a lock file at all\n')
    fs.unlinkSync(file)
  })
})
