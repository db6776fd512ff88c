'use strict'
// Test helper: a separate process holding a dflockd target in a mode.
//   node dflockd-shared-child.js <url> <shared|exclusive|none> [timeoutMs]   (none: the plain mutex, no mode)
// Prints `held` once granted (or `error <type>`), then releases on a `release` line on stdin (prints `released`);
// stdin ending exits without a release (the server frees the lock by disconnect).
const { acquire } = require('../..')

const [url, mode, timeout] = process.argv.slice(2)
acquire(url, { mode: mode === 'none' ? undefined : mode, timeout: Number(timeout ?? 30000) }).then((r) => {
  if (!r.ok) {
    process.stdout.write(`error ${r.error.type}\n`)
    process.exit(1)
  }
  process.stdout.write('held\n')
  let buf = ''
  process.stdin.on('data', async (d) => {
    buf += d
    if (buf.includes('release\n')) {
      buf = ''
      await r.value.release()
      process.stdout.write('released\n')
      process.exit(0)
    }
  })
  process.stdin.on('end', () => process.exit(0))
})
