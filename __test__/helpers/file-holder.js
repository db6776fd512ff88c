'use strict'
// Child process that takes a lock and holds it until told otherwise.
//   node file-holder.js <lockPath> [optionsJSON]
// optionsJSON: AcquireOptions for the async API, plus `api: 'semats'` to use `new Semaphore(path, config).acquire()`,
// and `handle: '<SIGNAL>'` to install a handler of the program's own for that signal, printing `handled <SIGNAL>`.
// Prints `held {"pid","token","timestamp"}` once it holds the lock (or `failed {error}` and exits 1).
// Then reads commands from stdin, one per line:
//   release  → prints `released <true|false>`   (Lock#release() / Semaphore#release().ok)
//   exit     → exits 0 without releasing
// It stays alive while stdin is open (the test kills it with SIGKILL to simulate a crash).

const readline = require('node:readline')
const fs = require('node:fs')
const sema = require('../..')

const [file, json] = process.argv.slice(2)
const { handle, ...opts } = json ? JSON.parse(json) : {}
if (handle) process.on(handle, () => console.log(`handled ${handle}`))

function tokenOf() {
  try {
    const m = /^token=(.*)$/m.exec(fs.readFileSync(file, 'utf8'))
    return m ? m[1] : null
  } catch {
    return null
  }
}

async function main() {
  let release
  let info
  if (opts.api === 'semats') {
    const { api, tag, timeout, ...config } = opts
    const s = new sema.Semaphore(file, config)
    const r = await s.acquire({ tag, timeout })
    if (!r.ok) {
      console.log(`failed ${JSON.stringify(r.error)}`)
      process.exit(1)
    }
    info = { pid: r.value.pid, token: tokenOf(), timestamp: r.value.timestamp }
    release = async () => s.release().ok
  } else {
    const r = await sema.acquire(file, opts)
    if (!r.ok) {
      console.log(`failed ${JSON.stringify(r.error)}`)
      process.exit(1)
    }
    const lock = r.value
    info = { pid: lock.pid, token: lock.token, timestamp: lock.timestamp }
    release = () => lock.release()
  }
  console.log(`held ${JSON.stringify(info)}`)
  const rl = readline.createInterface({ input: process.stdin })
  for await (const line of rl) {
    if (line === 'release') console.log(`released ${await release()}`)
    else if (line === 'exit') process.exit(0)
  }
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
