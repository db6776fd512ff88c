//! Cancellation of waits by id: JS owns the `AbortSignal` and cancels a wait through its id (a
//! `CancellationToken` here); the one scheme for every file-lock wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use napi_derive::napi;
use tokio_util::sync::CancellationToken;

fn cancels() -> &'static Mutex<HashMap<u32, CancellationToken>> {
    static CANCELS: OnceLock<Mutex<HashMap<u32, CancellationToken>>> = OnceLock::new();
    CANCELS.get_or_init(|| Mutex::new(HashMap::new()))
}

pub fn cancel_token(id: u32) -> CancellationToken {
    match cancels().lock() {
        Ok(mut map) => map.entry(id).or_default().clone(),
        Err(_) => CancellationToken::new(),
    }
}

#[napi]
pub fn new_cancel_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut map) = cancels().lock() {
        map.insert(id, CancellationToken::new());
    }
    id
}

#[napi]
pub fn cancel_wait(id: u32) {
    if let Ok(map) = cancels().lock() {
        if let Some(t) = map.get(&id) {
            t.cancel();
        }
    }
}

#[napi]
pub fn forget_cancel(id: u32) {
    if let Ok(mut map) = cancels().lock() {
        map.remove(&id);
    }
}
