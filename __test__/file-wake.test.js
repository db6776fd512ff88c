'use strict'
// How a waiter is woken (issue 24): on Linux the inotify descriptor is read on the addon's tokio runtime, so a
// release wakes the worker that runs the waiter directly, with no reader thread in between (one sequential
// thread wake-up less per hand-off). A real second process waits; the release is this one's.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const u = require('./helpers/file-util')
const sema = require('..')

const linux = process.platform === 'linux'

/** Whether process `pid` has an inotify descriptor open (its waiter registered its watch). */
function hasInotify(pid) {
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === 'anon_inode:inotify') return true
    } catch {}
  }
  return false
}

test('a waiter is woken by the release event with no inotify reader thread', { skip: !linux && 'Linux only (inotify)' }, async (t) => {
  const dir = u.mkTmp('wake-')
  t.after(() => {
    u.killAll()
    u.rmTmp(dir)
  })
  const file = path.join(dir, 'wake.lock')
  const sem = new sema.Semaphore(file)
  assert.equal(sem.tryAcquire('holder').ok, true)
  const child = u.spawnNode('file-wake-waiter.js', [file])
  const out = u.lines(child)
  // The waiter's watch is registered when its inotify descriptor exists; there is no event to wait on for that.
  await u.until(() => hasInotify(child.pid), { timeoutMs: 20_000, what: 'the waiter watching', last: () => child.stderrText })
  assert.equal(sem.release().ok, true)
  await out.next(/^acquired$/, 20_000) // its poll interval is 10 minutes: only the event woke it
  const names = JSON.parse(await out.next(/^\[/, 5_000))
  assert.ok(names.includes('tokio-rt-worker') || names.some((n) => n.startsWith('tokio')), `threads: ${names}`)
  assert.ok(!names.includes('sema-inotify'), `an inotify reader thread: ${names}`)
  const r = await u.waitExit(child, 10_000, 'waiter')
  assert.equal(r.code, 0, r.stderr)
})
