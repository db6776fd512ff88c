//! Listing the locks of a directory (`sema-native ls`/`top`): every File-Based Semaphore lock
//! file in it, written by any tool (ours, `sema`, `semats`, a shell), with the engine's own
//! judgement of each (held, stale, free) and the facts about its holder.
//!
//! Only looks, never changes anything: entries are read without following symbolic links (a
//! symlink is reported as one, with its target as `readlink` tells it, never opened), nothing is
//! created, broken or locked, and queues are counted from `/proc/locks` (see
//! `queue::waiting_processes`). Files of other users are read as far
//! as the permissions allow; an unreadable one is listed as held by an unknown holder, as the
//! engine would treat it.
//!
//! Which entries are locks: every name ending in `.lock` (files and symlinks alike), and any
//! other regular file whose content parses as a lock (`pid=` and `timestamp=`), except the
//! `*.tmp` files semats writes before renaming and the internal files of the lock kinds
//! (a semaphore's slots and tickets, a shared lock's readers, writers and guard: see
//! [`members`]), which are folded into the lock they belong to.

pub mod members;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::error::LockError;
use super::format::LockInfo;
use super::lock_file::LockFile;
use super::options::LockOptions;
use super::process::{host_identity, now_unix_secs, probe_liveness, process_args, Liveness};
use super::queue::waiting_processes;
use super::stale::{HeldBecause, Observation, StaleBecause, StaleJudgement};
use members::{member_of, Member};

/// What a listed lock is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedState {
    /// Somebody holds it (including an unknown holder: unparseable, unreadable, a symlink).
    Held,
    /// Its holder is gone (or it expired): the next acquire breaks it.
    Stale,
    /// Free: the file went away between the listing and the look (waiters may be queued).
    Free,
}

impl ListedState {
    pub fn as_str(self) -> &'static str {
        match self {
            ListedState::Held => "held",
            ListedState::Stale => "stale",
            ListedState::Free => "free",
        }
    }
}

/// One lock of a directory.
#[derive(Debug, Clone)]
pub struct ListedLock {
    /// The entry's name in the directory, and its full path.
    pub name: String,
    pub path: PathBuf,
    pub state: ListedState,
    /// Why, in a word: the engine's judgement (`own-host-holder-alive`, `foreign-expired-and-not-running`, …).
    pub reason: &'static str,
    /// `sema-native` (our keys `host=`/`token=`), `sema/semats` (the base format), `unparseable`,
    /// `symlink`, or `missing`.
    pub format: &'static str,
    /// A symlink's target as `readlink` tells it (never followed).
    pub link_target: Option<String>,
    /// The file's owner (Unix uid), when known.
    pub owner_uid: Option<u32>,
    /// The lock file's fields, without its ownership token.
    pub pid: Option<i64>,
    pub timestamp: Option<i64>,
    pub tag: Option<String>,
    /// The hostname part of `host=` (ours only), and whether it is this machine (same boot and
    /// pid namespace too).
    pub host: Option<String>,
    pub this_host: Option<bool>,
    /// `kill(pid, 0)` on this host: `Some(true)` running (also another user's), `Some(false)`
    /// gone, `None` when the pid means nothing here (another host) or cannot be probed.
    pub holder_running: Option<bool>,
    /// The holder's command line, where the system tells it (see [`process_args`]).
    pub command_line: Option<Vec<String>>,
    /// When the lock was taken, in Unix seconds: a foreign file's `timestamp=`; for ours (whose
    /// `timestamp=` the heartbeat refreshes) its link time: see `acquired_at`.
    pub since: Option<i64>,
    /// Processes of this machine standing in its line (`queue::waiting_processes`), plus the live
    /// waiters its kind records in files (a semaphore's tickets, a shared lock's waiting
    /// writers); `None` where there is no queue to count.
    pub waiters: Option<u32>,
    /// `mutex`, `semaphore` or `shared`, as far as its internal files tell (see [`members`]).
    pub kind: &'static str,
    /// A semaphore's or shared lock's live holders; `None` for a mutex.
    pub holders: Option<u32>,
    /// The smallest limit named by a live slot of a semaphore.
    pub limit: Option<u32>,
}

