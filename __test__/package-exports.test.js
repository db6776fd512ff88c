'use strict'
// The package as a consumer sees it through its own name (the `exports` map, resolved by self-reference):
// every value index.d.ts declares is there under `require` and under ESM named imports, as the same object,
// and `npm pack` ships every file those entry points load. scripts/test-package.js repeats this from an
// installed tarball outside the repository.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')

const root = path.resolve(__dirname, '..')

/** The runtime values index.d.ts promises: `export declare function|class|const NAME`. */
function declaredValues(file) {
  const text = fs.readFileSync(path.join(root, file), 'utf8')
  return [...text.matchAll(/^export declare (?:function|class|const|let|var) (\w+)/gm)].map((m) => m[1])
}

const names = [...new Set(declaredValues('index.d.ts'))].sort()

test('index.d.ts declares the values index.js exports, no more and no fewer', () => {
  assert.ok(names.length >= 19, `found only ${names.length} declared values: the regex no longer matches`)
  const cjs = require('sema-native')
  const runtime = Object.keys(cjs).sort()
  assert.deepEqual(runtime, names)
})

test('require("sema-native") gives every declared value', () => {
  const cjs = require('sema-native')
  for (const name of names) assert.ok(['function', 'object'].includes(typeof cjs[name]) && cjs[name] !== null, `require: ${name}`)
})

test('import("sema-native") gives every declared value as a named export, the same object as require', async () => {
  const esm = await import('sema-native')
  const cjs = require('sema-native')
  for (const name of names) {
    assert.ok(Object.hasOwn(esm, name), `ESM named export missing: ${name}`)
    assert.equal(esm[name], cjs[name], `ESM ${name} is a different object from CJS ${name}`)
  }
  assert.equal(esm.default, cjs)
})

test('a static ESM import of every declared name runs', () => {
  const src = `import { ${names.join(', ')} } from 'sema-native'\n` + `console.log([${names.join(', ')}].every((v) => typeof v === 'function' || (typeof v === 'object' && v !== null)))\n`
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', src], { cwd: root, encoding: 'utf8' })
  assert.equal(r.stderr, '')
  assert.equal(r.stdout.trim(), 'true')
})

test('npm pack ships every file the entry points load, and no development files', () => {
  const r = spawnSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' })
  assert.equal(r.status, 0, r.stderr)
  const files = new Set(JSON.parse(r.stdout)[0].files.map((f) => f.path))
  const pkg = require('../package.json')
  const entries = [pkg.main, pkg.types, ...Object.values(pkg.bin)]
  for (const cond of Object.values(pkg.exports['.'])) entries.push(cond.types, cond.default)
  const lib = fs.readdirSync(path.join(root, 'lib'), { recursive: true }).filter((f) => f.endsWith('.js'))
  for (const f of [...entries.map((e) => path.normalize(e)), ...lib.map((f) => path.join('lib', f))]) {
    assert.ok(files.has(f), `not in the package: ${f}`)
  }
  for (const f of files) assert.doesNotMatch(f, /^(__test__|scripts|bench|crates|src|target)\//, `shipped: ${f}`)
})
