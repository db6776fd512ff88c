//! `DistributedLock`'s round trips on the JS thread's own event loop (the driver the fast
//! `Connection` uses, `crate::event_loop`): the acquisition's `e`/`se` (or a try's `l`/`sl`),
//! the renewals on the lease clock, the loss watch of the idle held connection and the
//! release, each a write from the JS thread and a reply read in the poll callback, settled
//! through one `JsCallback` (no tokio thread, no threadsafe function per round trip).
//!
//! The state stays in the core (`Primitive::begin_external`; `ExternalHold`, the held-lock
//! machine the tokio renewal task runs too: the phase, the lease clock, the loss reported
//! once, the release): this file only sends, reads and arms timers. An
//! acquisition whose `e` is answered `queued` goes on on tokio (`external_queued_then`: a
//! waiter gains nothing from the loop, and that path rides out a server restart), and so does
//! one with another waiter of this process before it on its key (the order chain), TLS, or a
//! shared mode: the JS layer then calls the primitive's promise methods.
//!
//! A held lock is renewed on the loop's timer while JavaScript runs on time; when it is late
//! (blocked in an `execSync`, a long synchronous loop), the process-wide renew watchdog
//! (`sema_core::dflockd::watchdog`) writes the renew on the same socket, and the reply, read
//! here once JavaScript runs again, goes through the same lease clock (with the watchdog's send
//! instant) or the same loss path. Each connection has a watchdog slot; every write goes
//! through it so the two writers never interleave, and each reply line is matched to its
//! sender in wire order.
//!
//! Idle connections after a clean release stay in a per-thread pool (at most 64 per
//! server, closed after 2 s unused or when the server closes them), unref'd: neither an idle
//! held lock nor an idle pooled connection keeps the process alive.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use sema_core::dflockd::connection::NonBlockingStream;
use sema_core::dflockd::order::Place;
use sema_core::dflockd::watchdog::{self, Sender, Slot};
use sema_core::dflockd::{
    ExternalHold, ExternalIo, ExternalOp, FirstAnswer, FirstFailed, Grant, Request,
};
use tokio::time::Instant;

use super::on_loop::SPIN;
use super::*;

mod answered;
mod held;
mod pool;
mod queued;
mod settle;

use crate::event_loop::{SocketWatch, WatchHandler};
use crate::js_callback::JsCallback;
pub(super) use pool::{hand_to_tokio_pool, pool_take_stream};
use pool::{pool_put, pool_take, watch_env_teardown, LoopConn, Route, LIVE, NEXT_ROUTE};
pub use settle::LoopSettle;
use settle::{settle_queued, settle_value, timeout_error};

enum Stage {
    Idle,
    /// Connecting on tokio; `gen` tells a late connect of an abandoned attempt.
    Connecting {
        op: ExternalOp,
        place: Option<Place>,
        started: Instant,
        gen: u64,
    },
    /// The `e`/`se` (or a try's `l`/`sl`) in flight since `sent`; `confirm`: a renew of that
    /// grant instead, its reply read too late to report the grant unconfirmed (see `granted`).
    Asking {
        op: ExternalOp,
        place: Option<Place>,
        started: Instant,
        sent: Instant,
        reused: bool,
        confirm: Option<Grant>,
    },
    /// Answered `queued`: waiting for `continueAcquire()` to hand it to tokio.
    Queued {
        op: ExternalOp,
        stream: NonBlockingStream,
        started: Instant,
        sent: Instant,
    },
    /// Held: the core's machine decides what happens (see `held`); `renew_sent`: when the
    /// loop's last renew was written (its reply proves the lease from then).
    Held {
        hold: ExternalHold,
        renew_sent: Instant,
    },
}

pub(super) struct LoopLock {
    prim: Arc<Primitive>,
    id: u32,
    env: Env,
    settle: JsCallback,
    stage: RefCell<Stage>,
    conn: RefCell<Option<LoopConn>>,
    gen: std::cell::Cell<u64>,
    me: Weak<LoopLock>,
    wbuf: RefCell<Vec<u8>>,
}

