'use strict'
// The waiting line of the CLI: on a terminal (a real pseudo-terminal through util-linux `script`), `run`, `acquire`
// and `wait` show whom they wait for (pid, command, tag, held for, waiting) on one line redrawn in place and erased
// when the wait ends; nothing in a pipe, nothing with --quiet.

const { describe, test, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const { cli } = require('./fixtures/cli/helpers')
const d = require('./helpers/dflockd')
const sema = require('..')

const BIN = path.join(__dirname, '..', 'bin', 'sema-native.js')
const hasScript = process.platform === 'linux' && spawnSync('script', ['--version']).status === 0
const tmp = u.testDir('line-', { name: 'build', own: true })

after(async () => {
  u.killAll()
  await d.stopAll()
})

/** `sema-native …args` in a pseudo-terminal 200 columns wide; `.seen(re)` resolves when the terminal showed `re`. */
function inTerminal(args) {
  const quoted = [process.execPath, BIN, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')
  const child = u.spawnTracked('script', ['-qfec', `stty cols 200; ${quoted}`, '/dev/null'])
  child.stdin.end()
  const watchers = []
  child.stdout.on('data', () => {
    for (const w of [...watchers]) {
      if (w.re.test(child.stdoutText)) {
        watchers.splice(watchers.indexOf(w), 1)
        w.resolve(child.stdoutText)
      }
    }
  })
  child.seen = (re) =>
    new Promise((resolve, reject) => {
      if (re.test(child.stdoutText)) return resolve(child.stdoutText)
      const w = { re, resolve }
      watchers.push(w)
      setTimeout(() => {
        if (!watchers.includes(w)) return
        watchers.splice(watchers.indexOf(w), 1)
        reject(new Error(`the terminal did not show ${re} within ${u.scaled(15000)} ms; it showed ${JSON.stringify(child.stdoutText)}`))
      }, u.scaled(15000)).unref()
    })
  return child
}

describe('the waiting line', { skip: !hasScript && 'needs Linux and util-linux script (a pseudo-terminal)' }, () => {
  test('run on a terminal: names the holder, its command and tag, redrawn in place, erased once the lock is taken', async () => {
    const file = tmp.fresh()
    const h = await u.holder(file, { tag: 'nightly' })
    const term = inTerminal(['run', file, '--', 'echo', 'DONE'])
    const line = new RegExp(`\\rwaiting for build\\.lock: held by pid ${h.child.pid} \\(node file-holder\\.js build\\.lock .*, tag "nightly"\\) for \\d+s, 1 waiting\\x1b\\[K`)
    await term.seen(line)
    h.child.stdin.write('release\n')
    const r = await u.waitExit(term, 15000, 'run in a terminal')
    assert.equal(r.code, 0, r.stdout)
    // The last thing before the command's output is the erase of the line.
    assert.match(r.stdout, /\r\x1b\[K(\r\n)?DONE\r?\n$/)
    assert.ok(!/[^\r\n]\r?\nDONE/.test(r.stdout.replace(/\x1b\[K/g, '')), 'no line left above the output')
  })

  test('acquire and wait on a terminal show it too; --quiet shows nothing', async () => {
    const file = tmp.fresh()
    const h = await u.holder(file)
    const w = inTerminal(['wait', file])
    await w.seen(new RegExp(`waiting for build\\.lock: held by pid ${h.child.pid} `))
    const q = inTerminal(['acquire', file, '--quiet', '--pid', String(process.pid)])
    h.child.stdin.write('release\n')
    const rw = await u.waitExit(w, 15000, 'wait in a terminal')
    assert.equal(rw.code, 0, rw.stdout)
    assert.match(rw.stdout, /\r\x1b\[Kfree /)
    const rq = await u.waitExit(q, 15000, 'acquire --quiet in a terminal')
    assert.equal(rq.code, 0, rq.stdout)
    assert.equal(rq.stdout, '', 'nothing at all with --quiet')
    fs.rmSync(file)
  })

  test("dflockd on a terminal: held, the lease, the server's waiter count", { skip: d.skipReason() || d.goOnly() }, async () => {
    const s = await d.startServer()
    const url = s.url('line-key')
    const r = await sema.acquire(url)
    assert.equal(r.ok, true, JSON.stringify(r.error))
    const term = inTerminal(['run', url, '--', 'echo', 'DONE'])
    await term.seen(new RegExp(`\\rwaiting for dflockd://127\\.0\\.0\\.1:${s.port}/line-key: held \\(lease expires in \\d+s\\), 1 waiting\\x1b\\[K`))
    await r.value.release()
    const done = await u.waitExit(term, 15000, 'run in a terminal')
    assert.equal(done.code, 0, done.stdout)
    assert.match(done.stdout, /\r\x1b\[K(\r\n)?DONE\r?\n$/)
  })

  test('in a pipe: no line, no escape sequence', async () => {
    const file = tmp.fresh()
    const h = await u.holder(file, { tag: 'nightly' })
    const pending = cli(['run', file, '--', 'echo', 'DONE'])
    // `run` stands in the lock's line (ls counts it) in two listings in a row: it has waited longer than the line's
    // 150 ms delay (one CLI start takes more than that).
    let seen = 0
    const inLine = async () => {
      const l = JSON.parse((await cli(['ls', path.dirname(file), '--json'])).stdout).locks.find((x) => x.name === 'build.lock')
      seen = l.waiters >= 1 ? seen + 1 : 0
      return seen >= 2
    }
    await u.until(inLine, { timeoutMs: 15000, intervalMs: 0, what: 'run standing in line in two listings in a row' })
    h.child.stdin.write('release\n')
    const r = await pending
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout, 'DONE\n')
    assert.equal(r.stderr, '')
  })
})
