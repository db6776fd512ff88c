#!/usr/bin/env node
'use strict'
// The suites under the other JS runtimes that load Node-API addons: Bun and Deno, installed from npm at pinned
// versions into .tools/runtimes/ (scripts/runtimes.js). Runs, under each, the file-lock suites and the dflockd suites
// that need no Node-only API, each file with the runtime's own runner for node:test files (`bun test FILE`; `deno
// test -A --unstable-detect-cjs FILE`: the repository's .js files are CommonJS without a "type" field, which Deno
// otherwise loads as ESM), against the same addon build and dflockd server as `npm test`. The package smoke test
// under both runtimes is part of scripts/test-package.js.
//
//   node scripts/test-runtimes.js [--only=bun|deno] [--suite=file-api,...] [--budget-s=900] [--no-install]
//
// Honest by construction: every suite of the list runs or is printed as skipped with its reason; a failed, hung (a
// suite is killed with its process group after SUITE_TIMEOUT_MS) or unparsable run fails the step, and so does
// running out of the time budget before every suite ran. Counts are the runtime's own: Bun counts each test, Deno
// counts top-level tests and their steps (subtests) separately.

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const runtimes = require('./runtimes')

const root = path.resolve(__dirname, '..')
const args = process.argv.slice(2)
const arg = (name, dflt) => {
  const a = args.find((x) => x.startsWith(`--${name}=`))
  return a ? a.slice(name.length + 3) : dflt
}
const budgetS = Number(arg('budget-s', '900'))
const only = arg('only', '')
const suiteFilter = arg('suite', '')
const SUITE_TIMEOUT_MS = 240_000

// Deno 2.9 runs `process.execPath -e SCRIPT ARGS` (a Node child) as `deno eval` with an extra process.argv[1]
// ('$deno$eval.mts'), so a child reading its arguments from argv[1] reads the wrong one: measured with
// `spawnSync(process.execPath, ['-e', 'console.log(process.argv)', 'FILE'])` → [deno, '/…/$deno$eval.mts', 'FILE'].
const DENO_EVAL_ARGV = "its children are `node -e SCRIPT ARGS`, which Deno 2.9 runs with an extra process.argv[1] ('$deno$eval.mts'): they read the wrong arguments"

/** The suites, and why one is not run under a runtime (false = run). */
const SUITES = [
  ...fs
    .readdirSync(path.join(root, '__test__'))
    .filter((f) => /^file-.*\.test\.js$/.test(f))
    .sort()
    .map((f) => [f, {}]),
  // dflockd: the client over the real Go server. Left out: dflockd-evloop (Node's libuv loop, its worker_threads
  // termination and busy-poll CPU bound), dflockd-runtimes (it starts Node, Bun and Deno itself), dflockd-exit and
  // dflockd-secrets (Node child processes with Node CLI flags), dflockd-tls (Node's tls module as a proxy).
  ...['dflockd-cancel', 'dflockd-connection', 'dflockd-fake', 'dflockd-finalized', 'dflockd-lock', 'dflockd-losses', 'dflockd-pool', 'dflockd-renew', 'dflockd-replies', 'dflockd-target', 'dflockd-validation'].map((n) => [`${n}.test.js`, {}]),
]
const SKIP = {
  deno: {
    'file-contract.test.js': DENO_EVAL_ARGV,
    'file-signals.test.js': DENO_EVAL_ARGV,
    // Three of its tests check exclusion from `node -e` children (the argv gap above), one blocks Node's libuv thread
    // pool; and one found a real difference: a terminated worker's lock file is still there when terminate()
    // resolves under Deno 2.9 (its env cleanup runs after; the file was gone 1 s later, measured), where the test
    // expects it gone at once, as under Node and Bun.
    // (On main since this list was written.) Its children start process.execPath through `unshare`/`sh` with Node's
    // command line (`<execPath> SCRIPT ARGS`), which Deno's own CLI reads as a task name (measured: "Please specify a
    // [SCRIPT_ARG] or a task name"); Deno translates Node's command line only for children it spawns itself.
    'file-pidns.test.js': "its children run the runtime's binary with Node's command line through unshare, which Deno's CLI does not take",
    'file-hosts.test.js': "its children (one per \"host\") run the runtime's binary with Node's command line through unshare, which Deno's CLI does not take",
    'file-threads.test.js': `${DENO_EVAL_ARGV}; and a terminated worker's locks are released after terminate() resolves, not before`,
  },
  bun: {
    // Its garbage-collection test turns on Node's --expose-gc (v8.setFlagsFromString, then vm 'gc'), which Bun does
    // not implement (ReferenceError: gc is not defined); its other 17 tests passed under Bun 1.4.5.
    'dflockd-lock.test.js': "its gc test needs Node's --expose-gc through v8.setFlagsFromString, which Bun lacks",
    'dflockd-finalized.test.js': "it collects garbage through Node's --expose-gc (v8.setFlagsFromString), which Bun lacks",
  },
}

