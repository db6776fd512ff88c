#!/usr/bin/env node
'use strict'
// `npm run package`: builds the addon for every published platform on this Linux x86_64 machine and writes the
// installable tarballs into dist/: sema-native-<version>.tgz (JS, typings, CLI, docs; no binary) and one
// sema-native-<platform>-<version>.tgz per platform (npm/<platform>/, holding its .node file).
//   node scripts/package.js [--only=linux-x64-gnu,win32-x64-msvc] [--no-build] [--dist=DIR]
//   npm run package -- --only=linux-x64-gnu     (npm keeps an option before `--` for itself)
// --only builds and packs those platforms' packages; the main tarball is always packed (it holds no binary, and an
// install of a platform package needs it beside). --dist: where the tarballs go (default dist/).
// Linux and macOS build with cargo-zigbuild (zig as the C compiler and linker: the `.2.17` suffix links against
// glibc 2.17 symbols, so the gnu binaries load on any glibc >= 2.17); Windows with mingw-w64 (x86_64-pc-windows-gnu,
// shipped under the -msvc name the loader uses on official Windows Node). scripts/toolchains.sh installs all of
// it; this script runs its `build` part first (idempotent). Each target has its own cargo target directory under target/, so rebuilds are cached.
// Prints each tarball's size and the newest GLIBC symbol version each gnu binary needs (fails above 2.28).

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const cross = process.env.SEMA_CROSS_DIR || path.join(root, '.tools', 'cross')
const pkg = require('../package.json')
const GLIBC_CEILING = '2.28' // Debian 10, RHEL 8, Ubuntu 18.10; we link against 2.17 symbols, far below it

/** A macOS binary's own name (LC_ID_DYLIB) is otherwise the build machine's path to it. */
const installName = (key) => `-C link-arg=-Wl,-install_name,@rpath/${pkg.name}.${key}.node`

/** Every published platform: napi-rs' key, the Rust target, how to build it and the file cargo writes. */
const TARGETS = [
  { key: 'linux-x64-gnu', triple: 'x86_64-unknown-linux-gnu', zig: '.2.17', out: 'libsema_native.so' },
  { key: 'linux-arm64-gnu', triple: 'aarch64-unknown-linux-gnu', zig: '.2.17', out: 'libsema_native.so' },
  // -crt-static: a cdylib loaded by a dynamically linked musl Node must link musl dynamically.
  { key: 'linux-x64-musl', triple: 'x86_64-unknown-linux-musl', zig: '', out: 'libsema_native.so', rustflags: '-C target-feature=-crt-static' },
  // SDKROOT: framework stubs (scripts/toolchains.sh) in place of Apple's SDK, which cannot be installed here.
  { key: 'darwin-x64', triple: 'x86_64-apple-darwin', zig: '', out: 'libsema_native.dylib', rustflags: installName('darwin-x64'), env: { MACOSX_DEPLOYMENT_TARGET: '10.13', SDKROOT: path.join(cross, 'macos-sdk-stub') } },
  { key: 'darwin-arm64', triple: 'aarch64-apple-darwin', zig: '', out: 'libsema_native.dylib', rustflags: installName('darwin-arm64'), env: { MACOSX_DEPLOYMENT_TARGET: '11.0', SDKROOT: path.join(cross, 'macos-sdk-stub') } },
  // napi-build wants LIBNODE_PATH on windows-gnu: an import library of node.exe's N-API (scripts/toolchains.sh).
  { key: 'win32-x64-msvc', triple: 'x86_64-pc-windows-gnu', zig: null, out: 'sema_native.dll', env: { LIBNODE_PATH: path.join(cross, 'libnode-win-x64') } },
]

function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', ...options })
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`)
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited with ${r.status ?? r.signal}`)
  return r
}

