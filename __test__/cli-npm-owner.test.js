'use strict'
// `sema-native acquire` / `try-acquire` without --pid record their parent as the owner. Under npm (`npm run` of a
// one-command script, `npm exec -c`), the parent is npm's own process or the shell it started for this one command,
// which exit as soon as the command returns: the lock would be free a moment after success was reported. That is
// refused (exit 2, a message pointing to `run` and --pid), and nothing is created; the same for any `sh -c` that
// runs only this command (a make recipe line). A script line whose shell lives on (`a && b`) still works, as does
// --pid. Real npm, real shells.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const { readSema } = require('../scripts/sema-tool')

const BIN = path.join(u.ROOT, 'bin', 'sema-native.js')
const { oneCommandShell } = require('../lib/cli/common')
const hasNpm = spawnSync('npm', ['--version'], { encoding: 'utf8' }).status === 0
const WINDOWS = process.platform === 'win32'

let dir
before(() => {
  dir = u.mkTmp('npm-owner-')
})
after(() => {
  u.rmTmp(dir)
})

const q = (s) => JSON.stringify(s)
const node = q(process.execPath)

function npm(args) {
  const env = { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' }
  return spawnSync('npm', args, { cwd: dir, encoding: 'utf8', env, timeout: 60_000 })
}

test('npm run / npm exec: acquire and try-acquire refuse npm as the owner; a living shell or --pid is fine', { skip: !hasNpm && 'npm not installed', timeout: 120_000 }, () => {
  const f = (name) => path.join(dir, name)
  const check = `${node} -e "process.exit(require('fs').existsSync(process.argv[1]) ? 0 : 9)"`
  fs.writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({
      name: 'npm-owner-probe',
      version: '1.0.0',
      private: true,
      scripts: {
        acquire: `${node} ${q(BIN)} acquire ${q(f('a.lock'))}`,
        'try-acquire': `${node} ${q(BIN)} try-acquire ${q(f('b.lock'))}`,
        'shell-line': `${node} ${q(BIN)} try-acquire ${q(f('c.lock'))} -q && ${check} ${q(f('c.lock'))}`,
      },
    }),
  )
  for (const script of ['acquire', 'try-acquire']) {
    const r = npm(['run', '--silent', script])
    assert.notEqual(r.status, 0, `${script}: refused\n${r.stdout}${r.stderr}`)
    assert.match(r.stderr, /parent process \(pid \d+\) is (npm|a shell that runs only this command)/, script)
    assert.match(r.stderr, /sema-native run <target> -- <command>/, script)
  }
  const ex = npm(['exec', '--offline', '-c', `${node} ${q(BIN)} acquire ${q(f('d.lock'))}`])
  assert.notEqual(ex.status, 0, `npm exec: refused\n${ex.stdout}${ex.stderr}`)
  assert.match(ex.stderr, /is (npm|a shell that runs only this command)/)
  for (const name of ['a.lock', 'b.lock', 'd.lock']) assert.equal(fs.existsSync(f(name)), false, `${name} not created`)

  const line = npm(['run', '--silent', 'shell-line'])
  assert.equal(line.status, 0, `a shell that runs the whole line owns the lock\n${line.stdout}${line.stderr}`)

  // An explicit --pid is the user's choice (here: this test process, which outlives the command).
  const withPid = npm(['exec', '--offline', '-c', `${node} ${q(BIN)} try-acquire ${q(f('e.lock'))} --pid ${process.pid} -q`])
  assert.equal(withPid.status, 0, withPid.stderr)
  assert.ok(fs.readFileSync(f('e.lock'), 'utf8').startsWith(`pid=${process.pid}\n`))
})

test('xargs as the parent is refused (it exits after its last command)', { skip: WINDOWS && 'no xargs on Windows' }, () => {
  const file = path.join(dir, 'xargs.lock')
  const r = spawnSync('xargs', [process.execPath, BIN, 'try-acquire'], { input: `${file}\n`, encoding: 'utf8', timeout: 30_000 })
  assert.notEqual(r.status, 0, r.stderr)
  assert.match(r.stderr, /its parent process \(pid \d+\) is xargs/)
  assert.equal(fs.existsSync(file), false)
})

test('sh -c running only this command is refused; a line that goes on is not', { skip: WINDOWS && 'no POSIX shell on Windows' }, () => {
  const file = path.join(dir, 'sh.lock')
  const only = spawnSync('sh', ['-c', `${node} ${q(BIN)} acquire ${q(file)}`], { encoding: 'utf8', timeout: 30_000 })
  assert.equal(only.status, 2, only.stderr)
  assert.match(only.stderr, /a shell that runs only this command/)
  assert.equal(fs.existsSync(file), false)
  const line = spawnSync('sh', ['-c', `${node} ${q(BIN)} acquire ${q(file)} -q && cat ${q(file)}`], { encoding: 'utf8', timeout: 30_000 })
  assert.equal(line.status, 0, line.stderr)
  assert.match(line.stdout, /^pid=\d+\n/)
})

