//! The decisions of a counting semaphore, as pure functions of what one look at the directory
//! found: which slots to try, whether the limits agree, whether a grant just made may stand.
//! Nothing here touches a file or a clock, so every case is a unit test below.
//!
//! The invariant they keep: **no grant ever makes more holders than the smallest limit among
//! the live holders whose limit is known.** A slot file's limit is in its name
//! (`<base>.slot-<i>-of-<N>`), so slots of one limit are at most N files (the base + N-1
//! siblings); a grant is checked *after* its file exists, against the live siblings of any
//! other limit (a check before waiting only, as the JavaScript version made, let a waiter and a
//! newcomer of another limit both pass it). Two grants of different limits made at the same
//! moment both see each other and both yield, so one of them never standing is the worst case.
//! The base path's holder records no limit (`sema`, `semats` and our slot 0 write the same
//! format): it counts as one holder of whatever limit the siblings have.

/// A sibling slot file's name: `<base>.slot-<index>-of-<limit>`, `1 <= index < limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotName {
    /// The slot's number (the base path is slot 0 and has no sibling name).
    pub index: u64,
    /// The limit of the acquirer that took it.
    pub limit: u64,
}

impl SlotName {
    /// The suffix after the base path's file name: `.slot-<index>-of-<limit>`.
    pub fn suffix(&self) -> String {
        format!(".slot-{}-of-{}", self.index, self.limit)
    }

    /// The slot named by `suffix` (what follows the base's file name), in the one spelling
    /// [`SlotName::suffix`] writes (no leading zeros, `1 <= index < limit`); `None` otherwise.
    pub fn parse(suffix: &str) -> Option<SlotName> {
        let rest = suffix.strip_prefix(".slot-")?;
        let (index, limit) = rest.split_once("-of-")?;
        let number = |s: &str| -> Option<u64> {
            let canonical = !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && (s == "0" || !s.starts_with('0'));
            if canonical {
                s.parse().ok()
            } else {
                None
            }
        };
        let slot = SlotName {
            index: number(index)?,
            limit: number(limit)?,
        };
        (slot.index >= 1 && slot.index < slot.limit).then_some(slot)
    }
}

/// What one look found in a slot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// No file: the slot is free.
    Absent,
    /// A holder the engine judges held (alive, or not provably dead).
    Live,
    /// A file whose holder is reclaimable now (dead on this host, or stale).
    Dead,
}

/// A sibling slot file and what a look found in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sibling {
    pub slot: SlotName,
    pub state: SlotState,
}

/// Where an acquirer stands: a *newcomer* has not yet seen the limits agree; a *waiter* has
/// (its first look found no live slot of another limit) and is waiting for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Newcomer,
    Waiter,
}

/// What to do after a look at the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// `LIMIT_MISMATCH`: a live slot was taken with this other limit.
    Mismatch(SlotName),
    /// Every slot of this limit is held (or a live holder of a larger limit is in the way of a
    /// waiter): wait for a change.
    Wait,
    /// Try these slots in this order (0 = the base path), each with one attempt: the base
    /// first (a tool that knows only the base sees the lock taken), then the lowest-numbered
    /// free sibling. A dead sibling counts as free: its file is removed first.
    Try(Vec<u64>),
}

/// The first live sibling of a limit other than `limit`, the smallest such limit first (the
/// one the invariant is about).
fn conflict(limit: u64, siblings: &[Sibling]) -> Option<SlotName> {
    siblings
        .iter()
        .filter(|s| s.state == SlotState::Live && s.slot.limit != limit)
        .map(|s| s.slot)
        .min_by_key(|s| (s.limit, s.index))
}

/// Whether a live holder of `other` turns `limit`'s acquirer away (`LIMIT_MISMATCH`) rather than
/// making it wait: always for a newcomer (its limit disagrees with a holder's: a configuration
/// mistake, reported at once, as dflockd's `error_limit_mismatch`); for a waiter only when the
/// holder's limit is smaller than its own (then its grant could never stand; a holder of a
/// larger limit is a newcomer that slipped in while only the base was held, and leaves).
fn turned_away(limit: u64, standing: Standing, other: SlotName) -> bool {
    standing == Standing::Newcomer || other.limit < limit
}

