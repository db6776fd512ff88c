'use strict'
// The stable error codes, as constants: `ErrorCode.TIMEOUT === 'TIMEOUT'`. The list is the engine's
// (sema_core::ErrorCode::ALL, in its order); it is written out here rather than read from the binding because the
// loader (lib/native.js) needs NATIVE_LOAD_FAILED and UNSUPPORTED_PLATFORM before any binding has loaded.
// __test__/error-codes.test.js checks this object, index.d.ts's SemaphoreErrorType union and the engine's list
// against each other, so a code added on one side only fails there.

const ErrorCode = Object.freeze({
  ALREADY_LOCKED: 'ALREADY_LOCKED',
  INVALID_PATH: 'INVALID_PATH',
  IO_ERROR: 'IO_ERROR',
  NOT_LOCKED: 'NOT_LOCKED',
  TIMEOUT: 'TIMEOUT',
  PARSE_ERROR: 'PARSE_ERROR',
  PERMISSION_DENIED: 'PERMISSION_DENIED',
  PATH_TRAVERSAL: 'PATH_TRAVERSAL',
  ABORTED: 'ABORTED',
  LOCK_LOST: 'LOCK_LOST',
  CONNECTION_ERROR: 'CONNECTION_ERROR',
  TLS_MISMATCH: 'TLS_MISMATCH',
  AUTH_FAILED: 'AUTH_FAILED',
  PROTOCOL_ERROR: 'PROTOCOL_ERROR',
  SERVER_ERROR: 'SERVER_ERROR',
  INVALID_ARGUMENT: 'INVALID_ARGUMENT',
  UNSUPPORTED_PLATFORM: 'UNSUPPORTED_PLATFORM',
  NATIVE_LOAD_FAILED: 'NATIVE_LOAD_FAILED',
  LIMIT_MISMATCH: 'LIMIT_MISMATCH',
  UNSUPPORTED_FILE_SYSTEM: 'UNSUPPORTED_FILE_SYSTEM',
})

module.exports = { ErrorCode }
