//! One method per protocol command on [`Connection`] (`auth`, `l r n e w`, `sl sr sn se sw`,
//! `stats`): each encodes its [`Request`], runs one exchange and parses the reply with the
//! parser [`protocol`] has for it.

use super::Connection;
use crate::dflockd::error::{ErrorCode, Result};
use crate::dflockd::protocol::{self, AcquireReply, EnqueueReply, Request};
use crate::dflockd::stats::{parse_stats, Stats};
use crate::dflockd::ConnectOptions;

impl Connection {
    /// Send a request whose reply is parsed by `parse` (given the line and the request's
    /// [`Request::label`]) straight from the read buffer; a protocol error closes the connection.
    async fn call<T>(
        &mut self,
        req: Request<'_>,
        parse: impl FnOnce(&str, &'static str) -> Result<T>,
    ) -> Result<T> {
        let limit = self.reply_limit(req.blocking_timeout_s());
        self.call_within(req, limit, parse).await
    }

    /// [`Connection::call`] with the reply awaited for `limit`.
    async fn call_within<T>(
        &mut self,
        req: Request<'_>,
        limit: std::time::Duration,
        parse: impl FnOnce(&str, &'static str) -> Result<T>,
    ) -> Result<T> {
        self.wbuf.clear();
        req.encode_into(&mut self.wbuf)?;
        let end = self.exchange_within(limit).await?;
        let what = req.label();
        let r = self
            .lines
            .line(end, &self.peer)
            .and_then(|l| parse(l, what));
        self.lines.consume(end);
        match r {
            Err(e) if e.code() == ErrorCode::ProtocolError => Err(self.fail(e)),
            r => r,
        }
    }

    /// Several requests written at once, then their replies read in order (the server answers
    /// the requests of one connection strictly in order): one round trip of wall time for all of
    /// them, as a shared lock's writer takes, renews and releases its parts. Each reply waits at
    /// most `limit` after the previous one; `first_answered` runs when the first reply is in
    /// (dropped unrun when the call fails before). A reply the server refused is an `Err` in its place, a broken
    /// connection (or a protocol error, which closes it) fails the whole call.
    pub async fn call_pipelined<T>(
        &mut self,
        reqs: &[Request<'_>],
        limit: std::time::Duration,
        parse: impl Fn(&str, &'static str) -> Result<T>,
        first_answered: impl FnOnce() + Send,
    ) -> Result<Vec<Result<T>>> {
        let mut first_answered = Some(first_answered);
        if reqs.is_empty() {
            return Ok(Vec::new());
        }
        self.wbuf.clear();
        for req in reqs {
            req.encode_into(&mut self.wbuf)?;
        }
        let mut out = Vec::with_capacity(reqs.len());
        for (i, req) in reqs.iter().enumerate() {
            let end = if i == 0 {
                self.exchange_within(limit).await?
            } else {
                // Out of sync until this reply is read, should the call be dropped half-way.
                self.busy = true;
                let end = match self.read_line(limit).await {
                    Ok(end) => end,
                    Err(e) => return Err(self.fail(e)),
                };
                self.busy = false;
                end
            };
            let r = self
                .lines
                .line(end, &self.peer)
                .and_then(|l| parse(l, req.label()));
            self.lines.consume(end);
            if let Some(f) = first_answered.take() {
                f();
            }
            match r {
                Err(e) if e.code() == ErrorCode::ProtocolError => return Err(self.fail(e)),
                r => out.push(r),
            }
        }
        Ok(out)
    }

    /// `auth`: `ok` or `AUTH_FAILED`.
    pub async fn auth(&mut self, token: &str) -> Result<()> {
        let r = self
            .call(Request::Auth { token }, |l, _| {
                protocol::parse_auth_reply(l)
            })
            .await;
        if r.is_err() {
            self.close();
        }
        r
    }

    /// `l key timeout [ttl]`.
    pub async fn lock(
        &mut self,
        key: &str,
        timeout_s: u64,
        ttl_s: Option<u64>,
    ) -> Result<AcquireReply> {
        self.call(
            Request::Lock {
                key,
                timeout_s,
                ttl_s,
            },
            protocol::parse_acquire_reply,
        )
        .await
    }

    /// `sl key timeout limit [ttl]`.
    pub async fn sem_lock(
        &mut self,
        key: &str,
        timeout_s: u64,
        limit: u64,
        ttl_s: Option<u64>,
    ) -> Result<AcquireReply> {
        self.call(
            Request::SemLock {
                key,
                timeout_s,
                limit,
                ttl_s,
            },
            protocol::parse_acquire_reply,
        )
        .await
    }

    /// `r key token` → exactly `ok`.
    pub async fn release(&mut self, key: &str, token: &str) -> Result<()> {
        self.call(
            Request::Release { key, token },
            protocol::parse_release_reply,
        )
        .await
    }

    /// `sr key token` → exactly `ok`.
    pub async fn sem_release(&mut self, key: &str, token: &str) -> Result<()> {
        self.call(
            Request::SemRelease { key, token },
            protocol::parse_release_reply,
        )
        .await
    }

    /// `n key token [ttl]` → the lease the server reports (`None` for a bare `ok`).
    pub async fn renew(
        &mut self,
        key: &str,
        token: &str,
        ttl_s: Option<u64>,
    ) -> Result<Option<u64>> {
        self.call(
            Request::Renew { key, token, ttl_s },
            protocol::parse_renew_reply,
        )
        .await
    }

    /// `sn key token [ttl]`.
    pub async fn sem_renew(
        &mut self,
        key: &str,
        token: &str,
        ttl_s: Option<u64>,
    ) -> Result<Option<u64>> {
        self.call(
            Request::SemRenew { key, token, ttl_s },
            protocol::parse_renew_reply,
        )
        .await
    }

    /// `n`/`sn` (`sem`) with its reply awaited for `limit` instead of the socket timeout: the
    /// renewal task bounds a renew by the lease it is meant to extend, not by a fixed timeout.
    pub async fn renew_within(
        &mut self,
        key: &str,
        token: &str,
        ttl_s: Option<u64>,
        sem: bool,
        limit: std::time::Duration,
    ) -> Result<Option<u64>> {
        let req = Request::renew(key, token, ttl_s, sem);
        self.call_within(req, limit, protocol::parse_renew_reply)
            .await
    }

    /// `r`/`sr` (`sem`) with its reply awaited for `limit`.
    pub async fn release_within(
        &mut self,
        key: &str,
        token: &str,
        sem: bool,
        limit: std::time::Duration,
    ) -> Result<()> {
        let req = Request::release(key, token, sem);
        self.call_within(req, limit, protocol::parse_release_reply)
            .await
    }

    /// `l`/`sl` (`limit` > 1) with `timeout_s`.
    pub async fn acquire_any(
        &mut self,
        key: &str,
        timeout_s: u64,
        limit: u64,
        ttl_s: Option<u64>,
    ) -> Result<AcquireReply> {
        let req = Request::lock(key, timeout_s, ttl_s, (limit != 1).then_some(limit));
        self.call(req, protocol::parse_acquire_reply).await
    }

    /// `e key [ttl]`.
    pub async fn enqueue(&mut self, key: &str, ttl_s: Option<u64>) -> Result<EnqueueReply> {
        self.call(
            Request::Enqueue { key, ttl_s },
            protocol::parse_enqueue_reply,
        )
        .await
    }

    /// `se key limit [ttl]`.
    pub async fn sem_enqueue(
        &mut self,
        key: &str,
        limit: u64,
        ttl_s: Option<u64>,
    ) -> Result<EnqueueReply> {
        self.call(
            Request::SemEnqueue { key, limit, ttl_s },
            protocol::parse_enqueue_reply,
        )
        .await
    }

    /// `w key timeout`.
    pub async fn wait(&mut self, key: &str, timeout_s: u64) -> Result<AcquireReply> {
        self.call(
            Request::Wait { key, timeout_s },
            protocol::parse_acquire_reply,
        )
        .await
    }

    /// `sw key timeout`.
    pub async fn sem_wait(&mut self, key: &str, timeout_s: u64) -> Result<AcquireReply> {
        self.call(
            Request::SemWait { key, timeout_s },
            protocol::parse_acquire_reply,
        )
        .await
    }

    /// `stats` → the JSON text after `ok `.
    pub async fn stats_json(&mut self) -> Result<String> {
        self.call(Request::Stats, |l, _| {
            protocol::parse_stats_reply(l).map(str::to_string)
        })
        .await
    }

    /// `stats`, parsed.
    pub async fn stats(&mut self) -> Result<Stats> {
        let json = self.stats_json().await?;
        parse_stats(&json)
    }
}

/// Connect, send `stats`, return the JSON text, close.
pub async fn stats_json(opts: &ConnectOptions) -> Result<String> {
    let mut conn = Connection::connect(opts).await?;
    let r = conn.stats_json().await;
    conn.close();
    r
}