/// The plan of an acquirer of `limit` after a look: `base` is the base path's state, `siblings`
/// every sibling slot file found (any limit).
pub fn plan(limit: u64, standing: Standing, base: SlotState, siblings: &[Sibling]) -> Plan {
    if let Some(other) = conflict(limit, siblings) {
        return if turned_away(limit, standing, other) {
            Plan::Mismatch(other)
        } else {
            Plan::Wait
        };
    }
    let mut order = Vec::with_capacity(2);
    if base != SlotState::Live {
        order.push(0);
    }
    if let Some(free) = lowest_free(limit, siblings) {
        order.push(free);
    }
    if order.is_empty() {
        Plan::Wait
    } else {
        Plan::Try(order)
    }
}

/// The lowest sibling index of `limit` with no live holder (absent or dead), if any.
fn lowest_free(limit: u64, siblings: &[Sibling]) -> Option<u64> {
    let mut live: Vec<u64> = siblings
        .iter()
        .filter(|s| s.slot.limit == limit && s.state == SlotState::Live)
        .map(|s| s.slot.index)
        .collect();
    live.sort_unstable();
    let mut candidate = 1;
    for i in live {
        if i > candidate {
            break;
        }
        if i == candidate {
            candidate += 1;
        }
    }
    (candidate < limit).then_some(candidate)
}

/// The sibling files a look found dead, of any limit: removed by whoever looks (a dead slot
/// of a limit nobody uses any more would otherwise stay forever).
pub fn dead(siblings: &[Sibling]) -> impl Iterator<Item = SlotName> + '_ {
    siblings
        .iter()
        .filter(|s| s.state == SlotState::Dead)
        .map(|s| s.slot)
}

/// What becomes of a grant just made, after a second look at the siblings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterGrant {
    /// No live slot of another limit: the grant stands.
    Keep,
    /// Release it: `LIMIT_MISMATCH` (naming that slot) for a newcomer or against a smaller
    /// limit, else back to waiting.
    Yield(Option<SlotName>),
}

/// Whether the grant of a slot to an acquirer of `limit` may stand, given the siblings seen
/// after its file was created (its own among them or not: only other limits count).
pub fn after_grant(limit: u64, standing: Standing, siblings: &[Sibling]) -> AfterGrant {
    match conflict(limit, siblings) {
        None => AfterGrant::Keep,
        Some(other) if turned_away(limit, standing, other) => AfterGrant::Yield(Some(other)),
        Some(_) => AfterGrant::Yield(None),
    }
}

/// How many slots of `limit` are taken (a file present, live or not yet reclaimed), the base
/// included: `status`'s `holders`.
pub fn taken(limit: u64, base: SlotState, siblings: &[Sibling]) -> u64 {
    let base = u64::from(base != SlotState::Absent);
    base + siblings
        .iter()
        .filter(|s| s.slot.limit == limit && s.state != SlotState::Absent)
        .count() as u64
}

