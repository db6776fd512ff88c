//! The low-level connection's requests on the JS thread's own event loop: the queue (the
//! contract, and which error each request gets at the end, is the core's
//! `connection::queue`), writing the head, reading and settling its reply in the poll
//! callback, the reply deadline, the busy-poll and the end of the connection (close,
//! collection, the env's teardown, an error). `connection` is the JS class over it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use sema_core::dflockd::connection::NonBlockingStream;

use super::ops::{call_error, reply_result, NativeCallResult};
use super::replies::Replies;
use super::*;
use crate::event_loop::{SocketWatch, WatchHandler};
use sema_core::dflockd::connection::queue::Ended;
use sema_core::dflockd::protocol::Encoded;

struct State {
    stream: Option<NonBlockingStream>,
    /// Requests in call order; the head is in flight once `head_sent`.
    queue: VecDeque<Encoded>,
    head_sent: bool,
    /// The reply deadline armed for the head when it was sent (for the timeout's message).
    head_limit: Duration,
    ended: Option<Ended>,
    /// Why the connection ended while idle (given to the next request, as a read would).
    idle_error: Option<DflockdError>,
}

/// The connection's state and handles, owned by the JS object and (while the socket is
/// watched) by the loop's handler.
pub(super) struct Conn {
    state: RefCell<State>,
    watch: RefCell<Option<SocketWatch>>,
    /// The requests' promises, settled in order; shared so that no borrow is held while JS runs
    /// (it may call back into this connection).
    reply: Rc<Replies>,
    /// Its number among this thread's live connections (see `LIVE`).
    id: u64,
    /// Whether a pending request keeps the process alive (`ref()`, the default) or not
    /// (`unref()`); an idle connection never does.
    referenced: std::cell::Cell<bool>,
}

/// How `finish` treats pending requests.
enum Settle {
    /// Call JS for each (normal operation).
    Notify,
    /// The JS object was collected: nothing is pending (the JS side holds the object while
    /// requests are), no JS is called.
    Collected,
    /// The env is being torn down: no JS, and the env frees our reference itself.
    Teardown,
}

impl Conn {
    /// Write the head request if nothing is in flight; arm its reply deadline.
    fn send_head(&self) -> Result<(), DflockdError> {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        if st.head_sent {
            return Ok(());
        }
        let (Some(op), Some(stream)) = (st.queue.front(), st.stream.as_mut()) else {
            return Ok(());
        };
        let done = stream.send(op.bytes())?;
        st.head_sent = true;
        let limit = stream.reply_limit(op.blocking_s());
        st.head_limit = limit;
        drop(guard);
        if let Some(w) = &*self.watch.borrow() {
            w.keep_alive(self.referenced.get());
            w.arm_timer(limit.as_millis().min(u64::MAX as u128) as u64);
            w.spin_for(SPIN);
            if !done {
                w.want(true, true).map_err(|e| {
                    DflockdError::new(core::ErrorCode::ConnectionError, e.reason.clone())
                })?;
            }
        }
        Ok(())
    }

    /// Read what arrived (one read: the poll is level-triggered, so anything left in the socket,
    /// an EOF after a reply included, comes with the next callback), then settle the head for
    /// each complete line. No complete line is buffered on entry: every call drains them all.
    fn on_readable(&self) {
        let read = {
            let mut st = self.state.borrow_mut();
            match st.stream.as_mut() {
                Some(s) => s.read_ready(),
                None => return,
            }
        };
        if let Err(e) = read {
            return self.fail(e);
        }
        loop {
            let step = {
                let mut guard = self.state.borrow_mut();
                let st = &mut *guard;
                let Some(stream) = st.stream.as_mut() else {
                    return;
                };
                match stream.next_line() {
                    None => None,
                    Some(Err(e)) => Some(Err(e)),
                    Some(Ok(line)) if st.head_sent => {
                        st.head_sent = false;
                        let op = st.queue.pop_front();
                        Some(Ok(op.map(|op| (reply_result(&op, &line), line))))
                    }
                    Some(Ok(line)) => Some(Err(core::connection::unsolicited(
                        stream.peer(),
                        line.as_bytes(),
                    ))),
                }
            };
            match step {
                None => break,
                Some(Err(e)) => return self.fail(e),
                Some(Ok(None)) => {}
                Some(Ok(Some((result, _)))) => {
                    let protocol_error = result
                        .0
                        .as_ref()
                        .err()
                        .is_some_and(|e| e.code == core::ErrorCode::ProtocolError.as_str());
                    self.after_reply();
                    self.settle(result);
                    if protocol_error {
                        // The stream is out of step with the requests: as the core does.
                        let peer = self.peer();
                        self.finish(Ended::OnError(peer), None, Settle::Notify);
                        return;
                    }
                }
            }
        }
    }

