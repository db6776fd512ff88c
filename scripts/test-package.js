#!/usr/bin/env node
'use strict'
// The packaging test: installs the tarballs `npm run package` wrote into dist/ into a new consumer project in the
// system temp directory (outside the repository), with no cargo on PATH and the source tree out of reach (the
// tarballs are copied there first; NAPI_RS_NATIVE_LIBRARY_PATH is cleared), and runs as a user would:
// - an ESM script with named imports of every export and a CJS script, each taking and releasing a file lock, under
//   Node, then under Bun and Deno (scripts/runtimes.js);
// - `tsc --noEmit` over strict files with module node16 (ESM .mts and CJS .cts), with moduleResolution bundler,
//   with exactOptionalPropertyTypes, and with TypeScript 5.0 and skipLibCheck false (no `await using` there);
//   every file also holds `@ts-expect-error` lines, so typings that failed to resolve (any) fail the check;
// - `npx sema-native --help` and a `run`;
// and prints the newest GLIBC symbol version of each gnu binary in dist/ (fails above 2.28).
//   node scripts/test-package.js [--keep]     (needs network or a warm npm cache for typescript and @types/node)

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const runtimes = require('./runtimes')

const root = path.resolve(__dirname, '..')
const dist = path.join(root, 'dist')
const { name, version, devDependencies } = require('../package.json')
const GLIBC_CEILING = [2, 28]
const TS_FLOOR = '5.0.4'

let failures = 0
function check(label, ok, detail = '') {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${label}${detail ? `: ${detail}` : ''}`)
  if (!ok) failures++
}

function sh(cmd, args, options) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...options })
  return { status: r.status ?? -1, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? r.error.message : ''}` }
}

/** PATH without any directory that holds cargo or rustc, so nothing can build the addon. */
function pathWithoutRust() {
  return process.env.PATH.split(path.delimiter)
    .filter((d) => !['cargo', 'rustc'].some((b) => fs.existsSync(path.join(d, b))))
    .join(path.delimiter)
}

function hostPlatformKey() {
  const { platform, arch } = process
  if (platform === 'linux') return `linux-${arch}-${process.report.getReport().header.glibcVersionRuntime ? 'gnu' : 'musl'}`
  return platform === 'win32' ? `win32-${arch}-msvc` : `${platform}-${arch}`
}

function newestGlibc(file) {
  const r = sh('readelf', ['-W', '--dyn-syms', '--version-info', file])
  const versions = [...r.out.matchAll(/GLIBC_(\d+)\.(\d+)(?:\.(\d+))?/g)].map((m) => [+m[1], +m[2], +(m[3] ?? 0)])
  versions.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2])
  return versions.pop()
}

function glibcReport(work) {
  for (const tgz of fs.readdirSync(dist).filter((f) => /-linux-\w+-gnu-.*\.tgz$/.test(f))) {
    const into = fs.mkdtempSync(path.join(work, 'glibc-'))
    sh('tar', ['xzf', path.join(dist, tgz), '-C', into])
    const node = fs.readdirSync(path.join(into, 'package')).find((f) => f.endsWith('.node'))
    const v = newestGlibc(path.join(into, 'package', node))
    const ok = v && (v[0] < GLIBC_CEILING[0] || (v[0] === GLIBC_CEILING[0] && v[1] <= GLIBC_CEILING[1]))
    check(`${tgz}: newest GLIBC symbol`, ok, v ? `GLIBC_${v.filter((x, i) => i < 2 || x).join('.')} (ceiling ${GLIBC_CEILING.join('.')})` : 'none found')
  }
}

// ── the consumer's files ──

const names = [
  ...fs.readFileSync(path.join(root, 'index.d.ts'), 'utf8').matchAll(/^export declare (?:function|class|const) (\w+)/gm),
].map((m) => m[1])

/** Takes and releases a file lock through the target API and through Semaphore; prints `ok <kind>`. */
const useBody = (kind) => `
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'consumer-'))
const file = path.join(dir, 'x.lock')
const r = await acquire(file, { timeout: 1000, tag: '${kind}' })
if (!r.ok) throw new Error('acquire: ' + r.error.type + ' ' + r.error.message)
const s = await status(file)
if (!s.locked || s.info?.tag !== '${kind}') throw new Error('status: ' + JSON.stringify(s))
if (!(await r.value.release())) throw new Error('release returned false')
const sem = new Semaphore(path.join(dir, 'y.lock'))
const got = sem.tryAcquire()
if (!got.ok) throw new Error('Semaphore.tryAcquire: ' + got.error.message)
if (!sem.release().ok) throw new Error('Semaphore.release failed')
const missing = [${names.map((n) => JSON.stringify(n)).join(', ')}].filter((n) => typeof mod[n] !== 'function' && (typeof mod[n] !== 'object' || mod[n] === null))
if (missing.length) throw new Error('missing exports: ' + missing)
fs.rmSync(dir, { recursive: true })
const loaded = Object.keys(require.cache).filter((f) => f.endsWith('.node'))
console.log('ok ${kind} ' + loaded.join(','))
`

