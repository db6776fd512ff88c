'use strict'
// The TypeScript union of error codes in index.d.ts is the engine's list (sema_core::ErrorCode::ALL), in the same
// order: a code added to the engine without the typings (or the other way round) fails here.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const native = require('../lib/native')

test('SemaphoreErrorType in index.d.ts lists exactly the engine error codes', () => {
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')
  const union = /export type SemaphoreErrorType =([^]*?)\n\n/.exec(dts)
  assert.ok(union, 'SemaphoreErrorType found in index.d.ts')
  const typed = [...union[1].matchAll(/'([A-Z_]+)'/g)].map((m) => m[1])
  assert.deepEqual(typed, native.errorCodes())
})
