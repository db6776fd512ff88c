'use strict'
// `sema-native sema …` against the Rust sema CLI's behaviour (sema 0.1.0, built from the vendored source): exact
// stdout, stderr and exit code for every command and error path. Only pids, timestamps and temp paths are
// normalised. Deliberate differences, tested as such: status --json escapes the tag (always valid JSON), and a
// live holder is never evicted by age.

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { cli, mkTmp, rmTmp, deadPid, writeLock, writeOldLiveLock, golden } = require('./fixtures/cli/helpers')

const USAGE = golden('sema-usage.txt')
const ME = process.pid

let dir
let n = 0
before(() => {
  dir = mkTmp('sema-')
})
after(() => rmTmp(dir))

function lockPath() {
  return path.join(dir, `l${++n}.lock`)
}

function norm(text) {
  return text.replaceAll(dir, '<DIR>').replace(/Timestamp: \d+/g, 'Timestamp: <TS>')
}

function sema(args, options) {
  return cli(['sema', ...args], options)
}

function expectRun(r, { code, stdout = '', stderr = '' }) {
  assert.deepEqual({ code: r.code, stdout: norm(r.stdout), stderr: norm(r.stderr) }, { code, stdout, stderr })
}

function usageError(message) {
  return { code: 2, stderr: `Error: ${message}\n\n${USAGE}` }
}

describe('sema front end: usage, version and argument errors', { concurrency: true }, () => {
  it('--help / -h anywhere (even as a --tag value): usage on stderr, exit 0', async () => {
    for (const args of [['--help'], ['-h'], ['try', 'x.lock', '-h'], ['try', 'x.lock', '--tag', '--help'], ['frob', '-h']]) {
      expectRun(await sema(args), { code: 0, stderr: USAGE })
    }
  })

  it('--version / -V: "file-semaphore 0.1.0" on stdout, exit 0', async () => {
    for (const args of [['--version'], ['-V'], ['status', 'x.lock', '-V']]) {
      expectRun(await sema(args), { code: 0, stdout: 'file-semaphore 0.1.0\n' })
    }
  })

  it('usage errors: "Error: <msg>", blank line, usage on stderr, exit 2', async () => {
    const p = lockPath()
    const cases = [
      [[], 'missing command'],
      [['try'], 'missing lock path'],
      [['frob', p], 'unknown command: frob'],
      [['try-acquire', p], 'unknown command: try-acquire'],
      [['clean', p], 'unknown command: clean'],
      [['--json', p], 'unknown command: --json'],
      [['try', p, '--bogus'], 'unknown option: --bogus'],
      [['release', p, '--force'], 'unknown option: --force'],
      [['try', p, 'extra'], 'unknown option: extra'],
      [['acquire', p, '--timeout'], '--timeout requires a value'],
      [['acquire', p, '--timeout', '1.5'], 'invalid timeout value'],
      [['acquire', p, '--timeout', 'abc'], 'invalid timeout value'],
      [['acquire', p, '--timeout', '-1'], 'invalid timeout value'],
      [['try', p, '--stale'], '--stale requires a value'],
      [['try', p, '--stale', 'x'], 'invalid stale timeout value'],
      [['try', p, '--tag'], '--tag requires a value'],
    ]
    for (const [args, message] of cases) expectRun(await sema(args), usageError(message))
    assert.ok(!fs.existsSync(p))
  })
})

