'use strict'
// `sema-native semats …` against the semats CLI's behaviour (semats' own CLI): exact
// stdout, stderr and exit code for every command and error path. Only pids, timestamps and temp paths are
// normalised. The CLI records its parent as the owner; here that parent is this test process, so a lock taken
// through the CLI has holder pid === process.pid and stays held while the suite runs.

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { cli, mkTmp, rmTmp, deadPid, writeLock, writeOldLiveLock, golden } = require('./fixtures/cli/helpers')

const USAGE = golden('semats-usage.txt')
const ME = process.pid

let dir
let n = 0
before(() => {
  dir = mkTmp('semats-')
})
after(() => rmTmp(dir))

/** A fresh lock path in the temp dir. */
function lockPath() {
  return path.join(dir, `l${++n}.lock`)
}

/** `timestamp: 1712345678` → `timestamp: <TS>`, and the same inside JSON; paths → <DIR>. */
function norm(text) {
  return text
    .replaceAll(dir, '<DIR>')
    .replace(/(timestamp|lockedSince)(": |: )\d+/g, '$1$2<TS>')
    .replace(/("timestamp":)\d+/g, '$1<TS>')
}

function semats(args, options) {
  return cli(['semats', ...args], options)
}

function expectRun(r, { code, stdout = '', stderr = '' }) {
  assert.deepEqual({ code: r.code, stdout: norm(r.stdout), stderr: norm(r.stderr) }, { code, stdout, stderr })
}

describe('semats front end: usage and argument errors', { concurrency: true }, () => {
  it('--help and -h print the usage on stdout, exit 0', async () => {
    for (const flag of ['--help', '-h']) expectRun(await semats([flag]), { code: 0, stdout: USAGE })
    // handled while parsing, wherever it is
    expectRun(await semats(['status', '/nonexistent/x.lock', '-h']), { code: 0, stdout: USAGE })
  })

  it('no command: usage on stdout, exit 1', async () => {
    expectRun(await semats([]), { code: 1, stdout: USAGE })
    expectRun(await semats(['--json', '-v']), { code: 1, stdout: USAGE })
  })

  it('no path: "Error: Lock path is required" on stderr, exit 1', async () => {
    expectRun(await semats(['try-acquire']), { code: 1, stderr: 'Error: Lock path is required\n' })
    // an empty word leaves the slot empty
    expectRun(await semats(['try-acquire', '']), { code: 1, stderr: 'Error: Lock path is required\n' })
  })

  it('constructor errors: "Error: <message>", exit 1', async () => {
    expectRun(await semats(['try-acquire', '../x.lock']), {
      code: 1,
      stderr: 'Error: Path contains dangerous pattern: parent directory traversal (..) not allowed\n',
    })
    expectRun(await semats(['status', `${dir}/a..b.lock`]), {
      code: 1,
      stderr: 'Error: Path contains dangerous pattern: parent directory traversal (..) not allowed\n',
    })
    expectRun(await semats(['try-acquire', '   ']), { code: 1, stderr: 'Error: Path cannot be empty\n' })
    expectRun(await semats(['acquire', `${dir}/missing/x.lock`]), {
      code: 1,
      stderr: 'Error: Parent directory does not exist: <DIR>/missing\n',
    })
  })

  it('unknown command: message on stderr, usage on stdout, exit 1; a path error wins', async () => {
    expectRun(await semats(['frob', lockPath()]), { code: 1, stdout: USAGE, stderr: 'Unknown command: frob\n' })
    expectRun(await semats(['frob', '../x.lock']), {
      code: 1,
      stderr: 'Error: Path contains dangerous pattern: parent directory traversal (..) not allowed\n',
    })
  })
})

describe('semats front end: try-acquire', { concurrency: true }, () => {
  it('success: status/pid/timestamp/tag lines on stdout (tag: undefined without a tag)', async () => {
    const p = lockPath()
    const r = await semats(['try-acquire', p])
    expectRun(r, { code: 0, stdout: `status: acquired\npid: ${ME}\ntimestamp: <TS>\ntag: undefined\n` })
    const ts = Number(/timestamp: (\d+)/.exec(r.stdout)[1])
    assert.ok(Math.abs(ts - Date.now() / 1000) < 5)
    // the lock outlives the CLI, recorded for its parent (this process)
    const text = fs.readFileSync(p, 'utf8')
    assert.match(text, new RegExp(`^pid=${ME}\ntimestamp=${ts}\n`))
  })

  it('success with -t / --tag, flags before the words, extra words and unknown flags ignored', async () => {
    const p = lockPath()
    expectRun(await semats(['--tag', 'build process', '-x', 'try-acquire', p, 'extra']), {
      code: 0,
      stdout: `status: acquired\npid: ${ME}\ntimestamp: <TS>\ntag: build process\n`,
    })
    assert.match(fs.readFileSync(p, 'utf8'), /\ntag=build process\n/)
    // -t consumes the next word even if it looks like a flag: no help here
    const q = lockPath()
    expectRun(await semats(['try-acquire', q, '-t', '-h']), {
      code: 0,
      stdout: `status: acquired\npid: ${ME}\ntimestamp: <TS>\ntag: -h\n`,
    })
  })

  it('--json: JSON.stringify(…, null, 2), undefined tag dropped', async () => {
    const p = lockPath()
    const r = await semats(['try-acquire', p, '--json'])
    assert.equal(r.code, 0)
    assert.equal(r.stderr, '')
    const v = JSON.parse(r.stdout)
    assert.deepEqual(Object.keys(v), ['status', 'pid', 'timestamp'])
    assert.equal(r.stdout, JSON.stringify({ status: 'acquired', pid: ME, timestamp: v.timestamp }, null, 2) + '\n')
    const t = await semats(['try-acquire', lockPath(), '-j', '-t', 'x'])
    assert.equal(t.stdout, `{\n  "status": "acquired",\n  "pid": ${ME},\n  "timestamp": ${JSON.parse(t.stdout).timestamp},\n  "tag": "x"\n}\n`)
  })

  it('held: failure on STDOUT with holderPid and lockedSince, exit 1', async () => {
    const p = lockPath()
    const since = Math.floor(Date.now() / 1000) - 5
    writeLock(p, { pid: ME, timestamp: since })
    expectRun(await semats(['try-acquire', p]), {
      code: 1,
      stdout: `status: failed\ntype: ALREADY_LOCKED\nmessage: Lock already held\nholderPid: ${ME}\nlockedSince: <TS>\n`,
    })
    const r = await semats(['try-acquire', p, '--json'])
    assert.equal(r.code, 1)
    assert.equal(
      r.stdout,
      JSON.stringify(
        { status: 'failed', type: 'ALREADY_LOCKED', message: 'Lock already held', holderPid: ME, lockedSince: since },
        null,
        2,
      ) + '\n',
    )
  })

  it('held by a lock file that does not parse: undefined in text, dropped in JSON', async () => {
    const p = lockPath()
    fs.writeFileSync(p, 'not a lock file\n')
    expectRun(await semats(['try-acquire', p]), {
      code: 1,
      stdout: 'status: failed\ntype: ALREADY_LOCKED\nmessage: Lock already held\nholderPid: undefined\nlockedSince: undefined\n',
    })
    const r = await semats(['try-acquire', p, '-j'])
    assert.equal(r.stdout, '{\n  "status": "failed",\n  "type": "ALREADY_LOCKED",\n  "message": "Lock already held"\n}\n')
  })

  it('-v: one [INFO] line on stderr with the path as given', async () => {
    const p = lockPath()
    const rel = `./${path.basename(p)}`
    const r = await semats(['try-acquire', rel, '-v'], { cwd: dir })
    assert.equal(r.code, 0)
    assert.equal(r.stderr, `[INFO] Trying to acquire lock: ${rel}\n`)
  })
})

describe('semats front end: acquire', { concurrency: true }, () => {
  it('free: acquired at once, same output as try-acquire; -v line', async () => {
    const p = lockPath()
    expectRun(await semats(['acquire', p, '--tag', 'job', '-v']), {
      code: 0,
      stdout: `status: acquired\npid: ${ME}\ntimestamp: <TS>\ntag: job\n`,
      stderr: '[INFO] Acquiring lock: <DIR>/' + path.basename(p) + '\n',
    })
  })

  it('timeout: TIMEOUT on STDERR, exit 1, after about the timeout', async () => {
    const p = lockPath()
    writeLock(p, { pid: ME })
    const t0 = Date.now()
    expectRun(await semats(['acquire', p, '--timeout', '250']), {
      code: 1,
      stderr: 'status: failed\ntype: TIMEOUT\nmessage: Timeout waiting for lock after 250ms\n',
    })
    assert.ok(Date.now() - t0 >= 240, 'waited for the timeout')
    const r = await semats(['acquire', p, '--timeout', '0', '--json'])
    assert.equal(r.code, 1)
    assert.equal(r.stdout, '')
    assert.equal(r.stderr, '{\n  "status": "failed",\n  "type": "TIMEOUT",\n  "message": "Timeout waiting for lock after 0ms"\n}\n')
  })

  it('waits for a release', async () => {
    const p = lockPath()
    writeLock(p, { pid: ME })
    const pending = semats(['acquire', p, '--timeout', '5000'])
    setTimeout(() => fs.unlinkSync(p), 300)
    const r = await pending
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /^status: acquired\n/)
  })
})

describe('semats front end: release', { concurrency: true }, () => {
  it('a lock taken by an earlier CLI run is refused without --force (as semats)', async () => {
    const p = lockPath()
    assert.equal((await semats(['try-acquire', p])).code, 0)
    expectRun(await semats(['release', p]), {
      code: 1,
      stderr: `status: failed\ntype: PERMISSION_DENIED\nmessage: Lock held by different process (PID ${ME})\nholderPid: ${ME}\n`,
    })
    assert.ok(fs.existsSync(p))
    expectRun(await semats(['release', p, '--force', '-v']), {
      code: 0,
      stdout: 'status: released\n',
      stderr: `[INFO] Releasing lock: <DIR>/${path.basename(p)}\n`,
    })
    assert.ok(!fs.existsSync(p))
  })

  it('no lock: NOT_LOCKED on stderr, exit 1; --force --json success', async () => {
    const p = lockPath()
    expectRun(await semats(['release', p]), { code: 1, stderr: 'status: failed\ntype: NOT_LOCKED\nmessage: Lock not held\n' })
    const r = await semats(['release', p, '-j'])
    assert.equal(r.stderr, '{\n  "status": "failed",\n  "type": "NOT_LOCKED",\n  "message": "Lock not held"\n}\n')
    writeLock(p, { pid: 99999 })
    expectRun(await semats(['release', p, '-f', '--json']), { code: 0, stdout: '{\n  "status": "released"\n}\n' })
  })

  it('PERMISSION_DENIED in JSON', async () => {
    const p = lockPath()
    writeLock(p, { pid: 99999 })
    const r = await semats(['release', '--json', p])
    assert.equal(r.code, 1)
    assert.equal(
      r.stderr,
      '{\n  "status": "failed",\n  "type": "PERMISSION_DENIED",\n  "message": "Lock held by different process (PID 99999)",\n  "holderPid": 99999\n}\n',
    )
  })
})

describe('semats front end: status and clean', { concurrency: true }, () => {
  it('status free / locked / stale / unparseable, always exit 0', async () => {
    const p = lockPath()
    const free = 'locked: false\ninfo: null\nisStale: false\nisOwnedByCurrentProcess: false\n'
    expectRun(await semats(['status', p]), { code: 0, stdout: free })
    writeLock(p, { pid: ME, timestamp: 1_700_000_000, tag: 't' })
    // no -v line for status
    expectRun(await semats(['status', p, '-v']), {
      code: 0,
      stdout: `locked: true\ninfo: {"pid":${ME},"timestamp":<TS>,"tag":"t"}\nisStale: true\nisOwnedByCurrentProcess: false\n`,
    })
    const now = Math.floor(Date.now() / 1000)
    writeLock(p, { pid: ME, timestamp: now })
    const r = await semats(['status', p, '--json'])
    assert.equal(r.code, 0)
    assert.equal(
      r.stdout,
      JSON.stringify({ locked: true, info: { pid: ME, timestamp: now }, isStale: false, isOwnedByCurrentProcess: false }, null, 2) + '\n',
    )
    // semats' `locked` means "the file parses"
    fs.writeFileSync(p, 'garbage')
    expectRun(await semats(['status', p]), { code: 0, stdout: free })
  })

  it('clean: nothing → false; stale lock of a dead pid → true and removed; recent lock of a dead pid → kept', async () => {
    const p = lockPath()
    expectRun(await semats(['clean', p]), { code: 0, stdout: 'cleaned: false\n' })
    const dead = await deadPid()
    writeLock(p, { pid: dead, timestamp: 1 })
    expectRun(await semats(['clean', p, '-v']), {
      code: 0,
      stdout: 'cleaned: true\n',
      stderr: `[INFO] Cleaning stale locks: <DIR>/${path.basename(p)}\n`,
    })
    assert.ok(!fs.existsSync(p))
    writeLock(p, { pid: dead })
    expectRun(await semats(['clean', p, '--json']), { code: 0, stdout: '{\n  "cleaned": false\n}\n' })
    assert.ok(fs.existsSync(p))
    // a live holder's lock is never cleaned, however old (semats' rule: stale AND not running)
    await writeOldLiveLock(p)
    const status = JSON.parse((await semats(['status', p, '-j'])).stdout)
    assert.equal(status.locked, true)
    expectRun(await semats(['clean', p]), { code: 0, stdout: 'cleaned: false\n' })
    assert.ok(fs.existsSync(p))
  })
})
