//! `NativeDflockdConnection`: the low-level connection (the dflockd TypeScript client's
//! functions), run on the JS thread's own event loop where the host's libuv can serve it.
//!
//! Connect (TCP, TLS handshake, auth) runs on tokio; then the socket is handed to the JS
//! thread (`on_loop`): a request is written by the call that makes it, the loop polls the
//! socket, and the reply is parsed and settled in the poll callback. One wake of the JS thread
//! per round trip and no other thread (the tokio path it replaces cost ~6 context switches per
//! lock + release pair, 3 threads per round trip). On a host whose libuv cannot serve (Bun,
//! Deno: `event_loop::loop_unusable`, decided before any libuv call) the connection stays on
//! tokio (`on_tokio`). This file only converts the class's values and picks the driver.

use std::rc::Rc;

use super::on_loop::Conn;
use super::on_tokio::TokioConn;
use super::ops::NativeCallResult;
use super::replies::Replies;
use super::*;
use crate::event_loop::loop_unusable;
use sema_core::dflockd::protocol::Encoded;
use sema_core::dflockd::Request;

/// The driver of one connection.
enum Driver {
    /// The JS thread's libuv loop.
    Loop(Rc<Conn>),
    /// A tokio task (hosts without a usable libuv).
    Tokio(Rc<TokioConn>),
}

/// Low level: one connection, one method per protocol command. Requests run one at a time in
/// call order; each is written when the one before it is answered. A method returns the
/// promise of its request's result, settled natively (`Replies`); a request refused at once
/// (arguments are validated, `INVALID_ARGUMENT`, before anything is queued; the connection is
/// closed) gets a promise already settled.
///
/// An idle connection never keeps Node alive; one with a request pending does, unless
/// `setRef(false)` was called.
#[napi]
pub struct NativeDflockdConnection {
    conn: Driver,
    /// The promises of the requests the driver has pending, in call order.
    replies: Rc<Replies>,
}

/// What every request method returns.
type Reply<'env> = napi::Result<PromiseRaw<'env, NativeCallResult>>;

impl NativeDflockdConnection {
    /// Queue `op` on the driver; its promise is queued first, so that whatever the driver
    /// settles meanwhile (an error that ends the connection) keeps the call order.
    fn submit<'env>(&self, env: &'env Env, op: core::Result<Encoded>) -> Reply<'env> {
        let promise = self.replies.promise(env)?;
        let refused = match &self.conn {
            Driver::Loop(c) => c.submit(op),
            Driver::Tokio(c) => c.submit(op),
        };
        if let Either::B(r) = refused {
            self.replies.settle_newest(r);
        }
        Ok(promise)
    }
}

