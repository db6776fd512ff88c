'use strict'
// Issue 23 point 6 (CLI part): one exit-code table, true for every command (lib/cli/common.js exitCodeFor;
// docs/cli.md "Exit codes" and `--help`). Each condition is made once and every command that can meet it is run
// against it: the same condition gives the same code whichever command met it. And the Semaphore class refuses a
// target string that is not a path, with the one-string API's rule (lib/target.js).

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const u = require('./helpers/file-util')
const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { cli, mkTmp, rmTmp } = require('./fixtures/cli/helpers')
const sema = require('..')

const BIN = path.resolve(__dirname, '..', 'bin', 'sema-native.js')
const root = typeof process.getuid === 'function' && process.getuid() === 0 && process.platform === 'linux'
const NOBODY = ['--reuid=65534', '--regid=65534', '--clear-groups']

let dir
let n = 0
before(() => {
  dir = fs.realpathSync(mkTmp('interop-exit-'))
})
after(() => rmTmp(dir))

function lockPath() {
  return path.join(dir, `l${++n}.lock`)
}

const TRUE = [process.execPath, '-e', '']

/** Every command of the own CLI on `p` (run with a command that would succeed), plus extra args. */
function commands(p, extra = []) {
  return {
    acquire: ['acquire', p, '--timeout', '0', ...extra],
    'try-acquire': ['try-acquire', p, ...extra],
    release: ['release', p, ...extra],
    status: ['status', p, ...extra],
    clean: ['clean', p, ...extra],
    wait: ['wait', p, '--timeout', '0', ...extra],
    run: ['run', p, '--timeout', '0', ...extra, '--', ...TRUE],
  }
}

async function codes(cmds, only) {
  const out = {}
  for (const [name, args] of Object.entries(cmds)) {
    if (only && !only.includes(name)) continue
    const r = await cli(args)
    out[name] = r.code
  }
  return out
}

describe('own CLI: one exit-code table for every command', { concurrency: true }, () => {
  it('a busy lock: 1 from every command that wants it; status and clean answer 0', async (t) => {
    const p = lockPath()
    // Held by a live process that is neither the CLI nor its parent (this test), in sema's layout: not stale.
    const holder = spawn('sleep', ['60'], { stdio: 'ignore' })
    t.after(() => holder.kill('SIGKILL'))
    fs.writeFileSync(p, `pid=${holder.pid}\ntimestamp=${Math.floor(Date.now() / 1000)}\n`)
    assert.deepEqual(await codes(commands(p)), {
      acquire: 1,
      'try-acquire': 1,
      release: 1, // another owner: refused
      status: 0,
      clean: 0,
      wait: 1,
      run: 1,
    })
  })

  it('a missing directory: 3 from every command', async () => {
    const p = path.join(dir, 'no-such-dir', 'x.lock')
    assert.deepEqual(await codes(commands(p)), {
      acquire: 3,
      'try-acquire': 3,
      release: 3,
      status: 3,
      clean: 3,
      wait: 3,
      run: 3,
    })
  })

  it('a usage error: 2 from every command', async () => {
    const got = await codes(commands(lockPath(), ['--no-such-option']))
    assert.deepEqual(Object.values(got), Object.values(got).map(() => 2), JSON.stringify(got))
  })

  it('the OS refusing us (PERMISSION_DENIED, a directory we may not write): 3 from acquire, try-acquire and run', async (t) => {
    if (!root) return t.skip('needs root on Linux, to run the CLI as nobody (setpriv)')
    fs.chmodSync(dir, 0o755) // nobody may look in the test directory...
    const d = path.join(dir, 'readonly')
    fs.mkdirSync(d, { mode: 0o755 }) // ...and not create files in this one
    const p = path.join(d, 'x.lock')
    const got = {}
    const types = {}
    const plain = commands(p)
    for (const [name, json] of Object.entries(commands(p, ['--json']))) {
      const args = name === 'run' ? plain.run : json // run has no --json: its stdout is its command's
      const r = spawnSync('setpriv', [...NOBODY, process.execPath, BIN, ...args], { encoding: 'utf8', timeout: u.scaled(20_000) })
      got[name] = r.status
      if (name !== 'run') types[name] = JSON.parse(r.stdout.trim().split('\n').pop()).error?.type ?? 'ok'
    }
    assert.deepEqual(types, {
      acquire: 'PERMISSION_DENIED',
      'try-acquire': 'PERMISSION_DENIED',
      release: 'NOT_LOCKED',
      status: 'ok',
      clean: 'ok',
      wait: 'ok',
    })
    assert.deepEqual(got, { acquire: 3, 'try-acquire': 3, release: 1, status: 0, clean: 0, wait: 0, run: 3 })
  })

  it('--help and docs/cli.md state the same table', async () => {
    const help = (await cli(['--help'])).stdout
    const docs = fs.readFileSync(path.join(__dirname, '..', 'docs', 'cli.md'), 'utf8')
    const table = docs.slice(docs.indexOf('## Exit codes'), docs.indexOf('## JSON output'))
    assert.match(help, /1 {2}lock busy, timed out, release refused or nothing to release/)
    assert.match(help, /3 {2}I\/O, connection or other error \(the OS refusing access too\)/)
    assert.match(table, /\| 1 \| the lock is busy .*`release` was refused \(another owner\)/)
    assert.match(table, /\| 3 \| I\/O, connection or other error \(.*permission denied/)
  })
})

describe('Semaphore refuses a target string that is not a path (the one-string API rule)', () => {
  it('dflockd://, http://, file: are INVALID_ARGUMENT, with no token in the message; paths with colons are paths', () => {
    for (const [p, re] of [
      ['dflockd://s3cret@host:6388/key', /Semaphore locks files, and 'dflockd:\/\/\*\*\*@host:6388\/key' is a dflockd target/],
      ['http://example.com/x.lock', /unsupported target 'http:\/\/example.com\/x.lock': it starts like a URL with the scheme 'http:'/],
      ['file:///tmp/x.lock', /is a file URL: pass url.fileURLToPath\(\) of it/],
    ]) {
      assert.throws(
        () => new sema.Semaphore(p),
        (e) => e instanceof sema.LockError && e.code === 'INVALID_ARGUMENT' && re.test(e.message) && !e.message.includes('s3cret'),
        p,
      )
    }
    assert.ok(new sema.Semaphore(path.join(dir, 'a:b.lock')))
    // A single letter before the colon is a Windows drive, not a scheme: semats' path error.
    assert.throws(() => new sema.Semaphore('C:/x.lock'), /Parent directory does not exist/)
  })
})
