'use strict'
// Steals one Web Lock, for the steal tests: `node web-locks-stealer.js <base> <name> [blockMs] [alive]`. Without
// `alive` nothing else keeps this process alive: the steal itself must (a steal is a pending request); with it, a
// timer keeps it alive until the request settles. In the callback it
// says `held`, blocks its event loop for `blockMs` (sync work; default 0), says `unblocked`, and returns 42; then it
// says `resolved <value>` or `rejected <error name> <cause code>` and lets the process end on its own.
const { createLockManager } = require('../..')

const [base, name, blockMs, alive] = process.argv.slice(2)
const timer = alive === 'alive' ? setInterval(() => {}, 1 << 30) : null
const say = (m) => process.stdout.write(`${m}\n`)
createLockManager(base)
  .request(name, { steal: true }, () => {
    say('held')
    if (Number(blockMs) > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(blockMs))
    say('unblocked')
    return 42
  })
  .then(
    (v) => say(`resolved ${v}`),
    (e) => say(`rejected ${e && e.name} ${e && e.cause && e.cause.code}`),
  )
  .finally(() => clearInterval(timer))
