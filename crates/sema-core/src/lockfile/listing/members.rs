//! The files a lock kind keeps beside its base path, and how a listing folds them into the lock
//! they belong to: a counting semaphore's slots `<base>.slot-<i>-of-<N>` and its waiters' tickets
//! `<base>.queue-<µs>-<hex>`; a shared lock's members `<base>.reader-<hex>`, its waiting writers'
//! and readers' tickets `<base>.writer-<hex>` / `<base>.rwait-<hex>`, its guard `<base>.rw-guard` and the scratch files of a
//! base being rewritten `<base>.rw-<hex>-new` (docs/lock-kinds.md). They are lock files too (the
//! mutex engine takes them), but none is a lock a user asked for: `ls` and `top` show the base,
//! with its holders counted, its waiters, and how long it has been held.

use super::{ListedLock, ListedState};

/// What one internal file beside a base path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// Slot `index` (1…limit-1) of a semaphore of `limit` slots; slot 0 is the base itself.
    Slot { index: u32, limit: u32 },
    /// A waiter's ticket in a semaphore's line.
    Ticket,
    /// One shared holder of a shared lock.
    Reader,
    /// A waiting exclusive request of a shared lock.
    Writer,
    /// A waiting shared request of a shared lock (`<base>.rwait-<hex>`).
    WaitingReader,
    /// The short-held guard of a shared lock's membership changes.
    Guard,
    /// A shared base being written, before its link or rename into place.
    Scratch,
}

impl Member {
    /// A holder of the lock (its live ones are counted as holders).
    pub(super) fn holds(self) -> bool {
        matches!(self, Member::Slot { .. } | Member::Reader)
    }

    /// A waiter for the lock (its live ones are counted as waiters).
    pub(super) fn waits(self) -> bool {
        matches!(
            self,
            Member::Ticket | Member::Writer | Member::WaitingReader
        )
    }
}

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The base name and the kind of `name` when it is one of the internal files of a lock kind;
/// `None` for anything else (the base itself, a lock of its own, another file).
pub fn member_of(name: &str) -> Option<(&str, Member)> {
    let (base, suffix) = name.rsplit_once('.')?;
    if base.is_empty() {
        return None;
    }
    let member = if let Some(rest) = suffix.strip_prefix("slot-") {
        let (index, limit) = rest.split_once("-of-")?;
        let (index, limit) = (digits(index)?, digits(limit)?);
        if index == 0 || index >= limit {
            return None;
        }
        Member::Slot { index, limit }
    } else if let Some(rest) = suffix.strip_prefix("queue-") {
        let (us, tail) = rest.split_once('-')?;
        // Wall-clock microseconds, zero-padded to 20 digits: checked as digits, not parsed.
        if us.is_empty() || !us.bytes().all(|b| b.is_ascii_digit()) || !hex(tail) {
            return None;
        }
        Member::Ticket
    } else if let Some(rest) = suffix.strip_prefix("reader-") {
        hex(rest).then_some(Member::Reader)?
    } else if let Some(rest) = suffix.strip_prefix("writer-") {
        hex(rest).then_some(Member::Writer)?
    } else if let Some(rest) = suffix.strip_prefix("rwait-") {
        hex(rest).then_some(Member::WaitingReader)?
    } else if suffix == "rw-guard" {
        Member::Guard
    } else if let Some(rest) = suffix.strip_prefix("rw-") {
        hex(rest.strip_suffix("-new")?).then_some(Member::Scratch)?
    } else {
        return None;
    };
    Some((base, member))
}

/// What a lock is made of, as far as its internal files tell: `mutex` (none), `semaphore`
/// (slot files, or tickets), `shared` (reader or writer files).
fn kind_of(members: &[(Member, ListedLock)]) -> &'static str {
    if members.iter().any(|(m, _)| {
        matches!(
            m,
            Member::Reader | Member::Writer | Member::WaitingReader | Member::Guard
        )
    }) {
        "shared"
    } else if members
        .iter()
        .any(|(m, _)| matches!(m, Member::Slot { .. } | Member::Ticket))
    {
        "semaphore"
    } else {
        "mutex"
    }
}

