'use strict'
// The error codes have one list, the engine's (sema_core::ErrorCode::ALL): the TypeScript union in index.d.ts is
// checked against it in the same order, and every code-like string literal in the JavaScript layer must be one of
// them (or one of the OS names the layer reads: signals, errno names, Node's MODULE_NOT_FOUND). A code added in JS
// without the engine and the typings fails here.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const native = require('../lib/native')

const root = path.join(__dirname, '..')

test('SemaphoreErrorType in index.d.ts lists exactly the engine error codes', () => {
  const dts = fs.readFileSync(path.join(root, 'index.d.ts'), 'utf8')
  const union = /export type SemaphoreErrorType =([^]*?)\n\n/.exec(dts)
  assert.ok(union, 'SemaphoreErrorType found in index.d.ts')
  const typed = [...union[1].matchAll(/'([A-Z_]+)'/g)].map((m) => m[1])
  assert.deepEqual(typed, native.errorCodes())
})

test('ErrorCode (lib/codes.js, exported by the package) lists exactly the engine error codes, each as its own name', () => {
  const { ErrorCode } = require('..')
  assert.equal(ErrorCode, require('../lib/codes').ErrorCode)
  assert.deepEqual(Object.keys(ErrorCode), native.errorCodes())
  for (const [k, v] of Object.entries(ErrorCode)) assert.equal(v, k)
  assert.ok(Object.isFrozen(ErrorCode))
  assert.throws(() => {
    'use strict'
    ErrorCode.TIMEOUT = 'x'
  }, TypeError)
})

function jsFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    return e.isDirectory() ? jsFiles(p) : e.name.endsWith('.js') ? [p] : []
  })
}

test('every code-like string literal and ErrorCode.X in lib/, bin/ and index.js is an engine error code or an OS name', () => {
  const codes = new Set(native.errorCodes())
  const osNames = new Set([...Object.keys(os.constants.signals), ...Object.keys(os.constants.errno), 'SIGBREAK', 'MODULE_NOT_FOUND'])
  const files = [...jsFiles(path.join(root, 'lib')), ...jsFiles(path.join(root, 'bin')), path.join(root, 'index.js')]
  const unknown = []
  let seen = 0
  for (const file of files) {
    const src = fs.readFileSync(file, 'utf8')
    // SNAKE_CASE literals anywhere; one-word ones (TIMEOUT, ABORTED) where a code goes: `code`/`type` compared or
    // set, failure('X', …), new LockError(…, 'X').
    const literals = [
      ...[...src.matchAll(/'([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)'/g)].map((m) => m[1]),
      ...[...src.matchAll(/(?:(?:code|type)\s*(?:===?|!==?|:)\s*|failure\(|LockError\([^()]*?,\s*)'([A-Z]{4,})'/g)].map((m) => m[1]),
    ]
    for (const name of literals) {
      if (codes.has(name)) seen++
      else if (!osNames.has(name)) unknown.push(`${path.relative(root, file)}: '${name}'`)
    }
    // The constants: every ErrorCode.X names a code (a typo would be undefined at run time, a silent mismatch).
    for (const m of src.matchAll(/\bErrorCode\.([A-Za-z_]\w*)/g)) {
      if (codes.has(m[1])) seen++
      else unknown.push(`${path.relative(root, file)}: ErrorCode.${m[1]}`)
    }
  }
  assert.deepEqual(unknown, [])
  assert.ok(seen > 0, 'the scan found the codes the layer uses')
})
