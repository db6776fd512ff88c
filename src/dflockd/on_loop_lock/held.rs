//! A held lock on the event loop: a thin executor of the core's held-lock machine
//! (`ExternalHold`, the machine the tokio renewal task runs too): it feeds it the replies read
//! here (the loop's own renews and release, and the renews the watchdog sent while JavaScript
//! was late), the connection's timer and failures, the release and `close()`; it sends what
//! the machine asks for, closes or pools the connection, answers the release, and arms the
//! one timer (unref'd: an idle held lock never keeps the process alive) and the watchdog.
//! Every decision is the machine's.

use super::*;

impl LoopLock {
    /// Carry out what the hold asks for, then arm its timer and the watchdog. The release's
    /// answer goes to JS last, once the state is settled (JS may call back into this lock).
    pub(super) fn drive(&self) {
        let mut settles = Vec::new();
        loop {
            let io = match &mut *self.stage.borrow_mut() {
                Stage::Held { hold, .. } => hold.poll_io(),
                _ => None,
            };
            match io {
                None => break,
                Some(ExternalIo::SendRenew) => self.send_held(true),
                Some(ExternalIo::SendRelease) => {
                    // Before the release is written: no watchdog renew after it.
                    self.disarm_watchdog();
                    self.send_held(false);
                }
                Some(ExternalIo::Close) => self.close_conn(),
                Some(ExternalIo::Pool) => self.release_conn_idle(),
                Some(ExternalIo::SettleRelease(r)) => settles.push(r),
            }
        }
        let over = match &*self.stage.borrow() {
            // Released, or closed: the primitive is idle. Lost without a release asked: kept,
            // so that a release answers LOCK_LOST.
            Stage::Held { hold, .. } => {
                hold.machine().is_done()
                    && (!settles.is_empty() || hold.machine().loss_reason().is_none())
            }
            _ => false,
        };
        if over {
            *self.stage.borrow_mut() = Stage::Idle;
        } else {
            self.arm_held();
        }
        for r in settles {
            self.call_void(r);
        }
    }

    /// Send the hold's renew (`renew`) or release; a failed write is the connection's end.
    fn send_held(&self, renew: bool) {
        let sent = {
            let stage = self.stage.borrow();
            let Stage::Held { hold, .. } = &*stage else {
                return;
            };
            let req = if renew {
                hold.renew_request()
            } else {
                hold.release_request()
            };
            // The machine's timer bounds the reply (armed after this by `arm_held`).
            self.send(req, None, !renew)
        };
        let mut stage = self.stage.borrow_mut();
        let Stage::Held { hold, renew_sent } = &mut *stage else {
            return;
        };
        match sent {
            Ok(at) if renew => *renew_sent = at,
            Ok(_) => {}
            Err(e) => hold.disconnected(e),
        }
    }

    /// Arm the connection's timer at the hold's next instant, and the watchdog while the hold
    /// may be renewed by it.
    pub(super) fn arm_held(&self) {
        let (at, renewable, releasing) = match &*self.stage.borrow() {
            Stage::Held { hold, .. } => (
                hold.poll_timeout(),
                hold.machine().renewable(),
                hold.machine().releasing(),
            ),
            _ => return,
        };
        if let Some(c) = self.conn.borrow().as_ref() {
            if !releasing {
                c.watch.keep_alive(false);
            }
            match at {
                // Rounded up: an early tick changes nothing but costs a wake-up.
                Some(at) => {
                    let us = at.saturating_duration_since(Instant::now()).as_micros();
                    c.watch
                        .arm_timer(us.div_ceil(1000).min(u64::MAX as u128) as u64);
                }
                None => c.watch.disarm_timer(),
            }
        }
        if renewable {
            self.arm_watchdog();
        } else {
            self.disarm_watchdog();
        }
    }

    /// Tell the watchdog what to renew and when (the lease clock's next renew instant plus its
    /// grace), for the lock held now.
    fn arm_watchdog(&self) {
        let stage = self.stage.borrow();
        let Stage::Held { hold, .. } = &*stage else {
            return;
        };
        let conn = self.conn.borrow();
        let Some(c) = conn.as_ref() else {
            return;
        };
        let mut buf = self.wbuf.borrow_mut();
        buf.clear();
        // The request the renew timer sends: it encodes (checked at acquire).
        if hold.renew_request().encode_into(&mut buf).is_ok() {
            let m = hold.machine();
            c.wd.arm(
                &buf,
                m.renew_interval(),
                m.watchdog_grace(),
                m.sent().into_std(),
            );
        }
    }

