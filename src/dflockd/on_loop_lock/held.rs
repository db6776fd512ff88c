//! A held lock on the event loop: the renew timer (unref'd), the renew and release round
//! trips, the replies to the renews the watchdog sent while JavaScript was late, the loss (the
//! connection closed, a renew refused, or no renew confirmed within the validity) and the
//! linger until the server's expiry after a loss the lease clock declared. The rules are the
//! core's (`ExternalHold`); this only does the I/O.

use super::*;

impl LoopLock {
    /// The reply `line` to a renew sent at `sent`; `release`: a release was asked meanwhile.
    pub(super) fn renew_answered(
        &self,
        hold: ExternalHold,
        sent: Instant,
        release: bool,
        line: &str,
    ) {
        let reply = core::protocol::parse_renew_reply(line, "renew");
        self.renew_reply(hold, sent, release, reply);
    }

    /// A renew sent at `sent` answered `reply` (parsed).
    fn renew_reply(
        &self,
        mut hold: ExternalHold,
        sent: Instant,
        release: bool,
        reply: core::Result<Option<u64>>,
    ) {
        match reply {
            Ok(lease) => {
                hold.renewed(lease, sent);
                *self.stage.borrow_mut() = Stage::Held {
                    hold,
                    renewing: None,
                    release: false,
                    linger: false,
                };
                if release {
                    self.release();
                } else {
                    self.arm_held();
                    self.arm_watchdog();
                }
            }
            Err(e) => {
                self.close_conn();
                if release {
                    hold.lost(false, e.message());
                    self.call_void(Err(hold.lost_error()));
                } else {
                    hold.lost(true, e.message());
                }
                *self.stage.borrow_mut() = Stage::Held {
                    hold,
                    renewing: None,
                    release: false,
                    linger: false,
                };
            }
        }
    }

