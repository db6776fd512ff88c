//! Lock-path validation and resolution.
//!
//! [`validate_semats_path`] reproduces semats' constructor (`validatePath` plus the parent check)
//! message for message, and how `getPath()` resolves: Node's `path.resolve` (absolute,
//! lexically normalised), then symlinks in the *parent directories* resolved (`realpath` of the
//! parent), which for a lock path that is not itself a symlink is exactly semats' `realpath`.
//! The last component is never followed: a symlink there (which whoever can write to the
//! directory could plant, pointing at any file of ours) is kept as given, and every operation
//! on it is refused (`INVALID_PATH`) instead of acting on its target. [`validate_lock_path`] is
//! the stricter rule set of the new API.

use std::path::{Component, Path, PathBuf};

use super::error::LockError;
use super::format::js_trim;

const MSG_EMPTY: &str = "Path cannot be empty";
const MSG_NUL: &str = "Path contains null bytes";
const MSG_DOTDOT: &str =
    "Path contains dangerous pattern: parent directory traversal (..) not allowed";

/// semats' constructor rules and exact messages (its `Semaphore` constructor):
/// - `"Path cannot be empty"` (empty, or only JS whitespace such as spaces and tabs);
/// - `"Path contains null bytes"`;
/// - `"Path contains dangerous pattern: parent directory traversal (..) not allowed"` (any `..`
///   substring, so `a..b.lock` is refused too, as semats does);
/// - `"Parent directory does not exist: <dir>"`.
///
/// Returns what semats' `getPath()` returns: the absolute, normalised path with the parent
/// directory's symlinks resolved (semats' `realpath`, except that a symlink at the last
/// component is not followed: see the module docs).
pub fn validate_semats_path(path: &str) -> Result<PathBuf, String> {
    if js_trim(path).is_empty() {
        return Err(MSG_EMPTY.to_string());
    }
    if path.contains('\0') {
        return Err(MSG_NUL.to_string());
    }
    if path.contains("..") {
        return Err(MSG_DOTDOT.to_string());
    }
    let resolved = resolve_like_semats(path)?;
    if let Some(parent) = resolved.parent() {
        if parent.parent().is_some() && !parent.exists() {
            return Err(format!(
                "Parent directory does not exist: {}",
                parent.display()
            ));
        }
    }
    Ok(resolved)
}

/// The new API's rules: empty or NUL → `InvalidPath`; `..` as a path *segment* →
/// `PathTraversal` (`a..b.lock` is fine); a missing parent → `InvalidPath("Parent directory
/// does not exist: <dir>")`; a parent that is not a directory, or a directory at the path
/// itself → `InvalidPath`. Symlinks are resolved like [`validate_semats_path`] (parents only).
pub fn validate_lock_path(path: &str) -> Result<PathBuf, LockError> {
    if js_trim(path).is_empty() {
        return Err(LockError::InvalidPath(MSG_EMPTY.to_string()));
    }
    if path.contains('\0') {
        return Err(LockError::InvalidPath(MSG_NUL.to_string()));
    }
    let is_sep = |c: char| c == '/' || (cfg!(windows) && c == '\\');
    if path.split(is_sep).any(|segment| segment == "..") {
        return Err(LockError::PathTraversal(
            "Path contains parent directory traversal (..)".to_string(),
        ));
    }
    let resolved = resolve_like_semats(path).map_err(LockError::InvalidPath)?;
    let Some(parent) = resolved.parent() else {
        return Err(LockError::InvalidPath(format!(
            "Path has no parent directory: {}",
            resolved.display()
        )));
    };
    match std::fs::metadata(parent) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(LockError::InvalidPath(format!(
                "Parent is not a directory: {}",
                parent.display()
            )))
        }
        Err(_) => {
            return Err(LockError::InvalidPath(format!(
                "Parent directory does not exist: {}",
                parent.display()
            )))
        }
    }
    if resolved.file_name().is_none() {
        return Err(LockError::InvalidPath(format!(
            "Path has no file name: {}",
            resolved.display()
        )));
    }
    if std::fs::symlink_metadata(&resolved).is_ok_and(|m| m.is_dir()) {
        return Err(LockError::InvalidPath(format!(
            "Path is a directory: {}",
            resolved.display()
        )));
    }
    Ok(resolved)
}

