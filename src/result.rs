//! The one result shape both bindings answer with ([`NativeResult`]) and the error inside it.
//! Expected failures travel as values with a stable `code` (an async napi fn cannot give a
//! rejection a custom `code`, and the JS layer wants semats' `SemaphoreResult` shapes anyway);
//! only programming errors throw.

use std::ffi::CStr;
use std::ptr;

use napi::bindgen_prelude::{create_object_with_properties, sys, ToNapiValue, TypeName, ValueType};
use napi_derive::napi;
use sema_core::dflockd::error::DflockdError;
use sema_core::lockfile::LockError;
use sema_core::ErrorCode;

/// A failure: a stable `code` (a `SemaphoreErrorType` string), a message and, where known, the
/// holder of a busy lock file or the raw server reply that caused it (e.g. `error_max_locks`).
#[napi(object)]
pub struct NativeError {
    pub code: String,
    pub message: String,
    /// dflockd: the raw server reply that caused the error.
    pub reply: Option<String>,
    /// Lock files: the pid recorded in the file that blocked us.
    pub holder_pid: Option<i64>,
    /// Lock files: the `timestamp=` of the file that blocked us.
    pub locked_since: Option<i64>,
    /// Lock files: the `tag=` of the file that blocked us.
    pub holder_tag: Option<String>,
    /// Lock files: the lock that blocked us is this process's own.
    pub is_owned_by_current_process: Option<bool>,
    /// An OS failure: the OS's error number (`errno` on Unix, the system error code on Windows).
    pub errno: Option<i32>,
}

impl NativeError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        NativeError {
            code: code.to_string(),
            message: message.into(),
            reply: None,
            holder_pid: None,
            locked_since: None,
            holder_tag: None,
            is_owned_by_current_process: None,
            errno: None,
        }
    }
}

impl NativeError {
    pub fn of(code: ErrorCode, message: impl Into<String>) -> Self {
        NativeError::new(code.as_str(), message)
    }
}

impl From<&LockError> for NativeError {
    fn from(e: &LockError) -> Self {
        NativeError {
            holder_pid: e.holder_pid(),
            locked_since: e.locked_since(),
            holder_tag: e.holder().and_then(|h| h.tag.clone()),
            is_owned_by_current_process: e.holder().and_then(|h| h.is_current_process),
            errno: e.errno(),
            ..NativeError::of(e.code(), e.to_string())
        }
    }
}

/// Every stable error code, in the order of the TypeScript union `SemaphoreErrorType` (a test
/// checks `index.d.ts` against it).
#[napi]
pub fn error_codes() -> Vec<&'static str> {
    ErrorCode::ALL.iter().map(|c| c.as_str()).collect()
}

impl From<LockError> for NativeError {
    fn from(e: LockError) -> Self {
        NativeError::from(&e)
    }
}

impl From<DflockdError> for NativeError {
    fn from(e: DflockdError) -> Self {
        NativeError {
            reply: e.reply().map(str::to_string),
            ..NativeError::of(e.code(), e.message())
        }
    }
}

/// A synchronous throw: a napi `Error` whose `code` property is the stable code (napi-rs creates it
/// with `napi_create_error(code, message)`), so JavaScript reads `e.code` without parsing `message`.
pub type Thrown = napi::Error<ErrorCode>;

/// The synchronous throw of a dflockd failure (bad options, key or shard count).
pub fn thrown(e: DflockdError) -> Thrown {
    napi::Error::new(e.code(), e.message())
}

/// The one answer of every fallible binding call: `{ ok: true, value: T } | { ok: false, error:
/// NativeError }` (declared once for TypeScript, as `NativeResult<T>`, in src/binding-header.d.ts,
/// the `dtsHeaderFile` of package.json's napi config: napi-rs v3 derives no generic object). A
/// failure is a value, not a rejection or a throw: an async napi fn cannot give its rejection a
/// custom `code`, and the JS layer wants semats' `SemaphoreResult` shapes anyway.
///
/// Its cost, measured (best of 5, tmpfs): an object made through Node-API is ~0.3 µs in a hot
/// loop (its keys internalised, its map transitions walked); semats' synchronous `tryAcquire` +
/// `release()` cycle went from 26.6 to 28.2 µs (+5.7%) with a `NativeResult` each, so those two
/// calls keep their compact answers (a bare timestamp, `null`): the only exceptions, under names
/// of their own (`NativeLockFile::try_acquire_sync`, `release_as_process`). Tried and left out: a
/// JS function making the objects (0.16 against 0.32 µs per object, but only -0.2 µs on that
/// cycle).
pub struct NativeResult<T>(pub Result<T, NativeError>);

impl<T, E: Into<NativeError>> From<Result<T, E>> for NativeResult<T> {
    fn from(r: Result<T, E>) -> Self {
        NativeResult(r.map_err(Into::into))
    }
}

/// [`NativeResult`] from any `Result` whose error maps to a [`NativeError`].
pub fn result<T, E: Into<NativeError>>(r: Result<T, E>) -> NativeResult<T> {
    r.into()
}

impl<T> TypeName for NativeResult<T> {
    fn type_name() -> &'static str {
        "NativeResult"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

/// A property of a fresh plain object, as napi-derive's `#[napi(object)]` defines its fields.
fn property(name: &'static CStr, value: sys::napi_value) -> sys::napi_property_descriptor {
    sys::napi_property_descriptor {
        utf8name: name.as_ptr(),
        name: ptr::null_mut(),
        method: None,
        getter: None,
        setter: None,
        value,
        attributes: sys::PropertyAttributes::writable
            | sys::PropertyAttributes::enumerable
            | sys::PropertyAttributes::configurable,
        data: ptr::null_mut(),
    }
}

impl<T: ToNapiValue> ToNapiValue for NativeResult<T> {
    /// Two properties defined at once on a fresh object, as `#[napi(object)]` builds its own (one
    /// `napi_create_object` and one `napi_define_properties`).
    ///
    /// # Safety
    /// The caller guarantees that `env` is a valid napi env of the current thread (the trait's
    /// contract); everything called here is given only that `env` and values just made in it, and
    /// the property names are `'static` C strings that outlive the call.
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        // SAFETY: see the function's contract above.
        unsafe {
            let (ok, key, value) = match val.0 {
                Ok(v) => (true, c"value", T::to_napi_value(env, v)?),
                Err(e) => (false, c"error", NativeError::to_napi_value(env, e)?),
            };
            let ok = bool::to_napi_value(env, ok)?;
            create_object_with_properties(env, &[property(c"ok", ok), property(key, value)])
        }
    }
}
