//! Listing a directory's locks (`list_locks`): the judgement and the holder's facts of each
//! kind of entry, what is not a lock, symlinks shown and never followed, and a listing that
//! changes nothing; `wait_until_free` creating nothing.
#![cfg(unix)]

use std::time::Duration;

use sema_core::lockfile::*;
use tokio_util::sync::CancellationToken;

mod common;
use common::*;

#[test]
fn lists_every_kind_of_entry_with_its_facts_and_changes_nothing() {
    let d = dir();
    let ours = lockfile(&d, "ours.lock");
    let held = ours.try_acquire(&tagged("nightly")).expect("acquired");
    std::fs::write(
        d.path().join("foreign.lock"),
        "pid=999999999\ntimestamp=0\ntag=old\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("job.pid"),
        format!("pid={}\ntimestamp={}\n", current_pid(), now_unix_secs()),
    )
    .unwrap();
    std::fs::write(d.path().join("notes.txt"), "hello\n").unwrap();
    std::fs::write(d.path().join("x.lock.1.tmp"), "pid=1\ntimestamp=1\n").unwrap();
    std::fs::write(d.path().join("empty.lock"), "").unwrap();
    let elsewhere = dir();
    let decoy = elsewhere.path().join("decoy.lock");
    std::fs::write(&decoy, "pid=1\ntimestamp=1\ntag=followed\n").unwrap();
    std::os::unix::fs::symlink(&decoy, d.path().join("link.lock")).unwrap();
    let before = entries(&d);

    let locks = list_locks(d.path(), &opts()).expect("listed");
    let names: Vec<&str> = locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "empty.lock",
            "foreign.lock",
            "job.pid",
            "link.lock",
            "ours.lock"
        ]
    );
    let by = |n: &str| locks.iter().find(|l| l.name == n).unwrap();

    let o = by("ours.lock");
    assert_eq!(
        (o.state, o.reason, o.format),
        (ListedState::Held, "own-host-holder-alive", "sema-native")
    );
    assert_eq!(o.pid, Some(current_pid()));
    assert_eq!(o.tag.as_deref(), Some("nightly"));
    assert_eq!((o.this_host, o.holder_running), (Some(true), Some(true)));
    assert!(o.since.is_some_and(|s| (now_unix_secs() - s).abs() <= 5));
    #[cfg(target_os = "linux")]
    {
        assert!(o.command_line.as_ref().is_some_and(|c| !c.is_empty()));
        assert_eq!(o.waiters, Some(0));
    }

    let f = by("foreign.lock");
    assert_eq!(
        (f.state, f.reason, f.format),
        (
            ListedState::Stale,
            "foreign-expired-and-not-running",
            "sema/semats"
        )
    );
    assert_eq!(
        (f.since, f.holder_running, f.this_host),
        (Some(0), Some(false), None)
    );

    let e = by("empty.lock");
    assert_eq!(
        (e.state, e.format, e.pid),
        (ListedState::Held, "unparseable", None)
    );

    let l = by("link.lock");
    assert_eq!(
        (l.state, l.format, l.pid, l.tag.as_deref()),
        (ListedState::Held, "symlink", None, None)
    );
    assert_eq!(l.link_target.as_deref(), decoy.to_str());

    assert_eq!(entries(&d), before, "listing changed nothing");
    assert_eq!(
        std::fs::read_to_string(&decoy).unwrap(),
        "pid=1\ntimestamp=1\ntag=followed\n"
    );
    assert!(held.release().unwrap());
}

#[test]
fn a_missing_directory_is_an_io_error() {
    let d = dir();
    let e = list_locks(&d.path().join("nope"), &opts()).unwrap_err();
    assert_eq!(e.code(), sema_core::ErrorCode::IoError);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_until_free_returns_on_release_and_creates_nothing() {
    let d = dir();
    let path = d.path().join("w.lock");
    write_live_holder(&path);
    let lf = LockFile::new(path.clone(), events_only());
    remove_after(&path, Duration::from_millis(200));
    tokio::time::timeout(
        Duration::from_secs(10),
        lf.wait_until_free(None, CancellationToken::new()),
    )
    .await
    .expect("woken by the release")
    .expect("free");
    assert!(entries(&d).is_empty(), "nothing created: {:?}", entries(&d));
}
