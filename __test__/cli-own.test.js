'use strict'
// sema-native's own commands (acquire, try-acquire, release, status, clean, wait): output, JSON shapes, exit
// codes (0 ok, 1 busy/timeout/refused, 2 usage, 3 error), the owner pid rules (--pid, else the parent process)
// and the `--pid $$` recipe from a real shell. Real processes throughout.

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { cli, spawnText, mkTmp, rmTmp, deadPid, writeLock, writeOldLiveLock, BIN } = require('./fixtures/cli/helpers')

const ME = process.pid

let dir
let n = 0
before(() => {
  dir = mkTmp('own-')
})
after(() => rmTmp(dir))

function lockPath() {
  return path.join(dir, `l${++n}.lock`)
}

function json(r) {
  assert.equal(r.stdout.split('\n').length, 2, `one line of JSON: ${JSON.stringify(r.stdout)}`)
  return JSON.parse(r.stdout)
}

describe('own CLI: help, version, usage errors', { concurrency: true }, () => {
  it('--help, -h, help <command>, <command> --help: stdout, exit 0', async () => {
    for (const args of [['--help'], ['-h'], ['help']]) {
      const r = await cli(args)
      assert.equal(r.code, 0)
      assert.match(r.stdout, /^Usage: sema-native <command> <target> \[options\]\n/)
      assert.match(r.stdout, /Exit codes:/)
      assert.equal(r.stderr, '')
    }
    for (const cmd of ['acquire', 'try-acquire', 'release', 'status', 'clean', 'wait', 'run']) {
      for (const args of [[cmd, '--help'], ['help', cmd], [cmd, 'x.lock', '-h']]) {
        const r = await cli(args)
        assert.equal(r.code, 0, args.join(' '))
        assert.ok(r.stdout.startsWith(`Usage: sema-native ${cmd} <target>`), r.stdout)
      }
    }
  })

  it('--version prints the package version', async () => {
    const r = await cli(['--version'])
    const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', 'package.json'), 'utf8'))
    assert.deepEqual(r, { code: 0, signal: null, stdout: `sema-native ${pkg.version}\n`, stderr: '' })
  })

  it('usage errors exit 2 with a message on stderr (JSON on stdout with --json)', async () => {
    const p = lockPath()
    const cases = [
      [[], /^Usage: sema-native/],
      [['frob', p], /^sema-native: unknown command: frob\nTry 'sema-native --help'\.\n$/],
      [['acquire'], /^sema-native: acquire needs a <target>\nTry 'sema-native acquire --help'\.\n$/],
      [['acquire', p, '--bogus'], /^sema-native: unknown option: --bogus\n/],
      [['acquire', p, '--timeout', 'soon'], /^sema-native: --timeout: 'soon' is not a time/],
      [['acquire', p, '--timeout'], /^sema-native: --timeout needs a value\n/],
      [['acquire', p, '--force'], /^sema-native: acquire does not take --force\n/],
      [['status', p, 'extra'], /^sema-native: unexpected argument: extra\n/],
      [['acquire', p, '--pid', 'abc'], /^sema-native: --pid: 'abc' is not a process id\n/],
      [['release', p, '--pid', '0'], /^sema-native: --pid: '0' is not a process id\n/],
      [['release', p, '--force', '--pid', '5'], /^sema-native: --force and --pid cannot be combined\n/],
      [['run', p], /^sema-native: run needs a command/],
      [['run', p, '--json', '--', 'true'], /^sema-native: run does not take --json\n/],
      [['status', p, '--', 'x'], /^sema-native: '--' is only for run\n/],
    ]
    for (const [args, re] of cases) {
      const r = await cli(args)
      assert.equal(r.code, 2, args.join(' '))
      assert.equal(r.stdout, '', args.join(' '))
      assert.match(r.stderr, re)
    }
    const r = await cli(['acquire', p, '--timeout', '5 parsecs', '--json'])
    assert.equal(r.code, 2)
    assert.equal(r.stderr, '')
    const v = json(r)
    assert.deepEqual(Object.keys(v), ['ok', 'command', 'target', 'error'])
    assert.equal(v.ok, false)
    assert.equal(v.command, 'acquire')
    assert.equal(v.error.type, 'INVALID_ARGUMENT')
    assert.match(v.error.message, /--timeout: '5 parsecs' is not a time/)
    assert.ok(!fs.existsSync(p), 'nothing acquired on a usage error')
  })

  it('a bare number of time is refused with the unit to write (seconds to flock and sema, ms to semats); 0 needs none', async () => {
    const p = lockPath()
    for (const [args, shown] of [
      [['acquire', p, '--timeout', '10'], '10'],
      [['wait', p, '--timeout', '1.5'], '1.5'],
      [['try-acquire', p, '--stale', '3600'], '3600'],
      [['run', p, '--timeout=5000', '--', process.execPath, '-e', ''], '5000'],
    ]) {
      const r = await cli(args)
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`)
      const flag = args.find((a) => /^--(timeout|stale)/.test(a)).replace(/=.*/, '')
      assert.equal(r.stderr.split('\n')[0], `sema-native: ${flag}: '${shown}' has no unit (did you mean ${shown}s? for milliseconds write ${shown}ms)`)
      assert.ok(!fs.existsSync(p), 'nothing acquired on a usage error')
    }
    for (const args of [['wait', p, '--timeout', '0'], ['wait', p, '--timeout', '10s'], ['try-acquire', p, '--stale', '0', '--pid', String(ME), '-q']]) {
      const r = await cli(args)
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`)
    }
    assert.equal((await cli(['release', p, '--pid', String(ME), '-q'])).code, 0)
  })

  it('--pid of a process that does not exist is refused (its lock would be free at once)', async () => {
    const dead = await deadPid()
    const p = lockPath()
    const r = await cli(['acquire', p, '--pid', String(dead)])
    assert.equal(r.code, 2)
    assert.match(r.stderr, new RegExp(`--pid ${dead}: no such process`))
    assert.ok(!fs.existsSync(p))
  })

  it('dflockd targets: acquire, try-acquire, release and clean explain why not (and point to run), exit 2', async () => {
    const url = 'dflockd://secret-token@127.0.0.1:1/job'
    for (const cmd of ['acquire', 'try-acquire']) {
      const r = await cli([cmd, url])
      assert.equal(r.code, 2)
      assert.match(r.stderr, /cannot outlive this command: the server releases it when the connection/)
      assert.match(r.stderr, /sema-native run <target> -- <command…>/)
    }
    const rel = await cli(['release', url, '--json'])
    assert.equal(rel.code, 2)
    const v = json(rel)
    assert.equal(v.target, 'dflockd://***@127.0.0.1:1/job', 'the token is not shown')
    assert.match(v.error.message, /another process cannot release it/)
    assert.equal((await cli(['clean', url])).code, 2)
  })
})

