'use strict'
// The own CLI's exit code comes from the failure's error code through one table (lib/cli/common.js EXIT_CODE_OF),
// never from its message text: every code of the engine's list is placed in it, the OS refusing us is told by the
// `errno` it carries, and every command reads the same table (a usage error is 2 from `wait` as from `status`).
// The golden cases per condition are in interop-cli-exit.test.js.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { cli } = require('./fixtures/cli/helpers')
const { EXIT_CODE_OF, EXIT_CODES, exitCodeFor } = require('../lib/cli/common')
const { ErrorCode } = require('../lib/codes')
const native = require('../lib/native')

test('every error code of the engine has its exit code in the one table', () => {
  assert.deepEqual(Object.keys(EXIT_CODE_OF).sort(), [...native.errorCodes()].sort())
  assert.deepEqual(Object.keys(EXIT_CODE_OF).sort(), Object.values(ErrorCode).sort())
  const lockState = Object.keys(EXIT_CODE_OF).filter((c) => EXIT_CODE_OF[c] === EXIT_CODES.LOCK_STATE)
  assert.deepEqual(lockState.sort(), ['ALREADY_LOCKED', 'LIMIT_MISMATCH', 'NOT_LOCKED', 'PERMISSION_DENIED', 'TIMEOUT'])
  assert.equal(EXIT_CODE_OF.INVALID_ARGUMENT, EXIT_CODES.USAGE)
})

test('the exit code never depends on the message: the lock owner refusing is 1, the OS refusing (errno) is 3', () => {
  for (const message of ['Lock held by different process (PID 7)', 'held by someone else', '']) {
    assert.equal(exitCodeFor({ type: ErrorCode.PERMISSION_DENIED, message }), EXIT_CODES.LOCK_STATE, message)
    assert.equal(exitCodeFor({ type: ErrorCode.PERMISSION_DENIED, message, errno: 13 }), EXIT_CODES.ERROR, message)
  }
  assert.equal(exitCodeFor({ type: ErrorCode.TIMEOUT, message: 'Permission denied (os error 13)' }), EXIT_CODES.LOCK_STATE)
  assert.equal(exitCodeFor({ type: 'SOMETHING_NEW' }), EXIT_CODES.ERROR)
})

test('a bad dflockd URL is a usage error (2) from wait as from status, run and the others', async () => {
  const url = 'dflockd://127.0.0.1:1/k?limt=2'
  for (const args of [['status', url], ['wait', url, '--timeout', '1s'], ['run', url, '--', process.execPath, '-e', '']]) {
    const r = await cli(args)
    assert.equal(r.code, 2, `${args[0]}: ${r.stderr}`)
    assert.match(r.stderr, /unknown parameter 'limt' \(did you mean 'limit'\?\)/)
  }
  const j = await cli(['wait', url, '--json'])
  assert.equal(j.code, 2)
  assert.equal(JSON.parse(j.stdout).error.type, 'INVALID_ARGUMENT')
})
