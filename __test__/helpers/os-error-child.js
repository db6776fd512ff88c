'use strict'
// `node os-error-child.js <lockPath>`: one OS failure on <lockPath> through each public way a lock file fails
// (tryAcquire's result, withLock's throw, semats' Semaphore result), printed as one JSON line
// {tryAcquire, withLock, semaphore}, each {type, message, errno, errnoName}. Run as another user (setpriv) by
// error-os-fields.test.js, in a directory that user may not write.
const sema = require('../..')

function fields(e) {
  return { type: e.type ?? e.code, message: e.message, errno: e.errno, errnoName: e.errnoName }
}

;(async () => {
  const file = process.argv[2]
  const tried = await sema.tryAcquire(file)
  let thrown = null
  try {
    await sema.withLock(file, () => null, { timeout: 0 })
  } catch (e) {
    thrown = e
  }
  const semats = await new sema.Semaphore(file).acquire()
  console.log(
    JSON.stringify({
      tryAcquire: tried.ok ? null : fields(tried.error),
      withLock: thrown && fields(thrown),
      withLockIsLockError: thrown instanceof sema.LockError,
      semaphore: semats.ok ? null : fields(semats.error),
    }),
  )
})()