/** These tests run a POSIX shell (`$$`); cmd.exe and PowerShell parents are not covered by this suite yet. */
const NO_SH = process.platform === 'win32' && 'no POSIX shell on Windows'
const escapeRe = (s) => s.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')

describe('own CLI: acquire / try-acquire / release / status', { concurrency: true }, () => {
  it('acquire records the parent process (the caller) and leaves the lock after exit', async () => {
    const p = lockPath()
    const r = await cli(['acquire', p, '--tag', 'deploy'])
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout, `acquired ${p} (owner pid ${ME})\n`)
    assert.match(fs.readFileSync(p, 'utf8'), new RegExp(`^pid=${ME}\ntimestamp=\\d+\ntag=deploy\n`))
    // held: a second try fails with the holder in the message
    const t = await cli(['try-acquire', p])
    assert.equal(t.code, 1)
    assert.equal(t.stdout, '')
    assert.match(t.stderr, new RegExp(`^sema-native: ${escapeRe(p)} is locked by pid ${ME} since \\d{4}-\\d\\d-\\d\\dT`))
    // and released by the same caller (the default owner is again the parent: this process)
    const rel = await cli(['release', p])
    assert.deepEqual([rel.code, rel.stdout, rel.stderr], [0, `released ${p}\n`, ''])
    assert.ok(!fs.existsSync(p))
    const again = await cli(['release', p])
    assert.deepEqual([again.code, again.stderr], [1, `sema-native: ${p} is not locked\n`])
  })

  it('JSON shapes: acquire, busy, release refused / done / not locked', async () => {
    const p = lockPath()
    const a = json(await cli(['try-acquire', p, '--json', '--tag', 'x']))
    assert.deepEqual(Object.keys(a), ['ok', 'command', 'target', 'backend', 'pid', 'timestamp', 'tag'])
    assert.deepEqual({ ...a, timestamp: 0 }, {
      ok: true,
      command: 'try-acquire',
      target: p,
      backend: 'file',
      pid: ME,
      timestamp: 0,
      tag: 'x',
    })
    assert.ok(Math.abs(a.timestamp - Date.now() / 1000) < 5)

    const busy = await cli(['try-acquire', p, '--json'])
    assert.equal(busy.code, 1)
    assert.equal(busy.stderr, '')
    const b = json(busy)
    // lockedSince is the file's timestamp=, which the first CLI's heartbeat may have refreshed before it exited (a
    // whole second later under emulation): at or after the acquisition, never before.
    const since = b.error.lockedSince
    assert.ok(since >= a.timestamp && since <= Date.now() / 1000 + 1, `lockedSince ${since} vs acquired ${a.timestamp}`)
    assert.deepEqual(b, {
      ok: false,
      command: 'try-acquire',
      target: p,
      error: {
        type: 'ALREADY_LOCKED',
        message: 'Lock already held',
        holderPid: ME,
        lockedSince: since,
        holderTag: 'x',
        isOwnedByCurrentProcess: false,
      },
    })

    const refused = await cli(['release', p, '--pid', '1', '--json'])
    assert.equal(refused.code, 1)
    assert.deepEqual(json(refused), {
      ok: false,
      command: 'release',
      target: p,
      error: {
        type: 'PERMISSION_DENIED',
        message: `Lock held by different process (PID ${ME})`,
        holderPid: ME,
        lockedSince: null,
        holderTag: null,
        isOwnedByCurrentProcess: null,
      },
    })
    assert.ok(fs.existsSync(p))

    const done = await cli(['release', p, '--pid', String(ME), '--json'])
    assert.equal(done.code, 0)
    assert.deepEqual(json(done), { ok: true, command: 'release', target: p, released: true })

    const none = await cli(['release', p, '--json'])
    assert.equal(none.code, 1)
    assert.deepEqual(json(none).error, {
      type: 'NOT_LOCKED',
      message: 'Lock not held',
      holderPid: null,
      lockedSince: null,
      holderTag: null,
      isOwnedByCurrentProcess: null,
    })
  })

  it('-q silences success; --quiet failures still explain on stderr', async () => {
    const p = lockPath()
    assert.deepEqual(await cli(['acquire', p, '-q']), { code: 0, signal: null, stdout: '', stderr: '' })
    const busy = await cli(['try-acquire', p, '--quiet'])
    assert.equal(busy.code, 1)
    assert.match(busy.stderr, /is locked by pid/)
    assert.deepEqual(await cli(['release', p, '-q']), { code: 0, signal: null, stdout: '', stderr: '' })
  })

  it('acquire --timeout: times with units, TIMEOUT exit 1 after about that long', async () => {
    const p = lockPath()
    writeLock(p, { pid: ME })
    const t0 = Date.now()
    const r = await cli(['acquire', p, '--timeout', '300ms'])
    assert.ok(Date.now() - t0 >= 280)
    assert.equal(r.code, 1)
    // The holder as the engine read it when the wait ran out (issue 23 point 4).
    assert.match(r.stderr, new RegExp(`^sema-native: .*: Timeout waiting for lock after 300ms \\(held by pid ${ME} since .*\\)\\n$`))
    const j = await cli(['acquire', p, '--timeout=0.2s', '--json'])
    assert.equal(j.code, 1)
    const e = json(j).error
    assert.deepEqual({ ...e, lockedSince: typeof e.lockedSince }, {
      type: 'TIMEOUT',
      message: 'Timeout waiting for lock after 200ms',
      holderPid: ME,
      lockedSince: 'number',
      holderTag: null,
      isOwnedByCurrentProcess: false,
    })
  })

  it('acquire waits and wins when the holder releases', async () => {
    const p = lockPath()
    writeLock(p, { pid: ME })
    const pending = cli(['acquire', p, '--timeout', '5s', '--json'])
    setTimeout(() => fs.unlinkSync(p), 200)
    const r = await pending
    assert.equal(r.code, 0, r.stdout + r.stderr)
    assert.equal(json(r).ok, true)
  })

  it('acquire -v says who holds a busy lock before waiting', async () => {
    const p = lockPath()
    const since = Math.floor(Date.now() / 1000)
    writeLock(p, { pid: ME, timestamp: since })
    const r = await cli(['acquire', p, '-v', '--timeout', '100ms'])
    assert.equal(r.code, 1)
    const q = p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
    const iso = new Date(since * 1000).toISOString().replace(/\./g, '\\.')
    assert.match(
      r.stderr,
      new RegExp(
        `^sema-native: waiting for ${q} \\(held by pid ${ME} since ${iso} \\(\\d+s ago\\)\\)\\n` +
          `sema-native: ${q}: Timeout waiting for lock after 100ms \\(held by pid ${ME} since ${iso} \\(\\d+s ago\\)\\)\\n$`,
      ),
    )
  })

  it('release --force removes anyone\'s lock', async () => {
    const p = lockPath()
    writeLock(p, { pid: 1 })
    const r = await cli(['release', p, '--force', '--json'])
    assert.equal(r.code, 0)
    assert.deepEqual(json(r), { ok: true, command: 'release', target: p, released: true })
    assert.ok(!fs.existsSync(p))
  })

  it('status: free / held (text and JSON), exit 0 either way; an unparseable file is held, owner unknown', async () => {
    const p = lockPath()
    const free = await cli(['status', p, '--json'])
    assert.equal(free.code, 0)
    const { fileSystem, fallbacks, ...f } = json(free)
    // Named from its statfs magic on Linux; elsewhere the engine has no magic to read, and says null.
    if (process.platform === 'linux') assert.equal(typeof fileSystem, 'string', 'the lock directory\'s file system is named')
    else assert.equal(fileSystem, null)
    assert.ok(Array.isArray(fallbacks), 'fallbacks is a list')
    assert.deepEqual(f, {
      ok: true,
      command: 'status',
      target: p,
      backend: 'file',
      locked: false,
      info: null,
      isStale: false,
      holderRunning: null,
      holders: null,
      waiters: null,
      limit: null,
      leaseExpiresInS: null,
      reclaimableAt: null,
      reclaimRule: null,
    })
    assert.deepEqual(await cli(['status', p]), { code: 0, signal: null, stdout: `${p}: free\n`, stderr: '' })

    const ts = await writeOldLiveLock(p, { age: 3, tag: 'nightly' })
    const held = await cli(['status', p, '--stale', '1s'])
    assert.equal(held.code, 0)
    assert.equal(
      held.stdout,
      `${p}: locked\n  pid: ${ME} (running)\n  since: ${new Date(ts * 1000).toISOString()} (timestamp ${ts})\n  tag: nightly\n  stale: no\n` +
        `  reclaimable: from ${new Date((ts + 2) * 1000).toISOString()} (already past) if pid ${ME} is not running then ` +
        "(a lock of another tool: semats' rule, older than the stale timeout and its pid not running)\n",
    )
    const h = json(await cli(['status', p, '--json', '--stale', '1s']))
    assert.deepEqual(h.info, { pid: ME, timestamp: ts, tag: 'nightly' })
    assert.equal(h.locked, true)
    assert.equal(h.holderRunning, true)
    assert.equal(h.isStale, false, 'a live holder is never stale, however old')
    assert.deepEqual([h.reclaimRule, h.reclaimableAt], ['age-and-pid-not-running', ts + 2])
    // a dead holder's old lock is
    const dead = await deadPid()
    writeLock(p, { pid: dead, timestamp: Math.floor(Date.now() / 1000) - 120 })
    assert.equal(json(await cli(['status', p, '--json', '--stale', '1m'])).isStale, true)
    assert.match((await cli(['status', p, '--stale', '1m'])).stdout, new RegExp(`pid: ${dead} \\(not running\\)[^]*stale: yes\n  reclaimable: now \\(stale[^\n]*\n$`))

    fs.writeFileSync(p, 'garbage')
    const g = await cli(['status', p, '--json'])
    assert.equal(g.code, 0)
    assert.deepEqual([json(g).locked, json(g).info], [true, null])
    assert.match((await cli(['status', p])).stdout, /owner: unknown/)
  })

  it('status --json is valid JSON for tags with quotes, backslashes and control characters', async () => {
    const p = lockPath()
    const tag = 'q"uote \\ back\\\\slash\ttab\u0001\u001b[0m\u007f \u2028 end'
    writeLock(p, { pid: ME, timestamp: 7, tag })
    const v = json(await cli(['status', p, '--json']))
    assert.equal(v.info.tag, tag)
    // written through the CLI: control characters become spaces in the file, quotes and backslashes stay
    const q = lockPath()
    assert.equal((await cli(['acquire', q, '--tag', 'a"b\\c\u0007d'])).code, 0)
    assert.equal(json(await cli(['status', q, '--json'])).info.tag, 'a"b\\c d')
  })

  it('status of a missing directory is an error: exit 3', async () => {
    const r = await cli(['status', `${dir}/missing/x.lock`, '--json'])
    assert.equal(r.code, 3)
    const v = json(r)
    assert.equal(v.ok, false)
    assert.equal(typeof v.error.message, 'string')
  })
})

