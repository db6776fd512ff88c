//! [`Replies`]: the promises of one low-level connection's requests, each settled natively with
//! its own result. Both drivers answer requests one at a time in call order, so the promise of
//! the oldest pending request is the one a result settles; the JS side keeps no queue of its own.
//!
//! Measured against the JS FIFO it replaces (promise resolvers settled in order by one `onReply`
//! callback): bench/workers/dflockd-client.js `addon-connection`, client CPU per lock + release
//! pair, medians of 5 interleaved 2 s runs, this 2-core VM at load average 6-15. Event-loop
//! driver, before -> after: real server 48.8 -> 45.1 µs (1 worker), 30.0 -> 31.0 (10); instant-
//! reply server 37.5 -> 35.8, 29.3 -> 27.8. Tokio driver: 102.2 -> 106.9, 37.8 -> 37.3; 74.0 ->
//! 81.0, 37.1 -> 39.5, and in a second run (7 runs of 1.5 s, 1 worker, instant-reply server)
//! 80.5 -> 70.2 (event loop 42.4 -> 38.8). Two identical builds differed by up to 11 % in the
//! same setting: no cost is measurable.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ptr;

use napi::bindgen_prelude::{PromiseRaw, ToNapiValue};
use napi::{sys, Env, JsValue as _};

use super::ops::NativeCallResult;
use crate::js_callback::check;

/// A connection's pending promises, oldest first, and the async context their settlement runs
/// in (so that promise reactions run right after it, as after any libuv callback in Node). Made
/// and used on the JS thread only.
pub(super) struct Replies {
    env: sys::napi_env,
    /// Null once released: a request refused after the end is settled within its own JS call.
    context: Cell<sys::napi_async_context>,
    pending: RefCell<VecDeque<sys::napi_deferred>>,
    /// Given up to the env's teardown: nothing more is settled.
    forgotten: Cell<bool>,
}

impl Replies {
    pub(super) fn new(env: &Env, name: &str) -> napi::Result<Replies> {
        let raw = env.raw();
        let name = env.create_string(name)?;
        let mut context = ptr::null_mut();
        // SAFETY: `raw` is the live env of the current call; `name` a value of its scope; the
        // out-pointer is a valid local.
        check(unsafe { sys::napi_async_init(raw, ptr::null_mut(), name.raw(), &mut context) })?;
        Ok(Replies {
            env: raw,
            context: Cell::new(context),
            pending: RefCell::new(VecDeque::new()),
            forgotten: Cell::new(false),
        })
    }

    /// A new promise, queued after every pending one: settled by the `settle` that comes for it.
    pub(super) fn promise<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, NativeCallResult>> {
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        // SAFETY: `env` is the live env of the current call; the out-pointers are valid locals.
        check(unsafe { sys::napi_create_promise(env.raw(), &mut deferred, &mut promise) })?;
        self.pending.borrow_mut().push_back(deferred);
        Ok(PromiseRaw::new(env.raw(), promise))
    }

    /// Take back the promise `promise` just queued (its request was refused before it was
    /// queued) and settle it with `r` now.
    pub(super) fn settle_newest(&self, r: NativeCallResult) {
        let newest = self.pending.borrow_mut().pop_back();
        if let Some(d) = newest {
            self.resolve(d, r);
        }
    }

    /// Settle the oldest pending promise with `r`: from a libuv or threadsafe-function callback
    /// (no JS on the stack: microtasks run before this returns) or from a JS call.
    pub(super) fn settle(&self, r: NativeCallResult) {
        let oldest = self.pending.borrow_mut().pop_front();
        if let Some(d) = oldest {
            self.resolve(d, r);
        }
    }

    fn resolve(&self, deferred: sys::napi_deferred, r: NativeCallResult) {
        if self.forgotten.get() {
            return;
        }
        let env = self.env;
        let context = self.context.get();
        // SAFETY: we are on the JS thread of `env`, which is alive (the owner releases this before
        // or while the env is torn down, and never settles after). A handle scope encloses every
        // value made here; `deferred` came from napi_create_promise and is resolved once (it was
        // removed from `pending`). The callback scope is opened and closed in the same frame.
        unsafe {
            let mut scope = ptr::null_mut();
            if sys::napi_open_handle_scope(env, &mut scope) != sys::Status::napi_ok {
                return;
            }
            let mut resource = ptr::null_mut();
            let mut callback_scope = ptr::null_mut();
            let scoped = !context.is_null()
                && sys::napi_get_global(env, &mut resource) == sys::Status::napi_ok
                && sys::napi_open_callback_scope(env, resource, context, &mut callback_scope)
                    == sys::Status::napi_ok;
            if let Ok(value) = NativeCallResult::to_napi_value(env, r) {
                sys::napi_resolve_deferred(env, deferred, value);
            }
            if scoped {
                sys::napi_close_callback_scope(env, callback_scope);
            }
            sys::napi_close_handle_scope(env, scope);
        }
    }

    /// The env is being torn down and frees what it owns itself: settle nothing more.
    pub(super) fn forget(&self) {
        self.forgotten.set(true);
    }

    /// The connection has ended (every driver settles what is pending first): drop the async
    /// context (idempotent; not during the env's teardown: see `forget`). Requests refused
    /// later are still settled, within the JS call that makes them.
    pub(super) fn release(&self) {
        let context = self.context.replace(ptr::null_mut());
        if context.is_null() || self.forgotten.get() {
            return;
        }
        // SAFETY: the env is alive (see `resolve`); destroyed once (the cell is now null).
        unsafe {
            sys::napi_async_destroy(self.env, context);
        }
    }
}
