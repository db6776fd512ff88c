'use strict'
// Locks belong to the JS thread (Node environment) that took them:
// - a worker thread that exits, or is terminated, releases its own locks and nobody else's: the main thread's lock
//   file stays, its handle stays held, and another process still cannot get in (an O_EXCL marker kept by the
//   main thread while the other process tries is the overlap detector);
// - a lock's loss is reported to the thread that holds it, whichever threads loaded the module after it;
// - the process's exit releases every thread's locks.
// Real worker_threads and real child processes; no mocks.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { once } = require('node:events')
const { Worker } = require('node:worker_threads')
const u = require('./helpers/file-util')
const sema = require('..')

const ROOT = path.resolve(__dirname, '..')
/** Every wait on an event is bounded: a missing event fails the test instead of hanging it. */
const BOUND = { timeout: u.scaled(20_000) }

const tmp = u.testDir('threads-')
const { fresh } = tmp

/** A worker running `body` (an async function body) with `sema`, `workerData` and `parentPort` in scope. */
function worker(body, workerData) {
  const code = `
    const { workerData, parentPort } = require('node:worker_threads')
    const sema = require(${JSON.stringify(ROOT)})
    ;(async () => { ${body} })().catch((e) => parentPort.postMessage({ crashed: String(e && e.stack) }))
  `
  return new Worker(code, { eval: true, workerData })
}

/** `p`, or a failure after 10 s. Its timer also keeps the event loop alive while the test waits for a native
 * report (a held lock itself never keeps Node alive). */
const within = (p, what) => u.within(p, 10_000, what)

async function message(w) {
  const [m] = await once(w, 'message')
  assert.equal(m.crashed, undefined, m.crashed)
  return m
}

/**
 * Another process tries `file` once; if it gets the lock it also tries to enter the critical section (the O_EXCL
 * `marker`). Resolves its report `{ ok, type, overlap }`.
 */
async function otherProcessTries(file, marker) {
  const script = `
    const fs = require('node:fs')
    const sema = require(${JSON.stringify(ROOT)})
    sema.tryAcquire(process.argv[1]).then(async (r) => {
      let overlap = false
      if (r.ok) {
        try { fs.closeSync(fs.openSync(process.argv[2], 'wx')); fs.unlinkSync(process.argv[2]) }
        catch (e) { if (e.code === 'EEXIST') overlap = true; else throw e }
        await r.value.release()
      }
      console.log(JSON.stringify({ ok: r.ok, type: r.ok ? null : r.error.type, overlap }))
    })
  `
  const child = u.spawnTracked(process.execPath, ['-e', script, file, marker])
  const { code } = await child.exited
  await child.closed
  assert.equal(code, 0, child.stderrText)
  return JSON.parse(child.stdoutText.trim())
}

/** The main thread's lock on a fresh path: `{ mine, lock }`. */
async function mainThreadLock() {
  const mine = fresh('main')
  const r = await sema.acquire(mine)
  assert.equal(r.ok, true)
  return { mine, lock: r.value }
}

/** The main thread's lock survived a worker's end: still held and exclusive; then released by its handle. */
async function keptThenReleased(lock, mine) {
  await assertStillExclusive(lock, mine)
  assert.equal(await lock.release(), true)
}

/** Holds the main thread's critical section (the marker) while another process tries the lock. */
async function assertStillExclusive(lock, file) {
  assert.equal(lock.released, false, 'the main thread still holds it')
  assert.equal(lock.signal.aborted, false, 'no loss reported')
  assert.ok(fs.existsSync(file), "the main thread's lock file is still there")
  const marker = `${file}.inside`
  const fd = fs.openSync(marker, 'wx')
  try {
    const other = await otherProcessTries(file, marker)
    assert.deepEqual(other, { ok: false, type: 'ALREADY_LOCKED', overlap: false })
  } finally {
    fs.closeSync(fd)
    fs.unlinkSync(marker)
  }
}