/// Runs `f` (which makes JS values: `spawn_future_with_callback` creates a promise) inside a
/// handle scope of its own: it may run from a libuv callback, where no JS call opened one.
fn in_handle_scope<R>(env: &Env, f: impl FnOnce() -> R) -> R {
    let raw = env.raw();
    let mut scope = std::ptr::null_mut();
    // SAFETY: we are on the JS thread of `env` (libuv callbacks and JS calls of this driver
    // run there) and the env is alive (the owner stops this driver at the env's teardown);
    // the scope opened here is closed below, after `f`, in LIFO order with any other.
    let opened =
        unsafe { napi::sys::napi_open_handle_scope(raw, &mut scope) } == napi::sys::Status::napi_ok;
    let r = f();
    if opened {
        // SAFETY: `scope` was opened above on this thread and is closed once.
        unsafe { napi::sys::napi_close_handle_scope(raw, scope) };
    }
    r
}

impl LoopLock {
    /// A loop driver for `prim` on this thread, or `None` when its loop cannot serve, the
    /// options need tokio (TLS, a shared mode) or the renew watchdog could not start.
    pub(super) fn new(
        env: &Env,
        prim: Arc<Primitive>,
        id: u32,
        settle: JsCallback,
    ) -> Option<Rc<LoopLock>> {
        let o = prim.options();
        if o.connect.tls.is_some()
            || o.mode.is_some()
            || crate::event_loop::loop_unusable(env).is_some()
            || watchdog::ensure_running().is_err()
        {
            settle.release();
            return None;
        }
        if watch_env_teardown(env).is_err() {
            settle.release();
            return None;
        }
        let l = Rc::new_cyclic(|me| LoopLock {
            prim,
            id,
            env: *env,
            settle,
            stage: RefCell::new(Stage::Idle),
            conn: RefCell::new(None),
            gen: std::cell::Cell::new(0),
            me: me.clone(),
            wbuf: RefCell::new(Vec::with_capacity(128)),
        });
        LIVE.with(|v| {
            let mut v = v.borrow_mut();
            v.retain(|w| w.strong_count() > 0);
            v.push(Rc::downgrade(&l));
        });
        Some(l)
    }

    fn call(&self, r: LoopSettle) {
        self.settle.call(r);
    }

    /// Start an acquisition on the loop: `false` when it must run on tokio instead (another
    /// waiter of this process is before it on its key, or the primitive is not idle: the
    /// promise path then reports the refusal).
    pub(super) fn acquire(&self, ticket: core::Ticket) -> bool {
        if !matches!(*self.stage.borrow(), Stage::Idle) {
            return false;
        }
        let o = self.prim.options();
        let place = if o.acquire_timeout_s > 0 {
            match Place::take_if_first(&o.connect, &o.key) {
                Some(p) => Some(p),
                None => return false,
            }
        } else {
            None
        };
        // A late answer to an abandoned attempt (a connect, a TLS probe) is told apart by this.
        self.gen.set(self.gen.get() + 1);
        let op = match self.prim.begin_external(ticket) {
            Ok(op) => op,
            Err(_) => return false,
        };
        let started = Instant::now();
        match pool_take(&o.connect, self.me.clone()) {
            Some(conn) => {
                *self.conn.borrow_mut() = Some(conn);
                self.ask(op, place, started, true);
            }
            None => self.connect(op, place, started),
        }
        true
    }

    fn connect(&self, op: ExternalOp, place: Option<Place>, started: Instant) {
        let gen = self.gen.get() + 1;
        self.gen.set(gen);
        *self.stage.borrow_mut() = Stage::Connecting {
            op,
            place,
            started,
            gen,
        };
        let opts = self.prim.options().connect.clone();
        let me = self.me.clone();
        let r = in_handle_scope(&self.env, || {
            self.env.spawn_future_with_callback(
                async move { Ok(Connection::connect(&opts).await) },
                move |env, r| {
                    if let Some(l) = me.upgrade() {
                        l.connected(env, gen, r);
                    }
                    Ok(())
                },
            )
        });
        if let Err(e) = r {
            self.fail_acquire(DflockdError::new(
                core::ErrorCode::ConnectionError,
                e.reason,
            ));
        }
    }

