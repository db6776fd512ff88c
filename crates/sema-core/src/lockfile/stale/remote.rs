//! A holder on another host: judged by its heartbeat's progress on the waiter's own monotonic
//! clock, never by comparing clocks across machines.
//!
//! "Another host" is a lock file of this package whose `host=` is not ours: another machine
//! sharing the directory (NFS, SMB), or another pid namespace of this machine (a container
//! sharing a volume), whose pids we cannot probe. Its `timestamp=` was written by the holder's
//! wall clock and its mtime by the holder's (or the file server's) clock: both are compared here
//! only for equality with what this process saw before, never with our clock.
//!
//! # The rule
//!
//! - **Waiter.** Every look at such a file notes its *evidence* (the content's hash and length,
//!   the mtime and ctime as the file system shows them) per file identity in a
//!   [`ProgressMemory`], with the instant of this process's monotonic clock at which the
//!   evidence was first seen in its current form. When it has stayed the same for
//!   [`remote_bound`] (`REMOTE_BEATS` = 6 *evidence periods*, see below) the holder is dead and
//!   the engine's normal safe breaking takes the lock. A file without `heartbeat=` (the holder's
//!   heartbeat is off, has not beaten yet, or an older version wrote it) is given the whole
//!   `staleTimeout` instead (at least 6 s), still measured locally; until its first beat has
//!   changed the file a holder therefore beats, and counts its loss, by 1 s periods whatever its
//!   own period ([`HolderProgress::beat_period`]), so the argument below holds with `E` = 1 s.
//! - **Holder.** The heartbeat notes the instant *before* each write that changed the file's
//!   content ([`HolderProgress`]). When no write has changed it for [`holder_loss_after`]
//!   (`HOLDER_LOSS_BEATS` = 3 evidence periods) the holder counts the lock as lost: `signal`
//!   aborts, `onLost` runs, `LOCK_LOST` — the same rule as the dflockd lease clock
//!   (`dflockd::held::schedule`), where the client declares the loss a guard before the server's
//!   deadline.
//!
//! The *evidence period* `E` is the holder's heartbeat period, at least 1 s: the timestamp is
//! whole seconds, so the content changes at most once a second whatever the period (a 100 ms
//! heartbeat rewrites the same bytes ten times a second; on a file system with a coarse mtime
//! those rewrites show nothing).
//!
//! # Why a live holder is never taken (the numbers)
//!
//! Let `w` be the real time at which the holder started its last content-changing write. A
//! waiter cannot see that content before `w`, so it starts counting at `≥ w` and takes the lock
//! at `≥ w + 6E`. The holder's heartbeat runs every period `P ≤ E`; the first beat at or after
//! `w + 3E` finds no progress for `3E` and declares the loss, at `≤ w + 3E + P + d ≤ w + 4E + d`
//! where `d` is how late the heartbeat thread runs. So the holder is told before any waiter may
//! take the lock whenever `d < 2E` (2 s with the default 1 s heartbeat). A healthy holder changes
//! its content every `E + d`, so it never declares a false loss while `d < 2E` either. Monotonic
//! clocks run at the same rate to within ~100 ppm (0.6 ms over 6 s); the waiter's looks are
//! every `retryInterval` (100 ms), which only makes it later. A waiter's clock that stops while
//! its machine sleeps makes it later still. With the default 1 s heartbeat: a dead holder on
//! another host is taken 6 s after the waiter first saw its last heartbeat (6–7 s after it died),
//! a holder whose writes fail is told after 3–4 s.
//!
//! What the rule cannot cover, as no lease can: a holder whose whole process is stopped
//! (SIGSTOP, a paused VM) for longer than `6E` runs no heartbeat and is taken; when it resumes,
//! its next beat (within `P`) finds the file replaced and reports the loss, but code it runs
//! before that beat runs without the lock. A heartbeat write that hangs in the kernel (an NFS
//! `hard` mount whose server the holder cannot reach while the waiter can) stops the heartbeat
//! thread too. NFS clients cache attributes (`actimeo`), but a waiter opens the file at every
//! look, and close-to-open consistency revalidates the attributes at each open.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A waiter takes a holder on another host whose evidence stayed the same this many evidence
/// periods, measured on its own monotonic clock (see the module docs for the argument).
pub const REMOTE_BEATS: u32 = 6;

