//! Counting semaphores on lock files (`Semaphore`): the slots on real files, other holders
//! written as their processes would have written them (a live one names a sleeping child, a
//! dead one a child that was killed).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

fn semaphore(d: &tempfile::TempDir, limit: u64) -> Semaphore {
    let path = validate_lock_path(d.path().join("s.lock").to_str().unwrap()).unwrap();
    Semaphore::new(LockFile::new(path, opts()), limit).unwrap()
}

/// Writes a holder of `name` as a live process of ours would (the child stays alive).
fn live_holder(d: &tempfile::TempDir, name: &str) -> Child {
    let child = sleeper();
    write_holder(&d.path().join(name), &child);
    child
}

fn write_holder(path: &Path, child: &Child) {
    let pid = i64::from(child.id());
    std::fs::write(
        path,
        own_host_lock(pid, now_unix_secs(), process_start_ticks(pid)),
    )
    .unwrap();
}

/// Writes a holder of `name` whose process has died (killed before the file is written).
fn dead_holder(d: &tempfile::TempDir, name: &str) {
    let mut child = sleeper();
    child.kill().unwrap();
    child.wait().unwrap();
    write_holder(&d.path().join(name), &child);
}

fn end(mut child: Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

fn req() -> AcquireRequest {
    AcquireRequest::default()
}

#[test]
fn base_first_then_siblings_named_by_the_limit() {
    let d = dir();
    let s = semaphore(&d, 3);
    let a = s.try_acquire(&req()).unwrap();
    let b = s.try_acquire(&req()).unwrap();
    let c = s.try_acquire(&req()).unwrap();
    assert_eq!(a.path(), d.path().join("s.lock"));
    assert_eq!(
        entries(&d),
        vec!["s.lock", "s.lock.slot-1-of-3", "s.lock.slot-2-of-3"]
    );
    let full = s.try_acquire(&req()).unwrap_err();
    assert_eq!(full.kind(), "ALREADY_LOCKED");
    assert_eq!(full.holder_pid(), Some(i64::from(std::process::id())));
    let status = s.status();
    assert_eq!((status.holders, status.base.locked), (3, true));
    assert_eq!(s.present_slots().len(), 3);
    b.release().unwrap();
    assert_eq!(s.status().holders, 2);
    assert!(s.is_free().unwrap());
    for h in [a, c] {
        h.release().unwrap();
    }
    assert!(entries(&d).is_empty());
}

#[test]
fn sema_holding_the_base_takes_one_slot() {
    let d = dir();
    let s = semaphore(&d, 2);
    write_live_holder(&d.path().join("s.lock"));
    let one = s.try_acquire(&req()).unwrap();
    assert_eq!(one.path(), d.path().join("s.lock.slot-1-of-2"));
    assert_eq!(s.try_acquire(&req()).unwrap_err().kind(), "ALREADY_LOCKED");
    one.release().unwrap();
}

#[test]
fn a_dead_holder_of_a_slot_is_reclaimed_at_once() {
    let d = dir();
    let s = semaphore(&d, 2);
    let base = live_holder(&d, "s.lock");
    dead_holder(&d, "s.lock.slot-1-of-2");
    let got = s.try_acquire(&req()).expect("the dead holder's slot");
    assert_eq!(got.path(), d.path().join("s.lock.slot-1-of-2"));
    got.release().unwrap();
    end(base);
}

/// Issue 33, item 7: the dead slot files of a limit nobody uses any more are removed by the
/// next acquirer of any limit.
#[test]
fn dead_siblings_of_any_limit_are_removed_by_the_next_acquirer() {
    let d = dir();
    dead_holder(&d, "s.lock.slot-1-of-5");
    dead_holder(&d, "s.lock.slot-2-of-3");
    let live = live_holder(&d, "s.lock.slot-1-of-4");
    let s = semaphore(&d, 4);
    let got = s.try_acquire(&req()).unwrap();
    assert_eq!(entries(&d), vec!["s.lock", "s.lock.slot-1-of-4"]);
    got.release().unwrap();
    end(live);
}

/// Issue 33, defect 2, as the JavaScript version failed it: A (limit 2) holds the base,
/// B (limit 2) slot-1-of-2, W (limit 2) waits; C (limit 3) holds slot-1-of-3 when B releases.
/// W's grant of slot-1-of-2 must not stand while C holds (3 holders of a path taken with
/// limit 2): W yields and waits, and takes the slot once C is gone (C died: its file removed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_checked_at_every_grant() {
    let d = dir();
    let s = semaphore(&d, 2);
    let a = live_holder(&d, "s.lock");
    let b = s.try_acquire(&req()).unwrap();
    let w = {
        let s = s.clone();
        tokio::spawn(async move { s.acquire(&req(), None, CancellationToken::new()).await })
    };
    // W has made its first round (and found both slots held, no other limit) before C.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!w.is_finished());
    let c = live_holder(&d, "s.lock.slot-1-of-3");
    b.release().unwrap();
    // W's rounds (on the release's event, then every 20 ms poll): none may stand.
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if w.is_finished() {
            panic!(
                "W was granted a third slot: {:?}",
                w.await.unwrap().map(|h| h.path())
            );
        }
    }
    // A newcomer of limit 2 is told of C's limit.
    assert_eq!(s.try_acquire(&req()).unwrap_err().kind(), "LIMIT_MISMATCH");
    end(c);
    let held = tokio::time::timeout(Duration::from_secs(5), w)
        .await
        .expect("W served once C died")
        .unwrap()
        .unwrap();
    assert_eq!(held.path(), d.path().join("s.lock.slot-1-of-2"));
    assert_eq!(entries(&d), vec!["s.lock", "s.lock.slot-1-of-2"]);
    held.release().unwrap();
    end(a);
}

