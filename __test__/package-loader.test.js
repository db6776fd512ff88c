'use strict'
// The distribution layout and the native loader (lib/native.js): npm/<platform>/ packages that match the main
// package's napi.targets, and a copy of the package as npm installs it (outside the repository, no local
// build) that loads its binary from the platform package, or fails with a stable code and a message naming the
// platform, the package and what to do, never a contributor's command.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawnSync } = require('node:child_process')

const root = path.resolve(__dirname, '..')
const pkg = require('../package.json')
const { PUBLISHED } = require('../lib/platform')
const key = `linux-${process.arch}-gnu` // the host of these tests (the musl decision is proven under emulation)
const platformPkg = `${pkg.name}-${key}`

test('npm/<platform>/package.json: one per napi target, same version, os/cpu/libc, main and files', () => {
  const dirs = fs.readdirSync(path.join(root, 'npm')).sort()
  assert.deepEqual(dirs, [...PUBLISHED].sort())
  // The repository's package.json lists no platform package (scripts/package.js adds them when packing), so that
  // `npm ci` accepts the lock file in a clone.
  assert.equal(pkg.optionalDependencies, undefined)
  for (const d of dirs) {
    const sub = require(path.join(root, 'npm', d, 'package.json'))
    const [os_, cpu, abi] = d.split('-')
    assert.equal(sub.name, `${pkg.name}-${d}`)
    assert.equal(sub.version, pkg.version)
    assert.deepEqual(sub.os, [os_])
    assert.deepEqual(sub.cpu, [cpu])
    if (os_ === 'linux') assert.deepEqual(sub.libc, [abi === 'musl' ? 'musl' : 'glibc'])
    else assert.equal(sub.libc, undefined)
    assert.equal(sub.main, `${pkg.name}.${d}.node`)
    assert.deepEqual(sub.files, [sub.main])
    assert.ok(fs.existsSync(path.join(root, 'npm', d, 'README.md')), `${d}/README.md`)
  }
})

let work
let installed
/** A copy of the package as npm lays it out in a consumer's node_modules (no binary of its own). */
before(() => {
  work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sema-loader-')))
  installed = path.join(work, 'node_modules', pkg.name)
  fs.mkdirSync(installed, { recursive: true })
  for (const f of ['package.json', 'index.js', 'lib']) fs.cpSync(path.join(root, f), path.join(installed, f), { recursive: true })
})
after(() => fs.rmSync(work, { recursive: true, force: true }))

/** Loads the copy in a fresh Node (optionally pretending to be another arch); returns {code, message} or 'loaded'. */
function load(env = {}, arch) {
  const pretend = arch ? `Object.defineProperty(process, 'arch', { value: ${JSON.stringify(arch)} });` : ''
  const src = `${pretend} try { const m = require(${JSON.stringify(installed)}); console.log(JSON.stringify({ loaded: typeof m.acquire, from: Object.keys(require.cache).filter((f) => f.endsWith('.node')) })) } catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })) }`
  const e = { ...process.env, ...env }
  if (!('NAPI_RS_NATIVE_LIBRARY_PATH' in env)) delete e.NAPI_RS_NATIVE_LIBRARY_PATH
  const r = spawnSync(process.execPath, ['-e', src], { cwd: work, env: e, encoding: 'utf8' })
  assert.equal(r.status, 0, r.stderr)
  return JSON.parse(r.stdout)
}

function builtBinary() {
  const local = path.join(root, `${pkg.name}.${key}.node`)
  assert.ok(fs.existsSync(local), `${local} missing: run node scripts/setup.js`)
  return local
}

test('installed without its platform package: NATIVE_LOAD_FAILED naming the platform, the package and the fix', () => {
  const r = load()
  assert.equal(r.code, 'NATIVE_LOAD_FAILED')
  assert.match(r.message, new RegExp(`${platformPkg}@${pkg.version.replace(/\./g, '\\.')} is not installed`))
  assert.match(r.message, /--omit=optional/)
  assert.match(r.message, new RegExp(`npm install ${platformPkg}@`))
  assert.doesNotMatch(r.message, /npm run setup|cargo/)
})

test('an unpublished platform: UNSUPPORTED_PLATFORM naming it and the published ones', () => {
  const r = load({}, 'riscv64')
  assert.equal(r.code, 'UNSUPPORTED_PLATFORM')
  assert.match(r.message, /no prebuilt binary for linux-riscv64-gnu/)
  assert.match(r.message, /Published: linux-x64-gnu, linux-arm64-gnu, linux-x64-musl, darwin-x64, darwin-arm64, win32-x64-msvc/)
})

test('NAPI_RS_NATIVE_LIBRARY_PATH is honoured, and a bad one fails with NATIVE_LOAD_FAILED naming it', () => {
  const ok = load({ NAPI_RS_NATIVE_LIBRARY_PATH: builtBinary() })
  assert.equal(ok.loaded, 'function')
  assert.deepEqual(ok.from, [builtBinary()])
  const bad = load({ NAPI_RS_NATIVE_LIBRARY_PATH: path.join(work, 'nothing.node') })
  assert.equal(bad.code, 'NATIVE_LOAD_FAILED')
  assert.match(bad.message, /NAPI_RS_NATIVE_LIBRARY_PATH=.*nothing\.node could not be loaded on linux-/)
})

test('the platform package is loaded from node_modules, and refused at another version', () => {
  const dir = path.join(work, 'node_modules', platformPkg)
  fs.mkdirSync(dir, { recursive: true })
  const sub = { ...require(path.join(root, 'npm', key, 'package.json')) }
  fs.copyFileSync(builtBinary(), path.join(dir, sub.main))
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify(sub))
  const ok = load()
  assert.equal(ok.loaded, 'function')
  assert.deepEqual(ok.from, [path.join(dir, sub.main)])

  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ ...sub, version: '0.0.1' }))
  const old = load()
  assert.equal(old.code, 'NATIVE_LOAD_FAILED')
  assert.match(old.message, new RegExp(`${platformPkg} is version 0\\.0\\.1, ${pkg.name} is ${pkg.version.replace(/\./g, '\\.')}`))
  fs.rmSync(dir, { recursive: true })
})

test('in a clone, the local build beside package.json is loaded', () => {
  const r = spawnSync(process.execPath, ['-e', `require(${JSON.stringify(root)}); console.log(Object.keys(require.cache).filter((f) => f.endsWith('.node')).join())`], {
    env: { ...process.env, NAPI_RS_NATIVE_LIBRARY_PATH: '' },
    encoding: 'utf8',
  })
  assert.equal(r.status, 0, r.stderr)
  assert.equal(r.stdout.trim(), builtBinary())
})
