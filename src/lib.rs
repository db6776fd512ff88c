//! Node bindings of sema-native: thin `#[napi]` wrappers over `sema-core`.

#![deny(clippy::all)]
// napi-derive registers exports only outside cfg(test), so in the (empty) test build of this cdylib
// every export looks unused.
#![cfg_attr(test, allow(dead_code))]

mod dflockd;
mod lockfile;
mod result;

use napi_derive::napi;

/// Version of the native addon (matches package.json).
#[napi]
pub fn native_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