/// The locks of `dir`, sorted by name, judged with `options` (its `stale_timeout` decides what
/// counts as stale). Fails (`IO_ERROR`) only when the directory itself cannot be read.
pub fn list_locks(dir: &Path, options: &LockOptions) -> Result<Vec<ListedLock>, LockError> {
    let cannot = |e: io::Error| LockError::io(&format!("Cannot list {}", dir.display()), e);
    // The queue names locks by their canonical path: resolve the directory once.
    let canonical = std::fs::canonicalize(dir).map_err(cannot)?;
    let mut bases: BTreeMap<String, Option<ListedLock>> = BTreeMap::new();
    let mut members_of: BTreeMap<String, Vec<(Member, String)>> = BTreeMap::new();
    for entry in std::fs::read_dir(&canonical).map_err(cannot)? {
        let Ok(entry) = entry else { continue };
        let Ok(name) = entry.file_name().into_string() else {
            continue; // not UTF-8: not a name any of the tools makes
        };
        // `DirEntry::file_type` does not follow symlinks.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if let Some((base, member)) = member_of(&name) {
            // Never a symlink: the engine never takes one, so one is nobody's member.
            if kind.is_file() {
                members_of
                    .entry(base.to_owned())
                    .or_default()
                    .push((member, name));
            }
            continue;
        }
        let named_lock = name.ends_with(".lock");
        if !(kind.is_symlink() && named_lock || kind.is_file() && !name.ends_with(".tmp")) {
            continue;
        }
        let listed = look(&canonical, &name, named_lock, options);
        bases.insert(name, listed);
    }
    for (base, members) in members_of {
        let looked = look_members(&canonical, members, options);
        let slot = bases.entry(base).or_insert(None);
        let lock = match slot {
            Some(lock) => lock,
            // A base that is missing (slot 0 free), or whose content is not a lock (a shared
            // base being replaced), is listed under its name while a member holds or waits.
            None if looked.iter().any(|(m, _)| m.holds() || m.waits()) => {
                match look(&canonical, slot_name(&looked), true, options) {
                    Some(l) => slot.insert(l),
                    None => continue,
                }
            }
            None => continue,
        };
        members::fold(lock, looked);
    }
    Ok(bases.into_values().flatten().collect())
}

/// The base name of looked-at members (they all share it).
fn slot_name(looked: &[(Member, ListedLock)]) -> &str {
    looked
        .first()
        .and_then(|(_, l)| member_of(&l.name))
        .map_or("", |(base, _)| base)
}

/// Looks at each internal file of a lock: only those whose content is a lock count (a file
/// that only has such a name is nobody's member); the guard and scratch files are not looked at
/// (they hold or wait for nothing a user asked for).
fn look_members(
    dir: &Path,
    members: Vec<(Member, String)>,
    options: &LockOptions,
) -> Vec<(Member, ListedLock)> {
    members
        .into_iter()
        .filter_map(|(member, name)| match member {
            Member::Guard | Member::Scratch => Some((member, ListedLock::nothing(dir, &name))),
            _ => look(dir, &name, false, options).map(|l| (member, l)),
        })
        .collect()
}

/// One lock path, whatever its name (the waiting line's facts about the lock it waits for).
/// The path's directory is resolved as the engine resolves it (the queue is named by it).
pub fn describe_lock(path: &Path, options: &LockOptions) -> Option<ListedLock> {
    let name = path.file_name()?.to_str()?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut lock = look(&dir, name, true, options)?;
    let members: Vec<(Member, String)> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let n = e.file_name().into_string().ok()?;
            let (base, member) = member_of(&n)?;
            (base == name && e.file_type().ok()?.is_file()).then_some((member, n))
        })
        .collect();
    members::fold(&mut lock, look_members(&dir, members, options));
    Some(lock)
}

impl ListedLock {
    /// An entry with nothing known but its name (an internal file not looked at).
    fn nothing(dir: &Path, name: &str) -> ListedLock {
        ListedLock {
            name: name.to_owned(),
            path: dir.join(name),
            state: ListedState::Free,
            reason: "not-looked-at",
            format: "missing",
            link_target: None,
            owner_uid: None,
            pid: None,
            timestamp: None,
            tag: None,
            host: None,
            this_host: None,
            holder_running: None,
            command_line: None,
            since: None,
            waiters: None,
            kind: "mutex",
            holders: None,
            limit: None,
        }
    }
}

/// One lock path, or `None` when it is not a lock (another file whose content does not parse).
fn look(dir: &Path, name: &str, named_lock: bool, options: &LockOptions) -> Option<ListedLock> {
    let path = dir.join(name);
    let file = LockFile::new_canonical(path.clone(), options.clone());
    let observation = file.observe();
    if !named_lock && !matches!(observation, Observation::Parsed { .. }) {
        return None;
    }
    let meta = std::fs::symlink_metadata(&path).ok();
    let judgement = file.judge_with_presence(&observation);
    let (state, reason) = verdict(&judgement);
    let mut listed = ListedLock {
        name: name.to_owned(),
        state,
        reason,
        format: "missing",
        link_target: None,
        owner_uid: meta.as_ref().and_then(owner_uid),
        pid: None,
        timestamp: None,
        tag: None,
        host: None,
        this_host: None,
        holder_running: None,
        command_line: None,
        since: None,
        waiters: waiting_processes(&path),
        kind: "mutex",
        holders: None,
        limit: None,
        path,
    };
    match observation {
        Observation::Missing => {}
        Observation::Symlink => {
            listed.format = "symlink";
            listed.link_target = std::fs::read_link(&listed.path)
                .ok()
                .map(|t| t.to_string_lossy().into_owned());
        }
        Observation::Unparseable { .. } => {
            listed.format = "unparseable";
            listed.since = meta.as_ref().and_then(birth_or_mtime);
        }
        Observation::Parsed { info, .. } => {
            fill_holder(&mut listed, &info, meta.as_ref());
        }
    }
    Some(listed)
}