/// Whether an acquirer of `limit` would find a slot now (`wait`): `Err` the mismatch it would
/// report.
pub fn free_now(limit: u64, base: SlotState, siblings: &[Sibling]) -> Result<bool, SlotName> {
    match plan(limit, Standing::Newcomer, base, siblings) {
        Plan::Mismatch(other) => Err(other),
        Plan::Wait => Ok(false),
        Plan::Try(_) => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(index: u64, limit: u64, state: SlotState) -> Sibling {
        Sibling {
            slot: SlotName { index, limit },
            state,
        }
    }
    use SlotState::{Absent, Dead, Live};
    use Standing::{Newcomer, Waiter};

    #[test]
    fn names_round_trip_in_one_spelling() {
        let s = SlotName {
            index: 3,
            limit: 10,
        };
        assert_eq!(s.suffix(), ".slot-3-of-10");
        assert_eq!(SlotName::parse(".slot-3-of-10"), Some(s));
        for bad in [
            ".slot-03-of-10",
            ".slot-0-of-2",
            ".slot-2-of-2",
            ".slot--of-2",
            ".slot-1-of-",
            ".slot-1-of-2.tmp",
            ".slot-1-of-+2",
            ".queue-1",
            ".slot-99999999999999999999999-of-1",
        ] {
            assert_eq!(SlotName::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn base_first_then_the_lowest_free_sibling() {
        assert_eq!(plan(3, Newcomer, Absent, &[]), Plan::Try(vec![0, 1]));
        assert_eq!(
            plan(3, Newcomer, Live, &[slot(1, 3, Live)]),
            Plan::Try(vec![2])
        );
        // A dead sibling is as good as a free one (its file is removed first).
        assert_eq!(
            plan(3, Newcomer, Live, &[slot(1, 3, Dead), slot(2, 3, Live)]),
            Plan::Try(vec![1])
        );
        assert_eq!(
            plan(3, Waiter, Live, &[slot(1, 3, Live), slot(2, 3, Live)]),
            Plan::Wait
        );
        assert_eq!(plan(1, Waiter, Live, &[]), Plan::Wait);
        // A huge limit costs nothing: only the files present are looked at.
        assert_eq!(plan(1_000_000_000, Newcomer, Live, &[]), Plan::Try(vec![1]));
    }

    #[test]
    fn a_live_slot_of_another_limit_turns_a_newcomer_away() {
        assert_eq!(
            plan(3, Newcomer, Live, &[slot(1, 2, Live)]),
            Plan::Mismatch(SlotName { index: 1, limit: 2 })
        );
        // A dead one does not count (it is removed).
        assert_eq!(
            plan(3, Newcomer, Live, &[slot(1, 2, Dead)]),
            Plan::Try(vec![1])
        );
        assert_eq!(dead(&[slot(1, 2, Dead), slot(1, 3, Live)]).count(), 1);
    }

    /// Issue 33, defect 2: A (limit 2) holds the base, B (limit 2) released slot-1-of-2,
    /// W (limit 2) waits, C (limit 3) arrives. Whichever links first, at most 2 hold.
    #[test]
    fn the_limit_is_checked_at_every_grant() {
        // C linked slot-1-of-3 first and kept it; W's grant of slot-1-of-2 then sees it and
        // yields (W waits on: C, of a larger limit, is the one that leaves).
        let c = [slot(1, 3, Live)];
        assert_eq!(after_grant(2, Waiter, &c), AfterGrant::Yield(None));
        assert_eq!(plan(2, Waiter, Live, &c), Plan::Wait);
        // W linked first and kept it: C's look (or its grant) sees slot-1-of-2: LIMIT_MISMATCH.
        let w = [slot(1, 2, Live)];
        let slot_of_two = SlotName { index: 1, limit: 2 };
        let two = Some(slot_of_two);
        assert_eq!(plan(3, Newcomer, Live, &w), Plan::Mismatch(slot_of_two));
        assert_eq!(after_grant(3, Newcomer, &w), AfterGrant::Yield(two));
        // Both linked at once: both yield; C, the newcomer, with LIMIT_MISMATCH.
        let both = [slot(1, 2, Live), slot(1, 3, Live)];
        assert_eq!(after_grant(2, Waiter, &both), AfterGrant::Yield(None));
        assert_eq!(after_grant(3, Newcomer, &both), AfterGrant::Yield(two));
        // A waiter of the larger limit also leaves when a smaller limit holds: two waiters of
        // different limits cannot keep yielding to each other.
        assert_eq!(after_grant(3, Waiter, &both), AfterGrant::Yield(two));
        // Own limit only: the grant stands.
        assert_eq!(
            after_grant(2, Newcomer, &[slot(1, 2, Live)]),
            AfterGrant::Keep
        );
    }

    /// The invariant over every order of two grants of different limits beside a live base:
    /// after both decided, the holders never exceed the smaller limit.
    #[test]
    fn no_order_of_two_grants_exceeds_the_smaller_limit() {
        for (first, second) in [(2u64, 3u64), (3, 2)] {
            for standing_second in [Newcomer, Waiter] {
                // `first` linked and checked alone: it stands (its own limit only).
                let alone = [slot(1, first, Live)];
                assert_eq!(after_grant(first, Waiter, &alone), AfterGrant::Keep);
                // `second` linked after it and checks: it must yield.
                let both = [slot(1, first, Live), slot(1, second, Live)];
                let kept = after_grant(second, standing_second, &both) == AfterGrant::Keep;
                let holders = 1 + 1 + u64::from(kept);
                assert!(holders <= first.min(second), "{first} then {second}");
            }
        }
    }

    #[test]
    fn status_counts_present_files_of_its_limit() {
        let sibs = [slot(1, 3, Live), slot(2, 3, Dead), slot(1, 2, Live)];
        assert_eq!(taken(3, Live, &sibs), 3);
        assert_eq!(taken(3, Absent, &[]), 0);
        assert_eq!(
            free_now(3, Live, &[slot(1, 3, Live), slot(2, 3, Live)]),
            Ok(false)
        );
        assert_eq!(
            free_now(3, Live, &[slot(1, 3, Live), slot(2, 3, Dead)]),
            Ok(true)
        );
        assert_eq!(
            free_now(3, Absent, &[slot(1, 2, Live)]),
            Err(SlotName { index: 1, limit: 2 })
        );
    }
}
