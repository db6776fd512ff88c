'use strict'
// Counting semaphores on lock files (`limit: N`), with real child processes and the real `sema`: at most and at
// least N holders at once, a `sema` holder of the base path counts as a slot, another limit is LIMIT_MISMATCH, a
// SIGKILLed slot holder is reclaimed at once, a symlink planted by another user at a slot file is never followed.

const { describe, test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const { readSema } = require('../scripts/sema-tool')
const sema = require('..')
const native = require('../lib/native')
const { engineOptions, DEFAULT_CONFIG } = require('../lib/file/engine')

const tmp = u.testDir('semaphore-', { own: true })
const REAL = readSema()

/** The engine's semaphore of `file` with limit 2 (default options), to read how many processes stand in its line. */
function lineOf(file, limit = 2) {
  return new native.NativeSemaphore(file, engineOptions(DEFAULT_CONFIG), limit)
}

/** Resolves true when `p` settles within `ms`, false otherwise (a window in which something must NOT happen). */
function settlesWithin(p, ms) {
  let timer
  return Promise.race([p.then(() => true), new Promise((r) => (timer = setTimeout(() => r(false), ms)))]).finally(() => clearTimeout(timer))
}

describe('limit: N on a lock file', () => {
  test('2 slots, 6 processes: at most 2 and at least 2 hold at once; each release lets exactly one more in', async () => {
    const file = tmp.fresh('six')
    const marks = path.join(path.dirname(file), 'inside')
    fs.mkdirSync(marks)
    // Each child, once it holds, marks itself inside and prints how many marks it sees (marks ⊆ holders at all
    // times: made after the acquire, removed before the release).
    const script = `
      const fs = require('node:fs'), path = require('node:path'), rl = require('node:readline')
      const sema = require(${JSON.stringify(path.resolve(__dirname, '..'))})
      ;(async () => {
        const r = await sema.acquire(${JSON.stringify(file)}, { limit: 2, timeout: 30000 })
        if (!r.ok) { console.log('failed ' + JSON.stringify(r.error)); process.exit(1) }
        const mark = path.join(${JSON.stringify(marks)}, String(process.pid))
        fs.writeFileSync(mark, '')
        console.log('held ' + fs.readdirSync(${JSON.stringify(marks)}).length)
        for await (const line of rl.createInterface({ input: process.stdin })) {
          if (line === 'release') { fs.unlinkSync(mark); await r.value.release(); process.exit(0) }
        }
      })()`
    const children = Array.from({ length: 6 }, () => u.spawnTracked(process.execPath, ['-e', script]))
    // One wait per child for its one `held` line (made once, so that no stale wait consumes a later line).
    const heldLine = children.map((c, i) => u.lines(c).next(/^held /, 60000).then((l) => ({ i, l })))
    for (const p of heldLine) p.catch(() => {})
    const holding = new Set()
    const seen = []
    const nextHolder = () => Promise.any(heldLine.filter((_, i) => !holding.has(i) && !children[i].done && !children[i].counted))
    const count = (r) => {
      children[r.i].counted = true
      return r
    }
    // The first two get in with nobody releasing: at least 2 at once.
    for (let k = 0; k < 2; k++) {
      const { i, l } = count(await nextHolder())
      holding.add(i)
      seen.push(Number(l.slice(5)))
    }
    assert.equal((await sema.status(file, { limit: 2 })).holders, 2)
    assert.equal((await sema.tryAcquire(file, { limit: 2 })).error.type, 'ALREADY_LOCKED', 'a third is refused')
    // Each release lets exactly one more in.
    while (holding.size > 0) {
      const [first] = holding
      children[first].stdin.write('release\n')
      await u.waitExit(children[first], 15000, 'holder')
      children[first].done = true
      holding.delete(first)
      if (children.some((c) => !c.counted)) {
        const { i, l } = count(await nextHolder())
        holding.add(i)
        seen.push(Number(l.slice(5)))
        assert.ok(holding.size <= 2, `${holding.size} holders at once`)
      }
    }
    assert.equal(seen.length, 6, 'every child held once')
    assert.ok(Math.max(...seen) <= 2, `at most 2 inside at once, saw ${seen}`)
    assert.ok(seen.includes(2), `2 inside at once at least once, saw ${seen}`)
    assert.deepEqual(tmp.left(file).filter((n) => n !== 'inside'), [], 'no lock or slot file left')
  })

  test('a sema holder of the base path takes one slot: one more holder fits, not two', { skip: REAL.reason }, async () => {
    const file = tmp.fresh('sema')
    const r = spawnSync(REAL.bin, ['try', file, '--tag', 'from sema'], { encoding: 'utf8' })
    assert.equal(r.status, 0, r.stderr)
    const ours = await sema.tryAcquire(file, { limit: 2 })
    assert.equal(ours.ok, true, JSON.stringify(ours.error))
    const other = await u.holder(file, { limit: 2, timeout: 0 }).catch((e) => e)
    assert.ok(other instanceof Error, 'a second holder of ours does not fit')
    assert.match(other.message, /failed .*TIMEOUT/)
    const s = await sema.status(file, { limit: 2 })
    assert.equal(s.holders, 2)
    assert.equal(s.info.tag, 'from sema', 'the base file is still sema’s')
    await ours.value.release()
    assert.match(fs.readFileSync(file, 'utf8'), /tag=from sema/)
  })

  test('a semats-format holder (a shell script) of the base path takes one slot too; its death frees it by semats’ rule', async () => {
    const file = tmp.fresh('shell')
    // Written 10 s ago: old enough for the stale timeout below, so that only its pid's liveness decides.
    const { child } = await u.shellWriteLock(file, { tag: 'shell', keep: true, timestamp: u.nowS() - 10 })
    const ours = await sema.tryAcquire(file, { limit: 2, staleTimeout: 1000 })
    assert.equal(ours.ok, true)
    assert.equal((await sema.tryAcquire(file, { limit: 2, staleTimeout: 1000 })).error.type, 'ALREADY_LOCKED', 'its live pid holds')
    assert.equal((await sema.status(file, { limit: 2 })).holders, 2)
    child.kill('SIGKILL')
    await u.waitExit(child, 10000)
    // semats' rule for a file without our identity: stale only when old AND its pid is gone.
    const after = await sema.tryAcquire(file, { limit: 2, staleTimeout: 1000 })
    assert.equal(after.ok, true, JSON.stringify(after.error))
    for (const l of [ours, after]) await l.value.release()
    assert.deepEqual(tmp.left(file), [])
  })

  test('another limit while slots are held is LIMIT_MISMATCH (acquire, tryAcquire, withLock); a dead slot is not', async () => {
    const file = tmp.fresh('mismatch')
    const a = await u.holder(file, { limit: 2 })
    const b = await u.holder(file, { limit: 2 })
    assert.ok(fs.existsSync(`${file}.slot-1-of-2`), 'the second slot is the sibling file')
    for (const r of [await sema.tryAcquire(file, { limit: 3 }), await sema.acquire(file, { limit: 3, timeout: 5000 })]) {
      assert.equal(r.ok, false)
      assert.equal(r.error.type, 'LIMIT_MISMATCH')
      assert.match(r.error.message, /held with limit 2, not 3/)
    }
    await assert.rejects(sema.withLock(file, () => 'ran', { limit: 3 }), { code: 'LIMIT_MISMATCH' })
    // The sibling's holder dies: its slot is no longer live, another limit may go on.
    b.kill()
    await u.waitExit(b.child, 10000)
    const c = await sema.tryAcquire(file, { limit: 3 })
    assert.equal(c.ok, true, JSON.stringify(c.error))
    assert.equal(path.basename(c.value._path), `${path.basename(file)}.slot-1-of-3`)
    await c.value.release()
    a.child.stdin.write('release\n')
    await a.out.next(/^released true/)
  })

  test('a SIGKILLed slot holder is reclaimed at once: a waiter gets its slot without waiting for staleness', async () => {
    const file = tmp.fresh('crash')
    const a = await u.holder(file, { limit: 2 })
    const b = await u.holder(file, { limit: 2 })
    // Default staleTimeout (1 h): only the dead-holder rule can free the slot within the wait.
    const waiting = sema.acquire(file, { limit: 2, timeout: 20000 })
    const early = await Promise.race([waiting, new Promise((r) => setImmediate(() => r('pending')))])
    assert.equal(early, 'pending')
    b.kill()
    const r = await waiting
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(r.value.pid, process.pid)
    a.child.stdin.write('release\n')
    await a.out.next(/^released true/)
    await r.value.release()
    assert.deepEqual(tmp.left(file), [])
  })

  test('waiting processes are served in the order they started waiting (the cross-process line)', async () => {
    const file = tmp.fresh('fifo')
    const tickets = () => lineOf(file).waitingProcesses() ?? 0
    const a = await u.holder(file, { limit: 2 })
    const b = await u.holder(file, { limit: 2 })
    const waiters = []
    for (let i = 1; i <= 3; i++) {
      waiters.push(u.spawnHolder(file, { limit: 2, timeout: 30000 }, { timeoutMs: 30000 }))
      await u.whenFile(file, () => tickets() === i, 10000, `waiter ${i} in line`)
    }
    const pendingNow = (p) => Promise.race([p.then(() => 'settled'), new Promise((r) => setImmediate(() => r('pending')))])
    assert.equal(await a.release(), true)
    await waiters[0].held
    assert.equal(await pendingNow(waiters[1].held), 'pending')
    assert.equal(await b.release(), true)
    await waiters[1].held
    assert.equal(await pendingNow(waiters[2].held), 'pending')
    assert.equal(await waiters[0].release(), true)
    await waiters[2].held
    for (const w of waiters.slice(1)) assert.equal(await w.release(), true)
    assert.deepEqual(tmp.left(file), [], 'no slot file left')
    assert.equal(tickets(), 0, 'nobody left in the line')
  })

  test('a slot holder ended by SIGTERM releases its slot file on the way out', async () => {
    const file = tmp.fresh('sigterm')
    const a = await u.holder(file, { limit: 2 })
    const b = await u.holder(file, { limit: 2 })
    assert.ok(fs.existsSync(`${file}.slot-1-of-2`))
    b.kill('SIGTERM')
    assert.equal((await u.waitExit(b.child, 10000)).signal, 'SIGTERM')
    a.kill('SIGTERM')
    assert.equal((await u.waitExit(a.child, 10000)).signal, 'SIGTERM')
    assert.deepEqual(tmp.left(file), [], 'both slot files removed')
  })

  test('in-process waiters are served in call order; an aborted waiter leaves the line', async () => {
    const file = tmp.fresh('order')
    const held = [await sema.acquire(file, { limit: 2 }), await sema.acquire(file, { limit: 2 })].map((r) => r.value)
    const order = []
    const ac = new AbortController()
    const w1 = sema.acquire(file, { limit: 2 }).then((r) => (order.push(1), r))
    const gone = sema.acquire(file, { limit: 2, signal: ac.signal })
    const w2 = sema.acquire(file, { limit: 2 }).then((r) => (order.push(2), r))
    ac.abort()
    assert.equal((await gone).error.type, 'ABORTED')
    await held[0].release()
    const r1 = await w1
    assert.deepEqual(order, [1])
    await held[1].release()
    const r2 = await w2
    assert.deepEqual(order, [1, 2])
    await r1.value.release()
    await r2.value.release()
  })

  test('a slot file removed under its holder: the holder hears LOCK_LOST (onLost, signal)', async () => {
    const file = tmp.fresh('lost')
    const a = await sema.acquire(file, { limit: 2, heartbeat: 100 })
    let heard = null
    const lost = new Promise((resolve) => {
      heard = resolve
    })
    const b = await sema.acquire(file, { limit: 2, heartbeat: 100, onLost: (_lock, e) => heard(e) })
    assert.equal(path.basename(b.value._path), `${path.basename(file)}.slot-1-of-2`)
    fs.unlinkSync(`${file}.slot-1-of-2`)
    const e = await u.within(lost, 10000, 'onLost')
    assert.equal(e.code, 'LOCK_LOST')
    assert.equal(b.value.signal.aborted, true)
    assert.equal(await b.value.release(), false)
    await a.value.release()
  })

  test('worker threads: a worker holds a slot like a process; terminating it frees the slot', async () => {
    const { Worker } = require('node:worker_threads')
    const file = tmp.fresh('worker')
    const shared = tmp.fresh('worker-shared')
    const w = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads')
       const sema = require(workerData.root)
       ;(async () => {
         const a = await sema.acquire(workerData.file, { limit: 2 })
         const b = await sema.acquire(workerData.shared, { mode: 'shared' })
         parentPort.postMessage(a.ok && b.ok ? 'held' : JSON.stringify([a.error, b.error]))
       })()
       parentPort.on('message', () => {}) // stays alive (holding) until terminated`,
      { eval: true, workerData: { root: path.resolve(__dirname, '..'), file, shared } },
    )
    assert.equal(await new Promise((resolve) => w.once('message', resolve)), 'held')
    const mine = await sema.tryAcquire(file, { limit: 2 })
    assert.equal(mine.ok, true)
    assert.equal((await sema.tryAcquire(file, { limit: 2 })).error.type, 'ALREADY_LOCKED')
    assert.equal((await sema.tryAcquire(shared, { mode: 'exclusive' })).error.type, 'ALREADY_LOCKED')
    const reader = await sema.tryAcquire(shared, { mode: 'shared' })
    assert.equal(reader.ok, true, 'a reader of the main thread joins the worker’s')
    await reader.value.release()
    await w.terminate()
    // Node and Bun release a terminated worker's locks before terminate() resolves, Deno 2.9 just after: wait for it.
    await u.whenFile(file, (t) => t === null, 10000, 'the worker’s slot file removed')
    const readerLeft = () => fs.readdirSync(path.dirname(shared)).some((n) => n.startsWith(`${path.basename(shared)}.reader-`))
    await u.whenFile(shared, () => !readerLeft(), 10000, 'the worker’s reader file removed')
    const again = await sema.tryAcquire(file, { limit: 2 })
    assert.equal(again.ok, true, 'the worker’s slot was released when it was terminated')
    const x = await sema.tryAcquire(shared, { mode: 'exclusive' })
    assert.equal(x.ok, true, 'the terminated worker’s shared hold is no member: the exclusive takes the path over')
    for (const l of [mine, again, x]) await l.value.release()
  })

  test('status without a holder; bad limits are INVALID_ARGUMENT', async () => {
    const file = tmp.fresh('status')
    const s = await sema.status(file, { limit: 3 })
    assert.equal(s.locked, false)
    assert.equal(s.holders, 0)
    assert.equal(s.limit, 3)
    for (const limit of [0, 1.5, -1, '2']) {
      assert.equal((await sema.tryAcquire(file, { limit })).error.type, 'INVALID_ARGUMENT', String(limit))
    }
    assert.deepEqual(tmp.left(file), [])
  })

  test('a large limit: status, wait() and release by path look at the slot files present, not at every slot', { timeout: 60_000 }, async () => {
    // Before, status visited each of `limit` slots (one engine call each): limit 1e9 never returned.
    const file = tmp.fresh('large')
    const limit = 1e9
    const a = await sema.tryAcquire(file, { limit })
    const b = await sema.tryAcquire(file, { limit })
    assert.ok(a.ok && b.ok)
    const s = await sema.status(file, { limit })
    assert.equal(s.holders, 2)
    assert.equal(s.limit, limit)
    assert.equal(s.locked, true)
    assert.equal(s.info.pid, process.pid)
    const w = await sema.wait(file, { limit, timeout: 0 })
    assert.equal(w.ok, true, JSON.stringify(w.error))
    assert.equal((await sema.release(file, { limit })).ok, true, 'release by path: the first slot that is released')
    assert.equal((await sema.status(file, { limit })).holders, 1)
    await b.value.release()
    assert.equal((await sema.release(file, { limit })).error.type, 'NOT_LOCKED', 'nothing left to release')
    assert.equal((await sema.status(file, { limit })).holders, 0)
    assert.deepEqual(tmp.left(file), [])
  })
})

