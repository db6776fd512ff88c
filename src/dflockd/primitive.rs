//! `NativeDflockdPrimitive`: a lock or semaphore slot (acquire, two-phase enqueue/wait,
//! renewal, release) over `sema_core::dflockd::Primitive`; its losses go to its JS thread's one
//! loss channel under its `lossId` (`crate::losses`).

use napi::bindgen_prelude::Object;

use super::on_loop_lock::{hand_to_tokio_pool, pool_take_stream, LoopLock, LoopSettle};
use super::*;
use crate::js_callback::JsCallback;
use crate::losses::{LossRoute, RouteSettle};

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
    /// Counts the acquire/enqueue/wait calls, `close()`s and `release()`s, all made on the JS
    /// thread: a call's cancel id cancels the primitive only while its call is the latest thing
    /// asked, and a call's loss reports are held back under this number (see [`Call`]).
    epoch: Arc<std::sync::atomic::AtomicU64>,
    /// Counts the `close()`s and `release()`s only: they, not a later call, end a call's claim.
    /// A later call the core refused (busy, already held) must not turn the earlier call's
    /// grant into `ABORTED`: nothing would close it, and the key would stay held for nobody.
    closes: Arc<std::sync::atomic::AtomicU64>,
}

/// One acquire/enqueue/wait, from its start to its result on the JS thread, where it is judged:
/// a result of a call that a `close()`/`release()` replaced meanwhile is `ABORTED` (whatever it
/// held, the close dropped); one whose cancel id (see `crate::cancel`)
/// was cancelled settles `ABORTED`, a grant (or a queued enqueue) that crossed the cancel closed
/// first (the server releases it). A loss read off the JS thread meanwhile is reported after the
/// result ([`RouteSettle`]).
struct Call {
    mine: u64,
    closed_at: u64,
    closes: Arc<std::sync::atomic::AtomicU64>,
    prim: Arc<Primitive>,
    cancel: Option<tokio_util::sync::CancellationToken>,
    losses: Option<RouteSettle>,
}

impl Call {
    /// `r` as the JS side must see it; run on the JS thread, where `cancelWait`, `close()` and
    /// `release()` run too.
    fn settle<T>(self, r: core::Result<T>) -> core::Result<T> {
        let current = self.closes.load(std::sync::atomic::Ordering::Relaxed) == self.closed_at;
        let cancelled = self.cancel.as_ref().is_some_and(|c| c.is_cancelled());
        let r = if !current {
            Err(DflockdError::new(
                core::ErrorCode::Aborted,
                "interrupted: the lock was closed or released meanwhile",
            ))
        } else if cancelled && r.is_ok() {
            self.prim.close();
            Err(DflockdError::aborted())
        } else {
            r
        };
        if let Some(l) = &self.losses {
            l.settled(self.mine);
        }
        r
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
    /// A new call starts (after its ticket was taken): an earlier call's cancel id no longer
    /// cancels the primitive, but its result stands (only `close()`/`release()` end a call:
    /// the core refuses this one while the earlier one runs or holds). With a cancel id, `cancelWait(id)` now cancels it as `cancel()` would (at
    /// once when the id was cancelled already). `on_tokio`: its result reaches JS through a
    /// deferred, so loss reports wait for it.
    fn start_call(&self, cancel_id: Option<u32>, on_tokio: bool) -> Call {
        let mine = self
            .epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.route.forget_ends();
        let prim = self.inner.clone();
        let cancel = cancel_id.map(|id| {
            let looped = self.looped.borrow().as_ref().map(std::rc::Rc::downgrade);
            let p = prim.clone();
            let epoch = self.epoch.clone();
            crate::cancel::on_cancel(id, move || {
                // A close() or another call since owns the primitive now: not this id's to cancel.
                if epoch.load(std::sync::atomic::Ordering::Relaxed) != mine {
                    return;
                }
                p.cancel();
                if let Some(l) = looped.and_then(|w| w.upgrade()) {
                    l.cancel();
                }
            })
        });
        Call {
            mine,
            closed_at: self.closes.load(std::sync::atomic::Ordering::Relaxed),
            closes: self.closes.clone(),
            prim,
            cancel,
            losses: on_tokio.then(|| self.route.hold_back_for(mine)),
        }
    }

    /// `close()`/`release()`: any call in flight is no longer the primitive's.
    fn replace_calls(&self) {
        self.epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.closes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[napi]
impl NativeDflockdPrimitive {
    /// Validate the options (throws synchronously, `code` `INVALID_ARGUMENT`, on bad options).
    /// No I/O happens here. Its losses (renewal failed, the server dropped the idle held
    /// connection; never `release()`/`close()`) are named by `lossId` on this thread's loss
    /// channel (`addLockLostHandler`), at most once per held lock; `takeHeldEnd(lossId)` gives
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
            closes: Default::default(),
        })
    }

