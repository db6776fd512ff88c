//! The floor programs' shared parts: the contended floor's contender (`contended`), and the same contender behind
//! Node (`node_addon`, built as this crate's cdylib and loaded with `process.dlopen` by bench/workers/contender.js).

pub mod contended;
#[cfg(target_os = "linux")]
mod node_addon;
