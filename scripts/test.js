#!/usr/bin/env node
'use strict'
// The whole test suite, in order: the Rust core (`cargo test -p sema-core`), the typings (`tsc --noEmit` over
// an example that uses every export), the file-lock suites with temp directories in tmpfs, then the addon
// (`node --test` over __test__/*.test.js, real processes and a real dflockd server). `npm test` runs scripts/setup.js first, so the addon and the server are in place.
// Every step runs even if an earlier one failed; the exit code is non-zero if any failed.

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const only = process.argv.slice(2)

function step(name, cmd, args, env = {}) {
  if (only.length && !only.includes(name)) return true
  console.log(`\n== ${name}: ${cmd} ${args.join(' ')}`)
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } })
  if (r.error) console.error(`${name}: ${r.error.message}`)
  return r.status === 0
}

const testFiles = fs
  .readdirSync(path.join(root, '__test__'))
  .filter((f) => f.endsWith('.test.js'))
  .sort()
  .map((f) => path.join('__test__', f))

const results = [
  ['rust', step('rust', 'cargo', ['test', '-p', 'sema-core', '--quiet'])],
  // The typings under the strictest consumer settings (CommonJS and ESM files), then an older CommonJS project's.
  ['types', step('types', path.join(root, 'node_modules', '.bin', 'tsc'), ['-p', '__test__/types'])],
  ['types-loose', step('types', path.join(root, 'node_modules', '.bin', 'tsc'), ['-p', '__test__/types/tsconfig.loose.json'])],
  // The file-lock suites again with their temp directories in tmpfs, where uncontended acquisitions and releases
  // run on the JS thread (the main run below uses os.tmpdir(), usually a disk, where they run off it).
  ...(fs.existsSync('/dev/shm')
    ? [['node-tmpfs', step('node-tmpfs', process.execPath, ['--test', '--test-reporter=dot', ...testFiles.filter((f) => /file-/.test(f))], { TMPDIR: '/dev/shm' })]]
    : []),
  // node's runner prints its summary last (CI reads it). Files run in parallel (one per spare core).
  ['node', step('node', process.execPath, ['--test', '--test-reporter=spec', ...testFiles])],
]

const failed = results.filter(([, ok]) => !ok).map(([name]) => name)
if (failed.length) {
  console.error(`\nfailed: ${failed.join(', ')}`)
  process.exit(1)
}
