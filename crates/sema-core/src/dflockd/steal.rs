//! The decisions of a Web Locks `steal` on a dflockd LockManager, sans-IO: one machine for the
//! stealer ([`Stealer`]) and one for the holder that answers it ([`Answer`]). Their driver
//! (`lib/locks/dflockd-steal.js`: the mailboxes that ring a holder, the names of the intent and
//! confirmation keys, the X25519 seal, every request) feeds them what it saw and does what they
//! answer; the simulator (`sim::steal`) runs the same machines against its server model, with a
//! third client that forges confirmations.
//!
//! What is decided here, and why no sequence of another client's commands makes two holders:
//!
//! - **The stealer accepts a hand-over only once it is proven**: a confirmation of this steal
//!   counts only when the token unsealed from it renews the lock (`n <lock> <token>` answered
//!   `ok`). Only the lock's holder knows that token and only this stealer can unseal what was
//!   sealed for it, so a confirmation-shaped key taken by anyone else (its name is public, in
//!   `stats`) is looked at once and ignored. Until then the stealer runs nothing.
//! - **The holder gives up running before it proves the hand-over, and keeps the lock**: it
//!   surrenders its request first (its callback is aborted), then holds the confirmation that
//!   carries the proof, then keeps the lock on its connection for the stealer until the
//!   stealer's intent ends. So a proof never exists while the holder still runs, and the lock
//!   is never free on the server while the stealer may run: a failed confirmation releases the
//!   lock to the next waiter only because no proof of it exists (the stealer never accepted).
//! - **The release order tells the stealer first when the lock was lost**: normally the lock,
//!   then the confirmation (the stealer's watch of it is granted after the lock is free, and its
//!   intent outlives both so no later steal reuses its name); when the lock was lost already,
//!   the confirmation first, so the stealer hears of it without waiting for a release that
//!   cannot come.
//! - The confirmation's lease ends before the lock can ([`confirm_lease`]): a holder killed on
//!   a server that keeps leases after a disconnect stops renewing both, and the stealer must
//!   hear of it before the lock could be granted to a waiter.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long a stealer waits for a proven answer (the answer takes 4 round trips after the ring;
/// 2 s leaves room for a busy holder's event loop).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The server's lease expiry sweep (1 s) and a margin: by how much the confirmation must end
/// before the lock can (tenths of a second).
const SWEEP_MARGIN_TENTHS: u64 = 15;

/// The shortest confirmation lease (s): its renewer needs room (a renew at half of it).
pub const MIN_CONFIRM_S: u64 = 3;

/// The confirmation's lease (s) for a lock of lease `lease_s` renewed at `renew_ratio` of it: a
/// killed holder's lock was renewed at most `renew_ratio × lease` before, so it lives at least
/// `(1 − renew_ratio) × lease` after; the confirmation must end before that by more than the
/// server's sweep: `floor((1 − r) × L − 1.5)`. With the default r = 0.5: L = 9 → 3 s, L = 33
/// → 15 s. 0 when that leaves less than [`MIN_CONFIRM_S`] (no hand-over: the steal is refused).
pub fn confirm_lease(lease_s: f64, renew_ratio: f64) -> u64 {
    if !(renew_ratio > 0.0 && renew_ratio < 1.0 && lease_s > 0.0 && lease_s.is_finite()) {
        return 0;
    }
    let s = ((1.0 - renew_ratio) * lease_s - SWEEP_MARGIN_TENTHS as f64 / 10.0).floor();
    if s >= MIN_CONFIRM_S as f64 {
        s as u64
    } else {
        0
    }
}

/// One look of the stealer at the server (one `stats`), as its driver read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StealLook {
    /// The key whose token proves a hand-over of the stolen key (the key itself when it is
    /// held as a mutex, its writer's gate when a writer holds it), or `None` when nobody holds
    /// it exclusively.
    pub exclusive: Option<String>,
    /// The confirmations of this steal held now, each with the token unsealed from it (`None`:
    /// it does not unseal to a token).
    pub confirmations: Vec<(String, Option<String>)>,
    /// Slots of the stolen key held by readers (a shared lock), when nobody holds it exclusively.
    pub shared_holders: u64,
    /// Whether the intent's lease leaves a hand-over room (`confirm_lease(..) > 0`).
    pub lease_room: bool,
}

