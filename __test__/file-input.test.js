'use strict'
// Bad input: empty path, NUL, `..` segments (and `a..b.lock`, which the new API accepts), missing parent directory,
// a directory where the lock file should be, an unwritable directory, a 1 MB tag, control characters in tags,
// garbage / binary / empty lock files. Each gives the documented error type, and NOTHING is left behind: after
// every failed acquire the directory listing is unchanged (no lock file, no temp files).
//
// Delivery (index.d.ts, LockError): functions that return a SemaphoreResult (`acquire`, `tryAcquire`, `release`,
// semats' methods) never reject — a bad target comes back as a failed result; `withLock` and `status` throw a
// LockError with the same code.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { pathToFileURL } = require('node:url')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('input-')

/** Snapshot of every file under `root` (names and bytes), to prove a failed call changed nothing. */
function snapshot(root) {
  const out = {}
  const walk = (d, rel) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(d, e.name)
      const r = rel ? `${rel}/${e.name}` : e.name
      if (e.isDirectory()) {
        out[`${r}/`] = 'dir'
        walk(p, r)
      } else out[r] = fs.readFileSync(p).toString('base64')
    }
  }
  walk(root, '')
  return out
}

/** Runs every acquire flavour on `target` and checks each fails with a type in `types`, changing nothing under `root`. */
async function expectRefused(target, types, root = tmp.dir, { semats = true, mustNotWait = false } = {}) {
  const before = snapshot(root)
  const flavours = {
    'tryAcquire()': () => sema.tryAcquire(target),
    'acquire({timeout: 300})': () => sema.acquire(target, { timeout: 300 }),
    'withLock()': () => sema.withLock(target, () => 'fn ran', { timeout: 300 }),
  }
  // A bad path is not contention: even without a timeout, acquire must fail at once instead of waiting.
  if (mustNotWait) {
    // (The AbortSignal only bounds a wrong wait so that it cannot hang the suite: it would show up as ABORTED.)
    flavours['acquire() without timeout'] = () =>
      u.within(sema.acquire(target, { signal: AbortSignal.timeout(3000) }), 5000, `acquire(${JSON.stringify(target)}) without timeout`)
  }
  for (const [name, fn] of Object.entries(flavours)) {
    const o = await u.outcome(fn)
    assert.ok(types.includes(o.type), `${name} on ${JSON.stringify(target)}: expected one of ${types}, got ${o.type} (${o.error?.message ?? JSON.stringify(o.value)})`)
    if (name === 'withLock()') {
      assert.equal(o.delivered, 'throw', 'withLock rejects')
      assert.ok(o.error instanceof sema.LockError, `${name}: rejects with a LockError, got ${o.error}`)
    } else {
      assert.equal(o.delivered, 'result', `${name} resolves a failed result, never rejects (got ${o.error})`)
    }
    assert.deepEqual(snapshot(root), before, `${name} on ${JSON.stringify(target)}: nothing created or changed`)
  }
  if (semats) {
    // The semats-compatible class: constructor throws (semats) or the call returns the same failure types.
    let s
    try {
      s = new sema.Semaphore(target)
    } catch (e) {
      assert.ok(e instanceof Error)
      assert.deepEqual(snapshot(root), before)
      return
    }
    const r = s.tryAcquire()
    assert.equal(r.ok, false, `Semaphore#tryAcquire on ${JSON.stringify(target)} must fail`)
    assert.ok(types.includes(r.error.type), `Semaphore#tryAcquire: ${r.error.type}`)
    assert.deepEqual(snapshot(root), before, 'Semaphore#tryAcquire: nothing created or changed')
  }
}