describe('the CLI: --limit', () => {
  const { cli } = require('./fixtures/cli/helpers')
  test('try-acquire, status, run and release take slots of the same semaphore', async () => {
    const file = tmp.fresh('cli')
    const pid = String(process.pid)
    for (const expected of [0, 0, 1]) {
      const r = await cli(['try-acquire', file, '--limit', '2', '--pid', pid, '--json'])
      assert.equal(r.code, expected, r.stdout + r.stderr)
    }
    const s = JSON.parse((await cli(['status', file, '--limit', '2', '--json'])).stdout)
    assert.equal(s.holders, 2)
    assert.equal(s.limit, 2)
    const text = await cli(['status', file, '--limit', '2'])
    assert.match(text.stdout, /holders: 2\/2 slots/)
    const wrong = await cli(['run', file, '--limit', '3', '--timeout', '0', '--', process.execPath, '-e', ''])
    assert.equal(wrong.code, 1, wrong.stderr)
    assert.match(wrong.stderr, /held with limit 2, not 3/)
    for (let i = 0; i < 2; i++) assert.equal((await cli(['release', file, '--limit', '2', '--pid', pid])).code, 0)
    assert.equal((await cli(['release', file, '--limit', '2', '--pid', pid])).code, 1, 'nothing left to release')
    assert.deepEqual(tmp.left(file), [])
    const ran = await cli(['run', file, '--limit', '2', '--', process.execPath, '-e', 'process.exit(7)'])
    assert.equal(ran.code, 7)
    const bad = await cli(['status', file, '--limit', '0'])
    assert.equal(bad.code, 2)
    assert.match(bad.stderr, /--limit: '0' is not a positive integer/)
  })
})