/// Why a steal is refused (nothing was taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StealRefusal {
    /// Readers hold the key: steal breaks only an exclusive holder on dflockd.
    SharedHolders,
    /// The locks' lease is too short for a hand-over a killed holder cannot break.
    LeaseTooShort,
    /// No proven answer within [`ANSWER_WITHIN`].
    NoAnswer,
}

/// What the stealer does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StealStep {
    /// Renew `lock` with `token` (the token unsealed from `confirmation`) and tell
    /// [`Stealer::proved`] whether the server renewed it.
    Prove {
        confirmation: String,
        lock: String,
        token: String,
    },
    /// Nobody holds the key and no answer is under way: take it with a plain try; when that
    /// finds it taken meanwhile, look again.
    Take,
    /// Nothing decided yet: ring the holders not rung lately and look again after the poll.
    Wait,
    /// Refused: nothing was taken (the intent is released).
    Refuse(StealRefusal),
}

/// The stealer's side (see the module docs). Pure: the caller passes the instants.
#[derive(Debug)]
pub struct Stealer {
    deadline: Instant,
    /// Confirmations looked at that did not prove themselves (forged, or of a holder that lost
    /// the lock): never tried again.
    unproven: BTreeSet<String>,
    /// The confirmation whose proof was asked last.
    proving: Option<String>,
}

impl Stealer {
    /// A steal whose intent was taken at `now`.
    pub fn new(now: Instant, answer_within: Duration) -> Self {
        Stealer {
            deadline: now + answer_within,
            unproven: BTreeSet::new(),
            proving: None,
        }
    }

    /// The next step after a look at `now`. A confirmation is tried once: after its `Prove`,
    /// [`Stealer::proved`] says whether it is the answer; when it is not, look again at the
    /// same scene (the next one is tried).
    pub fn look(&mut self, now: Instant, look: &StealLook) -> StealStep {
        if let Some(lock) = &look.exclusive {
            for (confirmation, token) in &look.confirmations {
                if self.unproven.contains(confirmation) {
                    continue;
                }
                match token {
                    Some(token) => {
                        self.proving = Some(confirmation.clone());
                        return StealStep::Prove {
                            confirmation: confirmation.clone(),
                            lock: lock.clone(),
                            token: token.clone(),
                        };
                    }
                    None => {
                        self.unproven.insert(confirmation.clone());
                    }
                }
            }
        }
        if look.exclusive.is_none() {
            if look.shared_holders > 0 {
                return StealStep::Refuse(StealRefusal::SharedHolders);
            }
            // A confirmation still held while nobody holds the key: a hand-over ending (its
            // holder lets go of the lock first); wait for it to go rather than take beside it.
            if look.confirmations.is_empty() {
                return StealStep::Take;
            }
        } else if !look.lease_room {
            return StealStep::Refuse(StealRefusal::LeaseTooShort);
        }
        if now > self.deadline {
            return StealStep::Refuse(StealRefusal::NoAnswer);
        }
        StealStep::Wait
    }

    /// The proof asked for `confirmation` came back: `renewed` = the server renewed the lock
    /// with its token. `true`: the hand-over is proven, the lock is the stealer's (its holder's
    /// connection keeps it until the intent is released); `false`: look again.
    pub fn proved(&mut self, confirmation: &str, renewed: bool) -> bool {
        let asked = self.proving.take().is_some_and(|c| c == confirmation);
        if renewed && asked {
            return true;
        }
        self.unproven.insert(confirmation.to_string());
        false
    }
}

/// A part of a hand-over the holder releases at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The stolen lock, kept on the holder's connection for the stealer.
    Lock,
    /// The confirmation (the stealer's watch of it is granted when it goes).
    Confirmation,
}

/// How the holder's keeping of a lock for a stealer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepEnd {
    /// The stealer released its intent (or died, or lost it), or the watch of it failed.
    IntentEnded,
    /// The kept lock was lost (its lease, its connection).
    LockLost,
    /// The confirmation was lost.
    ConfirmationLost,
}

/// What the holder does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerStep {
    /// Give up its hold of the key (the request's callback is aborted) and keep the lock on its
    /// connection; tell [`Answer::surrendered`] whether there was a lock to give up.
    Surrender,
    /// Hold the confirmation (the lock's token sealed for the stealer) with this lease; tell
    /// [`Answer::confirmation_held`] how it went.
    HoldConfirmation { lease_s: u64 },
    /// Keep the lock for the stealer: watch its intent; tell [`Answer::ended`] what ended it.
    Keep,
    /// Release these, in this order, then the intent when its watch was granted: done.
    Release(Vec<Part>),
    /// Nothing to do (nothing was given up).
    Done,
}

