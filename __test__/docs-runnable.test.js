'use strict'
// The docs run as written: every code block marked runnable in README.md and docs/**/*.md is extracted and run in a
// consumer project made from the packed tarballs (scripts/docs-consumer.js), and must exit 0. Markers, after the
// opening fence:
//   ```js runnable    an ES module (written to <n>.mjs), run with `node`
//   ```cjs runnable   a CommonJS script (<n>.cjs)
//   ```sh runnable    a bash script. README.md's run as after `npm install` in a project: node_modules/.bin is not
//                     on PATH (they write `npx sema-native …`); docs/'s with it first on PATH (docs/cli.md says
//                     its examples call `sema-native` as installed globally or from an npm script)
// A block that needs a dflockd server reads its address from DFLOCKD_ADDR (host:port); this test starts the real
// Go server (.tools/bin/dflockd) and sets it. Each block runs in a fresh empty directory inside the consumer
// project, with its own working directory, so relative paths and temp files of one block never meet another's.
// Blocks without the marker are not run: a fence like ```js (no marker) is for fragments that need a context.
// Every js/cjs block is also type-checked, all in one tsc run over the consumer project: strict,
// exactOptionalPropertyTypes, checkJs, module nodenext, against the packed typings (the consumer's
// node_modules/sema-native) and @types/node, so an example a TypeScript user copies compiles as written.
// Also: README.md stays within 300 lines with `npm run demo` and `npm test` as its first commands, and every test
// file (`x.test.js`) or Rust test (`lockfile_x.rs`, `dflockd_x.rs`) the docs name as proof exists.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const d = require('./helpers/dflockd')
const { makeConsumer } = require('../scripts/docs-consumer')

const root = path.join(__dirname, '..')
const KINDS = { js: '.mjs', cjs: '.cjs', sh: '.sh' }
const FENCE = /^```(\w+)[ \t]+runnable[ \t]*\r?\n([\s\S]*?)^```[ \t]*$/gm
// Generous: a block is a short example; this bounds a hang, it is no timing target.
const BLOCK_TIMEOUT_MS = 60_000

function markdownFiles() {
  const out = [path.join(root, 'README.md')]
  const walk = (dir) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.name.endsWith('.md')) out.push(p)
    }
  }
  walk(path.join(root, 'docs'))
  return out
}

/** Every runnable block: { file, line, kind, code }. */
function extractBlocks() {
  const blocks = []
  for (const file of markdownFiles()) {
    const text = fs.readFileSync(file, 'utf8')
    for (const m of text.matchAll(FENCE)) {
      const line = text.slice(0, m.index).split('\n').length
      blocks.push({ file: path.relative(root, file), line, kind: m[1], code: m[2] })
    }
  }
  return blocks
}

const blocks = extractBlocks()
let consumer
let server
let ran = 0

/** Each block's file in the consumer project: block-<i>/block.<ext>, in a directory of its own. */
const blockFile = (i) => path.join(consumer.app, `block-${i}`, `block${KINDS[blocks[i].kind]}`)
/** tsc's diagnostics by block index (a block absent from it has none); set in `before`. */
let typeErrors

before(async () => {
  consumer = makeConsumer()
  for (const [i, b] of blocks.entries()) {
    fs.mkdirSync(path.dirname(blockFile(i)))
    fs.writeFileSync(blockFile(i), b.code)
  }
  typeErrors = typeCheck()
  if (!d.skipReason()) server = await d.startServer()
})

/**
 * tsc over every js/cjs block at once (one run: ~5 s, where one per block would take minutes), strict settings:
 * returns Map(block index → [diagnostic lines]).
 */
function typeCheck() {
  const typed = blocks.flatMap((b, i) => (b.kind === 'sh' ? [] : [path.relative(consumer.app, blockFile(i))]))
  const tsconfig = {
    compilerOptions: {
      allowJs: true,
      checkJs: true,
      strict: true,
      exactOptionalPropertyTypes: true,
      noEmit: true,
      target: 'ES2022',
      module: 'nodenext',
      moduleResolution: 'nodenext',
      lib: ['ES2022', 'ESNext.Disposable'],
      types: ['node'],
      // @types/node of the repository's dev dependencies (the consumer installs only the packed tarballs).
      typeRoots: [path.join(root, 'node_modules', '@types')],
      skipLibCheck: false,
    },
    files: typed,
  }
  fs.writeFileSync(path.join(consumer.app, 'tsconfig.json'), JSON.stringify(tsconfig, null, 2))
  const r = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json', '--pretty', 'false'], {
    cwd: consumer.app,
    encoding: 'utf8',
    timeout: BLOCK_TIMEOUT_MS,
  })
  const errors = new Map()
  let current
  for (const line of `${r.stdout}${r.stderr}`.split('\n')) {
    const m = /^block-(\d+)\//.exec(line)
    if (m) current = Number(m[1])
    else if (!/^\s/.test(line)) current = undefined
    if (current !== undefined) errors.set(current, [...(errors.get(current) ?? []), line])
    else if (line.trim()) errors.set(-1, [...(errors.get(-1) ?? []), line])
  }
  if (r.status !== 0 && errors.size === 0) errors.set(-1, [`tsc exited ${r.status ?? r.signal}: ${r.error?.message ?? ''}`])
  return errors
}