const esm = `import { ${names.join(', ')} } from '${name}'
import * as mod from '${name}'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
const require = createRequire(import.meta.url)
${useBody('esm')}`

const cjs = `'use strict'
const mod = require('${name}')
const { acquire, status, Semaphore } = mod
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
;(async () => {
${useBody('cjs')}
})().catch((e) => { console.error(e); process.exit(1) })
`

/** Typed use that every TypeScript setting must accept, plus lines it must refuse. */
const typedCommon = `
export async function forward(p: string, timeout?: number, signal?: AbortSignal, tag?: string): Promise<boolean> {
  // The plain forwarding pattern: with exactOptionalPropertyTypes it needs \`?: T | undefined\` in the typings.
  const r = await acquire(p, { timeout, signal, tag })
  if (!r.ok) {
    const t: SemaphoreErrorType = r.error.type
    return t === 'UNSUPPORTED_PLATFORM'
  }
  const lock: Lock = r.value
  const held: boolean = !lock.released
  await lock.release()
  return held
}
export function distributed(key: string, leaseTtlS?: number): DistributedLock {
  return new DistributedLock({ key, leaseTtlS })
}
export async function scoped<T>(p: string, fn: () => Promise<T>): Promise<T> {
  return withLock(p, fn, { timeout: 1000 })
}
export function sem(p: string): boolean {
  const s = new Semaphore(p, { staleTimeout: undefined })
  const r = s.tryAcquire('tag')
  return r.ok && r.value.pid > 0 && new LockError('x', 'TIMEOUT').code === 'TIMEOUT'
}
// @ts-expect-error a number is not a target
void acquire(42)
// @ts-expect-error not an error type
const bad: SemaphoreErrorType = 'NOPE'
void bad
`
const importLine = `import { acquire, withLock, Semaphore, LockError, DistributedLock, type Lock, type SemaphoreErrorType } from '${name}'\n`
const awaitUsing = `
import sema from '${name}'
export const viaDefault: typeof acquire = sema.acquire
export async function disposed(p: string): Promise<void> {
  const r = await acquire(p)
  if (r.ok) {
    await using lock = r.value
    void lock.token
  }
  await using conn = new DistributedLock({ key: 'k' })
  void conn
}
`

const tsconfig = (files, options) =>
  JSON.stringify({ compilerOptions: { strict: true, noEmit: true, target: 'ES2022', types: ['node'], skipLibCheck: false, ...options }, files }, null, 2)

function writeConsumer(dir) {
  const w = (f, text) => fs.writeFileSync(path.join(dir, f), text)
  w('esm.mjs', esm)
  w('cjs.cjs', cjs)
  w('typed.mts', importLine + typedCommon + awaitUsing)
  w('typed.cts', importLine + typedCommon)
  w('typed-bundler.ts', importLine + typedCommon + awaitUsing)
  w('typed-ts50.mts', importLine + typedCommon)
  const lib = ['ES2022', 'ESNext.Disposable']
  w('tsconfig.node16.json', tsconfig(['typed.mts', 'typed.cts'], { module: 'node16', moduleResolution: 'node16', lib }))
  w('tsconfig.bundler.json', tsconfig(['typed-bundler.ts'], { module: 'esnext', moduleResolution: 'bundler', lib }))
  w('tsconfig.exact.json', tsconfig(['typed.mts', 'typed.cts'], { module: 'node16', moduleResolution: 'node16', lib, exactOptionalPropertyTypes: true }))
  w('tsconfig.exact-bundler.json', tsconfig(['typed-bundler.ts'], { module: 'esnext', moduleResolution: 'bundler', lib, exactOptionalPropertyTypes: true }))
  // TypeScript 5.0 has no lib "esnext.disposable": the typings must not need it.
  w('tsconfig.ts50.json', tsconfig(['typed-ts50.mts'], { module: 'node16', moduleResolution: 'node16', lib: ['ES2022'], exactOptionalPropertyTypes: true }))
}

