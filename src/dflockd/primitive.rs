//! `NativeDflockdPrimitive`: a lock or semaphore slot (acquire, two-phase enqueue/wait,
//! renewal, release) over `sema_core::dflockd::Primitive`; its losses go to its JS thread's one
//! loss channel under its `lossId` (`crate::losses`).

use napi::bindgen_prelude::Object;

use super::on_loop_lock::{hand_to_tokio_pool, pool_take_stream, LoopLock, NativeLoopSettle};
use super::*;
use crate::js_callback::JsCallback;
use crate::losses::LossRoute;

/// A distributed lock (limit 1) or semaphore slot (limit > 1) on one dflockd server, with
/// automatic renewal. One connection per held lock/slot; after a clean `release()` it goes to
/// the core's idle pool for the next acquisition with the same settings.
#[napi]
pub struct NativeDflockdPrimitive {
    inner: Arc<Primitive>,
    /// Its id on its thread's loss channel, for its whole life (gone with its JS object).
    route: LossRoute,
    /// The event-loop driver of its round trips (`useEventLoop`), when this thread's loop serves.
    looped: std::cell::RefCell<Option<std::rc::Rc<LoopLock>>>,
    /// Counts the acquire/enqueue/wait calls and `close()`s, all made on the JS thread: a result
    /// whose cancel id was cancelled closes the primitive only while its call is the latest
    /// thing asked of it (see [`CancelOnly`]).
    epoch: Arc<std::sync::atomic::AtomicU64>,
}

/// The cancel id of one acquire/enqueue/wait (see `crate::cancel`): its token, and what the
/// call's result must do when the token fired. Cancelled before the result reached the JS
/// thread, the call settles `ABORTED`; a grant (or a queued enqueue) that crossed the cancel
/// is closed first (the server releases it), unless a `close()` or another call came since,
/// which then owns the primitive's state.
struct CancelOnly {
    token: tokio_util::sync::CancellationToken,
    prim: Arc<Primitive>,
    epoch: Arc<std::sync::atomic::AtomicU64>,
    mine: u64,
}

impl CancelOnly {
    /// `r` unless the cancel fired; run on the JS thread, where `cancelWait` runs too.
    fn settle<T>(this: Option<CancelOnly>, r: core::Result<T>) -> core::Result<T> {
        let Some(c) = this else { return r };
        if !c.token.is_cancelled() || r.is_err() {
            return r;
        }
        if c.epoch.load(std::sync::atomic::Ordering::Relaxed) == c.mine {
            c.prim.close();
        }
        Err(DflockdError::aborted())
    }
}

impl Drop for NativeDflockdPrimitive {
    fn drop(&mut self) {
        if let Some(l) = self.looped.get_mut().take() {
            l.collected();
        }
        // A loss reported from now on finds no route ([`LossRoute::callback`]).
        self.inner.set_on_lost(None);
    }
}

impl NativeDflockdPrimitive {
    /// A new call starts (after its ticket was taken): with a cancel id, `cancelWait(id)` now
    /// cancels it as `cancel()` would (at once when the id was cancelled already).
    fn call_cancelled_by(&self, cancel_id: Option<u32>) -> Option<CancelOnly> {
        let mine = self
            .epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let id = cancel_id?;
        let prim = self.inner.clone();
        let looped = self.looped.borrow().as_ref().map(std::rc::Rc::downgrade);
        let p = prim.clone();
        let epoch = self.epoch.clone();
        let token = crate::cancel::on_cancel(id, move || {
            // A close() or another call since owns the primitive now: not this id's to cancel.
            if epoch.load(std::sync::atomic::Ordering::Relaxed) != mine {
                return;
            }
            p.cancel();
            if let Some(l) = looped.and_then(|w| w.upgrade()) {
                l.cancel();
            }
        });
        Some(CancelOnly {
            token,
            prim,
            epoch: self.epoch.clone(),
            mine,
        })
    }
}

#[napi]
impl NativeDflockdPrimitive {
    /// Validate the options (throws synchronously, `code` `INVALID_ARGUMENT`, on bad options).
    /// No I/O happens here. Its losses (renewal failed, the server dropped the idle held
    /// connection; never `release()`/`close()`) are named by `lossId` on this thread's loss
    /// channel (`setLockLostHandler`), at most once per held lock; `takeHeldEnd(lossId)` gives
    /// the lost hold's token and the reason.
    #[napi(constructor)]
    pub fn new(env: Env, options: NativePrimitiveOptions) -> Result<Self, Thrown> {
        let opts = primitive_options(&options).map_err(thrown)?;
        let inner = Primitive::new(opts).map_err(thrown)?;
        let route = LossRoute::new(&env).map_err(|e| {
            thrown(DflockdError::new(
                core::ErrorCode::InvalidArgument,
                e.reason,
            ))
        })?;
        inner.set_on_lost(Some(route.callback()));
        Ok(NativeDflockdPrimitive {
            inner: Arc::new(inner),
            route,
            looped: Default::default(),
            epoch: Default::default(),
        })
    }

