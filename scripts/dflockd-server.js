'use strict'
// Installs and describes the dflockd server used by the tests and benchmarks, in .tools/ (git-ignored).
// Preference order:
//   1. $DFLOCKD_BIN: a server you built (taken as the Go server; $DFLOCKD_BENCH_BIN for its cmd/bench);
//   2. the real Go server v1.10.0 through `go install` (needs the Go module proxy to serve it);
//   3. the same Go server built offline from the vendored source ($DFLOCKD_SRC, else
//      shared/vendor/dflockd-1.10.0 found beside the repository): the module is copied to .tools/dflockd-src/,
//      our scripts/dflockd-main.go becomes its missing cmd/dflockd/main.go, and `go build` runs with
//      GOPROXY=off (the module has no dependencies);
//   4. only with DFLOCKD_SERVER=python: PyPI's dflockd 0.5.0 (the Python server: l r n e w only; the suites
//      that need the Go server fail in CI and are skipped elsewhere).
// The choice is written to .tools/dflockd.json ({kind, version, bin, bench?}); suites read it with readDflockd().

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const GO_VERSION = '1.10.0'
const GO_MODULE = `github.com/mtingers/dflockd/cmd/dflockd@v${GO_VERSION}`
const GO_BENCH_MODULE = `github.com/mtingers/dflockd/cmd/bench@v${GO_VERSION}`
const PY_PACKAGE = 'dflockd==0.5.0'

function toolsDir(root) {
  return path.join(root, '.tools')
}

function recordPath(root) {
  return path.join(toolsDir(root), 'dflockd.json')
}

// The vendored copy sits in a `shared/vendor/` folder beside the clone (../shared) or beside the folder of
// git worktrees (../../shared).
function vendoredSource(root) {
  if (process.env.DFLOCKD_SRC) return process.env.DFLOCKD_SRC
  const candidates = ['..', path.join('..', '..')].map((up) => path.resolve(root, up, 'shared', 'vendor', `dflockd-${GO_VERSION}`))
  return candidates.find((c) => fs.existsSync(path.join(c, 'go.mod'))) || candidates[0]
}

function readDflockd(root = path.resolve(__dirname, '..')) {
  if (process.env.DFLOCKD_BIN) {
    return {
      kind: 'go',
      version: process.env.DFLOCKD_VERSION || 'user',
      bin: process.env.DFLOCKD_BIN,
      bench: process.env.DFLOCKD_BENCH_BIN || null,
    }
  }
  try {
    const rec = JSON.parse(fs.readFileSync(recordPath(root), 'utf8'))
    if (rec.kind === 'none' || fs.existsSync(rec.bin)) return rec
  } catch {}
  return { kind: 'none', reason: 'no dflockd server installed: run `node scripts/setup.js --with-server`' }
}

function tryRun(cmd, args, options) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', ...options })
  const out = `${r.stdout || ''}${r.stderr || ''}`.trim()
  return { ok: !r.error && r.status === 0, out: r.error ? r.error.message : out }
}

function tail(out) {
  return out.split('\n').slice(-2).join(' ')
}

/** `go install` of the server and its benchmark client into .tools/bin (renamed dflockd-bench). */
function goInstall(dir) {
  const goBin = path.join(dir, 'bin')
  const env = { ...process.env, GOBIN: goBin, GOFLAGS: '-buildvcs=false' }
  const go = tryRun('go', ['install', GO_MODULE], { env })
  if (!go.ok || !fs.existsSync(path.join(goBin, 'dflockd'))) return { error: `go install ${GO_MODULE} failed: ${tail(go.out)}` }
  const bench = tryRun('go', ['install', GO_BENCH_MODULE], { env })
  let benchBin = null
  if (bench.ok && fs.existsSync(path.join(goBin, 'bench'))) {
    benchBin = path.join(goBin, 'dflockd-bench')
    fs.renameSync(path.join(goBin, 'bench'), benchBin)
  }
  return { rec: { kind: 'go', version: GO_VERSION, source: 'go install', bin: path.join(goBin, 'dflockd'), bench: benchBin } }
}

