'use strict'
// Lock files on a FUSE file system (issue 36): bindfs mounted over a temp dir, a user-space file system that has no
// O_TMPFILE (ENOTSUP), whose flock and byte-range locks the local kernel keeps, and whose changes made by another
// machine would never reach inotify. Real processes, the real mount:
// - status() and `sema-native status` name `fuse` and the fallbacks ('no-tmpfile', 'poll');
// - 8 processes × 300 acquire / increment-a-counter-file / release on the mount: 0 overlaps, the counter exact;
// - a holder SIGKILLed on the mount is reclaimed by a waiting process (the time is reported).
// Skipped, with the reason, where /dev/fuse, bindfs or the right to mount is missing (CI installs bindfs and fuse3:
// .ci/run's test_tools).

const { test, describe, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const children = require('./helpers/children')
const { cli } = require('./fixtures/cli/helpers')
const sema = require('..')

const PROCS = 8
const ITER = 300
// FUSE_SUPER_MAGIC (linux/magic.h), as `stat -f -c %t` prints it.
const FUSE_MAGIC_HEX = '65735546'

/** Mounts bindfs over a fresh temp dir: `{ base, mount }`, or `{ skip: reason }`. */
function mountBindfs() {
  if (process.platform !== 'linux') return { skip: 'FUSE via bindfs is tested on Linux only' }
  if (!fs.existsSync('/dev/fuse')) return { skip: '/dev/fuse is missing (no FUSE in this kernel or container)' }
  if (spawnSync('bindfs', ['--version']).error) return { skip: 'bindfs is not installed (Debian: apt-get install bindfs fuse3)' }
  const base = u.mkTmp('fuse-')
  const src = path.join(base, 'src')
  const mount = path.join(base, 'mnt')
  fs.mkdirSync(src)
  fs.mkdirSync(mount)
  const r = spawnSync('bindfs', [src, mount], { encoding: 'utf8' })
  const magic = spawnSync('stat', ['-f', '-c', '%t', mount], { encoding: 'utf8' }).stdout.trim()
  if (r.status !== 0 || magic !== FUSE_MAGIC_HEX) {
    unmount(mount)
    u.rmTmp(base)
    return { skip: `bindfs could not mount (exit ${r.status}, magic ${magic}): ${(r.stderr || '').trim()}` }
  }
  return { base, mount }
}

function unmount(mount) {
  if (spawnSync('fusermount3', ['-u', mount]).status !== 0) spawnSync('umount', ['-l', mount])
}

const fuse = mountBindfs()
after(() => {
  if (fuse.skip) return
  u.killAll()
  unmount(fuse.mount)
  u.rmTmp(fuse.base)
})
let n = 0
const fresh = () => path.join(fs.mkdtempSync(path.join(fuse.mount, `case-${++n}-`)), 'f.lock')

/**
 * Asserts that `dir` holds exactly `expected` once FUSE's own names are gone. A FUSE file system (high-level libfuse,
 * as bindfs) renames a file unlinked while a descriptor is open to `.fuse_hidden…` and deletes that name when the
 * kernel tells the daemon of the last close, after close() has returned: Bun's run saw one at a check made right
 * after a release. Such a name is given a bounded while to go; any other name is something left behind, at once.
 */
async function assertLeft(dir, expected) {
  const ours = () => u.ls(dir).filter((f) => !f.startsWith('.fuse_hidden'))
  assert.deepEqual(ours(), expected, 'no lock, marker or temp file left behind')
  await children.until(() => u.ls(dir).length === expected.length, { timeoutMs: 5000, what: "FUSE deleting its '.fuse_hidden' names", last: () => u.ls(dir) })
}

describe('lock files on FUSE (bindfs)', { skip: fuse.skip }, () => {
  test('status() and `sema-native status` name the file system and the fallbacks', async () => {
    const file = fresh()
    const s = await sema.status(file)
    assert.equal(s.fileSystem, 'fuse')
    assert.deepEqual(s.fallbacks, ['no-tmpfile', 'poll'], 'no O_TMPFILE on bindfs; no remote events on FUSE')
    const r = await sema.acquire(file)
    assert.ok(r.ok, r.error?.message)
    try {
      const held = await cli(['status', file, '--json'])
      assert.equal(held.code, 0, held.stderr)
      const j = JSON.parse(held.stdout)
      assert.deepEqual([j.locked, j.fileSystem, j.fallbacks], [true, 'fuse', ['no-tmpfile', 'poll']])
      const text = await cli(['status', file])
      assert.match(text.stdout, /^ {2}file system: fuse \(fallbacks: no-tmpfile, poll\)$/m)
    } finally {
      assert.equal(await r.value.release(), true)
    }
    await assertLeft(path.dirname(file), [])
  })

  test(`mutual exclusion: ${PROCS} processes × ${ITER} rounds, 0 overlaps, the counter exact`, { timeout: u.scaled(300000) }, async (t) => {
    const file = fresh()
    const work = path.dirname(file)
    const marker = path.join(work, 'inside.marker')
    const counter = path.join(work, 'counter')
    fs.writeFileSync(counter, '0')
    const kids = Array.from({ length: PROCS }, () =>
      u.spawnNode('file-mutex-worker.js', [file, marker, counter, ITER, 'async']),
    )
    await Promise.all(kids.map((k) => u.lines(k).next(/^ready$/, 20000)))
    const t0 = Date.now()
    for (const k of kids) k.stdin.end('go\n')
    const exits = await Promise.all(kids.map((k) => u.waitExit(k, 240000, 'mutex worker on FUSE')))
    const ms = Date.now() - t0
    const total = u.workerTotals(exits)
    t.diagnostic(`FUSE: ${total.acquired} acquisitions by ${PROCS} processes in ${ms} ms; overlaps ${total.overlaps}`)
    assert.deepEqual(total.errors, [], 'no acquire/release errors')
    assert.equal(total.overlaps, 0, 'no two holders inside the critical section at once')
    assert.equal(total.failedReleases, 0, 'every release succeeded')
    assert.equal(total.wrongOwner, 0, 'the lock file was the holder’s own while inside')
    assert.equal(Number(fs.readFileSync(counter, 'utf8')), PROCS * ITER, 'counter exact')
    await assertLeft(work, ['counter'])
  })

  test('a SIGKILLed holder is reclaimed by a waiting process', { timeout: u.scaled(60000) }, async (t) => {
    const file = fresh()
    const h = await u.holder(file)
    const before = await sema.status(file)
    assert.equal(before.reclaimRule, 'holder-dead', 'the holder is judged by its presence mark (kept by the local kernel)')
    assert.equal(before.isStale, false, 'a live holder is not stale')
    const waiter = u.spawnNode('file-holder.js', [file, JSON.stringify({ timeout: u.scaled(30000) })])
    const waiterHeld = u.lines(waiter).next(/^held /, u.scaled(30000))
    await h.kill('SIGKILL')
    const killed = Date.now()
    const got = JSON.parse((await waiterHeld).slice(5))
    const ms = Date.now() - killed
    t.diagnostic(`FUSE: a SIGKILLed holder reclaimed by a waiting process ${ms} ms after its exit`)
    assert.equal(got.pid, waiter.pid, 'the waiter holds the lock')
    assert.notEqual(got.token, h.held.token, 'a new lock file, not the dead holder’s')
    waiter.stdin.write('release\n')
    assert.equal(await u.lines(waiter).next(/^released /), 'released true')
    waiter.stdin.end()
    await u.waitExit(waiter, 15000, 'waiter')
    await assertLeft(path.dirname(file), [])
  })
})
