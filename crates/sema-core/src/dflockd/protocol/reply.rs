//! A reply parsed for the request it answers, for callers that hold requests of any command
//! (the typed methods of `Connection` call the parsers directly; the dispatch is
//! [`super::session`]'s).

use super::session::Expect;
use super::{AcquireReply, EnqueueReply, Request};
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
    /// A low-level request ([`super::Encoded::raw`]): the line itself.
    Line(String),
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
        Expect::of(self).parse(line, self.label())
    }
}
