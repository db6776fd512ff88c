'use strict'
// Test helper, run as a child process: the competitor of dflockd-faults.test.js, in a process of its own. Waits for
// each key (DistributedLock, straight to the server) and prints `{"key", "at"}` when it gets it (`at`: ms since the
// epoch, high resolution, comparable with the parent's performance.timeOrigin + performance.now()), then releases.
//
//   node dflockd-competitor.js <host> <port> <leaseTtlS> <key>...
const { performance } = require('node:perf_hooks')
const { DistributedLock } = require('../..')

const [host, port, lease, ...keys] = process.argv.slice(2)

Promise.all(
  keys.map(async (key) => {
    const c = new DistributedLock({ key, servers: [[host, Number(port)]], acquireTimeoutS: 10, leaseTtlS: Number(lease) })
    const got = await c.acquire()
    const at = performance.timeOrigin + performance.now()
    process.stdout.write(JSON.stringify({ key, got, at }) + '\n')
    if (got) await c.release()
  }),
).catch((e) => {
  process.stderr.write(`competitor failed: ${e && e.stack ? e.stack : e}\n`)
  process.exitCode = 1
})
