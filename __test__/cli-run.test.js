'use strict'
// `sema-native run <target> -- <command…>`: exit status pass-through, the lock held for the command's whole life
// (checked from other processes), signals passed on, release afterwards, recovery after the CLI is SIGKILLed,
// and the same over a real dflockd server. Readiness is signalled by the command's own output, not by sleeps.

const { describe, it, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { cli, start, until, mkTmp, rmTmp, BIN } = require('./fixtures/cli/helpers')

const NODE = process.execPath
/** Shell snippet: `S <args>` runs this package's CLI. */
const S = `S() { "${NODE}" "${BIN}" "$@"; }`

let dir
let n = 0
before(() => {
  dir = mkTmp('run-')
})
after(() => rmTmp(dir))

function lockPath() {
  return path.join(dir, `r${++n}.lock`)
}

function isAlive(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return e.code === 'EPERM'
  }
}

describe('run: exit status', { concurrency: true }, () => {
  it('passes 0 and 7 through, and releases', async () => {
    const p = lockPath()
    assert.deepEqual(await cli(['run', p, '--', 'sh', '-c', 'echo out; echo err >&2']), {
      code: 0,
      signal: null,
      stdout: 'out\n',
      stderr: 'err\n',
    })
    assert.ok(!fs.existsSync(p))
    const r = await cli(['run', p, '--timeout', '1s', '--', 'sh', '-c', 'exit 7'])
    assert.equal(r.code, 7)
    assert.ok(!fs.existsSync(p))
    // without '--' the command starts at the first word after the target
    assert.equal((await cli(['run', p, 'sh', '-c', 'exit 3'])).code, 3)
  })

  it('a command killed by a signal gives 128+N', async () => {
    const p = lockPath()
    const term = await cli(['run', p, '--', 'sh', '-c', 'kill -TERM $$'])
    assert.equal(term.code, 128 + os.constants.signals.SIGTERM)
    const kill = await cli(['run', p, '--', 'sh', '-c', 'kill -KILL $$'])
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
    const r = await cli(['run', p, '--timeout', '200ms', '--', 'touch', marker])
    assert.equal(r.code, 1)
    assert.equal(r.stderr, `sema-native: ${p}: Timeout waiting for lock after 200ms\n`)
    assert.ok(!fs.existsSync(marker))
    fs.unlinkSync(p)
  })
})

describe('run: the lock is held while the command runs', { concurrency: true }, () => {
  it('seen from other processes (status, try-acquire, run --timeout 0), gone afterwards', async () => {
    const p = lockPath()
    const script = `${S}
      S status "${p}" --json
      S try-acquire "${p}" --json
      S run "${p}" --timeout 0 -- echo never; echo "inner=$?"
      echo "me=$PPID"`
    const r = await cli(['run', p, '--tag', 'outer', '--', 'sh', '-c', script])
    assert.equal(r.code, 0, r.stderr)
    const [status, busy, inner, me] = r.stdout.trim().split('\n')
    const runPid = Number(/^me=(\d+)$/.exec(me)[1])
    const st = JSON.parse(status)
    assert.equal(st.locked, true)
    assert.equal(st.info.pid, runPid, 'recorded owner: the run process itself')
    assert.equal(st.info.tag, 'outer')
    assert.equal(JSON.parse(busy).error.type, 'ALREADY_LOCKED')
    assert.equal(inner, 'inner=1')
    assert.match(r.stderr, /Timeout waiting for lock after 0ms/)
    assert.ok(!fs.existsSync(p))
    assert.equal(JSON.parse((await cli(['status', p, '--json'])).stdout).locked, false)
  })

  it('two runs on one lock never overlap', async () => {
    const p = lockPath()
    const inside = path.join(dir, `inside-${n}`)
    // Each command creates an O_EXCL marker while it holds the lock (fails if the other is inside), then removes it.
    const body = `set -C; : > "${inside}" || exit 9; i=0; while [ $i -lt 20 ]; do i=$((i+1)); done; rm -f "${inside}"`
    const runs = Array.from({ length: 4 }, () => cli(['run', p, '--timeout', '20s', '--', 'sh', '-c', body]))
    for (const r of await Promise.all(runs)) assert.equal(r.code, 0, r.stderr)
  })
})

