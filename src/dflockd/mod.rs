//! napi binding of the dflockd client (thin layer over `sema_core::dflockd`), by concern:
//! option conversion and the free functions here, the lock/semaphore primitive in `primitive`,
//! the low-level connection's requests in `ops`, its queue on the JS thread's event loop
//! (`crate::event_loop`) in `on_loop`, and its JS class in `connection`.
//!
//! Every async method RESOLVES with a result object and never rejects for expected failures:
//! `{ ok: true, value } | { ok: false, error: { code, message, reply? } }`. Background renewal
//! runs as tokio tasks and loss callbacks use weak threadsafe functions, so nothing keeps Node
//! alive except an in-flight request.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::Either;
use napi::bindgen_prelude::{Function, PromiseRaw};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi::Env;
use napi_derive::napi;
use sema_core::dflockd::{
    self as core, AcquireReply, ConnectOptions, Connection, DflockdError, EnqueueOutcome,
    EnqueueReply, Primitive, PrimitiveOptions, TlsOptions,
};

use crate::result::{result, thrown, NativeResult, Thrown};

mod connection;
mod on_loop;
mod on_loop_lock;
mod on_tokio;
mod ops;
mod primitive;
mod replies;
mod steal;

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
    /// PEM text of CA certificates added to the system roots when `ca` is absent (the JS layer
    /// passes `NODE_EXTRA_CA_CERTS`'s file here).
    pub extra_ca: Option<String>,
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
    /// `'shared'` or `'exclusive'`: a shared (reader/writer) lock on the key; absent = a plain
    /// lock or semaphore.
    pub mode: Option<String>,
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

/// An enqueue's answer: `'acquired'` or `'queued'`.
fn enqueue_result(r: core::Result<EnqueueOutcome>) -> NativeResult<&'static str> {
    result(r.map(|outcome| match outcome {
        EnqueueOutcome::Acquired => "acquired",
        EnqueueOutcome::Queued => "queued",
    }))
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

/// A JS number that must be an integer in `min..=max`, or absent.
fn opt_int_arg(name: &str, v: Option<f64>, min: u64, max: u64) -> core::Result<Option<u64>> {
    v.map(|v| int_arg(name, v, min, max)).transpose()
}

/// A lease TTL in whole seconds (`leaseTtlS`), or absent: the option table's bounds (the JS layer
/// checks them first, with the unit named; this keeps a direct native call to the same rule).
fn lease_ttl_arg(v: Option<f64>) -> core::Result<Option<u64>> {
    match v {
        Some(v) if v.fract() == 0.0 && v > sema_core::options::MAX_LEASE_TTL_S as f64 => {
            Err(invalid(sema_core::options::lease_ttl_too_long(
                "leaseTtlS",
                v as u64,
            )))
        }
        _ => opt_int_arg("leaseTtlS", v, 1, sema_core::options::MAX_LEASE_TTL_S),
    }
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
    let port = int_arg("server.port", server.port, 1, u16::MAX as u64)?;
    let mut opts = ConnectOptions::new(server.host.clone(), port as u16);
    opts.tls = match tls {
        None => None,
        Some(t) => Some(TlsOptions {
            ca_pem: t.ca.clone(),
            extra_ca_pem: t.extra_ca.clone(),
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
    p.lease_ttl_s = lease_ttl_arg(o.lease_ttl_s)?;
    p.renew_ratio = o.renew_ratio;
    p.renew_max_interval = ms_arg(
        "renewMaxIntervalMs",
        o.renew_max_interval_ms,
        core::primitive::DEFAULT_RENEW_MAX_INTERVAL,
    )?;
    p.mode = o.mode.as_deref().map(core::Mode::parse).transpose()?;
    p.validate()?;
    Ok(p)
}

/// Validate primitive options synchronously, as the `NativeDflockdPrimitive` constructor
/// does (throws an Error with `code` `INVALID_ARGUMENT`), without building one.
#[napi(js_name = "dflockdValidateOptions")]
pub fn dflockd_validate_options(options: NativePrimitiveOptions) -> Result<(), Thrown> {
    primitive_options(&options).map_err(thrown)?;
    Ok(())
}

/// Connect, send `stats`, resolve the JSON text after `ok ` (Go server only), close.
#[napi(
    js_name = "dflockdStats",
    ts_return_type = "Promise<NativeResult<string>>"
)]
pub async fn dflockd_stats(options: NativeConnectOptions) -> napi::Result<NativeResult<String>> {
    let opts = match connect_options(
        &options.server,
        &options.tls,
        &options.auth,
        options.connect_timeout_ms,
        options.socket_timeout_ms,
    ) {
        Ok(o) => o,
        Err(e) => return Ok(result(Err(e))),
    };
    Ok(result(core::stats_json(&opts).await))
}

/// CRC-32/IEEE of the key's UTF-8 bytes modulo `numServers` (same as every dflockd client).
/// Throws (`code` `INVALID_ARGUMENT`) when `numServers` is not a positive integer.
#[napi(js_name = "stableHashShard")]
pub fn stable_hash_shard(key: String, num_servers: f64) -> Result<u32, Thrown> {
    let n = int_arg("numServers", num_servers, 1, u32::MAX as u64).map_err(thrown)?;
    core::stable_hash_shard(&key, n as u32).map_err(thrown)
}

/// Check a key as every request does (throws, `code` `INVALID_ARGUMENT`): non-empty, at most
/// 256 bytes, no space, tab, CR, LF or NUL.
#[napi(js_name = "dflockdValidateKey")]
pub fn dflockd_validate_key(key: String) -> Result<(), Thrown> {
    core::protocol::validate_key(&key).map_err(thrown)
}
