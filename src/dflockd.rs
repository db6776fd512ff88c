//! napi binding of the dflockd client (thin layer over `sema_core::dflockd`).
//!
//! Every async method RESOLVES with a result object and never rejects for expected failures:
//! `{ ok: true, value } | { ok: false, error: { code, message, reply? } }`. Background renewal
//! runs as tokio tasks and loss callbacks use weak threadsafe functions, so nothing keeps Node
//! alive except an in-flight acquire/enqueue/wait promise.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{FnArgs, Function, PromiseRaw};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Error, Status};
use napi_derive::napi;
use sema_core::dflockd::{
    self as core, AcquireReply, ConnectOptions, Connection, DflockdError, EnqueueOutcome,
    EnqueueReply, Primitive, PrimitiveOptions, TlsOptions,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::result::{
    bool_result, string_result, void_result, BoolResult, NativeError, StringResult, VoidResult,
};

/// A dflockd server address (already chosen by sharding).
#[napi(object)]
#[derive(Clone)]
pub struct NativeServer {
    /// Host name or IP address.
    pub host: String,
    /// TCP port (integer 1..65535).
    pub port: f64,
}

/// TLS settings; TLS is used when this object is present.
#[napi(object)]
#[derive(Clone)]
pub struct NativeTls {
    /// PEM text of the CA certificate(s) to trust instead of the system roots.
    pub ca: Option<String>,
    /// Name to verify the server certificate against (default: the host).
    pub servername: Option<String>,
}

/// Options of a `NativeDflockdPrimitive` (validated by the constructor).
#[napi(object, object_to_js = false)]
pub struct NativePrimitiveOptions {
    /// The key: non-empty, at most 256 bytes, no space, tab, CR, LF or NUL.
    pub key: String,
    /// 1 = lock (`l r n e w`); > 1 = semaphore slots (`sl sr sn se sw`, Go server only).
    pub limit: f64,
    /// Timeout of `acquire()` in whole seconds (0 = try once), at most 1e9.
    pub acquire_timeout_s: f64,
    /// Lease TTL in whole seconds (>= 1), sent on acquire, enqueue and every renew; absent =
    /// server default.
    pub lease_ttl_s: Option<f64>,
    /// The server to use.
    pub server: NativeServer,
    /// TLS settings (absent = plain TCP).
    pub tls: Option<NativeTls>,
    /// Auth token sent as the first request (absent = no auth; must not be empty).
    pub auth: Option<String>,
    /// Bound for TCP connect + TLS handshake in ms (default 10000).
    pub connect_timeout_ms: Option<f64>,
    /// Bound for the reply to a non-blocking command in ms (default 30000).
    pub socket_timeout_ms: Option<f64>,
    /// Fraction of the lease after which to renew (0 < r < 1).
    pub renew_ratio: f64,
    /// Upper bound between the starts of two renewals in ms (default 15000; keep below 0.6 ×
    /// the server's read timeout).
    pub renew_max_interval_ms: Option<f64>,
}

/// Connection options of `NativeDflockdConnection.connect` and `dflockdStats`.
#[napi(object, object_to_js = false)]
pub struct NativeConnectOptions {
    /// The server to use.
    pub server: NativeServer,
    /// TLS settings (absent = plain TCP).
    pub tls: Option<NativeTls>,
    /// Auth token sent as the first request (absent = no auth; must not be empty).
    pub auth: Option<String>,
    /// Bound for TCP connect + TLS handshake in ms (default 10000).
    pub connect_timeout_ms: Option<f64>,
    /// Bound for the reply to a non-blocking command in ms (default 30000).
    pub socket_timeout_ms: Option<f64>,
}

/// `{ ok: true, value: 'acquired' | 'queued' } | { ok: false, error }`.
#[napi(object)]
pub struct NativeEnqueueResult {
    /// Whether the call succeeded.
    pub ok: bool,
    /// The value when `ok`.
    #[napi(ts_type = "'acquired' | 'queued'")]
    pub value: Option<String>,
    /// The failure when not `ok`.
    pub error: Option<NativeError>,
}

/// `{ ok: true, value: NativeDflockdConnection } | { ok: false, error }`.
#[napi(object, object_from_js = false)]
pub struct NativeConnectionResult {
    /// Whether the call succeeded.
    pub ok: bool,
    /// The connection when `ok`.
    pub value: Option<NativeDflockdConnection>,
    /// The failure when not `ok`.
    pub error: Option<NativeError>,
}

fn enqueue_result(r: core::Result<EnqueueOutcome>) -> NativeEnqueueResult {
    match r {
        Ok(outcome) => NativeEnqueueResult {
            ok: true,
            value: Some(
                match outcome {
                    EnqueueOutcome::Acquired => "acquired",
                    EnqueueOutcome::Queued => "queued",
                }
                .to_string(),
            ),
            error: None,
        },
        Err(e) => NativeEnqueueResult {
            ok: false,
            value: None,
            error: Some(e.into()),
        },
    }
}

fn invalid_js(e: DflockdError) -> Error {
    Error::new(Status::InvalidArg, format!("{}: {}", e.code(), e.message()))
}

fn invalid(msg: String) -> DflockdError {
    DflockdError::new(core::ErrorCode::InvalidArgument, msg)
}

/// An integer-valued JS number in `min..=max`.
fn int_arg(name: &str, v: f64, min: u64, max: u64) -> core::Result<u64> {
    if !v.is_finite() || v.fract() != 0.0 || v < min as f64 || v > max as f64 {
        return Err(invalid(format!(
            "{name} must be an integer between {min} and {max}, got {v}"
        )));
    }
    Ok(v as u64)
}

/// A positive millisecond count (fractions rounded up), at most ~31.7 years; 0 = the default.
fn ms_arg(name: &str, v: Option<f64>, default: Duration) -> core::Result<Duration> {
    match v {
        None | Some(0.0) => Ok(default),
        Some(ms) if ms.is_finite() && ms > 0.0 && ms <= 1e12 => {
            Ok(Duration::from_millis(ms.ceil() as u64))
        }
        Some(ms) => Err(invalid(format!(
            "{name} must be a positive number of milliseconds, got {ms}"
        ))),
    }
}

fn connect_options(
    server: &NativeServer,
    tls: &Option<NativeTls>,
    auth: &Option<String>,
    connect_timeout_ms: Option<f64>,
    socket_timeout_ms: Option<f64>,
) -> core::Result<ConnectOptions> {
    let port = int_arg("server.port", server.port, 1, 65535)?;
    let mut opts = ConnectOptions::new(server.host.clone(), port as u16);
    opts.tls = tls.as_ref().map(|t| TlsOptions {
        ca_pem: t.ca.clone(),
        servername: t.servername.clone(),
    });
    opts.auth = auth.clone();
    opts.connect_timeout = ms_arg(
        "connectTimeoutMs",
        connect_timeout_ms,
        core::connection::DEFAULT_CONNECT_TIMEOUT,
    )?;
    opts.socket_timeout = ms_arg(
        "socketTimeoutMs",
        socket_timeout_ms,
        core::connection::DEFAULT_SOCKET_TIMEOUT,
    )?;
    opts.validate()?;
    Ok(opts)
}

fn primitive_options(o: &NativePrimitiveOptions) -> core::Result<PrimitiveOptions> {
    let connect = connect_options(
        &o.server,
        &o.tls,
        &o.auth,
        o.connect_timeout_ms,
        o.socket_timeout_ms,
    )?;
    let max = core::protocol::MAX_SECONDS;
    let mut p = PrimitiveOptions::new(o.key.clone(), connect);
    p.limit = int_arg("limit", o.limit, 1, max)?;
    p.acquire_timeout_s = int_arg("acquireTimeoutS", o.acquire_timeout_s, 0, max)?;
    p.lease_ttl_s = match o.lease_ttl_s {
        Some(t) => Some(int_arg("leaseTtlS", t, 1, max)?),
        None => None,
    };
    p.renew_ratio = o.renew_ratio;
    p.renew_max_interval = ms_arg(
        "renewMaxIntervalMs",
        o.renew_max_interval_ms,
        core::primitive::DEFAULT_RENEW_MAX_INTERVAL,
    )?;
    p.validate()?;
    Ok(p)
}

/// A distributed lock (limit 1) or semaphore slot (limit > 1) on one dflockd server, with
/// automatic renewal. One connection per held lock/slot; after a clean `release()` it is kept
/// for the next acquisition (see `adoptConnection`).
#[napi]
pub struct NativeDflockdPrimitive {
    inner: Arc<Primitive>,
}

#[napi]
impl NativeDflockdPrimitive {
    /// Validate the options (throws synchronously with a message starting
    /// `"INVALID_ARGUMENT: "` on bad options). No I/O happens here.
    #[napi(constructor)]
    pub fn new(options: NativePrimitiveOptions) -> napi::Result<Self> {
        let opts = primitive_options(&options).map_err(invalid_js)?;
        let inner = Primitive::new(opts).map_err(invalid_js)?;
        Ok(NativeDflockdPrimitive {
            inner: Arc::new(inner),
        })
    }

    /// Connect and acquire within `acquireTimeoutS`. Resolves `{ok: true, value: true}` when
    /// held (renewal started), `{ok: true, value: false}` on timeout.
    #[napi(ts_return_type = "Promise<BoolResult>")]
    pub fn acquire<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, BoolResult>> {
        // The ticket is taken now, on the JS thread, so a cancel() right after this call
        // aborts it even before the future first runs.
        let p = self.inner.clone();
        let ticket = p.ticket();
        env.spawn_future(async move { Ok(bool_result(p.acquire_with(ticket).await)) })
    }

    /// Phase one of a two-phase acquire: resolves `'acquired'` (held, renewal started) or
    /// `'queued'` (call `wait()` promptly).
    #[napi(ts_return_type = "Promise<NativeEnqueueResult>")]
    pub fn enqueue<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, NativeEnqueueResult>> {
        let p = self.inner.clone();
        let ticket = p.ticket();
        env.spawn_future(async move { Ok(enqueue_result(p.enqueue_with(ticket).await)) })
    }

    /// Phase two: wait up to `timeoutS` whole seconds for the grant. `true` = held (verified by
    /// an immediate renew; a stale grant gives `LOCK_LOST`), `false` = timed out (connection
    /// closed; enqueue again). After an `'acquired'` enqueue it resolves `true` at once.
    #[napi(ts_return_type = "Promise<BoolResult>")]
    pub fn wait<'env>(
        &self,
        env: &'env Env,
        timeout_s: f64,
    ) -> napi::Result<PromiseRaw<'env, BoolResult>> {
        let p = self.inner.clone();
        let ticket = p.ticket();
        let t = int_arg("timeoutS", timeout_s, 0, core::protocol::MAX_SECONDS);
        env.spawn_future(async move {
            Ok(match t {
                Ok(t) => bool_result(p.wait_with(ticket, t).await),
                Err(e) => bool_result(Err(e)),
            })
        })
    }
    /// Release the held lock/slot; after a clean `ok` the connection is kept (idle, unwatched)
    /// for the next `acquire()`/`enqueue()`, else closed. `NOT_LOCKED` when nothing is
    /// held, `LOCK_LOST` when it was lost before.
    #[napi(ts_return_type = "Promise<VoidResult>")]
    pub async fn release(&self) -> napi::Result<VoidResult> {
        let p = self.inner.clone();
        Ok(void_result(p.release().await))
    }

    /// Synchronous and idempotent: abort any in-flight operation, stop renewal and drop the
    /// connection without sending a release (the server auto-releases on disconnect).
    /// Also drops the loss callback: its threadsafe function (a libuv handle Node's event loop
    /// scans on every wakeup) is released now instead of when the object is collected.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
        self.inner.set_on_lost(None);
    }

    /// Abort an in-flight acquire/enqueue/wait: it resolves `{ok: false, error: {code: 'ABORTED'}}`.
    #[napi]
    pub fn cancel(&self) {
        self.inner.cancel();
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

    /// Register the loss callback `(key, token, reason) => void`, called at most once per held
    /// lock when renewal fails or the server drops the idle connection (closed, reset, or an
    /// unsolicited `error` before its read-timeout close; the server then releases the lock),
    /// never for `release()`/`close()`. `reason` says what happened. It is held weakly: it never
    /// keeps the process alive.
    #[napi(ts_args_type = "callback: (key: string, token: string, reason: string) => void")]
    pub fn on_lost(
        &self,
        callback: Function<FnArgs<(String, String, String)>, ()>,
    ) -> napi::Result<()> {
        let tsfn = callback
            .build_threadsafe_function::<FnArgs<(String, String, String)>>()
            .weak::<true>()
            .callee_handled::<false>()
            .build()?;
        let tsfn = Arc::new(tsfn);
        self.inner.set_on_lost(Some(Arc::new(
            move |key: &str, token: &str, reason: &str| {
                let _ = tsfn.call(
                    FnArgs::from((key.to_string(), token.to_string(), reason.to_string())),
                    ThreadsafeFunctionCallMode::NonBlocking,
                );
            },
        )));
        Ok(())
    }

    /// Take over the connection `previous` kept after its last clean `release()`, when both go
    /// to the same server with the same settings and this primitive is idle; the next
    /// `acquire()`/`enqueue()` then reuses it instead of connecting (a kept connection the
    /// server has dropped meanwhile is replaced silently). `previous` keeps nothing afterwards.
    /// Returns whether a connection was taken over.
    #[napi]
    pub fn adopt_connection(&self, previous: &NativeDflockdPrimitive) -> bool {
        self.inner.adopt_kept_connection(&previous.inner)
    }

    /// Whether a connection from a clean `release()` is kept for the next acquisition.
    #[napi(getter)]
    pub fn has_kept_connection(&self) -> bool {
        self.inner.has_kept_connection()
    }
}