/// The holder's answer to one steal intent on a lock it holds exclusively (see the module
/// docs): a sequence, each step told how the one before went.
#[derive(Debug)]
pub struct Answer {
    confirm_lease_s: u64,
    stage: AnswerStage,
}

#[derive(Debug, PartialEq, Eq)]
enum AnswerStage {
    Start,
    Surrendering,
    Confirming,
    Keeping,
    Over,
}

impl Answer {
    /// An answer for a lock of lease `lease_s` renewed at `renew_ratio`.
    pub fn new(lease_s: f64, renew_ratio: f64) -> Self {
        Answer {
            confirm_lease_s: confirm_lease(lease_s, renew_ratio),
            stage: AnswerStage::Start,
        }
    }

    /// The first step: surrender, before any proof exists; `Done` when the lock cannot be
    /// handed over (its lease leaves the confirmation no room, [`confirm_lease`]).
    pub fn start(&mut self) -> AnswerStep {
        if self.stage != AnswerStage::Start || self.confirm_lease_s == 0 {
            self.stage = AnswerStage::Over;
            return AnswerStep::Done;
        }
        self.stage = AnswerStage::Surrendering;
        AnswerStep::Surrender
    }

    /// The surrender went: `given_up` = there was a lock to give up (it may have changed hands
    /// or been released meanwhile).
    pub fn surrendered(&mut self, given_up: bool) -> AnswerStep {
        if self.stage != AnswerStage::Surrendering || !given_up {
            self.stage = AnswerStage::Over;
            return AnswerStep::Done;
        }
        self.stage = AnswerStage::Confirming;
        AnswerStep::HoldConfirmation {
            lease_s: self.confirm_lease_s,
        }
    }

    /// The confirmation's hold went: `held` = it is held; `lock_lost` = the kept lock was lost
    /// meanwhile.
    pub fn confirmation_held(&mut self, held: bool, lock_lost: bool) -> AnswerStep {
        if self.stage != AnswerStage::Confirming {
            return AnswerStep::Done;
        }
        if held && !lock_lost {
            self.stage = AnswerStage::Keeping;
            return AnswerStep::Keep;
        }
        self.stage = AnswerStage::Over;
        AnswerStep::Release(release_order(held, lock_lost))
    }

    /// The keeping ended by `end`.
    pub fn ended(&mut self, end: KeepEnd) -> AnswerStep {
        if self.stage != AnswerStage::Keeping {
            return AnswerStep::Done;
        }
        self.stage = AnswerStage::Over;
        AnswerStep::Release(release_order(true, end == KeepEnd::LockLost))
    }
}

