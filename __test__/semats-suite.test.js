'use strict'
// semats' own test suite (tuulbelt/file-based-semaphore-ts, test/*.test.ts), run verbatim against our drop-in: its
// files are not edited, only compiled (TypeScript's transpileModule: types erased, as tsx does) into a scratch
// folder beside a shim `src/index.js` that re-exports our package's semats names, so their `../src/index.js` is us.
// Their CLI tests run `npx tsx <cwd>/src/index.ts …`: a shim `npx` first on PATH runs `sema-native semats …`
// for exactly that command line and refuses anything else.
//
// The suite is not vendored in this repository (its code is not ours to commit): it is read from $SEMATS_SRC, else
// shared/vendor/file-based-semaphore-ts* beside the clone or the worktrees' folder, else .tools/semats-src (a copy of
// the repository, e.g. `git archive` of github.com/tuulbelt/file-based-semaphore-ts). Without one the test skips
// and says where it looked.
//
// The one expected difference (README "semats drop-in"): we refuse a lock path that is a symbolic link
// (INVALID_PATH / "Lock path is a symbolic link"), where semats follows it. A failure of any other test fails here.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawn } = require('node:child_process')
const u = require('./helpers/file-util')

const ROOT = path.resolve(__dirname, '..')

/** The files semats' `npm test` runs, in its order (package.json "test"). */
const SUITE = ['index', 'integration', 'security', 'edge-cases', 'stress']

/** Tests of semats' suite that meet a documented difference of the drop-in, by file, with the reason. */
const EXPECTED_DIFFERENCES = {
  security: {
    'resolves symlinks in lock path': 'a lock path that is a symbolic link is refused (never followed): INVALID_PATH',
  },
}

function findSuite() {
  const looked = []
  if (process.env.SEMATS_SRC) return { dir: process.env.SEMATS_SRC, looked }
  for (const up of ['..', path.join('..', '..')]) {
    const vendor = path.resolve(ROOT, up, 'shared', 'vendor')
    looked.push(path.join(vendor, 'file-based-semaphore-ts*'))
    const found = fs.existsSync(vendor) && fs.readdirSync(vendor).find((n) => n.startsWith('file-based-semaphore-ts'))
    if (found) return { dir: path.join(vendor, found), looked }
  }
  const tools = path.join(ROOT, '.tools', 'semats-src')
  looked.push(tools)
  return { dir: fs.existsSync(path.join(tools, 'test', 'index.test.ts')) ? tools : null, looked }
}

/** The scratch folder: the compiled tests under test/, the shim package under src/, the shim npx under bin/. */
function prepare(suiteDir) {
  const ts = require('typescript')
  const work = u.mkTmp('semats-suite-')
  for (const sub of ['test', 'src', 'bin']) fs.mkdirSync(path.join(work, sub))
  fs.writeFileSync(path.join(work, 'package.json'), JSON.stringify({ type: 'module' }))
  const names = ['Semaphore', 'createLockInfo', 'serializeLockInfo', 'parseLockInfo', 'isLockStale', 'isProcessRunning']
  fs.writeFileSync(
    path.join(work, 'src', 'index.js'),
    `import ours from ${JSON.stringify(path.join(ROOT, 'index.js'))}\nexport const { ${names.join(', ')} } = ours\n`,
  )
  // Their CLI's path, for the shim to recognise (never run: nothing of theirs but the tests is used).
  const cli = path.join(work, 'src', 'index.ts')
  fs.writeFileSync(cli, '')
  const npx = path.join(work, 'bin', 'npx')
  fs.writeFileSync(
    npx,
    [
      '#!/bin/sh',
      `if [ "$1" = tsx ] && [ "$2" = ${JSON.stringify(cli)} ]; then`,
      '  shift 2',
      `  exec ${JSON.stringify(process.execPath)} ${JSON.stringify(path.join(ROOT, 'bin', 'sema-native.js'))} semats "$@"`,
      'fi',
      'echo "semats-suite shim npx: only tsx src/index.ts is served" >&2',
      'exit 127',
      '',
    ].join('\n'),
  )
  fs.chmodSync(npx, 0o755)
  for (const name of SUITE) {
    const source = fs.readFileSync(path.join(suiteDir, 'test', `${name}.test.ts`), 'utf8')
    const out = ts.transpileModule(source, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: false },
      fileName: `${name}.test.ts`,
    })
    fs.writeFileSync(path.join(work, 'test', `${name}.test.js`), out.outputText)
  }
  return work
}

/** This environment with the shim npx first on PATH, and without the test runner's marker (a child `node --test`
 * that inherits it believes it is a subtest and runs nothing). */
function childEnv(work) {
  const env = { ...process.env, PATH: `${path.join(work, 'bin')}${path.delimiter}${process.env.PATH}` }
  delete env.NODE_TEST_CONTEXT
  return env
}

/** Runs one compiled file of the suite; resolves `{pass, fail, failed: [names]}` from its TAP output. */
function runFile(work, name) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--test', '--test-reporter=tap', path.join('test', `${name}.test.js`)], {
      cwd: work,
      env: childEnv(work),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    child.on('error', reject)
    child.on('close', () => {
      const count = (key) => Number(new RegExp(`^# ${key} (\\d+)$`, 'm').exec(out)?.[1] ?? NaN)
      // Leaf failures only: a failed `describe` is reported as a failed subtest around them.
      const failed = []
      const lines = out.split('\n')
      lines.forEach((line, i) => {
        const m = /^(\s*)not ok \d+ - (.*)$/.exec(line)
        if (!m) return
        const typeLine = lines.slice(i + 1, i + 6).find((l) => /^\s*type: /.test(l))
        if (typeLine && /'suite'/.test(typeLine)) return
        failed.push(m[2].replace(/ # .*$/, ''))
      })
      resolve({ pass: count('pass'), fail: count('fail'), failed, out, err })
    })
  })
}

const suite = findSuite()
const skip = suite.dir ? false : `semats' test suite not found (looked in: ${suite.looked.join(', ')}; or set SEMATS_SRC)`

test("semats' own test suite passes against the drop-in, but for the documented symlink refusal", { skip, timeout: 600_000 }, async (t) => {
  const work = prepare(suite.dir)
  t.after(() => u.rmTmp(work))
  const totals = { pass: 0, fail: 0 }
  for (const name of SUITE) {
    const r = await runFile(work, name)
    assert.ok(Number.isInteger(r.pass) && Number.isInteger(r.fail), `${name}: no TAP totals\n${r.out.slice(-2000)}\n${r.err}`)
    totals.pass += r.pass
    totals.fail += r.fail
    const expected = EXPECTED_DIFFERENCES[name] ?? {}
    const unexpected = r.failed.filter((f) => !(f in expected))
    t.diagnostic(`${name}: ${r.pass} passed, ${r.fail} failed${r.failed.length ? ` (${r.failed.join('; ')})` : ''}`)
    assert.deepEqual(unexpected, [], `${name}: failures beyond the documented differences\n${r.out.slice(-4000)}`)
    assert.equal(r.fail, r.failed.length, `${name}: every failure is a named test`)
  }
  t.diagnostic(`semats suite: ${totals.pass} passed, ${totals.fail} failed`)
  assert.ok(totals.pass > 0)
})