    /// The watchdog renews nothing more on this connection (a release is about to be written,
    /// or the lock was lost).
    fn disarm_watchdog(&self) {
        if let Some(c) = self.conn.borrow().as_ref() {
            c.wd.disarm();
        }
    }

    /// A reply `line` while held: the renew's, the release's, or unprompted (the server
    /// dropping us).
    pub(super) fn held_answered(&self, line: &str) {
        {
            let mut stage = self.stage.borrow_mut();
            let Stage::Held { hold, renew_sent } = &mut *stage else {
                return;
            };
            if hold.machine().renewing() {
                hold.renew_reply(Instant::now(), *renew_sent, line);
            } else if hold.machine().releasing() {
                hold.release_reply(line);
            } else {
                let peer = self
                    .conn
                    .borrow()
                    .as_ref()
                    .map(|c| c.stream.peer().to_string())
                    .unwrap_or_default();
                hold.disconnected(core::connection::unsolicited(&peer, line.as_bytes()));
            }
        }
        self.drive();
    }

    /// The reply `line` to a renew the watchdog sent at `sent` while JavaScript was late.
    pub(super) fn watchdog_answered(&self, sent: Instant, line: &str) {
        if let Stage::Held { hold, .. } = &mut *self.stage.borrow_mut() {
            hold.watchdog_reply(Instant::now(), sent, line);
        } else {
            return;
        }
        self.drive();
    }

    pub(super) fn on_timer(&self) {
        let wd_due = self
            .conn
            .borrow()
            .as_ref()
            .is_some_and(|c| c.wd.watchdog_reply_due());
        if wd_due {
            // Read the watchdog's replies first: libuv runs timers before polls, so after a
            // blocked stretch the timer fires before the reply it waits for is read.
            self.on_ready(true, false, None);
        }
        if matches!(
            &*self.stage.borrow(),
            Stage::Asking { .. } | Stage::Connecting { .. }
        ) {
            let peer = self.peer();
            // A timeout in ms cut the acquisition: timed out (false), as on tokio.
            return self.fail_acquire(timeout_error(format!("no reply from {peer} in time")));
        }
        let watchdog_renewing = self
            .conn
            .borrow()
            .as_ref()
            .is_some_and(|c| c.wd.watchdog_reply_due());
        if let Stage::Held { hold, .. } = &mut *self.stage.borrow_mut() {
            hold.handle_timeout(Instant::now(), watchdog_renewing);
        } else {
            return;
        }
        self.drive();
    }

    /// An I/O or protocol error on the connection.
    pub(super) fn io_failed(&self, e: DflockdError) {
        if matches!(&*self.stage.borrow(), Stage::Asking { .. }) {
            return self.asking_failed(e);
        }
        if let Stage::Held { hold, .. } = &mut *self.stage.borrow_mut() {
            hold.disconnected(e);
        } else {
            drop(e);
            return self.close_conn();
        }
        self.drive();
    }

    pub(super) fn call_void(&self, r: core::Result<()>) {
        self.call(settle_value(self.id, r.map(|()| true)));
    }

    /// Release on the loop: `false` when the hold is not this driver's (the promise path
    /// serves it). The result goes to the settle callback.
    pub(in crate::dflockd) fn release(&self) -> bool {
        let r = match &mut *self.stage.borrow_mut() {
            Stage::Held { hold, .. } => hold.release(&self.prim, Instant::now()),
            _ => return false,
        };
        match r {
            Ok(()) => self.drive(),
            Err(e) => {
                self.drive();
                *self.stage.borrow_mut() = Stage::Idle;
                self.close_conn();
                self.call_void(Err(e));
            }
        }
        true
    }

    /// `close()`: drop everything without a release (the server releases on disconnect); a
    /// release in flight settles `LOCK_LOST` as on tokio.
    pub(in crate::dflockd) fn close(&self) {
        self.cancel();
        if let Stage::Held { hold, .. } = &mut *self.stage.borrow_mut() {
            hold.abort();
        }
        self.drive();
        *self.stage.borrow_mut() = Stage::Idle;
        self.close_conn();
    }
}