    fn connected(&self, env: &Env, gen: u64, r: core::Result<Connection>) {
        let ours = matches!(&*self.stage.borrow(), Stage::Connecting { gen: g, .. } if *g == gen);
        if !ours {
            return; // abandoned (cancel/close): the connection is dropped
        }
        let stream = r.and_then(|c| {
            c.into_nonblocking().ok_or_else(|| {
                DflockdError::new(
                    core::ErrorCode::ConnectionError,
                    "connection closed during setup",
                )
            })
        });
        let opened = stream.and_then(|stream| {
            let route = Rc::new(Route {
                id: NEXT_ROUTE.with(|n| n.replace(n.get() + 1)),
                owner: RefCell::new(Some(self.me.clone())),
            });
            let wd = Slot::new(stream.socket()).map_err(|e| {
                DflockdError::new(
                    core::ErrorCode::ConnectionError,
                    format!("duplicating the socket for the renew watchdog failed: {e}"),
                )
            })?;
            let watch = SocketWatch::open(env, stream.socket(), route.clone())
                .map_err(|e| DflockdError::new(core::ErrorCode::ConnectionError, e.reason))?;
            Ok(LoopConn {
                stream,
                watch,
                route,
                wd,
            })
        });
        match opened {
            Ok(conn) => {
                *self.conn.borrow_mut() = Some(conn);
                let Stage::Connecting {
                    op, place, started, ..
                } = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle)
                else {
                    return;
                };
                self.ask(op, place, started, false);
            }
            Err(e) => self.fail_acquire(e),
        }
    }

    /// Write `req` on the connection (through its watchdog slot: after any half-written
    /// watchdog renew, never inside one), arm its reply limit (`limit`, else the socket
    /// timeout) and keep the loop alive while it is out when `alive`. `Err` = the write failed.
    fn send(
        &self,
        req: Request<'_>,
        limit: Option<Duration>,
        alive: bool,
    ) -> core::Result<Instant> {
        let mut conn = self.conn.borrow_mut();
        let Some(c) = conn.as_mut() else {
            return Err(DflockdError::new(
                core::ErrorCode::ConnectionError,
                "connection is closed",
            ));
        };
        let mut buf = self.wbuf.borrow_mut();
        buf.clear();
        req.encode_into(&mut buf)?;
        let renew = matches!(req, Request::Renew { .. } | Request::SemRenew { .. });
        let mut w = c.wd.js_write();
        w.prepend_pending(&mut buf);
        let sent = Instant::now();
        let done = c.stream.send(&buf)?;
        w.sent(done, renew.then(|| sent.into_std()));
        let limit = limit.unwrap_or_else(|| c.stream.reply_limit(req.blocking_timeout_s()));
        c.watch.keep_alive(alive);
        // Rounded up, plus 1 ms: libuv counts from the loop's cached time, which may be most of a
        // millisecond old, and a caller's deadline must not fire early (a `timeout: 1500` on the
        // loop driver settled after 1498.9 ms in dflockd-timeouts.test.js).
        let ms = limit.as_micros().div_ceil(1000) + 1;
        c.watch.arm_timer(ms.min(u64::MAX as u128) as u64);
        c.watch.spin_for(SPIN);
        if !done {
            c.watch
                .want(true, true)
                .map_err(|e| DflockdError::new(core::ErrorCode::ConnectionError, e.reason))?;
        }
        Ok(sent)
    }

    fn ask(&self, op: ExternalOp, place: Option<Place>, started: Instant, reused: bool) {
        let req = self.prim.external_first_request(place.is_some());
        let limit = self.prim.external_first_limit(started, Instant::now());
        let sent = self.send(req, limit, true);
        *self.stage.borrow_mut() = Stage::Asking {
            op,
            place,
            started,
            sent: *sent.as_ref().unwrap_or(&Instant::now()),
            reused,
            confirm: None,
        };
        if let Err(e) = sent {
            self.asking_failed(e);
        }
    }

    /// The acquisition ends without a hold: close the connection, end the op, settle.
    fn fail_acquire(&self, e: DflockdError) {
        self.close_conn();
        let op = match std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle) {
            Stage::Connecting { op, .. } | Stage::Asking { op, .. } | Stage::Queued { op, .. } => {
                op
            }
            other => {
                *self.stage.borrow_mut() = other;
                return;
            }
        };
        let r = self.prim.external_failed(op, e);
        self.call(settle_value(self.id, r));
    }

    /// The first request failed: the core decides what follows (`FirstFailed`).
    fn asking_failed(&self, e: DflockdError) {
        let next = match &*self.stage.borrow() {
            Stage::Asking {
                reused, confirm, ..
            } => FirstFailed::after(&e, *reused, confirm.is_some()),
            _ => FirstFailed::Fail,
        };
        match next {
            FirstFailed::Fail => self.fail_acquire(e),
            FirstFailed::Probe => self.probe_then_fail(e),
            FirstFailed::Reconnect => {
                self.close_conn();
                if let Stage::Asking {
                    op, place, started, ..
                } = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle)
                {
                    self.connect(op, place, started);
                }
            }
        }
    }

    /// A fresh connection closed before its first reply: the core probes the server (a TLS
    /// one does that) and names it in the error the acquisition fails with.
    fn probe_then_fail(&self, e: DflockdError) {
        self.close_conn();
        let gen = self.gen.get();
        let o = self.prim.options().connect.clone();
        let me = self.me.clone();
        let r = in_handle_scope(&self.env, || {
            self.env.spawn_future_with_callback(
                async move {
                    Ok(
                        core::connection::closed_unanswered(&o.host, o.port, o.socket_timeout, e)
                            .await,
                    )
                },
                move |_env, e| {
                    if let Some(l) = me.upgrade() {
                        let ours = l.gen.get() == gen
                            && matches!(&*l.stage.borrow(), Stage::Asking { .. });
                        if ours {
                            l.fail_acquire(e);
                        }
                    }
                    Ok(())
                },
            )
        });
        if let Err(e) = r {
            self.fail_acquire(DflockdError::new(
                core::ErrorCode::ConnectionError,
                e.reason,
            ));
        }
    }

    fn close_conn(&self) {
        if let Some(c) = self.conn.borrow_mut().take() {
            c.close();
        }
    }

    /// Read what arrived and handle each complete line.
    fn on_ready(&self, readable: bool, writable: bool, error: Option<i32>) {
        if writable {
            let r = self.conn.borrow_mut().as_mut().map(|c| c.stream.flush());
            match r {
                Some(Ok(true)) => {
                    if let Some(c) = self.conn.borrow().as_ref() {
                        c.wd.js_flushed();
                        let _ = c.watch.want(true, false);
                    }
                }
                Some(Err(e)) => return self.io_failed(e),
                _ => {}
            }
        }
        if !readable && error.is_none() {
            return;
        }
        // Drain: read until the socket has no more, handling each chunk's complete lines. After a
        // long block, the replies of hundreds of watchdog renews wait (~5 bytes each: over 4 KiB
        // after ~800); a caller judging the lease from the first chunk's replies alone declared
        // a lock lost that the server still kept (review of #24).
        loop {
            let read = self
                .conn
                .borrow_mut()
                .as_mut()
                .map(|c| c.stream.read_ready_more());
            let more = match read {
                None => return,
                Some(Err(e)) => return self.io_failed(e),
                Some(Ok(more)) => more,
            };
            loop {
                let line = self
                    .conn
                    .borrow_mut()
                    .as_mut()
                    .and_then(|c| c.stream.next_line());
                match line {
                    None => break,
                    Some(Err(e)) => return self.io_failed(e),
                    Some(Ok(line)) => self.on_line(&line),
                }
            }
            if !more {
                break;
            }
        }
        if let Some(status) = error {
            let peer = self.peer();
            self.io_failed(DflockdError::new(
                core::ErrorCode::ConnectionError,
                format!("polling the connection to {peer} failed (libuv status {status})"),
            ));
        }
    }

    fn peer(&self) -> String {
        self.conn
            .borrow()
            .as_ref()
            .map(|c| c.stream.peer().to_string())
            .unwrap_or_default()
    }

    fn release_conn_idle(&self) {
        if let Some(c) = self.conn.borrow_mut().take() {
            pool_put(&self.prim.options().connect, c);
        }
    }

    /// `cancel()`: abort an acquisition in progress (it settles `ABORTED`).
    pub(super) fn cancel(&self) {
        if matches!(
            &*self.stage.borrow(),
            Stage::Connecting { .. } | Stage::Asking { .. } | Stage::Queued { .. }
        ) {
            self.fail_acquire(DflockdError::aborted());
        }
    }

    /// The env is going away (or the object was collected): stop without calling JS.
    fn stop(&self) {
        *self.stage.borrow_mut() = Stage::Idle;
        self.close_conn();
    }

    /// The primitive's JS object was collected.
    pub(super) fn collected(&self) {
        self.stop();
        self.settle.release();
    }
}

/// How many renews the watchdog wrote in this process because a holder's thread was late (for
/// tests: 0 while every holder renews on time).
#[napi(js_name = "dflockdWatchdogRenews")]
pub fn dflockd_watchdog_renews() -> f64 {
    watchdog::renews_sent() as f64
}
