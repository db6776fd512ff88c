//! `NativeDflockdConnection`: the low-level connection (the dflockd TypeScript client's
//! functions), its request queue and the task that runs it.

use super::*;

use super::ops::*;

/// A queued request.
pub(super) struct Queued {
    op: Op,
    /// Its number among the connection's queued requests (for `expire`).
    seq: u64,
    /// Bytes of it already written from the JS thread.
    written: usize,
    /// Whether it was written completely from the JS thread: the task then only waits for the
    /// reply, and the JS side enforces the reply deadline (`limit`) through `expire`.
    direct: bool,
    limit: Duration,
}

/// State shared by the JS thread and the connection task.
pub(super) struct State {
    queue: VecDeque<Queued>,
    /// A request is queued or in flight (set by `submit`, cleared by the task when it has
    /// answered the last one).
    busy: bool,
    next_seq: u64,
    /// `expire(seq)` was called: the request `seq` (written from the JS thread) is overdue.
    expired: Option<u64>,
    /// Plain TCP: the second socket handle for writing from the JS thread; dropped by the task
    /// (under this lock) when it closes the connection.
    writer: Option<std::net::TcpStream>,
    /// Reused encoding buffer for direct writes.
    wbuf: Vec<u8>,
    /// The task has ended: requests are answered at once.
    done: bool,
    /// Why the connection ended while idle (given to the next request, as a read would).
    idle_error: Option<DflockdError>,
    /// The task ended on an error, not `close()`: later requests get "connection to <peer> is
    /// closed", as from a closed core connection.
    ended_on_error: Option<String>,
}

/// Connections of this process with a request queued or in flight.
pub(super) static BUSY_CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

/// A request is written from the JS thread only while fewer than this many other connections
/// are busy. With few busy connections the tokio worker is often asleep and not waking it pays;
/// with many it is awake anyway, and the writes are better left to it than added to the JS
/// thread. Measured against an instant-reply server (client CPU per lock + release pair, pairs/s):
/// at 10 connections threshold 1 gave ~31 µs, 16 ~27 µs; at 100 connections, writing every
/// request from the JS thread gave ~22 µs and ~40 k/s, threshold 16 ~19.7 µs and ~52 k/s.
pub(super) const DIRECT_WRITE_MAX_BUSY: usize = 16;

