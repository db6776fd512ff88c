'use strict'
// The one loss channel of this JS thread, for both backends: the native side names a lock of this thread that ended
// otherwise than through its handle (a file lock lost or released by path, a dflockd lock/slot lost) by its id, one id
// space for both (src/losses.rs), and `native.takeHeldEnd(id)` says how, once. Each backend registers its dispatcher
// here; ids never overlap, so each finds only its own. The native callback is weak: it never keeps the process alive.

const native = require('./native')

const dispatchers = []

// This thread's locks only (each worker thread that loads the module adds its own); a second copy of this module on
// the thread adds another, and each dispatcher answers only for the ids it knows.
native.addLockLostHandler((id) => {
  for (const d of dispatchers) d(id)
})

/** Adds a backend's dispatcher `(id) => void`, called for every loss report of this thread. */
function onLockEnded(dispatch) {
  dispatchers.push(dispatch)
}

module.exports = { onLockEnded }
