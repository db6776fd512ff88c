#!/usr/bin/env node
'use strict'
// `npm run docs:api`: the API reference, rendered by TypeDoc (a pinned devDependency) from index.d.ts, the public
// contract, into target/api-docs/ (git-ignored with the rest of target/). Fails on any TypeDoc warning, and every
// export (function, class, interface, type, constant) and every method or constructor must have a doc comment
// that renders: a declaration added without one fails CI (.ci/run), not just a page with a hole.
//   node scripts/docs-api.js [--out=DIR]

const { spawnSync } = require('node:child_process')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const out = process.argv.find((a) => a.startsWith('--out='))?.slice(6) ?? path.join('target', 'api-docs')
// Properties are left out of the required kinds: most are self-describing fields of option and result objects
// whose interface carries the comment (requiring them all added 115 warnings of "key: string").
const REQUIRED = ['Function', 'Class', 'Interface', 'TypeAlias', 'Variable', 'Enum', 'Method', 'Constructor']

const args = [
  '--entryPoints', 'index.d.ts',
  '--tsconfig', path.join('__test__', 'types', 'tsconfig.json'),
  '--out', out,
  '--name', require('../package.json').name,
  '--readme', 'none',
  // No source links: they need a GitHub remote, which a clone made from a local path (CI's) does not have.
  '--disableSources',
  '--treatWarningsAsErrors',
  '--validation.notDocumented',
  ...REQUIRED.flatMap((k) => ['--requiredToBeDocumented', k]),
]
const bin = path.join(root, 'node_modules', '.bin', process.platform === 'win32' ? 'typedoc.cmd' : 'typedoc')
const r = spawnSync(bin, args, { cwd: root, stdio: 'inherit' })
if (r.error) {
  console.error(`docs:api: typedoc could not start (${r.error.message}): run \`npm install\``)
  process.exit(1)
}
process.exit(r.status ?? 1)
