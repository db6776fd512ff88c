//! [`JsCallback`]: a JS function called through `napi_make_callback`, so promise microtasks run
//! right after it, as after any libuv callback in Node. Used by the dflockd `DistributedLock`
//! primitives (the low-level `Connection` settles each request's own promise instead:
//! `dflockd::replies`).

use std::cell::Cell;
use std::ptr;

use napi::bindgen_prelude::JsValuesTupleIntoVec;
use napi::{sys, Env, JsValue as _};

/// A JS function kept alive by a reference and called from the event loop through
/// `napi_make_callback` (an async context of its own), so that microtasks (promise reactions)
/// run right after it returns. Made and called on the JS thread only.
pub struct JsCallback {
    env: sys::napi_env,
    func: sys::napi_ref,
    context: sys::napi_async_context,
    /// Released (or given up to the env's teardown): no more calls.
    released: Cell<bool>,
}

impl JsCallback {
    pub fn new(env: &Env, func: sys::napi_value, name: &str) -> napi::Result<JsCallback> {
        let raw = env.raw();
        let mut func_ref = ptr::null_mut();
        let mut context = ptr::null_mut();
        let name = env.create_string(name)?;
        // SAFETY: `raw` is the live env of the current call, `func` a value of this call's
        // scope; the out-pointers are valid locals.
        unsafe {
            check(sys::napi_create_reference(raw, func, 1, &mut func_ref))?;
            let r = sys::napi_async_init(raw, ptr::null_mut(), name.raw(), &mut context);
            if r != sys::Status::napi_ok {
                sys::napi_delete_reference(raw, func_ref);
                check(r)?;
            }
        }
        Ok(JsCallback {
            env: raw,
            func: func_ref,
            context,
            released: Cell::new(false),
        })
    }

    /// Call the function with `args` (one value, or `FnArgs` of a tuple), from a libuv callback
    /// (no JS on the stack) or from a JS call. An exception it throws is reported as uncaught,
    /// as Node does for callbacks.
    pub fn call<A: JsValuesTupleIntoVec>(&self, args: A) {
        if self.released.get() {
            return;
        }
        let env = self.env;
        // SAFETY: we are on the JS thread of `env`, which is alive (the owner releases this
        // callback before or while the env is torn down, and never calls it after). A handle
        // scope encloses every value made here; the reference holds a function.
        unsafe {
            let mut scope = ptr::null_mut();
            if sys::napi_open_handle_scope(env, &mut scope) != sys::Status::napi_ok {
                return;
            }
            let mut func = ptr::null_mut();
            let mut recv = ptr::null_mut();
            let ok = sys::napi_get_reference_value(env, self.func, &mut func)
                == sys::Status::napi_ok
                && !func.is_null()
                && sys::napi_get_global(env, &mut recv) == sys::Status::napi_ok;
            if ok {
                if let Ok(argv) = args.into_vec(env) {
                    let mut result = ptr::null_mut();
                    let r = sys::napi_make_callback(
                        env,
                        self.context,
                        recv,
                        func,
                        argv.len(),
                        argv.as_ptr(),
                        &mut result,
                    );
                    if r == sys::Status::napi_pending_exception {
                        let mut err = ptr::null_mut();
                        if sys::napi_get_and_clear_last_exception(env, &mut err)
                            == sys::Status::napi_ok
                        {
                            sys::napi_fatal_exception(env, err);
                        }
                    }
                }
            }
            sys::napi_close_handle_scope(env, scope);
        }
    }

    /// The env is being torn down and frees the reference itself: just stop calling.
    pub fn forget(&self) {
        self.released.set(true);
    }

    /// Drop the reference and the async context (idempotent; not during the env's teardown:
    /// see [`JsCallback::forget`]).
    pub fn release(&self) {
        if self.released.replace(true) {
            return;
        }
        // SAFETY: the env is alive (see `call`); each is deleted once (guarded by `released`).
        unsafe {
            sys::napi_async_destroy(self.env, self.context);
            sys::napi_delete_reference(self.env, self.func);
        }
    }
}

/// A napi status as a `Result` (shared with `dflockd::replies`).
pub(crate) fn check(status: sys::napi_status) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(
            napi::Status::GenericFailure,
            format!("napi call failed with status {status}"),
        ))
    }
}
