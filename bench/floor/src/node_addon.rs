//! The contended floor behind Node: a Node-API module (no napi crate: the dozen functions it calls are declared
//! here and resolved from the `node` executable at load) whose `acquire()` makes the floor's whole acquisition
//! (`fifo` order: content synced before the wait, the queue file's `flock`, inotify, `linkat`, the directory's sync)
//! on libuv's thread pool through `napi_create_async_work`, and resolves a promise with the descriptor; `release(fd)`
//! is the floor's release, on the JS thread, as the addon's is. So the row made with it costs what any Node caller
//! pays for a lock that waits off its JS thread (two thread hops, a promise, the JS work of the round) and nothing of
//! sema-native: the gap between it and the addon is the addon's, the gap between it and the Rust floor is Node's.
//!
//! JS: `const m = { exports: {} }; process.dlopen(m, path)`, then `m.exports.open(dir, name, cancellable)` once, and
//! `await m.exports.acquire()` / `m.exports.release(fd)` per round. One contender per process.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::OnceLock;

use crate::contended::Contender;

type Env = *mut c_void;
type Value = *mut c_void;
type Info = *mut c_void;
type Deferred = *mut c_void;
type Work = *mut c_void;
type Status = c_int;
type Callback = unsafe extern "C" fn(Env, Info) -> Value;

extern "C" {
    fn napi_create_function(
        env: Env,
        name: *const c_char,
        len: usize,
        cb: Callback,
        data: *mut c_void,
        result: *mut Value,
    ) -> Status;
    fn napi_set_named_property(
        env: Env,
        object: Value,
        name: *const c_char,
        value: Value,
    ) -> Status;
    fn napi_get_cb_info(
        env: Env,
        info: Info,
        argc: *mut usize,
        argv: *mut Value,
        this: *mut Value,
        data: *mut *mut c_void,
    ) -> Status;
    fn napi_get_value_string_utf8(
        env: Env,
        value: Value,
        buf: *mut c_char,
        size: usize,
        result: *mut usize,
    ) -> Status;
    fn napi_get_value_int32(env: Env, value: Value, result: *mut i32) -> Status;
    fn napi_create_int32(env: Env, value: i32, result: *mut Value) -> Status;
    fn napi_get_undefined(env: Env, result: *mut Value) -> Status;
    fn napi_create_string_utf8(
        env: Env,
        s: *const c_char,
        len: usize,
        result: *mut Value,
    ) -> Status;
    fn napi_create_promise(env: Env, deferred: *mut Deferred, promise: *mut Value) -> Status;
    fn napi_resolve_deferred(env: Env, deferred: Deferred, value: Value) -> Status;
    fn napi_create_async_work(
        env: Env,
        resource: Value,
        name: Value,
        execute: unsafe extern "C" fn(Env, *mut c_void),
        complete: unsafe extern "C" fn(Env, Status, *mut c_void),
        data: *mut c_void,
        result: *mut Work,
    ) -> Status;
    fn napi_queue_async_work(env: Env, work: Work) -> Status;
    fn napi_delete_async_work(env: Env, work: Work) -> Status;
}

static CONTENDER: OnceLock<Contender> = OnceLock::new();

/// One acquisition in flight: made on the pool, answered on the JS thread.
struct Pending {
    deferred: Deferred,
    work: Work,
    fd: c_int,
}

/// The string argument `i` of a call (at most 4 KiB).
unsafe fn string_arg(env: Env, argv: &[Value], i: usize) -> String {
    let mut buf = vec![0u8; 4096];
    let mut len = 0usize;
    napi_get_value_string_utf8(env, argv[i], buf.as_mut_ptr().cast(), buf.len(), &mut len);
    buf.truncate(len);
    String::from_utf8(buf).unwrap_or_default()
}

unsafe fn args<const N: usize>(env: Env, info: Info) -> [Value; N] {
    let mut argv = [null_mut(); N];
    let mut argc = N;
    napi_get_cb_info(
        env,
        info,
        &mut argc,
        argv.as_mut_ptr(),
        null_mut(),
        null_mut(),
    );
    argv
}

unsafe fn undefined(env: Env) -> Value {
    let mut v = null_mut();
    napi_get_undefined(env, &mut v);
    v
}

/// `open(dir, name, cancellable)`: the contender of `dir/name` (its counter `name.counter` and queue `name.queue`
/// beside it); `cancellable` (1) stands in the line through an agent thread, as the addon does (see `Agent`).
unsafe extern "C" fn open(env: Env, info: Info) -> Value {
    let argv = args::<3>(env, info);
    let (dir, name) = (string_arg(env, &argv, 0), string_arg(env, &argv, 1));
    let mut cancellable = 0;
    napi_get_value_int32(env, argv[2], &mut cancellable);
    let _ = CONTENDER.set(Contender::open_with(
        &dir,
        &name,
        false,
        true,
        cancellable == 1,
    ));
    undefined(env)
}

unsafe extern "C" fn execute(_env: Env, data: *mut c_void) {
    // SAFETY: `data` is the `Pending` boxed by `acquire`, read and written only here until `complete` frees it.
    let pending = &mut *data.cast::<Pending>();
    if let Some(c) = CONTENDER.get() {
        pending.fd = c.acquire();
    }
}

unsafe extern "C" fn complete(env: Env, _status: Status, data: *mut c_void) {
    // SAFETY: the box leaked by `acquire`; libuv calls `complete` once, after `execute`.
    let pending = Box::from_raw(data.cast::<Pending>());
    let mut fd = null_mut();
    napi_create_int32(env, pending.fd, &mut fd);
    napi_resolve_deferred(env, pending.deferred, fd);
    napi_delete_async_work(env, pending.work);
}

/// `acquire()`: a promise of the lock's descriptor (-1 before `open`).
unsafe extern "C" fn acquire(env: Env, _info: Info) -> Value {
    let mut promise = null_mut();
    let mut deferred = null_mut();
    napi_create_promise(env, &mut deferred, &mut promise);
    let pending = Box::into_raw(Box::new(Pending {
        deferred,
        work: null_mut(),
        fd: -1,
    }));
    let mut name = null_mut();
    napi_create_string_utf8(env, c"floor-acquire".as_ptr(), usize::MAX, &mut name);
    napi_create_async_work(
        env,
        null_mut(),
        name,
        execute,
        complete,
        pending.cast(),
        &mut (*pending).work,
    );
    napi_queue_async_work(env, (*pending).work);
    promise
}

/// `release(fd)`: the floor's release (our content still there? unlink, close).
unsafe extern "C" fn release(env: Env, info: Info) -> Value {
    let argv = args::<1>(env, info);
    let mut fd = -1;
    napi_get_value_int32(env, argv[0], &mut fd);
    if let Some(c) = CONTENDER.get() {
        c.release(fd);
    }
    undefined(env)
}

/// Node's entry point for a module without a static registration (`NAPI_MODULE_INIT`).
///
/// # Safety
/// Called by Node with a valid environment and exports object.
#[no_mangle]
pub unsafe extern "C" fn napi_register_module_v1(env: Env, exports: Value) -> Value {
    let functions: [(&std::ffi::CStr, Callback); 3] = [
        (c"open", open),
        (c"acquire", acquire),
        (c"release", release),
    ];
    for (name, f) in functions {
        let mut v = null_mut();
        napi_create_function(env, name.as_ptr(), usize::MAX, f, null_mut(), &mut v);
        napi_set_named_property(env, exports, name.as_ptr(), v);
    }
    exports
}
