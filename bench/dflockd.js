'use strict'
// dflockd: lock + release round trips against the real server installed by setup, for the addon, the Go
// client's own cmd/bench (built by setup from the vendored source), the TypeScript client (bench/vendor), a Go stand-in of
// the same shape, and a plain Node `net` loop.

const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')
const { runJson } = require('./lib/proc')

const root = path.resolve(__dirname, '..')
const GO_BENCH = 'github.com/mtingers/dflockd/cmd/bench@v1.10.0'

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address()
      s.close(() => resolve(port))
    })
    s.on('error', reject)
  })
}

function canConnect(port) {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1' }, () => {
      s.destroy()
      resolve(true)
    })
    s.on('error', () => resolve(false))
  })
}

/** Starts the installed server on a free loopback port. Returns {kind, version, bin, port, stop()}. */
async function startServer() {
  const { readDflockd } = require(path.join(root, 'scripts', 'dflockd-server'))
  const info = readDflockd(root)
  if (info.kind === 'none') throw new Error(`no dflockd server: ${info.reason}`)
  const port = await freePort()
  // Many short-lived keys across the runs: raise max-locks so key budget never shapes the result.
  const args = ['--host', '127.0.0.1', '--port', String(port), '--max-locks', '1000000']
  const child = spawn(info.bin, args, { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d) => (stderr += d))
  const deadline = Date.now() + 15_000
  while (!(await canConnect(port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`dflockd did not start (${info.bin} ${args.join(' ')}): ${stderr.trim().slice(-400)}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
  return {
    ...info,
    port,
    pid: child.pid,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.kill('SIGTERM')
        setTimeout(() => child.kill('SIGKILL'), 3000).unref()
      }),
  }
}

/**
 * Builds the Go stand-ins once into bench/results/bin/: the client loop (go-netloop) and the instant-reply
 * server (go-fakeserver). Returns {bin, serverBin} or {unavailable: reason}.
 */
function buildGoStandIn() {
  const bin = path.join(__dirname, 'results', 'bin', 'go-netloop')
  const serverBin = path.join(__dirname, 'results', 'bin', 'go-fakeserver')
  for (const [out, pkg] of [
    [bin, '.'],
    [serverBin, './fakeserver'],
  ]) {
    const r = spawnSync('go', ['build', '-o', out, pkg], { cwd: path.join(__dirname, 'go-netloop'), encoding: 'utf8', env: { ...process.env, GO111MODULE: 'on' } })
    if (r.error || r.status !== 0) return { unavailable: `go build failed: ${(r.error ? r.error.message : r.stderr).trim().split('\n').pop()}` }
  }
  return { bin, serverBin }
}

/** Starts the instant-reply stand-in server; resolves {port, stop()}. */
function startFakeServer(serverBin) {
  return new Promise((resolve, reject) => {
    const child = spawn(serverBin, ['-listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.on('error', reject)
    child.on('exit', (c) => reject(new Error(`go-fakeserver exited with ${c}`)))
    child.stdout.on('data', (d) => {
      out += d
      const m = /^(\d+)\n/.exec(out)
      if (m) {
        resolve({
          port: Number(m[1]),
          stop: () =>
            new Promise((r) => {
              if (child.exitCode !== null) return r()
              child.once('exit', () => r())
              child.kill('SIGKILL')
            }),
        })
      }
    })
  })
}

/**
 * The Go client's own benchmark, `cmd/bench` v1.10.0, as setup built it from the same source as the server
 * (`bench` in .tools/dflockd.json, or $DFLOCKD_BENCH_BIN); without it, `go run` of the published module (needs the
 * Go module proxy). Returns {unavailable: reason} when it cannot run, else {opsPerSec, p50Ms, p99Ms, raw}.
 */
function goOfficial(port, workers, rounds, timeoutMs) {
  const { readDflockd } = require(path.join(root, 'scripts', 'dflockd-server'))
  const built = readDflockd(root).bench
  const args = ['--workers', String(workers), '--rounds', String(rounds), '--servers', `127.0.0.1:${port}`]
  const r = built && fs.existsSync(built)
    ? spawnSync(built, args, { encoding: 'utf8', timeout: timeoutMs })
    : spawnSync('go', ['run', GO_BENCH, ...args], { encoding: 'utf8', timeout: timeoutMs, env: { ...process.env, GOFLAGS: '-buildvcs=false' } })
  const out = `${r.stdout || ''}${r.stderr || ''}`
  if (r.error || r.status !== 0) {
    const lines = out.trim().split('\n').filter(Boolean)
    const why = r.error ? r.error.message : lines.find((l) => /\b4\d\d\b|not available|cannot|failed/i.test(l)) || lines.pop() || `exit ${r.status}`
    return { unavailable: describeGoFailure(why, lines) }
  }
  const num = (re) => {
    const m = re.exec(out)
    return m ? Number(m[1]) : NaN
  }
  return { opsPerSec: num(/throughput[^\d]*([\d.]+)/i), p50Ms: num(/p50[^\d]*([\d.]+)/i), p99Ms: num(/p99[^\d]*([\d.]+)/i), raw: out.trim() }
}

/** A short reason for a failed `go run`, without host names: "module proxy: 403 Forbidden (This module version is not available.)". */
function describeGoFailure(why, lines) {
  const text = lines.join(' ')
  const status = /\b(4\d\d|5\d\d) ([A-Z][A-Za-z ]+?)(?:\s|$|\.)/.exec(text)
  const server = /server response: ([^\n]+?)(?:$|\s{2}|\t)/.exec(text)
  if (status) return `module proxy: ${status[1]} ${status[2].trim()}${server ? ` (${server[1].trim()})` : ''}`
  return why.replace(/https?:\/\/\S+/g, '<url>').replace(/\s+/g, ' ').trim().slice(0, 200)
}

let tsClient = null
/**
 * The vendored TypeScript client (bench/vendor/dflockd-client-ts, not on npm) compiled once with the project's
 * `tsc` into bench/results/dflockd-client-ts/client.js. Returns the path, or throws why it cannot be built.
 */
function tsClientModule() {
  if (tsClient) return tsClient
  const src = path.join(__dirname, 'vendor', 'dflockd-client-ts', 'client.ts')
  const outDir = path.join(__dirname, 'results', 'dflockd-client-ts')
  const out = path.join(outDir, 'client.js')
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc')
  const args = [tsc, '--module', 'commonjs', '--target', 'es2022', '--moduleResolution', 'node', '--skipLibCheck', '--types', 'node', '--outDir', outDir, src]
  const r = spawnSync(process.execPath, args, { encoding: 'utf8' })
  if (r.error || !fs.existsSync(out)) throw new Error(`tsc of the TS client failed: ${(r.error ? r.error.message : `${r.stdout}${r.stderr}`).trim().split('\n').pop()}`)
  tsClient = out
  return out
}

/** Another build of the package (an older commit's index.js, lib/, package.json and its `.node`), made by hand and
 * never committed: when it exists, the addon rows run against it too (`-baseline`), in the same run. */
const BASELINE = path.join(__dirname, '.baseline')
const hasBaseline = () => fs.existsSync(path.join(BASELINE, 'package.json'))

/** Client kinds that run in bench/workers/dflockd-client.js with extra settings: the TS client's module, the addon's
 * `Connection` kept off libuv (its tokio driver, as on Bun and Deno: the tokio path's own ceiling), or
 * `DistributedLock` forced onto its tokio driver (the event loop is its default). */
function kindSettings(kind) {
  if (kind.startsWith('ts-')) return { cfg: { tsClient: tsClientModule() } }
  if (kind.endsWith('-baseline')) return { ...kindSettings(kind.slice(0, -'-baseline'.length)), kind: kind.slice(0, -'-baseline'.length).replace(/-tokio$/, ''), cfg: { root: BASELINE } }
  if (kind === 'addon-connection-tokio') return { kind: 'addon-connection', env: { ...process.env, SEMA_NATIVE_LIBUV: 'off' } }
  if (kind === 'addon-distributedlock-tokio') return { kind: 'addon-distributedlock', env: { ...process.env, SEMA_NATIVE_DFLOCKD_DRIVER: 'tokio' } }
  return {}
}

/** One client variant in its own process. */
async function clientRun(kind, port, workers, seconds, extra = {}) {
  const k = kindSettings(kind)
  const cfg = JSON.stringify({ kind: k.kind ?? kind, port, workers, seconds, ...k.cfg, ...extra })
  const { result } = await runJson(process.execPath, [path.join(__dirname, 'workers', 'dflockd-client.js'), cfg], { timeoutMs: seconds * 1000 + 60_000, env: k.env })
  return result
}

async function goStandInRun(bin, port, workers, seconds) {
  const { result } = await runJson(bin, ['-workers', String(workers), '-seconds', String(seconds), '-server', `127.0.0.1:${port}`], { timeoutMs: seconds * 1000 + 60_000 })
  return result
}

/** The Rust blocking floor client (bench/floor's dflockd-floor): one std TcpStream and one thread per worker. */
async function floorRun(bin, port, workers, seconds) {
  const { result } = await runJson(bin, [`127.0.0.1:${port}`, String(workers), String(seconds)], { timeoutMs: seconds * 1000 + 60_000 })
  return result
}

module.exports = { hasBaseline, startServer, startFakeServer, buildGoStandIn, goOfficial, clientRun, goStandInRun, floorRun, freePort }
