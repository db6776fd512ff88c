//! What a loop call of a `DistributedLock` primitive settles with, given to its JS callback.

use napi::bindgen_prelude::Either;

use super::*;

/// The settle callback's message: which primitive's call (`id`) and its result, in the one
/// result shape: acquire's value is `true` (held), `false` (timed out) or `'queued'` (the `e`
/// was answered `queued`: call `continueAcquire()` for the rest); release's is `true`.
#[napi(object, object_from_js = false)]
pub struct NativeLoopSettle {
    /// The primitive's loop id (`useEventLoop`).
    pub id: u32,
    /// The call's result.
    #[napi(ts_type = "NativeResult<boolean | 'queued'>")]
    pub result: NativeResult<Either<bool, &'static str>>,
}

pub(super) fn timeout_error(msg: String) -> DflockdError {
    DflockdError::new(core::ErrorCode::Timeout, msg)
}

pub(super) fn settle_value(id: u32, r: core::Result<bool>) -> NativeLoopSettle {
    NativeLoopSettle {
        id,
        result: result(r.map(Either::A)),
    }
}

/// An acquire's `e` was answered `queued`.
pub(super) fn settle_queued(id: u32) -> NativeLoopSettle {
    NativeLoopSettle {
        id,
        result: NativeResult(Ok(Either::B("queued"))),
    }
}