/// Validate primitive options synchronously, as the `NativeDflockdPrimitive` constructor
/// does (throws `"INVALID_ARGUMENT: ..."`), without building one.
#[napi(js_name = "dflockdValidateOptions")]
pub fn dflockd_validate_options(options: NativePrimitiveOptions) -> napi::Result<()> {
    primitive_options(&options).map_err(invalid_js)?;
    Ok(())
}

/// Result of a `NativeDflockdConnection` call: `{ok: true, ...fields}` or
/// `{ok: false, error}`. A server `timeout` to `lock`/`wait` is `ok: false` with code
/// `TIMEOUT` and `reply: 'timeout'` (client-side time limits have no `reply`).
#[napi(object)]
pub struct NativeCallResult {
    /// Whether the call succeeded.
    pub ok: bool,
    /// `lock`/`wait`/`enqueue` (acquired): the lease token.
    pub token: Option<String>,
    /// `lock`/`wait`/`enqueue` (acquired): the lease granted, `renew`: the lease now applied
    /// (seconds; a bare `ok` to a renew gives the TTL sent, else 30).
    pub lease: Option<f64>,
    /// `enqueue`: `'acquired'` or `'queued'`.
    #[napi(ts_type = "'acquired' | 'queued'")]
    pub status: Option<String>,
    /// `stats`: the JSON text; `request`: the raw reply line.
    pub text: Option<String>,
    /// The failure when not `ok`.
    pub error: Option<NativeError>,
}

