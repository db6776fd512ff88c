'use strict'
// Holds one Web Lock until killed, for the Web Locks tests: `node web-locks-holder.js <base> <name> <mode> [steal]`
// (also a worker thread's script, with the same argv). Says `held` (stdout line, or a message to the parent thread)
// once granted; when the request rejects (stolen) says `rejected <error name>` and exits 0.
const { parentPort } = require('node:worker_threads')
const { createLockManager } = require('../..')

const [base, name, mode, steal] = process.argv.slice(2)
const say = (m) => (parentPort ? parentPort.postMessage(m) : process.stdout.write(`${m}\n`))
const options = { mode }
if (steal === 'steal') options.steal = true
// A held lock does not keep a process (or thread) alive: this one lives until killed or terminated.
const alive = setInterval(() => {}, 1 << 30)
createLockManager(base)
  .request(name, options, () => {
    say('held')
    return new Promise(() => {})
  })
  .then(
    () => say('released'),
    (e) => {
      say(`rejected ${e && e.name}`)
      clearInterval(alive)
    },
  )
