'use strict'
// `sema-native run <target> -- <command…>`: exit status pass-through, the lock held for the command's whole life
// (checked from other processes), signals passed on, release afterwards, recovery after the CLI is killed, and the
// same over a real dflockd server. Readiness is signalled by the command's own output, not by sleeps.
//
// The commands are Node scripts run with this Node (no shell), so the suite runs on Windows too; the cases that
// need POSIX signals say so when skipped there.

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { cli, start, until, mkTmp, rmTmp } = require('./fixtures/cli/helpers')
const { WINE_DELETE, pidAlive: isAlive } = require('./helpers/file-util')

const NODE = process.execPath
const WINDOWS = process.platform === 'win32'
const POSIX_SIGNALS = WINDOWS && 'POSIX signals: Windows has none to send to a process (child.kill() is TerminateProcess)'

let dir
let n = 0
before(() => {
  dir = mkTmp('run-')
})
after(() => rmTmp(dir))

function lockPath() {
  return path.join(dir, `r${++n}.lock`)
}

let scripts = 0
/** The command that runs `code` (a Node script written to a file) with this Node: no shell, on every platform. */
function node(code, ...args) {
  const file = path.join(dir, `command-${++scripts}.js`)
  fs.writeFileSync(file, `'use strict'\n${code}\n`)
  return [NODE, file, ...args]
}

/** Script text: `S(...args)` runs this package's CLI to completion and returns spawnSync's result. */
const S = `const S = (...a) => require('node:child_process').spawnSync(process.execPath, [${JSON.stringify(require('./fixtures/cli/helpers').BIN)}, ...a], { encoding: 'utf8' })`

/** Script text: calls `then()` once the file `file` exists (directory events, with a coarse re-check behind them). */
const WHEN_FILE = `function whenFile(file, then) {
  const fs = require('node:fs')
  let done = false
  const check = () => { if (!done && fs.existsSync(file)) { done = true; then() } }
  fs.watch(require('node:path').dirname(file), check).unref()
  setInterval(check, 100)
  check()
}`

/** Script text: waits forever (until a signal or a kill). */
const FOREVER = 'setInterval(() => {}, 1000)'

describe('run: exit status', { concurrency: true }, () => {
  it('passes 0 and 7 through, and releases', async () => {
    const p = lockPath()
    assert.deepEqual(await cli(['run', p, '--', ...node('console.log("out"); console.error("err")')]), {
      code: 0,
      signal: null,
      stdout: 'out\n',
      stderr: 'err\n',
    })
    assert.ok(!fs.existsSync(p))
    const r = await cli(['run', p, '--timeout', '1s', '--', ...node('process.exit(7)')])
    assert.equal(r.code, 7)
    assert.ok(!fs.existsSync(p))
    // without '--' the command starts at the first word after the target
    assert.equal((await cli(['run', p, ...node('process.exitCode = 3')])).code, 3)
    // an exit code beyond a byte (Windows' are 32-bit; POSIX keeps the low 8 bits)
    const big = await cli(['run', p, '--', ...node('process.exit(259 + 1)')])
    assert.equal(big.code, WINDOWS ? 260 : 4)
  })

  it('a command killed by a signal gives 128+N', { skip: POSIX_SIGNALS }, async () => {
    const p = lockPath()
    const term = await cli(['run', p, '--', ...node('process.kill(process.pid, "SIGTERM")')])
    assert.equal(term.code, 128 + os.constants.signals.SIGTERM)
    const kill = await cli(['run', p, '--', ...node('process.kill(process.pid, "SIGKILL")')])
    assert.equal(kill.code, 128 + os.constants.signals.SIGKILL)
    assert.ok(!fs.existsSync(p))
  })

  it('a command that does not exist gives 127, and the lock is released', async () => {
    const p = lockPath()
    const r = await cli(['run', p, '--', 'sema-native-no-such-command-xyz'])
    assert.equal(r.code, 127)
    assert.equal(r.stderr, 'sema-native: sema-native-no-such-command-xyz: command not found\n')
    assert.ok(!fs.existsSync(p))
  })

  it('a busy lock: --timeout expires with exit 1 and the command never runs', async () => {
    const p = lockPath()
    fs.writeFileSync(p, `pid=${process.pid}\ntimestamp=${Math.floor(Date.now() / 1000)}\n`)
    const marker = path.join(dir, `ran-${n}`)
    const r = await cli(['run', p, '--timeout', '200ms', '--', ...node(`require('node:fs').writeFileSync(${JSON.stringify(marker)}, '')`)])
    assert.equal(r.code, 1)
    assert.match(r.stderr, new RegExp(`^sema-native: .*: Timeout waiting for lock after 200ms \\(held by pid ${process.pid} since .*\\)\\n$`))
    assert.ok(!fs.existsSync(marker))
    fs.unlinkSync(p)
  })
})