describe('run: signals', { concurrency: true }, () => {
  it('SIGTERM to the CLI reaches the command (which traps it); the CLI exits with its status and releases', async () => {
    const p = lockPath()
    const script = `trap 'echo got-TERM; exit 5' TERM; echo ready; while :; do sleep 0.05; done`
    const child = start(['run', p, '--', 'sh', '-c', script])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    assert.ok(fs.existsSync(p), 'held while running')
    child.kill('SIGTERM')
    const r = await child.done
    assert.equal(r.stdout, 'ready\ngot-TERM\n')
    assert.equal(r.code, 5)
    assert.ok(!fs.existsSync(p), 'released')
  })

  it('SIGINT and SIGHUP are passed on too; an untrapped one gives 128+N', async () => {
    for (const sig of ['SIGINT', 'SIGHUP']) {
      const p = lockPath()
      const child = start(['run', p, '--', 'sh', '-c', `trap 'echo got-${sig}; exit 0' ${sig.slice(3)}; echo ready; while :; do sleep 0.05; done`])
      await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
      child.kill(sig)
      const r = await child.done
      assert.equal(r.stdout, `ready\ngot-${sig}\n`)
      assert.equal(r.code, 0)
      assert.ok(!fs.existsSync(p))
    }
    const p = lockPath()
    const child = start(['run', p, '--', NODE, '-e', 'console.log("ready"); setInterval(() => {}, 1000)'])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    child.kill('SIGTERM')
    const r = await child.done
    assert.equal(r.code, 128 + os.constants.signals.SIGTERM)
    assert.ok(!fs.existsSync(p))
  })

  it('a signal while still waiting for the lock cancels the wait: exit 128+N, nothing runs', async () => {
    const p = lockPath()
    fs.writeFileSync(p, `pid=${process.pid}\ntimestamp=${Math.floor(Date.now() / 1000)}\n`)
    const marker = path.join(dir, `ran-${n}`)
    const child = start(['run', p, '-v', '--', 'touch', marker])
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

  it('the CLI SIGKILLed mid-run: the command keeps the lock while it runs (as with flock(1)), then it is reclaimed at once', async () => {
    const p = lockPath()
    // The command inherits the lock file's descriptor (fd 3) and waits for a line from a FIFO (not its stdin: Node
    // closes a child's stdin pipe when the child, here the wrapper, exits).
    const fifo = path.join(dir, `go-${n}`)
    assert.equal(spawnSync('mkfifo', [fifo]).status, 0)
    const first = start(['run', p, '--', 'sh', '-c', `echo "pid=$$"; read line < "${fifo}"; echo finished`])
    await until(() => /pid=\d+\n/.test(first.out), { what: 'the command to start' })
    const orphan = Number(/pid=(\d+)/.exec(first.out)[1])
    let second = null
    try {
      first.kill('SIGKILL')
      await first.done
      assert.ok(isAlive(orphan), 'the command outlives the wrapper')
      // The recorded pid (the wrapper's) is dead, but the command holds the lock: nobody else may enter.
      const status = JSON.parse((await cli(['status', p, '--json'])).stdout)
      assert.equal(status.isStale, false, JSON.stringify(status))
      assert.equal((await cli(['try-acquire', p])).code, 1)
      const busy = await cli(['run', p, '--timeout', '300ms', '--', 'echo', 'entered'])
      assert.equal(busy.code, 1, busy.stdout + busy.stderr)
      assert.equal(busy.stdout, '')
      // A second run waits; it enters once the first command has ended.
      second = start(['run', p, '--', 'sh', '-c', 'echo second'])
      await fs.promises.writeFile(fifo, 'go\n')
      const r = await second.done
      assert.equal(r.code, 0, r.stderr)
      assert.equal(r.stdout, 'second\n')
      assert.ok(first.out.includes('finished\n'), 'the first command had ended')
      assert.ok(!fs.existsSync(p))
    } finally {
      if (isAlive(orphan)) process.kill(orphan, 'SIGKILL')
      if (second && second.exitCode === null) second.kill('SIGKILL')
    }
  })
})

describe('run: losing the lock', () => {
  it('a lock file removed under a running command gives a warning on stderr; the command is not stopped', async () => {
    const p = lockPath()
    // --stale 2s makes the heartbeat (which notices the loss) run every 500 ms
    const child = start(['run', p, '--stale', '2s', '--', 'sh', '-c', `trap 'echo stopped; exit 0' TERM; echo ready; while :; do sleep 0.05; done`])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    fs.unlinkSync(p)
    await until(() => child.err.includes('warning'), { what: 'the loss warning' })
    assert.match(child.err, new RegExp(`^sema-native: warning: the lock on ${p} was lost while the command ran: `))
    assert.equal(child.exitCode, null, 'the command keeps running')
    child.kill('SIGTERM')
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
      S run "${url}" --timeout 0 -- echo never; echo "inner=$?"
      exit 4`
    const r = await cli(['run', url, '--timeout', '5s', '--', 'sh', '-c', script])
    assert.equal(r.code, 4, r.stderr)
    assert.equal(r.stdout, 'inner=1\n', 'a second holder is refused while the command runs')
    assert.match(r.stderr, /Timeout waiting for lock after 0ms/)
    // released: the next run gets it at once
    const after = await cli(['run', url, '--timeout', '0', '--', 'sh', '-c', 'echo got'])
    assert.deepEqual([after.code, after.stdout], [0, 'got\n'])
  })

  it('SIGTERM reaches the command and the dflockd lock is released', async (t) => {
    if (skip) return t.skip(skip)
    const url = server.url(`cli-sig-${process.pid}`)
    const child = start(['run', url, '--', 'sh', '-c', `trap 'echo got-TERM; exit 6' TERM; echo ready; while :; do sleep 0.05; done`])
    await until(() => child.out.includes('ready\n'), { what: 'the command to start' })
    child.kill('SIGTERM')
    const r = await child.done
    assert.deepEqual([r.code, r.stdout], [6, 'ready\ngot-TERM\n'])
    const again = await cli(['run', url, '--timeout', '0', '--', 'true'])
    assert.equal(again.code, 0, again.stderr)
  })
})
