'use strict'
// Test helper: Web Lock holders in child processes (helpers/web-locks-holder.js), for the suites of
// createLockManager() across processes.
//
//   const w = require('./helpers/web-locks')
//   const h = w.spawnHolder(base, name, { mode, steal, timeoutMs })  at once; `await h.held` once it says `held`
//   const h = await w.holder(base, name, options)                    resolved once it holds
//       h.child, h.out (u.lines()), await h.kill(signal)

const u = require('./file-util')

/**
 * A child process requesting the Web Lock `name` of the LockManager of `base` in `mode` (with `steal: true`, a steal)
 * and holding it until killed. Returns at once `{ child, out, held, kill() }`: `held` resolves once it says `held`
 * (within `timeoutMs` × timeScale()) and rejects if it does not; `out` reads its other lines (`rejected <name>` when
 * its lock is stolen); `kill(signal)` signals it by pid (u.signalChild()) and resolves its exit.
 */
function spawnHolder(base, name, { mode = 'exclusive', steal = false, timeoutMs = 15000 } = {}) {
  const child = u.spawnNode('web-locks-holder.js', [base, name, mode, ...(steal ? ['steal'] : [])])
  const out = u.lines(child)
  const held = out.next(/^held$/, timeoutMs)
  held.catch(() => {}) // a caller that kills a waiting holder need not await it
  return {
    child,
    out,
    held,
    kill(signal = 'SIGKILL') {
      u.signalChild(child, signal)
      return child.exited
    },
  }
}

/** spawnHolder(), resolved once the child holds the lock. */
async function holder(base, name, options) {
  const h = spawnHolder(base, name, options)
  await h.held
  return h
}

module.exports = { spawnHolder, holder }
