'use strict'
// Loads the generated napi binding (binding.js picks the .node file for this platform).
// Kept in one place so every module shares one instance and one clear error when it is missing.

let native
try {
  native = require('../binding.js')
} catch (err) {
  const hint = new Error(
    'sema-native: the native addon is not built for this platform. Run `npm run setup` (needs Rust and cargo) ' +
      'in the package folder.',
  )
  hint.cause = err
  throw hint
}

module.exports = native