after(async () => {
  await d.stopAll()
  consumer?.cleanup()
  // The number CI's log and the closing note quote.
  console.log(`# docs-runnable: ${ran} code blocks run from README.md and docs/ (${blocks.length} marked runnable)`)
})

test('README.md and docs/ have runnable blocks, each of a known kind', () => {
  assert.ok(blocks.filter((b) => b.file === 'README.md').length >= 3, 'README.md should have at least 3 runnable blocks')
  for (const b of blocks) assert.ok(KINDS[b.kind], `${b.file}:${b.line}: unknown runnable kind '${b.kind}' (known: ${Object.keys(KINDS)})`)
})

test('README.md: at most 300 lines, and its first commands set up a clone: npm run demo, then npm test', () => {
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8')
  assert.ok(readme.split('\n').length <= 300, `README.md has ${readme.split('\n').length} lines (the issue's bound: 300)`)
  const commands = [...readme.matchAll(/^```sh[^\n]*\n([\s\S]*?)^```/gm)]
    .flatMap((m) => m[1].split('\n'))
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean)
  assert.deepEqual(commands.slice(0, 2), ['npm run demo', 'npm test'])
})

test('every test file and Rust test the docs name exists', () => {
  const missing = []
  for (const file of markdownFiles()) {
    const text = fs.readFileSync(file, 'utf8')
    for (const [, name] of text.matchAll(/`(?:__test__\/)?([\w-]+\.test\.js)`/g)) {
      if (!fs.existsSync(path.join(root, '__test__', name))) missing.push(`${path.relative(root, file)}: ${name}`)
    }
    for (const [, name] of text.matchAll(/`((?:lockfile|dflockd)_[\w]+\.rs)`/g)) {
      if (!fs.existsSync(path.join(root, 'crates', 'sema-core', 'tests', name))) missing.push(`${path.relative(root, file)}: ${name}`)
    }
  }
  assert.deepEqual(missing, [])
})

test('tsc ran over the blocks (no error outside them)', () => {
  assert.deepEqual(typeErrors.get(-1) ?? [], [])
})

/** PATH as a user's shell has it after `npm install` in a project: without the project's node_modules/.bin. */
function withoutBin(PATH) {
  const bin = path.join(consumer.app, 'node_modules', '.bin')
  return PATH.split(path.delimiter).filter((d) => d !== bin).join(path.delimiter)
}

for (const [i, b] of blocks.entries()) {
  if (b.kind !== 'sh') {
    test(`${b.file}:${b.line} (${b.kind}) type-checks under strict TypeScript settings`, () => {
      const errors = typeErrors.get(i) ?? []
      assert.deepEqual(errors, [], `${b.file}:${b.line}: tsc (strict, checkJs) reports:\n${errors.join('\n')}\n--- block ---\n${b.code}`)
    })
  }
  // Only the blocks that use a server wait for one (outside CI, where a missing server fails instead of skipping).
  const skip = b.code.includes('DFLOCKD_ADDR') ? d.skipReason() : false
  test(`${b.file}:${b.line} (${b.kind}) runs as written and exits 0`, { skip }, (t) => {
    const file = blockFile(i)
    const dir = path.dirname(file)
    const [cmd, args] = b.kind === 'sh' ? ['bash', ['-euo', 'pipefail', file]] : [process.execPath, [file]]
    const r = spawnSync(cmd, args, {
      cwd: dir,
      env: { ...consumer.env, ...(b.file === 'README.md' && { PATH: withoutBin(consumer.env.PATH) }), ...(server && { DFLOCKD_ADDR: `${server.host}:${server.port}` }) },
      encoding: 'utf8',
      timeout: BLOCK_TIMEOUT_MS,
      killSignal: 'SIGKILL',
    })
    ran++
    for (const line of `${r.stdout}${r.stderr}`.trimEnd().split('\n')) t.diagnostic(line)
    assert.equal(r.status, 0, `${b.file}:${b.line} exited ${r.status ?? r.signal}\n--- block ---\n${b.code}--- output ---\n${r.stdout}${r.stderr}`)
  })
}
