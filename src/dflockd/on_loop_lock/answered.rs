//! A reply line read on the loop: the answer to the request in flight (or an unprompted one,
//! the server dropping us), a failed acquire answer or a refused confirming renew sent back to
//! asking, and a grant reported held (confirmed by a renew first when it was read late).

use super::*;

impl LoopLock {
    /// The reply `line` to the request in flight (or an unsolicited one: the server dropping us).
    pub(super) fn on_line(&self, line: &str) {
        let sender = self
            .conn
            .borrow()
            .as_ref()
            .and_then(|c| c.wd.reply_sender());
        if let Some(Sender::Watchdog(sent)) = sender {
            return self.watchdog_answered(Instant::from_std(sent), line);
        }
        if let Some(c) = self.conn.borrow().as_ref() {
            c.watch.disarm_timer();
            c.watch.stop_spin();
        }
        let stage = std::mem::replace(&mut *self.stage.borrow_mut(), Stage::Idle);
        match stage {
            Stage::Asking {
                op,
                started,
                sent,
                confirm: Some(g),
                ..
            } => {
                let reply = core::protocol::parse_renew_reply(line, "renew");
                match self.prim.external_confirmed(g, reply, sent, Instant::now()) {
                    Ok(g) => self.granted(op, g, started, sent, true),
                    Err(e) => {
                        self.asking_answered_with(op, started, sent, e);
                    }
                }
            }
            Stage::Asking {
                op,
                mut place,
                started,
                sent,
                ..
            } => {
                let reply = self.prim.external_first_answer(line, place.is_some());
                // Answered: the next waiter of this process may send its own.
                place.take();
                match reply {
                    Ok(FirstAnswer::Granted(g)) => self.granted(op, g, started, sent, false),
                    Ok(FirstAnswer::Queued) => self.queued(op, started, sent),
                    Ok(FirstAnswer::TimedOut) => {
                        // A try answered `timeout`: the connection holds nothing, it goes to the pool.
                        self.release_conn_idle();
                        let r = self.prim.external_end(op).map(|()| false);
                        self.call(settle_value(self.id, r));
                    }
                    Err(e) => {
                        self.asking_answered_with(op, started, sent, e);
                    }
                }
            }
            held @ Stage::Held { .. } => {
                *self.stage.borrow_mut() = held;
                self.held_answered(line);
            }
            other => {
                // Nothing asked (an idle held lock, a lingering one): the server dropped us.
                *self.stage.borrow_mut() = other;
                let peer = self.peer();
                self.io_failed(core::connection::unsolicited(&peer, line.as_bytes()));
            }
        }
    }

    /// After a try answered `timeout`: the connection holds nothing, it goes to the pool.
    /// An acquire request answered with a failure (or its confirming renew refused): back to
    /// `Asking` with nothing placed, then failed as any acquire.
    pub(super) fn asking_answered_with(
        &self,
        op: ExternalOp,
        started: Instant,
        sent: Instant,
        e: DflockdError,
    ) {
        *self.stage.borrow_mut() = Stage::Asking {
            op,
            place: None,
            started,
            sent,
            reused: false,
            confirm: None,
        };
        self.fail_acquire(e);
    }

    /// `g` answered the request sent at `sent`. Read so late (the JS thread blocked between
    /// the request and its reply) that its first renew is due, or its validity already over
    /// (the server may have expired it and granted the key to another), it is first renewed
    /// and reported on that renew's reply, its lease counted from the renew: never `true` for a
    /// lease the clock cannot prove (as `confirm_grant` on tokio).
    /// `confirmed`: `sent` is the confirming renew's (once is enough, as on tokio).
    pub(super) fn granted(
        &self,
        op: ExternalOp,
        g: Grant,
        started: Instant,
        sent: Instant,
        confirmed: bool,
    ) {
        let now = Instant::now();
        if !confirmed && self.prim.external_needs_confirm(&g, sent, now) {
            let limit = self.prim.external_confirm_limit(&g, now);
            let o = self.prim.options();
            let req = Request::renew(&o.key, &g.token, o.lease_ttl_s, o.limit > 1);
            let sent = self.send(req, Some(limit), true);
            *self.stage.borrow_mut() = Stage::Asking {
                op,
                place: None,
                started,
                sent: *sent.as_ref().unwrap_or(&now),
                reused: false,
                confirm: Some(g),
            };
            if let Err(e) = sent {
                self.fail_acquire(e);
            }
            return;
        }
        match self.prim.external_held(op, g, sent) {
            Ok(hold) => {
                *self.stage.borrow_mut() = Stage::Held {
                    hold,
                    renew_sent: sent,
                };
                self.arm_held();
                self.call(settle_value(self.id, Ok(true)));
            }
            Err(e) => {
                self.close_conn();
                self.call(settle_value(self.id, Err(e)));
            }
        }
    }
}
