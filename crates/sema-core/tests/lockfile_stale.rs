//! Stale locks: liveness of a holder on this host (reclaimed at once when dead, never evicted
//! while alive), age on another host and for unparseable files, `stale_timeout: None`,
//! `clean_stale`, and the race of many breakers for one stale lock.
#![cfg(unix)]

use std::sync::{Arc, Barrier};
use std::time::Duration;

use sema_core::lockfile::*;

mod common;
use common::*;

#[test]
fn dead_own_host_holder_is_reclaimed_at_once() {
    let d = dir();
    let (path, lf) = lock_at(&d, "dead.lock", LockOptions::default()); // 1 h stale timeout
    let mut child = sleeper();
    let pid = i64::from(child.id());
    let start = process_start_ticks(pid);
    std::fs::write(&path, own_host_lock(pid, now_unix_secs(), start)).unwrap();
    assert_eq!(attempt(&lf).unwrap_err().holder_pid(), Some(pid));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(lf.status().is_stale);
    let held = attempt(&lf).expect("dead holder reclaimed");
    held.release().unwrap();
}

#[test]
fn live_own_host_holder_is_never_evicted() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "live.lock",
        LockOptions {
            stale_timeout: Some(Duration::from_secs(1)),
            ..LockOptions::default()
        },
    );
    let mut child = sleeper();
    let pid = i64::from(child.id());
    let start = process_start_ticks(pid);
    // Ancient timestamp: age alone would evict it (sema's flaw).
    std::fs::write(&path, own_host_lock(pid, 0, start)).unwrap();
    assert!(!lf.status().is_stale);
    assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
    assert!(!lf.clean_stale().unwrap());
    assert!(path.exists());
    // A recorded start time that does not match the live pid: pid reused, stale at once.
    #[cfg(target_os = "linux")]
    {
        std::fs::write(
            &path,
            own_host_lock(pid, now_unix_secs(), start.map(|s| s + 1)),
        )
        .unwrap();
        assert!(lf.status().is_stale);
        let held = attempt(&lf).expect("reused pid reclaimed");
        held.release().unwrap();
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Another host's lock (another machine, or another pid namespace here) is judged by its
/// heartbeat's progress as this process sees it, never by its timestamp (another clock): an
/// hours-old timestamp is held; its file unchanged for 6 heartbeat periods (1 s each here) on our
/// clock is taken; a beat in between restarts the count. Failed before `stale::remote`: the
/// hours-old timestamp was taken at once.
#[test]
fn other_host_locks_are_taken_when_their_heartbeat_stops_never_by_their_timestamp() {
    let d = dir();
    let (path, lf) = lock_at(&d, "oh.lock", LockOptions::default());
    let other = |ts: i64| {
        LockInfo {
            pid: i64::from(std::process::id()), // alive here, meaningless there
            timestamp: ts,
            host: Some("elsewhere:boot:1".into()),
            heartbeat_ms: Some(1000),
            ..LockInfo::default()
        }
        .serialize()
    };
    let first_look = std::time::Instant::now();
    std::fs::write(&path, other(now_unix_secs() - 7200)).unwrap();
    assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
    // A beat (in place, as the heartbeat writes): the count starts again from the next look.
    std::fs::write(&path, other(now_unix_secs() - 7199)).unwrap();
    assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
    let beat_seen = std::time::Instant::now();
    let held = loop {
        match attempt(&lf) {
            Ok(held) => break held,
            Err(e) => assert_eq!(e.kind(), "ALREADY_LOCKED"),
        }
        assert!(
            first_look.elapsed() < Duration::from_secs(120),
            "never taken"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        beat_seen.elapsed() >= Duration::from_secs(6),
        "taken {:?} after the last beat was seen",
        beat_seen.elapsed()
    );
    held.release().unwrap();
}

#[test]
fn stale_none_never_breaks() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "n.lock",
        LockOptions {
            stale_timeout: None,
            ..LockOptions::default()
        },
    );
    std::fs::write(&path, "pid=999999999\ntimestamp=0\n").unwrap();
    assert_eq!(attempt(&lf).unwrap_err().kind(), "ALREADY_LOCKED");
    assert!(!lf.clean_stale().unwrap());
    assert!(!lf.status().is_stale);
}

