'use strict'
// A consumer project made from packed tarballs, as a user gets the package from npm: `npm pack` of the main
// package, `npm pack` of this host's platform package (npm/<platform>/ with the local build's .node file copied in),
// both installed with `npm install --offline` into a new project in the system temp directory, outside the
// repository (so nothing resolves to the source tree). Used by __test__/docs-runnable.test.js; unlike
// scripts/test-package.js it needs no cross toolchains or dist/ (that one installs what `npm run package` built).
//   const { makeConsumer } = require('./docs-consumer')
//   const c = makeConsumer()   → { app, env, cleanup() }  (app: the project's directory; env: PATH without cargo,
//                                 NAPI_RS_NATIVE_LIBRARY_PATH cleared, node_modules/.bin first)

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const root = path.resolve(__dirname, '..')

function sh(cmd, args, options) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...options })
  if (r.status !== 0) {
    throw new Error(`${cmd} ${args.join(' ')} failed (${r.status ?? r.signal ?? r.error?.message}):\n${r.stdout ?? ''}${r.stderr ?? ''}`)
  }
  return r.stdout
}

/** `npm pack <dir>` into `into`; returns the tarball's path. */
function pack(dir, into) {
  const out = sh('npm', ['pack', dir, '--pack-destination', into, '--json', '--ignore-scripts'], { cwd: root })
  return path.join(into, JSON.parse(out)[0].filename)
}

function makeConsumer() {
  // The local build scripts/setup.js wrote (sema-native.<platform>.node) names this host's platform package.
  const local = fs.readdirSync(root).filter((f) => /^sema-native\.[\w-]+\.node$/.test(f))
  if (local.length !== 1) throw new Error(`expected one local build sema-native.<platform>.node, found ${local.length}: run \`node scripts/setup.js\``)
  const built = path.join(root, local[0])
  const key = local[0].split('.')[1]
  const sub = path.join(root, 'npm', key)
  const subPkg = require(path.join(sub, 'package.json'))

  const work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sema-docs-')))
  if (work.startsWith(root + path.sep)) throw new Error(`the consumer (${work}) must be outside the repository`)
  const stage = path.join(work, 'stage', key)
  fs.cpSync(sub, stage, { recursive: true })
  fs.copyFileSync(built, path.join(stage, subPkg.main))
  fs.copyFileSync(path.join(root, 'LICENSE'), path.join(stage, 'LICENSE'))
  const tarballs = [pack(root, work), pack(stage, work)]

  const app = path.join(work, 'app')
  fs.mkdirSync(app)
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'docs-consumer', version: '0.0.0', private: true }, null, 2))
  const env = { ...process.env, npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' }
  for (const k of ['NAPI_RS_NATIVE_LIBRARY_PATH', 'NODE_PATH', 'NODE_OPTIONS', 'NODE_TEST_CONTEXT']) delete env[k]
  sh('npm', ['install', '--offline', '--no-package-lock', ...tarballs], { cwd: app, env })
  env.PATH = [path.join(app, 'node_modules', '.bin'), ...process.env.PATH.split(path.delimiter).filter((d) => !fs.existsSync(path.join(d, 'cargo')))].join(path.delimiter)
  return { app, env, cleanup: () => fs.rmSync(work, { recursive: true, force: true }) }
}

module.exports = { makeConsumer }
