//! Bindings of the lock-file engine: they convert values and map errors, nothing more. No
//! file-system logic here.
//!
//! Expected failures travel as values (`NativeResult<T>`: `{ ok: true, value } | { ok: false,
//! error: { code, message, … } }`, see `crate::result`), never as thrown errors: an async napi fn cannot give its rejection a custom
//! `code`, and the JS layer wants semats' `SemaphoreResult` shapes anyway. Only programming
//! errors (a bad argument type) throw.
//!
//! Who owns what:
//! - held locks: the engine's registry (`sema_core::lockfile::held_lock_by_id`); JS and this
//!   layer keep only the id;
//! - the lock file of a path: the engine's `LockFile` inside a [`lock_file::NativeLockFile`],
//!   its only owner here (JS keeps the object: semats' `Semaphore` one, the target API a small
//!   cache by path and options); the per-path FIFO queue is the engine's, shared by every
//!   `LockFile` of one path;
//! - threads: a wait runs on the tokio runtime, and every blocking file call on its blocking
//!   pool: the `fsync` of a lock won while waiting, an acquire's first attempt where it may
//!   block, and a blocking call made from JS (an attempt, a release, a status on a file system
//!   where they may block; [`pool::off_thread`]);
//! - cancellation of a wait: the cancel ids of `crate::cancel`, fired by JS from its `AbortSignal`;
//! - answers: one kind per call. An async call (`tryAcquire`, `releaseHeldAsync`) always
//!   returns a promise; its synchronous twin, where a call may be short (`tryAcquireNow`,
//!   `releaseHeldNow`), answers now or `null` ("not short here: call the async one"). `acquire`
//!   answers now or `null`, and then its result comes through the thread's one completion
//!   channel ([`settle`]): one threadsafe function per JS thread, not one per call, which the
//!   thread that decided the acquisition calls itself.

mod held;
mod lock_file;
mod observe;
mod pool;
mod semaphore;
mod settle;
mod shared;
mod values;
