'use strict'
// The other JS runtimes that load Node-API addons, Bun and Deno, installed from npm into .tools/runtimes/
// (git-ignored) at pinned versions, for scripts/test-runtimes.js and the suites that run code under them.
//
//   const rt = require('./runtimes')
//   rt.find('bun')     → {name, version, bin} when installed, else {name, version, skip: why}
//   rt.install()       → installs every runtime this platform has a package for (npm, no install scripts);
//                        returns [{name, version, bin} | {name, version, skip}]
//
// Installed as the per-platform binary packages (`@oven/bun-linux-x64`, `@deno/linux-x64-glibc`...) rather than the
// `bun`/`deno` packages: those only pick the same binary package in a postinstall script. Not devDependencies:
// every `npm install` of the project would then fetch ~200 MB of binaries that only this step uses.

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const dir = path.join(root, '.tools', 'runtimes')

const RUNTIMES = {
  // Bun 1.4 exports every uv_* symbol as an aborting stub; Deno 2.9 emulates uv_poll partly: the runtimes issue 24
  // was filed against.
  bun: {
    version: '1.4.5',
    packages: {
      'linux-x64': '@oven/bun-linux-x64',
      'linux-arm64': '@oven/bun-linux-aarch64',
      'darwin-x64': '@oven/bun-darwin-x64',
      'darwin-arm64': '@oven/bun-darwin-aarch64',
      'win32-x64': '@oven/bun-windows-x64',
    },
    bin: process.platform === 'win32' ? 'bin/bun.exe' : 'bin/bun',
  },
  deno: {
    version: '2.9.6',
    packages: {
      'linux-x64': '@deno/linux-x64-glibc',
      'linux-arm64': '@deno/linux-arm64-glibc',
      'darwin-x64': '@deno/darwin-x64',
      'darwin-arm64': '@deno/darwin-arm64',
      'win32-x64': '@deno/win32-x64',
    },
    bin: process.platform === 'win32' ? 'deno.exe' : 'deno',
  },
}

function packageOf(name) {
  const rt = RUNTIMES[name]
  const pkg = rt.packages[`${process.platform}-${process.arch}`]
  return pkg ? `${pkg}@${rt.version}` : null
}

function find(name) {
  const rt = RUNTIMES[name]
  const spec = packageOf(name)
  if (!spec) return { name, version: rt.version, skip: `no ${name} package for ${process.platform}-${process.arch}` }
  const pkg = spec.slice(0, spec.lastIndexOf('@'))
  const bin = path.join(dir, 'node_modules', pkg, rt.bin)
  let installed = null
  try {
    installed = JSON.parse(fs.readFileSync(path.join(dir, 'node_modules', pkg, 'package.json'), 'utf8')).version
  } catch {}
  if (installed !== rt.version || !fs.existsSync(bin)) {
    return { name, version: rt.version, skip: `${name} ${rt.version} is not installed: run \`node scripts/test-runtimes.js --install\`` }
  }
  return { name, version: rt.version, bin }
}

function install() {
  const wanted = Object.keys(RUNTIMES).map(packageOf).filter(Boolean)
  if (Object.keys(RUNTIMES).some((n) => find(n).skip) && wanted.length) {
    npmInstallInto(dir, Object.fromEntries(wanted.map((spec) => [spec.slice(0, spec.lastIndexOf('@')), spec.slice(spec.lastIndexOf('@') + 1)])))
  }
  return Object.keys(RUNTIMES).map(find)
}

/** Installs `dependencies` ({name: version or npm: alias}) into `into`/node_modules, without install scripts. */
function npmInstallInto(into, dependencies) {
  fs.mkdirSync(into, { recursive: true })
  // A package.json of its own lists them all: npm installs here, not into the repository's node_modules, and
  // keeps every package (an `npm install <one> --no-save` may prune the others).
  fs.writeFileSync(path.join(into, 'package.json'), `${JSON.stringify({ private: true, dependencies }, null, 2)}\n`)
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'
  const r = spawnSync(npm, ['install', '--no-package-lock', '--ignore-scripts', '--no-audit', '--no-fund'], {
    cwd: into,
    stdio: 'inherit',
    shell: process.platform === 'win32',
  })
  const names = Object.entries(dependencies).map(([n, v]) => `${n}@${v}`)
  if (r.status !== 0) throw new Error(`npm install ${names.join(' ')} failed (exit ${r.status}${r.error ? `: ${r.error.message}` : ''})`)
}

module.exports = { RUNTIMES, find, install, npmInstallInto, dir }
