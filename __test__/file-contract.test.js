'use strict'
// Smaller points of the API contract:
// - after `release(path)` the Lock handle says `released: true` (and its own release() resolves false);
// - a withLock whose fn releases the lock itself resolves normally (not LOCK_LOST);
// - a read-only directory gives PERMISSION_DENIED with the path in the message (as an unprivileged child when the
//   suite runs as root);
// - a URL-looking target with an unknown or misspelt scheme (`dflockd:nightly`) is refused with INVALID_ARGUMENT,
//   in the API and the CLI, instead of becoming a lock file of that name; plain relative paths with a one-letter
//   "scheme" (a Windows drive letter) stay paths;
// - the CLI refuses a path whose bytes are not UTF-8 (Node's argv would name another file) and locks nothing;
// - `new LockError('x').code` is IO_ERROR.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const sema = require('..')

const BIN = path.join(u.ROOT, 'bin', 'sema-native.js')
const tmp = u.testDir('contract-', { name: 'c' })
const { fresh } = tmp

describe('Lock handle state', () => {
  test('release(path) of a held lock: the handle says released, its release() resolves false', async () => {
    const file = fresh()
    const r = await sema.acquire(file)
    assert.equal(r.ok, true)
    const rel = await sema.release(file)
    assert.deepEqual(rel, { ok: true, value: undefined })
    assert.equal(r.value.released, true)
    assert.equal(r.value.signal.aborted, false, 'released, not lost')
    assert.equal(await r.value.release(), false)
    assert.equal(fs.existsSync(file), false)
  })

  test('withLock whose fn releases the lock itself resolves with fn\'s value', async () => {
    const file = fresh()
    const v = await sema.withLock(file, async (lock) => {
      assert.equal(await lock.release(), true)
      return 42
    })
    assert.equal(v, 42)
    assert.equal(fs.existsSync(file), false)
  })

  test('withLock whose lock is lost while fn runs still rejects with LOCK_LOST', async () => {
    const file = fresh()
    await assert.rejects(
      sema.withLock(file, () => fs.unlinkSync(file)),
      (e) => e instanceof sema.LockError && e.code === 'LOCK_LOST',
    )
  })
})

describe('read-only directory → PERMISSION_DENIED naming the path', () => {
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
  test('every acquire flavour', { timeout: u.scaled(20_000) }, async (t) => {
    const ro = path.join(tmp.dir, 'ro')
    fs.mkdirSync(ro)
    fs.chmodSync(tmp.dir, 0o755)
    fs.chmodSync(ro, isRoot ? 0o755 : 0o555) // root's directory is read-only for uid 65534
    const file = path.join(ro, 'x.lock')
    const script = `
      const sema = require(${JSON.stringify(u.ROOT)})
      const file = process.argv[1]
      ;(async () => {
        const out = {}
        const take = (r) => (r.ok ? 'OK' : { type: r.error.type, message: r.error.message })
        out.tryAcquire = take(await sema.tryAcquire(file))
        out.acquire = take(await sema.acquire(file, { timeout: 300 }))
        out.semats = take(new sema.Semaphore(file).tryAcquire())
        out.sematsAcquire = take(await new sema.Semaphore(file).acquire({ timeout: 300 }))
        console.log(JSON.stringify(out))
      })()
    `
    const opts = isRoot ? { uid: 65534, gid: 65534, encoding: 'utf8' } : { encoding: 'utf8' }
    const res = spawnSync(process.execPath, ['-e', script, file], { ...opts, timeout: u.scaled(15_000) })
    if (isRoot && res.status !== 0 && /EACCES|Cannot find module/.test(res.stderr)) {
      return t.skip(`uid 65534 cannot load the package: ${res.stderr.split('\n')[0]}`)
    }
    assert.equal(res.status, 0, res.stderr)
    const out = JSON.parse(res.stdout.trim())
    for (const [name, r] of Object.entries(out)) {
      assert.equal(r.type, 'PERMISSION_DENIED', `${name}: ${JSON.stringify(r)}`)
      assert.ok(r.message.includes(file), `${name}: the message names the lock file: ${r.message}`)
    }
    assert.deepEqual(u.ls(ro), [], 'nothing left behind')
  })
})

