'use strict'
// Builds the real Rust `sema` CLI (tuulbelt/file-based-semaphore 0.1.0) for the interop tests, into
// .tools/bin/sema (git-ignored), and tells the tests where it is.
//
// The crate is not on crates.io under a name this machine can fetch, so it is built offline from the vendored
// source: $SEMA_SRC, else shared/vendor/sema-0.1.0 found beside the clone (../shared) or beside the folder of git
// worktrees (../../shared). It has no dependencies at all (std only), so `cargo build --release --offline` in a
// copy under .tools/sema-src needs no registry. A binary already at .tools/bin/sema is reused.
//
// The TypeScript `semats` (tuulbelt/file-based-semaphore-ts) is not published on any registry this machine
// reaches (npm answers 404), so there is no real `semats` to run: the tests use our `sema-native semats` front
// end, which reproduces its CLI, as the stand-in.

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const SEMA_VERSION = '0.1.0'

function vendoredSema(root) {
  if (process.env.SEMA_SRC) return process.env.SEMA_SRC
  const candidates = ['..', path.join('..', '..')].map((up) => path.resolve(root, up, 'shared', 'vendor', `sema-${SEMA_VERSION}`))
  return candidates.find((c) => fs.existsSync(path.join(c, 'Cargo.toml'))) || candidates[0]
}

function binPath(root) {
  return path.join(root, '.tools', 'bin', process.platform === 'win32' ? 'sema.exe' : 'sema')
}

/**
 * `{ bin }` when the real sema is built (or $SEMA_BIN names one), else `{ reason }` (for a test's skip message).
 */
function readSema(root = path.resolve(__dirname, '..')) {
  if (process.env.SEMA_BIN) return { bin: process.env.SEMA_BIN }
  const bin = binPath(root)
  if (fs.existsSync(bin)) return { bin }
  const src = vendoredSema(root)
  const why = fs.existsSync(path.join(src, 'Cargo.toml'))
    ? 'run `node scripts/setup.js --with-server` to build it'
    : `no vendored sema source at ${src} (set SEMA_SRC, or SEMA_BIN to a built sema)`
  return { reason: `the real sema CLI is not built: ${why}` }
}

/** Builds .tools/bin/sema from the vendored source unless it is there. Returns `{ bin }` or `{ reason }`. */
function installSema(root) {
  const existing = readSema(root)
  if (existing.bin) return existing
  const src = vendoredSema(root)
  if (!fs.existsSync(path.join(src, 'Cargo.toml'))) return existing
  const work = path.join(root, '.tools', 'sema-src')
  fs.rmSync(work, { recursive: true, force: true })
  fs.cpSync(src, work, { recursive: true, filter: (p) => path.basename(p) !== 'target' })
  // The copy sits inside our workspace's directory: an empty [workspace] table makes it a workspace of its own.
  fs.appendFileSync(path.join(work, 'Cargo.toml'), '\n[workspace]\n')
  const r = spawnSync('cargo', ['build', '--release', '--offline', '--bin', 'sema'], {
    cwd: work,
    encoding: 'utf8',
    // Its own target directory: the copy is not part of our workspace.
    env: { ...process.env, CARGO_TARGET_DIR: path.join(work, 'target') },
  })
  const built = path.join(work, 'target', 'release', path.basename(binPath(root)))
  if (r.error || r.status !== 0 || !fs.existsSync(built)) {
    const out = `${r.stdout || ''}${r.stderr || ''}`.trim().split('\n').slice(-2).join(' ')
    return { reason: `cargo build of the vendored sema failed: ${r.error ? r.error.message : out}` }
  }
  fs.mkdirSync(path.dirname(binPath(root)), { recursive: true })
  fs.copyFileSync(built, binPath(root))
  fs.chmodSync(binPath(root), 0o755)
  return { bin: binPath(root) }
}

module.exports = { installSema, readSema, SEMA_VERSION }