/** Builds the server and cmd/bench offline from a copy of the vendored module. */
function goBuildVendored(root, dir) {
  const src = vendoredSource(root)
  if (!fs.existsSync(path.join(src, 'go.mod'))) return { error: `no vendored dflockd source at ${src} (set DFLOCKD_SRC)` }
  const work = path.join(dir, 'dflockd-src')
  fs.rmSync(work, { recursive: true, force: true })
  fs.cpSync(src, work, { recursive: true })
  fs.mkdirSync(path.join(work, 'cmd', 'dflockd'), { recursive: true })
  fs.copyFileSync(path.join(__dirname, 'dflockd-main.go'), path.join(work, 'cmd', 'dflockd', 'main.go'))
  const binDir = path.join(dir, 'bin')
  fs.mkdirSync(binDir, { recursive: true })
  const env = { ...process.env, GOFLAGS: '-mod=mod -buildvcs=false', GOPROXY: 'off', GOTOOLCHAIN: 'local' }
  const bin = path.join(binDir, 'dflockd')
  const bench = path.join(binDir, 'dflockd-bench')
  const server = tryRun('go', ['build', '-ldflags', `-X main.version=${GO_VERSION}`, '-o', bin, './cmd/dflockd'], { cwd: work, env })
  if (!server.ok) return { error: `go build of the vendored dflockd failed: ${tail(server.out)}` }
  const b = tryRun('go', ['build', '-o', bench, './cmd/bench'], { cwd: work, env })
  if (!b.ok) return { error: `go build of the vendored cmd/bench failed: ${tail(b.out)}` }
  return { rec: { kind: 'go', version: GO_VERSION, source: `vendored ${src}`, bin, bench } }
}

function pythonServer(dir) {
  const venv = path.join(dir, 'dflockd-py')
  const py = process.env.PYTHON || 'python3'
  const mk = fs.existsSync(path.join(venv, 'bin', 'pip')) ? { ok: true } : tryRun(py, ['-m', 'venv', venv])
  if (!mk.ok) return { error: `${py} -m venv failed: ${mk.out}` }
  // dflockd 0.5.0 declares Python >= 3.13 but runs on 3.11 (it uses nothing newer), hence --ignore-requires-python.
  const pip = tryRun(path.join(venv, 'bin', 'pip'), ['install', '--quiet', '--ignore-requires-python', PY_PACKAGE])
  if (!pip.ok || !fs.existsSync(path.join(venv, 'bin', 'dflockd'))) return { error: `pip install ${PY_PACKAGE} failed: ${tail(pip.out)}` }
  return { rec: { kind: 'python', version: '0.5.0', bin: path.join(venv, 'bin', 'dflockd') } }
}

function installDflockd(root) {
  const wantPython = process.env.DFLOCKD_SERVER === 'python'
  const existing = readDflockd(root)
  // Reuse a recorded server of the wanted kind; a Go record must also have its benchmark client.
  if (wantPython ? existing.kind === 'python' : existing.kind === 'go' && (process.env.DFLOCKD_BIN || existing.bench)) {
    return existing
  }
  const dir = toolsDir(root)
  fs.mkdirSync(dir, { recursive: true })
  const reasons = []
  const attempts = wantPython ? [() => pythonServer(dir)] : [() => goInstall(dir), () => goBuildVendored(root, dir)]
  for (const attempt of attempts) {
    const r = attempt()
    if (r.rec) return save(root, { ...r.rec, ...(reasons.length ? { reason: reasons.join('; ') } : {}) })
    reasons.push(r.error)
  }
  return save(root, { kind: 'none', reason: reasons.join('; ') })
}

function save(root, rec) {
  fs.writeFileSync(recordPath(root), JSON.stringify(rec, null, 2) + '\n')
  return rec
}

module.exports = { installDflockd, readDflockd }