describe('invalid paths', () => {
  test('empty path → INVALID_PATH', async () => {
    await expectRefused('', ['INVALID_PATH'], tmp.dir, { semats: false, mustNotWait: true })
    const st = await u.outcome(() => sema.status(''))
    assert.equal(st.delivered, 'throw', 'status() rejects for a bad target')
    assert.ok(st.error instanceof sema.LockError)
  })

  test('release() and status() on bad targets: release resolves a failed result, status rejects a LockError', async () => {
    for (const [target, type] of [
      ['', 'INVALID_PATH'],
      [path.join(tmp.dir, 'a\0b.lock'), 'INVALID_PATH'],
      [`${tmp.dir}/sub/../x.lock`, 'PATH_TRAVERSAL'],
    ]) {
      const r = await u.outcome(() => sema.release(target))
      assert.equal(r.delivered, 'result', `release(${JSON.stringify(target)}) never rejects`)
      assert.equal(r.type, type)
      const f = await u.outcome(() => sema.release(target, { force: true }))
      assert.equal(f.type, type)
      const st = await u.outcome(() => sema.status(target))
      assert.equal(st.delivered, 'throw')
      assert.ok(st.error instanceof sema.LockError)
      assert.equal(st.error.code, type)
    }
  })

  test('NUL in path → INVALID_PATH', async () => {
    await expectRefused(path.join(tmp.dir, 'a\0b.lock'), ['INVALID_PATH'], tmp.dir, { mustNotWait: true })
    await expectRefused(`${path.join(tmp.dir, 'nul.lock')}\0`, ['INVALID_PATH'], tmp.dir, { mustNotWait: true })
  })

  test('`..` segments → PATH_TRAVERSAL, nothing created on either side', async () => {
    const sub = path.join(tmp.dir, 'sub')
    fs.mkdirSync(sub, { recursive: true })
    await expectRefused(`${sub}/../escape.lock`, ['PATH_TRAVERSAL'], tmp.dir, { mustNotWait: true })
    await expectRefused(`${sub}/..`, ['PATH_TRAVERSAL', 'INVALID_PATH', 'IO_ERROR'])
    await expectRefused(`${tmp.dir}/sub/../../x.lock`, ['PATH_TRAVERSAL'], tmp.dir, { mustNotWait: true })
    assert.equal(fs.existsSync(path.join(tmp.dir, 'escape.lock')), false)
  })

  test('`a..b.lock` (dots inside a name) is accepted by the new API', async () => {
    const file = path.join(tmp.dir, 'a..b.lock')
    const r = await sema.tryAcquire(file)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.ok(fs.existsSync(file))
    assert.equal(await r.value.release(), true)
    const v = await sema.withLock(path.join(tmp.dir, 'x..y..z.lock'), () => 42)
    assert.equal(v, 42)
    assert.equal(fs.existsSync(path.join(tmp.dir, 'x..y..z.lock')), false)
  })

  test('missing parent directory → INVALID_PATH or IO_ERROR at once (never a wait), nothing created', async () => {
    const missing = path.join(tmp.dir, 'no-such-dir', 'x.lock')
    await expectRefused(missing, ['INVALID_PATH', 'IO_ERROR'], tmp.dir, { mustNotWait: true })
    assert.equal(fs.existsSync(path.dirname(missing)), false, 'the parent is not created')
    await expectRefused(pathToFileURL(missing).href, ['INVALID_PATH', 'IO_ERROR'], tmp.dir, { semats: false, mustNotWait: true })
  })

  test('a directory where the lock file should be: refused, the directory and its content untouched', async () => {
    const d = path.join(tmp.dir, 'dir-as.lock')
    fs.mkdirSync(d)
    fs.writeFileSync(path.join(d, 'inside'), 'keep me')
    await expectRefused(d, ['IO_ERROR', 'ALREADY_LOCKED', 'TIMEOUT', 'INVALID_PATH'])
    // Even when it looks "old" and the stale timeout is tiny, it is not removed.
    u.backdate(d, 3600)
    const r = await sema.tryAcquire(d, { staleTimeout: 100 })
    assert.equal(r.ok, false)
    assert.ok(['IO_ERROR', 'ALREADY_LOCKED', 'INVALID_PATH'].includes(r.error.type), r.error.type)
    assert.equal(fs.readFileSync(path.join(d, 'inside'), 'utf8'), 'keep me')
    assert.equal(new sema.Semaphore(d, { staleTimeout: 100 }).cleanStale(), false)
    assert.ok(fs.statSync(d).isDirectory())
    fs.rmSync(d, { recursive: true })
  })

  test('an empty directory where the lock file should be is not removed either', async () => {
    const d = path.join(tmp.dir, 'emptydir-as.lock')
    fs.mkdirSync(d)
    u.backdate(d, 3600)
    const r = await sema.tryAcquire(d, { staleTimeout: 100 })
    assert.equal(r.ok, false)
    assert.ok(fs.statSync(d).isDirectory(), 'still there')
    const rel = await sema.release(d, { force: true })
    assert.ok(fs.statSync(d).isDirectory(), 'force release does not rmdir it')
    assert.equal(rel.ok, false)
    fs.rmdirSync(d)
  })
})

describe('unwritable directory', () => {
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
  const skipRo =
    (process.platform === 'win32' && 'Windows: chmod does not make a directory unwritable (ACLs do)') ||
    (isRoot && 'running as root, which can write anywhere (see the next test, run as uid 65534)')
  test('unwritable directory → IO_ERROR (or PERMISSION_DENIED), nothing left behind', { skip: skipRo }, async () => {
    const ro = path.join(tmp.dir, 'ro')
    fs.mkdirSync(ro)
    fs.chmodSync(ro, 0o555)
    try {
      await expectRefused(path.join(ro, 'x.lock'), ['IO_ERROR', 'PERMISSION_DENIED'], ro, { mustNotWait: true })
    } finally {
      fs.chmodSync(ro, 0o755)
    }
  })

  test('unwritable directory, as an unprivileged child (uid 65534) when the suite runs as root', { skip: !isRoot && 'not root (covered by the previous test)', timeout: u.scaled(20000) }, async (t) => {
    const base = path.join(tmp.dir, 'nobody')
    fs.mkdirSync(base)
    fs.chmodSync(tmp.dir, 0o755)
    fs.chmodSync(base, 0o755) // owned by root: not writable for uid 65534
    const probe = require('node:child_process').spawnSync(process.execPath, ['-e', `require(${JSON.stringify(u.ROOT)})`], {
      uid: 65534,
      gid: 65534,
      encoding: 'utf8',
    })
    if (probe.status !== 0) return t.skip(`uid 65534 cannot load the package: ${probe.stderr.split('\n')[0]}`)
    const res = await u.runNode('file-input-child.js', [path.join(base, 'x.lock')], 15000, { uid: 65534, gid: 65534 })
    assert.equal(res.code, 0, res.stdout + res.stderr)
    const report = JSON.parse(res.stdout.trim().split('\n').pop())
    for (const [name, type] of Object.entries(report.types)) {
      assert.ok(['IO_ERROR', 'PERMISSION_DENIED'].includes(type), `${name}: ${type}`)
    }
    assert.deepEqual(u.ls(base), [], 'nothing left behind')
  })
})

