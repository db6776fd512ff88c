'use strict'
// Interop both ways with the lock-file format's own examples, run for real:
// - the spec's POSIX shell writer (`echo "pid=$$" > f; echo "timestamp=$(date +%s)" >> f; ...`), an LF, a CRLF
//   (printf) and a BOM variant, read by the addon (Semaphore#getLockInfo, status(), tryAcquire refused while the
//   shell's pid lives);
// - a Python reader written from the spec (split lines, strip, split at the first '=') and `grep '^pid='` reading
//   the files the addon writes.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const u = require('./helpers/file-util')
const sema = require('..')

const HEX32 = /^[0-9a-f]{32}$/

const tmp = u.testDir('interop-', { name: 'interop' })
const { fresh } = tmp

describe('the addon reads what the spec shell example writes', () => {
  const variants = [
    { name: 'LF (echo)', opts: {} },
    { name: 'CRLF (printf)', opts: { crlf: true } },
    { name: 'UTF-8 BOM (printf)', opts: { bom: true } },
  ]
  for (const { name, opts } of variants) {
    test(`${name}: getLockInfo, status() and tryAcquire refused while the shell's pid lives`, async () => {
      const file = fresh('shell')
      const tag = `shell job ${name}`
      const t0 = u.nowS()
      const { pid, child } = await u.shellWriteLock(file, { ...opts, tag, keep: true })
      const t1 = u.nowS()
      const bytes = fs.readFileSync(file)
      if (opts.crlf) assert.ok(bytes.includes('\r\n'), 'the CRLF variant really has CRLF line ends')
      if (opts.bom) assert.deepEqual([...bytes.subarray(0, 3)], [0xef, 0xbb, 0xbf], 'the BOM variant starts with a BOM')
      assert.ok(u.pidAlive(pid))

      // Semaphore#getLockInfo
      const s = new sema.Semaphore(file)
      const info = s.getLockInfo()
      assert.ok(info, 'getLockInfo() parses the shell-written file')
      assert.equal(info.pid, pid)
      assert.ok(info.timestamp >= t0 && info.timestamp <= t1, `timestamp ${info.timestamp} within [${t0}, ${t1}]`)
      assert.equal(info.tag, tag)
      assert.equal(s.isLocked(), true)

      // Semaphore#status()
      const st = s.status()
      assert.equal(st.locked, true)
      assert.equal(st.info.pid, pid)
      assert.equal(st.info.tag, tag)
      assert.equal(st.isStale, false)
      assert.equal(st.isOwnedByCurrentProcess, false)

      // async status()
      const ast = await sema.status(file)
      assert.equal(ast.backend, 'file')
      assert.equal(ast.locked, true)
      assert.equal(ast.info.pid, pid)
      assert.equal(ast.info.timestamp, info.timestamp)
      assert.equal(ast.info.tag, tag)
      assert.equal(ast.isOwnedByCurrentProcess, false)

      // tryAcquire refused, both APIs, with the holder's pid; even with a short staleTimeout (the pid lives).
      for (const staleTimeout of [undefined, 1000]) {
        const r = await sema.tryAcquire(file, staleTimeout === undefined ? {} : { staleTimeout })
        assert.equal(r.ok, false, 'async tryAcquire must be refused')
        assert.equal(r.error.type, 'ALREADY_LOCKED')
        assert.equal(r.error.holderPid, pid)
        assert.equal(r.error.lockedSince, info.timestamp)
      }
      const r2 = s.tryAcquire('intruder')
      assert.equal(r2.ok, false)
      assert.equal(r2.error.type, 'ALREADY_LOCKED')
      assert.equal(r2.error.holderPid, pid)

      // Nothing was rewritten or added.
      assert.deepEqual(fs.readFileSync(file), bytes, 'the shell-written file is untouched')
      assert.ok(u.ls(tmp.dir).every((f) => !f.endsWith('.tmp')), `no temp files left: ${u.ls(tmp.dir)}`)

      child.kill('SIGKILL')
      await child.exited
      fs.unlinkSync(file)
    })
  }

  test('shell file without a tag and with an unknown key: tag absent, key ignored', async () => {
    const file = fresh('shell-notag')
    const { pid, child } = await u.shellWriteLock(file, { keep: true })
    fs.appendFileSync(file, 'flavour=vanilla\n')
    const info = new sema.Semaphore(file).getLockInfo()
    assert.equal(info.pid, pid)
    assert.equal(info.tag, undefined)
    const st = await sema.status(file)
    assert.equal(st.locked, true)
    assert.equal(st.info.pid, pid)
    assert.equal(st.info.tag, undefined)
    child.kill('SIGKILL')
    await child.exited
  })

  test('a Python writer (CRLF, pid of a live process): the addon reads it and refuses the lock', async (t) => {
    if (!u.python()) return t.skip('python3 not installed')
    const file = fresh('py-writer')
    const sleeper = await u.liveSleeper()
    const ts = u.nowS()
    const r = require('node:child_process').spawnSync(
      'python3',
      [
        '-c',
        'import sys\nopen(sys.argv[1],"w",newline="").write("pid=%s\\r\\ntimestamp=%s\\r\\ntag=py\\r\\n" % (sys.argv[2], sys.argv[3]))',
        file,
        String(sleeper.pid),
        String(ts),
      ],
      { encoding: 'utf8' },
    )
    assert.equal(r.status, 0, r.stderr)
    const info = new sema.Semaphore(file).getLockInfo()
    assert.deepEqual({ ...info }, { pid: sleeper.pid, timestamp: ts, tag: 'py' })
    const refused = await sema.tryAcquire(file)
    assert.equal(refused.ok, false)
    assert.equal(refused.error.type, 'ALREADY_LOCKED')
    assert.equal(refused.error.holderPid, sleeper.pid)
    sleeper.kill('SIGKILL')
  })
})

