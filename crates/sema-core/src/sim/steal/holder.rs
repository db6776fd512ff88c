//! The holder H of the steal world: its own release, and the steps of its answer to a steal.

use super::*;

impl StealWorld {
    pub(super) fn holder_step(&mut self) {
        if let Some(part) = (!self.h.releasing.is_empty()).then(|| self.h.releasing.remove(0)) {
            match part {
                Part::Lock => {
                    if let Some(t) = self.h.token.take() {
                        self.send(H_LOCK, "r", KEY, &t);
                    }
                }
                Part::Confirmation => {
                    if let Some((c, t)) = self.h.confirmation.take() {
                        self.send(H_CONFIRM, "r", &c, &t);
                    }
                }
            }
            if self.h.releasing.is_empty() {
                if let Some(t) = self.h.intent_token.take() {
                    self.send(H_WATCH, "r", INTENT, &t);
                }
                self.h.done = true;
            }
            self.deliver();
            return;
        }
        let Some(step) = self.h.next.take() else {
            // No answer under way: its own release.
            if let Some(t) = self.h.token.take() {
                self.h.running = false;
                self.send(H_LOCK, "r", KEY, &t);
                self.deliver();
            }
            self.h.done = true;
            return;
        };
        let Some(a) = self.h.answer.as_mut() else {
            return;
        };
        match step {
            AnswerStep::Surrender => {
                let given_up = self.h.running && self.h.token.is_some();
                // Its request is aborted: the callback stops; the lock stays on its connection.
                self.h.running = false;
                self.h.next = Some(a.surrendered(given_up));
            }
            AnswerStep::HoldConfirmation { lease_s } => {
                let token = self.h.token.clone().unwrap_or_default();
                let name = format!("{CONFIRM_PREFIX}H~{token}");
                let r = self.send(H_CONFIRM, "l", &name, &format!("0 {lease_s}"));
                let held = Self::granted(&r);
                let lock_lost = !self
                    .server
                    .holders_of(KEY)
                    .iter()
                    .any(|(t, _)| Some(t) == self.h.token.as_ref());
                if let Some(t) = held.clone() {
                    self.h.confirmation = Some((name, t));
                }
                if let Some(a) = self.h.answer.as_mut() {
                    self.h.next = Some(a.confirmation_held(held.is_some(), lock_lost));
                }
            }
            AnswerStep::Keep => {
                let r = self.send(H_WATCH, "l", INTENT, &format!("{WATCH_S} 33"));
                match Self::granted(&r) {
                    Some(t) => {
                        self.h.intent_token = Some(t);
                        if let Some(a) = self.h.answer.as_mut() {
                            self.h.next = Some(a.ended(KeepEnd::IntentEnded));
                        }
                    }
                    None => self.h.watching = true,
                }
            }
            AnswerStep::Release(parts) => {
                self.h.releasing = parts;
                if self.h.releasing.is_empty() {
                    self.h.done = true;
                }
            }
            AnswerStep::Done => self.h.done = !self.h.running,
        }
        self.deliver();
    }
}
