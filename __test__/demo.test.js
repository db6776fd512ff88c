'use strict'
// The README's first command runs examples/demo.js: keep it working. It exits non-zero if two holders were ever
// inside at once (by the shared monotonic clock or the O_EXCL marker), a worker failed, or the SIGKILLed
// holder's lock was not reclaimed.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const u = require('./helpers/file-util')
const { spawn } = require('node:child_process')
const path = require('node:path')

test('npm run demo: four processes take turns, a crashed holder is reclaimed, never two holders', async () => {
  const child = spawn(process.execPath, [path.join(__dirname, '..', 'examples', 'demo.js')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  child.stdout.on('data', (d) => (out += d))
  child.stderr.on('data', (d) => (out += d))
  const timer = setTimeout(() => child.kill('SIGKILL'), u.scaled(60_000))
  const code = await new Promise((resolve) => child.on('exit', (c, s) => resolve(c ?? s)))
  clearTimeout(timer)
  assert.equal(code, 0, out)
  assert.match(out, /acquisitions: 12 across 4 processes; most holders at once: 1 \(must be 1\)/)
  assert.match(out, /overlaps caught by the O_EXCL marker file inside the critical section: 0/)
  assert.match(out, /crashed holder's lock reclaimed \d+ ms after the kill/)
})