#[tokio::test]
async fn a_newcomer_of_another_limit_gets_limit_mismatch() {
    let d = dir();
    let two = semaphore(&d, 2);
    let a = two.try_acquire(&req()).unwrap();
    let b = two.try_acquire(&req()).unwrap();
    let three = Semaphore::new(two.base().clone(), 3).unwrap();
    let e = three
        .acquire(&req(), None, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "LIMIT_MISMATCH");
    assert!(e.to_string().contains("held with limit 2, not 3"), "{e}");
    assert!(!e.to_string().contains("undefined"));
    assert_eq!(three.is_free().unwrap_err().kind(), "LIMIT_MISMATCH");
    assert_eq!(
        entries(&d),
        vec!["s.lock", "s.lock.slot-1-of-2"],
        "nothing left behind"
    );
    a.release().unwrap();
    b.release().unwrap();
}

#[tokio::test]
async fn a_waiter_is_served_in_order_and_never_times_out_without_a_deadline() {
    let d = dir();
    let s = semaphore(&d, 2);
    let a = s.try_acquire(&req()).unwrap();
    let b = s.try_acquire(&req()).unwrap();
    let cancel = CancellationToken::new();
    let waiter = {
        let (s, cancel) = (s.clone(), cancel.clone());
        tokio::spawn(async move { s.acquire(&req(), None, cancel).await })
    };
    let timed = s
        .acquire(
            &req(),
            Some(Duration::from_millis(50)),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(timed.kind(), "TIMEOUT");
    assert!(!waiter.is_finished());
    cancel.cancel();
    assert_eq!(waiter.await.unwrap().unwrap_err().kind(), "ABORTED");
    // A release wakes a waiter (60 s poll: only the file event can).
    let events = Semaphore::new(LockFile::new(d.path().join("s.lock"), events_only()), 2).unwrap();
    let waiter = {
        let s = events.clone();
        tokio::spawn(async move { s.acquire(&req(), None, CancellationToken::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.release().unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert_eq!(got.path(), d.path().join("s.lock.slot-1-of-2"));
    for h in [a, got] {
        h.release().unwrap();
    }
}

#[tokio::test]
async fn wait_until_free_creates_nothing() {
    let d = dir();
    let s = semaphore(&d, 2);
    let a = s.try_acquire(&req()).unwrap();
    let b = s.try_acquire(&req()).unwrap();
    let e = s
        .wait_until_free(Some(Duration::from_millis(30)), CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "TIMEOUT");
    let waiting = {
        let s = s.clone();
        tokio::spawn(async move { s.wait_until_free(None, CancellationToken::new()).await })
    };
    a.release().unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("free")
        .unwrap()
        .unwrap();
    assert_eq!(entries(&d), vec!["s.lock.slot-1-of-2"]);
    b.release().unwrap();
}

#[test]
fn limit_zero_is_refused() {
    let d = dir();
    let e = Semaphore::new(lockfile(&d, "s.lock"), 0).err().unwrap();
    assert_eq!(e.kind(), "INVALID_ARGUMENT");
}

// ─── real processes: this test binary re-invoked as a slot holder (`child_entry`) ───

const CHILD: &str = "SEMA_SEMAPHORE_CHILD";

/// The child side: acquire a slot of `SEMA_LOCK` with limit `SEMA_LIMIT` (waiting, no
/// deadline), print `HELD`, release on a `release` line. Does nothing as a normal test.
#[test]
fn child_entry() {
    let Ok(lock) = std::env::var(CHILD) else {
        return;
    };
    let limit: u64 = std::env::var("SEMA_LIMIT").unwrap().parse().unwrap();
    let s = Semaphore::new(LockFile::new(lock.into(), opts()), limit).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let held = rt
        .block_on(s.acquire(&req(), None, CancellationToken::new()))
        .unwrap();
    held.start_heartbeat();
    println!("HELD {}", held.path().display());
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).unwrap() > 0 {
        if line.trim() == "release" {
            held.release().unwrap();
            println!("RELEASED");
            return;
        }
        line.clear();
    }
}

struct SlotChild {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl SlotChild {
    fn spawn(lock: &Path, limit: u64) -> SlotChild {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_entry",
                "--nocapture",
                "--test-threads",
                "1",
                "-q",
            ])
            .env(CHILD, lock)
            .env("SEMA_LIMIT", limit.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        SlotChild { child, out }
    }

    fn next_line(&mut self, word: &str) -> String {
        let mut line = String::new();
        while !line.starts_with(word) {
            line.clear();
            assert!(
                self.out.read_line(&mut line).unwrap() > 0,
                "child ended early"
            );
        }
        line
    }

    fn release(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap(), "release").unwrap();
        self.next_line("RELEASED");
        self.child.wait().unwrap();
    }

    fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args([name, &pid])
            .status()
            .unwrap()
            .success());
    }
}

/// Issue 33, defect 3, with real processes: both slots free, the head of the line stopped
/// (SIGSTOP): a waiting acquire of another process is served within two `retry_interval`s
/// (20 ms here), not when the head runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_head_of_the_line_keeps_no_slot_from_others() {
    let d = dir();
    let s = semaphore(&d, 2);
    let lock = d.path().join("s.lock");
    let mut a = SlotChild::spawn(&lock, 2);
    a.next_line("HELD");
    let mut b = SlotChild::spawn(&lock, 2);
    b.next_line("HELD");
    let mut w = SlotChild::spawn(&lock, 2);
    let mut waited = Duration::ZERO;
    while s.waiting_processes() != Some(1) {
        assert!(
            waited < Duration::from_secs(10),
            "W never stood in the line"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
    }
    w.signal("-STOP");
    a.release();
    b.release();
    // No deadline of its own (a deadline's last round would hide a waiter that never polls).
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        s.acquire(&req(), None, CancellationToken::new()),
    )
    .await;
    w.signal("-CONT");
    let got = got.expect("served behind a stopped head").unwrap();
    w.next_line("HELD");
    got.release().unwrap();
    w.release();
    assert!(entries(&d).is_empty());
}