describe('own CLI: clean and wait', { concurrency: true }, () => {
  it('clean: a lock whose holder (a shell on this host) has exited is removed at once; a live one is kept', { skip: NO_SH }, async () => {
    const p = lockPath()
    // The shell records itself as the owner, then exits: its lock is left behind by a dead process.
    const sh = await spawnText('sh', ['-c', `"${process.execPath}" "${BIN}" acquire "${p}" --pid $$ -q`])
    assert.equal(sh.code, 0, sh.stderr)
    assert.ok(fs.existsSync(p))
    const r = await cli(['clean', p, '--json'])
    assert.equal(r.code, 0)
    assert.deepEqual(json(r), { ok: true, command: 'clean', target: p, cleaned: true })
    assert.ok(!fs.existsSync(p))
    assert.deepEqual(await cli(['clean', p]), { code: 0, signal: null, stdout: `nothing to clean at ${p}\n`, stderr: '' })
    await writeOldLiveLock(p, { age: 3 })
    assert.equal((await cli(['clean', p, '--stale', '1s'])).stdout, `nothing to clean at ${p}\n`)
    assert.ok(fs.existsSync(p))
  })

  it('clean: another tool\'s lock of a dead pid goes by --stale age', async () => {
    const p = lockPath()
    const dead = await deadPid()
    writeLock(p, { pid: dead, timestamp: Math.floor(Date.now() / 1000) - 120 })
    assert.equal((await cli(['clean', p])).stdout, `nothing to clean at ${p}\n`, 'younger than the default 1h')
    assert.equal((await cli(['clean', p, '--stale', '1m'])).stdout, `removed stale lock ${p}\n`)
    assert.ok(!fs.existsSync(p))
  })

  it('wait: free at once; times out on a held lock; returns when it is released', async () => {
    const p = lockPath()
    const free = await cli(['wait', p, '--json'])
    assert.equal(free.code, 0)
    const v = json(free)
    assert.deepEqual(Object.keys(v), ['ok', 'command', 'target', 'free', 'waitedMs'])
    assert.equal(v.free, true)
    writeLock(p, { pid: ME })
    const t = await cli(['wait', p, '--timeout', '200ms'])
    assert.equal(t.code, 1)
    assert.equal(t.stderr, `sema-native: ${p}: Timeout waiting for lock to be released after 200ms\n`)
    const pending = cli(['wait', p, '--timeout', '10s'])
    setTimeout(() => fs.unlinkSync(p), 200)
    const r = await pending
    assert.deepEqual([r.code, r.stdout], [0, `free ${p}\n`])
  })

  it('wait: a lock left by a dead process on this host counts as free', { skip: NO_SH }, async () => {
    const p = lockPath()
    const sh = await spawnText('sh', ['-c', `"${process.execPath}" "${BIN}" acquire "${p}" --pid $$ -q`])
    assert.equal(sh.code, 0, sh.stderr)
    const r = await cli(['wait', p, '--timeout', '2s'])
    assert.equal(r.code, 0, r.stderr)
  })
})

