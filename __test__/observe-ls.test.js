'use strict'
// `sema-native ls <dir>`: every lock of a directory with the right facts, whoever wrote it: ours (held by a live
// process with waiters in line, and left by a killed one), the real Rust `sema` (built from the vendored source),
// semats' format written by a shell (held by a live process, and expired), a symlink planted by another user (shown,
// never followed), another user's unreadable lock (listed as nobody). Listing changes nothing.

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const { cli } = require('./fixtures/cli/helpers')
const { readSema } = require('../scripts/sema-tool')

const ROOT = path.resolve(__dirname, '..')
const linux = process.platform === 'linux'
const root = typeof process.getuid === 'function' && process.getuid() === 0
const { NOBODY } = u
// The real sema 0.1.0, built by scripts/setup.js from the vendored source (scripts/sema-tool.js).
const SEMA = readSema()

/** Every name in `dir` with its inode, size and mtime (what "changes nothing" compares). */
function snapshot(dir) {
  return fs.readdirSync(dir).sort().map((n) => {
    const st = fs.lstatSync(path.join(dir, n))
    return [n, st.ino, st.size, st.mtimeMs, st.mode]
  })
}

async function lsJson(dir, ...extra) {
  const r = await cli(['ls', dir, '--json', ...extra])
  assert.equal(r.code, 0, r.stderr + r.stdout)
  const v = JSON.parse(r.stdout)
  assert.equal(v.ok, true)
  return Object.fromEntries(v.locks.map((l) => [l.name, l]))
}

