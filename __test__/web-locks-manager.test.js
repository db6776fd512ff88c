'use strict'
// createLockManager beyond the WPT cases: how names map to lock files (injective, safe, reversible, also for
// another process's query), bad bases and options, a failed request leaving nothing behind, a held lock not
// keeping a process alive, and the per-user `locks` directory against another user (setpriv, as
// file-security.test.js): created 0700, a symlink or another user's directory in its place refused.

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const wl = require('./helpers/web-locks')
const { createLockManager, locks, LockError, acquire } = require('..')
const { stemOf, nameOfStem } = require('../lib/locks/names')
const { FileBackend } = require('../lib/locks/file-backend')
const { defaultDir } = require('../lib/locks/user-dir')

const NAMES = [
  '', '.', '..', '/', '\\', 'a/b', '../../etc/passwd', 'A', 'a', 'É', 'é', 'e\u0301', '\u0000', 'abc\x00def', '\uD800',
  '\uDC00\uD800', '\uFFFF', '\uFFFD', '😀', ' ', '%41', '%2541', '~', '#', 'wl-a', 'x-anything', 'con', 'nul.txt',
  'a.lock', 'a.tmp', '.hidden', 'x'.repeat(200), 'x'.repeat(300), 'y'.repeat(300), '\u0100'.repeat(100),
]

