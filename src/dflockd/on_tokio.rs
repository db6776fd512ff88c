//! The low-level connection on tokio, for hosts whose libuv loop cannot serve the addon (Bun,
//! Deno: see `event_loop::loop_unusable`). Same contract as `on_loop`, the core's
//! `connection::queue` (one at a time in call order, each settled once, `close()` settles what
//! is pending before it returns, which error each request gets at the end); here too an idle
//! connection never keeps the process alive and a pending request does. It costs thread hops per round trip (a tokio worker writes, reads and wakes the JS
//! thread through a threadsafe function), which the event-loop driver avoids.
//!
//! Ownership: the task owns the core `Connection`; the JS object owns `TokioConn`; they share
//! `Shared` (which request numbers were handed out and settled, how the connection ended). A
//! result the task sends for a request that `close()` already settled is dropped by number.

use std::cell::{OnceCell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex};

use napi::sys;
use napi::threadsafe_function::{ThreadsafeCallContext, ThreadsafeFunction};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::ops::{call_error, reply_result, NativeCallResult};
use super::replies::Replies;
use super::*;
use sema_core::dflockd::connection::queue::{closed_error, Ended};
use sema_core::dflockd::protocol::Encoded;

/// Delivers `(request number, result)` to the JS thread; weak (unref'd) while idle.
type Deliver = ThreadsafeFunction<(u64, NativeCallResult), (), (), napi::Status, false, true>;

struct State {
    /// Number of the next request (requests `settled..submitted` are pending).
    submitted: u64,
    /// Requests numbered below this were handed to JS.
    settled: u64,
    ended: Option<Ended>,
    /// Why the connection ended while idle (given to the next request, as a read would).
    idle_error: Option<DflockdError>,
}

struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The JS thread's side of a connection.
pub(super) struct TokioConn {
    shared: Arc<Shared>,
    requests: mpsc::UnboundedSender<(u64, Encoded)>,
    closed: CancellationToken,
    reply: Rc<Replies>,
    env: sys::napi_env,
    /// The task's threadsafe function, to ref it while a request is pending; `None` once the
    /// connection is closed or collected.
    keep_alive: RefCell<Option<Arc<Deliver>>>,
    /// Whether a pending request keeps the process alive (`ref()`, the default) or not
    /// (`unref()`); an idle connection never does.
    referenced: std::cell::Cell<bool>,
}

impl TokioConn {
    /// On the JS thread, with a connected core connection: start its task.
    pub(super) fn open(
        env: &Env,
        conn: Connection,
        reply: Rc<Replies>,
    ) -> Result<Rc<TokioConn>, DflockdError> {
        let slot: Rc<OnceCell<Weak<TokioConn>>> = Rc::new(OnceCell::new());
        let target = slot.clone();
        // The threadsafe function calls a no-op: the result goes through `deliver`, which drops
        // one that `close()` already settled (a threadsafe function cannot skip its call).
        let build = || -> napi::Result<Deliver> {
            let noop =
                env.create_function_from_closure::<(), (), _>("semaNativeReply", |_| Ok(()))?;
            noop.build_threadsafe_function::<(u64, NativeCallResult)>()
                .weak::<true>()
                .callee_handled::<false>()
                .build_callback(move |ctx: ThreadsafeCallContext<(u64, NativeCallResult)>| {
                    if let Some(conn) = target.get().and_then(Weak::upgrade) {
                        conn.deliver(&ctx.env, ctx.value.0, ctx.value.1);
                    }
                    Ok(())
                })
        };
        let deliver = match build() {
            Ok(d) => Arc::new(d),
            Err(e) => {
                reply.release();
                return Err(DflockdError::new(
                    core::ErrorCode::ConnectionError,
                    format!("cannot make the reply callback: {}", e.reason),
                ));
            }
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                submitted: 0,
                settled: 0,
                ended: None,
                idle_error: None,
            }),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let closed = CancellationToken::new();
        let this = Rc::new(TokioConn {
            shared: shared.clone(),
            requests: tx,
            closed: closed.clone(),
            reply,
            env: env.raw(),
            keep_alive: RefCell::new(Some(deliver.clone())),
            referenced: std::cell::Cell::new(true),
        });
        let _ = slot.set(Rc::downgrade(&this));
        napi::bindgen_prelude::spawn(run(conn, rx, shared, closed, deliver));
        Ok(this)
    }

    /// Queue `op` and return 0 (its result settles the request's promise: `Replies`), or return
    /// the result at once (the validation error, or the connection is closed).
    pub(super) fn submit(&self, op: core::Result<Encoded>) -> Either<f64, NativeCallResult> {
        let op = match op {
            Ok(op) => op,
            Err(e) => return Either::B(call_error(e)),
        };
        let first = {
            let mut guard = self.shared.lock();
            let st = &mut *guard;
            if let Some(ended) = &st.ended {
                return Either::B(call_error(ended.refusal(&mut st.idle_error)));
            }
            let seq = st.submitted;
            // Sent under the lock: the task marks the end under it too, then drains the
            // channel, so a request is either answered by the task or refused here.
            if self.requests.send((seq, op)).is_err() {
                return Either::B(call_error(closed_error()));
            }
            st.submitted += 1;
            st.settled == seq
        };
        if first && self.referenced.get() {
            self.keep_alive(true);
        }
        Either::A(0.0)
    }

    /// `ref()` (`on`) / `unref()`: whether a pending request keeps the process alive; applied
    /// at once to the requests pending, if any.
    pub(super) fn set_ref(&self, on: bool) {
        self.referenced.set(on);
        let pending = {
            let st = self.shared.lock();
            st.settled < st.submitted
        };
        self.keep_alive(on && pending);
    }

    /// Ref (a request is pending) or unref (idle) the threadsafe function.
    fn keep_alive(&self, on: bool) {
        let guard = self.keep_alive.borrow();
        let Some(d) = guard.as_ref() else { return };
        // Aborted = finalized by the env's teardown (on this thread, so not concurrently).
        if d.aborted() {
            return;
        }
        // SAFETY: `env` is the live env of this JS thread, where this object is used; the
        // threadsafe function is not released while we hold it (released when the last `Arc`
        // drops) and not finalized (checked just above, on the thread that finalizes it).
        unsafe {
            if on {
                sys::napi_ref_threadsafe_function(self.env, d.raw());
            } else {
                sys::napi_unref_threadsafe_function(self.env, d.raw());
            }
        }
    }

    /// On the JS thread: the task's result for request `seq`.
    fn deliver(&self, _env: &Env, seq: u64, result: NativeCallResult) {
        let idle = {
            let mut st = self.shared.lock();
            if seq < st.settled || matches!(st.ended, Some(Ended::ByClose)) {
                return; // settled by close()
            }
            st.settled = seq + 1;
            st.settled == st.submitted
        };
        if idle {
            self.keep_alive(false);
        }
        self.reply.settle(result);
    }

    /// `close()` (`notify`) or collection: end the connection; pending requests settle (the
    /// first ABORTED, the rest CONNECTION_ERROR) before this returns.
    fn finish(&self, notify: bool) {
        let pending = {
            let mut st = self.shared.lock();
            if matches!(st.ended, Some(Ended::ByClose)) {
                return;
            }
            st.ended = Some(Ended::ByClose);
            let pending = st.submitted - st.settled;
            st.settled = st.submitted;
            pending
        };
        self.closed.cancel();
        self.keep_alive(false);
        self.keep_alive.borrow_mut().take();
        if notify {
            // The first pending request is in flight (or about to be): it is the one aborted.
            for e in Ended::ByClose.pending_errors(pending as usize, true, None) {
                self.reply.settle(call_error(e));
            }
        }
        self.reply.release();
    }

    pub(super) fn close(&self) {
        self.finish(true);
    }

    /// The JS object was collected: nothing is pending (the JS side holds the object while
    /// requests are), so no JS is called.
    pub(super) fn collected(&self) {
        self.finish(false);
    }
}