    /// Make `acquireOnLoop`/`releaseOnLoop` run on this thread's event loop, settling through
    /// `onSettle({id, ok, value?, queued?, error?})` with this `id`.
    /// `false` (and nothing changes) when the loop cannot serve here or the options need tokio
    /// (TLS, a shared mode).
    #[napi(ts_args_type = "id: number, onSettle: (result: NativeLoopSettle) => void")]
    pub fn use_event_loop(
        &self,
        env: &Env,
        id: u32,
        on_settle: Function<NativeLoopSettle, ()>,
    ) -> napi::Result<bool> {
        use napi::JsValue as _;
        let settle = JsCallback::new(env, on_settle.raw(), "sema-native:dflockd-lock")?;
        let l = LoopLock::new(env, self.inner.clone(), id, settle);
        let ok = l.is_some();
        *self.looped.borrow_mut() = l;
        Ok(ok)
    }

    /// Start `acquire()` on the event loop: `true` = started (the result goes to `onSettle`;
    /// `queued: true` means call `continueAcquire()`), `false` = use `acquire()`.
    /// `cancelId` (from `newCancelId`): `cancelWait(cancelId)` aborts it, as `cancel()`.
    #[napi]
    pub fn acquire_on_loop(&self, cancel_id: Option<u32>) -> bool {
        let Some(l) = self.looped.borrow().clone() else {
            return false;
        };
        if !l.acquire(self.inner.ticket()) {
            return false;
        }
        // The result settles on this thread, synchronously with the reply: no grant can cross
        // a cancel here before JS has it.
        self.call_cancelled_by(cancel_id);
        true
    }

