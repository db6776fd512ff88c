'use strict'
// Shared (reader/writer) locks on lock files (`mode: 'shared' | 'exclusive'`), with real child processes and the
// real `sema`: 4 readers at once and an exclusive waiting for them; while readers hold, the path exists and names a
// live reader, so `sema try` is refused (also after the named reader released or was SIGKILLed); crashed readers
// are reclaimed at once; a waiting exclusive is not starved by readers arriving after it, nor readers by looping
// writers (FIFO between the kinds, in the core); a symlink planted by another user at the sibling files is never
// followed; issue 33's defects 1, 4, 5 and 6, each of which failed before the core owned the shared lock.

const { describe, test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const { readSema } = require('../scripts/sema-tool')
const sema = require('..')

const tmp = u.testDir('shared-', { own: true })
const REAL = readSema()

const pidIn = (file) => Number(/^pid=(\d+)$/m.exec(fs.readFileSync(file, 'utf8'))?.[1])

function semaTry(file) {
  return spawnSync(REAL.bin, ['try', file], { encoding: 'utf8' }).status
}

/** Settles as 'pending' if `p` has not settled by the next turn of the event loop. */
const pendingNow = (p) => Promise.race([p.then(() => 'settled', () => 'settled'), new Promise((r) => setImmediate(() => r('pending')))])

/** Resolves once a live exclusive request has announced itself next to `file` (its `.writer-` file). */
function writerAnnounced(file) {
  return u.whenFile(file, () => fs.readdirSync(path.dirname(file)).some((n) => n.startsWith(`${path.basename(file)}.writer-`)), 10000, 'writer announced')
}

describe("mode: 'shared' on a lock file", () => {
  test('4 readers hold at once; an exclusive waits for all of them; sema try is refused meanwhile', { skip: REAL.reason }, async () => {
    const file = tmp.fresh('four')
    const readers = await Promise.all([1, 2, 3, 4].map(() => u.holder(file, { mode: 'shared' })))
    const s = await sema.status(file)
    assert.equal(s.mode, 'shared')
    assert.equal(s.holders, 4)
    assert.ok(readers.some((r) => r.held.pid === s.info.pid), 'the path names one of the readers')
    const before = fs.readFileSync(file, 'utf8')
    assert.notEqual(semaTry(file), 0, 'sema try is refused while readers hold')
    assert.match(fs.readFileSync(file, 'utf8'), /mode=shared/, 'and it changed nothing')
    assert.equal(before.split('\n')[0], fs.readFileSync(file, 'utf8').split('\n')[0])
    const plain = await sema.tryAcquire(file)
    assert.equal(plain.error.type, 'ALREADY_LOCKED', 'the plain mutex sees it held')
    const exclusive = sema.acquire(file, { mode: 'exclusive', timeout: 30000 })
    for (const r of readers.slice(0, 3)) {
      assert.equal(await r.release(), true)
      assert.equal(await pendingNow(exclusive), 'pending', 'the exclusive waits while any reader holds')
      assert.notEqual(semaTry(file), 0)
    }
    assert.equal(await readers[3].release(), true)
    const x = await exclusive
    assert.equal(x.ok, true, JSON.stringify(x.error))
    assert.doesNotMatch(fs.readFileSync(file, 'utf8'), /mode=shared/)
    await x.value.release()
    assert.deepEqual(tmp.left(file), [], 'no file left')
  })

  test('the first reader (named in the path) releases, then the next named one is SIGKILLed: sema try stays refused', { skip: REAL.reason }, async () => {
    const file = tmp.fresh('named')
    const a = await u.holder(file, { mode: 'shared' })
    assert.equal(pidIn(file), a.held.pid)
    const b = await u.holder(file, { mode: 'shared' })
    const c = await u.holder(file, { mode: 'shared' })
    assert.equal(await a.release(), true)
    const named = pidIn(file)
    assert.ok([b.held.pid, c.held.pid].includes(named), `the path names a live reader (${named})`)
    assert.notEqual(semaTry(file), 0)
    const [dead, alive] = named === b.held.pid ? [b, c] : [c, b]
    dead.kill()
    await u.waitExit(dead.child, 10000)
    assert.notEqual(semaTry(file), 0, 'refused while a reader still reads')
    // The survivor's heartbeat names itself (the path names a live holder again).
    await u.whenFile(file, (t) => t !== null && Number(/^pid=(\d+)$/m.exec(t)?.[1]) === alive.held.pid, 10000, 'named the live reader')
    assert.notEqual(semaTry(file), 0)
    assert.equal(await alive.release(), true)
    assert.equal(fs.existsSync(file), false, 'the last reader removed the path')
    assert.equal(semaTry(file), 0, 'sema takes it once no reader holds')
  })

  test('crashed readers are reclaimed at once: an exclusive gets the lock without waiting for staleness', async () => {
    const file = tmp.fresh('crash')
    const readers = await Promise.all([1, 2].map(() => u.holder(file, { mode: 'shared' })))
    const x = sema.acquire(file, { mode: 'exclusive', timeout: 20000 }) // default staleTimeout: 1 h
    assert.equal(await pendingNow(x), 'pending')
    for (const r of readers) r.kill()
    const got = await x
    assert.equal(got.ok, true, JSON.stringify(got.error))
    assert.equal(pidIn(file), process.pid)
    await got.value.release()
    // A reader left by a crash is no member either: a new reader adopts a base whose readers all died.
    const r = await u.holder(file, { mode: 'shared' })
    r.kill()
    await u.waitExit(r.child, 10000)
    const again = await sema.tryAcquire(file, { mode: 'shared' })
    assert.equal(again.ok, true, JSON.stringify(again.error))
    assert.equal(pidIn(file), process.pid, 'the path names the live reader')
    await again.value.release()
    assert.deepEqual(tmp.left(file), [])
  })

  test('writer preference: readers arriving after a waiting exclusive wait behind it', async () => {
    const file = tmp.fresh('starve')
    const first = await u.holder(file, { mode: 'shared' })
    const w = u.spawnHolder(file, { mode: 'exclusive' }, { timeoutMs: 30000 })
    await writerAnnounced(file)
    // Without the policy these would join the readers' group at once and the stream could go on forever.
    const refused = await sema.tryAcquire(file, { mode: 'shared' })
    assert.equal(refused.error.type, 'ALREADY_LOCKED')
    const late = u.spawnHolder(file, { mode: 'shared' }, { timeoutMs: 30000 })
    assert.equal(await pendingNow(late.held), 'pending')
    assert.equal(await first.release(), true)
    await w.held
    assert.equal(await pendingNow(late.held), 'pending', 'the late reader still waits while the exclusive holds')
    assert.doesNotMatch(fs.readFileSync(file, 'utf8'), /mode=shared/)
    assert.equal(await w.release(), true)
    await late.held
    assert.match(fs.readFileSync(file, 'utf8'), /mode=shared/)
    assert.equal(await late.release(), true)
  })

  test('a reader waits while an exclusive holds; timeout and abort end the wait with nothing left behind', async () => {
    const file = tmp.fresh('wait')
    const x = await u.holder(file, { mode: 'exclusive' })
    const t = await sema.acquire(file, { mode: 'shared', timeout: 200 })
    assert.equal(t.error.type, 'TIMEOUT')
    const ac = new AbortController()
    const aborted = sema.acquire(file, { mode: 'shared', signal: ac.signal })
    ac.abort()
    assert.equal((await aborted).error.type, 'ABORTED')
    const r = sema.acquire(file, { mode: 'shared', timeout: 20000 })
    assert.equal(await x.release(), true)
    const got = await r
    assert.equal(got.ok, true, JSON.stringify(got.error))
    await got.value.release()
    assert.deepEqual(tmp.left(file), [])
  })

  test('release(path) releases this process’s shared hold only: the path stays for the other reader', async () => {
    const file = tmp.fresh('bypath')
    const other = await u.holder(file, { mode: 'shared' })
    const mine = await sema.acquire(file, { mode: 'shared' })
    assert.equal(mine.ok, true)
    const r = await sema.release(file)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(mine.value.released, true)
    assert.equal(pidIn(file), other.held.pid, 'the path names the remaining reader')
    assert.equal((await sema.status(file)).holders, 1)
    assert.equal(await other.release(), true)
    assert.deepEqual(tmp.left(file), [])
  })

  test('a reader ended by SIGTERM, or exiting without release, leaves its group (no path left naming it)', { skip: REAL.reason }, async () => {
    const file = tmp.fresh('exit')
    const alone = await u.holder(file, { mode: 'shared' })
    alone.kill('SIGTERM')
    assert.equal((await u.waitExit(alone.child, 10000)).signal, 'SIGTERM', 'it still dies of the signal')
    assert.equal(fs.existsSync(file), false, 'the last reader removed the path on its way out')
    assert.deepEqual(tmp.left(file), [])
    const b = await u.holder(file, { mode: 'shared' })
    const c = await u.holder(file, { mode: 'shared' })
    assert.equal(pidIn(file), b.held.pid)
    b.child.stdin.write('exit\n')
    await u.waitExit(b.child, 10000)
    assert.equal(pidIn(file), c.held.pid, 'the path names the reader still reading')
    assert.notEqual(semaTry(file), 0)
    assert.equal(await c.release(), true)
    assert.equal(semaTry(file), 0)
  })

  test('4 processes, 30 mixed shared/exclusive rounds each: an exclusive holder is always alone, no reader beside a writer', async () => {
    const file = tmp.fresh('mixed')
    const marks = path.join(path.dirname(file), 'inside')
    fs.mkdirSync(marks)
    // Marks are made after the grant and removed before the release: what a holder sees is a subset of the holders.
    const script = `
      const fs = require('node:fs'), path = require('node:path')
      const sema = require(${JSON.stringify(path.resolve(__dirname, '..'))})
      const [marks, seed] = [${JSON.stringify(marks)}, Number(process.argv[1])]
      let x = seed
      const rnd = () => (x = (x * 1103515245 + 12345) % 2147483648) / 2147483648
      ;(async () => {
        const out = { alone: 0, notAlone: 0, readerWithWriter: 0, readersTogether: 0 }
        for (let i = 0; i < 30; i++) {
          const mode = rnd() < 0.7 ? 'shared' : 'exclusive'
          const r = await sema.acquire(${JSON.stringify(file)}, { mode, timeout: 60000 })
          if (!r.ok) { console.log('failed ' + JSON.stringify(r.error)); process.exit(1) }
          const me = path.join(marks, mode[0] + '-' + process.pid)
          fs.writeFileSync(me, '')
          const others = fs.readdirSync(marks).filter((n) => n !== path.basename(me))
          if (mode === 'exclusive') others.length ? out.notAlone++ : out.alone++
          else if (others.some((n) => n.startsWith('e-'))) out.readerWithWriter++
          else if (others.length) out.readersTogether++
          await new Promise((res) => setTimeout(res, rnd() * 5)) // work while held, not synchronisation
          fs.unlinkSync(me)
          await r.value.release()
        }
        console.log('done ' + JSON.stringify(out))
      })()`
    const kids = [1, 2, 3, 4].map((seed) => u.spawnTracked(process.execPath, ['-e', script, String(seed)]))
    const results = await Promise.all(kids.map((k) => u.waitExit(k, 120000, 'mixed child')))
    const sum = { alone: 0, notAlone: 0, readerWithWriter: 0, readersTogether: 0 }
    for (const r of results) {
      assert.equal(r.code, 0, r.stdout + r.stderr)
      const o = JSON.parse(/^done (.*)$/m.exec(r.stdout)[1])
      for (const k of Object.keys(sum)) sum[k] += o[k]
    }
    assert.equal(sum.notAlone, 0, `an exclusive holder saw others: ${JSON.stringify(sum)}`)
    assert.equal(sum.readerWithWriter, 0, `a reader saw an exclusive holder: ${JSON.stringify(sum)}`)
    assert.ok(sum.alone > 0, 'exclusive rounds ran')
    assert.deepEqual(tmp.left(file).filter((n) => n !== 'inside'), [], 'no lock, reader, writer or guard file left')
  })

  test('query() lists a shared hold and a slot by their lock path and mode, and no internal file', async () => {
    const file = tmp.fresh('query')
    const slots = tmp.fresh('query-slots')
    const r = await sema.acquire(file, { mode: 'shared', tag: 'reads' })
    const s1 = await sema.acquire(slots, { limit: 2 })
    const s2 = await sema.acquire(slots, { limit: 2 })
    const { held } = await sema.query()
    const mine = held.filter((h) => h.name.startsWith(path.dirname(file)) || h.name.startsWith(path.dirname(slots)))
    assert.deepEqual(
      mine.map((h) => [h.name, h.mode]).sort(),
      [[file, 'shared'], [slots, 'exclusive'], [slots, 'exclusive']].sort(),
    )
    for (const l of [r, s1, s2]) await l.value.release()
  })

  test('a sema or semats-format holder of the path keeps readers and writers out until it is gone', { skip: REAL.reason }, async () => {
    const file = tmp.fresh('foreign')
    assert.equal(semaTry(file), 0)
    for (const mode of ['shared', 'exclusive']) assert.equal((await sema.tryAcquire(file, { mode })).error.type, 'ALREADY_LOCKED', mode)
    const waiting = sema.acquire(file, { mode: 'shared', timeout: 20000 })
    assert.equal(await pendingNow(waiting), 'pending')
    assert.equal(spawnSync(REAL.bin, ['release', file]).status, 0)
    const r = await waiting
    assert.equal(r.ok, true, JSON.stringify(r.error))
    await r.value.release()
    const { child } = await u.shellWriteLock(file, { keep: true })
    assert.equal((await sema.tryAcquire(file, { mode: 'shared' })).error.type, 'ALREADY_LOCKED')
    child.kill('SIGKILL')
    await u.waitExit(child, 10000)
    fs.unlinkSync(file)
    assert.deepEqual(tmp.left(file), [])
  })

  test('the shared path removed under its readers (a forced release): each hold hears LOCK_LOST', async () => {
    const file = tmp.fresh('forced')
    const a = await sema.acquire(file, { mode: 'shared' })
    const b = await sema.acquire(file, { mode: 'shared' })
    const heard = new Promise((resolve) => b.value.signal.addEventListener('abort', () => resolve(b.value.signal.reason), { once: true }))
    assert.equal((await sema.release(file, { force: true })).ok, true)
    const reason = await u.within(heard, 10000, 'loss of the shared hold')
    assert.equal(reason.code, 'LOCK_LOST')
    assert.equal(a.value.signal.aborted, true)
    assert.equal(await a.value.release(), false)
    await u.whenFile(file, () => tmp.left(file).length === 0, 10000, 'reader files released')
  })

  test('bad combinations are INVALID_ARGUMENT', async () => {
    const file = tmp.fresh('bad')
    for (const o of [{ mode: 'read' }, { mode: 'shared', pid: process.pid }]) {
      assert.equal((await sema.tryAcquire(file, o)).error.type, 'INVALID_ARGUMENT', JSON.stringify(o))
    }
    assert.equal((await sema.tryAcquire(file, { mode: 'shared', limit: 2 })).error.type, 'INVALID_ARGUMENT')
    assert.deepEqual(tmp.left(file), [])
  })
})

const linux = process.platform === 'linux'
const root = typeof process.getuid === 'function' && process.getuid() === 0
describe('symlinks planted next to a shared lock by another user', { skip: !linux ? 'Linux only' : !root ? 'needs root' : false }, () => {
  test('at the guard and at the path: refused (INVALID_PATH), never followed', async () => {
    const { shared, mine } = u.attackDirs('shared-')
    try {
      const victim = path.join(mine, 'secret.txt')
      fs.writeFileSync(victim, 'secret\n', { mode: 0o600 })
      const mtime = fs.statSync(victim).mtimeMs
      const a = path.join(shared, 'a.lock')
      u.asNobody('ln', '-s', victim, `${a}.rw-guard`)
      for (const mode of ['shared', 'exclusive']) {
        const r = await sema.tryAcquire(a, { mode })
        assert.equal(r.error.type, 'INVALID_PATH', JSON.stringify(r.error))
        assert.match(r.error.message, /symbolic link/)
      }
      const b = path.join(shared, 'b.lock')
      u.asNobody('ln', '-s', victim, b)
      // Refused as the mutex refuses a link at its path (the core's one rule for both).
      const r = await sema.tryAcquire(b, { mode: 'shared' })
      assert.equal(r.error.type, 'INVALID_PATH', JSON.stringify(r.error))
      assert.equal(fs.readFileSync(victim, 'utf8'), 'secret\n')
      assert.equal(fs.statSync(victim).mtimeMs, mtime)
      assert.ok(fs.lstatSync(b).isSymbolicLink())
    } finally {
      u.rmTmp(shared)
      u.rmTmp(mine)
    }
  })
})

// Issue 33's defects of the JavaScript implementation, each with real processes (each of these failed before the
// shared lock moved into the core: see the commit that added them).
describe('issue 33: shared locks owned by the core', () => {
  test('defect 1: a SIGKILLed exclusive or mutex holder is reclaimed at once by a shared acquire; wait and status agree', async () => {
    for (const holderMode of ['exclusive', undefined]) {
      const file = tmp.fresh(`dead-${holderMode ?? 'mutex'}`)
      const h = await u.holder(file, holderMode ? { mode: holderMode } : {})
      h.kill()
      await u.waitExit(h.child, 10000)
      const s = await sema.status(file)
      assert.equal(s.isStale, true, JSON.stringify(s))
      assert.equal((await sema.wait(file, { mode: 'shared', timeout: 5000 })).ok, true)
      // Before: waited forever (here: TIMEOUT after 5 s) while wait() said free.
      const r = await sema.acquire(file, { mode: 'shared', timeout: 5000 })
      assert.equal(r.ok, true, JSON.stringify(r.error))
      await r.value.release()
      assert.deepEqual(tmp.left(file), [])
    }
  })

  test('defect 4: after every reader was SIGKILLed, the plain mutex takes the path at once and status says why', async () => {
    const file = tmp.fresh('dead-readers')
    const readers = await Promise.all([1, 2].map(() => u.holder(file, { mode: 'shared' })))
    for (const r of readers) r.kill()
    for (const r of readers) await u.waitExit(r.child, 10000)
    const s = await sema.status(file)
    // Before: locked, not stale, reclaimable by age after the stale timeout (1 h).
    assert.equal(s.locked, true)
    assert.equal(s.isStale, true, JSON.stringify(s))
    assert.equal(s.reclaimRule, 'holder-dead')
    assert.ok(s.reclaimableAt <= Math.floor(Date.now() / 1000) + 1, JSON.stringify(s))
    const r = await sema.acquire(file, { timeout: 5000 })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    await r.value.release()
  })

  test('defect 5: a shared or exclusive acquire without a timeout never ends in TIMEOUT while the guard holder is stopped', { skip: process.platform === 'win32' }, async () => {
    const file = tmp.fresh('stopped-guard')
    const guard = await u.holder(`${file}.rw-guard`, {})
    u.signalChild(guard.child, 'SIGSTOP')
    try {
      const shared = sema.acquire(file, { mode: 'shared' })
      const exclusive = sema.acquire(file, { mode: 'exclusive' })
      // Before: both resolved TIMEOUT "Timeout waiting for lock after undefinedms" after 30 s.
      const after = await Promise.race([
        Promise.all([shared, exclusive]).then((rs) => rs.map((r) => (r.ok ? 'held' : `${r.error.type}: ${r.error.message}`))),
        new Promise((resolve) => setTimeout(() => resolve('pending'), 32_000)),
      ])
      assert.equal(after, 'pending', JSON.stringify(after))
      guard.kill() // its guard is reclaimed at once
      const a = await u.within(shared, 10000, 'the shared acquire')
      assert.equal(a.ok, true, JSON.stringify(a.error))
      await a.value.release()
      const b = await u.within(exclusive, 10000, 'the exclusive acquire')
      assert.equal(b.ok, true, JSON.stringify(b.error))
      await b.value.release()
    } finally {
      guard.kill()
    }
    // A deadline does time out, naming it.
    const held = await sema.acquire(file, { mode: 'exclusive' })
    const t = await sema.acquire(file, { mode: 'shared', timeout: 50 })
    assert.equal(t.error.type, 'TIMEOUT')
    assert.equal(t.error.message, 'Timeout waiting for lock after 50ms')
    await held.value.release()
  })

  test('defect 6: 3 writers looping 40 ms holds do not starve 3 readers (each served while the writers loop)', async () => {
    const file = tmp.fresh('starve')
    const stop = path.join(path.dirname(file), 'stop')
    const writer = `
      const fs = require('node:fs')
      const sema = require(${JSON.stringify(path.resolve(__dirname, '..'))})
      ;(async () => {
        let n = 0
        while (!fs.existsSync(${JSON.stringify(stop)})) {
          const r = await sema.acquire(${JSON.stringify(file)}, { mode: 'exclusive', timeout: 60000 })
          if (!r.ok) { console.log('failed ' + JSON.stringify(r.error)); process.exit(1) }
          if (++n === 1) console.log('looping')
          await new Promise((res) => setTimeout(res, 40)) // the writer's work while it holds
          await r.value.release()
        }
        console.log('done ' + n)
      })()`
    const writers = [1, 2, 3].map(() => u.spawnTracked(process.execPath, ['-e', writer]))
    await Promise.all(writers.map((w) => u.lines(w).next(/^looping/, 30000)))
    // Before: 0 of 3 readers served in 15 s.
    const readers = await Promise.all([1, 2, 3].map(() => sema.acquire(file, { mode: 'shared', timeout: 15000 })))
    fs.writeFileSync(stop, '')
    for (const r of readers) assert.equal(r.ok, true, JSON.stringify(r.error))
    for (const r of readers) await r.value.release()
    const outs = await Promise.all(writers.map((w) => u.waitExit(w, 60000, 'writer')))
    for (const o of outs) assert.equal(o.code, 0, o.stdout + o.stderr)
    fs.unlinkSync(stop)
    assert.deepEqual(tmp.left(file), [])
  })
})