describe("a worker thread's end releases its own locks only", () => {
  test('worker exits on its own: its locks are gone, the main thread keeps its lock and exclusion', BOUND, async () => {
    const { mine, lock } = await mainThreadLock()
    const theirs = fresh('worker')
    const theirsSemats = fresh('worker-semats')
    const w = worker(
      `
      const a = await sema.acquire(workerData.theirs)
      const s = new sema.Semaphore(workerData.theirsSemats).tryAcquire('w')
      parentPort.postMessage({ held: a.ok && s.ok })
      `,
      { theirs, theirsSemats },
    )
    const exited = once(w, 'exit')
    assert.deepEqual(await message(w), { held: true })
    await exited
    assert.equal(fs.existsSync(theirs), false, "the worker's own lock was released at its exit")
    assert.equal(fs.existsSync(theirsSemats), false, "the worker's own Semaphore lock was released at its exit")
    await keptThenReleased(lock, mine)
  })

  test('worker terminated while holding: its lock is gone, the main thread keeps its lock and exclusion', BOUND, async () => {
    const { mine, lock } = await mainThreadLock()
    const theirs = fresh('worker')
    const w = worker(
      `
      const a = await sema.acquire(workerData.theirs)
      parentPort.postMessage({ held: a.ok })
      setInterval(() => {}, 1000) // stays alive until terminated
      `,
      { theirs },
    )
    assert.deepEqual(await message(w), { held: true })
    assert.ok(fs.existsSync(theirs))
    await w.terminate()
    assert.equal(fs.existsSync(theirs), false, "the terminated worker's lock was released")
    await keptThenReleased(lock, mine)
  })

  test('a worker that only loaded the module and exited leaves the main thread lock alone', BOUND, async () => {
    const { mine, lock } = await mainThreadLock()
    const w = worker(`await sema.tryAcquire(workerData.other); parentPort.postMessage({ done: true })`, {
      other: fresh('unused'),
    })
    const exited = once(w, 'exit')
    await message(w)
    await exited
    await keptThenReleased(lock, mine)
  })
})

test('a worker terminated while waiting: the lock it is granted afterwards is released, not leaked', BOUND, async () => {
  const file = fresh('pending')
  const r = await sema.acquire(file)
  assert.equal(r.ok, true)
  const w = worker(
    `
    const pending = sema.acquire(workerData.file) // in line (the in-process FIFO) when the call returns
    parentPort.postMessage({ waiting: true })
    await pending // granted only after the worker is gone
    `,
    { file },
  )
  assert.deepEqual(await message(w), { waiting: true })
  await w.terminate()
  assert.equal(await r.value.release(), true)
  // Whoever got it next (the dead worker's waiter, if it was still in line) must not keep it.
  const again = await within(sema.acquire(file, { timeout: 10_000 }), 're-acquisition')
  assert.equal(again.ok, true, again.ok || again.error.message)
  assert.equal(await again.value.release(), true)
})