describe('run: the lock is held while the command runs', { concurrency: true }, () => {
  it('seen from other processes (status, try-acquire, run --timeout 0), gone afterwards', async () => {
    const p = lockPath()
    const script = `${S}
      const P = ${JSON.stringify(p)}
      const status = S('status', P, '--json')
      const busy = S('try-acquire', P, '--json')
      const inner = S('run', P, '--timeout', '0', '--', process.execPath, '-e', 'console.log("never")')
      console.log(JSON.stringify({ status: JSON.parse(status.stdout), busy: JSON.parse(busy.stdout), inner: inner.status, innerOut: inner.stdout, innerErr: inner.stderr, me: process.pid, parent: process.ppid }))`
    const r = await cli(['run', p, '--tag', 'outer', '--', ...node(script)], { timeoutMs: 60_000 })
    assert.equal(r.code, 0, r.stderr)
    const got = JSON.parse(r.stdout)
    assert.equal(got.status.locked, true)
    // The recorded holder: on Unix the run process itself (the command holds its descriptor); on Windows the
    // command, which run recorded as the holder (a byte-range lock cannot pass to it).
    assert.equal(got.status.info.pid, WINDOWS ? got.me : got.parent, 'the recorded holder')
    assert.equal(got.status.isStale, false)
    assert.equal(got.status.info.tag, 'outer')
    assert.equal(got.busy.error.type, 'ALREADY_LOCKED')
    assert.deepEqual([got.inner, got.innerOut], [1, ''])
    assert.match(got.innerErr, /Timeout waiting for lock after 0ms/)
    assert.ok(!fs.existsSync(p))
    assert.equal(JSON.parse((await cli(['status', p, '--json'])).stdout).locked, false)
  })

  it('two runs on one lock never overlap', async () => {
    const p = lockPath()
    const inside = path.join(dir, `inside-${n}`)
    // Each command creates an exclusive marker while it holds the lock (fails if the other is inside), then removes it.
    const body = node(`const fs = require('node:fs')
      try { fs.closeSync(fs.openSync(${JSON.stringify(inside)}, 'wx')) } catch { process.exit(9) }
      for (let i = 0; i < 1e6; i++);
      fs.unlinkSync(${JSON.stringify(inside)})`)
    const runs = Array.from({ length: 4 }, () => cli(['run', p, '--timeout', '60s', '--', ...body], { timeoutMs: 90_000 }))
    for (const r of await Promise.all(runs)) assert.equal(r.code, 0, r.stderr)
  })
})

describe('run: signals', { concurrency: true }, () => {
  it('SIGTERM to the CLI reaches the command (which traps it); the CLI exits with its status and releases', { skip: POSIX_SIGNALS }, async () => {
    const p = lockPath()
    const child = start(['run', p, '--', ...node(`process.on('SIGTERM', () => { console.log('got-TERM'); process.exit(5) }); console.log('ready'); ${FOREVER}`)])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    assert.ok(fs.existsSync(p), 'held while running')
    child.kill('SIGTERM')
    const r = await child.done
    assert.equal(r.stdout, 'ready\ngot-TERM\n')
    assert.equal(r.code, 5)
    assert.ok(!fs.existsSync(p), 'released')
  })

  it('SIGINT and SIGHUP are passed on too; an untrapped one gives 128+N', { skip: POSIX_SIGNALS }, async () => {
    for (const sig of ['SIGINT', 'SIGHUP']) {
      const p = lockPath()
      const child = start(['run', p, '--', ...node(`process.on('${sig}', () => { console.log('got-${sig}'); process.exit(0) }); console.log('ready'); ${FOREVER}`)])
      await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
      child.kill(sig)
      const r = await child.done
      assert.equal(r.stdout, `ready\ngot-${sig}\n`)
      assert.equal(r.code, 0)
      assert.ok(!fs.existsSync(p))
    }
    const p = lockPath()
    const child = start(['run', p, '--', ...node(`console.log("ready"); ${FOREVER}`)])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    child.kill('SIGTERM')
    const r = await child.done
    assert.equal(r.code, 128 + os.constants.signals.SIGTERM)
    assert.ok(!fs.existsSync(p))
  })

  it('a signal while still waiting for the lock cancels the wait: exit 128+N, nothing runs', { skip: POSIX_SIGNALS }, async () => {
    const p = lockPath()
    fs.writeFileSync(p, `pid=${process.pid}\ntimestamp=${Math.floor(Date.now() / 1000)}\n`)
    const marker = path.join(dir, `ran-${n}`)
    const child = start(['run', p, '-v', '--', ...node(`require('node:fs').writeFileSync(${JSON.stringify(marker)}, '')`)])
    await until(() => child.err.includes(`sema-native: waiting for ${p} (held by pid ${process.pid} since `), {
      what: 'the CLI to report that it waits',
    })
    child.kill('SIGINT')
    const r = await child.done
    assert.equal(r.code, 128 + os.constants.signals.SIGINT)
    assert.ok(!fs.existsSync(marker))
    assert.equal(fs.readFileSync(p, 'utf8').split('\n')[0], `pid=${process.pid}`, 'the holder\'s lock untouched')
    fs.unlinkSync(p)
  })
})