impl NativeCallResult {
    fn ok() -> Self {
        NativeCallResult {
            ok: true,
            token: None,
            lease: None,
            status: None,
            text: None,
            error: None,
        }
    }

    fn grant(g: core::Grant) -> Self {
        NativeCallResult {
            token: Some(g.token),
            lease: Some(g.lease_s as f64),
            ..Self::ok()
        }
    }

    fn text(t: String) -> Self {
        NativeCallResult {
            text: Some(t),
            ..Self::ok()
        }
    }

    fn err(e: DflockdError) -> Self {
        NativeCallResult {
            ok: false,
            error: Some(e.into()),
            ..Self::ok()
        }
    }
}

/// Lease the official clients assume when a renew reply does not say.
const FALLBACK_LEASE_S: u64 = 30;

/// One request for the connection task (owned copies of the JS arguments).
enum Op {
    Lock {
        key: String,
        timeout_s: u64,
        ttl_s: Option<u64>,
        limit: Option<u64>,
    },
    Release {
        key: String,
        token: String,
        sem: bool,
    },
    Renew {
        key: String,
        token: String,
        ttl_s: Option<u64>,
        sem: bool,
    },
    Enqueue {
        key: String,
        ttl_s: Option<u64>,
        limit: Option<u64>,
    },
    Wait {
        key: String,
        timeout_s: u64,
        sem: bool,
    },
    Stats,
    Raw {
        cmd: String,
        key: String,
        arg: String,
    },
}