function command(rt, file) {
  const rel = path.join('__test__', file)
  return rt.name === 'bun' ? [rt.bin, ['test', '--timeout', '60000', rel]] : [rt.bin, ['test', '-A', '--unstable-detect-cjs', '--no-check', rel]]
}

/** {passed, failed, skipped, steps?} from the runner's closing lines, or null when it printed none. */
function parse(rt, text) {
  // eslint-disable-next-line no-control-regex
  const out = text.replace(/\x1b\[[0-9;]*m/g, '')
  if (rt.name === 'bun') {
    const n = (w) => Number((out.match(new RegExp(`^\\s*(\\d+) ${w}$`, 'm')) || [])[1] || 0)
    if (!/^Ran \d+ tests? across/m.test(out)) return null
    return { passed: n('pass'), failed: n('fail'), skipped: n('skip') + n('todo') }
  }
  const m = out.match(/^(ok|FAILED) \| (\d+) passed(?: \((\d+) steps?\))? \| (\d+) failed(?: \((\d+) steps?\))?(?: \| (\d+) ignored(?: \((\d+) steps?\))?)?/m)
  if (!m) return null
  return { passed: +m[2], steps: +(m[3] || 0), failed: +m[4] + +(m[5] || 0), skipped: +(m[6] || 0) + +(m[7] || 0) }
}

function runSuite(rt, file, timeoutMs) {
  const [cmd, argv] = command(rt, file)
  return new Promise((resolve) => {
    const t0 = Date.now()
    // Its own process group: a suite that hangs is killed with every child it started.
    const child = spawn(cmd, argv, {
      cwd: root,
      detached: process.platform !== 'win32',
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', DENO_NO_UPDATE_CHECK: '1' },
    })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (out += d))
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      try {
        process.kill(process.platform === 'win32' ? child.pid : -child.pid, 'SIGKILL')
      } catch {}
    }, timeoutMs)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, out, timedOut, ms: Date.now() - t0 })
    })
  })
}

async function main() {
  const all = args.includes('--no-install') ? Object.keys(runtimes.RUNTIMES).map(runtimes.find) : runtimes.install()
  const chosen = all.filter((rt) => !only || rt.name === only)
  const deadline = Date.now() + budgetS * 1000
  const totals = []
  let bad = 0
  for (const rt of chosen) {
    const t = { name: `${rt.name} ${rt.version}`, passed: 0, steps: 0, failed: 0, skipped: 0, suites: 0, skippedSuites: [], failedSuites: [] }
    totals.push(t)
    if (rt.skip) {
      // Installed by this script: a runtime it could not install is a failure, not a skip.
      console.log(`\n== ${rt.name}: FAILED: ${rt.skip}`)
      t.failedSuites.push(`(not installed: ${rt.skip})`)
      bad++
      continue
    }
    console.log(`\n== ${rt.name} ${rt.version} (${path.relative(root, rt.bin)})`)
    for (const [file] of SUITES) {
      if (suiteFilter && !suiteFilter.split(',').some((s) => file.startsWith(s))) continue
      const why = SKIP[rt.name][file]
      if (why) {
        console.log(`skip ${file}: ${why}`)
        t.skippedSuites.push(file)
        continue
      }
      const left = deadline - Date.now()
      if (left < 5000) {
        console.log(`FAIL ${file}: not run, the step's ${budgetS} s budget is spent`)
        t.failedSuites.push(file)
        bad++
        continue
      }
      const r = await runSuite(rt, file, Math.min(SUITE_TIMEOUT_MS, left))
      const c = parse(rt, r.out)
      const ok = !r.timedOut && r.code === 0 && c && c.failed === 0
      const counts = c ? `${c.passed} passed${c.steps ? ` (${c.steps} steps)` : ''}, ${c.failed} failed, ${c.skipped} skipped` : 'no summary'
      console.log(`${ok ? 'ok  ' : 'FAIL'} ${file}: ${counts}, ${(r.ms / 1000).toFixed(1)} s${r.timedOut ? ', killed after its time limit' : ''}${r.code ? `, exit ${r.code}` : ''}${r.signal ? `, ${r.signal}` : ''}`)
      if (c) {
        t.passed += c.passed
        t.steps += c.steps || 0
        t.failed += c.failed
        t.skipped += c.skipped
      }
      t.suites++
      if (!ok) {
        bad++
        t.failedSuites.push(file)
        console.log(r.out.split('\n').map((l) => `    ${l}`).join('\n'))
      }
    }
  }
  console.log('\n== runtimes summary')
  for (const t of totals) {
    console.log(
      `${t.name}: ${t.suites} suites run, ${t.passed} tests passed${t.steps ? ` (${t.steps} steps)` : ''}, ${t.failed} failed, ${t.skipped} skipped` +
        (t.skippedSuites.length ? `; suites skipped: ${t.skippedSuites.join(', ')}` : '') +
        (t.failedSuites.length ? `; FAILED: ${t.failedSuites.join(', ')}` : ''),
    )
  }
  process.exitCode = bad ? 1 : 0
}

main().catch((e) => {
  console.error(`[test-runtimes] ${e.stack || e.message}`)
  process.exit(1)
})