// A subshell (`$( … )`, backquotes, `( … )`, a pipeline's element) is a fork of the script's shell that exits as
// soon as its commands end: the lock is recorded for the shell it was forked from (the pid `$$` names in it), so it
// is held after the subshell is gone, by our engine and by the real sema alike.
for (const shell of ['bash', 'dash']) {
  const has = !WINDOWS && spawnSync(shell, ['-c', 'exit 0']).status === 0
  test(`${shell}: try-acquire inside $( ), backquotes, ( ) & and a pipeline records the script's shell, not the subshell`, { skip: !has && `no ${shell}` }, () => {
    const file = path.join(dir, `${shell}-subshell.lock`)
    const bin = `${node} ${q(BIN)}`
    const { bin: realSema } = readSema()
    for (const form of [
      `x=$(${bin} try-acquire ${q(file)} || echo refused)`,
      `x=\`${bin} try-acquire ${q(file)}; true\``,
      `x=$(${bin} try-acquire ${q(file)} | cat)`,
      `(${bin} try-acquire ${q(file)}; true) & wait`,
    ]) {
      // The script prints its pid and what try-acquire said, then whether `sema-native sema try` (and the real sema,
      // where built) is refused now that the subshell has exited, then releases the lock.
      const script = [
        form,
        'echo "shell=$$ said=$x"',
        `${bin} sema try ${q(file)} >/dev/null 2>&1; echo "ours=$?"`,
        realSema ? `${q(realSema)} try ${q(file)} >/dev/null 2>&1; echo "real=$?"` : 'echo real=1',
        `${bin} release --force ${q(file)} -q`,
      ].join('\n')
      fs.writeFileSync(path.join(dir, 'subshell.sh'), `${script}\n`)
      const r = spawnSync(shell, [path.join(dir, 'subshell.sh')], { encoding: 'utf8', timeout: 60_000 })
      assert.equal(r.status, 0, `${form}\n${r.stdout}${r.stderr}`)
      const shellPid = /shell=(\d+)/.exec(r.stdout)[1]
      if (form.startsWith('x=')) assert.match(r.stdout, new RegExp(`said=acquired .*\\(owner pid ${shellPid}\\)\n`), form)
      assert.match(r.stdout, /ours=1\n/, `${form}: sema try is refused after the subshell exited\n${r.stdout}`)
      assert.match(r.stdout, /real=1\n/, `${form}: the real sema refuses it too\n${r.stdout}`)
      assert.equal(fs.existsSync(file), false, 'released')
    }
  })
}

test('cmd.exe /c running only this command is refused (as npm runs a script line); a line that goes on is not', { skip: !WINDOWS && 'Windows only' }, () => {
  const file = path.join(dir, 'cmd.lock')
  const cmd = process.env.ComSpec || 'cmd.exe'
  // npm's way: `cmd.exe /d /s /c "<line>"` (with /s, cmd drops the outer quotes and runs the line as it is).
  const run = (line) => spawnSync(cmd, ['/d', '/s', '/c', `"${line}"`], { encoding: 'utf8', timeout: 60_000, windowsVerbatimArguments: true })
  const only = run(`${node} ${q(BIN)} acquire ${q(file)}`)
  assert.equal(only.status, 2, only.stdout + only.stderr)
  assert.match(only.stderr, /its parent process \(pid \d+\) is a shell that runs only this command \(.*cmd(\.exe)? \/c /i)
  assert.equal(fs.existsSync(file), false)
  const line = run(`${node} ${q(BIN)} acquire ${q(file)} -q && type ${q(file)}`)
  assert.equal(line.status, 0, line.stderr)
  assert.match(line.stdout, /^pid=\d+\r?\n/)
})

test('which command lines are shells that run only this command (sh, cmd.exe, PowerShell)', () => {
  const one = [
    ['sh', '-c', 'sema-native acquire x'],
    ['/bin/bash', '-ec', 'sema-native acquire x'],
    ['C:\\Program Files\\Git\\bin\\bash.exe', '-c', 'sema-native acquire x'],
    ['C:\\WINDOWS\\system32\\cmd.exe', '/d', '/s', '/c', '"sema-native acquire x"'],
    ['cmd', '/C', 'sema-native', 'acquire', 'x'],
    ['powershell.exe', '-NoProfile', '-Command', 'sema-native acquire x'],
    ['pwsh', '-c', 'sema-native acquire x'],
    ['pwsh', '-NoLogo', '-com', 'sema-native', 'acquire', 'x'],
  ]
  for (const args of one) assert.ok(oneCommandShell(args), `one command: ${JSON.stringify(args)}`)
  const goesOn = [
    ['sh', '-c', 'sema-native acquire x && build'],
    ['sh', '-c', 'sema-native acquire x; build'],
    ['sh', 'script.sh'],
    ['cmd.exe', '/d', '/s', '/c', '"sema-native acquire x && build"'],
    ['cmd.exe', '/c', 'sema-native acquire x & build'],
    ['cmd.exe', '/k', 'sema-native acquire x'],
    ['cmd.exe'],
    ['powershell', '-Command', 'sema-native acquire x; build'],
    ['pwsh', '-c', 'sema-native acquire x && build'],
    ['pwsh', '-Command', '-'],
    ['pwsh', '-File', 'build.ps1'],
    ['node', '-c', 'x'],
  ]
  for (const args of goesOn) assert.equal(oneCommandShell(args), null, `goes on: ${JSON.stringify(args)}`)
  // How a Windows command line is split: crates/sema-core/src/lockfile/process/windows_args.rs (its unit tests).
})
