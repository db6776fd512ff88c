'use strict'
// File targets of the one-string API (acquire / tryAcquire / release / status): Lock handles over the Rust
// engine. All file I/O of these functions runs on the tokio pool, off the JS thread.

const native = require('./native')
const { LockHandle } = require('./lock-handle')
const { semaphoreError, toLockError } = require('./errors')
const { withAbort } = require('./abort')
const { engineOptions, lockInfo, acquireTimeoutMs, installExitHook, DEFAULT_CONFIG } = require('./semaphore')

class FileLock extends LockHandle {
  #held

  constructor(held, target, onLost) {
    const info = held.info()
    super({ target, backend: 'file', pid: info.pid, timestamp: info.timestamp, tag: info.tag ?? undefined, token: held.token(), onLost })
    this.#held = held
    held.onLost((reason) => this._markLost(reason))
  }

  async _release() {
    const r = await this.#held.releaseAsync()
    if (!r.ok) throw toLockError(r.error)
    return r.value
  }
}

/** Validated engine handle for a path, or a SemaphoreError. */
function openFile(path, options = {}) {
  const checked = native.checkLockPath(path, false)
  if (!checked.ok) return { error: semaphoreError(checked.error) }
  const config = { ...DEFAULT_CONFIG }
  for (const k of ['staleTimeout', 'retryInterval', 'fsync', 'heartbeat', 'maxTagLength']) {
    if (k in options) config[k] = options[k]
  }
  return { file: new native.NativeLockFile(checked.path, engineOptions(config)) }
}

async function acquireFile(target, path, options = {}, { wait }) {
  const { file, error } = openFile(path, options)
  if (error) return { ok: false, error }
  const tag = options.tag ?? undefined
  const ownerPid = options.pid ?? undefined
  const r = await withAbort(options.signal, (cancelId) =>
    wait
      ? file.acquire(tag, ownerPid, acquireTimeoutMs(options.timeout) ?? undefined, cancelId ?? undefined)
      : file.tryAcquireAsync(tag, ownerPid),
  )
  if (!r.ok) {
    if (r.error.code === 'TIMEOUT') {
      return { ok: false, error: { type: 'TIMEOUT', message: `Timeout waiting for lock after ${options.timeout}ms` } }
    }
    return { ok: false, error: semaphoreError(r.error) }
  }
  installExitHook()
  return { ok: true, value: new FileLock(r.lock, target, options.onLost) }
}

async function releaseFile(path, options = {}) {
  const { file, error } = openFile(path)
  if (error) return { ok: false, error }
  const r = await file.releaseAsAsync(Boolean(options.force), options.pid ?? undefined)
  return r.ok ? { ok: true, value: undefined } : { ok: false, error: semaphoreError(r.error) }
}

async function statusFile(target, path, options = {}) {
  const { file, error } = openFile(path, options)
  if (error) throw toLockError(error)
  const s = await file.statusAsync()
  return {
    locked: s.locked,
    info: s.info ? lockInfo(s.info) : null,
    isStale: s.isStale,
    isOwnedByCurrentProcess: s.isOwnedByCurrentProcess,
    target,
    backend: 'file',
  }
}

module.exports = { FileLock, acquireFile, releaseFile, statusFile }
