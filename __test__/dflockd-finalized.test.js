'use strict'
// A loss report queued to the JS thread can arrive after its primitive's object was finalized: Deno's test runner
// finalizes every wrapped object at teardown and then keeps running the event loop (denoland/deno#36556). Under
// Deno 2.9.6 that made `dflockd-lock` die of SIGSEGV at exit in about 1 run of 8 (core dump: `Primitive::token`
// read through a freed object by the loss handler of lib/dflockd/lock.js). The handler now asks
// `dflockdPrimitiveAlive(id)`, a function that reads no object, before it touches the primitive. This checks the
// answer: true while the object lives, false once it is finalized, for the id it reports losses under.

require('node:v8').setFlagsFromString('--expose-gc')
const { test } = require('node:test')
const assert = require('node:assert/strict')
const native = require('../lib/native')

const gc = require('node:vm').runInNewContext('gc')

function primitive() {
  // No I/O happens in the constructor: no server is needed.
  return new native.NativeDflockdPrimitive({ key: 'finalized', limit: 1, acquireTimeoutS: 1, server: { host: '127.0.0.1', port: 1 }, renewRatio: 0.5 })
}

test('a primitive is alive under its loss-channel id until its object is finalized', async () => {
  const channel = new native.NativeDflockdLossChannel(() => {})
  const kept = primitive()
  kept.reportLossesTo(channel, 4_000_001)
  assert.equal(native.dflockdPrimitiveAlive(4_000_001), true)
  assert.equal(native.dflockdPrimitiveAlive(4_000_002), false, 'an id never given')

  // Reported under a second id: the first is no longer its id.
  kept.reportLossesTo(channel, 4_000_003)
  assert.equal(native.dflockdPrimitiveAlive(4_000_001), false)
  assert.equal(native.dflockdPrimitiveAlive(4_000_003), true)

  ;(() => primitive().reportLossesTo(channel, 4_000_004))()
  assert.equal(native.dflockdPrimitiveAlive(4_000_004), true)
  // Node runs Node-API finalizers after the collection, from the event loop: collect until it has run (bounded).
  for (let i = 0; i < 50 && native.dflockdPrimitiveAlive(4_000_004); i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  assert.equal(native.dflockdPrimitiveAlive(4_000_004), false, 'finalized: no longer alive')
  assert.equal(native.dflockdPrimitiveAlive(4_000_003), true, 'the one still referenced is')
  kept.close()
})