describe('ls: a directory of locks written by every tool', () => {
  let dir
  let h
  const waiters = []
  let sleeper
  before(() => {
    dir = fs.realpathSync(u.mkTmp('ls-'))
  })
  after(() => {
    for (const c of [...waiters, h?.child, sleeper?.child]) if (c) u.signalChild(c)
    u.rmTmp(dir)
  })

  test('ours, held by a live process: pid, command line, tag, this host; waiters in line counted', async () => {
    const file = path.join(dir, 'build.lock')
    // No heartbeat: the last test checks that listing changed no mtime, and a heartbeat would change this one.
    h = await u.holder(file, { tag: 'nightly', heartbeat: false })
    let locks = await lsJson(dir)
    const l = locks['build.lock']
    assert.equal(l.state, 'held')
    assert.equal(l.reason, 'own-host-holder-alive')
    assert.equal(l.format, 'sema-native')
    assert.equal(l.pid, h.child.pid)
    assert.equal(l.holderRunning, true)
    assert.equal(l.tag, 'nightly')
    assert.equal(l.thisHost, true)
    assert.ok(l.commandLine.some((w) => w.endsWith('file-holder.js')), JSON.stringify(l.commandLine))
    assert.ok(Math.abs(l.since - u.nowS()) <= 5 && l.ageS >= 0 && l.ageS <= 5, JSON.stringify(l))
    assert.equal(l.waiters, linux ? 0 : null)
    assert.ok(!JSON.stringify(locks).includes(h.held.token), 'the ownership token is never shown')
    // Two other processes wait for it: each has one place in the line.
    for (let i = 0; i < 2; i++) waiters.push(u.spawnNode('file-holder.js', [file, '{}']))
    if (linux) {
      // Polled: a place in the line has no event to wait for.
      locks = await u.until(async () => {
        const all = await lsJson(dir)
        return all['build.lock'].waiters === 2 && all
      }, { timeoutMs: 15000, intervalMs: 50, what: 'two waiters counted' })
      assert.equal(locks['build.lock'].state, 'held')
    }
  })

  test("ours, left by a killed holder: stale, its pid not running", async () => {
    const file = path.join(dir, 'crashed.lock')
    const k = await u.holder(file)
    await k.kill()
    await k.child.closed
    const l = (await lsJson(dir))['crashed.lock']
    assert.equal(l.state, 'stale')
    assert.equal(l.reason, 'own-host-holder-dead')
    assert.equal(l.pid, k.child.pid)
    assert.equal(l.holderRunning, false)
    assert.equal(l.commandLine, null)
  })

  test('the real sema: its lock (its pid gone when the command exits) is held until it expires', { skip: SEMA.bin ? false : SEMA.reason }, async () => {
    const file = path.join(dir, 'rust.lock')
    const r = spawnSync(SEMA.bin, ['try', file, '--tag', 'from sema'], { encoding: 'utf8' })
    assert.equal(r.status, 0, r.stderr)
    const l = (await lsJson(dir))['rust.lock']
    assert.equal(l.format, 'sema/semats')
    assert.equal(l.state, 'held')
    assert.equal(l.reason, 'fresh')
    assert.equal(l.tag, 'from sema')
    assert.equal(l.holderRunning, false)
    assert.equal(l.host, null)
    assert.equal(l.thisHost, null)
    // With a stale rule of 0 s… sema's lock is judged by semats' rule (age and a dead pid): not yet older than 1 s.
    const expired = (await lsJson(dir, '--stale', '1ms'))['rust.lock']
    assert.ok(['held', 'stale'].includes(expired.state))
  })

  test("semats' format from a shell: held while its pid runs (command line shown), stale once old and dead", { skip: !linux && 'POSIX shell' }, async () => {
    sleeper = await u.shellWriteLock(path.join(dir, 'shell.lock'), { tag: 'sh', keep: true })
    const dead = await u.deadPid()
    fs.writeFileSync(path.join(dir, 'old.lock'), `pid=${dead}\ntimestamp=${u.nowS() - 7200}\ntag=old\n`)
    const locks = await lsJson(dir)
    const s = locks['shell.lock']
    assert.equal(s.state, 'held')
    assert.equal(s.reason, 'fresh') // younger than the stale timeout: held whatever its pid
    assert.equal(s.holderRunning, true)
    assert.ok(s.commandLine && s.commandLine[0].endsWith('sleep'), JSON.stringify(s.commandLine))
    const o = locks['old.lock']
    assert.equal(o.state, 'stale')
    assert.equal(o.reason, 'foreign-expired-and-not-running')
    assert.ok(o.ageS >= 7200)
    sleeper.child.kill('SIGKILL')
  })

  test('which entries are locks: *.lock, and other files whose content is a lock; not temp files or other files', async () => {
    fs.writeFileSync(path.join(dir, 'notes.txt'), 'hello\n')
    fs.writeFileSync(path.join(dir, 'job.pid'), `pid=1\ntimestamp=${u.nowS()}\n`)
    fs.writeFileSync(path.join(dir, 'x.lock.123.abcdef.tmp'), `pid=1\ntimestamp=${u.nowS()}\n`)
    fs.writeFileSync(path.join(dir, 'garbage.lock'), '\u0000\u0001binary')
    fs.mkdirSync(path.join(dir, 'sub.lock'))
    const locks = await lsJson(dir)
    assert.ok(locks['job.pid'])
    assert.equal(locks['notes.txt'], undefined)
    assert.equal(locks['x.lock.123.abcdef.tmp'], undefined)
    assert.equal(locks['sub.lock'], undefined)
    assert.equal(locks['garbage.lock'].format, 'unparseable')
    assert.equal(locks['garbage.lock'].state, 'held')
    assert.equal(locks['garbage.lock'].pid, null)
  })

  test('the text table names each lock, its state, holder, tag and waiters; listing changed nothing', async () => {
    const before = snapshot(dir)
    const r = await cli(['ls', dir])
    assert.equal(r.code, 0, r.stderr)
    const lines = r.stdout.trimEnd().split('\n')
    assert.match(lines[0], /^LOCK\s+STATE\s+PID\s+HELD FOR\s+WAITING\s+TAG\s+HOLDER$/)
    const build = lines.find((l) => l.startsWith('build.lock '))
    assert.match(build, new RegExp(`^build\\.lock\\s+held\\s+${h.child.pid}\\s+\\d+s\\s+${linux ? 2 : '-'}\\s+"nightly"\\s+\\S*node `))
    assert.match(lines.find((l) => l.startsWith('crashed.lock ')), /\sstale\s.*\(not running\)$/)
    assert.deepEqual(snapshot(dir), before)
  })

  test("the STATE column: a lock free to take while processes stand in its line is 'queued'", () => {
    const { stateText } = require('../lib/cli/ls')
    assert.equal(stateText({ state: 'held', waiters: 3 }), 'held')
    assert.equal(stateText({ state: 'stale', waiters: 2 }), 'stale, queued')
    assert.equal(stateText({ state: 'free', waiters: 1 }), 'free, queued')
    assert.equal(stateText({ state: 'stale', waiters: 0 }), 'stale')
    assert.equal(stateText({ state: 'stale', waiters: null }), 'stale')
  })

  test('errors: a missing directory exits 3 (JSON failure), a dflockd target is a usage error', async () => {
    const r = await cli(['ls', path.join(dir, 'nope'), '--json'])
    assert.equal(r.code, 3)
    const v = JSON.parse(r.stdout)
    assert.equal(v.ok, false)
    assert.equal(v.error.type, 'IO_ERROR')
    const d = await cli(['ls', 'dflockd://127.0.0.1:1/x'])
    assert.equal(d.code, 2)
  })
})