    /// The reply to a renew the watchdog sent at `sent` while JavaScript was late: through the
    /// same lease clock as the loop's own renews, or the same loss path (reported now, as
    /// JavaScript runs again). A lock already lost or being released ignores it: the release's
    /// own reply decides.
    pub(super) fn watchdog_answered(&self, sent: Instant, line: &str) {
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle);
        let Stage::Held {
            mut hold,
            renewing,
            release,
            linger: false,
        } = stage
        else {
            *self.stage.borrow_mut() = stage;
            return;
        };
        // The loss reason says who renewed: the holder learns its thread was blocked.
        let reply = core::protocol::parse_renew_reply(
            line,
            "renew sent by the watchdog while JavaScript was blocked",
        );
        let lease = match reply {
            Ok(lease) => lease,
            // A renew of the loop's own in flight is abandoned with the connection.
            Err(e) => return self.renew_reply(hold, sent, release, Err(e)),
        };
        hold.renewed(lease, sent);
        let loss_at = hold.loss_at();
        *self.stage.borrow_mut() = Stage::Held {
            hold,
            renewing,
            release,
            linger: false,
        };
        self.arm_watchdog();
        match (renewing, release) {
            (None, _) => self.arm_held(),
            // The reply limit of the loop's own renew in flight: the validity grew.
            (Some(_), false) => self.arm_timer_at(loss_at),
            // The release's wait for that renew stays as it was.
            (Some(_), true) => {}
        }
    }

    /// Arm the connection's timer for `at`.
    fn arm_timer_at(&self, at: Instant) {
        if let Some(c) = self.conn.borrow().as_ref() {
            let ms = at.saturating_duration_since(Instant::now()).as_millis();
            c.watch.arm_timer(ms.clamp(1, u64::MAX as u128) as u64);
        }
    }

    /// Tell the watchdog what to renew and when (the lease clock's next renew instant plus its
    /// grace), for the lock held now.
    pub(super) fn arm_watchdog(&self) {
        let stage = self.stage.borrow();
        let Stage::Held {
            hold,
            linger: false,
            ..
        } = &*stage
        else {
            return;
        };
        let conn = self.conn.borrow();
        let Some(c) = conn.as_ref() else {
            return;
        };
        let mut buf = self.wbuf.borrow_mut();
        buf.clear();
        // The request the renew timer sends: it encodes (checked at acquire).
        if renew_request(self.prim.options(), hold.token())
            .encode_into(&mut buf)
            .is_ok()
        {
            c.wd.arm(
                &buf,
                hold.renew_interval(),
                hold.watchdog_grace(),
                hold.sent().into_std(),
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

    /// A timer fired while a watchdog renew was unanswered: read its reply first (libuv runs
    /// timers before polls, so after a blocked stretch the renew timer or reply limit fires
    /// before the reply it waits for is read). Returns whether the timer is still due.
    fn timer_due_after_watchdog_replies(&self) -> bool {
        let before = std::mem::discriminant(&*self.stage.borrow());
        self.on_ready(true, false, None);
        let stage = self.stage.borrow();
        if std::mem::discriminant(&*stage) != before {
            return false; // moved on (a release sent, a queued state...): its own timer is armed
        }
        let now = Instant::now();
        match &*stage {
            Stage::Held {
                hold,
                renewing: None,
                release: false,
                linger: false,
            } if now < hold.renew_at() => {
                drop(stage);
                self.arm_held();
                false
            }
            Stage::Held {
                hold,
                renewing: Some(_),
                release: false,
                linger: false,
            } if now < hold.loss_at() => {
                let at = hold.loss_at();
                drop(stage);
                self.arm_timer_at(at);
                false
            }
            _ => true,
        }
    }

    /// The reply to the release.
    pub(super) fn release_answered(&self, hold: ExternalHold, line: &str) {
        let r = core::protocol::parse_release_reply(line, "release");
        match r {
            Ok(()) => {
                if let Some(c) = self.conn.borrow_mut().take() {
                    pool_put(&self.prim.options().connect, c);
                }
                self.call_void(Ok(()));
            }
            Err(e) => {
                self.close_conn();
                self.call_void(Err(hold.release_error(e)));
            }
        }
    }

    /// Held and idle: watch for the server dropping us, renew at the lease clock's instant
    /// (unref'd: an idle held lock never keeps the process alive).
    pub(super) fn arm_held(&self) {
        let at = match &*self.stage.borrow() {
            Stage::Held { hold, .. } => hold.renew_at(),
            _ => return,
        };
        if let Some(c) = self.conn.borrow().as_ref() {
            c.watch.keep_alive(false);
            let ms = at.saturating_duration_since(Instant::now()).as_millis();
            c.watch.arm_timer(ms.min(u64::MAX as u128) as u64);
        }
    }

    pub(super) fn on_timer(&self) {
        let wd_due = self
            .conn
            .borrow()
            .as_ref()
            .is_some_and(|c| c.wd.watchdog_reply_due());
        if wd_due && !self.timer_due_after_watchdog_replies() {
            return;
        }
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle);
        match stage {
            Stage::Asking { .. } | Stage::Connecting { .. } => {
                *self.stage.borrow_mut() = stage;
                let peer = self.peer();
                // A timeout in ms cut the acquisition: timed out (false), as on tokio.
                self.fail_acquire(timeout_error(format!("no reply from {peer} in time")));
            }
            Stage::Releasing { hold } => {
                let peer = self.peer();
                self.close_conn();
                self.call_void(Err(
                    hold.release_error(timeout_error(format!("no reply from {peer} in time")))
                ));
            }
            Stage::Held {
                hold,
                renewing,
                release,
                linger,
            } => {
                let now = Instant::now();
                if linger {
                    // The server's earliest expiry: closing no longer frees the key early.
                    self.close_conn();
                    *self.stage.borrow_mut() = Stage::Held {
                        hold,
                        renewing: None,
                        release: false,
                        linger: false,
                    };
                    return;
                }
                if renewing.is_some() && release && now < hold.loss_at() {
                    // The holder is releasing and the renew in flight got no reply within
                    // RELEASE_RENEW_WAIT: closing the connection releases on the server (or the
                    // lease ends by itself), as the renewal task does.
                    self.close_conn();
                    hold.lost(
                        false,
                        "release: a renew in flight got no reply within 5 s; the connection was closed (the server releases on disconnect)",
                    );
                    let _ = hold.begin_release(&self.prim);
                    self.call_void(Err(hold.lost_error()));
                    return;
                }
                if renewing.is_some() || now >= hold.loss_at() {
                    // No renew confirmed within the validity: lost now, before the server
                    // could grant the key to anyone else; the connection stays open until
                    // the server's expiry.
                    let reason = hold.unconfirmed_reason();
                    hold.lost(!release, &reason);
                    // Lingering: the watchdog must not renew what was declared lost.
                    self.disarm_watchdog();
                    if release {
                        self.call_void(Err(hold.lost_error()));
                    }
                    let expiry = hold.expiry();
                    *self.stage.borrow_mut() = Stage::Held {
                        hold,
                        renewing: None,
                        release: false,
                        linger: true,
                    };
                    if let Some(c) = self.conn.borrow().as_ref() {
                        let ms = expiry.saturating_duration_since(now).as_millis();
                        c.watch.arm_timer(ms.clamp(1, u64::MAX as u128) as u64);
                    }
                    return;
                }
                let wd_renewing = self
                    .conn
                    .borrow()
                    .as_ref()
                    .is_some_and(|c| c.wd.watchdog_reply_due());
                if wd_renewing {
                    // Late: the watchdog sent this period's renew already. Its reply, not a
                    // second renew, is awaited until the validity ends (then lost, above).
                    let loss_at = hold.loss_at();
                    *self.stage.borrow_mut() = Stage::Held {
                        hold,
                        renewing: None,
                        release,
                        linger: false,
                    };
                    self.arm_timer_at(loss_at);
                    return;
                }
                let limit = hold.loss_at().saturating_duration_since(now);
                let req = renew_request(self.prim.options(), hold.token());
                let sent = self.send(req, Some(limit.max(Duration::from_millis(1))), false);
                match sent {
                    Ok(sent) => {
                        *self.stage.borrow_mut() = Stage::Held {
                            hold,
                            renewing: Some(sent),
                            release,
                            linger: false,
                        };
                    }
                    Err(e) => {
                        self.close_conn();
                        hold.lost(true, e.message());
                        *self.stage.borrow_mut() = Stage::Held {
                            hold,
                            renewing: None,
                            release: false,
                            linger: false,
                        };
                    }
                }
            }
            other => *self.stage.borrow_mut() = other,
        }
    }

    /// An I/O or protocol error on the connection.
    pub(super) fn io_failed(&self, e: DflockdError) {
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle);
        match stage {
            Stage::Asking { .. } => {
                *self.stage.borrow_mut() = stage;
                self.asking_failed(e);
            }
            Stage::Releasing { hold } => {
                self.close_conn();
                self.call_void(Err(hold.release_error(e)));
            }
            Stage::Held {
                hold,
                release,
                linger,
                ..
            } => {
                // Idle or renewing: the server dropped the connection and released the lock.
                self.close_conn();
                if !linger {
                    hold.lost(!release, e.message());
                    if release {
                        self.call_void(Err(hold.lost_error()));
                    }
                }
                *self.stage.borrow_mut() = Stage::Held {
                    hold,
                    renewing: None,
                    release: false,
                    linger: false,
                };
            }
            other => {
                *self.stage.borrow_mut() = other;
                self.close_conn();
            }
        }
    }

    pub(super) fn call_void(&self, r: core::Result<()>) {
        self.call(settle_value(self.id, r.map(|()| true)));
    }

    /// Release on the loop: `false` when the hold is not this driver's (the promise path
    /// serves it). The result goes to the settle callback.
    pub(in crate::dflockd) fn release(&self) -> bool {
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle);
        let Stage::Held {
            hold,
            renewing,
            linger,
            ..
        } = stage
        else {
            *self.stage.borrow_mut() = stage;
            return false;
        };
        if renewing.is_some() {
            // Sent after the renew's reply, which is awaited RELEASE_RENEW_WAIT at most (less
            // when the validity ends sooner; see on_timer).
            let give_up = hold
                .loss_at()
                .min(Instant::now() + core::primitive::RELEASE_RENEW_WAIT);
            if let Some(c) = self.conn.borrow().as_ref() {
                let ms = give_up
                    .saturating_duration_since(Instant::now())
                    .as_millis();
                c.watch.arm_timer(ms.clamp(1, u64::MAX as u128) as u64);
            }
            *self.stage.borrow_mut() = Stage::Held {
                hold,
                renewing,
                release: true,
                linger,
            };
            return true;
        }
        if let Err(e) = hold.begin_release(&self.prim) {
            self.close_conn();
            self.call_void(Err(e));
            return true;
        }
        let o = self.prim.options();
        let now = Instant::now();
        let limit = o
            .connect
            .socket_timeout
            .min(hold.loss_at().saturating_duration_since(now))
            .max(Duration::from_millis(1));
        let req = if o.limit > 1 {
            Request::SemRelease {
                key: &o.key,
                token: hold.token(),
            }
        } else {
            Request::Release {
                key: &o.key,
                token: hold.token(),
            }
        };
        // Before the release is written: no watchdog renew after it.
        self.disarm_watchdog();
        let sent = self.send(req, Some(limit), true);
        *self.stage.borrow_mut() = Stage::Releasing { hold };
        if let Err(e) = sent {
            self.io_failed(e);
        }
        true
    }
    /// `close()`: drop everything without a release (the server releases on disconnect); a
    /// release in flight settles `LOCK_LOST` as on tokio.
    pub(in crate::dflockd) fn close(&self) {
        self.cancel();
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle);
        self.close_conn();
        match stage {
            Stage::Releasing { .. } => self.call_void(Err(DflockdError::new(
                core::ErrorCode::LockLost,
                "the lock was lost before release (its connection was closed)",
            ))),
            Stage::Held { release: true, .. } => self.call_void(Err(DflockdError::new(
                core::ErrorCode::LockLost,
                "the lock was lost before release (its connection was closed)",
            ))),
            _ => {}
        }
    }
}
