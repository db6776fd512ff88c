'use strict'
// A loss report queued to the JS thread can arrive after its primitive's object was finalized: Deno's test runner
// finalizes every wrapped object at teardown and then keeps running the event loop (denoland/deno#36556). Under
// Deno 2.9.6 that made `dflockd-lock` die of SIGSEGV at exit in about 1 run of 8 (core dump: `Primitive::token`
// read through a freed object by the loss handler of lib/dflockd/lock.js). Losses now come on the thread's one loss
// channel by id, and how a lock ended is read from the native registry (`takeHeldEnd(lossId)`), never from the
// primitive; a finalized primitive's ends are gone with it, so the handler gets null and touches nothing. This checks
// both answers against real losses (the server killed under two held locks).

require('node:v8').setFlagsFromString('--expose-gc')
const { test } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const native = require('../lib/native')
const { onLockEnded } = require('../lib/losses')

const gc = require('node:vm').runInNewContext('gc')

test('a loss of a finalized primitive is answered null; a live one\'s with its token and reason', { skip: d.skipReason() }, async (t) => {
  t.after(() => d.stopAll())
  const srv = await d.startServer()
  const primitive = (key) => {
    // The tokio driver: the loss is reported from its thread whatever this one does.
    process.env.SEMA_NATIVE_DFLOCKD_DRIVER = 'tokio'
    try {
      return new native.NativeDflockdPrimitive({ key, limit: 1, acquireTimeoutS: 5, server: { host: srv.host, port: srv.port }, renewRatio: 0.5 })
    } finally {
      delete process.env.SEMA_NATIVE_DFLOCKD_DRIVER
    }
  }
  const kept = primitive('finalized-kept')
  let dropped = primitive('finalized-dropped')
  assert.equal((await kept.acquire()).value, true)
  assert.equal((await dropped.acquire()).value, true)
  const keptToken = kept.token
  const keptId = kept.lossId
  const droppedId = dropped.lossId
  assert.notEqual(keptId, droppedId)

  // Both losses reported on this thread's channel (their ends are left in the registry: nobody takes them here).
  const reported = new Set()
  let bothReported
  let noReport
  const both = new Promise((resolve, reject) => {
    bothReported = resolve
    noReport = reject
  })
  // The loss channel is weak (it never keeps a process alive): this bound keeps the loop running meanwhile (Deno ends
  // a test whose loop has nothing left), and fails the test if the reports never come.
  const bound = setTimeout(() => noReport(new Error(`the two losses were not reported within ${u.scaled(10_000)} ms`)), u.scaled(10_000))
  onLockEnded((id) => {
    if (id === keptId || id === droppedId) reported.add(id)
    if (reported.size === 2) bothReported()
  })
  await srv.kill('SIGKILL')
  await both
  clearTimeout(bound)

  // Finalize `dropped` (Node runs Node-API finalizers after the collection, from the event loop; bounded).
  let registry
  const finalized = new Promise((resolve) => (registry = new FinalizationRegistry(resolve)))
  registry.register(dropped, 'dropped')
  dropped = null
  let done = false
  finalized.then(() => (done = true))
  for (let i = 0; i < 50 && !done; i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  assert.equal(done, true, 'the dropped primitive was collected')
  registry = null
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))

  assert.equal(native.takeHeldEnd(droppedId), null, 'nothing to read for a finalized primitive')
  const end = native.takeHeldEnd(keptId)
  assert.ok(end, 'the live primitive\'s end is kept until asked')
  assert.equal(end.token, keptToken)
  assert.equal(typeof end.lostReason, 'string')
  assert.notEqual(end.lostReason, '')
  assert.equal(native.takeHeldEnd(keptId), null, 'told once')
  kept.close()
})
