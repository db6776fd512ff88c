'use strict'
// Takes one Web Lock, says `done <callback result>` and lets the process end on its own, for the test that an idle
// LockManager (its dflockd mailbox, its released lock) keeps no process alive: `node web-locks-once.js <base> <name>`.
const { createLockManager } = require('../..')

const [base, name] = process.argv.slice(2)
createLockManager(base)
  .request(name, (lock) => lock.name)
  .then(
    (v) => process.stdout.write(`done ${v}\n`),
    (e) => {
      process.stdout.write(`failed ${e && e.name} ${e && e.message}\n`)
      process.exitCode = 1
    },
  )
