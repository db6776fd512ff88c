//! A waiter's side of a server restart: a blocking acquisition (or `wait()`) whose connection
//! the server drops — restarted or stopping: EOF, a reset, a refused reconnect, or the bare
//! `error` a stopping server answers blocked waits with — connects again with backoff (50 ms
//! doubling to 1 s) and enqueues again with what is left of its timeout, until its end; then
//! it reports the last failure. Holders never rejoin (their lease is gone with the
//! connection); a try (no timeout), a first connect that fails (a wrong address is likelier
//! than a restart) and a bare `error` to a request the server answers at once (`e`/`se`: the
//! Go server's enqueue has no stop path, and the Python 0.5.0 server answers `error` to the
//! semaphore commands it lacks) report at once. Sans-IO: the driver says what failed and when, and gets
//! back when to try again and with which timeout, or the failure to report.

use std::time::Duration;

use tokio::time::Instant;

use super::super::error::{DflockdError, ErrorCode};

/// First pause before a waiter whose server dropped it connects again (doubled each time).
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest pause between a waiter's reconnection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Which request a failure answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedOn {
    /// A request the server may block on (`l`/`sl` with a timeout, `w`/`sw`), or the
    /// connection: a bare `error` there is what a stopping server answers.
    Wait,
    /// `e`/`se`, which the server answers at once: a bare `error` there is a refusal.
    Enqueue,
}

/// Whether a waiter that got `e` on `on` after reaching the server may connect again and
/// re-enqueue: the connection was dropped or refused (a restart), timed out connecting, or a
/// stopping server answered a blocked wait with a bare `error`.
pub fn rejoinable(e: &DflockdError, on: FailedOn) -> bool {
    match e.code() {
        ErrorCode::ConnectionError | ErrorCode::Timeout => true,
        ErrorCode::ServerError => on == FailedOn::Wait && e.reply() == Some("error"),
        _ => false,
    }
}

/// What a waiter does after a failure.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Connect again at `at` and enqueue with `timeout_s` (what is left, rounded up).
    Retry { at: Instant, timeout_s: u64 },
    /// Report this failure.
    Fail(DflockdError),
}

/// One waiter's reconnections (see the module comment).
#[derive(Debug)]
pub struct Rejoin {
    end: Option<Instant>,
    backoff: Duration,
    aborted: bool,
}

impl Rejoin {
    /// A waiter whose timeout ends at `end` (`None`: a try).
    pub fn new(end: Option<Instant>) -> Self {
        Rejoin {
            end,
            backoff: BACKOFF_MIN,
            aborted: false,
        }
    }

    /// The caller aborted the wait (`cancel()`/`close()`): no more attempts.
    pub fn abort(&mut self) {
        self.aborted = true;
    }

    /// The timeout to enqueue with at `now`: what is left, rounded up to whole seconds.
    pub fn timeout_s(&self, now: Instant) -> u64 {
        let left = self
            .end
            .map_or(Duration::ZERO, |end| end.saturating_duration_since(now));
        left.as_secs() + u64::from(left.subsec_nanos() > 0)
    }

    /// An attempt failed at `now` with `e`, the answer to `on`; `reached`: a connection to
    /// the server was open before (a refused connect of a waiter never reached is reported).
    pub fn failed(&mut self, now: Instant, e: DflockdError, on: FailedOn, reached: bool) -> Next {
        if self.aborted {
            return Next::Fail(DflockdError::aborted());
        }
        let Some(end) = self.end else {
            return Next::Fail(e);
        };
        if !reached || !rejoinable(&e, on) || now + self.backoff >= end {
            return Next::Fail(e);
        }
        let at = now + self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        Next::Retry {
            at,
            timeout_s: self.timeout_s(at),
        }
    }
}
