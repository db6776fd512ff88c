//! `sema-core`: the engine behind the `sema-native` Node addon, usable from plain Rust.
//!
//! - [`lockfile`]: File-Based Semaphore lock files (`pid=` / `timestamp=` / `tag=`), shared with the
//!   `sema` and `semats` tools, with atomic acquisition, safe stale breaking, heartbeat and waiting.
//! - [`dflockd`]: a client for the dflockd lock server (line protocol over TCP, optional TLS and auth).
//!
//! - [`compat`]: other lock libraries' names over this engine ([`compat::sema`]: the `sema`
//!   crate's `Semaphore`).
//! - [`options`]: the option rules of every entry point (names, kinds, bounds, defaults).
//! - [`ErrorCode`]: the stable code of every failure of either backend.
//!
//! This crate never depends on napi: the bindings crate at the repository root is a thin layer over it.

pub mod compat;
pub mod dflockd;
mod error_code;
pub mod lockfile;
pub mod options;
#[cfg(any(test, feature = "sim"))]
pub mod sim;

pub use error_code::ErrorCode;
