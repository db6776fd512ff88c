'use strict'
// Waits for the lock file argv[2] (held by the parent), with a polling interval far beyond the test's bound: only
// a file-system event can wake it in time. Prints 'acquired' and then the names of this process's threads (JSON).

const fs = require('node:fs')
const sema = require('../..')

sema.acquire(process.argv[2], { retryInterval: 600_000, timeout: 60_000 }).then(async (r) => {
  if (!r.ok) {
    console.log(`failed ${r.error.type}`)
    process.exit(1)
  }
  const names = fs.readdirSync('/proc/self/task').map((t) => {
    try {
      return fs.readFileSync(`/proc/self/task/${t}/comm`, 'utf8').trim()
    } catch {
      return '?'
    }
  })
  console.log('acquired')
  console.log(JSON.stringify(names))
  await r.value.release()
})
