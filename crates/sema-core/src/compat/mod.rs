//! Drop-in names of other lock libraries over this crate's engine.
//!
//! - [`sema`]: the `sema` crate's library (`file_based_semaphore` 0.1.0: `Semaphore`,
//!   `SemaphoreConfig`, `SemaphoreGuard`, `LockInfo`, `SemaphoreError`), for a Rust service
//!   that switches by changing its dependency.

pub mod sema;
