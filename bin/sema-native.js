#!/usr/bin/env node
'use strict'
// The sema-native command line. Usage: `sema-native --help`, and docs/cli.md.

const cli = require('../lib/cli/index.js')

cli.main(process.argv.slice(2)).catch((e) => {
  // The loader's failures (UNSUPPORTED_PLATFORM, NATIVE_LOAD_FAILED) say what is wrong and what to do: their message
  // alone. Anything else is a bug of ours: its stack helps the report.
  const text = e && cli.LOADER_CODES.has(e.code) ? e.message.replace(/^sema-native: /, '') : e && e.stack ? e.stack : e
  process.stderr.write(`sema-native: ${text}\n`)
  process.exitCode = 3
})