function buildEnv(t) {
  const env = {
    ...process.env,
    PATH: `${path.join(cross, 'venv', 'bin')}${path.delimiter}${process.env.PATH}`,
    CARGO_TARGET_DIR: path.join(root, 'target', `cross-${t.key}`),
    XDG_CACHE_HOME: path.join(cross, 'cache'),
    ZIG_GLOBAL_CACHE_DIR: path.join(cross, 'cache', 'zig'),
    ...t.env,
  }
  if (t.rustflags) env.RUSTFLAGS = t.rustflags
  return env
}

/** Builds one target and copies its binary to npm/<key>/sema-native.<key>.node. */
function build(t) {
  const env = buildEnv(t)
  const args = t.zig === null ? ['build', '--release', '--target', t.triple] : ['zigbuild', '--release', '--target', t.triple + t.zig]
  args.push('-p', 'sema-native', '--quiet')
  const start = Date.now()
  run('cargo', args, { env })
  const from = path.join(env.CARGO_TARGET_DIR, t.triple, 'release', t.out)
  const to = path.join(root, 'npm', t.key, `${pkg.name}.${t.key}.node`)
  fs.copyFileSync(from, to)
  return (Date.now() - start) / 1000
}

/** The newest GLIBC_x.y symbol version a binary needs (readelf reads any architecture). */
function newestGlibc(file) {
  const r = spawnSync('readelf', ['-W', '--dyn-syms', '--version-info', file], { encoding: 'utf8', maxBuffer: 64 << 20 })
  if (r.status !== 0) throw new Error(`readelf ${file}: ${r.stderr}`)
  const versions = [...new Set([...r.stdout.matchAll(/GLIBC_(\d+(?:\.\d+)+)/g)].map((m) => m[1]))]
  return versions.sort(compareVersions).pop()
}

function compareVersions(a, b) {
  const pa = a.split('.').map(Number)
  const pb = b.split('.').map(Number)
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0)
    if (d) return d
  }
  return 0
}

/**
 * A macOS binary must import every symbol two-level (from a named library) except N-API's, which the host Node
 * provides: a flat-namespace import of anything else means the framework stubs lack it.
 */
function checkMachoImports(file) {
  const flat = new Set()
  for (const kind of ['--bind', '--lazy-bind', '--weak-bind']) {
    const r = spawnSync('llvm-objdump', ['--macho', kind, file], { encoding: 'utf8', maxBuffer: 64 << 20 })
    if (r.status !== 0) throw new Error(`llvm-objdump ${kind} ${file}: ${r.stderr}`)
    for (const line of r.stdout.split('\n')) {
      if (line.includes('flat-namespace')) flat.add(line.trim().split(/\s+/).pop())
    }
  }
  const stray = [...flat].filter((s) => !/^_(napi|node_api)_/.test(s))
  if (stray.length) throw new Error(`${file} imports ${stray.join(' ')} from no library: add them to the framework stubs in scripts/toolchains.sh`)
  const deps = spawnSync('llvm-objdump', ['--macho', '--dylibs-used', file], { encoding: 'utf8' }).stdout
  return deps.split('\n').slice(1).map((l) => l.trim().split(' ')[0]).filter(Boolean)
}