fn live(l: &ListedLock) -> bool {
    l.state == ListedState::Held
}

/// Folds the internal files `members` (each looked at as a lock of its own) into their base
/// `lock`:
/// - `holders`: the live slot holders (the base counts as slot 0 when held) or the live
///   readers; `limit`: the smallest limit a live slot file names;
/// - `waiters`: the line's waiters plus the live tickets and waiting writers;
/// - `since`: for a shared lock the oldest live reader's (the base's own times are its last
///   rewrite: the readers' heartbeat renames a fresh base over it every second), for a
///   semaphore the oldest live holder's;
/// - a base that is missing or not held while members hold takes its state and holder facts
///   from the oldest live holder (e.g. slot 0 free, slot 1 held).
pub(super) fn fold(lock: &mut ListedLock, members: Vec<(Member, ListedLock)>) {
    if members.is_empty() {
        return;
    }
    lock.kind = kind_of(&members);
    let shared = lock.kind == "shared";
    let waiting = members.iter().filter(|(m, l)| m.waits() && live(l)).count();
    if waiting > 0 {
        let waiting = u32::try_from(waiting).unwrap_or(u32::MAX);
        lock.waiters = Some(lock.waiters.unwrap_or(0).saturating_add(waiting));
    }
    let mut holding: Vec<&ListedLock> = members
        .iter()
        .filter(|(m, l)| m.holds() && live(l))
        .map(|(_, l)| l)
        .collect();
    holding.sort_by_key(|l| l.since.unwrap_or(i64::MAX));
    let base_holds = !shared && live(lock);
    lock.holders = Some(u32::try_from(holding.len() + usize::from(base_holds)).unwrap_or(u32::MAX));
    lock.limit = members
        .iter()
        .filter_map(|(m, l)| match m {
            Member::Slot { limit, .. } if live(l) => Some(*limit),
            _ => None,
        })
        .min();
    let oldest = holding.first().copied();
    match oldest {
        Some(first) if !live(lock) => {
            // The base is free (or stale) while a member holds: the lock is held by that member.
            let name = std::mem::take(&mut lock.name);
            let path = std::mem::take(&mut lock.path);
            let (waiters, holders, limit, kind) =
                (lock.waiters, lock.holders, lock.limit, lock.kind);
            *lock = first.clone();
            lock.name = name;
            lock.path = path;
            lock.reason = "member-held";
            (lock.waiters, lock.holders, lock.limit, lock.kind) = (waiters, holders, limit, kind);
        }
        Some(first) => {
            let base_since = if shared { None } else { lock.since };
            lock.since = match (base_since, first.since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => b.or(a),
            };
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_of_every_kind() {
        assert_eq!(
            member_of("b.lock.slot-1-of-3"),
            Some(("b.lock", Member::Slot { index: 1, limit: 3 }))
        );
        assert_eq!(
            member_of("b.lock.queue-00000001732000000000-0a1b2c3d"),
            Some(("b.lock", Member::Ticket))
        );
        assert_eq!(
            member_of("b.lock.reader-9f0e"),
            Some(("b.lock", Member::Reader))
        );
        assert_eq!(
            member_of("b.lock.writer-9f0e"),
            Some(("b.lock", Member::Writer))
        );
        assert_eq!(
            member_of("b.lock.rwait-00062a1b2c3d4e5f"),
            Some(("b.lock", Member::WaitingReader))
        );
        assert_eq!(
            member_of("b.lock.rw-guard"),
            Some(("b.lock", Member::Guard))
        );
        assert_eq!(
            member_of("b.lock.rw-9f0e-new"),
            Some(("b.lock", Member::Scratch))
        );
        assert_eq!(
            member_of("job.pid.slot-2-of-4"),
            Some(("job.pid", Member::Slot { index: 2, limit: 4 }))
        );
    }

    fn entry(name: &str, state: ListedState, pid: i64, since: i64) -> ListedLock {
        let mut l = ListedLock::nothing(std::path::Path::new("/d"), name);
        (l.state, l.pid, l.since) = (state, Some(pid), Some(since));
        l
    }

    #[test]
    fn a_shared_lock_is_held_since_its_oldest_live_reader() {
        // The base's own time is its last rewrite (the readers' heartbeat): 1000.
        let mut base = entry("rw.lock", ListedState::Held, 11, 1000);
        base.waiters = Some(0);
        let members = vec![
            (
                Member::Reader,
                entry("rw.lock.reader-aa", ListedState::Held, 11, 700),
            ),
            (
                Member::Reader,
                entry("rw.lock.reader-bb", ListedState::Held, 12, 500),
            ),
            (
                Member::Reader,
                entry("rw.lock.reader-cc", ListedState::Stale, 13, 100),
            ),
            (
                Member::Writer,
                entry("rw.lock.writer-dd", ListedState::Held, 14, 900),
            ),
            (
                Member::Guard,
                ListedLock::nothing(std::path::Path::new("/d"), "rw.lock.rw-guard"),
            ),
        ];
        fold(&mut base, members);
        assert_eq!(base.kind, "shared");
        assert_eq!(base.holders, Some(2), "live readers only");
        assert_eq!(
            base.since,
            Some(500),
            "the oldest live reader, not the base or a dead reader"
        );
        assert_eq!(base.waiters, Some(1), "the waiting writer");
        assert_eq!((base.name.as_str(), base.pid), ("rw.lock", Some(11)));
    }

    #[test]
    fn a_semaphore_counts_the_base_and_its_live_slots() {
        let mut base = entry("s.lock", ListedState::Held, 21, 300);
        fold(
            &mut base,
            vec![
                (
                    Member::Slot { index: 1, limit: 3 },
                    entry("s.lock.slot-1-of-3", ListedState::Held, 22, 200),
                ),
                (
                    Member::Slot { index: 2, limit: 3 },
                    entry("s.lock.slot-2-of-3", ListedState::Stale, 23, 100),
                ),
                (
                    Member::Ticket,
                    entry("s.lock.queue-1-ab", ListedState::Held, 24, 400),
                ),
            ],
        );
        assert_eq!(
            (base.kind, base.holders, base.limit),
            ("semaphore", Some(3 - 1), Some(3))
        );
        assert_eq!(base.since, Some(200));
        assert_eq!(base.waiters, Some(1));
        assert_eq!(base.pid, Some(21));
    }

    #[test]
    fn a_free_base_with_a_live_slot_is_held_by_that_slot() {
        let mut base = ListedLock::nothing(std::path::Path::new("/d"), "s.lock");
        fold(
            &mut base,
            vec![(
                Member::Slot { index: 1, limit: 2 },
                entry("s.lock.slot-1-of-2", ListedState::Held, 31, 50),
            )],
        );
        assert_eq!(base.state, ListedState::Held);
        assert_eq!(base.reason, "member-held");
        assert_eq!(
            (base.name.as_str(), base.pid, base.since),
            ("s.lock", Some(31), Some(50))
        );
        assert_eq!((base.holders, base.limit), (Some(1), Some(2)));
        assert_eq!(base.path, std::path::Path::new("/d/s.lock"));
    }

    #[test]
    fn other_names_are_not_members() {
        for name in [
            "b.lock",
            "b.lock.slot-0-of-2", // slot 0 is the base itself
            "b.lock.slot-2-of-2",
            "b.lock.slot-x-of-2",
            "b.lock.slot-1-of-",
            "b.lock.reader-",
            "b.lock.reader-zz",
            "b.lock.writer",
            "b.lock.queue-12",
            "b.lock.queue-12-xyz",
            "b.lock.rw-guardian",
            "b.lock.rw-9f0e",
            ".reader-9f0e",
            "readme.txt",
        ] {
            assert_eq!(member_of(name), None, "{name}");
        }
    }
}
