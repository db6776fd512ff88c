'use strict'
// A failure the OS reported carries the OS's number and its name as fields (`errno`, `errnoName`), from the engine's
// io::Error through the binding's one error mapper (src/result.rs) into SemaphoreError values and LockError: callers
// (and this package's own CLI) read a field, not "(os error 13)" out of a message.
// - permission refused: `nobody` (through setpriv) takes a lock in a directory it may not write;
// - not found: the listing of a directory that does not exist (what `ls`, `top` and the Web Locks file backend read);
// - the engine's non-OS failures (a lock held) carry no errno, and their message names no file.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const sema = require('..')

const linux = process.platform === 'linux'
const root = typeof process.getuid === 'function' && process.getuid() === 0
const asNobody = !linux ? 'Linux only' : !root ? 'needs root, to act as another user (setpriv)' : false

test('permission refused by the OS: errno EACCES and its name on tryAcquire, withLock and Semaphore', { skip: asNobody }, (t) => {
  const pkg = u.packageForOtherUsers('os-error-child.js')
  const dir = fs.realpathSync(u.mkTmp('os-error-'))
  t.after(() => {
    u.rmTmp(pkg.dir)
    u.rmTmp(dir)
  })
  fs.chmodSync(dir, 0o555) // nobody may enter it, not create in it
  const file = path.join(dir, 'x.lock')
  const r = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, pkg.paths[0], file], {
    cwd: pkg.dir,
    encoding: 'utf8',
  })
  assert.equal(r.status, 0, r.stderr)
  const out = JSON.parse(r.stdout)
  assert.equal(out.withLockIsLockError, true)
  for (const how of ['tryAcquire', 'withLock', 'semaphore']) {
    const e = out[how]
    assert.ok(e, `${how} failed`)
    assert.equal(e.type, 'PERMISSION_DENIED', how)
    assert.equal(e.errno, os.constants.errno.EACCES, how)
    assert.equal(e.errnoName, 'EACCES', how)
    assert.match(e.message, /Permission denied/, how)
    assert.ok(e.message.includes(file), `${how}: the message names the lock file: ${e.message}`)
  }
  assert.ok(!fs.existsSync(file), 'nothing created')
})

test('not found: the listing of a missing directory carries errno ENOENT and its name', async (t) => {
  const dir = u.mkTmp('os-error-missing-')
  t.after(() => u.rmTmp(dir))
  const missing = path.join(dir, 'gone')
  const r = await require('../lib/cli/ls').listDir(missing)
  assert.ok(r.error, 'the listing failed')
  assert.equal(r.error.type, 'IO_ERROR')
  assert.equal(r.error.errno, os.constants.errno.ENOENT)
  if (process.platform !== 'win32') assert.equal(r.error.errnoName, 'ENOENT')
  // the LockError made from it keeps both fields
  const e = require('../lib/errors').toLockError(r.error)
  assert.ok(e instanceof sema.LockError)
  assert.equal(e.errno, r.error.errno)
  assert.equal(e.errnoName, r.error.errnoName)
})

test('a failure that is not the OS’s (a lock held) has no errno and names no file', async (t) => {
  const dir = u.mkTmp('os-error-held-')
  const file = path.join(dir, 'x.lock')
  const held = await sema.tryAcquire(file)
  assert.ok(held.ok)
  t.after(async () => {
    await held.value.release()
    u.rmTmp(dir)
  })
  const r = await sema.tryAcquire(file)
  assert.equal(r.ok, false)
  assert.equal(r.error.type, 'ALREADY_LOCKED')
  assert.equal(r.error.errno, undefined)
  assert.equal(r.error.errnoName, undefined)
  assert.ok(!r.error.message.includes(file), r.error.message)
})
