//! The request queue's contract of the low-level `Connection` JS class, one home for both of
//! its drivers (the binding's event-loop driver and its tokio driver for Bun and Deno):
//!
//! - requests run one at a time, in call order; each settles its own promise once;
//! - a failure in flight (I/O, timeout, a reply out of step) is that request's error and ends
//!   the connection; every request still queued gets "connection to `<peer>` is closed"; a
//!   failure while nothing was in flight (the server closing an idle connection) is kept and
//!   given, once, to the next request, as a read would have; requests after that are refused
//!   as closed;
//! - `close()` settles what is pending before it returns: the request in flight `ABORTED`,
//!   those queued behind it "connection is closed", and refuses later ones the same way.
//!
//! Sans-IO: the drivers say how the connection ended and what was pending; this says which
//! error each request gets.

use super::super::error::{DflockdError, ErrorCode};

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// `close()`, or the JS object was collected.
    ByClose,
    /// An error, a timeout or the server, on the connection to this peer.
    OnError(String),
}

/// "connection to `<peer>` is closed": a request queued behind a failure, or made after it.
pub fn peer_closed_error(peer: &str) -> DflockdError {
    DflockdError::new(
        ErrorCode::ConnectionError,
        format!("connection to {peer} is closed"),
    )
}

/// The request in flight when `close()` came.
pub fn aborted_error() -> DflockdError {
    DflockdError::new(ErrorCode::Aborted, "connection closed during the request")
}

/// A request queued behind one `close()` aborted, or made after `close()`.
pub fn closed_error() -> DflockdError {
    DflockdError::new(ErrorCode::ConnectionError, "connection is closed")
}

impl Ended {
    /// The error of a request made after the end: why it ended while idle (`idle_error`, given
    /// once, as a read would have), else what the end says.
    pub fn refusal(&self, idle_error: &mut Option<DflockdError>) -> DflockdError {
        match (idle_error.take(), self) {
            (Some(e), _) => e,
            (None, Ended::OnError(peer)) => peer_closed_error(peer),
            (None, Ended::ByClose) => closed_error(),
        }
    }

    /// The errors of the `pending` requests at the end, in call order: the first, when it was
    /// in flight (`head_in_flight`), gets `error` (or `ABORTED` on `close()`), the rest what
    /// the end says.
    pub fn pending_errors(
        &self,
        pending: usize,
        head_in_flight: bool,
        mut error: Option<DflockdError>,
    ) -> Vec<DflockdError> {
        (0..pending)
            .map(|i| match (i, head_in_flight, error.take(), self) {
                (0, true, Some(e), _) => e,
                (0, true, None, Ended::ByClose) => aborted_error(),
                (_, _, _, Ended::ByClose) => closed_error(),
                (_, _, _, Ended::OnError(peer)) => peer_closed_error(peer),
            })
            .collect()
    }

    /// Where the error of an end with nothing in flight goes: kept for the next request (a
    /// read would have reported it), unless requests are queued, in which case the first of
    /// them gets it.
    pub fn keeps_idle_error(pending: usize, head_in_flight: bool) -> bool {
        pending == 0 || !head_in_flight
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_aborts_the_request_in_flight_and_closes_the_rest() {
        let e = Ended::ByClose.pending_errors(3, true, None);
        let codes: Vec<_> = e
            .iter()
            .map(|e| (e.code(), e.message().to_string()))
            .collect();
        assert_eq!(codes[0].0, ErrorCode::Aborted);
        assert_eq!(codes[1].1, "connection is closed");
        assert_eq!(codes[2].1, "connection is closed");
        // Nothing in flight: every queued request is simply closed.
        assert!(Ended::ByClose
            .pending_errors(2, false, None)
            .iter()
            .all(|e| e.message() == "connection is closed"));
    }

    #[test]
    fn a_failure_in_flight_is_its_requests_and_the_rest_are_closed_by_peer() {
        let fail = DflockdError::new(ErrorCode::Timeout, "no reply");
        let ended = Ended::OnError("h:1".into());
        let e = ended.pending_errors(2, true, Some(fail));
        assert_eq!(e[0].code(), ErrorCode::Timeout);
        assert_eq!(e[1].message(), "connection to h:1 is closed");
        assert!(!Ended::keeps_idle_error(2, true));
        assert!(Ended::keeps_idle_error(0, false));
    }

    #[test]
    fn the_idle_failure_goes_once_to_the_next_request() {
        let ended = Ended::OnError("h:1".into());
        let mut idle = Some(DflockdError::new(
            ErrorCode::ConnectionError,
            "reset by h:1",
        ));
        assert_eq!(ended.refusal(&mut idle).message(), "reset by h:1");
        assert_eq!(
            ended.refusal(&mut idle).message(),
            "connection to h:1 is closed"
        );
        assert_eq!(
            Ended::ByClose.refusal(&mut None).message(),
            "connection is closed"
        );
    }
}
