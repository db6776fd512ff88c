'use strict'
// Holds a lock with a short heartbeat until it is lost, then lets the process end on its own.
//   node file-heartbeat-child.js <lockPath> <heartbeatMs>
// Prints:
//   held {"token","pid"}                      once the lock is held
//   aborted <reason.code> released=<bool>     from the lock.signal 'abort' event
//   onLost <n> <error.code> sameLock=<bool>   from each onLost call
//   release-after-loss <bool>                 lock.release() after the loss (must be false)
//   exit onLost=<n>                           from process 'exit' (so the count is final)
// The only thing keeping the process alive while it holds the lock is an interval cleared on 'abort': if the
// heartbeat itself kept the process alive after the loss, the process would not exit and the test would fail.

const sema = require('../..')

const [file, hb] = process.argv.slice(2)
let lostCalls = 0
let lock

process.on('exit', () => console.log(`exit onLost=${lostCalls}`))

async function main() {
  const r = await sema.acquire(file, {
    heartbeat: Number(hb),
    timeout: 5000,
    onLost(l, err) {
      lostCalls++
      console.log(`onLost ${lostCalls} ${err && err.code} sameLock=${l === lock}`)
    },
  })
  if (!r.ok) {
    console.log(`failed ${JSON.stringify(r.error)}`)
    process.exit(1)
  }
  lock = r.value
  const keep = setInterval(() => {}, 1000)
  lock.signal.addEventListener(
    'abort',
    async () => {
      console.log(`aborted ${lock.signal.reason && lock.signal.reason.code} released=${lock.released}`)
      clearInterval(keep)
      console.log(`release-after-loss ${await lock.release()}`)
    },
    { once: true },
  )
  console.log(`held ${JSON.stringify({ token: lock.token, pid: lock.pid })}`)
}

main().catch((e) => {
  console.log(`crashed ${e && e.stack}`)
  process.exit(2)
})
