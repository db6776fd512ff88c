'use strict'
// The directory of the ready `locks` manager: one per user and machine, the same for every process of the user
// whatever its environment (so not $TMPDIR or $XDG_RUNTIME_DIR, which cron, services and login shells set
// differently): `/tmp/sema-native-locks-<uid>` on POSIX, `%LOCALAPPDATA%\sema-native\locks` on Windows.
//
// /tmp is writable by everyone, so the directory is attackable: the core (`ensure_user_lock_dir`,
// crates/sema-core/src/lockfile/paths.rs) creates it 0700, and uses one that exists only when it is a real directory
// (not a symlink: lstat) owned by this user and closed to others; anything else is refused with INVALID_PATH. Nobody
// else can then replace it (the sticky bit of /tmp) or plant a file in it; the engine refuses a symlinked lock path
// on top of that.

const os = require('node:os')
const path = require('node:path')
const native = require('../native')
const { LockError } = require('../errors')

function defaultDir(root) {
  if (process.platform === 'win32') {
    const base = process.env.LOCALAPPDATA || path.join(os.homedir(), 'AppData', 'Local')
    return path.join(root ?? base, 'sema-native', 'locks')
  }
  return path.join(root ?? '/tmp', `sema-native-locks-${process.getuid()}`)
}

/** Creates or checks the per-user directory (under `root`, for tests) and returns its path. Throws LockError. */
function userLocksDir(root) {
  const dir = defaultDir(root)
  const r = native.ensureUserLockDir(dir)
  if (!r.ok) throw new LockError(r.error.message, r.error.code)
  return dir
}

module.exports = { userLocksDir, defaultDir }