describe('targets that look like URLs', () => {
  test("acquire('dflockd:nightly') and other unknown schemes → INVALID_ARGUMENT, no file", async () => {
    const cwd = process.cwd()
    process.chdir(tmp.dir)
    try {
      for (const target of ['dflockd:nightly', 'dflockd:/host/key', 'dflock://host/key', 'http://x/y', 'redis:lock']) {
        for (const fn of [sema.acquire, sema.tryAcquire]) {
          const r = await fn(target, { timeout: 0 })
          assert.equal(r.ok, false, target)
          assert.equal(r.error.type, 'INVALID_ARGUMENT', target)
          assert.match(r.error.message, /unsupported target/)
        }
      }
      assert.match((await sema.acquire('dflockd:nightly', { timeout: 0 })).error?.message ?? 'acquired a file', /dflockd:\/\/host\[:port\]\/key/)
      assert.deepEqual(u.ls(tmp.dir).filter((f) => f.includes(':')), [], 'no file named like the target')
      // A one-letter prefix is a drive letter, and ./ makes any name a path.
      for (const target of ['c:x.lock', './dflockd:nightly']) {
        const r = await sema.acquire(target)
        assert.equal(r.ok, true, `${target}: ${r.ok || r.error.message}`)
        assert.ok(fs.existsSync(path.join(tmp.dir, target)))
        assert.equal(await r.value.release(), true)
      }
    } finally {
      process.chdir(cwd)
    }
  })

  test('the CLI refuses it too (usage error, exit 2), nothing created', () => {
    const res = spawnSync(process.execPath, [BIN, 'acquire', 'dflockd:nightly', '--pid', String(process.pid)], {
      cwd: tmp.dir,
      encoding: 'utf8',
      timeout: 15_000,
    })
    assert.equal(res.status, 2, res.stderr)
    assert.match(res.stderr, /unsupported target 'dflockd:nightly'/)
    assert.deepEqual(u.ls(tmp.dir).filter((f) => f.includes(':')), [])
  })
})

test('CLI: a path whose bytes are not UTF-8 is refused (exit 2), and no file of any name is created', { skip: process.platform !== 'linux' && 'needs raw argv bytes from a POSIX shell' }, () => {
  const sub = path.join(tmp.dir, 'bytes')
  fs.mkdirSync(sub)
  // printf's octal escape puts the byte 0xFF into the argument.
  const script = `exec "${process.execPath}" "${BIN}" acquire "$(printf '${sub}/x\\377.lock')" --pid $$ --json`
  const res = spawnSync('sh', ['-c', script], { encoding: 'utf8', timeout: u.scaled(15_000) })
  assert.equal(res.status, 2, res.stdout + res.stderr)
  assert.match(res.stderr, /argument 2 is not valid UTF-8/)
  assert.deepEqual(fs.readdirSync(sub), [], 'neither the raw name nor the U+FFFD one was locked')
  // A real U+FFFD (valid UTF-8) is a name like any other.
  const ok = spawnSync(process.execPath, [BIN, 'try-acquire', path.join(sub, 'y\uFFFD.lock'), '--pid', String(process.pid), '-q'], { encoding: 'utf8', timeout: u.scaled(15_000) })
  assert.equal(ok.status, 0, ok.stderr)
  assert.deepEqual(fs.readdirSync(sub), ['y\uFFFD.lock'])
})

test("new LockError('x').code is IO_ERROR", () => {
  const e = new sema.LockError('x')
  assert.equal(e.code, 'IO_ERROR')
  assert.equal(e.type, 'IO_ERROR')
})