/** `npm pack <dir>` into dist/; returns the tarball's path. */
function pack(dir, dist) {
  const r = spawnSync('npm', ['pack', dir, '--pack-destination', dist, '--json', '--ignore-scripts'], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  if (r.status !== 0) throw new Error(`npm pack ${dir} failed`)
  return path.join(dist, JSON.parse(r.stdout)[0].filename)
}

/**
 * Packs the main package from a staged copy whose package.json lists every platform package as an optional
 * dependency at this version. The repository's own package.json lists none (package.json's `napi.targets` is the
 * one list): they are not on the registry before a release, and `npm ci` in a clone refuses a lock file that
 * cannot hold them.
 */
function packMain(dist) {
  const stage = path.join(dist, 'stage', pkg.name)
  fs.rmSync(stage, { recursive: true, force: true })
  fs.mkdirSync(stage, { recursive: true })
  for (const f of [...pkg.files, 'README.md']) fs.cpSync(path.join(root, f), path.join(stage, f), { recursive: true })
  const optionalDependencies = Object.fromEntries(TARGETS.map((t) => [`${pkg.name}-${t.key}`, pkg.version]))
  fs.writeFileSync(path.join(stage, 'package.json'), `${JSON.stringify({ ...pkg, optionalDependencies }, null, 2)}\n`)
  try {
    return pack(stage, dist)
  } finally {
    fs.rmSync(path.join(dist, 'stage'), { recursive: true, force: true })
  }
}

/** package.json's napi.targets and the build table above name the same platforms. */
function checkTargets() {
  const { tripleKey } = require('../lib/platform')
  const listed = pkg.napi.targets.map(tripleKey).sort().join(',')
  const built = TARGETS.map((t) => t.key).sort().join(',')
  if (listed !== built) throw new Error(`package.json napi.targets (${listed}) and scripts/package.js TARGETS (${built}) differ`)
}

function main() {
  checkTargets()
  const argv = process.argv.slice(2)
  const only = argv.find((a) => a.startsWith('--only='))?.slice(7).split(',')
  const targets = only ? TARGETS.filter((t) => only.includes(t.key)) : TARGETS
  if (only && targets.length !== only.length) throw new Error(`unknown platform in --only; known: ${TARGETS.map((t) => t.key).join(', ')}`)
  const dist = path.resolve(root, argv.find((a) => a.startsWith('--dist='))?.slice(7) ?? 'dist')
  fs.mkdirSync(dist, { recursive: true })
  // The cross toolchains (zig, cargo-zigbuild, mingw-w64, rustup targets, macOS stubs): installed when missing, a
  // few seconds' check when present, so that `npm run package` works as the first command on a clone.
  if (!argv.includes('--no-build')) run('bash', [path.join(root, 'scripts', 'toolchains.sh'), 'build'])
  const rows = []
  let tooNew = []
  for (const t of targets) {
    const sub = require(path.join(root, 'npm', t.key, 'package.json'))
    if (sub.version !== pkg.version) throw new Error(`npm/${t.key}: ${sub.name}@${sub.version} must be at ${pkg.version}`)
    let seconds = null
    if (!argv.includes('--no-build')) {
      console.error(`[package] building ${t.key} (${t.triple}${t.zig ?? ''})`)
      seconds = build(t)
    }
    const node = path.join(root, 'npm', t.key, sub.main)
    if (!fs.existsSync(node)) throw new Error(`${node} is missing: build it (drop --no-build)`)
    const glibc = t.key.endsWith('-gnu') ? newestGlibc(node) : null
    if (t.key.startsWith('darwin')) console.error(`[package] ${t.key} links ${checkMachoImports(node).join(', ')}`)
    if (glibc && compareVersions(glibc, GLIBC_CEILING) > 0) tooNew.push(`${t.key} needs GLIBC_${glibc}`)
    fs.copyFileSync(path.join(root, 'LICENSE'), path.join(root, 'npm', t.key, 'LICENSE'))
    const tgz = pack(`./npm/${t.key}`, dist)
    rows.push({ file: path.basename(tgz), bytes: fs.statSync(tgz).size, glibc, seconds })
  }
  const tgz = packMain(dist)
  rows.push({ file: path.basename(tgz), bytes: fs.statSync(tgz).size, glibc: null, seconds: null })
  console.log('\n| tarball | size | newest GLIBC symbol | build time |\n|---|---|---|---|')
  for (const r of rows) {
    console.log(`| ${r.file} | ${(r.bytes / 1024).toFixed(1)} KiB | ${r.glibc ? `GLIBC_${r.glibc}` : '–'} | ${r.seconds === null ? '–' : `${r.seconds.toFixed(0)} s`} |`)
  }
  if (tooNew.length) throw new Error(`glibc floor above ${GLIBC_CEILING}: ${tooNew.join('; ')}`)
}

try {
  main()
} catch (err) {
  console.error(`[package] ${err.message}`)
  process.exit(1)
}