/// A holder whose heartbeat could not change its file for this many evidence periods counts its
/// lock as lost: at most `HOLDER_LOSS_BEATS + 1` periods after its last progress, which leaves
/// two periods of scheduling delay before a waiter's `REMOTE_BEATS`.
pub const HOLDER_LOSS_BEATS: u32 = 3;

/// The content changes at most once a second (whole-second timestamps).
const MIN_EVIDENCE_PERIOD: Duration = Duration::from_secs(1);

/// The period in which a live holder with heartbeat `period` changes its file at least once:
/// `period`, at least 1 s.
pub fn evidence_period(period: Duration) -> Duration {
    period.max(MIN_EVIDENCE_PERIOD)
}

/// How long a holder on another host must show no progress, observed locally, before it counts
/// as dead: `REMOTE_BEATS` evidence periods of its recorded heartbeat (`heartbeat=` ms), or the
/// whole `stale_timeout` when the file records none.
pub fn remote_bound(heartbeat_ms: Option<u64>, stale_timeout: Duration) -> Duration {
    match heartbeat_ms {
        Some(ms) => evidence_period(Duration::from_millis(ms)).saturating_mul(REMOTE_BEATS),
        // Before its first beat a holder's file has no `heartbeat=` line: never less than what
        // a 1 s heartbeat is given, so a tiny stale timeout cannot beat the holder's own loss
        // clock, which runs from its acquisition by 1 s periods until that beat
        // (`HolderProgress::beat_period`).
        None => stale_timeout.max(MIN_EVIDENCE_PERIOD.saturating_mul(REMOTE_BEATS)),
    }
}

/// How long a holder with heartbeat `period` may go without a content-changing write before it
/// counts its lock as lost: `HOLDER_LOSS_BEATS` evidence periods.
pub fn holder_loss_after(period: Duration) -> Duration {
    evidence_period(period).saturating_mul(HOLDER_LOSS_BEATS)
}

/// What a look at a lock file shows of its holder's heartbeat. Compared only for equality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Evidence {
    /// A hash of the bytes (the timestamp line changes at every whole-second beat).
    pub content_hash: u64,
    pub len: u64,
    /// The mtime and ctime in nanoseconds as the file system shows them (any clock's).
    pub modified_ns: i128,
    pub changed_ns: i128,
}

impl Evidence {
    /// The evidence of a file with `bytes` and `meta`.
    pub fn of(bytes: &[u8], meta: &std::fs::Metadata) -> Evidence {
        let nanos = |t: std::io::Result<std::time::SystemTime>| {
            t.ok()
                .map(|m| match m.duration_since(std::time::UNIX_EPOCH) {
                    Ok(d) => d.as_nanos() as i128,
                    Err(e) => -(e.duration().as_nanos() as i128),
                })
                .unwrap_or(0)
        };
        #[cfg(unix)]
        let changed_ns = {
            use std::os::unix::fs::MetadataExt;
            i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
        };
        #[cfg(not(unix))]
        let changed_ns = 0;
        Evidence::from_parts(bytes, nanos(meta.modified()), changed_ns)
    }

    /// The evidence of a file with `bytes` whose mtime and ctime are `modified_ns` and
    /// `changed_ns` (the simulator's files have no `Metadata`).
    pub fn from_parts(bytes: &[u8], modified_ns: i128, changed_ns: i128) -> Evidence {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut hasher);
        Evidence {
            content_hash: hasher.finish(),
            len: bytes.len() as u64,
            modified_ns,
            changed_ns,
        }
    }
}

struct Seen {
    evidence: Evidence,
    /// When this process first saw `evidence` (its monotonic clock).
    since: Instant,
    last_look: Instant,
}

/// Per file identity, the evidence last seen and since when (the waiter's side of the rule).
/// Pure: the caller passes the instant, so tests drive it with a fake clock.
pub struct ProgressMemory<K> {
    seen: HashMap<K, Seen>,
}

