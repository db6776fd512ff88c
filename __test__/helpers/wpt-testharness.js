'use strict'
// A small stand-in for web-platform-tests' testharness.js, enough to run the Web Locks `*.any.js` files of
// __test__/fixtures/wpt/web-locks as their authors wrote them (web-locks-wpt-files.test.js starts it).
//
// It runs as a worker thread, as Node's own WPT runner (test/common/wpt.js) runs each file: one thread per file, so
// each has its own globals, its own `navigator.locks` (a LockManager from createLockManager(workerData.base)) and, as
// one agent, its own clientId. The file's `// META: script=` helpers are evaluated first, then the file; its
// promise_tests then run one after the other, each one's cleanups awaited before the next starts (testharness.js
// does the same). A file's `new Worker('resources/worker.js')` is another worker thread running this module in
// `worker` mode: the WPT worker script with `self.postMessage` / `self.addEventListener('message')`.
//
// Results go to the parent as one message: {results: [{name, status: 'PASS'|'FAIL'|'TIMEOUT'|'SKIP', message}],
// harness: null | message}. `workerData.skip` maps subtest names to the reason they are not run.

const { parentPort, workerData, Worker: ThreadWorker } = require('node:worker_threads')
const fs = require('node:fs')
const path = require('node:path')
const vm = require('node:vm')
const { createLockManager } = require('../..')

/** A subtest that has not settled in this long is a TIMEOUT (testharness.js: 10 s per file; ours is per subtest). */
const SUBTEST_TIMEOUT_MS = 30000

function installGlobals(base, file) {
  globalThis.self = globalThis
  // Node ≥ 22 has its own `navigator` (Node 24 a navigator.locks of its own): the files must use ours.
  Object.defineProperty(globalThis, 'navigator', { value: { locks: createLockManager(base) }, configurable: true, writable: true })
  globalThis.location = new URL(`https://web-platform.test/web-locks/${path.basename(file)}`)
}

function runScript(file) {
  vm.runInThisContext(fs.readFileSync(file, 'utf8'), { filename: file })
}

/** The `// META: script=…` helpers of a WPT file, as paths beside it. */
function metaScripts(file) {
  const out = []
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = /^\/\/ META: script=(.+)$/.exec(line.trim())
    if (m) out.push(path.resolve(path.dirname(file), m[1].trim()))
  }
  return out
}

// ---- assertions (testharness.js semantics: SameValue, exact booleans, own properties) ----

class AssertionError extends Error {}

function fmt(v) {
  if (typeof v === 'string') return JSON.stringify(v)
  if (typeof v === 'symbol') return v.toString()
  if (Array.isArray(v)) return `[${v.map(fmt).join(', ')}]`
  if (v instanceof DOMException) return `DOMException ${v.name}: ${v.message}`
  if (v instanceof Error) return `${v.name}: ${v.message}`
  try {
    return String(v)
  } catch {
    return Object.prototype.toString.call(v)
  }
}

function check(ok, description, what) {
  if (!ok) throw new AssertionError(`${description ? `${description}: ` : ''}${what}`)
}

const asserts = {
  assert_equals: (actual, expected, d) => check(Object.is(actual, expected), d, `expected ${fmt(expected)} but got ${fmt(actual)}`),
  assert_not_equals: (actual, expected, d) => check(!Object.is(actual, expected), d, `got disallowed value ${fmt(actual)}`),
  assert_true: (actual, d) => check(actual === true, d, `expected true got ${fmt(actual)}`),
  assert_false: (actual, d) => check(actual === false, d, `expected false got ${fmt(actual)}`),
  assert_own_property: (object, name, d) =>
    check(object !== null && typeof object === 'object' && Object.prototype.hasOwnProperty.call(object, name), d, `expected property ${fmt(name)} missing`),
  assert_array_equals: (actual, expected, d) => {
    check(actual !== null && typeof actual === 'object' && 'length' in actual, d, `value is ${fmt(actual)}, expected array`)
    check(actual.length === expected.length, d, `lengths differ, expected array ${fmt(expected)} length ${expected.length}, got ${fmt(actual)} length ${actual.length}`)
    for (let i = 0; i < expected.length; i++) {
      check(Object.prototype.hasOwnProperty.call(actual, i) === Object.prototype.hasOwnProperty.call(expected, i), d, `property ${i}, property expected to be ${i in expected ? 'present' : 'missing'}`)
      check(Object.is(actual[i], expected[i]), d, `expected ${fmt(expected)} but got ${fmt(actual)} (index ${i})`)
    }
  },
  assert_unreached: (d) => check(false, d, 'reached unreachable code'),
  assert_idl_attribute: (object, name, d) => check(object !== null && object !== undefined && name in object, d, `property ${fmt(name)} not found in prototype chain`),
}

/** The legacy `code` of the DOMException names the Web Locks tests expect. */
const DOM_CODES = { NotSupportedError: 9, AbortError: 20, InvalidStateError: 11 }

function promiseRejects(t, promise, description, checkError) {
  return Promise.resolve(promise).then(
    (value) => {
      throw new AssertionError(`${description ? `${description}: ` : ''}expected a rejection, got a fulfilment with ${fmt(value)}`)
    },
    (e) => checkError(e),
  )
}

