'use strict'
// createLockManager(base) and the ready per-user `locks`: the W3C Web Locks API across processes and machines
// (./manager.js), on a lock directory (./file-backend.js) or a dflockd server (./dflockd-backend.js).

const { managerFor } = require('./manager')
const { FileBackend } = require('./file-backend')
const { DflockdBackend } = require('./dflockd-backend')
const { userLocksDir } = require('./user-dir')
const { invalidArgument } = require('../errors')
const { isDflockdTarget } = require('../dflockd/url')

/**
 * A LockManager on `base`: an existing directory (lock files are made in it) or a
 * `dflockd://[token@]host[:port][/prefix]` URL. `options` is reserved (none yet; an unknown one is refused).
 */
function createLockManager(base, options) {
  if (typeof base !== 'string' || base === '') throw invalidArgument('createLockManager needs a directory or a dflockd:// URL')
  if (options !== undefined && options !== null) {
    if (typeof options !== 'object') throw invalidArgument('createLockManager options must be an object')
    const unknown = Object.keys(options)[0]
    if (unknown !== undefined) throw invalidArgument(`unknown createLockManager option '${unknown}' (there are none yet)`)
  }
  if (isDflockdTarget(base)) return managerFor(new DflockdBackend(base))
  const { parseTarget } = require('../target')
  const parsed = parseTarget(base)
  return managerFor(new FileBackend(parsed.path))
}

let ready = null
/**
 * The per-user LockManager: made on first use, so that loading the package touches no directory. Its directory is
 * checked when made (see ./user-dir.js): a refused one makes every `request`/`query` reject with that LockError.
 */
function userLocks() {
  if (!ready) {
    let manager
    let error
    try {
      manager = managerFor(new FileBackend(userLocksDir()))
    } catch (e) {
      error = e
    }
    ready = {
      request(...args) {
        return manager ? manager.request(...args) : Promise.reject(error)
      },
      query() {
        return manager ? manager.query() : Promise.reject(error)
      },
      get [Symbol.toStringTag]() {
        return 'LockManager'
      },
    }
    // A refused directory may be fixed by its user: the next use checks it again.
    if (!manager) {
      const refused = ready
      ready = null
      return refused
    }
  }
  return ready
}

/** The `locks` export: a LockManager whose directory is made when first used. */
const locks = Object.freeze({
  request(...args) {
    return userLocks().request(...args)
  },
  query() {
    return userLocks().query()
  },
  get [Symbol.toStringTag]() {
    return 'LockManager'
  },
})

module.exports = { createLockManager, locks }
