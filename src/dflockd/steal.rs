//! The steal's decisions for `lib/locks/dflockd-steal.js`: the core's machines
//! (`sema_core::dflockd::steal`), values converted, nothing decided here.

use std::time::Instant;

use sema_core::dflockd::steal::{
    confirm_lease, release_order, Answer, AnswerStep, KeepEnd, Part, StealLook, StealRefusal,
    StealStep, Stealer, ANSWER_WITHIN, MIN_CONFIRM_S,
};

use super::*;

/// A confirmation of this steal held now, and the token unsealed from it (`null`: it does not
/// unseal).
#[napi(object)]
pub struct NativeStealConfirmation {
    pub key: String,
    pub token: Option<String>,
}

/// The stealer's next step (see `Stealer::look`).
#[napi(object)]
pub struct NativeStealStep {
    #[napi(ts_type = "'prove' | 'take' | 'wait' | 'refuse'")]
    pub step: String,
    /// `prove`: the confirmation to prove, the key to renew and the token to renew it with.
    pub confirmation: Option<String>,
    pub lock: Option<String>,
    pub token: Option<String>,
    /// `refuse`: why.
    #[napi(ts_type = "'shared-holders' | 'lease-too-short' | 'no-answer'")]
    pub refusal: Option<String>,
}

/// A steal's decisions (`Stealer`), from the moment its intent is held.
#[napi]
pub struct NativeStealer {
    inner: Stealer,
}

#[napi]
impl NativeStealer {
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        NativeStealer {
            inner: Stealer::new(Instant::now(), ANSWER_WITHIN),
        }
    }

    /// The next step after a look at the server (`exclusive`: the key whose token proves a
    /// hand-over, or null; `sharedHolders`: readers' slots; `leaseRoom`: the intent's lease
    /// leaves a hand-over room).
    #[napi]
    pub fn look(
        &mut self,
        exclusive: Option<String>,
        confirmations: Vec<NativeStealConfirmation>,
        shared_holders: f64,
        lease_room: bool,
    ) -> NativeStealStep {
        let look = StealLook {
            exclusive,
            confirmations: confirmations
                .into_iter()
                .map(|c| (c.key, c.token))
                .collect(),
            shared_holders: if shared_holders.is_finite() && shared_holders > 0.0 {
                shared_holders as u64
            } else {
                0
            },
            lease_room,
        };
        let step = |s: &str| NativeStealStep {
            step: s.into(),
            confirmation: None,
            lock: None,
            token: None,
            refusal: None,
        };
        match self.inner.look(Instant::now(), &look) {
            StealStep::Prove {
                confirmation,
                lock,
                token,
            } => NativeStealStep {
                confirmation: Some(confirmation),
                lock: Some(lock),
                token: Some(token),
                ..step("prove")
            },
            StealStep::Take => step("take"),
            StealStep::Wait => step("wait"),
            StealStep::Refuse(why) => NativeStealStep {
                refusal: Some(
                    match why {
                        StealRefusal::SharedHolders => "shared-holders",
                        StealRefusal::LeaseTooShort => "lease-too-short",
                        StealRefusal::NoAnswer => "no-answer",
                    }
                    .into(),
                ),
                ..step("refuse")
            },
        }
    }

    /// The proof of `confirmation` came back (`renewed`: the server renewed the lock with its
    /// token): `true` = the hand-over is proven.
    #[napi]
    pub fn proved(&mut self, confirmation: String, renewed: bool) -> bool {
        self.inner.proved(&confirmation, renewed)
    }
}

/// The holder's next step in answering a steal (see `Answer`).
#[napi(object)]
pub struct NativeAnswerStep {
    #[napi(ts_type = "'surrender' | 'hold-confirmation' | 'keep' | 'release' | 'done'")]
    pub step: String,
    /// `hold-confirmation`: the confirmation's lease (s).
    pub lease_s: Option<u32>,
    /// `release`: what to release, in order (then the intent, when its watch was granted).
    #[napi(ts_type = "Array<'lock' | 'confirmation'>")]
    pub parts: Option<Vec<String>>,
}