pub(super) struct Shared {
    state: std::sync::Mutex<State>,
    wake: Notify,
    socket_timeout: Duration,
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(super) fn peer_closed_error(peer: &str) -> DflockdError {
    DflockdError::new(
        core::ErrorCode::ConnectionError,
        format!("connection to {peer} is closed"),
    )
}

pub(super) fn aborted_error() -> DflockdError {
    DflockdError::new(
        core::ErrorCode::Aborted,
        "connection closed during the request",
    )
}

/// What the task does next.
pub(super) enum Next {
    Run(Queued),
    /// The head request was written from the JS thread and its reply is not complete yet.
    AwaitReply,
    Expired(Queued),
    Idle,
}

/// The task that owns one connection: runs the queued requests one at a time, in call order,
/// until `close()` or the JS object is gone. A request written from the JS thread (plain TCP,
/// nothing in flight) does not wake this task: it is woken by the reply itself.
pub(super) async fn connection_task(
    mut conn: Connection,
    shared: Arc<Shared>,
    closed: CancellationToken,
    reply: Reply,
) {
    // The head request is in flight when the loop ends (answered ABORTED, not CONNECTION_ERROR).
    let mut head_in_flight = false;
    let mut end_error: Option<DflockdError> = None;
    loop {
        let next = {
            let mut st = shared.lock();
            match st.queue.front() {
                None => Next::Idle,
                Some(q) if !q.direct || conn.has_line() => match st.queue.pop_front() {
                    Some(q) => Next::Run(q),
                    None => Next::Idle,
                },
                Some(q) if st.expired == Some(q.seq) => match st.queue.pop_front() {
                    Some(q) => Next::Expired(q),
                    None => Next::Idle,
                },
                Some(_) => Next::AwaitReply,
            }
        };
        match next {
            Next::Run(q) => {
                conn.mark_written(q.written);
                let r = tokio::select! {
                    biased;
                    _ = closed.cancelled() => {
                        settle(&reply, NativeCallResult::err(aborted_error()));
                        break;
                    }
                    r = run_op(&mut conn, q.op) => r,
                };
                settle(&reply, r);
                let mut st = shared.lock();
                if st.queue.is_empty() {
                    st.busy = false;
                    BUSY_CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Next::Expired(q) => {
                settle(
                    &reply,
                    NativeCallResult::err(DflockdError::new(
                        core::ErrorCode::Timeout,
                        format!(
                            "no reply from {} within {}ms",
                            conn.peer(),
                            q.limit.as_millis()
                        ),
                    )),
                );
                break;
            }
            Next::AwaitReply | Next::Idle => {
                let waiting = matches!(next, Next::AwaitReply);
                tokio::select! {
                    biased;
                    _ = closed.cancelled() => {
                        head_in_flight = waiting;
                        break;
                    }
                    _ = shared.wake.notified() => {}
                    r = conn.read_idle() => {
                        if let Err(e) = r {
                            if waiting {
                                // The error belongs to the request in flight.
                                let _ = shared.lock().queue.pop_front();
                                settle(&reply, NativeCallResult::err(e));
                            } else {
                                end_error = Some(e);
                            }
                            break;
                        }
                    }
                }
            }
        }
    }
    let by_close = closed.is_cancelled();
    let peer = conn.peer().to_string();
    let queued = {
        let mut st = shared.lock();
        st.done = true;
        st.writer = None;
        if st.busy {
            st.busy = false;
            BUSY_CONNECTIONS.fetch_sub(1, Ordering::Relaxed);
        }
        st.idle_error = end_error;
        if !by_close {
            st.ended_on_error = Some(peer.clone());
        }
        std::mem::take(&mut st.queue)
    };
    conn.close();
    for (i, _) in queued.into_iter().enumerate() {
        let e = if i == 0 && head_in_flight {
            aborted_error()
        } else if by_close {
            closed_error()
        } else {
            peer_closed_error(&peer)
        };
        settle(&reply, NativeCallResult::err(e));
    }
}

/// A JS number that must be an integer in `min..=max`, or absent.
pub(super) fn opt_int_arg(
    name: &str,
    v: Option<f64>,
    min: u64,
    max: u64,
) -> core::Result<Option<u64>> {
    v.map(|v| int_arg(name, v, min, max)).transpose()
}

/// Low level: one connection, one method per protocol command. Requests run one at a time in
/// call order on a task that owns the connection and answers each through `onReply`; a method
/// returns a number when the request is queued (see `submit`) or the result itself when it is
/// settled at once (arguments are validated, `INVALID_ARGUMENT`, before anything is queued).
///
/// Plain TCP, nothing in flight: the request is written here, on the JS thread (a non-blocking
/// write on a second handle of the socket), and the task is not woken for it; the reply wakes
/// it. That saves a thread wake-up per request; the reply deadline is then kept by the JS side
/// (`expire`). Requests queued behind one in flight, TLS, and partial writes go through the
/// task as before.
#[napi]
pub struct NativeDflockdConnection {
    shared: Arc<Shared>,
    closed: CancellationToken,
}

#[napi]
impl NativeDflockdConnection {
    /// Connect (TCP, TLS when `tls` is given, then `auth` when given). `onReply` receives the
    /// result of every queued request, one call per request, in call order.
    #[napi(
        ts_return_type = "Promise<NativeConnectionResult>",
        ts_args_type = "options: NativeConnectOptions, onReply: (result: NativeCallResult) => void"
    )]
    pub fn connect<'env>(
        env: &'env Env,
        options: NativeConnectOptions,
        on_reply: Function<NativeCallResult, ()>,
    ) -> napi::Result<PromiseRaw<'env, NativeConnectionResult>> {
        let reply: Reply = on_reply
            .build_threadsafe_function::<NativeCallResult>()
            .weak::<true>()
            .callee_handled::<false>()
            .build()?;
        let opts = connect_options(
            &options.server,
            &options.tls,
            &options.auth,
            options.connect_timeout_ms,
            options.socket_timeout_ms,
        );
        let socket_timeout = opts
            .as_ref()
            .map(|o| o.socket_timeout)
            .unwrap_or(core::connection::DEFAULT_SOCKET_TIMEOUT);
        env.spawn_future(async move {
            let conn = match opts {
                Ok(o) => Connection::connect(&o).await,
                Err(e) => Err(e),
            };
            Ok(match conn {
                Ok(mut conn) => {
                    let shared = Arc::new(Shared {
                        state: std::sync::Mutex::new(State {
                            queue: VecDeque::new(),
                            busy: false,
                            next_seq: 0,
                            expired: None,
                            writer: conn.take_writer(),
                            wbuf: Vec::with_capacity(128),
                            done: false,
                            idle_error: None,
                            ended_on_error: None,
                        }),
                        wake: Notify::new(),
                        socket_timeout,
                    });
                    let closed = CancellationToken::new();
                    tokio::spawn(connection_task(conn, shared.clone(), closed.clone(), reply));
                    NativeConnectionResult {
                        ok: true,
                        value: Some(NativeDflockdConnection { shared, closed }),
                        error: None,
                    }
                }
                Err(e) => NativeConnectionResult {
                    ok: false,
                    value: None,
                    error: Some(e.into()),
                },
            })
        })
    }

    /// Queue `op` and return a number (its result goes to `onReply`): the reply deadline in ms
    /// the caller enforces with `expire` (the request was written from this thread), or 0 (the
    /// connection task enforces it). Or return the result at once (the validation error, or the
    /// connection is closed; `onReply` is then not called).
    pub(super) fn submit(&self, op: core::Result<Op>) -> Either<f64, NativeCallResult> {
        let op = match op {
            Ok(op) if !self.closed.is_cancelled() => op,
            Ok(_) => return Either::B(NativeCallResult::err(closed_error())),
            Err(e) => return Either::B(NativeCallResult::err(e)),
        };
        let mut guard = self.shared.lock();
        let st = &mut *guard;
        if st.done {
            let e = match (st.idle_error.take(), &st.ended_on_error) {
                (Some(e), _) => e,
                (None, Some(peer)) => peer_closed_error(peer),
                (None, None) => closed_error(),
            };
            return Either::B(NativeCallResult::err(e));
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let mut written = 0;
        let mut direct = None;
        if !st.busy {
            st.busy = true;
            let others_busy =
                BUSY_CONNECTIONS.fetch_add(1, Ordering::Relaxed) >= DIRECT_WRITE_MAX_BUSY;
            if let (false, Some(writer)) = (others_busy, &st.writer) {
                st.wbuf.clear();
                // An encoding error is left to the task, which reports it as before.
                if let Ok(blocking) = op.encode(&mut st.wbuf) {
                    // Non-blocking (the descriptor is shared with the tokio socket); WouldBlock
                    // or an error leaves the (rest of the) write to the task.
                    let mut w: &std::net::TcpStream = writer;
                    if let Ok(n) = w.write(&st.wbuf) {
                        written = n;
                    }
                    if written == st.wbuf.len() {
                        direct = Some(match blocking {
                            Some(s) => {
                                Duration::from_secs(s.min(core::protocol::MAX_SECONDS))
                                    + core::connection::BLOCKING_REPLY_MARGIN
                            }
                            None => self.shared.socket_timeout,
                        });
                    }
                }
            }
        }
        st.queue.push_back(Queued {
            op,
            seq,
            written,
            direct: direct.is_some(),
            limit: direct.unwrap_or_default(),
        });
        drop(guard);
        match direct {
            Some(limit) => Either::A(limit.as_millis() as f64),
            None => {
                self.shared.wake.notify_one();
                Either::A(0.0)
            }
        }
    }

    /// The reply to queued request number `seq` (counting from 0) is overdue: if it is still
    /// awaited, it fails with `TIMEOUT` and the connection closes.
    #[napi]
    pub fn expire(&self, seq: f64) {
        if seq.is_finite() && seq >= 0.0 {
            self.shared.lock().expired = Some(seq as u64);
            self.shared.wake.notify_one();
        }
    }

    /// `l key timeout [ttl]` (or `sl key timeout limit [ttl]` when `limit` is given): resolves
    /// `{ok, token, lease}`; a server `timeout` is `{ok: false, error: {code: 'TIMEOUT', reply:
    /// 'timeout'}}`.
    #[napi]
    pub fn lock(
        &self,
        key: String,
        timeout_s: f64,
        lease_ttl_s: Option<f64>,
        limit: Option<f64>,
    ) -> Either<f64, NativeCallResult> {
        let max = core::protocol::MAX_SECONDS;
        let op = (|| {
            Ok(Op::Lock {
                timeout_s: int_arg("acquireTimeoutS", timeout_s, 0, max)?,
                ttl_s: opt_int_arg("leaseTtlS", lease_ttl_s, 1, max)?,
                limit: opt_int_arg("limit", limit, 1, max)?,
                key,
            })
        })();
        self.submit(op)
    }

    /// `r key token` (`sr` when `sem`): resolves `{ok}` on exactly `ok`.
    #[napi]
    pub fn release(&self, key: String, token: String, sem: bool) -> Either<f64, NativeCallResult> {
        self.submit(Ok(Op::Release { key, token, sem }))
    }

    /// `n key token [ttl]` (`sn` when `sem`): resolves `{ok, lease}`.
    #[napi]
    pub fn renew(
        &self,
        key: String,
        token: String,
        lease_ttl_s: Option<f64>,
        sem: bool,
    ) -> Either<f64, NativeCallResult> {
        let op =
            opt_int_arg("leaseTtlS", lease_ttl_s, 1, core::protocol::MAX_SECONDS).map(|ttl_s| {
                Op::Renew {
                    key,
                    token,
                    ttl_s,
                    sem,
                }
            });
        self.submit(op)
    }

    /// `e key [ttl]` (or `se key limit [ttl]` when `limit` is given): resolves
    /// `{ok, status: 'acquired', token, lease}` or `{ok, status: 'queued'}`.
    #[napi]
    pub fn enqueue(
        &self,
        key: String,
        lease_ttl_s: Option<f64>,
        limit: Option<f64>,
    ) -> Either<f64, NativeCallResult> {
        let max = core::protocol::MAX_SECONDS;
        let op = (|| {
            Ok(Op::Enqueue {
                ttl_s: opt_int_arg("leaseTtlS", lease_ttl_s, 1, max)?,
                limit: opt_int_arg("limit", limit, 1, max)?,
                key,
            })
        })();
        self.submit(op)
    }

    /// `w key timeout` (`sw` when `sem`): like `lock`.
    #[napi]
    pub fn wait(&self, key: String, timeout_s: f64, sem: bool) -> Either<f64, NativeCallResult> {
        let op =
            int_arg("waitTimeoutS", timeout_s, 0, core::protocol::MAX_SECONDS).map(|timeout_s| {
                Op::Wait {
                    key,
                    timeout_s,
                    sem,
                }
            });
        self.submit(op)
    }

    /// `stats`: resolves `{ok, text}` with the JSON text after `ok ` (Go server only).
    #[napi]
    pub fn stats(&self) -> Either<f64, NativeCallResult> {
        self.submit(Ok(Op::Stats))
    }

    /// Send one request (the three lines `cmd`, `key`, `arg`; framing validated first:
    /// lowercase command word, key rules for keyed commands, no CR/LF/NUL, lines <= 256 bytes)
    /// and resolve `{ok, text}` with the raw reply line (one trailing CR stripped).
    #[napi]
    pub fn request(&self, cmd: String, key: String, arg: String) -> Either<f64, NativeCallResult> {
        self.submit(Ok(Op::Raw { cmd, key, arg }))
    }

    /// Synchronous and idempotent: close the connection (an in-flight request resolves
    /// `ABORTED`, queued ones `CONNECTION_ERROR`). The server auto-releases what this
    /// connection held.
    #[napi]
    pub fn close(&self) {
        self.closed.cancel();
    }
}

impl Drop for NativeDflockdConnection {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}
