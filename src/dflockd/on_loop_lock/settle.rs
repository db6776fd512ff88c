//! What a loop call of a `DistributedLock` primitive settles with, given to its JS callback.

use super::*;

/// What the settle callback gets: `{id, ok, value?, queued?, error?}`.
#[napi(object)]
pub struct NativeLoopSettle {
    /// The primitive's id on its loss channel.
    pub id: u32,
    /// Whether the call succeeded.
    pub ok: bool,
    /// acquire: held (`true`) or timed out (`false`).
    pub value: Option<bool>,
    /// acquire: the `e` was answered `queued`; call `continueAcquire()` for the rest.
    pub queued: Option<bool>,
    /// The failure when not `ok`.
    pub error: Option<NativeError>,
}

pub(super) fn timeout_error(msg: String) -> DflockdError {
    DflockdError::new(core::ErrorCode::Timeout, msg)
}

pub(super) fn settle_value(id: u32, r: core::Result<bool>) -> NativeLoopSettle {
    match r {
        Ok(v) => NativeLoopSettle {
            id,
            ok: true,
            value: Some(v),
            queued: None,
            error: None,
        },
        Err(e) => NativeLoopSettle {
            id,
            ok: false,
            value: None,
            queued: None,
            error: Some(e.into()),
        },
    }
}