const rejections = {
  promise_rejects_js: (t, constructor, promise, d) =>
    promiseRejects(t, promise, d, (e) => {
      check(e !== null && typeof e === 'object' && e.constructor === constructor, d, `expected a ${constructor.name} but got ${fmt(e)}`)
      check(e.name === constructor.name, d, `expected name ${constructor.name} but got ${fmt(e.name)}`)
    }),
  promise_rejects_dom: (t, type, promise, d) =>
    promiseRejects(t, promise, d, (e) => {
      check(e instanceof DOMException && e.constructor === DOMException, d, `expected a DOMException ${type} but got ${fmt(e)}`)
      check(e.name === type, d, `expected DOMException name ${type} but got ${e.name}`)
      if (type in DOM_CODES) check(e.code === DOM_CODES[type], d, `expected DOMException code ${DOM_CODES[type]} but got ${e.code}`)
    }),
  promise_rejects_exactly: (t, exception, promise, d) =>
    promiseRejects(t, promise, d, (e) => check(Object.is(e, exception), d, `expected rejection with ${fmt(exception)} but got ${fmt(e)}`)),
}

// ---- tests ----

class Test {
  constructor(name) {
    this.name = name
    this.failure = null
    this.cleanups = []
  }

  fail(e) {
    if (!this.failure) this.failure = e
  }

  step(fn, thisObj, ...args) {
    try {
      return fn.apply(thisObj, args)
    } catch (e) {
      this.fail(e)
    }
  }

  step_func(fn, thisObj) {
    return (...args) => this.step(fn, thisObj === undefined ? this : thisObj, ...args)
  }

  step_func_done(fn, thisObj) {
    return this.step_func(fn, thisObj)
  }

  unreached_func(description) {
    return this.step_func(() => asserts.assert_unreached(description))
  }

  step_timeout(fn, ms, ...args) {
    return setTimeout(this.step_func(() => fn(...args)), ms)
  }

  add_cleanup(fn) {
    this.cleanups.push(fn)
  }
}

function runSandboxed(base, file, skip) {
  installGlobals(base, file)
  const queue = []
  const results = []
  let allowUncaught = false
  const uncaught = []
  const onUncaught = (e) => {
    if (!allowUncaught) uncaught.push(e)
  }
  process.on('unhandledRejection', onUncaught)
  process.on('uncaughtException', onUncaught)

  Object.assign(globalThis, asserts, rejections, {
    setup(options) {
      if (options && typeof options === 'object' && options.allow_uncaught_exception) allowUncaught = true
    },
    promise_test(fn, name) {
      queue.push({ fn, name })
    },
    test(fn, name) {
      if (skip[name]) return results.push({ name, status: 'SKIP', message: skip[name] })
      const t = new Test(name)
      t.step(fn, t, t)
      results.push({ name, status: t.failure ? 'FAIL' : 'PASS', message: t.failure ? fmt(t.failure) : '' })
    },
    Worker: WptWorker,
  })

  for (const script of metaScripts(file)) runScript(script)
  runScript(file)

  return (async () => {
    for (const { fn, name } of queue) {
      if (skip[name]) {
        results.push({ name, status: 'SKIP', message: skip[name] })
        continue
      }
      const t = new Test(name)
      let timer
      const timedOut = new Promise((resolve) => {
        timer = setTimeout(() => resolve('TIMEOUT'), SUBTEST_TIMEOUT_MS)
      })
      let status
      try {
        status = await Promise.race([Promise.resolve().then(() => fn(t)).then(() => 'DONE'), timedOut])
      } catch (e) {
        t.fail(e)
      }
      // Cleanups run after the test, whatever its outcome, and the next test waits for the promises they return.
      const cleaned = Promise.all(t.cleanups.map((c) => t.step(c)))
      await Promise.race([cleaned.catch((e) => t.fail(e)), timedOut])
      clearTimeout(timer)
      if (status === 'TIMEOUT') results.push({ name, status: 'TIMEOUT', message: `did not settle within ${SUBTEST_TIMEOUT_MS} ms` })
      else results.push({ name, status: t.failure ? 'FAIL' : 'PASS', message: t.failure ? fmt(t.failure) : '' })
    }
    // Let rejections of this file's last test be reported before the verdict.
    await new Promise((resolve) => setImmediate(resolve))
    return { results, harness: uncaught.length ? `uncaught: ${uncaught.map(fmt).join('; ')}` : null }
  })()
}

/** The file's `new Worker(url)`: a worker thread running the WPT worker script, with the DOM Worker's surface. */
class WptWorker {
  #thread
  #listeners = new Map()

  constructor(url) {
    const script = path.resolve(path.dirname(workerData.file), String(url))
    this.#thread = new ThreadWorker(__filename, { workerData: { mode: 'worker', base: workerData.base, file: script } })
  }

  postMessage(data) {
    this.#thread.postMessage(data)
  }

  addEventListener(type, fn) {
    if (type !== 'message') return
    const wrapped = (data) => fn.call(this, { data, target: this })
    this.#listeners.set(fn, wrapped)
    this.#thread.on('message', wrapped)
  }

  removeEventListener(type, fn) {
    const wrapped = this.#listeners.get(fn)
    if (type !== 'message' || !wrapped) return
    this.#listeners.delete(fn)
    this.#thread.off('message', wrapped)
  }

  terminate() {
    this.#thread.terminate()
  }
}

if (workerData?.mode === 'worker') {
  // The WPT worker script: messages in through self's 'message' listeners (`this` is self), out by self.postMessage.
  installGlobals(workerData.base, workerData.file)
  globalThis.postMessage = (data) => parentPort.postMessage(data)
  globalThis.addEventListener = (type, fn) => {
    if (type === 'message') parentPort.on('message', (data) => fn.call(globalThis, { data, target: globalThis }))
  }
  runScript(workerData.file)
} else if (workerData?.mode === 'file') {
  runSandboxed(workerData.base, workerData.file, workerData.skip ?? {}).then(
    (r) => parentPort.postMessage(r),
    (e) => parentPort.postMessage({ results: [], harness: `the file did not run: ${fmt(e)}\n${e && e.stack}` }),
  )
}
