//! napi binding of the dflockd client (thin layer over `sema_core::dflockd`).
//!
//! Every async method RESOLVES with a result object and never rejects for expected failures:
//! `{ ok: true, value } | { ok: false, error: { code, message, reply? } }`. Background renewal
//! runs as tokio tasks and loss callbacks use weak threadsafe functions, so nothing keeps Node
//! alive except an in-flight acquire/enqueue/wait promise.

use std::sync::atomic::{AtomicUsize, Ordering};
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
use std::collections::VecDeque;
use std::io::Write as _;

use napi::bindgen_prelude::Either;
use tokio::sync::Notify;
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
    /// `false` = accept any server certificate (handshake signatures still checked).
    pub reject_unauthorized: Option<bool>,
    /// PEM client certificate chain (with `key`), for servers that ask for one.
    pub cert: Option<String>,
    /// PEM private key of `cert`.
    pub key: Option<String>,
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
    /// Timeout of `acquire()` in ms, replacing `acquireTimeoutS`: the server gets the ceiling in
    /// seconds and the client stops waiting at this many ms (0 = try once).
    pub acquire_timeout_ms: Option<f64>,
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
    opts.tls = match tls {
        None => None,
        Some(t) => Some(TlsOptions {
            ca_pem: t.ca.clone(),
            servername: t.servername.clone(),
            accept_invalid_certs: t.reject_unauthorized == Some(false),
            client_cert: match (&t.cert, &t.key) {
                (Some(c), Some(k)) => Some((c.clone(), k.clone())),
                (None, None) => None,
                _ => {
                    return Err(invalid(
                        "tls.cert and tls.key go together: give both or neither".into(),
                    ))
                }
            },
        }),
    };
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
    if let Some(ms) = o.acquire_timeout_ms {
        if !(ms.is_finite() && ms >= 0.0 && ms <= max as f64 * 1000.0) {
            return Err(invalid(format!(
                "timeout must be a number of milliseconds between 0 and {}, got {ms}",
                max * 1000
            )));
        }
        p.acquire_timeout_s = (ms / 1000.0).ceil() as u64;
        p.acquire_deadline = (ms > 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
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

impl Op {
    /// Encode the request exactly as the connection will (validating it); returns the timeout a
    /// blocking command gives the server, in seconds.
    fn encode(&self, out: &mut Vec<u8>) -> core::Result<Option<u64>> {
        use core::Request as R;
        let req = match self {
            Op::Lock {
                key,
                timeout_s,
                ttl_s,
                limit: None,
            } => R::Lock {
                key,
                timeout_s: *timeout_s,
                ttl_s: *ttl_s,
            },
            Op::Lock {
                key,
                timeout_s,
                ttl_s,
                limit: Some(limit),
            } => R::SemLock {
                key,
                timeout_s: *timeout_s,
                limit: *limit,
                ttl_s: *ttl_s,
            },
            Op::Release { key, token, sem } => match sem {
                false => R::Release { key, token },
                true => R::SemRelease { key, token },
            },
            Op::Renew {
                key,
                token,
                ttl_s,
                sem,
            } => match sem {
                false => R::Renew {
                    key,
                    token,
                    ttl_s: *ttl_s,
                },
                true => R::SemRenew {
                    key,
                    token,
                    ttl_s: *ttl_s,
                },
            },
            Op::Enqueue {
                key,
                ttl_s,
                limit: None,
            } => R::Enqueue { key, ttl_s: *ttl_s },
            Op::Enqueue {
                key,
                ttl_s,
                limit: Some(limit),
            } => R::SemEnqueue {
                key,
                limit: *limit,
                ttl_s: *ttl_s,
            },
            Op::Wait {
                key,
                timeout_s,
                sem,
            } => match sem {
                false => R::Wait {
                    key,
                    timeout_s: *timeout_s,
                },
                true => R::SemWait {
                    key,
                    timeout_s: *timeout_s,
                },
            },
            Op::Stats => R::Stats,
            Op::Raw { cmd, key, arg } => {
                let (bytes, blocking) = core::protocol::encode_raw(cmd, key, arg)?;
                out.extend_from_slice(&bytes);
                return Ok(blocking);
            }
        };
        req.encode_into(out)?;
        Ok(req.blocking_timeout_s())
    }
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

/// A queued request.
struct Queued {
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
struct State {
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
static BUSY_CONNECTIONS: AtomicUsize = AtomicUsize::new(0);

/// A request is written from the JS thread only while fewer than this many other connections
/// are busy. With few busy connections the tokio worker is often asleep and not waking it pays;
/// with many it is awake anyway, and the writes are better left to it than added to the JS
/// thread. Measured against an instant-reply server (client CPU per lock + release pair, pairs/s):
/// at 10 connections threshold 1 gave ~31 µs, 16 ~27 µs; at 100 connections, writing every
/// request from the JS thread gave ~22 µs and ~40 k/s, threshold 16 ~19.7 µs and ~52 k/s.
const DIRECT_WRITE_MAX_BUSY: usize = 16;

struct Shared {
    state: std::sync::Mutex<State>,
    wake: Notify,
    socket_timeout: Duration,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind: keep using it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn peer_closed_error(peer: &str) -> DflockdError {
    DflockdError::new(
        core::ErrorCode::ConnectionError,
        format!("connection to {peer} is closed"),
    )
}

fn aborted_error() -> DflockdError {
    DflockdError::new(
        core::ErrorCode::Aborted,
        "connection closed during the request",
    )
}

/// What the task does next.
enum Next {
    Run(Queued),
    /// The head request was written from the JS thread and its reply is not complete yet.
    AwaitReply,
    Expired(Queued),
    Idle,
}

/// The task that owns one connection: runs the queued requests one at a time, in call order,
/// until `close()` or the JS object is gone. A request written from the JS thread (plain TCP,
/// nothing in flight) does not wake this task: it is woken by the reply itself.
async fn connection_task(
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
fn opt_int_arg(name: &str, v: Option<f64>, min: u64, max: u64) -> core::Result<Option<u64>> {
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
    fn submit(&self, op: core::Result<Op>) -> Either<f64, NativeCallResult> {
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
