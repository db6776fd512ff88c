#!/usr/bin/env node
'use strict'
// Makes a fresh clone ready, so that `npm run demo` and `npm test` work as the first command typed:
// - installs the npm dev dependencies when node_modules is missing or older than package.json,
// - builds the native addon (cargo decides what is stale, a no-op build takes about a second),
// - with --with-server, installs a dflockd server and builds the real Rust `sema` CLI (for the interop tests)
//   into .tools/ (both reused when present).
// Uses Node built-ins only, because it runs before anything is installed.

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { installDflockd } = require('./dflockd-server')
const { installSema } = require('./sema-tool')

const root = path.resolve(__dirname, '..')
const args = new Set(process.argv.slice(2))

function run(cmd, cmdArgs, options = {}) {
  const r = spawnSync(cmd, cmdArgs, { cwd: root, stdio: 'inherit', ...options })
  if (r.error) throw new Error(`${cmd} could not start: ${r.error.message}`)
  if (r.status !== 0) throw new Error(`${cmd} ${cmdArgs.join(' ')} exited with ${r.status ?? r.signal}`)
}

function mtime(p) {
  try {
    return fs.statSync(p).mtimeMs
  } catch {
    return 0
  }
}

function ensureNodeModules() {
  const stamp = path.join(root, 'node_modules', '.package-lock.json')
  const wanted = Math.max(mtime(path.join(root, 'package.json')), mtime(path.join(root, 'package-lock.json')))
  if (mtime(stamp) >= wanted && fs.existsSync(path.join(root, 'node_modules', '@napi-rs', 'cli'))) return
  console.error('[setup] installing npm dev dependencies')
  // `npm ci`: exactly the lock file (package.json lists no unpublished platform package, so the two agree).
  run('npm', ['ci', '--no-audit', '--no-fund', '--ignore-scripts'])
}

function buildAddon() {
  const napi = path.join(root, 'node_modules', '.bin', 'napi')
  console.error('[setup] building the native addon (release)')
  run(napi, ['build', '--platform', '--release', '--no-js', '--dts', 'binding.d.ts', '--no-const-enum'])
}

function main() {
  if (!process.env.CARGO && spawnSync('cargo', ['--version']).status !== 0) {
    throw new Error('cargo (Rust) is needed to build the addon: install it with rustup, then run this again')
  }
  ensureNodeModules()
  buildAddon()
  if (args.has('--with-server')) {
    const server = installDflockd(root)
    console.error(`[setup] dflockd server: ${server.kind === 'none' ? `none (${server.reason})` : `${server.kind} ${server.version} at ${server.bin}`}`)
    const sema = installSema(root)
    console.error(`[setup] real sema CLI: ${sema.bin ?? `none (${sema.reason})`}`)
  }
}

try {
  main()
} catch (err) {
  console.error(`[setup] ${err.message}`)
  process.exit(1)
}
