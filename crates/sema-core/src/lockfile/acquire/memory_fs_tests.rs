use super::super::{AcquireRequest, LockFile, LockOptions};

/// `fsync` on (the default) syncs nothing on a memory file system, where a sync does nothing
/// anyway; on a disk the content is synced (before the link).
#[test]
fn memory_file_system_skips_the_sync() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("tempdir in /dev/shm");
    let file = LockFile::new(dir.path().join("m.lock"), LockOptions::default());
    assert!(file.options.fsync, "fsync is the default");
    let held = file.try_acquire(&AcquireRequest::default()).expect("free");
    let synced = held.inner.state.lock().expect("state").content_synced;
    assert!(!synced, "nothing synced on tmpfs");
    assert!(held.release().expect("released"));

    let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("tempdir on the disk");
    let file = LockFile::new(disk.path().join("d.lock"), LockOptions::default());
    if !file.syncs() {
        return; // the work tree is on a memory file system itself
    }
    let held = file.try_acquire(&AcquireRequest::default()).expect("free");
    let synced = held.inner.state.lock().expect("state").content_synced;
    assert!(synced, "the content is synced on a disk");
    assert!(held.release().expect("released"));
}

/// A first attempt made off the JS thread (`claim_now`, then `Claimed::attempt`) that finds the
/// lock busy hands the file it built (on a disk with `fsync`: its content synced) to the wait,
/// as the wait's own first attempt keeps it: the next attempt links it instead of building and
/// syncing another (one `fsync` per contended acquisition saved).
#[test]
fn a_busy_first_attempt_hands_its_file_to_the_wait() {
    let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).expect("tempdir on the disk");
    let path = disk.path().join("busy.lock");
    let req = AcquireRequest::default();
    // Held as another process would hold it: not through this process's turn.
    let holder = LockFile::new(path.clone(), LockOptions::default());
    let held = holder.try_acquire_bypassing_queue(&req).expect("free");
    let file = LockFile::new(path, LockOptions::default());
    let Ok(claimed) = file.claim_now() else {
        panic!("the turn is free")
    };
    match claimed.attempt(&file, &req) {
        super::AcquireNow::Wait(tried) => {
            assert!(tried.attempted);
            if file.strategy == crate::lockfile::sys::CreationStrategy::Auto {
                assert!(
                    tried.prepared.is_some(),
                    "the built file is kept for the wait"
                );
            }
        }
        super::AcquireNow::Done(r) => panic!("busy expected, got {:?}", r.map(|_| ())),
    }
    assert!(held.release().expect("released"));
}