describe('ls: other users', { skip: !linux ? 'Linux only' : !root ? 'needs root, to act as another user (setpriv)' : false }, () => {
  let shared
  let decoy
  before(() => {
    shared = fs.realpathSync(u.mkTmp('ls-shared-'))
    fs.chmodSync(shared, 0o1777)
    // A valid lock file elsewhere: a followed link would show its pid 1 and tag.
    decoy = path.join(fs.realpathSync(u.mkTmp('ls-decoy-')), 'target.lock')
    fs.writeFileSync(decoy, `pid=1\ntimestamp=${u.nowS()}\ntag=followed\n`)
    u.asNobody('ln', '-s', decoy, path.join(shared, 'planted.lock'))
    // root's lock, readable by root only.
    fs.writeFileSync(path.join(shared, 'private.lock'), `pid=${process.pid}\ntimestamp=${u.nowS()}\ntag=secret\n`, { mode: 0o600 })
  })
  after(() => {
    u.rmTmp(shared)
    u.rmTmp(path.dirname(decoy))
  })

  test("a symlink planted by another user: listed as a symlink with its target, never followed", async () => {
    const before = fs.statSync(decoy)
    const l = (await lsJson(shared))['planted.lock']
    assert.equal(l.format, 'symlink')
    assert.equal(l.state, 'held')
    assert.equal(l.linkTarget, decoy)
    assert.equal(l.ownerUid, 65534)
    assert.equal(l.pid, null)
    assert.equal(l.tag, null)
    const after = fs.statSync(decoy)
    assert.deepEqual([after.ino, after.mtimeMs, after.size], [before.ino, before.mtimeMs, before.size])
    assert.ok(fs.lstatSync(path.join(shared, 'planted.lock')).isSymbolicLink())
  })

  test("as nobody: root's unreadable lock is listed as held by an unknown holder; nothing changes", async () => {
    const before = snapshot(shared)
    const r = spawnSync('setpriv', [...NOBODY, process.execPath, path.join(ROOT, 'bin', 'sema-native.js'), 'ls', shared, '--json'], { encoding: 'utf8', cwd: ROOT, timeout: 20000 })
    assert.equal(r.status, 0, r.stderr)
    const locks = Object.fromEntries(JSON.parse(r.stdout).locks.map((l) => [l.name, l]))
    assert.equal(locks['private.lock'].format, 'unparseable')
    assert.equal(locks['private.lock'].state, 'held')
    assert.equal(locks['private.lock'].tag, null)
    assert.equal(locks['private.lock'].ownerUid, 0)
    assert.equal(locks['planted.lock'].format, 'symlink')
    assert.deepEqual(snapshot(shared), before)
  })
})

