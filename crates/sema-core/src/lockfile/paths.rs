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
}
