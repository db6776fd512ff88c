'use strict'
// The CLI where the native addon cannot load: a copy of the package as npm lays it out in a consumer's node_modules
// without its platform package (`--omit=optional`, a node_modules copied from another platform). `--help` and
// `--version` (also `<command> --help`, and the sema/semats front ends' help) work without the addon; every other
// command fails with the loader's own message (NATIVE_LOAD_FAILED, UNSUPPORTED_PLATFORM), exit 3, no stack trace.
// --help names the docs by a path that exists in the installed package.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawnSync } = require('node:child_process')

const root = path.resolve(__dirname, '..')
const pkg = require('../package.json')

let work
let installed
before(() => {
  work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sema-cli-no-binary-')))
  installed = path.join(work, 'node_modules', pkg.name)
  fs.mkdirSync(installed, { recursive: true })
  for (const f of pkg.files) fs.cpSync(path.join(root, f), path.join(installed, f), { recursive: true })
  fs.copyFileSync(path.join(root, 'package.json'), path.join(installed, 'package.json'))
  // Pretends to be a platform no binary is published for.
  fs.writeFileSync(path.join(work, 'riscv64.js'), "Object.defineProperty(process, 'arch', { value: 'riscv64' })\n")
})
after(() => fs.rmSync(work, { recursive: true, force: true }))

function cli(args, preload) {
  const env = { ...process.env }
  delete env.NAPI_RS_NATIVE_LIBRARY_PATH
  const argv = [...(preload ? ['--require', path.join(work, preload)] : []), path.join(installed, pkg.bin['sema-native']), ...args]
  return spawnSync(process.execPath, argv, { cwd: work, env, encoding: 'utf8', timeout: 30_000 })
}

test('--help, --version and <command> --help work without the addon; --help names docs that exist', () => {
  const help = cli(['--help'])
  assert.equal(help.status, 0, help.stderr)
  assert.match(help.stdout, /^Usage: sema-native <command> <target> \[options\]\n/)
  const docs = /^Docs: (.*)$/m.exec(help.stdout)
  assert.ok(docs, help.stdout)
  assert.equal(docs[1], path.join(installed, 'docs', 'cli.md'))
  assert.ok(fs.existsSync(docs[1]), `${docs[1]} is installed with the package`)
  assert.match(help.stdout, new RegExp(`^ {6}${pkg.homepage.replace(/[.?#]/g, '\\$&')}$`, 'm'))

  const version = cli(['--version'])
  assert.equal(version.status, 0, version.stderr)
  assert.equal(version.stdout, `sema-native ${pkg.version}\n`)

  for (const args of [['acquire', '--help'], ['run', 'x.lock', '-h'], ['help', 'status']]) {
    const r = cli(args)
    assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`)
    assert.match(r.stdout, new RegExp(`^Usage: sema-native ${args[0] === 'help' ? args[1] : args[0]} `), args.join(' '))
  }
  const sema = cli(['sema', '--help'])
  assert.equal(sema.status, 0, sema.stderr)
  assert.match(sema.stderr, /^file-semaphore /)
  const semats = cli(['semats', '--help'])
  assert.equal(semats.status, 0, semats.stderr)
  assert.match(semats.stdout, /^Usage: semats /)
})

test('any other command: the loader message alone (NATIVE_LOAD_FAILED), exit 3, no stack trace', () => {
  for (const args of [['status', 'x.lock'], ['try-acquire', 'x.lock'], ['run', 'x.lock', '--', 'true'], ['status', '--bogus'], ['semats', 'status', 'x.lock']]) {
    const r = cli(args)
    assert.equal(r.status, 3, `${args.join(' ')}: ${r.stdout}${r.stderr}`)
    assert.match(r.stderr, new RegExp(`^sema-native: the platform package ${pkg.name}-linux-${process.arch}-gnu@${pkg.version.replace(/\./g, '\\.')} is not installed .*npm install`), args.join(' '))
    assert.doesNotMatch(r.stderr, /\n\s+at /, `${args.join(' ')}: no stack trace`)
    assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr)
  }
})

test('an unpublished platform: UNSUPPORTED_PLATFORM, exit 3, no stack trace; --help still works', () => {
  const r = cli(['status', 'x.lock'], 'riscv64.js')
  assert.equal(r.status, 3, r.stderr)
  assert.match(r.stderr, /^sema-native: no prebuilt binary for linux-riscv64-gnu /)
  assert.doesNotMatch(r.stderr, /\n\s+at /)
  const help = cli(['--help'], 'riscv64.js')
  assert.equal(help.status, 0, help.stderr)
})