describe('ls: hostile names, and the lock kinds listed as one lock each', () => {
  let dir
  const children = []
  before(() => {
    dir = fs.realpathSync(u.mkTmp('ls-kinds-'))
  })
  after(() => {
    for (const c of children) u.signalChild(c)
    u.rmTmp(dir)
  })

  test('names, tags and hosts are escaped: no escape sequence reaches the terminal, a newline forges no row', { skip: !linux && 'names with control characters' }, async () => {
    const d = fs.realpathSync(u.mkTmp('ls-names-'))
    try {
      const evil = 'evil\u001b]0;pwned\u0007\u001b[2J.lock'
      const forged = 'two\nfake.lock   held   1'
      // pid 1 always runs: both are held. The tag has a one-character CSI (C1), the host an escape sequence.
      fs.writeFileSync(path.join(d, evil), `pid=1\ntimestamp=${u.nowS()}\ntag=\u009b31mred\n`)
      fs.writeFileSync(path.join(d, forged), `pid=1\ntimestamp=${u.nowS()}\nhost=h\u001b[31m:1:2\n`)
      const r = await cli(['ls', d])
      assert.equal(r.code, 0, r.stderr)
      assert.doesNotMatch(r.stdout, /[\u001b\u0007\u009b]/, 'no control character reaches the terminal')
      const lines = r.stdout.trimEnd().split('\n')
      assert.equal(lines.length, 3, `a header and one row per lock:\n${r.stdout}`)
      assert.ok(lines.some((l) => l.startsWith('evil\\u001b]0;pwned\\u0007\\u001b[2J.lock ')), r.stdout)
      assert.ok(lines.some((l) => l.startsWith('two\\nfake.lock   held   1 ')), r.stdout)
      assert.ok(lines.some((l) => l.includes('"\\u009b31mred"')), r.stdout)
      // --json keeps the names as they are (JSON escapes them itself).
      const locks = await lsJson(d)
      assert.deepEqual(Object.keys(locks).sort(), [evil, forged].sort())
    } finally {
      u.rmTmp(d)
    }
  })

  test("a semaphore is one lock: its slot files are folded in (holders of the limit), also while slot 0 is free", async () => {
    const file = path.join(dir, 'sem.lock')
    const a = await u.holder(file, { limit: 3 })
    const b = await u.holder(file, { limit: 3 })
    children.push(a.child, b.child)
    assert.ok(fs.existsSync(`${file}.slot-1-of-3`), 'the second holder took slot 1')
    let locks = await lsJson(dir)
    assert.deepEqual(Object.keys(locks), ['sem.lock'], 'the slot file is not listed as a lock')
    const l = locks['sem.lock']
    assert.equal(l.state, 'held')
    assert.equal(l.kind, 'semaphore')
    assert.equal(l.holders, 2)
    assert.equal(l.limit, 3)
    const text = await cli(['ls', dir])
    assert.match(text.stdout, /^sem\.lock\s+held \(2 of 3\)\s/m)
    // Slot 0 (the base) released: the lock is still held, by slot 1's holder.
    assert.equal(await a.release(), true)
    locks = await lsJson(dir)
    assert.deepEqual(Object.keys(locks), ['sem.lock'])
    assert.equal(locks['sem.lock'].state, 'held')
    assert.equal(locks['sem.lock'].holders, 1)
    assert.equal(locks['sem.lock'].pid, b.child.pid)
  })

  test('a shared lock is one lock: its readers and guard are folded in, held for as long as its oldest reader', async () => {
    const file = path.join(dir, 'rw.lock')
    const first = await u.holder(file, { mode: 'shared' })
    const t0 = u.nowS()
    const second = await u.holder(file, { mode: 'shared' })
    children.push(first.child, second.child)
    // The readers' heartbeat rewrites the base every second: its own times say 0 s. Three seconds on, the
    // oldest reader has held for at least two.
    await new Promise((r) => setTimeout(r, 3000))
    const locks = await lsJson(dir)
    assert.deepEqual(Object.keys(locks).filter((n) => n.startsWith('rw.lock')), ['rw.lock'], 'readers and guard folded in')
    const l = locks['rw.lock']
    assert.equal(l.state, 'held')
    assert.equal(l.kind, 'shared')
    assert.equal(l.holders, 2)
    assert.ok(l.ageS >= 2 && l.ageS <= u.nowS() - t0 + 2, `held since the first reader: ${JSON.stringify(l)}`)
    const text = await cli(['ls', dir])
    assert.match(text.stdout, /^rw\.lock\s+held \(2 shared\)\s+\d+\s+[2-9]s\s/m)
  })
})
