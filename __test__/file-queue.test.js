'use strict'
// The cross-process wait queue (crates/sema-core/src/lockfile/queue.rs), with real processes:
// - waiting processes get the lock in the order they started waiting (a release wakes the head of the line, not
//   a herd that races for it);
// - a head that stopped running (SIGSTOP) does not block the others: they still poll the lock file.
// Where a waiter stands is read from /proc/locks: the head holds the queue file's `flock` (FLOCK WRITE), the others
// are blocked behind it ("-> FLOCK ... WRITE"). Lock files themselves carry a shared flock (FLOCK READ).

const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const u = require('./helpers/file-util')
const sema = require('..')

const linux = process.platform === 'linux'

// A disk directory (fsync on: every file call off the JS thread) and tmpfs (uncontended calls on the JS thread).
const dirs = {}
before(() => {
  dirs.disk = u.mkTmp('queue-')
  if (fs.existsSync('/dev/shm')) dirs.tmpfs = fs.mkdtempSync('/dev/shm/sema-native-queue-')
})
after(() => {
  u.killAll()
  for (const d of Object.values(dirs)) u.rmTmp(d)
})

/** Polls until every thread of `pid` is stopped (SIGSTOP takes effect when each thread is next scheduled). */
function allThreadsStopped(pid) {
  const stopped = () =>
    fs.readdirSync(`/proc/${pid}/task`).every((t) => {
      const stat = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8')
      return stat.slice(stat.lastIndexOf(')') + 2)[0] === 'T'
    })
  return u.until(stopped, { intervalMs: 2, what: `process ${pid} stopped` })
}

/** The queue file `pid` has open (from /proc/<pid>/fd), or null. */
function queueFileOf(pid) {
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    let target
    try {
      target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`)
    } catch {
      continue
    }
    if (/\/sema-native-\d+\/q-[0-9a-f]{16}$/.test(target)) return target
  }
  return null
}

/** Spawns a holder child waiting for `file`; resolves it (with its `out` and `held`) once it stands at `place`. */
async function waiter(file, place, options = { retryInterval: 10_000 }) {
  const { child, out, held } = u.spawnHolder(file, options, { timeoutMs: 50000 })
  await u.untilQueued(child.pid, place)
  return Object.assign(child, { out, held })
}

/** Resolves the first of `children` to print `held`. */
function firstHeld(children) {
  return Promise.race(children.map((c) => c.held.then(() => c)))
}

for (const where of ['disk', 'tmpfs']) describe(`cross-process wait queue (${where})`, { skip: !linux && 'the queue is Linux only' }, () => {
  const at = (name) => {
    if (!dirs[where]) throw new Error(`no ${where} directory`)
    return path.join(dirs[where], name)
  }

  test('waiting processes get the lock in the order they started waiting', { timeout: u.scaled(60000) }, async () => {
    const file = at('fifo.lock')
    const r = await sema.acquire(file)
    assert.ok(r.ok)
    // One at a time, each once it stands in the queue: the first becomes head, the others line up behind it.
    // Their poll interval is 10 s, so only the queue can wake them in time.
    const waiters = []
    for (let i = 0; i < 4; i++) waiters.push(await waiter(file, i === 0 ? 'head' : 'line'))
    const queueFile = queueFileOf(waiters[0].pid)
    assert.ok(queueFile && fs.existsSync(queueFile), `the head has the queue file open: ${queueFile}`)
    await r.value.release()
    const order = []
    let left = [...waiters]
    while (left.length) {
      const next = await firstHeld(left)
      order.push(waiters.indexOf(next))
      left = left.filter((c) => c !== next)
      next.stdin.write('release\n')
      await next.out.next(/^released true$/)
    }
    // Served by a herd (every waiter woken by every release, racing), 4 waiters come out in this order 1 time in 24.
    assert.deepEqual(order, [0, 1, 2, 3])
    // The last to leave an empty line removes the queue file: a lock contended once leaves nothing behind.
    assert.equal(fs.existsSync(queueFile), false, `${queueFile} removed`)
    for (const c of waiters) c.stdin.end()
    await Promise.all(waiters.map((c) => u.waitExit(c, 10000, 'waiter')))
  })

  test('a stopped head does not block the line: the others still poll the lock file', { timeout: u.scaled(60000) }, async () => {
    const file = at('stopped.lock')
    const r = await sema.acquire(file)
    assert.ok(r.ok)
    const head = await waiter(file, 'head')
    const behind = await waiter(file, 'line', { retryInterval: 50 })
    process.kill(head.pid, 'SIGSTOP')
    try {
      await allThreadsStopped(head.pid)
      await r.value.release()
      // The head cannot run; the one behind it finds the lock free at its next 50 ms poll.
      const first = await firstHeld([head, behind])
      assert.equal(first, behind)
    } finally {
      process.kill(head.pid, 'SIGCONT')
    }
    behind.stdin.write('release\n')
    await behind.out.next(/^released true$/)
    await head.held
    head.stdin.end()
    behind.stdin.end()
    await Promise.all([head, behind].map((c) => u.waitExit(c, 10000, 'waiter')))
  })

  test('behind a stopped head, timeouts shorter than the poll still make their attempt', { timeout: u.scaled(60000) }, async () => {
    const file = at('stopped-timeout.lock')
    const r = await sema.acquire(file)
    assert.ok(r.ok)
    const head = await waiter(file, 'head')
    process.kill(head.pid, 'SIGSTOP')
    try {
      await allThreadsStopped(head.pid)
      await r.value.release()
      // The lock is free, the head cannot run. timeout 0 = exactly one attempt; 80 ms is below the 100 ms poll.
      for (const timeout of [0, 80]) {
        const again = await sema.acquire(file, { timeout })
        assert.ok(again.ok, `timeout ${timeout}: ${JSON.stringify(again.error)}`)
        await again.value.release()
      }
    } finally {
      process.kill(head.pid, 'SIGCONT')
    }
    await head.held
    head.stdin.end()
    await u.waitExit(head, 10000, 'waiter')
  })

  test('a waiter that gives up leaves the line: the next one is served', { timeout: u.scaled(60000) }, async () => {
    const file = at('giveup.lock')
    const r = await sema.acquire(file)
    assert.ok(r.ok)
    const head = await waiter(file, 'head')
    const behind = await waiter(file, 'line')
    // The head aborts its wait (SIGKILL: the kernel drops its place); the one behind becomes head.
    u.signalChild(head) // by pid: a holder ends when its stdin ends, which Deno's ChildProcess.kill() closes first
    await u.untilQueued(behind.pid, 'head')
    await r.value.release()
    await behind.held
    behind.stdin.end()
    await u.waitExit(behind, 10000, 'waiter')
  })
})
