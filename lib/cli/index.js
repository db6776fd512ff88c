'use strict'
// Entry of the `sema-native` command (bin/sema-native.js): picks the front end from the first word.
//   sema-native semats <args…>   → lib/cli/semats.js (the semats CLI)
//   sema-native sema <args…>     → lib/cli/sema.js (the Rust sema CLI)
//   sema-native <command> …      → lib/cli/own.js (acquire, try-acquire, release, status, clean, wait, run)

async function main(argv) {
  const [first, ...rest] = argv
  if (first === 'semats') return require('./semats').main(rest)
  if (first === 'sema') return require('./sema').main(rest)
  return require('./own').main(argv)
}

module.exports = { main }
