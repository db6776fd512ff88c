'use strict'
// A short script that must end on its own with nothing pending (the test bounds its lifetime).
//   node file-exit-child.js <mode> <lockPath>
// Modes:
//   acquire-release   acquire, release                           → `acquired`, `released true`
//   forget            acquire and never release                  → `acquired`
//   heartbeat         acquire with heartbeat 100 ms, never release → `acquired` (a heartbeat is pending)
//   semats-forget     Semaphore#tryAcquire (heartbeat 100 ms), never release → `acquired`
//   with-lock         withLock(fn)                               → `result 7`
//   timeout           acquire({timeout: 300}) on a lock held by someone else → `result TIMEOUT`
//   abort-wait        acquire({signal}) on a held lock, aborted after 200 ms → `result ABORTED`
//   wait-then-get     acquire() (no timeout) on a held lock: prints `waiting`; the pending acquire alone must keep
//                     the process alive until the holder releases → `acquired`, `released true`
// Never calls process.exit on success: the process must end because nothing is left pending.

const sema = require('../..')

const [mode, file] = process.argv.slice(2)

async function main() {
  switch (mode) {
    case 'acquire-release': {
      const r = await sema.acquire(file)
      if (!r.ok) throw new Error(JSON.stringify(r.error))
      console.log('acquired')
      console.log(`released ${await r.value.release()}`)
      break
    }
    case 'forget': {
      const r = await sema.acquire(file)
      if (!r.ok) throw new Error(JSON.stringify(r.error))
      console.log('acquired')
      break
    }
    case 'heartbeat': {
      const r = await sema.acquire(file, { heartbeat: 100 })
      if (!r.ok) throw new Error(JSON.stringify(r.error))
      console.log('acquired')
      break
    }
    case 'semats-forget': {
      const r = new sema.Semaphore(file, { heartbeat: 100 }).tryAcquire('forgotten')
      if (!r.ok) throw new Error(JSON.stringify(r.error))
      console.log('acquired')
      break
    }
    case 'with-lock': {
      const v = await sema.withLock(file, async (lock) => (lock.backend === 'file' ? 7 : -1))
      console.log(`result ${v}`)
      break
    }
    case 'timeout': {
      const r = await sema.acquire(file, { timeout: 300 })
      console.log(`result ${r.ok ? 'OK' : r.error.type}`)
      break
    }
    case 'abort-wait': {
      const ac = new AbortController()
      setTimeout(() => ac.abort(), 200)
      const r = await sema.acquire(file, { signal: ac.signal })
      console.log(`result ${r.ok ? 'OK' : r.error.type}`)
      break
    }
    case 'wait-then-get': {
      const p = sema.acquire(file)
      console.log('waiting')
      const r = await p
      if (!r.ok) throw new Error(JSON.stringify(r.error))
      console.log('acquired')
      console.log(`released ${await r.value.release()}`)
      break
    }
    default:
      throw new Error(`unknown mode ${mode}`)
  }
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exitCode = 2
})