    /// The rest of an `acquireOnLoop` answered `queued`, on tokio: resolves like `acquire()`.
    #[napi(ts_return_type = "Promise<BoolResult>")]
    pub fn continue_acquire<'env>(
        &self,
        env: &'env Env,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        let (deferred, promise) = env.create_deferred::<BoolResult, _>()?;
        let cancel = self.call_cancelled_by(cancel_id);
        let done =
            move |r| deferred.resolve(move |_| Ok(bool_result(CancelOnly::settle(cancel, r))));
        match self.looped.borrow().clone() {
            Some(l) => l.continue_queued(done)?,
            None => done(Err(DflockdError::new(
                core::ErrorCode::Aborted,
                "operation aborted",
            ))),
        }
        Ok(promise)
    }

    /// Start `release()` on the event loop: `true` = started (the result goes to `onSettle`),
    /// `false` = use `release()`.
    #[napi]
    pub fn release_on_loop(&self) -> bool {
        let Some(l) = self.looped.borrow().clone() else {
            return false;
        };
        l.release()
    }

    /// Connect and acquire within `acquireTimeoutS`. Resolves `{ok: true, value: true}` when
    /// held (renewal started), `{ok: true, value: false}` on timeout.
    ///
    /// One task serves the whole acquisition: it settles the promise and goes on as the
    /// renewal task while the lock is held (see `Primitive::acquire_then`).
    /// `cancelId` (from `newCancelId`): `cancelWait(cancelId)` aborts it, as `cancel()`.
    #[napi(ts_return_type = "Promise<BoolResult>")]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        // The ticket is taken now, on the JS thread, so a cancel() right after this call
        // aborts it even before the future first runs.
        let p = self.inner.clone();
        let ticket = p.ticket();
        let cancel = self.call_cancelled_by(cancel_id);
        let (deferred, promise) = env.create_deferred::<BoolResult, _>()?;
        let opts = p.options().connect.clone();
        let pooled = pool_take_stream(&opts);
        let acquire = p.acquire_then(ticket, move |r| {
            deferred.resolve(move |_| Ok(bool_result(CancelOnly::settle(cancel, r))));
        });
        napi::bindgen_prelude::spawn(async move {
            hand_to_tokio_pool(&opts, pooled);
            acquire.await
        });
        Ok(promise)
    }

    /// Phase one of a two-phase acquire: resolves `'acquired'` (held, renewal started) or
    /// `'queued'` (call `wait()` promptly). `cancelId`: as `acquire()`'s.
    #[napi(ts_return_type = "Promise<NativeEnqueueResult>")]
    pub fn enqueue<'env>(
        &self,
        env: &'env Env,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        let p = self.inner.clone();
        let ticket = p.ticket();
        let cancel = self.call_cancelled_by(cancel_id);
        let (deferred, promise) = env.create_deferred::<NativeEnqueueResult, _>()?;
        let opts = p.options().connect.clone();
        let pooled = pool_take_stream(&opts);
        napi::bindgen_prelude::spawn(async move {
            hand_to_tokio_pool(&opts, pooled);
            let r = p.enqueue_with(ticket).await;
            deferred.resolve(move |_| Ok(enqueue_result(CancelOnly::settle(cancel, r))));
        });
        Ok(promise)
    }

    /// Phase two: wait up to `timeoutS` seconds (fractions allowed) for the grant: the server
    /// gets the ceiling in whole seconds and the client stops waiting at the exact deadline,
    /// dropping the connection (the server then withdraws the wait, or releases a grant that
    /// crossed the cut). `true` = held (verified by an immediate renew; a stale grant gives
    /// `LOCK_LOST`), `false` = timed out (connection closed; enqueue again). After an
    /// `'acquired'` enqueue it resolves `true` at once. `cancelId`: as `acquire()`'s.
    #[napi(ts_return_type = "Promise<BoolResult>")]
    pub fn wait<'env>(
        &self,
        env: &'env Env,
        timeout_s: f64,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        let p = self.inner.clone();
        let ticket = p.ticket();
        let cancel = self.call_cancelled_by(cancel_id);
        let max = core::protocol::MAX_SECONDS;
        let t = if timeout_s.is_finite() && timeout_s >= 0.0 && timeout_s <= max as f64 {
            Ok(Duration::from_secs_f64(timeout_s))
        } else {
            Err(DflockdError::new(
                core::ErrorCode::InvalidArgument,
                format!(
                    "timeoutS must be a number of seconds between 0 and {max}, got {timeout_s}"
                ),
            ))
        };
        let (deferred, promise) = env.create_deferred::<BoolResult, _>()?;
        napi::bindgen_prelude::spawn(async move {
            let r = match t {
                Ok(t) => p.wait_for(ticket, t).await,
                Err(e) => Err(e),
            };
            deferred.resolve(move |_| Ok(bool_result(CancelOnly::settle(cancel, r))));
        });
        Ok(promise)
    }
    /// Release the held lock/slot; after a clean `ok` the connection is kept (idle, unwatched)
    /// for the next `acquire()`/`enqueue()`, else closed. `NOT_LOCKED` when nothing is
    /// held, `LOCK_LOST` when it was lost before.
    ///
    /// The renewal task sends the release and settles the promise itself: one hop from the
    /// JS thread to it and one back, no task of the binding's between.
    #[napi(ts_return_type = "Promise<VoidResult>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let (deferred, promise) = env.create_deferred::<VoidResult, _>()?;
        self.inner.release_then(move |r| {
            deferred.resolve(move |_| Ok(void_result(r)));
        });
        Ok(promise)
    }

    /// Synchronous and idempotent: abort any in-flight operation, stop renewal and drop the
    /// connection without sending a release (the server auto-releases on disconnect). The
    /// primitive may acquire again.
    #[napi]
    pub fn close(&self) {
        self.epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.close();
        let looped = self.looped.borrow().clone();
        if let Some(l) = looped {
            l.close();
        }
    }

    /// Its id on this thread's loss channel (`setLockLostHandler`, `takeHeldEnd`).
    #[napi(getter)]
    pub fn loss_id(&self) -> f64 {
        self.route.id() as f64
    }

    /// Abort an in-flight acquire/enqueue/wait: it resolves `{ok: false, error: {code: 'ABORTED'}}`.
    #[napi]
    pub fn cancel(&self) {
        self.inner.cancel();
        let looped = self.looped.borrow().clone();
        if let Some(l) = looped {
            l.cancel();
        }
    }

    /// Token of the held lock/slot, or `null`.
    #[napi(getter)]
    pub fn token(&self) -> Option<String> {
        self.inner.token()
    }

    /// Lease in seconds from the last grant/renew; 0 when not held.
    #[napi(getter)]
    pub fn lease(&self) -> f64 {
        self.inner.lease_s() as f64
    }

    /// End of the held lease's proven validity (see `remainingMs`) as wall-clock ms since the
    /// epoch; 0 when nothing is held or it was lost.
    #[napi(getter)]
    pub fn valid_until(&self) -> f64 {
        self.inner.valid_until_unix_ms().unwrap_or(0) as f64
    }

    /// Milliseconds the held lease is still proven by the client's own lease clock (counted
    /// from when the last acquire/renew was sent, minus a guard); 0 when not held or lost.
    #[napi(getter)]
    pub fn remaining_ms(&self) -> f64 {
        self.inner.valid_for().as_secs_f64() * 1000.0
    }
}