const linux = process.platform === 'linux'
const root = typeof process.getuid === 'function' && process.getuid() === 0
describe('a symlink planted at a slot file by another user', { skip: !linux ? 'Linux only' : !root ? 'needs root' : false }, () => {
  test('is refused (INVALID_PATH) and never followed', async () => {
    const { shared, mine } = u.attackDirs('semaphore-')
    try {
      const victim = path.join(mine, 'secret.txt')
      fs.writeFileSync(victim, 'secret\n', { mode: 0o600 })
      const before = fs.statSync(victim)
      const file = path.join(shared, 'jobs.lock')
      u.asNobody('ln', '-s', victim, `${file}.slot-1-of-2`)
      const base = await sema.tryAcquire(file, { limit: 2 })
      assert.equal(base.ok, true, 'slot 0 (the base) is free')
      for (const r of [await sema.tryAcquire(file, { limit: 2 }), await sema.acquire(file, { limit: 2, timeout: 300 })]) {
        assert.equal(r.ok, false)
        assert.equal(r.error.type, 'INVALID_PATH', JSON.stringify(r.error))
        assert.match(r.error.message, /symbolic link/)
      }
      await base.value.release()
      assert.equal(fs.readFileSync(victim, 'utf8'), 'secret\n')
      assert.equal(fs.statSync(victim).mtimeMs, before.mtimeMs)
      assert.ok(fs.lstatSync(`${file}.slot-1-of-2`).isSymbolicLink(), 'the link is left alone')
    } finally {
      u.rmTmp(shared)
      u.rmTmp(mine)
    }
  })
})