/// Files not looked at for this long are forgotten once the memory holds
/// [`PRUNE_ABOVE`] of them (a waiter looks at least every `retryInterval`; forgetting a file
/// only restarts its count, which delays a takeover and never hastens one).
const FORGET_AFTER: Duration = Duration::from_secs(600);
const PRUNE_ABOVE: usize = 256;

impl<K: Eq + Hash> Default for ProgressMemory<K> {
    fn default() -> Self {
        ProgressMemory {
            seen: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash> ProgressMemory<K> {
    /// Note a look at file `key` at `now`: how long its evidence has been unchanged as this
    /// process saw it (zero at the first look and at every change).
    pub fn note(&mut self, key: K, evidence: Evidence, now: Instant) -> Duration {
        if let Some(seen) = self.seen.get_mut(&key) {
            seen.last_look = now;
            if seen.evidence == evidence {
                return now.saturating_duration_since(seen.since);
            }
            seen.evidence = evidence;
            seen.since = now;
            return Duration::ZERO;
        }
        if self.seen.len() >= PRUNE_ABOVE {
            self.seen
                .retain(|_, s| now.saturating_duration_since(s.last_look) < FORGET_AFTER);
        }
        self.seen.insert(
            key,
            Seen {
                evidence,
                since: now,
                last_look: now,
            },
        );
        Duration::ZERO
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

static MEMORY: Mutex<Option<ProgressMemory<(u64, u64)>>> = Mutex::new(None);

/// [`ProgressMemory::note`] in this process's memory, at `Instant::now()`; `file` is the file's
/// identity (device, inode).
pub(crate) fn note_remote(file: (u64, u64), evidence: Evidence) -> Duration {
    let now = Instant::now();
    let mut guard = MEMORY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    guard
        .get_or_insert_with(Default::default)
        .note(file, evidence, now)
}

/// What a heartbeat tick did to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeatOutcome {
    /// Written, with content other than before (a new whole second, a changed record).
    Changed,
    /// Written, the same bytes as before (a sub-second heartbeat within one second).
    Same,
    /// Ownership could not be told, or the write failed.
    Failed,
}

/// The holder's side of the rule: the instant before its last content-changing write, and
/// whether a beat has changed the file yet. Pure: the caller passes the instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HolderProgress {
    last_progress: Instant,
    period: Duration,
    beaten: bool,
}

impl HolderProgress {
    /// A lock whose file was written (linked into place) at `written`, beating every `period`.
    pub fn new(written: Instant, period: Duration) -> Self {
        HolderProgress {
            last_progress: written,
            period,
            beaten: false,
        }
    }

    /// The period to the next beat: the heartbeat's, but at most 1 s until a beat has changed the
    /// file. Before that beat the file has no `heartbeat=` line, so a waiter on another host
    /// gives it `remote_bound(None, staleTimeout)`, as little as `REMOTE_BEATS` × 1 s (6 s) with a
    /// short stale timeout: the holder beats and counts its loss by 1 s periods until then (told
    /// after 3–4 s), whatever its own period (a 3 s heartbeat was told only after 9 s, and a
    /// waiter with a 6 s stale timeout took the lock at 6 s: the simulator's seed 655).
    pub fn beat_period(&self) -> Duration {
        if self.beaten {
            self.period
        } else {
            self.period.min(MIN_EVIDENCE_PERIOD)
        }
    }

    /// A tick that started its write at `started` ended with `outcome`, seen at `now`: `true`
    /// when the lock must now count as lost (no progress for [`HolderProgress::loss_after`]).
    pub fn after_tick(&mut self, started: Instant, outcome: BeatOutcome, now: Instant) -> bool {
        if outcome == BeatOutcome::Changed {
            self.last_progress = self.last_progress.max(started);
            self.beaten = true;
        }
        now.saturating_duration_since(self.last_progress) >= self.loss_after()
    }

    /// How long the holder goes without progress before it counts the lock as lost:
    /// [`holder_loss_after`] of [`HolderProgress::beat_period`].
    pub fn loss_after(&self) -> Duration {
        holder_loss_after(self.beat_period())
    }
}