describe('run: the CLI killed mid-run', () => {
  /**
   * Starts `run p -- <command>`, where the command prints its pid, waits for the file `go`, writes the file
   * `finished` and exits; resolves once it runs.
   */
  async function startWaiting(p) {
    const go = path.join(dir, `go-${n}`)
    const finished = path.join(dir, `finished-${n}`)
    const command = node(`${WHEN_FILE}
      console.log('pid=' + process.pid)
      whenFile(${JSON.stringify(go)}, () => { require('node:fs').writeFileSync(${JSON.stringify(finished)}, ''); process.exit(0) })`)
    const first = start(['run', p, '--', ...command])
    await until(() => /pid=\d+\n/.test(first.out), { what: 'the command to start', timeoutMs: 30_000 })
    return { first, orphan: Number(/pid=(\d+)/.exec(first.out)[1]), go, finished }
  }

  it('Unix: the command keeps the lock while it runs (as with flock(1)), then it is reclaimed at once', { skip: WINDOWS && 'Windows: see the next case' }, async () => {
    const p = lockPath()
    // The command inherits the lock file's descriptor (fd 3) and waits for a file.
    const { first, orphan, go, finished } = await startWaiting(p)
    let second = null
    try {
      first.kill('SIGKILL')
      await first.done
      assert.ok(isAlive(orphan), 'the command outlives the wrapper')
      // The recorded pid (the wrapper's) is dead, but the command holds the lock: nobody else may enter.
      const status = JSON.parse((await cli(['status', p, '--json'])).stdout)
      assert.equal(status.isStale, false, JSON.stringify(status))
      assert.equal((await cli(['try-acquire', p])).code, 1)
      const busy = await cli(['run', p, '--timeout', '300ms', '--', NODE, '-e', 'console.log("entered")'])
      assert.equal(busy.code, 1, busy.stdout + busy.stderr)
      assert.equal(busy.stdout, '')
      // A second run waits; it enters once the first command has ended (its command sees the first one's mark).
      second = start(['run', p, '--', ...node(`console.log('second saw finished: ' + require('node:fs').existsSync(${JSON.stringify(finished)}))`)])
      await fs.promises.writeFile(go, '')
      const r = await second.done
      assert.equal(r.code, 0, r.stderr)
      assert.equal(r.stdout, 'second saw finished: true\n')
      assert.ok(!fs.existsSync(p))
    } finally {
      if (isAlive(orphan)) process.kill(orphan, 'SIGKILL')
      if (second && second.exitCode === null) second.kill('SIGKILL')
    }
  })

  it('Windows: the command is the recorded holder; killed with the wrapper (Node\'s kill-on-close job), the lock is free at once', { skip: !WINDOWS && 'Windows only' }, async () => {
    const p = lockPath()
    const { first, orphan, go, finished } = await startWaiting(p)
    try {
      // While both run, the file names the command (pid and creation time): it, not the wrapper, is the holder.
      const status = JSON.parse((await cli(['status', p, '--json'])).stdout)
      assert.deepEqual([status.info.pid, status.isStale, status.holderRunning], [orphan, false, true], JSON.stringify(status))
      assert.equal((await cli(['try-acquire', p])).code, 1)
      // TerminateProcess of the wrapper: libuv put the command in a job that is killed when the wrapper's last
      // handle of it closes, so the command ends too (it never runs unprotected), and its lock is free at once.
      first.kill('SIGKILL')
      await first.done
      await until(() => !isAlive(orphan), { what: 'the command to end with its wrapper', timeoutMs: 30_000 })
      // (try-acquire rather than a second run: under Wine, a process spawned right after a killed tree sometimes
      // fails to start, "spawn UNKNOWN", which is not what this case is about)
      const next = await cli(['try-acquire', p, '--json'])
      assert.equal(next.code, 0, next.stdout + next.stderr)
      assert.ok(!fs.existsSync(finished), 'the first command was stopped, it did not finish')
      assert.equal((await cli(['release', p])).code, 0)
      assert.ok(!fs.existsSync(p))
    } finally {
      if (isAlive(orphan)) process.kill(orphan, 'SIGKILL')
      fs.writeFileSync(go, '')
    }
  })
})