describe('own CLI: the --pid $$ recipe from a real shell', () => {
  it('acquire --pid $$, status shows it held by the shell, a release for another pid is refused, release --pid $$ works', { skip: NO_SH }, async () => {
    const p = lockPath()
    const script = `
      set -u
      S() { "${process.execPath}" "${BIN}" "$@"; }
      S acquire "${p}" --pid $$ --timeout 5s --tag "job of $$" -q || exit 10
      echo "shell=$$"
      S status "${p}" --json
      S release "${p}" --pid 1; echo "refused=$?"
      test -e "${p}" || exit 11
      S release "${p}" --pid $$ -q; echo "released=$?"
      test -e "${p}" && exit 12
      S release "${p}" --pid $$ 2>/dev/null; echo "again=$?"
    `
    const r = await spawnText('sh', ['-c', script])
    assert.equal(r.code, 0, r.stdout + r.stderr)
    const lines = r.stdout.trim().split('\n')
    const shellPid = Number(/^shell=(\d+)$/.exec(lines[0])[1])
    const st = JSON.parse(lines[1])
    assert.equal(st.locked, true)
    assert.equal(st.info.pid, shellPid)
    assert.equal(st.info.tag, `job of ${shellPid}`)
    assert.equal(st.holderRunning, true)
    assert.deepEqual(lines.slice(2), ['refused=1', 'released=0', 'again=1'])
    assert.match(r.stderr, new RegExp(`is held by pid ${shellPid}, not by pid 1 \\(pass --pid ${shellPid}, or --force\\)`))
  })

  it('without --pid, acquire and release from one shell script pair up (owner = the parent shell)', { skip: NO_SH }, async () => {
    const p = lockPath()
    const script = `
      S() { "${process.execPath}" "${BIN}" "$@"; }
      S acquire "${p}" -q || exit 10
      grep -q "^pid=$$\\$" "${p}" || exit 11
      S release "${p}" -q || exit 12
      test -e "${p}" && exit 13
      exit 0
    `
    const r = await spawnText('sh', ['-c', script])
    assert.equal(r.code, 0, r.stdout + r.stderr)
  })
})