/// The connection's reply callback: one threadsafe function per connection (weak: it never keeps
/// Node alive; `lib/dflockd.js` keeps a ref'd handle while requests are pending), called once per
/// queued request, in call order. A threadsafe function per request (what a `JsDeferred` is)
/// costs a libuv handle opened and closed plus a cleanup hook per request.
type Reply = ThreadsafeFunction<NativeCallResult, (), NativeCallResult, Status, false, true>;

fn settle(reply: &Reply, r: NativeCallResult) {
    // Fails only while the environment is being torn down: nobody is left to answer then.
    let _ = reply.call(r, ThreadsafeFunctionCallMode::NonBlocking);
}

fn timed_out(key: &str) -> DflockdError {
    DflockdError::new(
        core::ErrorCode::Timeout,
        format!("timeout acquiring '{key}'"),
    )
    .with_reply("timeout")
}

fn acquire_result(r: core::Result<AcquireReply>, key: &str) -> NativeCallResult {
    match r {
        Ok(AcquireReply::Granted(g)) => NativeCallResult::grant(g),
        Ok(AcquireReply::TimedOut) => NativeCallResult::err(timed_out(key)),
        Err(e) => NativeCallResult::err(e),
    }
}

/// Runs one request on the connection (the core validates, encodes and parses).
async fn run_op(conn: &mut Connection, op: Op) -> NativeCallResult {
    match op {
        Op::Lock {
            key,
            timeout_s,
            ttl_s,
            limit,
        } => {
            let r = match limit {
                None => conn.lock(&key, timeout_s, ttl_s).await,
                Some(n) => conn.sem_lock(&key, timeout_s, n, ttl_s).await,
            };
            acquire_result(r, &key)
        }
        Op::Wait {
            key,
            timeout_s,
            sem,
        } => {
            let r = if sem {
                conn.sem_wait(&key, timeout_s).await
            } else {
                conn.wait(&key, timeout_s).await
            };
            acquire_result(r, &key)
        }
        Op::Release { key, token, sem } => {
            let r = if sem {
                conn.sem_release(&key, &token).await
            } else {
                conn.release(&key, &token).await
            };
            match r {
                Ok(()) => NativeCallResult::ok(),
                Err(e) => NativeCallResult::err(e),
            }
        }
        Op::Renew {
            key,
            token,
            ttl_s,
            sem,
        } => {
            let r = if sem {
                conn.sem_renew(&key, &token, ttl_s).await
            } else {
                conn.renew(&key, &token, ttl_s).await
            };
            match r {
                Ok(lease) => NativeCallResult {
                    lease: Some(lease.or(ttl_s).unwrap_or(FALLBACK_LEASE_S) as f64),
                    ..NativeCallResult::ok()
                },
                Err(e) => NativeCallResult::err(e),
            }
        }
        Op::Enqueue { key, ttl_s, limit } => {
            let r = match limit {
                None => conn.enqueue(&key, ttl_s).await,
                Some(n) => conn.sem_enqueue(&key, n, ttl_s).await,
            };
            match r {
                Ok(EnqueueReply::Acquired(g)) => NativeCallResult {
                    status: Some("acquired".to_string()),
                    ..NativeCallResult::grant(g)
                },
                Ok(EnqueueReply::Queued) => NativeCallResult {
                    status: Some("queued".to_string()),
                    ..NativeCallResult::ok()
                },
                Err(e) => NativeCallResult::err(e),
            }
        }
        Op::Stats => match conn.stats_json().await {
            Ok(json) => NativeCallResult::text(json),
            Err(e) => NativeCallResult::err(e),
        },
        Op::Raw { cmd, key, arg } => match conn.request_raw(&cmd, &key, &arg).await {
            Ok(line) => NativeCallResult::text(line),
            Err(e) => NativeCallResult::err(e),
        },
    }
}

