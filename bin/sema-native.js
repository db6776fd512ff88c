#!/usr/bin/env node
'use strict'
// The sema-native command line. Usage: `sema-native --help`, and docs/cli.md.

require('../lib/cli/index.js')
  .main(process.argv.slice(2))
  .catch((e) => {
    process.stderr.write(`sema-native: ${e && e.stack ? e.stack : e}\n`)
    process.exitCode = 3
  })