describe('sema front end: try and acquire', { concurrency: true }, () => {
  it('try: "Lock acquired: <path as given>" (also with --json), -q silent; the lock stays', async () => {
    const p = lockPath()
    const rel = `./${path.basename(p)}`
    expectRun(await sema(['try', rel, '--tag', 'build 1'], { cwd: dir }), { code: 0, stdout: `Lock acquired: ${rel}\n` })
    assert.match(fs.readFileSync(p, 'utf8'), new RegExp(`^pid=${ME}\ntimestamp=\\d+\ntag=build 1\n`))
    const q = lockPath()
    expectRun(await sema(['try', q, '--json']), { code: 0, stdout: `Lock acquired: <DIR>/${path.basename(q)}\n` })
    const r = lockPath()
    expectRun(await sema(['try', r, '-q']), { code: 0 })
    assert.ok(fs.existsSync(r))
  })

  it('try held: "Lock already held" + holder PID on stderr, exit 1; -q silent; --json on stdout even with -q', async () => {
    const p = lockPath()
    const since = Math.floor(Date.now() / 1000) - 5
    writeLock(p, { pid: ME, timestamp: since })
    expectRun(await sema(['try', p]), { code: 1, stderr: `Lock already held\n  Holder PID: ${ME}\n` })
    expectRun(await sema(['try', p, '-q']), { code: 1 })
    expectRun(await sema(['try', p, '--json', '--quiet']), {
      code: 1,
      stdout: `{"locked":true,"pid":${ME},"since":${since}}\n`,
    })
  })

  it('try held by an unparseable file: no PID line; --json pid/since 0', async () => {
    const p = lockPath()
    // a BOM: sema cannot parse this (our engine can, and sees a live holder)
    fs.writeFileSync(p, `\ufeffpid=${ME}\ntimestamp=${Math.floor(Date.now() / 1000)}\n`)
    expectRun(await sema(['try', p]), { code: 1, stderr: 'Lock already held\n' })
    expectRun(await sema(['try', p, '--json']), { code: 1, stdout: '{"locked":true,"pid":0,"since":0}\n' })
  })

  it('try in a missing directory: IO error, exit 3', async () => {
    expectRun(await sema(['try', `${dir}/missing/x.lock`]), {
      code: 3,
      stderr: 'Error: IO error: No such file or directory (os error 2)\n',
    })
    expectRun(await sema(['acquire', `${dir}/missing/x.lock`]), {
      code: 3,
      stderr: 'Error: IO error: No such file or directory (os error 2)\n',
    })
    // an empty path cannot be created either (sema: create_new("") fails with ENOENT)
    expectRun(await sema(['try', '']), { code: 3, stderr: 'Error: IO error: No such file or directory (os error 2)\n' })
  })

  it('--stale: a 2 h old lock of a dead pid is taken with --stale 3600, kept with --stale 0', async () => {
    const dead = await deadPid()
    const old = Math.floor(Date.now() / 1000) - 7200
    const p = lockPath()
    writeLock(p, { pid: dead, timestamp: old })
    expectRun(await sema(['try', p, '--stale', '0']), { code: 1, stderr: `Lock already held\n  Holder PID: ${dead}\n` })
    expectRun(await sema(['try', p, '--stale', '3600']), { code: 0, stdout: `Lock acquired: <DIR>/${path.basename(p)}\n` })
    assert.match(fs.readFileSync(p, 'utf8'), new RegExp(`^pid=${ME}\n`))
  })

  it('deviation: a live holder is never evicted by age (sema would remove it)', async () => {
    const p = lockPath()
    await writeOldLiveLock(p, { age: 3 })
    expectRun(await sema(['try', p, '--stale', '1']), { code: 1, stderr: `Lock already held\n  Holder PID: ${ME}\n` })
    expectRun(await sema(['acquire', p, '--stale', '1', '--timeout', '0']), { code: 1, stderr: 'Timeout waiting for lock\n' })
  })

  it('acquire: immediate when free; on a held lock "Timeout waiting for lock" (stderr, exit 1), -q silent', async () => {
    const p = lockPath()
    expectRun(await sema(['acquire', p, '--tag', 't']), { code: 0, stdout: `Lock acquired: <DIR>/${path.basename(p)}\n` })
    expectRun(await sema(['acquire', p, '--timeout', '0']), { code: 1, stderr: 'Timeout waiting for lock\n' })
    const t0 = Date.now()
    expectRun(await sema(['acquire', p, '--timeout', '1', '-q']), { code: 1 })
    assert.ok(Date.now() - t0 >= 900, 'waited about a second')
  })

  it('acquire waits for a release', async () => {
    const p = lockPath()
    writeLock(p, { pid: ME })
    const pending = sema(['acquire', p, '--timeout', '5'])
    setTimeout(() => fs.unlinkSync(p), 200)
    expectRun(await pending, { code: 0, stdout: `Lock acquired: <DIR>/${path.basename(p)}\n` })
  })
})

