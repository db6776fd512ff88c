'use strict'
// Durability order of a lock file, read from the system calls of a real process (strace): with fsync on (the
// default) the lock content is synced BEFORE the `linkat` that gives it the lock's name, so a crash never leaves
// the name on an empty or partial file; after the link only the directory is synced. For a waiter this also means
// the content's sync happens before it sleeps, not between a release and the next holder.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('durability-')
const ROOT = path.join(__dirname, '..')
const haveStrace = process.platform === 'linux' && spawnSync('strace', ['-V']).status === 0

/** A node child under `strace -f` that acquires `file` (waiting up to 20 s), prints `got`, releases, exits. */
function tracedAcquirer(file, trace) {
  const code = `
    const sema = require(${JSON.stringify(ROOT)})
    sema.acquire(${JSON.stringify(file)}, { timeout: 20000 }).then(async (r) => {
      if (!r.ok) { console.error(JSON.stringify(r.error)); process.exit(2) }
      console.log('got')
      await r.value.release()
    })`
  return u.spawnTracked('strace', ['-f', '-qq', '-e', 'trace=fsync,fdatasync,linkat', '-o', trace, process.execPath, '-e', code])
}

/** The traced calls in order, `<unfinished ...>` / `<... resumed>` pairs joined: [{name, args, result}]. */
function calls(text) {
  const open = new Map() // tid → the start of an unfinished call
  const out = []
  for (const line of text.split('\n')) {
    const m = /^(\d+)\s+(.*)$/.exec(line)
    if (!m) continue
    const [, tid, rest] = m
    let full = rest
    if (rest.endsWith('<unfinished ...>')) {
      open.set(tid, rest.slice(0, -'<unfinished ...>'.length))
      continue
    }
    const resumed = /^<\.\.\. \w+ resumed>(.*)$/.exec(rest)
    if (resumed) {
      full = (open.get(tid) || '') + resumed[1]
      open.delete(tid)
    }
    const c = /^(\w+)\((.*)\)\s+=\s+(-?\d+)/.exec(full)
    if (c) out.push({ name: c[1], args: c[2], result: Number(c[3]) })
  }
  return out
}

/** A memory file system (tmpfs, ramfs: the engine's own test, lockfile/sys/unix/linux.rs), where a sync does nothing. */
function onMemoryFs(dir) {
  const type = fs.statfsSync(dir).type
  return type === 0x01021994 || type === 0x858458f6
}

/** Asserts the durability order around the link that created `file` (on a memory file system: no sync at all, as
 * the engine skips syncs that do nothing there). */
function assertSyncedBeforeLink(trace, file) {
  const list = calls(fs.readFileSync(trace, 'utf8'))
  const at = list.findIndex((c) => c.name === 'linkat' && c.result === 0 && c.args.includes(JSON.stringify(file)))
  assert.ok(at >= 0, `a successful linkat onto ${file} in:\n${fs.readFileSync(trace, 'utf8')}`)
  if (onMemoryFs(path.dirname(file))) {
    assert.deepEqual(list.filter((c) => c.name === 'fsync' || c.name === 'fdatasync'), [], 'no sync on a memory file system')
    return
  }
  const fd = /"\/proc\/self\/fd\/(\d+)"/.exec(list[at].args)?.[1]
  assert.ok(fd, `linked from an unnamed file: ${list[at].args}`)
  const syncsOf = (c) => (c.name === 'fsync' || c.name === 'fdatasync') && c.args === fd && c.result === 0
  assert.ok(list.slice(0, at).some(syncsOf), `fsync(${fd}) before the link`)
  assert.ok(!list.slice(at + 1).some(syncsOf), `no fsync(${fd}) after the link: the content was on the disk already`)
  assert.ok(
    list.slice(at + 1).some((c) => c.name === 'fsync' && c.result === 0),
    'the directory is synced after the link',
  )
}

describe('lock content is synced before it gets the lock name (fsync on)', { skip: !haveStrace && 'strace not installed' }, () => {
  test('a free lock: fsync(file), linkat, fsync(dir)', async () => {
    const file = tmp.fresh('free')
    const trace = `${file}.strace`
    const child = tracedAcquirer(file, trace)
    const r = await u.waitExit(child, 30000, 'traced acquirer')
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /got/)
    assertSyncedBeforeLink(trace, file)
  })

  test('a waiter syncs its prepared file before it sleeps; after the release only link + directory sync', async () => {
    const file = tmp.fresh('waited')
    const trace = `${file}.strace`
    const held = await sema.acquire(file, { timeout: 5000 })
    assert.equal(held.ok, true, JSON.stringify(held.error))
    const child = tracedAcquirer(file, trace)
    try {
      // The waiter tried the link once and found the lock taken (EEXIST): it is waiting now.
      await u.whenFile(trace, (t) => t && /linkat\(.*\) = -1 EEXIST/.test(t), 20000, 'the waiter’s refused link')
    } finally {
      assert.equal(await held.value.release(), true)
    }
    const r = await u.waitExit(child, 30000, 'traced waiter')
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /got/)
    assertSyncedBeforeLink(trace, file)
  })
})
