//! Cancellation of waits by id, the one scheme for both backends: JS owns the `AbortSignal`
//! (lib/abort.js `withAbort`) and cancels a wait through its id. A file-lock wait watches the
//! id's `CancellationToken`; a dflockd acquire/enqueue/wait registers what cancels it on this
//! JS thread ([`on_cancel`]: its primitive's `cancel()`, and its event-loop driver's), and
//! checks the token when its result reaches the JS thread, so a grant that crossed the cancel
//! is closed (the server releases it), never handed out.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use napi_derive::napi;
use tokio_util::sync::CancellationToken;

fn cancels() -> &'static Mutex<HashMap<u32, CancellationToken>> {
    static CANCELS: OnceLock<Mutex<HashMap<u32, CancellationToken>>> = OnceLock::new();
    CANCELS.get_or_init(|| Mutex::new(HashMap::new()))
}

thread_local! {
    /// What cancelling an id does on this JS thread besides firing its token (set by
    /// [`on_cancel`]; run once by `cancelWait`, dropped by `forgetCancel`). Per thread: a
    /// signal's listener runs on the thread of the wait it cancels, and a dflockd event-loop
    /// driver may only be touched there.
    static ON_CANCEL: RefCell<HashMap<u32, Box<dyn FnOnce()>>> = RefCell::new(HashMap::new());
}

pub fn cancel_token(id: u32) -> CancellationToken {
    match cancels().lock() {
        Ok(mut map) => map.entry(id).or_default().clone(),
        Err(_) => CancellationToken::new(),
    }
}

/// The token of `id`, and `f` to run on this thread when `id` is cancelled: at once when it
/// already was, else from `cancelWait(id)` (unless `forgetCancel(id)` comes first). One `f`
/// per id: a later one replaces it.
pub fn on_cancel(id: u32, f: impl FnOnce() + 'static) -> CancellationToken {
    let token = cancel_token(id);
    if token.is_cancelled() {
        f();
    } else {
        ON_CANCEL.with(|m| m.borrow_mut().insert(id, Box::new(f)));
    }
    token
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
    // Taken out before it runs: it may call JS (an event-loop driver settles its promise),
    // which may cancel or forget ids again.
    if let Some(f) = ON_CANCEL.with(|m| m.borrow_mut().remove(&id)) {
        f();
    }
}

#[napi]
pub fn forget_cancel(id: u32) {
    if let Ok(mut map) = cancels().lock() {
        map.remove(&id);
    }
    ON_CANCEL.with(|m| m.borrow_mut().remove(&id));
}