/// Whether `path` is a directory (following links: a directory a caller named through a link is
/// one). For a caller explaining an `INVALID_PATH` (the `locks` manager's directory).
pub fn is_directory(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_dir())
}

/// Makes sure `dir`, a per-user lock directory (the ready `locks` manager's), is this user's
/// alone. On Unix it is created `0700` when absent; one that exists (or that another process made
/// first) is used only when it is a real directory, never through a symbolic link (`lstat`),
/// owned by this user and closed to others: it lives in `/tmp`, where anyone may plant a link or
/// a directory of their own at the name. Anything else is `InvalidPath` with the reason; a
/// failure to create it is `Io` (`PERMISSION_DENIED` when the OS refused). On Windows it is
/// created with its parents (under the user's own profile).
pub fn ensure_user_lock_dir(dir: &Path) -> Result<(), LockError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let context = || {
            format!(
                "cannot create the per-user lock directory {}",
                dir.display()
            )
        };
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(LockError::io(&context(), e)),
        }
        let meta = std::fs::symlink_metadata(dir).map_err(|e| LockError::io(&context(), e))?;
        let uid = rustix::process::getuid().as_raw();
        let why = user_dir_refusal(
            meta.file_type().is_symlink(),
            meta.is_dir(),
            meta.uid(),
            meta.mode(),
            uid,
        );
        match why {
            None => Ok(()),
            Some(why) => Err(LockError::InvalidPath(format!(
                "refusing the per-user lock directory {}: {why}",
                dir.display()
            ))),
        }
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir).map_err(|e| {
            LockError::io(
                &format!(
                    "cannot create the per-user lock directory {}",
                    dir.display()
                ),
                e,
            )
        })
    }
}

/// Why a per-user lock directory with these facts (from `lstat`) is refused, if it is: the one
/// rule of [`ensure_user_lock_dir`], as a pure function.
#[cfg(unix)]
fn user_dir_refusal(symlink: bool, dir: bool, owner: u32, mode: u32, uid: u32) -> Option<String> {
    if symlink {
        Some("it is a symbolic link (another user may have planted it)".into())
    } else if !dir {
        Some("it is not a directory".into())
    } else if owner != uid {
        Some(format!(
            "it is owned by uid {owner}, not by this user (uid {uid})"
        ))
    } else if mode & 0o077 != 0 {
        Some(format!(
            "its mode is {:o}: others may write or read it (chmod 700 it if it is yours)",
            mode & 0o777
        ))
    } else {
        None
    }
}

/// Node's `path.resolve(p)`, then the parent directory's symlinks resolved; the last component
/// is never followed.
fn resolve_like_semats(path: &str) -> Result<PathBuf, String> {
    let raw = Path::new(path);
    let absolute = if raw.is_absolute() {
        raw.to_path_buf()
    } else {
        let cwd = std::env::current_dir()
            .map_err(|e| format!("Cannot resolve path against the working directory: {e}"))?;
        cwd.join(raw)
    };
    let resolved = lexical_normalize(&absolute);
    Ok(canonical_key(&resolved))
}

/// Lexical normalisation like Node's `path.normalize` on an absolute path: drops `.` and
/// repeated separators, applies `..` (never above the root), drops a trailing separator.
fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

