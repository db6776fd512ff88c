'use strict'
// Web Locks on a lock directory: one lock file per granted request, `<dir>/wl-<encoded name>.lock` (./names.js),
// taken through the one-string API (lib/target.js: the engine's FIFO line, reclaim of dead holders, loss
// detection). The holder's tag says `web-lock mode=<mode> client=<clientId> name=<encoded>`, so query() in any
// process can tell the name (also of a hashed long one), the mode and the client; the rest (pid, host, the number
// of waiting processes) is the engine's listing (`sema-native ls`), never a second parse of lock files here.

const native = require('../native')
const nodePath = require('node:path')
const target = require('../target')
const { listDir } = require('../cli/ls')
const { stemOf, nameOfStem, encodeName, decodeName } = require('./names')
const { sharedOf } = require('../file/shared')
const { ErrorCode } = require('../codes')

const TAG = /^web-lock mode=(exclusive|shared) client=(\S+)(?: name=(\S*))?$/

class FileBackend {
  constructor(dir) {
    this.dir = nodePath.resolve(dir)
    this.id = `file:${this.dir}`
    this.kind = 'file'
  }

  path(name) {
    return nodePath.join(this.dir, `${stemOf(name)}.lock`)
  }

  tag(name, mode, clientId) {
    const encoded = encodeName(name)
    // The default maxTagLength is 10 000: a longer name is not written (query shows it as unknown).
    return `web-lock mode=${mode} client=${clientId}${encoded.length <= 8000 ? ` name=${encoded}` : ''}`
  }

  /** `{ok, value: Lock}` / `{ok: false, unavailable}` (tryAcquire found it taken) / `{ok: false, error}`. */
  async acquire(name, mode, { wait, signal, clientId }) {
    const options = { tag: this.tag(name, mode, clientId), signal, mode }
    return this.settle(await (wait ? target.acquire : target.tryAcquire)(this.path(name), options))
  }

  /** A backend answer as the manager takes it (see acquire). */
  settle(r) {
    if (r.ok) return r
    if (r.error.type === ErrorCode.ALREADY_LOCKED) return { ok: false, unavailable: true }
    if (r.error.type === ErrorCode.INVALID_PATH && !native.isDirectory(this.dir)) {
      // The engine names the lock file's parent; for the manager that is its own directory, which it does not create.
      const e = toError(r.error)
      e.message = `the LockManager's directory does not exist: ${this.dir} (createLockManager(dir) uses an existing directory; create it first)`
      return { ok: false, error: e }
    }
    return { ok: false, error: toError(r.error) }
  }

  /**
   * Takes the name whoever holds it: the holder's file is removed (forced release) and ours created at once; a
   * waiter of another process that slips in between is forced out the same way (each round's winner is evicted by
   * the next), up to STEAL_ROUNDS times. The evicted holder's loss detection tells it (its request rejects with an
   * AbortError).
   */
  async steal(name, { clientId }) {
    const path = this.path(name)
    let last
    for (let i = 0; i < STEAL_ROUNDS; i++) {
      const rel = await target.release(path, { force: true })
      if (!rel.ok && rel.error.type !== ErrorCode.NOT_LOCKED) return this.settle(rel)
      last = await target.tryAcquire(path, { tag: this.tag(name, 'exclusive', clientId), mode: 'exclusive' })
      if (last.ok || last.error.type !== ErrorCode.ALREADY_LOCKED) return this.settle(last)
    }
    return this.settle(last)
  }

  /** Other processes' held and pending requests, from the engine's listing of the directory. */
  async others(local, clientId) {
    const held = []
    const pending = []
    const listing = await listDir(this.dir)
    if (listing.error) {
      if (listing.error.errnoName === 'ENOENT') return { held, pending }
      throw toError(listing.error)
    }
    for (const l of listing.locks) {
      if (!l.name.endsWith('.lock')) continue
      const stem = l.name.slice(0, -'.lock'.length)
      let name = nameOfStem(stem)
      if (name === null) continue
      const tag = l.tag == null ? null : TAG.exec(l.tag)
      if (name === undefined && tag?.[3] != null) name = decodeName(tag[3]) ?? undefined
      if (name === undefined) continue // a hashed long name whose holder did not write it
      // This thread's own requests are listed from its state (other threads of this process are other clients).
      const mine = tag !== null && tag[2] === clientId
      // Every request names a mode (shared or exclusive): the core's shared lock of the path says who holds and waits.
      const shared = await sharedOf(nodePath.join(this.dir, l.name))
      if (l.state === 'held' && tag?.[1] === 'shared') {
        // A shared lock file names one of its holders: each one (its own file beside it) is listed instead.
        for (const r of shared.readers) {
          const rt = r.tag == null ? null : TAG.exec(r.tag)
          if (rt !== null && rt[2] === clientId) continue
          held.push({ name, ...(rt ? { mode: rt[1], clientId: rt[2] } : { mode: 'shared' }), pid: r.pid, host: l.host ?? undefined })
        }
      } else if (l.state === 'held' && !mine) {
        const entry = { name }
        if (tag) {
          entry.mode = tag[1]
          entry.clientId = tag[2]
        }
        held.push({ ...entry, pid: l.pid ?? undefined, host: l.host ?? undefined })
      }
      // The listing's waiters are the mutex line's waiting processes (a request without a mode, from another front
      // end) plus the shared lock's live tickets, one per waiting request (lockfile/listing/members.rs), this
      // thread's own among them: those query() lists from its own state.
      const mineWaiting = local(name).filter((r) => r.state === 'waiting').length
      const waiting = Math.max(0, (l.waiters ?? 0) - mineWaiting)
      for (let i = 0; i < waiting; i++) pending.push({ name })
    }
    return { held, pending }
  }
}

/** Rounds of force-and-take in a steal (each lost round means another process's waiter took the lock first). */
const STEAL_ROUNDS = 16


function toError(e) {
  const { toLockError } = require('../errors')
  return toLockError(e)
}

module.exports = { FileBackend }
