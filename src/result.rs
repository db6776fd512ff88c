//! The result objects both bindings resolve with. Expected failures travel as values with a stable
//! `code` (an async napi fn cannot give a rejection a custom `code`, and the JS layer wants semats'
//! `SemaphoreResult` shapes anyway); only programming errors throw.

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

/// `{ ok: true } | { ok: false, error }`.
#[napi(object)]
pub struct VoidResult {
    pub ok: bool,
    pub error: Option<NativeError>,
}

/// `{ ok: true, value: boolean } | { ok: false, error }`.
#[napi(object)]
pub struct BoolResult {
    pub ok: bool,
    pub value: Option<bool>,
    pub error: Option<NativeError>,
}

/// `{ ok: true, value: string } | { ok: false, error }`.
#[napi(object)]
pub struct StringResult {
    pub ok: bool,
    pub value: Option<String>,
    pub error: Option<NativeError>,
}

pub fn void_result<E: Into<NativeError>>(r: Result<(), E>) -> VoidResult {
    match r {
        Ok(()) => VoidResult {
            ok: true,
            error: None,
        },
        Err(e) => VoidResult {
            ok: false,
            error: Some(e.into()),
        },
    }
}

pub fn bool_result<E: Into<NativeError>>(r: Result<bool, E>) -> BoolResult {
    match r {
        Ok(v) => BoolResult {
            ok: true,
            value: Some(v),
            error: None,
        },
        Err(e) => BoolResult {
            ok: false,
            value: None,
            error: Some(e.into()),
        },
    }
}

pub fn string_result<E: Into<NativeError>>(r: Result<String, E>) -> StringResult {
    match r {
        Ok(v) => StringResult {
            ok: true,
            value: Some(v),
            error: None,
        },
        Err(e) => StringResult {
            ok: false,
            value: None,
            error: Some(e.into()),
        },
    }
}