/// The key under which one lock is known inside this process (in-process queue, registry,
/// file-system watch): the canonical parent directory joined with the file name, so two
/// spellings of one lock share one FIFO queue.
pub(crate) fn canonical_key(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => match std::fs::canonicalize(parent) {
            Ok(dir) => dir.join(name),
            Err(_) => path.to_path_buf(),
        },
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize() {
        assert_eq!(
            lexical_normalize(Path::new("/a/./b//c/")),
            PathBuf::from("/a/b/c")
        );
        assert_eq!(
            lexical_normalize(Path::new("/a/b/../c")),
            PathBuf::from("/a/c")
        );
        assert_eq!(lexical_normalize(Path::new("/../x")), PathBuf::from("/x"));
    }

    #[test]
    fn semats_messages() {
        assert_eq!(validate_semats_path("").unwrap_err(), MSG_EMPTY);
        assert_eq!(validate_semats_path(" \t ").unwrap_err(), MSG_EMPTY);
        assert_eq!(validate_semats_path("/tmp/a\0b").unwrap_err(), MSG_NUL);
        assert_eq!(
            validate_semats_path("/tmp/../etc/x").unwrap_err(),
            MSG_DOTDOT
        );
        assert_eq!(
            validate_semats_path("/tmp/a..b.lock").unwrap_err(),
            MSG_DOTDOT
        );
        assert_eq!(validate_semats_path("..%2Fx").unwrap_err(), MSG_DOTDOT);
        assert_eq!(
            validate_semats_path("/nonexistent-dir-sema/x.lock").unwrap_err(),
            "Parent directory does not exist: /nonexistent-dir-sema"
        );
        assert_eq!(
            validate_semats_path("/x.lock").ok(),
            Some(PathBuf::from("/x.lock"))
        );
    }

    /// A symlink at the last component is kept as given (never resolved to its target, existing
    /// or dangling); a symlink among the parents is resolved.
    #[cfg(unix)]
    #[test]
    fn last_component_symlink_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        std::fs::write(dir.join("victim"), b"secret").unwrap();
        std::os::unix::fs::symlink(dir.join("victim"), dir.join("x.lock")).unwrap();
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling.lock")).unwrap();
        std::os::unix::fs::symlink(&dir, dir.join("via")).unwrap();
        for name in ["x.lock", "dangling.lock"] {
            let p = dir.join(name);
            let s = p.to_str().unwrap();
            assert_eq!(validate_semats_path(s).unwrap(), p);
            assert_eq!(validate_lock_path(s).unwrap(), p);
        }
        let through = dir.join("via").join("y.lock");
        assert_eq!(
            validate_lock_path(through.to_str().unwrap()).unwrap(),
            dir.join("y.lock")
        );
    }

    #[test]
    fn lock_path_rules() {
        let kind = |p: &str| validate_lock_path(p).err().map(|e| e.kind());
        assert_eq!(kind(""), Some("INVALID_PATH"));
        assert_eq!(kind("\t"), Some("INVALID_PATH"));
        assert_eq!(kind("/tmp/a\0"), Some("INVALID_PATH"));
        assert_eq!(kind("/tmp/../x"), Some("PATH_TRAVERSAL"));
        assert_eq!(kind("../x"), Some("PATH_TRAVERSAL"));
        assert_eq!(kind("/tmp"), Some("INVALID_PATH"));
        assert_eq!(kind("/nonexistent-dir-sema/x"), Some("INVALID_PATH"));
        assert_eq!(kind("/tmp/a..b.lock"), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_user_lock_dir_must_be_a_private_directory_of_this_user() {
        assert_eq!(user_dir_refusal(false, true, 7, 0o40700, 7), None);
        let refused = |s, d, o, m| user_dir_refusal(s, d, o, m, 7).unwrap_or_default();
        assert!(refused(true, false, 7, 0o120777).contains("symbolic link"));
        assert!(refused(false, false, 7, 0o100600).contains("not a directory"));
        assert!(
            refused(false, true, 0, 0o40700).contains("owned by uid 0, not by this user (uid 7)")
        );
        assert!(refused(false, true, 7, 0o40750).contains("its mode is 750"));
        assert!(refused(false, true, 7, 0o41777).contains("its mode is 777"));
    }

    #[cfg(unix)]
    #[test]
    fn a_user_lock_dir_is_made_0700_and_a_link_at_its_name_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("locks");
        ensure_user_lock_dir(&dir).unwrap();
        let mode = std::fs::symlink_metadata(&dir)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        ensure_user_lock_dir(&dir).unwrap(); // an existing one of ours is used
        let link = d.path().join("planted");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = ensure_user_lock_dir(&link).unwrap_err();
        assert_eq!(e.kind(), "INVALID_PATH");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(is_directory(&link) && is_directory(&dir));
        assert!(!is_directory(&d.path().join("absent")));
    }
}
