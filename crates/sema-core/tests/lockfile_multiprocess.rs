//! Real multi-process tests: this test binary re-invokes itself as child processes
//! (`child_entry`, driven by environment variables), which contend for, hold and race on one
//! lock file.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sema_core::lockfile::*;

mod common;
use common::*;

const MODE: &str = "SEMA_LOCKFILE_CHILD";

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn child(mode: &str, lock: &Path, extra: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_entry",
        "--nocapture",
        "--test-threads",
        "1",
        "-q",
    ])
    .env(MODE, mode)
    .env("SEMA_LOCK", lock)
    .stdout(Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

/// The child side. Does nothing when run as a normal test.
#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    let lock = std::path::PathBuf::from(std::env::var("SEMA_LOCK").unwrap());
    let lf = LockFile::new(lock, LockOptions::default());
    match mode.as_str() {
        "contend" => {
            let marker = std::env::var("SEMA_MARKER").unwrap();
            let iterations: usize = std::env::var("SEMA_ITER").unwrap().parse().unwrap();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for _ in 0..iterations {
                    let held = acquire_within(&lf, Duration::from_secs(60)).await.unwrap();
                    // O_EXCL marker: fails if another holder is inside.
                    if std::fs::File::options()
                        .write(true)
                        .create_new(true)
                        .open(&marker)
                        .is_err()
                    {
                        println!("OVERLAP");
                        std::process::exit(3);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                    std::fs::remove_file(&marker).unwrap();
                    assert!(held.release().unwrap());
                }
            });
            println!("DONE");
        }
        "hold" => {
            let _held = attempt(&lf).unwrap();
            println!("HELD");
            std::thread::sleep(Duration::from_secs(60));
        }
        "race" => {
            let start_at: u128 = std::env::var("SEMA_START_AT").unwrap().parse().unwrap();
            while unix_ms() < start_at {
                std::thread::sleep(Duration::from_micros(200));
            }
            match attempt(&lf) {
                Ok(held) => {
                    println!("WIN {}", held.token());
                    // Stay alive until every racer has tried: a dead winner's lock is
                    // (rightly) reclaimable at once by a late racer.
                    std::thread::sleep(Duration::from_millis(700));
                }
                Err(e) => {
                    assert_eq!(e.kind(), "ALREADY_LOCKED");
                    println!("LOSE");
                }
            }
            // Exit while holding: the lock stays, its holder dead.
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// A child process that holds `lock` (it said so) until it is killed.
fn holding_child(lock: &Path) -> Child {
    let mut holder = child("hold", lock, &[]).spawn().unwrap();
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("HELD") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
    }
    holder.stdout = Some(out.into_inner());
    holder
}

#[test]
fn processes_never_overlap() {
    let d = dir();
    let lock = d.path().join("contend.lock");
    let marker = d.path().join("inside.marker");
    let children: Vec<_> = (0..4)
        .map(|_| {
            child(
                "contend",
                &lock,
                &[
                    ("SEMA_MARKER", marker.display().to_string()),
                    ("SEMA_ITER", "40".to_string()),
                ],
            )
            .spawn()
            .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {text}");
        assert!(text.contains("DONE"), "{text}");
        assert!(!text.contains("OVERLAP"));
    }
    let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn killed_holder_is_reclaimed_at_once() {
    let d = dir();
    let lock = d.path().join("killed.lock");
    let mut holder = holding_child(&lock);
    let lf = LockFile::new(lock.clone(), LockOptions::default()); // 1 h stale timeout
    let info = lf.status().info.unwrap();
    assert_eq!(info.pid, i64::from(holder.id()));
    assert_eq!(info.host.as_deref(), Some(host_identity()));
    let err = attempt(&lf).unwrap_err();
    assert_eq!(err.holder_pid(), Some(i64::from(holder.id())));
    holder.kill().unwrap(); // SIGKILL: no cleanup in the child
    holder.wait().unwrap();
    assert!(lf.status().is_stale);
    let held = attempt(&lf).expect("dead holder reclaimed");
    assert!(held.release().unwrap());
}

#[test]
fn processes_racing_on_a_stale_lock_have_one_winner() {
    let d = dir();
    let lock = d.path().join("race.lock");
    for round in 0..10 {
        if round % 2 == 0 {
            // A foreign stale lock (dead pid, ancient).
            std::fs::write(&lock, "pid=999999999\ntimestamp=0\n").unwrap();
        } // odd rounds: the previous round's winner exited holding it (own host, dead pid)
        let start_at = unix_ms() + 400;
        let children: Vec<_> = (0..6)
            .map(|_| {
                child("race", &lock, &[("SEMA_START_AT", start_at.to_string())])
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut winners = Vec::new();
        for c in children {
            let out = c.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "round {round}: {text}");
            for l in text.lines() {
                if let Some(token) = l.strip_prefix("WIN ") {
                    winners.push(token.to_string());
                }
            }
        }
        assert_eq!(winners.len(), 1, "round {round}");
        let on_disk = parse_lock_info(&std::fs::read_to_string(&lock).unwrap()).unwrap();
        assert_eq!(
            on_disk.token.as_deref(),
            Some(winners[0].as_str()),
            "round {round}"
        );
        let names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["race.lock".to_string()], "round {round}");
        if round % 2 == 1 {
            std::fs::remove_file(&lock).unwrap();
        }
    }
}

/// A waiter that judged a live holder (and goes back to sleep without judging it again on
/// every wake-up) still reclaims the lock when the holder process dies: the holder's descriptor
/// was never linked under the lock's name (O_TMPFILE), so its closing makes no event on that
/// name, and the `retry_interval` poll judges again.
#[cfg(target_os = "linux")]
#[test]
fn waiter_reclaims_at_once_when_the_holder_dies() {
    let d = dir();
    let lock = d.path().join("dies.lock");
    let mut holder = holding_child(&lock);
    let lf = LockFile::new(
        lock.clone(),
        LockOptions {
            retry_interval: Duration::from_millis(300),
            ..LockOptions::default()
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let lf2 = lf.clone();
        let waiter =
            tokio::spawn(async move { acquire_within(&lf2, Duration::from_secs(30)).await });
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!waiter.is_finished());
        holder.kill().unwrap(); // SIGKILL: the kernel closes its descriptor
        holder.wait().unwrap();
        let t0 = std::time::Instant::now();
        let held = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("reclaimed")
            .unwrap()
            .expect("acquired");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert!(held.release().unwrap());
    });
}
