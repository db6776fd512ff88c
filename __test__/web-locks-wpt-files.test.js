'use strict'
// The Web Platform Tests for Web Locks, the files themselves (__test__/fixtures/wpt/web-locks, see its README: the
// `*.any.js` files as Node vendors them), run unmodified against createLockManager on a lock directory and on the
// real Go dflockd server. Each file runs in its own worker thread (as Node's runner does) through the testharness
// stand-in helpers/wpt-testharness.js, on a base of its own (a fresh directory, a fresh dflockd prefix: the files
// use fixed names such as 'a' and count every lock query() reports). Each WPT subtest is a node:test subtest.
//
// Not run, as Node's test/wpt/status/web-locks.json does not run them either (its reason, and why it holds here, is
// printed): see SKIPPED_FILES and SKIPPED_SUBTESTS.

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { Worker } = require('node:worker_threads')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')

const WPT_DIR = path.join(__dirname, 'fixtures', 'wpt', 'web-locks')
const HARNESS = path.join(__dirname, 'helpers', 'wpt-testharness.js')

/** Files not run, with Node's reason (test/wpt/status/web-locks.json) and why it holds here. */
const SKIPPED_FILES = {
  'secure-context.https.any.js':
    "Node: 'Different secure context behavior in Node.js'. It asserts self.isSecureContext and LockManager/Lock as " +
    'globals of a browser window; createLockManager() is a library function, not a global API',
  'storage-buckets.tentative.https.any.js': "Node: 'Node.js does not implement Storage Buckets API' (navigator.storageBuckets); neither does this library",
}

/** Subtests not run: Node's status file marks them expected to fail, and they need what no backend here can tell. */
const SKIPPED_SUBTESTS = {
  'query.https.any.js': {
    'query() can observe a deadlock':
      "Node: expected to fail, 'Browser-specific test'. It needs the clientId of another agent's pending request: the file " +
      "engine's listing counts another thread's or process's waiters without their tags, and dflockd's stats tell no " +
      'clientId at all (there it would pass only because both sides are undefined)',
  },
}

const files = fs.existsSync(WPT_DIR)
  ? fs
      .readdirSync(WPT_DIR)
      .filter((f) => f.endsWith('.any.js'))
      .sort()
  : []
const missing = files.length === 0 ? `no WPT files in ${path.relative(process.cwd(), WPT_DIR)}: see __test__/fixtures/wpt/README.md` : false

/** Runs one WPT file in a worker thread on `base`; resolves with {results, harness}. */
function runFile(file, base) {
  return new Promise((resolve, reject) => {
    const w = new Worker(HARNESS, { workerData: { mode: 'file', file: path.join(WPT_DIR, file), base, skip: SKIPPED_SUBTESTS[file] ?? {} } })
    let answer = null
    w.once('message', (m) => {
      answer = m
      // Locks the file leaves held on purpose (steal's never_settled, query's "never released") go with the thread.
      w.terminate()
    })
    w.once('error', reject)
    w.once('exit', (code) => (answer ? resolve(answer) : reject(new Error(`the WPT worker for ${file} exited (${code}) without results`))))
  })
}

/** One describe per backend: a node:test test per file, a subtest per WPT subtest; the totals are printed. */
function wptFiles(kind, baseFor) {
  const totals = { pass: 0, fail: 0, skip: [] }
  after(() => {
    const run = totals.pass + totals.fail
    console.log(`# WPT web-locks on ${kind}: ${totals.pass} of ${run} passed` + (totals.skip.length ? `; not run: ${totals.skip.join('; ')}` : ''))
  })
  for (const file of files) {
    if (SKIPPED_FILES[file]) {
      test(file, { skip: SKIPPED_FILES[file] }, () => {})
      totals.skip.push(`${file} (${SKIPPED_FILES[file]})`)
      continue
    }
    test(file, async (t) => {
      const { results, harness } = await runFile(file, baseFor(file))
      assert.ok(results.length > 0, `${file}: no subtest ran${harness ? ` (${harness})` : ''}`)
      for (const r of results) {
        if (r.status === 'SKIP') {
          totals.skip.push(`${file} "${r.name}" (${r.message})`)
          await t.test(r.name, { skip: r.message }, () => {})
          continue
        }
        if (r.status === 'PASS') totals.pass++
        else totals.fail++
        await t.test(r.name, () => assert.equal(r.status, 'PASS', `${r.status}: ${r.message}`))
      }
      assert.equal(harness, null, `${file}: the harness reported an error`)
    })
  }
}

describe('WPT web-locks files on a lock directory', { skip: missing }, () => {
  const dirs = []
  after(() => dirs.forEach(u.rmTmp))
  wptFiles('a lock directory', () => {
    const dir = u.mkTmp('web-locks-wpt-')
    dirs.push(dir)
    return dir
  })
})

describe('WPT web-locks files on dflockd', { skip: missing || d.goOnly() }, () => {
  let server
  before(async () => {
    server = await d.startServer()
  })
  after(() => d.stopAll())
  let n = 0
  wptFiles('dflockd', (file) => `dflockd://127.0.0.1:${server.port}/wpt${++n}-${file.split('.')[0]}`)
})