function main() {
  const keep = process.argv.includes('--keep')
  const key = hostPlatformKey()
  const mainTgz = path.join(dist, `${name}-${version}.tgz`)
  const platformTgz = path.join(dist, `${name}-${key}-${version}.tgz`)
  for (const f of [mainTgz, platformTgz]) {
    if (!fs.existsSync(f)) throw new Error(`${f} is missing: run \`npm run package\` first`)
  }
  const work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sema-consumer-')))
  if (work.startsWith(root + path.sep)) throw new Error(`the consumer (${work}) must be outside the repository`)
  const app = path.join(work, 'app')
  fs.mkdirSync(app)
  for (const f of [mainTgz, platformTgz]) fs.copyFileSync(f, path.join(app, path.basename(f)))
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'consumer', version: '0.0.0', private: true }, null, 2))
  writeConsumer(app)

  const env = { ...process.env, PATH: pathWithoutRust(), npm_config_update_notifier: 'false' }
  for (const k of ['NAPI_RS_NATIVE_LIBRARY_PATH', 'CARGO', 'CARGO_HOME', 'RUSTUP_HOME', 'NODE_PATH']) delete env[k]
  const run = (cmd, args) => sh(cmd, args, { cwd: app, env })
  check('no cargo on PATH', run('cargo', ['--version']).status !== 0)

  // The versions the repository's own checks use (exact, so a warm npm cache serves them offline).
  const installedVersion = (dep) => {
    try {
      return require(path.join(root, 'node_modules', dep, 'package.json')).version
    } catch {
      return devDependencies[dep]
    }
  }
  const ts = installedVersion('typescript')
  const typesNode = installedVersion('@types/node')
  const t0 = Date.now()
  const install = run('npm', [
    'install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error',
    `./${path.basename(mainTgz)}`, `./${path.basename(platformTgz)}`,
    `typescript@${ts}`, `ts50@npm:typescript@${TS_FLOOR}`, `@types/node@${typesNode}`,
  ])
  check('npm install of the tarballs', install.status === 0, `${((Date.now() - t0) / 1000).toFixed(1)} s${install.status ? `\n${install.out}` : ''}`)
  if (install.status !== 0) return finish(work, keep)

  const installed = path.join(app, 'node_modules', name)
  const shipped = fs.readdirSync(installed, { recursive: true }).map(String)
  check('the main package holds no binary and no build scripts', !shipped.some((f) => f.endsWith('.node') || f.startsWith('scripts')), shipped.filter((f) => f.endsWith('.node')).join(', '))

  for (const [label, file] of [['ESM named imports', 'esm.mjs'], ['CommonJS require', 'cjs.cjs']]) {
    const r = run(process.execPath, [file])
    const loadedFrom = r.out.match(/^ok \w+ (.*)$/m)?.[1] ?? ''
    check(`${label} run`, r.status === 0 && loadedFrom.includes(path.join('node_modules', `${name}-${key}`)), r.status === 0 ? `binary ${path.relative(app, loadedFrom)}` : r.out)
  }

  // The same two scripts under Bun and Deno (installed by scripts/test-runtimes.js into .tools/runtimes; CI runs
  // that step first, so a missing runtime fails there). They load the binary their own way: no require.cache check.
  for (const rt of Object.keys(runtimes.RUNTIMES).map(runtimes.find)) {
    if (rt.skip && !process.env.CI) {
      console.log(`skip ${rt.name}: ${rt.skip}`)
      continue
    }
    for (const [label, file] of [['ESM named imports', 'esm.mjs'], ['CommonJS require', 'cjs.cjs']]) {
      const args = rt.name === 'deno' ? ['run', '-A', file] : [file]
      const r = rt.bin ? sh(rt.bin, args, { cwd: app, env: { ...env, DENO_NO_UPDATE_CHECK: '1', NO_COLOR: '1' } }) : { status: -1, out: rt.skip }
      check(`${label} run under ${rt.name} ${rt.version}`, r.status === 0 && /^ok \w+/m.test(r.out), r.status ? r.out : '')
    }
  }

  const tsc = path.join('node_modules', 'typescript', 'bin', 'tsc')
  const tsc50 = path.join('node_modules', 'ts50', 'bin', 'tsc')
  for (const [label, bin, config] of [
    [`tsc ${ts} module node16 (.mts + .cts)`, tsc, 'tsconfig.node16.json'],
    [`tsc ${ts} moduleResolution bundler`, tsc, 'tsconfig.bundler.json'],
    [`tsc ${ts} exactOptionalPropertyTypes (node16)`, tsc, 'tsconfig.exact.json'],
    [`tsc ${ts} exactOptionalPropertyTypes (bundler)`, tsc, 'tsconfig.exact-bundler.json'],
    [`tsc ${TS_FLOOR} skipLibCheck false, no esnext.disposable`, tsc50, 'tsconfig.ts50.json'],
  ]) {
    const r = run(process.execPath, [bin, '-p', config])
    check(label, r.status === 0, r.status ? r.out : '')
  }

  const help = run('npx', ['--no-install', name, '--help'])
  check('npx sema-native --help', help.status === 0 && /Usage: sema-native/.test(help.out), help.status ? help.out : '')
  const lockFile = path.join(work, 'run.lock')
  const script = `const fs=require('fs');process.stdout.write(fs.readFileSync(${JSON.stringify(lockFile)},'utf8').includes('pid=')?'held':'free');process.exit(7)`
  const ran = run('npx', ['--no-install', name, 'run', lockFile, '--', process.execPath, '-e', script])
  check('npx sema-native run (the lock held during the command, its exit code passed through, released after)', ran.status === 7 && ran.out.includes('held') && !fs.existsSync(lockFile), `exit ${ran.status} ${ran.out.split("\n").filter((l) => !l.startsWith("npm warn")).join(" ").trim()}`)

  glibcReport(work)
  finish(work, keep)
}

function finish(work, keep) {
  if (keep) console.log(`consumer kept in ${work}`)
  else fs.rmSync(work, { recursive: true, force: true })
  console.log(failures ? `\n${failures} packaging check(s) failed` : '\nall packaging checks passed')
  process.exitCode = failures ? 1 : 0
}

try {
  main()
} catch (err) {
  console.error(`[test-package] ${err.message}`)
  process.exit(1)
}
