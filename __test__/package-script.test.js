'use strict'
// scripts/package.js (`npm run package`): `--only=<platform>` packs that platform's package and the main one (the
// main tarball holds no binary; a consumer installs it beside any platform package). Run with --no-build for
// linux-x64-musl, into a temporary --dist: the test puts this host's build where a build would (npm/<platform>/).
// Packing reads only the file (musl: no glibc floor to check), and this host's gnu build would fail the floor the
// cross build keeps (it links the host's newest glibc symbols).

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawnSync } = require('node:child_process')

const root = path.resolve(__dirname, '..')
const pkg = require('../package.json')
const key = 'linux-x64-musl'
const sub = fs.existsSync(path.join(root, 'npm', key, 'package.json')) ? require(path.join(root, 'npm', key, 'package.json')) : null
const built = path.join(root, `${pkg.name}.linux-${process.arch}-gnu.node`)
const skip = process.platform !== 'linux' || process.arch !== 'x64' ? 'Linux x64 only' : !sub ? `no npm/${key}` : !fs.existsSync(built) ? `${built} not built` : false

let dist
let placed = null
before(() => {
  if (skip) return
  dist = fs.mkdtempSync(path.join(os.tmpdir(), 'sema-package-'))
  const target = path.join(root, 'npm', key, sub.main)
  if (!fs.existsSync(target)) {
    fs.copyFileSync(built, target)
    placed = target
  }
})
after(() => {
  if (dist) fs.rmSync(dist, { recursive: true, force: true })
  if (placed) fs.rmSync(placed, { force: true })
})

test('--only=<platform> packs that platform and the main tarball', { skip, timeout: 120_000 }, () => {
  const r = spawnSync(process.execPath, [path.join(root, 'scripts', 'package.js'), `--only=${key}`, '--no-build', `--dist=${dist}`], {
    cwd: root,
    encoding: 'utf8',
    timeout: 110_000,
  })
  assert.equal(r.status, 0, r.stderr)
  const files = fs.readdirSync(dist).filter((f) => f.endsWith('.tgz')).sort()
  assert.deepEqual(files, [`${pkg.name}-${key}-${pkg.version}.tgz`, `${pkg.name}-${pkg.version}.tgz`].sort())
})