#[test]
fn foreign_stale_dead_lock_is_taken_and_cleaned() {
    let d = dir();
    let lf = lockfile(&d, "s.lock");
    std::fs::write(lf.path(), "pid=999999999\ntimestamp=0\n").unwrap();
    assert!(lf.status().is_stale);
    let held = attempt(&lf).unwrap();
    held.release().unwrap();
    std::fs::write(lf.path(), "pid=999999999\ntimestamp=0\n").unwrap();
    assert!(lf.clean_stale().unwrap());
    assert!(!lf.path().exists());
    assert!(!lf.clean_stale().unwrap());
    // recent + dead is kept
    std::fs::write(
        lf.path(),
        format!("pid=999999999\ntimestamp={}\n", now_unix_secs()),
    )
    .unwrap();
    assert!(!lf.clean_stale().unwrap());
    assert!(lf.path().exists());
    // old (stale timeout 0, age 1 s) + live (our pid, started before the timestamp) is kept
    let strict = LockFile::new(
        lf.path().to_path_buf(),
        LockOptions {
            stale_timeout: Some(Duration::ZERO),
            ..LockOptions::default()
        },
    );
    std::fs::write(
        lf.path(),
        format!(
            "pid={}\ntimestamp={}\n",
            std::process::id(),
            now_unix_secs() - 1
        ),
    )
    .unwrap();
    assert!(!strict.clean_stale().unwrap());
    assert_eq!(attempt(&strict).unwrap_err().kind(), "ALREADY_LOCKED");
    // ... and so is a live pid that started after the lock's timestamp (semats' rule, the
    // default); only the opt-in start-time check calls that pid reused.
    std::fs::write(
        lf.path(),
        format!("pid={}\ntimestamp=0\n", std::process::id()),
    )
    .unwrap();
    assert!(!lf.status().is_stale);
    assert!(!lf.clean_stale().unwrap());
    let start_checked = LockFile::new(
        lf.path().to_path_buf(),
        LockOptions {
            foreign_start_check: true,
            ..LockOptions::default()
        },
    );
    assert!(start_checked.status().is_stale);
    assert!(start_checked.clean_stale().unwrap());
}

#[test]
fn clean_stale_touches_only_our_temp_files() {
    let d = dir();
    let lf = lockfile(&d, "t.lock");
    let ours = d.path().join(".t.lock.0123456789abcdef.sema-tmp");
    let ours_young = d.path().join(".t.lock.fedcba9876543210.sema-tmp");
    let semats_tmp = d.path().join("t.lock.123.0123456789abcdef.tmp");
    let backup = d.path().join("t.lock.user-backup.tmp");
    for p in [&ours, &ours_young, &semats_tmp, &backup] {
        std::fs::write(p, "x").unwrap();
    }
    let old = std::time::SystemTime::now() - Duration::from_secs(120);
    std::fs::File::options()
        .write(true)
        .open(&ours)
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert!(lf.clean_stale().unwrap());
    assert!(!ours.exists());
    assert!(ours_young.exists() && semats_tmp.exists() && backup.exists());
    assert!(!lf.clean_stale().unwrap());
}

#[test]
fn unparseable_files_expire_by_mtime() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "u.lock",
        LockOptions {
            stale_timeout: Some(Duration::from_secs(1)),
            pending_write_grace: Duration::from_secs(2),
            ..LockOptions::default()
        },
    );
    std::fs::write(&path, "").unwrap();
    assert_eq!(attempt(&lf).unwrap_err().holder_pid(), None);
    assert!(matches!(lf.observe(), Observation::Unparseable { .. }));
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(5))
        .unwrap();
    drop(f);
    let held = attempt(&lf).unwrap();
    held.release().unwrap();
}

#[test]
fn oversize_file_is_unparseable() {
    let d = dir();
    let lf = lockfile(&d, "big.lock");
    let mut content = format!("pid={}\ntimestamp=1\n", std::process::id()).into_bytes();
    content.resize(MAX_LOCK_FILE_BYTES + 10, b'x');
    std::fs::write(lf.path(), &content).unwrap();
    assert!(matches!(lf.observe(), Observation::Unparseable { .. }));
    assert!(lf.status().locked);
    assert!(lf.status().info.is_none());
}

/// Many threads (standing in for processes: they bypass the in-process queue) race to break
/// one stale lock (dead pid, timestamp 0): exactly one wins each round, and the file on disk is
/// the winner's.
#[test]
fn stale_break_race_has_exactly_one_winner() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 50;
    let d = dir();
    let path = d.path().join("race.lock");
    for round in 0..ROUNDS {
        std::fs::write(&path, "pid=999999999\ntimestamp=0\n").unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let barrier = barrier.clone();
                let lf = LockFile::new(
                    path.clone(),
                    LockOptions {
                        fsync: i % 2 == 0,
                        ..LockOptions::default()
                    },
                )
                .with_creation_strategy(if i % 3 == 0 {
                    CreationStrategy::NamedTemp
                } else {
                    CreationStrategy::Auto
                });
                std::thread::spawn(move || {
                    barrier.wait();
                    lf.try_acquire_bypassing_queue(&AcquireRequest::default())
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<&HeldLock> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}");
        for r in &results {
            if let Err(e) = r {
                assert_eq!(e.kind(), "ALREADY_LOCKED", "round {round}: {e}");
            }
        }
        let on_disk = parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            on_disk.token.as_deref(),
            Some(winners[0].token().as_str()),
            "round {round}"
        );
        assert!(winners[0].release().unwrap());
        assert!(entries(&d).is_empty(), "round {round}: {:?}", entries(&d));
    }
}
