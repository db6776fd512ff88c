'use strict'
// One demo process: takes the shared lock file `rounds` times, does "work" inside (with an O_EXCL marker file
// that would fail if two processes were ever inside at once), and reports each step as a JSON line.
// With --hold it takes the lock once and keeps it until killed (the parent SIGKILLs it to show crash recovery).

const fs = require('node:fs')
const { acquire } = require('..')

const [lockPath, name, rounds, mode] = process.argv.slice(2)
const marker = `${lockPath}.inside`
// `hr`: CLOCK_MONOTONIC in ns (process.hrtime on Linux), one clock for every process on the host, so the parent
// can order events of different workers exactly; `t` is wall-clock ms for display.
const say = (event, extra = {}) =>
  process.stdout.write(
    JSON.stringify({ t: Date.now(), hr: String(process.hrtime.bigint()), name, pid: process.pid, event, ...extra }) + '\n',
  )

async function main() {
  for (let i = 0; i < Number(rounds); i++) {
    const asked = Date.now()
    const r = await acquire(lockPath, { tag: name, timeout: 30_000 })
    if (!r.ok) {
      say('failed', { error: r.error.type })
      process.exitCode = 1
      return
    }
    const lock = r.value
    say('acquired', { waitedMs: Date.now() - asked, round: i + 1 })
    const fd = fs.openSync(marker, 'wx') // throws EEXIST if another holder is inside: mutual exclusion broken
    if (mode === '--hold') {
      say('holding', { content: fs.readFileSync(lockPath, 'utf8') })
      setInterval(() => {}, 1 << 30) // keep running until the parent kills us (the marker stays behind)
      return
    }
    await new Promise((r) => setTimeout(r, 120)) // the "work"
    fs.closeSync(fd)
    fs.unlinkSync(marker)
    say('leaving', { round: i + 1 }) // still holding: the next holder can only get in after this line
    await lock.release()
    say('released', { round: i + 1 })
  }
}

main().catch((e) => {
  say('error', { message: e.message })
  process.exitCode = 1
})
