'use strict'
// Reads a lock file in bursts (50 reads, then 1 ms) while other processes take and release it, and classifies every read:
// missing (ENOENT), complete (`pid=…\ntimestamp=…\n … token=<32 hex>\n`), or partial (anything else: a
// half-written lock became visible).
//   node file-reader-worker.js <lockPath>
// Prints `ready`, reads until its stdin is closed, then prints `result {"reads","missing","complete","partial","samples"}`.

const fs = require('node:fs')

const [file] = process.argv.slice(2)
const COMPLETE = /^pid=\d+\ntimestamp=\d+\n(?:[a-z]+=[^\n]*\n)*token=[0-9a-f]{32}\n(?:[a-z]+=[^\n]*\n)*$/
const stats = { reads: 0, missing: 0, complete: 0, partial: 0, samples: [] }
let done = false

process.stdin.on('data', () => {})
process.stdin.on('end', () => {
  done = true
})

function burst() {
  for (let i = 0; i < 50; i++) {
    let text
    try {
      text = fs.readFileSync(file, 'utf8')
    } catch (e) {
      if (e.code === 'ENOENT') {
        stats.reads++
        stats.missing++
        continue
      }
      throw e
    }
    stats.reads++
    if (COMPLETE.test(text)) stats.complete++
    else {
      stats.partial++
      if (stats.samples.length < 5) stats.samples.push(text)
    }
  }
  if (done) console.log(`result ${JSON.stringify(stats)}`)
  else setTimeout(burst, 1) // bursts of reads, not a CPU hog that would starve the lock holders on 2 cores
}

console.log('ready')
burst()