/// The parts to release, in order (see the module docs): the lock first, the confirmation
/// first when the lock was lost. Also what a driver releases when its answer stops before the
/// release step (a failed request), by what it holds.
pub fn release_order(confirmation_held: bool, lock_lost: bool) -> Vec<Part> {
    match (confirmation_held, lock_lost) {
        (true, true) => vec![Part::Confirmation, Part::Lock],
        (true, false) => vec![Part::Lock, Part::Confirmation],
        (false, _) => vec![Part::Lock],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(exclusive: Option<&str>, confirmations: &[(&str, Option<&str>)]) -> StealLook {
        StealLook {
            exclusive: exclusive.map(str::to_string),
            confirmations: confirmations
                .iter()
                .map(|(c, t)| (c.to_string(), t.map(str::to_string)))
                .collect(),
            shared_holders: 0,
            lease_room: true,
        }
    }

    #[test]
    fn the_confirmation_lease_ends_before_the_lock_can() {
        assert_eq!(confirm_lease(33.0, 0.5), 15);
        assert_eq!(confirm_lease(9.0, 0.5), 3);
        assert_eq!(confirm_lease(8.0, 0.5), 0);
        assert_eq!(confirm_lease(33.0, 0.9), 0);
        assert_eq!(confirm_lease(33.0, 0.0), 0);
        assert_eq!(confirm_lease(f64::NAN, 0.5), 0);
        assert_eq!(Answer::new(6.0, 0.5).start(), AnswerStep::Done);
    }

    /// A forged confirmation (a token that does not renew the lock) and one that does not
    /// unseal are each looked at once; the holder's, proven, is the answer.
    #[test]
    fn only_a_proven_confirmation_is_accepted() {
        let t0 = Instant::now();
        let mut s = Stealer::new(t0, ANSWER_WITHIN);
        let forged = look(Some("k"), &[("c-forged", Some("bad")), ("c-garbled", None)]);
        assert_eq!(
            s.look(t0, &forged),
            StealStep::Prove {
                confirmation: "c-forged".into(),
                lock: "k".into(),
                token: "bad".into()
            }
        );
        assert!(!s.proved("c-forged", false));
        assert_eq!(s.look(t0, &forged), StealStep::Wait);
        let both = look(
            Some("k"),
            &[("c-forged", Some("bad")), ("c-holder", Some("tok"))],
        );
        assert!(
            matches!(s.look(t0, &both), StealStep::Prove { ref confirmation, .. } if confirmation == "c-holder")
        );
        assert!(s.proved("c-holder", true));
    }

    #[test]
    fn a_proof_that_was_not_asked_is_not_an_answer() {
        let t0 = Instant::now();
        let mut s = Stealer::new(t0, ANSWER_WITHIN);
        assert!(!s.proved("c-never-asked", true));
    }

    #[test]
    fn take_when_free_refuse_readers_short_leases_and_silence() {
        let t0 = Instant::now();
        let mut s = Stealer::new(t0, ANSWER_WITHIN);
        assert_eq!(s.look(t0, &look(None, &[])), StealStep::Take);
        // A hand-over ending: its confirmation still held, nobody on the key: wait.
        assert_eq!(
            s.look(t0, &look(None, &[("c-old", Some("t"))])),
            StealStep::Wait
        );
        let mut readers = look(None, &[]);
        readers.shared_holders = 2;
        assert_eq!(
            s.look(t0, &readers),
            StealStep::Refuse(StealRefusal::SharedHolders)
        );
        let mut short = look(Some("k"), &[]);
        short.lease_room = false;
        assert_eq!(
            s.look(t0, &short),
            StealStep::Refuse(StealRefusal::LeaseTooShort)
        );
        assert_eq!(
            s.look(t0 + ANSWER_WITHIN, &look(Some("k"), &[])),
            StealStep::Wait
        );
        assert_eq!(
            s.look(
                t0 + ANSWER_WITHIN + Duration::from_millis(1),
                &look(Some("k"), &[])
            ),
            StealStep::Refuse(StealRefusal::NoAnswer)
        );
    }

    #[test]
    fn the_holder_surrenders_then_proves_then_keeps_and_releases_in_order() {
        let mut a = Answer::new(33.0, 0.5);
        assert_eq!(a.start(), AnswerStep::Surrender);
        assert_eq!(
            a.surrendered(true),
            AnswerStep::HoldConfirmation { lease_s: 15 }
        );
        assert_eq!(a.confirmation_held(true, false), AnswerStep::Keep);
        assert_eq!(
            a.ended(KeepEnd::IntentEnded),
            AnswerStep::Release(vec![Part::Lock, Part::Confirmation])
        );
        assert_eq!(a.ended(KeepEnd::IntentEnded), AnswerStep::Done);

        let mut lost = Answer::new(33.0, 0.5);
        lost.start();
        lost.surrendered(true);
        lost.confirmation_held(true, false);
        assert_eq!(
            lost.ended(KeepEnd::LockLost),
            AnswerStep::Release(vec![Part::Confirmation, Part::Lock])
        );

        let mut failed = Answer::new(33.0, 0.5);
        failed.start();
        failed.surrendered(true);
        assert_eq!(
            failed.confirmation_held(false, false),
            AnswerStep::Release(vec![Part::Lock])
        );
        let mut lost_meanwhile = Answer::new(33.0, 0.5);
        lost_meanwhile.start();
        lost_meanwhile.surrendered(true);
        assert_eq!(
            lost_meanwhile.confirmation_held(true, true),
            AnswerStep::Release(vec![Part::Confirmation, Part::Lock])
        );

        let mut gone = Answer::new(33.0, 0.5);
        gone.start();
        assert_eq!(gone.surrendered(false), AnswerStep::Done);
    }
}