fn closed_error() -> DflockdError {
    DflockdError::new(core::ErrorCode::ConnectionError, "connection is closed")
}

/// The task that owns one connection: runs the queued requests one at a time, in call order
/// (no lock: nothing else touches the connection), until `close()` or the JS object is gone.
async fn connection_task(
    mut conn: Connection,
    mut rx: mpsc::UnboundedReceiver<Op>,
    closed: CancellationToken,
    reply: Reply,
) {
    loop {
        let next = tokio::select! {
            biased;
            _ = closed.cancelled() => None,
            job = rx.recv() => job,
        };
        let Some(op) = next else { break };
        let r = tokio::select! {
            biased;
            _ = closed.cancelled() => {
                settle(&reply, NativeCallResult::err(DflockdError::new(
                    core::ErrorCode::Aborted,
                    "connection closed during the request",
                )));
                break;
            }
            r = run_op(&mut conn, op) => r,
        };
        settle(&reply, r);
    }
    conn.close();
    rx.close();
    while rx.try_recv().is_ok() {
        settle(&reply, NativeCallResult::err(closed_error()));
    }
}

/// A JS number that must be an integer in `min..=max`, or absent.
fn opt_int_arg(name: &str, v: Option<f64>, min: u64, max: u64) -> core::Result<Option<u64>> {
    v.map(|v| int_arg(name, v, min, max)).transpose()
}