describe('tags', () => {
  test('a 1 MB tag is cut to maxTagLength (default 10000), both APIs', async () => {
    const big = 'x'.repeat(1024 * 1024)
    const file = path.join(tmp.dir, 'bigtag.lock')
    const r = await sema.acquire(file, { tag: big })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(u.readLockKeys(file).tag, 'x'.repeat(10000))
    assert.equal(new sema.Semaphore(file).getLockInfo().tag.length, 10000)
    assert.ok(fs.statSync(file).size < 10000 + 300, 'the file stays small')
    await r.value.release()

    const s = new sema.Semaphore(file)
    assert.equal(s.tryAcquire(big).ok, true)
    assert.equal(s.getLockInfo().tag, 'x'.repeat(10000))
    assert.equal(s.release().ok, true)

    const s100 = new sema.Semaphore(file, { maxTagLength: 100 })
    assert.equal(s100.tryAcquire('€'.repeat(5000)).ok, true)
    assert.equal(s100.getLockInfo().tag, '€'.repeat(100))
    assert.equal(s100.release().ok, true)

    const r2 = await sema.acquire(file, { tag: big, maxTagLength: 7 })
    assert.equal(r2.ok, true)
    assert.equal(u.readLockKeys(file).tag, 'xxxxxxx')
    await r2.value.release()
    assert.deepEqual(u.ls(tmp.dir).filter((f) => f.startsWith('bigtag')), [])
  })

  test('control characters (C0 and DEL) in tags become spaces; one line per key', async () => {
    const file = path.join(tmp.dir, 'ctl.lock')
    const tag = 'a\x00b\tc\nd\re\x1bf\x7fg\x01h\x1fi'
    const want = 'a b c d e f g h i'
    const r = await sema.acquire(file, { tag })
    assert.equal(r.ok, true)
    const text = fs.readFileSync(file, 'utf8')
    assert.ok(text.includes(`\ntag=${want}\n`), JSON.stringify(text))
    assert.equal(text.match(/^pid=/gm).length, 1)
    assert.equal(text.match(/^timestamp=/gm).length, 1)
    assert.ok(!/[\x00-\x09\x0b-\x1f\x7f]/.test(text), 'no control characters but LF in the file')
    assert.equal(new sema.Semaphore(file).getLockInfo().tag, want)
    assert.equal((await sema.status(file)).info.tag, want)
    await r.value.release()

    const s = new sema.Semaphore(file)
    assert.equal(s.tryAcquire(tag).ok, true)
    assert.equal(s.getLockInfo().tag, want)
    s.release()
    assert.equal(sema.serializeLockInfo({ pid: 1, timestamp: 2, tag }), `pid=1\ntimestamp=2\ntag=${want}\n`)
  })
})

describe('garbage, binary and empty lock files: held, owner unknown, never rewritten', () => {
  const cases = {
    empty: '',
    whitespace: ' \n\t\n',
    '===': '===',
    '=1234': '=1234\n',
    'pid=abc': 'pid=abc\ntimestamp=1\n',
    'NUL separated': 'pid=123\0timestamp=0\0tag=test',
    'lone CR': 'pid=1\rtimestamp=2\r',
    binary: Buffer.from(Array.from({ length: 512 }, (_, i) => (i * 7919 + 13) % 256)),
    '1 MB garbage': Buffer.alloc(1024 * 1024, 'not a lock ').fill(0xff, 1000, 2000),
  }
  for (const [name, body] of Object.entries(cases)) {
    test(name, async () => {
      const file = path.join(tmp.dir, 'garbage.lock')
      fs.writeFileSync(file, body)
      await expectRefused(file, ['ALREADY_LOCKED', 'TIMEOUT'])
      const r = await sema.tryAcquire(file)
      assert.equal(r.error.type, 'ALREADY_LOCKED')
      assert.equal(r.error.holderPid, undefined, 'owner unknown')
      const s = new sema.Semaphore(file)
      assert.equal(s.getLockInfo(), null)
      assert.equal(s.isLocked(), true)
      const st = await sema.status(file)
      assert.equal(st.locked, true, 'status: the file exists, so it is locked (index.d.ts)')
      assert.equal(st.info, null)
      assert.equal(s.status().locked, true)
      fs.unlinkSync(file)
    })
  }
})
