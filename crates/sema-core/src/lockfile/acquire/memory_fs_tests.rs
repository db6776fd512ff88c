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