describe('run: losing the lock', () => {
  it('a lock file removed under a running command gives a warning on stderr; the command is not stopped', { skip: WINE_DELETE }, async () => {
    const p = lockPath()
    const stop = path.join(dir, `stop-${n}`)
    // --stale 2s makes the heartbeat (which notices the loss) run every 500 ms
    const child = start(['run', p, '--stale', '2s', '--', ...node(`${WHEN_FILE}
      console.log('ready')
      whenFile(${JSON.stringify(stop)}, () => { console.log('stopped'); process.exit(0) })`)])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    fs.unlinkSync(p)
    await until(() => child.err.includes('warning'), { what: 'the loss warning' })
    assert.match(child.err, new RegExp(`^sema-native: warning: the lock on ${p.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')} was lost while the command ran: `))
    assert.equal(child.exitCode, null, 'the command keeps running')
    fs.writeFileSync(stop, '')
    const r = await child.done
    assert.deepEqual([r.code, r.stdout], [0, 'ready\nstopped\n'])
    assert.equal(r.stderr.split('\n').filter(Boolean).length, 1, `one warning only: ${r.stderr}`)
  })
})

describe('run: dflockd', () => {
  let d
  let server
  let skip = null
  before(async () => {
    if (WINDOWS) {
      // A Windows Node cannot start the server binary the helper knows of (under Wine it is a Linux program):
      // scripts/test-emulated.js runs one on loopback and passes its port.
      const port = process.env.SEMA_DFLOCKD_PORT
      if (port) server = { url: (key) => `dflockd://127.0.0.1:${port}/${key}` }
      else skip = 'no dflockd server given in SEMA_DFLOCKD_PORT (a Windows Node cannot start the helper\'s server)'
      return
    }
    try {
      d = require('./helpers/dflockd')
    } catch (e) {
      skip = `__test__/helpers/dflockd.js is not available: ${e.message}`
      return
    }
    skip = d.skipReason()
    if (!skip) server = await d.startServer()
  })
  after(async () => {
    if (d) await d.stopAll()
  })

  it('holds a dflockd lock for the command\'s life and releases it after', async (t) => {
    if (skip) return t.skip(skip)
    const url = server.url(`cli-run-${process.pid}`)
    const script = `${S}
      const inner = S('run', ${JSON.stringify(url)}, '--timeout', '0', '--', process.execPath, '-e', 'console.log("never")')
      console.log('inner=' + inner.status)
      process.stderr.write(inner.stderr)
      process.exitCode = 4`
    const r = await cli(['run', url, '--timeout', '5s', '--', ...node(script)], { timeoutMs: 60_000 })
    assert.equal(r.code, 4, r.stderr)
    assert.equal(r.stdout, 'inner=1\n', 'a second holder is refused while the command runs')
    assert.match(r.stderr, /Timeout waiting for lock after 0ms/)
    // released: the next run gets it at once
    const after = await cli(['run', url, '--timeout', '0', '--', ...node('console.log("got")')])
    assert.deepEqual([after.code, after.stdout], [0, 'got\n'])
  })

  it('SIGTERM reaches the command and the dflockd lock is released', async (t) => {
    if (skip || POSIX_SIGNALS) return t.skip(skip || POSIX_SIGNALS)
    const url = server.url(`cli-sig-${process.pid}`)
    const child = start(['run', url, '--', ...node(`process.on('SIGTERM', () => { console.log('got-TERM'); process.exit(6) }); console.log('ready'); ${FOREVER}`)])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    child.kill('SIGTERM')
    const r = await child.done
    assert.deepEqual([r.code, r.stdout], [6, 'ready\ngot-TERM\n'])
    const again = await cli(['run', url, '--timeout', '0', '--', NODE, '-e', ''])
    assert.equal(again.code, 0, again.stderr)
  })
})
