//! The decisions of a shared lock, as pure functions of what one look at the directory saw
//! ([`Scene`]): may a reader join, may a writer take the path, is a shared base's group dead.
//! No clock, no file: every case is a unit test here, and `group.rs` only gathers the scene
//! (under the guard) and carries the step out.
//!
//! # Fairness: FIFO between kinds
//!
//! A caller that cannot be served at once takes a *ticket* (`<path>.writer-<µs>` for an
//! exclusive waiter, `<path>.rwait-<µs>` for a shared one, named by the wall clock in
//! microseconds, so that name order is arrival order across processes). A reader is blocked
//! only by a writer ticket older than its own (a newcomer without a ticket: by any writer
//! ticket); a writer by any older ticket and by live readers. So a waiter of either kind is
//! served once every waiter that arrived before it has been served and has released: under a
//! continuous stream of one kind, a waiter of the other kind waits for at most the holds
//! already granted or queued when it arrived (the readers holding then, for a writer; the
//! writers queued ahead of it, for a reader), never for a newcomer.

/// What a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Any number of holders at once.
    Shared,
    /// One holder, excluding shared holders and the plain mutex.
    Exclusive,
}

impl Mode {
    /// `'shared'` / `'exclusive'` (the option values of the bindings).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Exclusive => "exclusive",
        }
    }

    /// The mode named `s`, if any.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "shared" => Some(Mode::Shared),
            "exclusive" => Some(Mode::Exclusive),
            _ => None,
        }
    }
}

/// What is at the lock path itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// Nothing.
    Absent,
    /// A shared base (a `mode=shared` line): the readers' group.
    Shared,
    /// A lock file of anyone else (our mutex or exclusive holder, `sema`, `semats`), judged held.
    Held,
    /// Such a lock file judged stale (its holder on this host died, or it expired): the core
    /// breaks it race-safely before creating.
    Stale,
    /// A symbolic link: refused, never followed.
    Symlink,
}

/// One look at the directory, from the point of view of one caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scene {
    pub base: Base,
    /// Live reader files (`<path>.reader-<hex>`); dead ones are not counted (and are removed).
    pub live_readers: usize,
    /// Live writer tickets older than the caller's ticket (all of them for a caller without one).
    pub writers_ahead: usize,
    /// Live tickets of either kind older than the caller's (all of them without one).
    pub waiters_ahead: usize,
}

/// What the caller does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Join the readers: take a reader file, then make sure the base is a shared base naming a
    /// live reader (`Base::Absent`: create it; `Base::Stale`: break the dead holder first).
    Join,
    /// Take the path as the mutex does (a dead group's base is removed first).
    Take,
    /// Not now.
    Wait(Why),
    /// Never: a symbolic link at the path.
    Refuse,
}

/// Why a caller waits (for `status` and messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A live exclusive, mutex or foreign holder has the path.
    Held,
    /// Live shared holders (a writer waits for them to leave).
    Readers,
    /// A writer arrived earlier (a reader lets it go first).
    WriterAhead,
    /// Waiters arrived earlier (a writer lets them go first).
    WaitersAhead,
}

/// The one decision (see the module docs).
pub fn decide(mode: Mode, scene: &Scene) -> Step {
    if scene.base == Base::Symlink {
        return Step::Refuse;
    }
    match mode {
        Mode::Shared => {
            if scene.base == Base::Held {
                Step::Wait(Why::Held)
            } else if scene.writers_ahead > 0 {
                Step::Wait(Why::WriterAhead)
            } else {
                Step::Join
            }
        }
        Mode::Exclusive => {
            if scene.live_readers > 0 {
                Step::Wait(Why::Readers)
            } else if scene.base == Base::Held {
                Step::Wait(Why::Held)
            } else if scene.waiters_ahead > 0 {
                Step::Wait(Why::WaitersAhead)
            } else {
                Step::Take
            }
        }
    }
}

/// Whether a shared base is held: while any reader file is live. A base whose readers all died
/// (SIGKILL, a crash) is reclaimable at once by every kind of acquirer, the plain mutex
/// included, whatever pid and age the base records.
pub fn group_alive(live_readers: usize) -> bool {
    live_readers > 0
}