#[napi]
impl NativeDflockdConnection {
    /// Connect (TCP, TLS when `tls` is given, then `auth` when given).
    #[napi(ts_return_type = "Promise<NativeResult<NativeDflockdConnection>>")]
    pub fn connect<'env>(
        env: &'env Env,
        options: NativeConnectOptions,
    ) -> napi::Result<PromiseRaw<'env, NativeResult<NativeDflockdConnection>>> {
        let opts = connect_options(
            &options.server,
            &options.tls,
            &options.auth,
            options.connect_timeout_ms,
            options.socket_timeout_ms,
        );
        // Before the first libuv call: on a host whose libuv cannot serve, tokio all along.
        let on_tokio = loop_unusable(env).is_some();
        let fut = async move {
            Ok(match opts {
                Ok(o) => Connection::connect(&o).await,
                Err(e) => Err(e),
            })
        };
        env.spawn_future_with_callback(fut, move |env, r| {
            let reply = match Replies::new(env, "sema-native:dflockd") {
                Ok(replies) => Rc::new(replies),
                Err(e) => {
                    return Ok(result(Err(DflockdError::new(
                        core::ErrorCode::ConnectionError,
                        format!("cannot set up the connection's replies: {}", e.reason),
                    ))))
                }
            };
            let replies = reply.clone();
            let opened = r.and_then(|c| {
                if on_tokio {
                    return TokioConn::open(env, c, reply).map(Driver::Tokio);
                }
                let Some(stream) = c.into_nonblocking() else {
                    reply.release();
                    return Err(DflockdError::new(
                        core::ErrorCode::ConnectionError,
                        "connection closed during setup",
                    ));
                };
                Conn::open(env, stream, reply).map(Driver::Loop)
            });
            if opened.is_err() {
                replies.release();
            }
            Ok(result(
                opened.map(|conn| NativeDflockdConnection { conn, replies }),
            ))
        })
    }

    /// Which driver runs this connection: `'event-loop'` (the JS thread's libuv loop) or
    /// `'tokio'` (a host whose libuv cannot serve, e.g. Bun or Deno, or `SEMA_NATIVE_LIBUV=off`).
    #[napi(getter, ts_return_type = "'event-loop' | 'tokio'")]
    pub fn driver(&self) -> &'static str {
        match self.conn {
            Driver::Loop(_) => "event-loop",
            Driver::Tokio(_) => "tokio",
        }
    }

    /// `l key timeout [ttl]` (or `sl key timeout limit [ttl]` when `limit` is given): resolves
    /// `{ok, token, lease}`; a server `timeout` is `{ok: false, error: {code: 'TIMEOUT', reply:
    /// 'timeout'}}`.
    #[napi(ts_return_type = "Promise<NativeResult<NativeReply>>")]
    pub fn lock<'env>(
        &self,
        env: &'env Env,
        key: String,
        timeout_s: f64,
        lease_ttl_s: Option<f64>,
        limit: Option<f64>,
    ) -> Reply<'env> {
        let max = core::protocol::MAX_SECONDS;
        let op = (|| {
            let timeout_s = int_arg("acquireTimeoutS", timeout_s, 0, max)?;
            let ttl_s = lease_ttl_arg(lease_ttl_s)?;
            let limit = opt_int_arg("limit", limit, 1, max)?;
            Encoded::new(&Request::lock(&key, timeout_s, ttl_s, limit))
        })();
        self.submit(env, op)
    }

    /// `r key token` (`sr` when `sem`): resolves `{ok}` on exactly `ok`.
    #[napi(ts_return_type = "Promise<NativeResult<NativeReply>>")]
    pub fn release<'env>(
        &self,
        env: &'env Env,
        key: String,
        token: String,
        sem: bool,
    ) -> Reply<'env> {
        self.submit(env, Encoded::new(&Request::release(&key, &token, sem)))
    }

    /// `n key token [ttl]` (`sn` when `sem`): resolves `{ok, lease}`.
    #[napi(ts_return_type = "Promise<NativeResult<NativeReply>>")]
    pub fn renew<'env>(
        &self,
        env: &'env Env,
        key: String,
        token: String,
        lease_ttl_s: Option<f64>,
        sem: bool,
    ) -> Reply<'env> {
        let op = lease_ttl_arg(lease_ttl_s)
            .and_then(|ttl_s| Encoded::new(&Request::renew(&key, &token, ttl_s, sem)));
        self.submit(env, op)
    }

    /// `e key [ttl]` (or `se key limit [ttl]` when `limit` is given): resolves
    /// `{ok, status: 'acquired', token, lease}` or `{ok, status: 'queued'}`.
    #[napi(ts_return_type = "Promise<NativeResult<NativeReply>>")]
    pub fn enqueue<'env>(
        &self,
        env: &'env Env,
        key: String,
        lease_ttl_s: Option<f64>,
        limit: Option<f64>,
    ) -> Reply<'env> {
        let max = core::protocol::MAX_SECONDS;
        let op = (|| {
            let ttl_s = lease_ttl_arg(lease_ttl_s)?;
            let limit = opt_int_arg("limit", limit, 1, max)?;
            Encoded::new(&Request::enqueue(&key, ttl_s, limit))
        })();
        self.submit(env, op)
    }

    /// `w key timeout` (`sw` when `sem`): like `lock`.
    #[napi(ts_return_type = "Promise<NativeResult<NativeReply>>")]
    pub fn wait<'env>(
        &self,
        env: &'env Env,
        key: String,
        timeout_s: f64,
        sem: bool,
    ) -> Reply<'env> {
        let op = int_arg("waitTimeoutS", timeout_s, 0, core::protocol::MAX_SECONDS)
            .and_then(|timeout_s| Encoded::new(&Request::wait(&key, timeout_s, sem)));
        self.submit(env, op)
    }

    /// `stats`: resolves `{ok, text}` with the JSON text after `ok ` (Go server only).
    #[napi(ts_return_type = "Promise<NativeResult<NativeReply>>")]
    pub fn stats<'env>(&self, env: &'env Env) -> Reply<'env> {
        self.submit(env, Encoded::new(&Request::Stats))
    }

    /// Send one request (the three lines `cmd`, `key`, `arg`; framing validated first:
    /// lowercase command word, key rules for keyed commands, no CR/LF/NUL, lines <= 256 bytes)
    /// and resolve `{ok, text}` with the raw reply line (one trailing CR stripped).
    #[napi(ts_return_type = "Promise<NativeResult<NativeReply>>")]
    pub fn request<'env>(
        &self,
        env: &'env Env,
        cmd: String,
        key: String,
        arg: String,
    ) -> Reply<'env> {
        self.submit(env, Encoded::raw(&cmd, &key, &arg))
    }

    /// Whether a pending request keeps the process alive: `true` (the default, as a Node socket
    /// after `ref()`) or `false` (after `unref()`). An idle connection never does.
    #[napi]
    pub fn set_ref(&self, on: bool) {
        match &self.conn {
            Driver::Loop(c) => c.set_ref(on),
            Driver::Tokio(c) => c.set_ref(on),
        }
    }

    /// Synchronous and idempotent: close the connection (an in-flight request resolves
    /// `ABORTED`, queued ones `CONNECTION_ERROR`, both before this returns). The server
    /// auto-releases what this connection held.
    #[napi]
    pub fn close(&self) {
        match &self.conn {
            Driver::Loop(c) => c.close(),
            Driver::Tokio(c) => c.close(),
        }
    }
}

impl Drop for NativeDflockdConnection {
    fn drop(&mut self) {
        match &self.conn {
            Driver::Loop(c) => c.collected(),
            Driver::Tokio(c) => c.collected(),
        }
    }
}