fn fill_holder(listed: &mut ListedLock, info: &LockInfo, meta: Option<&std::fs::Metadata>) {
    listed.format = if info.host.is_some() || info.token.is_some() {
        "sema-native"
    } else {
        "sema/semats"
    };
    listed.pid = Some(info.pid);
    listed.timestamp = Some(info.timestamp);
    listed.tag = info.tag.clone();
    listed.host = info
        .host
        .as_deref()
        .map(|h| h.split(':').next().unwrap_or(h).to_owned());
    listed.this_host = info.host.as_deref().map(|h| h == host_identity());
    // A pid of another host means nothing here; a foreign file's pid is taken as ours (as
    // semats does).
    if listed.this_host != Some(false) {
        listed.holder_running = match probe_liveness(info.pid) {
            Liveness::Alive => Some(true),
            Liveness::Dead => Some(false),
            Liveness::Unknown => None,
        };
        if listed.holder_running == Some(true) && info.pid > 0 {
            listed.command_line = process_args(info.pid);
        }
    }
    listed.since = match listed.format {
        "sema-native" => meta.and_then(acquired_at).or(Some(info.timestamp)),
        // A foreign writer writes its file once: its timestamp is when it took the lock.
        _ => Some(info.timestamp),
    };
}

/// When one of our lock files was linked into place (acquired), from its times. The heartbeat
/// rewrites the file in place, so `timestamp=`, the mtime and the ctime are the last refresh
/// (or the link, which comes right after the last write of the prepared file: same tick). The
/// birth time is when the holder made the file, before linking it, possibly when it began to
/// wait. So: a ctime within the default heartbeat period (1 s) of the birth cannot be a
/// refresh under the default heartbeat: it is the link itself, exact. Otherwise the birth time
/// (which may include the holder's own wait before it got the lock; a heartbeat shorter than
/// the default makes a refresh look like the link). The last refresh when the system keeps no
/// birth time.
fn acquired_at(meta: &std::fs::Metadata) -> Option<i64> {
    // `LockOptions::default_heartbeat` of the default stale timeout (1 h): 1 s. With the 10 s this
    // was written for, `since` was the last refresh for a holder's first 10 s.
    const DEFAULT_HEARTBEAT_SECS: i64 = 1;
    let born = birth(meta)?;
    let changed = changed_secs(meta).unwrap_or(born);
    Some(if changed - born < DEFAULT_HEARTBEAT_SECS {
        changed
    } else {
        born
    })
}

#[cfg(unix)]
fn changed_secs(meta: &std::fs::Metadata) -> Option<i64> {
    use std::os::unix::fs::MetadataExt;
    Some(meta.ctime())
}

#[cfg(not(unix))]
fn changed_secs(meta: &std::fs::Metadata) -> Option<i64> {
    meta.modified().ok().and_then(unix_secs)
}

fn verdict(j: &StaleJudgement) -> (ListedState, &'static str) {
    match j {
        StaleJudgement::Free => (ListedState::Free, "no-file"),
        StaleJudgement::Held(why) => (
            ListedState::Held,
            match why {
                HeldBecause::NeverStale => "never-stale",
                HeldBecause::YoungUnparseable => "young-unparseable",
                HeldBecause::OwnHostHolderAlive => "own-host-holder-alive",
                HeldBecause::Fresh => "fresh",
                HeldBecause::OtherHostBeating => "other-host-heartbeat-moving",
                HeldBecause::ForeignHolderRunning => "foreign-holder-running",
                HeldBecause::Symlink => "symlink",
                HeldBecause::HolderPresent => "holder-present",
            },
        ),
        StaleJudgement::Stale(why) => (
            ListedState::Stale,
            match why {
                StaleBecause::OldUnparseable => "old-unparseable",
                StaleBecause::OwnHostHolderDead => "own-host-holder-dead",
                StaleBecause::OwnHostPidReused => "own-host-pid-reused",
                StaleBecause::OtherHostSilent => "other-host-heartbeat-stopped",
                StaleBecause::ForeignExpiredAndNotRunning => "foreign-expired-and-not-running",
            },
        ),
    }
}

fn unix_secs(t: SystemTime) -> Option<i64> {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_secs()).ok()
}

fn birth(meta: &std::fs::Metadata) -> Option<i64> {
    meta.created().ok().and_then(unix_secs)
}

fn birth_or_mtime(meta: &std::fs::Metadata) -> Option<i64> {
    birth(meta).or_else(|| meta.modified().ok().and_then(unix_secs))
}

#[cfg(unix)]
fn owner_uid(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    Some(meta.uid())
}

#[cfg(not(unix))]
fn owner_uid(_meta: &std::fs::Metadata) -> Option<u32> {
    None
}

/// Seconds from `since` to now (0 for a future time).
pub fn age_secs(since: i64) -> i64 {
    (now_unix_secs() - since).max(0)
}