fn part_names(parts: Vec<Part>) -> Vec<String> {
    parts
        .into_iter()
        .map(|p| match p {
            Part::Lock => "lock".to_string(),
            Part::Confirmation => "confirmation".to_string(),
        })
        .collect()
}

/// What to release, in order, when an answer stops before its release step (the core's
/// `release_order`): `'lock'` and `'confirmation'` (the latter only when `confirmationHeld`).
#[napi(
    js_name = "dflockdStealReleaseOrder",
    ts_return_type = "Array<'lock' | 'confirmation'>"
)]
pub fn dflockd_steal_release_order(confirmation_held: bool, lock_lost: bool) -> Vec<String> {
    part_names(release_order(confirmation_held, lock_lost))
}

fn answer_step(s: AnswerStep) -> NativeAnswerStep {
    let step = |s: &str| NativeAnswerStep {
        step: s.into(),
        lease_s: None,
        parts: None,
    };
    match s {
        AnswerStep::Surrender => step("surrender"),
        AnswerStep::HoldConfirmation { lease_s } => NativeAnswerStep {
            lease_s: Some(u32::try_from(lease_s).unwrap_or(u32::MAX)),
            ..step("hold-confirmation")
        },
        AnswerStep::Keep => step("keep"),
        AnswerStep::Release(parts) => NativeAnswerStep {
            parts: Some(part_names(parts)),
            ..step("release")
        },
        AnswerStep::Done => step("done"),
    }
}

/// A holder's answer to one steal intent (`Answer`).
#[napi]
pub struct NativeStealAnswer {
    inner: Answer,
}

#[napi]
impl NativeStealAnswer {
    /// For a lock of lease `leaseS` (s) renewed at `renewRatio` of it.
    #[napi(constructor)]
    pub fn new(lease_s: f64, renew_ratio: f64) -> Self {
        NativeStealAnswer {
            inner: Answer::new(lease_s, renew_ratio),
        }
    }

    #[napi]
    pub fn start(&mut self) -> NativeAnswerStep {
        answer_step(self.inner.start())
    }

    #[napi]
    pub fn surrendered(&mut self, given_up: bool) -> NativeAnswerStep {
        answer_step(self.inner.surrendered(given_up))
    }

    #[napi]
    pub fn confirmation_held(&mut self, held: bool, lock_lost: bool) -> NativeAnswerStep {
        answer_step(self.inner.confirmation_held(held, lock_lost))
    }

    /// The keeping ended: `'intent'` (the stealer's intent ended, or its watch failed),
    /// `'lock'` (the kept lock was lost), `'confirmation'` (the confirmation was lost).
    #[napi]
    pub fn ended(
        &mut self,
        #[napi(ts_arg_type = "'intent' | 'lock' | 'confirmation'")] end: String,
    ) -> NativeAnswerStep {
        let end = match end.as_str() {
            "lock" => KeepEnd::LockLost,
            "confirmation" => KeepEnd::ConfirmationLost,
            _ => KeepEnd::IntentEnded,
        };
        answer_step(self.inner.ended(end))
    }
}

/// The confirmation's lease (s) for a lock of lease `leaseS` renewed at `renewRatio`; 0 when a
/// hand-over has no room (see `confirm_lease`).
#[napi(js_name = "dflockdConfirmLease")]
pub fn dflockd_confirm_lease(lease_s: f64, renew_ratio: f64) -> u32 {
    u32::try_from(confirm_lease(lease_s, renew_ratio)).unwrap_or(u32::MAX)
}

/// How long a stealer waits for a proven answer (ms): the core's `ANSWER_WITHIN`.
#[napi]
pub const DFLOCKD_STEAL_ANSWER_MS: u32 = ANSWER_WITHIN.as_millis() as u32;

/// The shortest confirmation lease (s) a hand-over needs: the core's `MIN_CONFIRM_S`.
#[napi]
pub const DFLOCKD_STEAL_MIN_CONFIRM_S: u32 = MIN_CONFIRM_S as u32;
