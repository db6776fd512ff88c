//! The stealer S of the steal world: its intent, its looks at the key table, the proofs, the take, its release.

use super::*;

impl StealWorld {
    fn look(&self) -> StealLook {
        let held = self.held_keys();
        let exclusive = held.iter().any(|k| k == KEY).then(|| KEY.to_string());
        let confirmations = held
            .iter()
            .filter_map(|k| {
                let rest = k.strip_prefix(CONFIRM_PREFIX)?;
                // `<who>~<token>`: the token it carries (a garbled one does not unseal).
                let token = rest.split_once('~').map(|(_, t)| t.to_string());
                Some((k.clone(), token.filter(|t| !t.is_empty())))
            })
            .collect();
        StealLook {
            exclusive,
            confirmations,
            shared_holders: 0,
            lease_room: crate::dflockd::steal::confirm_lease(self.lease_s as f64, 0.5) > 0,
        }
    }

    pub(super) fn stealer_step(&mut self) {
        let now = self.instant();
        match std::mem::replace(&mut self.s.phase, Steal::Done) {
            Steal::Start => {
                let r = self.send(S_INTENT, "l", INTENT, &format!("0 {}", self.lease_s));
                match Self::granted(&r) {
                    Some(t) => {
                        self.s.intent_token = Some(t);
                        self.s.machine = Some(Stealer::new(now, ANSWER_WITHIN));
                        self.s.phase = Steal::Looking;
                    }
                    None => self.s.phase = Steal::Done,
                }
            }
            Steal::Looking => {
                let look = self.look();
                let step = match self.s.machine.as_mut() {
                    Some(m) => m.look(now, &look),
                    None => StealStep::Refuse(crate::dflockd::steal::StealRefusal::NoAnswer),
                };
                self.trace.push(format!("  S looks: {look:?} -> {step:?}"));
                self.s.phase = match step {
                    StealStep::Prove {
                        confirmation,
                        lock,
                        token,
                    } => Steal::Proving {
                        confirmation,
                        lock,
                        token,
                    },
                    StealStep::Take => {
                        let r = self.send(S_LOOK, "l", KEY, &format!("0 {}", self.lease_s));
                        match Self::granted(&r) {
                            Some(token) => Steal::Taken { token },
                            None => Steal::Looking,
                        }
                    }
                    StealStep::Wait => Steal::Looking,
                    StealStep::Refuse(_) => {
                        self.release_intent();
                        Steal::Done
                    }
                };
            }
            Steal::Proving {
                confirmation,
                lock,
                token,
            } => {
                let r = self.send(S_LOOK, "n", &lock, &format!("{token} {}", self.lease_s));
                let renewed = matches!(&r, Reply::Reply(l) if l.starts_with("ok"));
                let accepted = self
                    .s
                    .machine
                    .as_mut()
                    .is_some_and(|m| m.proved(&confirmation, renewed));
                self.s.phase = if accepted {
                    self.s.watch = Some(confirmation.clone());
                    let r = self.send(S_WATCH, "l", &confirmation, &format!("{WATCH_S} 33"));
                    if let Some(t) = Self::granted(&r) {
                        // The confirmation went before the watch: told at once.
                        self.send(S_WATCH, "r", &confirmation, &t);
                        self.s.told = true;
                    }
                    Steal::Accepted { confirmation }
                } else {
                    Steal::Looking
                };
            }
            Steal::Accepted { .. } => {
                // Done (or told): it releases its intent; the holder lets go of the lock.
                self.release_intent();
                self.s.phase = Steal::Done;
            }
            Steal::Taken { token } => {
                self.send(S_LOOK, "r", KEY, &token);
                self.release_intent();
                self.s.phase = Steal::Done;
            }
            Steal::Done => {}
        }
        self.deliver();
    }

    fn release_intent(&mut self) {
        if let Some(t) = self.s.intent_token.take() {
            self.send(S_INTENT, "r", INTENT, &t);
        }
    }
}