/// Whether a waiter with a ticket of `mode` named `mine` is ahead of the ticket `other` (names
/// order arrival: fixed-width microseconds).
pub fn older(other: &str, mine: Option<&str>) -> bool {
    mine.is_none_or(|m| other < m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scene(base: Base, live_readers: usize, writers_ahead: usize, waiters_ahead: usize) -> Scene {
        Scene {
            base,
            live_readers,
            writers_ahead,
            waiters_ahead,
        }
    }

    #[test]
    fn readers_share_and_a_writer_waits_for_them() {
        assert_eq!(
            decide(Mode::Shared, &scene(Base::Absent, 0, 0, 0)),
            Step::Join
        );
        assert_eq!(
            decide(Mode::Shared, &scene(Base::Shared, 3, 0, 0)),
            Step::Join
        );
        assert_eq!(
            decide(Mode::Exclusive, &scene(Base::Shared, 1, 0, 0)),
            Step::Wait(Why::Readers)
        );
    }

    /// Issue 33 defect 1: a dead holder of our format (mutex or exclusive) is no obstacle to a
    /// reader: the core judged it stale, and the reader joins (breaking it first).
    #[test]
    fn a_dead_mutex_or_exclusive_holder_is_reclaimed_by_a_reader() {
        assert_eq!(
            decide(Mode::Shared, &scene(Base::Stale, 0, 0, 0)),
            Step::Join
        );
        assert_eq!(
            decide(Mode::Shared, &scene(Base::Held, 0, 0, 0)),
            Step::Wait(Why::Held)
        );
    }

    /// Issue 33 defect 4: a base whose readers all died is free for a writer at once.
    #[test]
    fn a_dead_group_is_taken_at_once() {
        assert!(!group_alive(0));
        assert!(group_alive(1));
        assert_eq!(
            decide(Mode::Exclusive, &scene(Base::Shared, 0, 0, 0)),
            Step::Take
        );
    }

    /// Issue 33 defect 6, readers' side: a writer that queued first is served first, and a
    /// newcomer writer (a looping one coming back) queues behind a waiting reader.
    #[test]
    fn a_waiting_reader_goes_before_later_writers() {
        // The reader's ticket is the oldest: no writer ahead of it.
        assert_eq!(
            decide(Mode::Shared, &scene(Base::Absent, 0, 0, 1)),
            Step::Join
        );
        // A looping writer that comes back finds the reader's ticket: it queues.
        assert_eq!(
            decide(Mode::Exclusive, &scene(Base::Absent, 0, 0, 1)),
            Step::Wait(Why::WaitersAhead)
        );
        // An older writer ticket does go first.
        assert_eq!(
            decide(Mode::Shared, &scene(Base::Absent, 0, 1, 1)),
            Step::Wait(Why::WriterAhead)
        );
    }

    /// Defect 6, writers' side: while a writer waits, new readers do not join.
    #[test]
    fn readers_arriving_after_a_waiting_writer_wait() {
        assert_eq!(
            decide(Mode::Shared, &scene(Base::Shared, 2, 1, 1)),
            Step::Wait(Why::WriterAhead)
        );
        // The readers already in leave; the writer's ticket is the oldest: it takes the path.
        assert_eq!(
            decide(Mode::Exclusive, &scene(Base::Shared, 0, 0, 0)),
            Step::Take
        );
    }

    #[test]
    fn a_symlink_is_refused_by_both_kinds() {
        for mode in [Mode::Shared, Mode::Exclusive] {
            assert_eq!(decide(mode, &scene(Base::Symlink, 0, 0, 0)), Step::Refuse);
        }
    }

    #[test]
    fn ticket_order_is_name_order() {
        assert!(older("00000000000000a1", Some("00000000000000b0")));
        assert!(!older("00000000000000b0", Some("00000000000000a1")));
        assert!(older("00000000000000b0", None));
    }

    /// A FIFO run of the policy over tickets: 3 looping writers and one reader. The reader is
    /// served after at most the writers that queued before it.
    #[test]
    fn a_stream_of_writers_serves_a_reader_within_the_queue_ahead_of_it() {
        // Tickets in arrival order: W1 (holding), W2, R, then W1 and W3 come back.
        let tickets = [
            ("w2", Mode::Exclusive),
            ("r", Mode::Shared),
            ("w1b", Mode::Exclusive),
        ];
        let mut queue: Vec<(&str, Mode)> = tickets.to_vec();
        let mut served = Vec::new();
        // The path is free after each release; serve whoever the policy lets through.
        while !queue.is_empty() {
            let mut progressed = false;
            for i in 0..queue.len() {
                let (name, mode) = queue[i];
                let ahead = &queue[..i];
                let s = scene(
                    Base::Absent,
                    0,
                    ahead.iter().filter(|(_, m)| *m == Mode::Exclusive).count(),
                    ahead.len(),
                );
                if matches!(decide(mode, &s), Step::Join | Step::Take) {
                    served.push(name);
                    queue.remove(i);
                    progressed = true;
                    break;
                }
            }
            assert!(progressed);
        }
        assert_eq!(served, ["w2", "r", "w1b"]);
    }
}
