'use strict'
// Entry of the `sema-native` command (bin/sema-native.js): picks the front end from the first word.
//   sema-native semats <args…>   → lib/cli/semats.js (the semats CLI)
//   sema-native sema <args…>     → lib/cli/sema.js (the Rust sema CLI)
//   sema-native <command> …      → lib/cli/own.js (acquire, try-acquire, release, status, clean, wait, run)

async function main(argv) {
  const lossy = lossyArgument(argv)
  if (lossy !== null) {
    process.stderr.write(
      `sema-native: argument ${lossy + 1} is not valid UTF-8 (Node.js would turn its bytes into U+FFFD and so name ` +
        'a different file); rename the file or pass a path without such bytes\n',
    )
    process.exitCode = 2
    return
  }
  const [first, ...rest] = argv
  if (first === 'semats') return require('./semats').main(rest)
  if (first === 'sema') return require('./sema').main(rest)
  return require('./own').main(argv)
}

/**
 * Index of the first argument Node received as bytes that are not UTF-8 (its `process.argv` replaces them with
 * U+FFFD, so a path would name another file), or null. On Linux the raw bytes come from /proc/self/cmdline (its
 * last entries are the arguments); elsewhere any U+FFFD in an argument is refused, as it cannot be told apart.
 */
function lossyArgument(argv) {
  const suspect = argv.findIndex((a) => a.includes('\uFFFD'))
  if (suspect < 0) return null
  let raw
  try {
    raw = require('node:fs').readFileSync('/proc/self/cmdline')
  } catch {
    return suspect
  }
  const parts = []
  let start = 0
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] === 0) {
      parts.push(raw.subarray(start, i))
      start = i + 1
    }
  }
  const ours = parts.slice(parts.length - argv.length)
  if (ours.length !== argv.length) return suspect
  const decoder = new TextDecoder('utf-8', { fatal: true })
  for (let i = 0; i < ours.length; i++) {
    try {
      decoder.decode(ours[i])
    } catch {
      return i
    }
  }
  return null
}

module.exports = { main, lossyArgument, LOADER_CODES: require('./common').LOADER_CODES }