describe('sema front end: release, status and wait', { concurrency: true }, () => {
  it('release is always forced and succeeds when there is no lock; -q silent', async () => {
    const p = lockPath()
    writeLock(p, { pid: ME })
    expectRun(await sema(['release', p]), { code: 0, stdout: `Lock released: <DIR>/${path.basename(p)}\n` })
    assert.ok(!fs.existsSync(p))
    expectRun(await sema(['release', p]), { code: 0, stdout: `Lock released: <DIR>/${path.basename(p)}\n` })
    expectRun(await sema(['release', p, '-q', '--stale', '5', '--tag', 'x', '--timeout', '1']), { code: 0 })
  })

  it('release / status / wait with a missing parent: "Error: Invalid path: …", exit 3', async () => {
    for (const cmd of ['release', 'status', 'wait']) {
      expectRun(await sema([cmd, `${dir}/missing/x.lock`]), {
        code: 3,
        stderr: 'Error: Invalid path: parent directory does not exist: <DIR>/missing\n',
      })
    }
    expectRun(await sema(['release', '']), { code: 3, stderr: 'Error: Invalid path: path cannot be empty\n' })
  })

  it('status FREE: exit 0', async () => {
    const p = lockPath()
    expectRun(await sema(['status', p]), { code: 0, stdout: `Lock status: FREE\n  Path: <DIR>/${path.basename(p)}\n` })
    expectRun(await sema(['status', p, '--json', '-q']), { code: 0, stdout: '{"locked":false}\n' })
  })

  it('status LOCKED: details, process running yes/no, exit 1', async () => {
    const p = lockPath()
    const b = path.basename(p)
    writeLock(p, { pid: ME, timestamp: 1_700_000_002, tag: 'nightly build' })
    expectRun(await sema(['status', p]), {
      code: 1,
      stdout: `Lock status: LOCKED\n  Path: <DIR>/${b}\n  PID: ${ME}\n  Timestamp: <TS>\n  Tag: nightly build\n  Process running: yes\n`,
    })
    expectRun(await sema(['status', p, '--json']), {
      code: 1,
      stdout: `{"locked":true,"pid":${ME},"timestamp":1700000002,"tag":"nightly build"}\n`,
    })
    const dead = await deadPid()
    writeLock(p, { pid: dead, timestamp: 5 })
    expectRun(await sema(['status', p]), {
      code: 1,
      stdout: `Lock status: LOCKED\n  Path: <DIR>/${b}\n  PID: ${dead}\n  Timestamp: <TS>\n  Process running: no\n`,
    })
    expectRun(await sema(['status', p, '--json']), { code: 1, stdout: `{"locked":true,"pid":${dead},"timestamp":5,"tag":null}\n` })
  })

  it('status of an unparseable lock: LOCKED without details; --json {"locked":false}; exit 1 both', async () => {
    const p = lockPath()
    for (const content of ['garbage', 'pid=-1\ntimestamp=5\n', '\ufeffpid=1\ntimestamp=2\n', Buffer.from([0xff, 0xfe, 0x00])]) {
      fs.writeFileSync(p, content)
      expectRun(await sema(['status', p]), { code: 1, stdout: `Lock status: LOCKED\n  Path: <DIR>/${path.basename(p)}\n` })
      expectRun(await sema(['status', p, '--json']), { code: 1, stdout: '{"locked":false}\n' })
    }
    // what sema's parser accepts: CRLF, +pid, unknown keys, tag with '='
    fs.writeFileSync(p, 'pid=+7\r\ntimestamp=9\r\nhost=x\r\ntag=a=b\r\n')
    expectRun(await sema(['status', p, '--json']), { code: 1, stdout: '{"locked":true,"pid":7,"timestamp":9,"tag":"a=b"}\n' })
  })

  it('status --json escapes tags with quotes, backslashes and control characters (valid JSON)', async () => {
    const p = lockPath()
    const tag = 'say "hi" \\ back\\slash\ttab \u001b[31mred\u0001\u007f end'
    writeLock(p, { pid: ME, timestamp: 3, tag })
    const r = await sema(['status', p, '--json'])
    assert.equal(r.code, 1)
    assert.deepEqual(JSON.parse(r.stdout), { locked: true, pid: ME, timestamp: 3, tag })
    assert.equal(r.stdout, JSON.stringify({ locked: true, pid: ME, timestamp: 3, tag }) + '\n')
    // a tag written through the CLI (sanitised: control characters become spaces) round-trips too
    const q = lockPath()
    assert.equal((await sema(['try', q, '--tag', 'a"b\\c\u0007d'])).code, 0)
    assert.deepEqual(JSON.parse((await sema(['status', q, '--json'])).stdout), {
      locked: true,
      pid: ME,
      timestamp: JSON.parse((await sema(['status', q, '--json'])).stdout).timestamp,
      tag: 'a"b\\c d',
    })
  })

  it('wait: free at once; timeout on a held lock (stderr, exit 1); returns once released; -q silent', async () => {
    const p = lockPath()
    const b = path.basename(p)
    expectRun(await sema(['wait', p]), { code: 0, stdout: `Lock is free: <DIR>/${b}\n` })
    writeLock(p, { pid: ME })
    expectRun(await sema(['wait', p, '--timeout', '0']), { code: 1, stderr: 'Timeout waiting for lock to be released\n' })
    expectRun(await sema(['wait', p, '--timeout', '0', '-q']), { code: 1 })
    const pending = sema(['wait', p, '--timeout', '5'])
    setTimeout(() => fs.unlinkSync(p), 200)
    expectRun(await pending, { code: 0, stdout: `Lock is free: <DIR>/${b}\n` })
  })

  it('wait does not break a stale lock (it only watches for the file to go)', async () => {
    const p = lockPath()
    const dead = await deadPid()
    writeLock(p, { pid: dead, timestamp: 1 })
    expectRun(await sema(['wait', p, '--timeout', '0']), { code: 1, stderr: 'Timeout waiting for lock to be released\n' })
    assert.ok(fs.existsSync(p))
  })

  it('wait refuses a symbolic link at the lock path (exit 3) instead of following it', async () => {
    // The engine's wait (the core's, woken by file events) never follows a link it did not create; sema's exists()
    // would call a dangling one free (docs/cli.md).
    const p = lockPath()
    fs.symlinkSync(`${p}.nowhere`, p)
    const r = await sema(['wait', p, '--timeout', '0'])
    assert.equal(r.code, 3, JSON.stringify(r))
    assert.match(r.stderr, /^Error: .*symbolic link/)
  })
})
