//! Lock-path validation and resolution.
//!
//! [`validate_semats_path`] reproduces semats' constructor (`validatePath` plus the parent check)
//! message for message, including how `getPath()` resolves: Node's `path.resolve` (absolute,
//! lexically normalised), then `realpath` when the path exists, or the link target of a dangling
//! symlink. [`validate_lock_path`] is the stricter rule set of the new API.

use std::path::{Component, Path, PathBuf};

use super::error::LockError;
use super::format::js_trim;

const MSG_EMPTY: &str = "Path cannot be empty";
const MSG_NUL: &str = "Path contains null bytes";
const MSG_DOTDOT: &str =
    "Path contains dangerous pattern: parent directory traversal (..) not allowed";

/// semats' constructor rules and exact messages (reference/lockfile-tools.md §C):
/// - `"Path cannot be empty"` (empty, or only JS whitespace such as spaces and tabs);
/// - `"Path contains null bytes"`;
/// - `"Path contains dangerous pattern: parent directory traversal (..) not allowed"` (any `..`
///   substring, so `a..b.lock` is refused too, as semats does);
/// - `"Parent directory does not exist: <dir>"`.
///
/// Returns what semats' `getPath()` returns: the absolute, normalised path, with symlinks
/// followed when the path exists (`realpath`), or the target of a dangling symlink.
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
/// itself → `InvalidPath`. Symlinks are resolved like [`validate_semats_path`].
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
    if resolved.is_dir() {
        return Err(LockError::InvalidPath(format!(
            "Path is a directory: {}",
            resolved.display()
        )));
    }
    Ok(resolved)
}

/// Node's `path.resolve(p)` followed by semats' symlink handling.
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
    if resolved.exists() {
        return Ok(std::fs::canonicalize(&resolved).unwrap_or(resolved));
    }
    match std::fs::symlink_metadata(&resolved) {
        Ok(meta) if meta.file_type().is_symlink() => match std::fs::read_link(&resolved) {
            Ok(target) => {
                let base = resolved.parent().unwrap_or(Path::new("/"));
                Ok(lexical_normalize(&base.join(target)))
            }
            Err(_) => Ok(resolved),
        },
        _ => Ok(resolved),
    }
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