describe('the spec readers read what the addon writes', () => {
  test('Python parses pid/timestamp/tag of a lock we hold (async acquire)', async (t) => {
    if (!u.python()) return t.skip('python3 not installed')
    const file = fresh('ours-py')
    // heartbeat off: the file keeps the acquisition timestamp while Python starts (the default rewrites it every second)
    const r = await sema.acquire(file, { tag: 'python-check', timeout: 5000, heartbeat: false })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const lock = r.value
    try {
      const d = u.pythonRead(file)
      assert.equal(Number(d.pid), process.pid)
      assert.equal(d.pid, String(process.pid), 'pid is a plain decimal')
      assert.equal(Number(d.timestamp), lock.timestamp)
      assert.ok(Math.abs(Number(d.timestamp) - u.nowS()) <= u.scaled(5), 'timestamp is unix seconds, now')
      assert.equal(d.tag, 'python-check')
      assert.equal(d.token, lock.token, 'the file carries the Lock token')
      assert.match(d.token, HEX32)
    } finally {
      assert.equal(await lock.release(), true)
    }
    assert.equal(fs.existsSync(file), false)
  })

  test('layout: pid, timestamp, tag first, in that order, LF only, no BOM; extras only after them', async () => {
    const file = fresh('ours-layout')
    const r = await sema.acquire(file, { tag: 'layout' })
    assert.equal(r.ok, true)
    const text = fs.readFileSync(file, 'utf8')
    assert.ok(!text.includes('\r'), 'no CR')
    assert.notEqual(text.charCodeAt(0), 0xfeff, 'no BOM')
    assert.ok(text.endsWith('\n'), 'ends with a newline')
    const rows = text.split('\n').slice(0, -1)
    assert.equal(rows[0], `pid=${process.pid}`)
    assert.equal(rows[1], `timestamp=${r.value.timestamp}`)
    assert.equal(rows[2], 'tag=layout')
    const keys = rows.map((l) => l.slice(0, l.indexOf('=')))
    assert.equal(new Set(keys).size, keys.length, `no duplicate keys: ${keys}`)
    for (const k of keys.slice(3)) assert.ok(['host', 'start', 'token'].includes(k), `unexpected extra key ${k}`)
    assert.ok(keys.includes('host'), 'host identity recorded')
    assert.ok(keys.includes('token'), 'ownership token recorded')
    await r.value.release()
  })

  test('layout without a tag: no tag= line', async () => {
    const file = fresh('ours-notag')
    const r = await sema.acquire(file)
    assert.equal(r.ok, true)
    const rows = fs.readFileSync(file, 'utf8').split('\n')
    assert.equal(rows[0], `pid=${process.pid}`)
    assert.match(rows[1], /^timestamp=\d+$/)
    assert.ok(!rows.some((l) => l.startsWith('tag=')), 'no tag line')
    await r.value.release()
  })

  test("shell grep '^pid=' reads our pid; an injected newline in the tag adds no key line", { skip: process.platform === 'win32' && 'no POSIX shell on Windows (the Node foreign writer covers the other direction)' }, async () => {
    const file = fresh('ours-grep')
    const r = await sema.acquire(file, { tag: 'evil\npid=1\r\ntimestamp=0' })
    assert.equal(r.ok, true)
    assert.equal(u.sh(`grep '^pid=' "$1" | cut -d= -f2`, file), String(process.pid))
    assert.equal(u.sh(`grep -c '^pid=' "$1"`, file), '1')
    assert.equal(u.sh(`grep -c '^timestamp=' "$1"`, file), '1')
    assert.equal(u.sh(`grep '^tag=' "$1"`, file), 'tag=evil pid=1  timestamp=0')
    await r.value.release()
    assert.equal(u.sh(`test -e "$1" && echo present || echo absent`, file), 'absent')
  })

  test('Python reads a lock taken with the semats-compatible Semaphore#tryAcquire', async (t) => {
    if (!u.python()) return t.skip('python3 not installed')
    const file = fresh('ours-semats')
    const s = new sema.Semaphore(file, { heartbeat: false }) // the file keeps the acquisition timestamp
    const r = s.tryAcquire('semats tag = with equals')
    assert.equal(r.ok, true, JSON.stringify(r.error))
    try {
      const d = u.pythonRead(file)
      assert.equal(Number(d.pid), process.pid)
      assert.equal(Number(d.timestamp), r.value.timestamp)
      assert.equal(d.tag, 'semats tag = with equals')
      const text = fs.readFileSync(file, 'utf8')
      assert.ok(text.startsWith(`pid=${process.pid}\ntimestamp=${r.value.timestamp}\ntag=semats tag = with equals\n`))
    } finally {
      assert.equal(s.release().ok, true)
    }
  })

  test('a shell script sees the lock come and go (test -e) and reads the pid of a lock held by another node process', { skip: process.platform === 'win32' && 'no POSIX shell on Windows (the Node foreign writer covers the other direction)' }, async () => {
    const file = fresh('ours-child')
    const { child: holder, out, held } = await u.holder(file, { tag: 'child' })
    assert.equal(u.sh(`grep '^pid=' "$1" | cut -d= -f2`, file), String(holder.pid))
    assert.equal(held.pid, holder.pid)
    const d = u.python() ? u.pythonRead(file) : u.readLockKeys(file)
    assert.equal(d.tag, 'child')
    assert.equal(d.token, held.token)
    holder.stdin.write('release\n')
    await out.next(/^released true$/)
    assert.equal(u.sh(`test -e "$1" && echo present || echo absent`, file), 'absent')
    holder.stdin.end()
    const { code } = await u.waitExit(holder, 5000, 'holder')
    assert.equal(code, 0)
  })
})