describe('loss reaches the thread that holds the lock', () => {
  test('main thread lock lost after a worker loaded the module: signal aborts, onLost runs', BOUND, async () => {
    const mine = fresh('main')
    let lostWith = null
    const r = await sema.acquire(mine, { heartbeat: 20, onLost: (_lock, e) => (lostWith = e) })
    assert.equal(r.ok, true)
    const lock = r.value
    const w = worker(`parentPort.postMessage({ loaded: typeof sema.acquire })`)
    assert.deepEqual(await message(w), { loaded: 'function' })
    const aborted = once(lock.signal, 'abort')
    fs.unlinkSync(mine)
    await within(aborted, 'abort of the main thread lock signal')
    assert.equal(lock.signal.reason.code, 'LOCK_LOST')
    assert.equal(lostWith?.code, 'LOCK_LOST', 'onLost ran with a LOCK_LOST error')
    assert.equal(lock.released, true)
    await w.terminate()
  })

  test("a worker's lock lost after another worker loaded the module: the first worker is told", BOUND, async () => {
    const theirs = fresh('worker')
    const first = worker(
      `
      const r = await sema.acquire(workerData.theirs, { heartbeat: 20 })
      r.value.signal.addEventListener('abort', () =>
        parentPort.postMessage({ lost: r.value.signal.reason.code, released: r.value.released }))
      parentPort.postMessage({ held: r.ok })
      setInterval(() => {}, 1000) // stays alive until terminated
      `,
      { theirs },
    )
    assert.deepEqual(await message(first), { held: true })
    const second = worker(`parentPort.postMessage({ loaded: true })`)
    assert.deepEqual(await message(second), { loaded: true })
    const lost = message(first)
    fs.writeFileSync(theirs, 'pid=1\ntimestamp=1\n') // rewritten by someone else
    assert.deepEqual(await within(lost, "loss report from the first worker"), { lost: 'LOCK_LOST', released: true })
    await Promise.all([first.terminate(), second.terminate()])
  })
})

test("the process's exit releases the locks of every thread", BOUND, async () => {
  const mine = fresh('main')
  const theirs = fresh('worker')
  const script = `
    const { Worker } = require('node:worker_threads')
    const sema = require(${JSON.stringify(ROOT)})
    sema.acquire(process.argv[1]).then((r) => {
      if (!r.ok) process.exit(3)
      const w = new Worker(
        "require('node:worker_threads').parentPort.postMessage('x');" +
        "require(" + JSON.stringify(${JSON.stringify(ROOT)}) + ").acquire(" + JSON.stringify(process.argv[2]) + ").then((r) => {" +
        "  require('node:worker_threads').parentPort.postMessage(r.ok ? 'held' : 'failed'); setInterval(() => {}, 1000) })",
        { eval: true })
      w.on('message', (m) => { if (m === 'held') process.exit(0); if (m === 'failed') process.exit(4) })
    })
  `
  const child = u.spawnTracked(process.execPath, ['-e', script, mine, theirs])
  const { code } = await child.exited
  await child.closed
  assert.equal(code, 0, child.stderrText)
  assert.equal(fs.existsSync(mine), false, "the main thread's lock was released at exit")
  assert.equal(fs.existsSync(theirs), false, "the worker's lock was released at the process's exit")
})

describe("blocking lock calls run on the engine's pool, not libuv's", () => {
  // libuv's pool also serves Node's own `fs` calls: with its only thread stuck (an `open` of a FIFO nobody writes
  // to), `status(path)` and `release(path)`, which always run off the JS thread, must still complete.
  test('status and release by path complete while the only libuv thread is blocked', { ...BOUND, skip: process.platform === 'win32' }, async () => {
    const fifo = path.join(tmp.dir, 'stuck.fifo')
    u.sh('mkfifo "$1"', fifo)
    const file = fresh('pool')
    const script = `
      const fs = require('node:fs')
      const sema = require(${JSON.stringify(ROOT)})
      const [fifo, file] = process.argv.slice(1)
      fs.open(fifo, 'r', () => {}) // takes the one libuv thread until a writer opens the FIFO
      ;(async () => {
        const held = await sema.tryAcquire(file)
        const status = await sema.status(file)
        const released = await sema.release(file)
        console.log(JSON.stringify({ held: held.ok, locked: status.locked, released: released.ok }))
        fs.closeSync(fs.openSync(fifo, 'w')) // frees the libuv thread
      })()
    `
    const child = u.spawnTracked(process.execPath, ['-e', script, fifo, file], {
      env: { ...process.env, UV_THREADPOOL_SIZE: '1' },
    })
    const { code, stdout, stderr } = await u.waitExit(child, 10_000, 'the process with a blocked libuv pool')
    assert.equal(code, 0, stderr)
    assert.deepEqual(JSON.parse(stdout), { held: true, locked: true, released: true })
    assert.equal(fs.existsSync(file), false)
  })
})
