#![deny(clippy::all)]
//! Node bindings of sema-native: thin `#[napi]` wrappers over `sema-core`.

mod dflockd;
mod lockfile;

use napi_derive::napi;

/// Version of the native addon (matches package.json).
#[napi]
pub fn native_version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