    /// Make `acquireOnLoop`/`releaseOnLoop` run on this thread's event loop, settling through
    /// `onSettle(id, ok, valueOrError)` with this `id` (see `LoopSettle`).
    /// `false` (and nothing changes) when the loop cannot serve here or the options need tokio
    /// (TLS, a shared mode).
    #[napi(
        ts_args_type = "id: number, onSettle: (id: number, ok: boolean, valueOrError: boolean | 'queued' | NativeError) => void"
    )]
    pub fn use_event_loop(
        &self,
        env: &Env,
        id: u32,
        on_settle: Function<LoopSettle, ()>,
    ) -> napi::Result<bool> {
        use napi::JsValue as _;
        let settle = JsCallback::new(env, on_settle.raw(), "sema-native:dflockd-lock")?;
        let l = LoopLock::new(env, self.inner.clone(), id, settle);
        let ok = l.is_some();
        *self.looped.borrow_mut() = l;
        Ok(ok)
    }

    /// Start `acquire()` on the event loop: `true` = started (the result goes to `onSettle`;
    /// a `'queued'` value means call `continueAcquire()`), `false` = use `acquire()`.
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
        // a cancel, and no loss can come first, before JS has it.
        self.start_call(cancel_id, false);
        true
    }

    /// The rest of an `acquireOnLoop` answered `queued`, on tokio: resolves like `acquire()`.
    #[napi(ts_return_type = "Promise<NativeResult<boolean>>")]
    pub fn continue_acquire<'env>(
        &self,
        env: &'env Env,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        let (deferred, promise) = env.create_deferred::<NativeResult<bool>, _>()?;
        let call = self.start_call(cancel_id, true);
        let done = move |r| deferred.resolve(move |_| Ok(result(call.settle(r))));
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
        self.replace_calls();
        l.release()
    }

    /// Connect and acquire within `acquireTimeoutS`. Resolves `{ok: true, value: true}` when
    /// held (renewal started), `{ok: true, value: false}` on timeout.
    ///
    /// One task serves the whole acquisition: it settles the promise and goes on as the
    /// renewal task while the lock is held (see `Primitive::acquire_then`).
    /// `cancelId` (from `newCancelId`): `cancelWait(cancelId)` aborts it, as `cancel()`.
    #[napi(ts_return_type = "Promise<NativeResult<boolean>>")]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        // The ticket is taken now, on the JS thread, so a cancel() right after this call
        // aborts it even before the future first runs.
        let p = self.inner.clone();
        let ticket = p.ticket();
        let call = self.start_call(cancel_id, true);
        let (deferred, promise) = env.create_deferred::<NativeResult<bool>, _>()?;
        let opts = p.options().connect.clone();
        let pooled = pool_take_stream(&opts);
        let acquire = p.acquire_then(ticket, move |r| {
            deferred.resolve(move |_| Ok(result(call.settle(r))));
        });
        napi::bindgen_prelude::spawn(async move {
            hand_to_tokio_pool(&opts, pooled);
            acquire.await
        });
        Ok(promise)
    }

    /// Phase one of a two-phase acquire: resolves `'acquired'` (held, renewal started) or
    /// `'queued'` (call `wait()` promptly). `cancelId`: as `acquire()`'s.
    #[napi(ts_return_type = "Promise<NativeResult<'acquired' | 'queued'>>")]
    pub fn enqueue<'env>(
        &self,
        env: &'env Env,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        let p = self.inner.clone();
        let ticket = p.ticket();
        let call = self.start_call(cancel_id, true);
        let (deferred, promise) = env.create_deferred::<NativeResult<&'static str>, _>()?;
        let opts = p.options().connect.clone();
        let pooled = pool_take_stream(&opts);
        napi::bindgen_prelude::spawn(async move {
            hand_to_tokio_pool(&opts, pooled);
            let r = p.enqueue_with(ticket).await;
            deferred.resolve(move |_| Ok(enqueue_result(call.settle(r))));
        });
        Ok(promise)
    }

    /// Phase two: wait up to `timeoutS` seconds (fractions allowed) for the grant: the server
    /// gets the ceiling in whole seconds and the client stops waiting at the exact deadline,
    /// dropping the connection (the server then withdraws the wait, or releases a grant that
    /// crossed the cut). `true` = held (verified by an immediate renew; a stale grant gives
    /// `LOCK_LOST`), `false` = timed out (connection closed; enqueue again). After an
    /// `'acquired'` enqueue it resolves `true` at once. `cancelId`: as `acquire()`'s.
    #[napi(ts_return_type = "Promise<NativeResult<boolean>>")]
    pub fn wait<'env>(
        &self,
        env: &'env Env,
        timeout_s: f64,
        cancel_id: Option<u32>,
    ) -> napi::Result<Object<'env>> {
        let p = self.inner.clone();
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
        // A refused timeout takes no ticket: no call is on its way (see `Primitive::stage`).
        let ticket = t.is_ok().then(|| p.ticket());
        let call = self.start_call(cancel_id, true);
        let (deferred, promise) = env.create_deferred::<NativeResult<bool>, _>()?;
        napi::bindgen_prelude::spawn(async move {
            let r = match (t, ticket) {
                (Ok(t), Some(ticket)) => p.wait_for(ticket, t).await,
                (Err(e), _) => Err(e),
                (Ok(_), None) => Err(DflockdError::aborted()),
            };
            deferred.resolve(move |_| Ok(result(call.settle(r))));
        });
        Ok(promise)
    }
    /// Release the held lock/slot; after a clean `ok` the connection is kept (idle, unwatched)
    /// for the next `acquire()`/`enqueue()`, else closed. `NOT_LOCKED` when nothing is
    /// held, `LOCK_LOST` when it was lost before.
    ///
    /// The renewal task sends the release and settles the promise itself: one hop from the
    /// JS thread to it and one back, no task of the binding's between.
    #[napi(ts_return_type = "Promise<NativeResult<undefined>>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let (deferred, promise) = env.create_deferred::<NativeResult<()>, _>()?;
        self.replace_calls();
        self.inner.release_then(move |r| {
            deferred.resolve(move |_| Ok(result(r)));
        });
        Ok(promise)
    }

    /// Synchronous and idempotent: abort any in-flight operation, stop renewal and drop the
    /// connection without sending a release (the server auto-releases on disconnect). The
    /// primitive may acquire again.
    #[napi]
    pub fn close(&self) {
        self.replace_calls();
        self.inner.close();
        let looped = self.looped.borrow().clone();
        if let Some(l) = looped {
            l.close();
        }
    }

    /// Its id on this thread's loss channel (`addLockLostHandler`, `takeHeldEnd`).
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

    /// Where the acquisition stands: `idle` (nothing started, or it ended: released, closed,
    /// timed out, failed), `acquiring` (an acquire/enqueue/wait runs), `queued` (an enqueue
    /// answered `queued`: `wait()` next), `held`, or `lost` (held, then lost; a new acquisition
    /// may start).
    #[napi(
        getter,
        ts_return_type = "'idle' | 'acquiring' | 'queued' | 'held' | 'lost'"
    )]
    pub fn stage(&self) -> &'static str {
        self.inner.stage().as_str()
    }

    /// Token of the current hold, lost or not (`null` when nothing was granted since the last
    /// acquisition ended): a loss report names it when it is this hold's.
    #[napi(getter)]
    pub fn hold_token(&self) -> Option<String> {
        self.inner.hold_token()
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
