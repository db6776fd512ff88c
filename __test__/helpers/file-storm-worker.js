'use strict'
// Stale-storm contender: one of many long-lived processes that race, round after round, to break one stale lock.
//   node file-storm-worker.js <lockPath> <api: async|semats>
// Protocol (stdin → stdout, one line each):
//   (start)          → `ready`
//   go <round>       → one attempt (async `tryAcquire(path)` or `Semaphore#tryAcquire()`), then
//                      `result <round> ok` or `result <round> <TYPE> <holderPid|->`
//   release <round>  → releases what it holds: `released <round> <true|false|none>`
//   (stdin closed)   → exits 0
// The go line is the barrier: the parent writes it to every contender back to back.

const readline = require('node:readline')
const sema = require('../..')

const [file, api] = process.argv.slice(2)
const sem = new sema.Semaphore(file)
let held = null

async function attempt() {
  if (api === 'semats') {
    const r = sem.tryAcquire('storm')
    if (r.ok) held = async () => sem.release().ok
    return r
  }
  const r = await sema.tryAcquire(file, { tag: 'storm' })
  if (r.ok) held = () => r.value.release()
  return r
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin })
  console.log('ready')
  for await (const line of rl) {
    const [cmd, round] = line.split(' ')
    if (cmd === 'go') {
      const r = await attempt()
      console.log(`result ${round} ${r.ok ? 'ok' : `${r.error.type} ${r.error.holderPid ?? '-'}`}`)
    } else if (cmd === 'release') {
      if (!held) console.log(`released ${round} none`)
      else {
        const h = held
        held = null
        console.log(`released ${round} ${await h()}`)
      }
    }
  }
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
