//! What a loop call of a `DistributedLock` primitive settles with, given to its JS callback.

use napi::bindgen_prelude::{Either, FnArgs};

use crate::result::NativeError;

use super::*;

/// The settle callback's arguments `(id, ok, valueOrError)`: which primitive's call (`id`) and
/// its result. Acquire's value is `true` (held), `false` (timed out) or `'queued'` (the `e` was
/// answered `queued`: call `continueAcquire()` for the rest); release's is `true`; a failure's
/// is a `NativeError`. Plain arguments, not a `{id, result: {ok, value}}` object: making those
/// two objects through napi (`napi_define_properties`, its keys internalised on every call) was
/// about 6 % of a `DistributedLock` client's CPU at 10 workers, where JS makes the same object
/// for a few nanoseconds (lib/dflockd/common.js `onLoopSettle`).
pub type LoopSettle = FnArgs<(u32, bool, Either<Either<bool, &'static str>, NativeError>)>;

pub(super) fn timeout_error(msg: String) -> DflockdError {
    DflockdError::new(core::ErrorCode::Timeout, msg)
}

pub(super) fn settle_value(id: u32, r: core::Result<bool>) -> LoopSettle {
    match r {
        Ok(v) => (id, true, Either::A(Either::A(v))).into(),
        Err(e) => (id, false, Either::B(e.into())).into(),
    }
}

/// An acquire's `e` was answered `queued`.
pub(super) fn settle_queued(id: u32) -> LoopSettle {
    (id, true, Either::A(Either::B("queued"))).into()
}
