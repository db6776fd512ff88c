//! A held lock after its grant: the heartbeat that refreshes it and finds it lost, the loss
//! reports to its owner, how it ended kept for a handle, and the release of one owner's locks.
#![cfg(unix)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sema_core::lockfile::*;

mod common;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_refreshes_and_detects_loss() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "hb.lock",
        LockOptions {
            heartbeat: Some(Duration::from_millis(50)),
            ..opts()
        },
    );
    let held = lf.try_acquire(&tagged("hb")).unwrap();
    held.start_heartbeat();
    held.start_heartbeat(); // no-op

    // mtime refresh
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let age = std::fs::metadata(&path)
        .unwrap()
        .modified()
        .unwrap()
        .elapsed()
        .unwrap_or_default();
    assert!(age < Duration::from_secs(5), "mtime refreshed, age {age:?}");

    // timestamp refresh (seconds resolution)
    let t0 = held.info().timestamp;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let on_disk = parse_lock_info(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(on_disk.timestamp > t0, "{} > {}", on_disk.timestamp, t0);
    assert_eq!(on_disk.token.as_deref(), Some(held.token().as_str()));
    assert_eq!(on_disk.tag.as_deref(), Some("hb"));
    assert_eq!(held.current_info().timestamp, on_disk.timestamp);
    assert!(!held.lost().is_cancelled());

    // removal
    std::fs::remove_file(&path).unwrap();
    until_lost(&held).await;
    assert_eq!(held.lost_reason().as_deref(), Some("lock file was removed"));
    assert!(!held.is_held());
    assert!(!held.release().unwrap());
    assert!(!path.exists(), "the heartbeat never recreates the file");

    // replacement
    let held = attempt(&lf).expect("slot freed by the loss");
    held.start_heartbeat();
    std::fs::remove_file(&path).unwrap();
    let other = format!("pid=1\ntimestamp={}\n", now_unix_secs());
    std::fs::write(&path, &other).unwrap();
    until_lost(&held).await;
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("lock file was replaced")
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        other,
        "not touched after the loss"
    );
    assert!(!held.release().unwrap());
    assert!(path.exists());
}

/// An owner's loss hook hears `(id, Lost(reason))` once one of its held locks is found lost,
/// after its reason is set; a plain release does not call it, and another owner's hook hears
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_hook_reports_id_and_reason_to_the_owner_only() {
    let d = dir();
    let path = d.path().join("hook.lock");
    type Seen = Arc<Mutex<Vec<(u64, String)>>>;
    let hook = |seen: &Seen| -> Box<LossCallback> {
        let sink = seen.clone();
        Box::new(move |id, how: &HeldEnd| sink.lock().unwrap().push((id, format!("{how:?}"))))
    };
    let (owner, other) = (1001, 1002);
    let seen: Seen = Arc::default();
    let seen_other: Seen = Arc::default();
    set_loss_hook(owner, Some(hook(&seen)));
    set_loss_hook(other, Some(hook(&seen_other)));
    let lf = LockFile::new(
        path.clone(),
        LockOptions {
            heartbeat: Some(Duration::from_millis(30)),
            ..opts()
        },
    );
    let released = attempt(&lf).unwrap();
    released.set_owner(owner);
    released.start_heartbeat();
    let released_id = released.id();
    assert!(held_lock_by_id(released_id).is_some());
    assert!(released.release().unwrap());
    assert!(held_lock_by_id(released_id).is_none());

    let held = attempt(&lf).unwrap();
    held.set_owner(owner);
    held.start_heartbeat();
    std::fs::remove_file(&path).unwrap();
    until_lost(&held).await;
    let ours: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| *id == held.id() || *id == released_id)
        .cloned()
        .collect();
    assert_eq!(
        ours,
        vec![(held.id(), "Lost(\"lock file was removed\")".to_string())]
    );
    assert!(seen_other.lock().unwrap().is_empty());
    assert!(held_lock_by_id(held.id()).is_none());

    // Released by path (semats' `release()`): the owner hears ReleasedByPath if it asked.
    let quiet = attempt(&lf).unwrap();
    quiet.set_owner(owner);
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(!seen.lock().unwrap().iter().any(|(id, _)| *id == quiet.id()));
    let by_path = attempt(&lf).unwrap();
    by_path.set_owner(owner);
    by_path.keep_for_handle();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert!(seen
        .lock()
        .unwrap()
        .contains(&(by_path.id(), "ReleasedByPath".to_string())));
    set_loss_hook(owner, None);
    set_loss_hook(other, None);
}

/// The end of a lock whose owner keeps a handle (`keep_for_handle`) is kept by the engine
/// until asked once (`take_held_end`): a loss found before the handle existed is answered by the
/// engine. A lock without that request, or one released through its own handle, keeps nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_of_a_handled_lock_is_kept_until_asked_once() {
    let d = dir();
    let (path, lf) = lock_at(
        &d,
        "ends.lock",
        LockOptions {
            heartbeat: Some(Duration::from_millis(30)),
            ..opts()
        },
    );
    let owner = 1101;
    let lost = attempt(&lf).unwrap();
    lost.set_owner(owner);
    lost.keep_for_handle();
    assert_eq!(take_held_end(lost.id()), None, "held: nothing to tell");
    lost.start_heartbeat();
    std::fs::remove_file(&path).unwrap();
    until_lost(&lost).await;
    assert_eq!(
        take_held_end(lost.id()),
        Some(HeldEnd::Lost("lock file was removed".into()))
    );
    assert_eq!(take_held_end(lost.id()), None, "told once");

    let by_path = attempt(&lf).unwrap();
    by_path.set_owner(owner);
    by_path.keep_for_handle();
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert_eq!(take_held_end(by_path.id()), Some(HeldEnd::ReleasedByPath));

    let by_handle = attempt(&lf).unwrap();
    by_handle.set_owner(owner);
    by_handle.keep_for_handle();
    assert!(by_handle.release().unwrap());
    assert_eq!(take_held_end(by_handle.id()), None, "its handle knows");

    let unhandled = attempt(&lf).unwrap();
    unhandled.set_owner(owner);
    lf.release_as(sema_core::lockfile::current_pid(), false)
        .unwrap();
    assert_eq!(
        take_held_end(unhandled.id()),
        None,
        "no handle asked for it"
    );
}

/// `release_all_held_by(owner)` releases that owner's locks and no other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_held_by_releases_one_owner() {
    let d = dir();
    let mine = LockFile::new(d.path().join("mine.lock"), opts());
    let theirs = LockFile::new(d.path().join("theirs.lock"), opts());
    let a = attempt(&mine).unwrap();
    a.set_owner(2001);
    let b = attempt(&theirs).unwrap();
    b.set_owner(2002);
    release_all_held_by(2002);
    assert!(a.is_held() && a.is_on_disk());
    assert!(!b.is_held());
    assert!(!d.path().join("theirs.lock").exists());
    assert!(a.release().unwrap());
}