describe('names → lock files', () => {
  let dir
  before(() => {
    dir = u.mkTmp('web-locks-names-')
  })
  after(() => u.rmTmp(dir))

  test('every name maps to one safe file name in the directory, distinct even on a case-insensitive file system', () => {
    const b = new FileBackend(dir)
    const files = NAMES.map((n) => b.path(n))
    for (const [i, f] of files.entries()) {
      assert.equal(path.dirname(f), dir, JSON.stringify(NAMES[i]))
      const base = path.basename(f)
      assert.match(base, /^wl[-#][a-z0-9_%~-]*\.lock$/, JSON.stringify(NAMES[i]))
      assert.ok(Buffer.byteLength(base) <= 255, `${base.length} bytes`)
    }
    assert.equal(new Set(files.map((f) => f.toLowerCase())).size, NAMES.length, 'injective, ignoring case')
  })

  test('the encoding is reversible (hashed long names excepted, which their holder writes into its tag)', () => {
    for (const n of NAMES) {
      const stem = stemOf(n)
      assert.equal(nameOfStem(stem), stem.startsWith('wl#') ? undefined : n, JSON.stringify(n))
    }
    assert.equal(nameOfStem('wl-%4'), null)
    assert.equal(nameOfStem('wl-A'), null)
    assert.equal(nameOfStem('wl-~0041'), null, 'one name, one encoding')
    assert.equal(nameOfStem('build'), null)
  })

  test('all names held at once are distinct locks, and no file is made outside the directory', async () => {
    const m = createLockManager(dir)
    let release
    const gate = new Promise((r) => {
      release = r
    })
    let granted = 0
    let all
    const allGranted = new Promise((r) => {
      all = r
    })
    const held = NAMES.map((n) =>
      m.request(n, { ifAvailable: true }, async (lock) => {
        assert.notEqual(lock, null, `${JSON.stringify(n)} was not free: two names share a lock`)
        assert.equal(lock.name, n)
        if (++granted === NAMES.length) all()
        await gate
      }),
    )
    await allGranted
    assert.equal(u.ls(dir).length, NAMES.length)
    const q = await m.query()
    assert.deepEqual(q.held.map((h) => h.name).sort(), [...NAMES].sort())
    release()
    await Promise.all(held)
    assert.deepEqual(u.ls(dir), [], 'every lock file removed on release')
  })

  test("another process's query() reads the names back, also a hashed long one", async () => {
    const long = `${'z'.repeat(300)}/../é`
    const { child, kill } = await wl.holder(dir, long)
    try {
      const q = await createLockManager(dir).query()
      assert.deepEqual(q.held.map((h) => h.name), [long])
      assert.equal(q.held[0].pid, child.pid)
    } finally {
      await kill()
    }
  })
})

describe('bad input', () => {
  test('createLockManager refuses a bad base or an option with INVALID_ARGUMENT, with the token redacted', () => {
    for (const [base, options, re] of [
      [undefined, undefined, /directory or a dflockd/],
      ['', undefined, /directory or a dflockd/],
      ['/tmp', { limit: 2 }, /unknown createLockManager option 'limit'/],
      ['dflockd://s3cret@127.0.0.1:99999', undefined, /^invalid dflockd URL: dflockd:\/\/\*\*\*@127\.0\.0\.1:99999$/],
      ['dflockd://s3cret@127.0.0.1:6388/app#frag', undefined, /dflockd/],
      ['http://example.com/x', undefined, /unsupported target/],
    ]) {
      assert.throws(
        () => createLockManager(base, options),
        (e) => {
          assert.ok(e instanceof LockError, String(e))
          assert.equal(e.code, 'INVALID_ARGUMENT')
          assert.match(e.message, re)
          assert.doesNotMatch(e.message, /s3cret/)
          return true
        },
      )
    }
  })

  test('request() refuses an option LockOptions does not have (TypeError, nearest name; timeout: use a signal), nothing taken', async () => {
    const dir = u.mkTmp('web-locks-options-')
    try {
      const m = createLockManager(dir)
      for (const [options, message] of [
        [{ ifavailable: true }, /^LockManager\.request: unknown option 'ifavailable' \(did you mean 'ifAvailable'\?\)$/],
        [{ Mode: 'shared' }, /unknown option 'Mode' \(did you mean 'mode'\?\)/],
        [{ mode: 'shared', stael: true }, /unknown option 'stael' \(did you mean 'steal'\?\)/],
        [{ wait: false }, /unknown option 'wait' \(known: mode, ifAvailable, steal, signal\)/],
        [{ timeout: 100 }, /^LockManager\.request: there is no option 'timeout': pass signal: AbortSignal\.timeout\(ms\) instead/],
      ]) {
        await assert.rejects(
          m.request('x', options, () => assert.fail(`callback ran with ${JSON.stringify(options)}`)),
          (e) => e instanceof TypeError && message.test(e.message),
          JSON.stringify(options),
        )
      }
      assert.deepEqual(await m.query(), { held: [], pending: [] })
      assert.deepEqual(u.ls(dir), [])
      // The spec's own members are still converted as WebIDL does, and an option left undefined is no option.
      assert.equal(await m.request('x', { ifAvailable: 1, mode: undefined, signal: undefined }, (l) => l.mode), 'exclusive')
      // What the hint says works: a request not granted in time (another holder has the name) rejects with the
      // signal's TimeoutError.
      const other = await acquire(new FileBackend(dir).path('x'))
      assert.ok(other.ok, JSON.stringify(other.error))
      try {
        await assert.rejects(m.request('x', { signal: AbortSignal.timeout(50) }, () => assert.fail('granted')), { name: 'TimeoutError' })
      } finally {
        await other.value.release()
      }
    } finally {
      u.rmTmp(dir)
    }
  })

  test('a request on a missing directory rejects with a LockError and leaves nothing behind; the next one works', async () => {
    const parent = u.mkTmp('web-locks-missing-')
    try {
      const dir = path.join(parent, 'not-yet')
      const m = createLockManager(dir)
      // The directory itself is what is missing (not a "parent directory"): the message names it as the manager's.
      const missing = new RegExp(`^the LockManager's directory does not exist: ${dir.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(createLockManager\\(dir\\) uses an existing directory; create it first\\)$`)
      await assert.rejects(m.request('x', () => assert.fail('granted')), (e) => e instanceof LockError && e.code === 'INVALID_PATH' && missing.test(e.message))
      await assert.rejects(m.request('x', { steal: true }, () => assert.fail('granted')), (e) => e instanceof LockError && missing.test(e.message))
      assert.deepEqual(u.ls(parent), [])
      assert.deepEqual((await m.query()).pending, [])
      fs.mkdirSync(dir)
      assert.equal(await m.request('x', (lock) => lock.name), 'x')
    } finally {
      u.rmTmp(parent)
    }
  })

  test('a held lock whose callback never settles does not keep the process alive', async () => {
    const dir = u.mkTmp('web-locks-alive-')
    try {
      const src = `require(${JSON.stringify(path.resolve(__dirname, '..'))}).createLockManager(${JSON.stringify(dir)})` +
        `.request('x', () => { console.log('held'); return new Promise(() => {}) })`
      const child = u.spawnTracked(process.execPath, ['-e', src])
      const r = await u.waitExit(child, 15000, 'idle holder')
      assert.equal(r.code, 0, r.stderr)
      assert.equal(r.stdout.trim(), 'held')
      assert.deepEqual(u.ls(dir), [], 'released at exit')
    } finally {
      u.rmTmp(dir)
    }
  })
})

const linux = process.platform === 'linux'
const root = typeof process.getuid === 'function' && process.getuid() === 0
const asOther = !linux ? 'Linux only' : !root ? 'needs root, to act as another user (setpriv)' : false
const { NOBODY } = u

describe('the per-user `locks` directory', () => {
  test('`locks` is shared by every process of the user: a child holds, this process sees it taken', async () => {
    const name = `locks-${process.pid}`
    const src = `require(${JSON.stringify(path.resolve(__dirname, '..'))}).locks` +
      `.request(${JSON.stringify(name)}, () => { console.log('held'); return new Promise(() => {}) }); setInterval(() => {}, 1e9)`
    const child = u.spawnTracked(process.execPath, ['-e', src])
    await u.lines(child).next(/^held$/, 15000)
    try {
      assert.equal(await locks.request(name, { ifAvailable: true }, (lock) => lock), null)
      const q = await locks.query()
      assert.deepEqual(q.held.filter((h) => h.name === name).map((h) => h.pid), [child.pid])
      if (process.platform !== 'win32') {
        const st = fs.lstatSync(defaultDir())
        assert.ok(st.isDirectory())
        assert.equal(st.mode & 0o777, 0o700)
        assert.equal(st.uid, process.getuid())
      }
    } finally {
      child.kill('SIGKILL')
      await child.exited
    }
  })

  describe('against another user (nobody, through setpriv)', { skip: asOther }, () => {
    let pkg
    let shared
    before(() => {
      pkg = u.packageForOtherUsers('web-locks-user-dir.js', 'web-locks-holder.js')
      shared = fs.realpathSync(u.mkTmp('web-locks-shared-'))
      fs.chmodSync(shared, 0o1777) // as /tmp
    })
    after(() => {
      u.rmTmp(shared)
      u.rmTmp(pkg && pkg.dir)
    })

    function run(asNobody, rootDir) {
      const cmd = asNobody ? ['setpriv', [...NOBODY, process.execPath, pkg.paths[0], rootDir]] : [process.execPath, [pkg.paths[0], rootDir]]
      const r = spawnSync(cmd[0], cmd[1], { encoding: 'utf8', timeout: 20000 })
      assert.equal(r.status, 0, r.stderr)
      return JSON.parse(r.stdout)
    }

    test('made 0700 and usable by its user (root and nobody each get their own)', () => {
      const me = run(false, shared)
      assert.deepEqual(me, { ok: true, dir: path.join(shared, 'sema-native-locks-0'), mode: '700', granted: 'deploy' })
      const other = run(true, shared)
      assert.deepEqual(other, { ok: true, dir: path.join(shared, 'sema-native-locks-65534'), mode: '700', granted: 'deploy' })
      assert.equal(fs.statSync(other.dir).uid, 65534)
    })

    test('a symlink planted by another user in its place is refused, and its target untouched', () => {
      const d = fs.realpathSync(u.mkTmp('web-locks-sym-'))
      fs.chmodSync(d, 0o1777)
      const target = fs.realpathSync(u.mkTmp('web-locks-victim-'))
      try {
        spawnSync('setpriv', [...NOBODY, 'ln', '-s', target, path.join(d, 'sema-native-locks-0')])
        assert.ok(fs.lstatSync(path.join(d, 'sema-native-locks-0')).isSymbolicLink())
        const r = run(false, d)
        assert.equal(r.ok, false)
        assert.equal(r.code, 'INVALID_PATH')
        assert.match(r.message, /symbolic link/)
        assert.deepEqual(u.ls(target), [])
      } finally {
        u.rmTmp(d)
        u.rmTmp(target)
      }
    })

    test("a directory made by another user in its place is refused (and nobody's made by root is refused to nobody)", () => {
      const d = fs.realpathSync(u.mkTmp('web-locks-owner-'))
      fs.chmodSync(d, 0o1777)
      try {
        spawnSync('setpriv', [...NOBODY, 'mkdir', '-m', '700', path.join(d, 'sema-native-locks-0')])
        const r = run(false, d)
        assert.equal(r.code, 'INVALID_PATH')
        assert.match(r.message, /owned by uid 65534/)
        fs.mkdirSync(path.join(d, 'sema-native-locks-65534'), { mode: 0o700 })
        const o = run(true, d)
        assert.equal(o.code, 'INVALID_PATH')
        assert.match(o.message, /owned by uid 0/)
      } finally {
        u.rmTmp(d)
      }
    })

    test('its own directory left open to others is refused until it is closed', () => {
      const d = fs.realpathSync(u.mkTmp('web-locks-mode-'))
      try {
        fs.mkdirSync(path.join(d, 'sema-native-locks-0'))
        fs.chmodSync(path.join(d, 'sema-native-locks-0'), 0o777)
        const r = run(false, d)
        assert.equal(r.code, 'INVALID_PATH')
        assert.match(r.message, /mode is 777/)
        fs.chmodSync(path.join(d, 'sema-native-locks-0'), 0o700)
        assert.equal(run(false, d).ok, true)
      } finally {
        u.rmTmp(d)
      }
    })
  })
})