    /// The head was answered: disarm its deadline, send the next one or go idle.
    fn after_reply(&self) {
        let idle = self.state.borrow().queue.is_empty();
        if let Some(w) = &*self.watch.borrow() {
            w.disarm_timer();
            if idle {
                w.keep_alive(false);
                w.stop_spin();
            }
        }
        if !idle {
            if let Err(e) = self.send_head() {
                self.fail(e);
            }
        }
    }

    fn on_writable(&self) {
        let r = {
            let mut st = self.state.borrow_mut();
            match st.stream.as_mut() {
                Some(s) => s.flush(),
                None => return,
            }
        };
        match r {
            Ok(true) => {
                if let Some(w) = &*self.watch.borrow() {
                    let _ = w.want(true, false);
                }
            }
            Ok(false) => {}
            Err(e) => self.fail(e),
        }
    }

    /// An I/O or protocol error: the head in flight gets it (else it is kept for the next
    /// request), the rest "connection to <peer> is closed".
    fn fail(&self, e: DflockdError) {
        let peer = self.peer();
        self.finish(Ended::OnError(peer), Some(e), Settle::Notify);
    }

    fn peer(&self) -> String {
        self.state
            .borrow()
            .stream
            .as_ref()
            .map(|s| s.peer().to_string())
            .unwrap_or_default()
    }

    /// End the connection (once): stop watching, close the socket, settle what is pending.
    fn finish(&self, ended: Ended, error: Option<DflockdError>, how: Settle) {
        let (pending, head_sent, peer) = {
            let mut st = self.state.borrow_mut();
            if st.ended.is_some() {
                return;
            }
            let peer = st.stream.as_ref().map(|s| s.peer().to_string());
            // Stop polling before the socket is closed (uv_close deregisters it at once).
            if let Some(w) = self.watch.borrow_mut().take() {
                w.close();
            }
            st.stream = None;
            st.ended = Some(ended);
            let pending = std::mem::take(&mut st.queue);
            if Ended::keeps_idle_error(pending.len(), st.head_sent) {
                st.idle_error = error.clone();
            }
            (pending, std::mem::replace(&mut st.head_sent, false), peer)
        };
        if !matches!(how, Settle::Teardown) {
            LIVE.with(|l| l.borrow_mut().remove(&self.id));
        }
        let reply = self.reply.clone();
        match how {
            Settle::Notify => {}
            Settle::Collected => return reply.release(),
            Settle::Teardown => return reply.forget(),
        }
        let ended = match &self.state.borrow().ended {
            Some(Ended::ByClose) => Ended::ByClose,
            _ => Ended::OnError(peer.unwrap_or_default()),
        };
        for e in ended.pending_errors(pending.len(), head_sent, error) {
            reply.settle(call_error(e));
        }
        reply.release();
    }

    fn settle(&self, r: NativeCallResult) {
        self.reply.clone().settle(r);
    }

    /// On the JS thread: watch the connected socket on this thread's loop.
    pub(super) fn open(
        env: &Env,
        stream: NonBlockingStream,
        reply: Rc<Replies>,
    ) -> Result<Rc<Conn>, DflockdError> {
        let conn = Rc::new(Conn {
            state: RefCell::new(State {
                stream: None,
                queue: VecDeque::new(),
                head_sent: false,
                head_limit: Duration::ZERO,
                ended: None,
                idle_error: None,
            }),
            watch: RefCell::new(None),
            reply,
            id: NEXT_ID.with(|n| n.replace(n.get() + 1)),
            referenced: std::cell::Cell::new(true),
        });
        let unsupported = |e: napi::Error| {
            let reason = e.reason.clone();
            let code = if reason.starts_with("UNSUPPORTED_PLATFORM") {
                core::ErrorCode::UnsupportedPlatform
            } else {
                core::ErrorCode::ConnectionError
            };
            conn.reply.release();
            DflockdError::new(code, reason)
        };
        let watch = SocketWatch::open(env, stream.socket(), Rc::new(Watched(conn.clone())))
            .map_err(unsupported)?;
        *conn.watch.borrow_mut() = Some(watch);
        conn.state.borrow_mut().stream = Some(stream);
        if let Err(e) = watch_env_teardown(env) {
            conn.finish(Ended::ByClose, None, Settle::Collected);
            return Err(unsupported(e));
        }
        LIVE.with(|l| l.borrow_mut().insert(conn.id, Rc::downgrade(&conn)));
        Ok(conn)
    }

