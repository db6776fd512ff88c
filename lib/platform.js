'use strict'
// The platforms a binary is published for. package.json's `napi.targets` is their one list: the loader
// (lib/native.js) reads it to tell an unsupported platform from a missing package, and scripts/package.js builds
// each one and writes the platform packages into the published package's optionalDependencies.

const { napi } = require('../package.json')

/**
 * napi-rs' platform key of a Rust target triple: `x86_64-unknown-linux-gnu` → `linux-x64-gnu`,
 * `aarch64-apple-darwin` → `darwin-arm64`, `x86_64-pc-windows-msvc` → `win32-x64-msvc`.
 */
function tripleKey(triple) {
  const [arch, , os, abi] = triple.split('-')
  const cpu = { x86_64: 'x64', aarch64: 'arm64' }[arch] ?? arch
  const platform = { windows: 'win32' }[os] ?? os
  return abi ? `${platform}-${cpu}-${abi}` : `${platform}-${cpu}`
}

/** The published platform keys, in package.json's order. */
const PUBLISHED = Object.freeze(napi.targets.map(tripleKey))

module.exports = { tripleKey, PUBLISHED }
