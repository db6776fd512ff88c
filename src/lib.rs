//! Node bindings of sema-native: thin `#[napi]` wrappers over `sema-core`.

#![deny(clippy::all)]
// napi-derive registers exports only outside cfg(test), so in the (empty) test build of this cdylib
// every export looks unused.
#![cfg_attr(test, allow(dead_code))]

mod cancel;
mod cli;
mod dflockd;
mod event_loop;
mod file;
mod js_callback;
mod losses;
mod owner;
mod result;
mod target;

/// The addon's tokio runtime: one worker thread instead of one per core (the blocking pool, used
/// for fsync, is separate and unchanged). A dflockd request, its socket's reactor and the settling
/// of its result then run on one thread, and no second worker is woken to look for work on every
/// request: measured against an instant-reply server, client CPU per lock + release pair drops
/// ~13 % at 10 and 100 workers. The lock engine keeps its blocking work off this thread (fsync on
/// the blocking pool, inotify and heartbeat on their own threads).
///
/// Runs at every module registration (once per Node environment, e.g. per worker thread); the
/// runtime is built once per process. If it cannot be built, napi-rs's default runtime is used.
#[napi_derive::module_init]
fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            napi::bindgen_prelude::create_custom_tokio_runtime(rt);
        }
    });
}

/// The option rules of every entry point (names, kinds, bounds, units, defaults, the words of
/// their messages) as JSON: `sema_core::options`' table, read once by lib/validate.js at load,
/// so checking options costs no call across the boundary.
#[napi_derive::napi(js_name = "optionRules")]
pub fn option_rules() -> String {
    sema_core::options::rules_json()
}

/// The message for a lease above the table's bound (`leaseTtl is in seconds: 30000 s is over 8
/// hours; …`), for the JS checks of `name` (called only when refusing `ttl_s`, a whole number).
#[napi_derive::napi(js_name = "leaseTtlTooLong")]
pub fn lease_ttl_too_long(name: String, ttl_s: f64) -> String {
    sema_core::options::lease_ttl_too_long(&name, ttl_s.max(0.0) as u64)
}