/// One request on the core connection.
async fn request(conn: &mut Connection, op: &Encoded) -> NativeCallResult {
    match conn.request_encoded(op).await {
        Ok(line) => reply_result(op, &line),
        Err(e) => call_error(e),
    }
}

fn send(deliver: &Deliver, seq: u64, r: NativeCallResult) {
    let _ = deliver.call((seq, r), ThreadsafeFunctionCallMode::NonBlocking);
}

/// The task: runs the requests in order until `close()`, an error, or the server ends an idle
/// connection; then answers what is left "connection to <peer> is closed".
async fn run(
    mut conn: Connection,
    mut requests: mpsc::UnboundedReceiver<(u64, Encoded)>,
    shared: Arc<Shared>,
    closed: CancellationToken,
    deliver: Arc<Deliver>,
) {
    let mut idle_error = None;
    // Requests numbered below this were answered (their results sent to the JS thread).
    let mut answered = 0;
    loop {
        let next = tokio::select! {
            biased;
            _ = closed.cancelled() => break,
            next = requests.recv() => next,
            e = conn.wait_server_gone() => {
                idle_error = Some(e);
                break;
            }
        };
        let Some((seq, op)) = next else { break };
        let r = tokio::select! {
            biased;
            // close() has settled it (ABORTED); dropping the connection tells the server.
            _ = closed.cancelled() => break,
            r = request(&mut conn, &op) => r,
        };
        let protocol_error =
            r.0.as_ref()
                .err()
                .is_some_and(|e| e.code == core::ErrorCode::ProtocolError.as_str());
        send(&deliver, seq, r);
        answered = seq + 1;
        if protocol_error || conn.is_closed() {
            // Out of step with the requests, or the socket failed: as the event-loop driver.
            break;
        }
    }
    let peer = conn.peer().to_string();
    conn.close();
    // Why the connection ended while idle goes to the next request: one refused from now on
    // (`submit`), or one already queued when the task stopped. The socket closed in the core
    // when the unprompted line was read, before the end is recorded here, so a request made
    // after the server saw the close can be in the channel (dflockd-connection under Deno and
    // Bun, 8 runs in 15 before this: "is closed" instead of the line's words).
    let mut queued_error = None;
    {
        let mut st = shared.lock();
        if st.ended.is_none() {
            st.ended = Some(Ended::OnError(peer.clone()));
            if answered == st.submitted {
                st.idle_error = idle_error;
            } else {
                queued_error = idle_error;
            }
        }
    }
    requests.close();
    let mut queued = Vec::new();
    while let Ok((seq, _)) = requests.try_recv() {
        queued.push(seq);
    }
    // The first queued request gets the idle failure, as a read would have.
    let ended = Ended::OnError(peer);
    let errors = ended.pending_errors(queued.len(), true, queued_error);
    for (seq, e) in queued.into_iter().zip(errors) {
        send(&deliver, seq, call_error(e));
    }
}
