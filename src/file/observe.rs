//! Bindings of the engine's observation functions: `wait` (until a lock is free, without taking
//! it) and the listing of a directory's locks. They convert values and map errors only.

use std::path::PathBuf;

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use sema_core::lockfile::LockFile;

use super::cancel::cancel_token;
use super::values::{engine_options, ms, NativeFileOptions};
use crate::result::{void_result, VoidResult};

/// Resolves when the lock at `path` (from `checkLockPath`) is free or stale, without taking it and
/// without creating any file: woken by the file events of its directory, polling at
/// `retryIntervalMs` as the fallback. `timeoutMs` absent = forever; `cancelId` from `newCancelId`.
/// Failures (`TIMEOUT`, `ABORTED`, a symlink at the path) come back as values.
#[napi(ts_return_type = "Promise<VoidResult>")]
pub fn wait_lock_free<'env>(
    env: &'env Env,
    path: String,
    options: NativeFileOptions,
    timeout_ms: Option<f64>,
    cancel_id: Option<u32>,
) -> napi::Result<PromiseRaw<'env, VoidResult>> {
    let file = LockFile::new_canonical(PathBuf::from(path), engine_options(&options));
    let cancel = cancel_id.map(cancel_token).unwrap_or_default();
    let timeout = timeout_ms.map(ms);
    env.spawn_future(async move { Ok(void_result(file.wait_until_free(timeout, cancel).await)) })
}
