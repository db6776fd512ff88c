'use strict'
// Installs and describes the dflockd server used by the tests and benchmarks, in .tools/ (git-ignored).
// Preference order: $DFLOCKD_BIN (a server you built), the real Go server v1.10.0 through `go install`, and,
// when the Go module proxy will not serve it, PyPI's dflockd 0.5.0 (the Python server: l r n e w only).
// The choice is written to .tools/dflockd.json; suites read it back with readDflockd().

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const GO_MODULE = 'github.com/mtingers/dflockd/cmd/dflockd@v1.10.0'
const PY_PACKAGE = 'dflockd==0.5.0'

function toolsDir(root) {
  return path.join(root, '.tools')
}

function recordPath(root) {
  return path.join(toolsDir(root), 'dflockd.json')
}

function readDflockd(root = path.resolve(__dirname, '..')) {
  if (process.env.DFLOCKD_BIN) {
    return { kind: 'go', version: process.env.DFLOCKD_VERSION || 'user', bin: process.env.DFLOCKD_BIN }
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

function installDflockd(root) {
  const existing = readDflockd(root)
  if (existing.kind !== 'none') return existing
  const dir = toolsDir(root)
  fs.mkdirSync(dir, { recursive: true })
  const reasons = []

  const goBin = path.join(dir, 'bin')
  const go = tryRun('go', ['install', GO_MODULE], { env: { ...process.env, GOBIN: goBin, GOFLAGS: '-buildvcs=false' } })
  if (go.ok && fs.existsSync(path.join(goBin, 'dflockd'))) {
    return save(root, { kind: 'go', version: '1.10.0', bin: path.join(goBin, 'dflockd') })
  }
  reasons.push(`go install ${GO_MODULE} failed: ${go.out.split('\n').slice(-2).join(' ')}`)

  const venv = path.join(dir, 'dflockd-py')
  const py = process.env.PYTHON || 'python3'
  const mk = fs.existsSync(path.join(venv, 'bin', 'pip')) ? { ok: true } : tryRun(py, ['-m', 'venv', venv])
  if (mk.ok) {
    // dflockd 0.5.0 declares Python >= 3.13 but runs on 3.11 (it uses nothing newer), hence --ignore-requires-python.
    const pip = tryRun(path.join(venv, 'bin', 'pip'), ['install', '--quiet', '--ignore-requires-python', PY_PACKAGE])
    if (pip.ok && fs.existsSync(path.join(venv, 'bin', 'dflockd'))) {
      return save(root, { kind: 'python', version: '0.5.0', bin: path.join(venv, 'bin', 'dflockd'), reason: reasons[0] })
    }
    reasons.push(`pip install ${PY_PACKAGE} failed: ${pip.out.split('\n').slice(-2).join(' ')}`)
  } else {
    reasons.push(`${py} -m venv failed: ${mk.out}`)
  }
  return save(root, { kind: 'none', reason: reasons.join('; ') })
}

function save(root, rec) {
  fs.writeFileSync(recordPath(root), JSON.stringify(rec, null, 2) + '\n')
  return rec
}

module.exports = { installDflockd, readDflockd }
