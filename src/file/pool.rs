//! The one pool for blocking file work: tokio's blocking pool. A wait already runs on the tokio
//! runtime and sends the `fsync` of a lock it wins there; a blocking call made from JS (an
//! attempt, a release, a status on a file system where they may block) goes to the same pool,
//! resolving a promise with its value. Not the libuv pool: its 4 threads also serve Node's own
//! `fs` calls, which a lock call stuck on an unresponsive network file system would starve;
//! tokio's pool grows instead.

use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::Env;

/// Runs `work` on the blocking pool; the promise resolves with its value.
pub fn off_thread<'env, J: ToNapiValue + Send + 'static>(
    env: &'env Env,
    work: impl FnOnce() -> J + Send + 'static,
) -> napi::Result<PromiseRaw<'env, J>> {
    env.spawn_future(async move {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| napi::Error::from_reason(format!("a blocking file call failed: {e}")))
    })
}

/// Nothing, resolved from the tokio runtime: the cost of a promise round trip through it (JS → a tokio worker →
/// the threadsafe completion → the promise), which every waiting acquire pays once. For bench/file-hops.js.
#[napi_derive::napi]
pub fn bench_tokio_round_trip(env: &Env) -> napi::Result<PromiseRaw<'_, u32>> {
    env.spawn_future(async { Ok(0) })
}

/// Nothing, from the blocking pool: [`bench_tokio_round_trip`] plus the hop to a blocking thread and back (what
/// `off_thread` adds). For bench/file-hops.js.
#[napi_derive::napi]
pub fn bench_blocking_round_trip(env: &Env) -> napi::Result<PromiseRaw<'_, u32>> {
    off_thread(env, || 0)
}