    /// Queue `op` and return 0 (its result settles the request's promise: `Replies`), or return
    /// the result at once (the validation error, or the connection is closed).
    pub(super) fn submit(&self, op: core::Result<Encoded>) -> Either<f64, NativeCallResult> {
        let op = match op {
            Ok(op) => op,
            Err(e) => return Either::B(call_error(e)),
        };
        let conn = self;
        {
            let mut guard = conn.state.borrow_mut();
            let st = &mut *guard;
            if let Some(ended) = &st.ended {
                return Either::B(call_error(ended.refusal(&mut st.idle_error)));
            }
            if !st.queue.is_empty() {
                // Validated and encoded by the call, written when its turn comes.
                st.queue.push_back(op);
                return Either::A(0.0);
            }
            st.queue.push_back(op);
        }
        if let Err(e) = conn.send_head() {
            let sent = conn.state.borrow().head_sent;
            if !sent {
                // Nothing written: the write failed.
                conn.state.borrow_mut().queue.pop_back();
                conn.fail(e.clone());
                return Either::B(call_error(e));
            }
            conn.fail(e);
        }
        Either::A(0.0)
    }

    /// `ref()` (`on`) / `unref()`: whether a pending request keeps the process alive; applied
    /// at once to the request in flight, if any.
    pub(super) fn set_ref(&self, on: bool) {
        self.referenced.set(on);
        let pending = !self.state.borrow().queue.is_empty();
        if let Some(w) = &*self.watch.borrow() {
            w.keep_alive(on && pending);
        }
    }

    /// `close()`: end the connection; pending requests settle before this returns.
    pub(super) fn close(&self) {
        self.finish(Ended::ByClose, None, Settle::Notify);
    }

    /// The JS object was collected: nothing is pending (the JS side holds the object while
    /// requests are), so no JS is called.
    pub(super) fn collected(&self) {
        self.finish(Ended::ByClose, None, Settle::Collected);
    }
}

/// How long the loop busy-polls for a reply after a request is written, when it is the one
/// reply this thread awaits (see `SocketWatch::spin_for`). Measured against the Go server on
/// loopback (2-core VMs, lock + release pairs/s at 1 worker): on the first machine no spin
/// 8 754 / 8 315 (2.0 context switches per pair, 51 µs client CPU), 50 µs 14 270 / 15 035
/// (0.1–0.2 switches, 66 µs CPU), 200 µs and 1 ms no better; on the machine of 2026-11-26
/// (medians of 5 alternated runs) `Connection` 8 210 with 50 µs, 8 866 with 200 µs, and
/// `DistributedLock` 7 783 / 8 604 (100 µs 8 728, 400 µs 8 567). At 10 workers every spin took
/// the core the server needed (`DistributedLock` 39 263 with no spin, 35 565 with 50 µs, 28 784
/// with 200 µs), so with more than one reply due the loop does not spin at all (see `AWAITED`
/// in src/event_loop.rs; against the 50 µs spin: +9 % at 1 worker, +7 % at 10, +9 % at 100).
/// A request that waits longer (a blocked acquire) costs at most this much CPU.
pub(super) const SPIN: Duration = Duration::from_micros(200);

thread_local! {
    /// The open connections of this thread's env (one env per JS thread), closed when the env
    /// is torn down (a worker terminated, the process exiting): one cleanup hook per env, not
    /// one per connection, since napi-rs leaks a removed hook's data.
    static LIVE: RefCell<std::collections::HashMap<u64, Weak<Conn>>> = RefCell::default();
    static NEXT_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static HOOKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Register this thread's env cleanup hook once: it stops every live connection's polling and
/// closes its handles, without calling JS.
fn watch_env_teardown(env: &Env) -> napi::Result<()> {
    if HOOKED.with(|h| h.get()) {
        return Ok(());
    }
    env.add_env_cleanup_hook((), |()| {
        HOOKED.with(|h| h.set(false));
        let live = LIVE.with(|l| std::mem::take(&mut *l.borrow_mut()));
        for conn in live.into_values().filter_map(|w| w.upgrade()) {
            conn.finish(Ended::ByClose, None, Settle::Teardown);
        }
    })?;
    HOOKED.with(|h| h.set(true));
    Ok(())
}

/// The handler the loop calls; holds the connection only while the socket is watched.
struct Watched(Rc<Conn>);

impl WatchHandler for Watched {
    fn ready(&self, readable: bool, writable: bool, error: Option<i32>) {
        if let Some(status) = error {
            // libuv reports a socket error (POLLERR, e.g. the peer reset the connection) as
            // UV_EBADF and stops polling: the read says what really happened; should it not
            // end the connection, the poll error does (a no-op once it has ended).
            self.0.on_readable();
            let peer = self.0.peer();
            return self.0.fail(DflockdError::new(
                core::ErrorCode::ConnectionError,
                format!("polling the connection to {peer} failed (libuv status {status})"),
            ));
        }
        if writable {
            self.0.on_writable();
        }
        if readable {
            self.0.on_readable();
        }
    }

    fn timeout(&self) {
        let (peer, limit) = {
            let st = self.0.state.borrow();
            let Some(s) = st.stream.as_ref() else { return };
            (s.peer().to_string(), st.head_limit)
        };
        self.0.fail(DflockdError::new(
            core::ErrorCode::Timeout,
            format!("no reply from {peer} within {}ms", limit.as_millis()),
        ));
    }
}
