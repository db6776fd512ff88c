'use strict'
// Tries every acquire flavour on a lock path in a directory this (unprivileged) process cannot write.
//   node file-input-child.js <lockPath>
// Prints one JSON line: {"types": {"<flavour>": "<error type or OK>"}}; exits 0.

const sema = require('../..')

const [file] = process.argv.slice(2)

async function outcome(fn) {
  try {
    const r = await fn()
    if (r && typeof r === 'object' && 'ok' in r) return r.ok ? 'OK' : r.error.type
    return 'OK'
  } catch (e) {
    return e && (e.code ?? e.type ?? String(e))
  }
}

async function main() {
  const types = {}
  types['tryAcquire()'] = await outcome(() => sema.tryAcquire(file))
  types['acquire({timeout: 300})'] = await outcome(() => sema.acquire(file, { timeout: 300 }))
  types['acquire() without timeout'] = await outcome(() => sema.acquire(file, { signal: AbortSignal.timeout(3000) }))
  types['withLock()'] = await outcome(() => sema.withLock(file, () => 1, { timeout: 300 }))
  types['Semaphore#tryAcquire()'] = await outcome(() => new sema.Semaphore(file).tryAcquire())
  types['Semaphore#acquire({timeout: 300})'] = await outcome(() => new sema.Semaphore(file).acquire({ timeout: 300 }))
  console.log(JSON.stringify({ types }))
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