/// Low level: one connection, one method per protocol command. Requests run one at a time in
/// call order on a task that owns the connection; arguments are validated (and the promise
/// resolved with `INVALID_ARGUMENT`) before anything is queued.
#[napi]
pub struct NativeDflockdConnection {
    tx: mpsc::UnboundedSender<Op>,
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
        env.spawn_future(async move {
            let conn = match opts {
                Ok(o) => Connection::connect(&o).await,
                Err(e) => Err(e),
            };
            Ok(match conn {
                Ok(conn) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let closed = CancellationToken::new();
                    tokio::spawn(connection_task(conn, rx, closed.clone(), reply));
                    NativeConnectionResult {
                        ok: true,
                        value: Some(NativeDflockdConnection { tx, closed }),
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

    /// Queue `op` and return `null` (its result goes to `onReply`), or return the result at once
    /// (the validation error, or the connection is closed; `onReply` is then not called).
    fn submit(&self, op: core::Result<Op>) -> Option<NativeCallResult> {
        let op = match op {
            Ok(op) if !self.closed.is_cancelled() => op,
            Ok(_) => return Some(NativeCallResult::err(closed_error())),
            Err(e) => return Some(NativeCallResult::err(e)),
        };
        match self.tx.send(op) {
            Ok(()) => None,
            Err(_) => Some(NativeCallResult::err(closed_error())),
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
    ) -> Option<NativeCallResult> {
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
    pub fn release(&self, key: String, token: String, sem: bool) -> Option<NativeCallResult> {
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
    ) -> Option<NativeCallResult> {
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
    ) -> Option<NativeCallResult> {
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
    pub fn wait(&self, key: String, timeout_s: f64, sem: bool) -> Option<NativeCallResult> {
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
    pub fn stats(&self) -> Option<NativeCallResult> {
        self.submit(Ok(Op::Stats))
    }

    /// Send one request (the three lines `cmd`, `key`, `arg`; framing validated first:
    /// lowercase command word, key rules for keyed commands, no CR/LF/NUL, lines <= 256 bytes)
    /// and resolve `{ok, text}` with the raw reply line (one trailing CR stripped).
    #[napi]
    pub fn request(&self, cmd: String, key: String, arg: String) -> Option<NativeCallResult> {
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

/// Connect, send `stats`, resolve the JSON text after `ok ` (Go server only), close.
#[napi(js_name = "dflockdStats", ts_return_type = "Promise<StringResult>")]
pub async fn dflockd_stats(options: NativeConnectOptions) -> napi::Result<StringResult> {
    let opts = match connect_options(
        &options.server,
        &options.tls,
        &options.auth,
        options.connect_timeout_ms,
        options.socket_timeout_ms,
    ) {
        Ok(o) => o,
        Err(e) => return Ok(string_result(Err(e))),
    };
    Ok(string_result(core::stats_json(&opts).await))
}

/// CRC-32/IEEE of the key's UTF-8 bytes modulo `numServers` (same as every dflockd client).
/// Throws `"INVALID_ARGUMENT: ..."` when `numServers` is not a positive integer.
#[napi(js_name = "stableHashShard")]
pub fn stable_hash_shard(key: String, num_servers: f64) -> napi::Result<u32> {
    let n = int_arg("numServers", num_servers, 1, u32::MAX as u64).map_err(invalid_js)?;
    core::stable_hash_shard(&key, n as u32).map_err(invalid_js)
}

/// Check a key as every request does (throws `"INVALID_ARGUMENT: ..."`): non-empty, at most
/// 256 bytes, no space, tab, CR, LF or NUL.
#[napi(js_name = "dflockdValidateKey")]
pub fn dflockd_validate_key(key: String) -> napi::Result<()> {
    core::protocol::validate_key(&key).map_err(invalid_js)
}