describe('issue 33: the limit at every grant, no waiter keeps a free slot', () => {
  // Issue 33, defect 2. Before (lib/file/slots.js checked the limit once, before waiting): W took slot-1-of-2 beside
  // C's slot-1-of-3, three holders of a path two of them took with limit 2.
  test('the limit is checked at every grant: a waiter of limit 2 never becomes a third holder beside a limit-3 slot', async () => {
    const file = tmp.fresh('every-grant')
    const a = await u.holder(file, { limit: 2 })
    const b = await u.holder(file, { limit: 2 })
    const w = u.spawnHolder(file, { limit: 2, timeout: 30000, retryInterval: 20 }, { timeoutMs: 30000 })
    const wHeld = w.held
    await u.whenFile(file, () => lineOf(file).waitingProcesses() === 1, 10000, 'W in line')
    // W stopped, so that C comes in the moment B's slot is free, before W runs again.
    u.signalChild(w.child, 'SIGSTOP')
    assert.equal(await b.release(), true)
    const c = await sema.tryAcquire(file, { limit: 3 })
    assert.equal(c.ok, true, JSON.stringify(c.error))
    assert.equal(path.basename(c.value._path), `${path.basename(file)}.slot-1-of-3`)
    u.signalChild(w.child, 'SIGCONT')
    // 50 of W's polls: none may grant it a slot while A and C hold.
    assert.equal(await settlesWithin(wHeld, 1000), false, 'W was granted a third slot')
    assert.ok(!fs.existsSync(`${file}.slot-1-of-2`))
    // A newcomer of limit 2 is told of C's limit; once C is gone, W gets its slot.
    assert.equal((await sema.tryAcquire(file, { limit: 2 })).error.type, 'LIMIT_MISMATCH')
    await c.value.release()
    await wHeld
    assert.equal(await w.release(), true)
    assert.equal(await a.release(), true)
    assert.deepEqual(tmp.left(file), [])
  })

  test('a newcomer of another limit gets LIMIT_MISMATCH whichever slot it would take (the message names both limits)', async () => {
    const file = tmp.fresh('newcomer')
    const a = await u.holder(file, { limit: 2 })
    const b = await u.holder(file, { limit: 2 })
    assert.equal(await a.release(), true) // the base is free, slot-1-of-2 held: the check after the grant of the base refuses it
    const r = await sema.acquire(file, { limit: 3, timeout: 5000 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'LIMIT_MISMATCH')
    assert.match(r.error.message, /held with limit 2, not 3/)
    assert.doesNotMatch(r.error.message, /undefined/)
    assert.deepEqual(tmp.left(file).sort(), [`${path.basename(file)}.slot-1-of-2`], 'the base it took for a moment is released')
    assert.equal(await b.release(), true)
  })

  // Issue 33, defect 3. Before: the newcomer waited behind the stopped process's ticket until it ran again (forever).
  test('a stopped waiting process keeps free slots from nobody: a newcomer is served within two retryIntervals', async () => {
    const file = tmp.fresh('stopped-head')
    const a = await u.holder(file, { limit: 2 })
    const b = await u.holder(file, { limit: 2 })
    const w = u.spawnHolder(file, { limit: 2, timeout: 60000 }, { timeoutMs: 60000 })
    const wHeld = w.held
    await u.whenFile(file, () => lineOf(file).waitingProcesses() === 1, 10000, 'W in line')
    u.signalChild(w.child, 'SIGSTOP')
    try {
      assert.equal(await a.release(), true)
      assert.equal(await b.release(), true)
      // Both slots free, W stopped at the head of the line: a waiting acquire (no tryAcquire) still gets one.
      const n = await sema.acquire(file, { limit: 2, timeout: 20000, retryInterval: 50 })
      assert.equal(n.ok, true, JSON.stringify(n.error))
      const wait = await sema.wait(file, { limit: 2, timeout: 20000 })
      assert.equal(wait.ok, true, 'wait() agrees: a slot is still free')
      await n.value.release()
    } finally {
      u.signalChild(w.child, 'SIGCONT')
    }
    await wHeld
    assert.equal(await w.release(), true)
    assert.deepEqual(tmp.left(file), [])
  })
})
