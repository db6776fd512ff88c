'use strict'
// A process that runs lock commands read from stdin, one per line (the security tests run it as another user).
//   acquire <file> <timeoutMs>  → `acquired` (the lock is kept) or `failed <TYPE>`
//   release                     → `released <true|false>` (the lock taken last)
//   try <file>                  → `try ok` (released again at once) or `try <TYPE>`
// Prints `ready` first. Exits when stdin ends.

const readline = require('node:readline')
const sema = require('../..')

let held = null

async function run(line) {
  const [cmd, file, ms] = line.split(' ')
  if (cmd === 'acquire') {
    const r = await sema.acquire(file, { timeout: Number(ms), retryInterval: 20 })
    if (r.ok) held = r.value
    return r.ok ? 'acquired' : `failed ${r.error.type}`
  }
  if (cmd === 'release') return `released ${held ? await held.release() : false}`
  if (cmd === 'try') {
    const r = await sema.tryAcquire(file)
    if (r.ok) await r.value.release()
    return r.ok ? 'try ok' : `try ${r.error.type}`
  }
  return `unknown ${cmd}`
}

async function main() {
  console.log('ready')
  for await (const line of readline.createInterface({ input: process.stdin })) console.log(await run(line))
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
