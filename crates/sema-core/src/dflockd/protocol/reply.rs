//! A reply parsed for the request it answers: one dispatch from a [`Request`] to its reply
//! parser, for callers that hold requests of any command (the typed methods of
//! `Connection` call the parsers directly).

use super::{
    parse_acquire_reply, parse_auth_reply, parse_enqueue_reply, parse_release_reply,
    parse_renew_reply, parse_stats_reply, AcquireReply, EnqueueReply, Request,
};
use crate::dflockd::error::Result;

/// The meaning of a reply line, by the command it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `l`, `sl`, `w`, `sw`.
    Acquire(AcquireReply),
    /// `e`, `se`.
    Enqueue(EnqueueReply),
    /// `n`, `sn`: the lease the server reports (`None` for a bare `ok`).
    Renew(Option<u64>),
    /// `r`, `sr`: exactly `ok`.
    Release,
    /// `auth`: `ok`.
    Auth,
    /// `stats`: the JSON text after `ok `.
    Stats(String),
}

impl Request<'_> {
    /// The operation's name in error messages (`acquire`, `sem_wait`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            Request::Auth { .. } => "auth",
            Request::Lock { .. } => "acquire",
            Request::Release { .. } => "release",
            Request::Renew { .. } => "renew",
            Request::Enqueue { .. } => "enqueue",
            Request::Wait { .. } => "wait",
            Request::SemLock { .. } => "sem_acquire",
            Request::SemRelease { .. } => "sem_release",
            Request::SemRenew { .. } => "sem_renew",
            Request::SemEnqueue { .. } => "sem_enqueue",
            Request::SemWait { .. } => "sem_wait",
            Request::Stats => "stats",
        }
    }

    /// Parse `line` as the reply to this request (server errors and unexpected lines are
    /// errors, as from the typed methods).
    pub fn parse_reply(&self, line: &str) -> Result<Reply> {
        let what = self.label();
        Ok(match self {
            Request::Lock { .. }
            | Request::SemLock { .. }
            | Request::Wait { .. }
            | Request::SemWait { .. } => Reply::Acquire(parse_acquire_reply(line, what)?),
            Request::Enqueue { .. } | Request::SemEnqueue { .. } => {
                Reply::Enqueue(parse_enqueue_reply(line, what)?)
            }
            Request::Renew { .. } | Request::SemRenew { .. } => {
                Reply::Renew(parse_renew_reply(line, what)?)
            }
            Request::Release { .. } | Request::SemRelease { .. } => {
                parse_release_reply(line, what)?;
                Reply::Release
            }
            Request::Auth { .. } => {
                parse_auth_reply(line)?;
                Reply::Auth
            }
            Request::Stats => Reply::Stats(parse_stats_reply(line)?.to_string()),
        })
    }
}
