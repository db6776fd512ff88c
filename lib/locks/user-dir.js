'use strict'
// The directory of the ready `locks` manager: one per user and machine, the same for every process of the user
// whatever its environment (so not $TMPDIR or $XDG_RUNTIME_DIR, which cron, services and login shells set
// differently): `/tmp/sema-native-locks-<uid>` on POSIX, `%LOCALAPPDATA%\sema-native\locks` on Windows.
//
// /tmp is writable by everyone, so the directory is attackable: it is created 0700, and one that exists is used only
// when it is a real directory (not a symlink: lstat) owned by this user and closed to others; anything else is
// refused with INVALID_PATH. Nobody else can then replace it (the sticky bit of /tmp) or plant a file in it; the
// engine refuses a symlinked lock path on top of that.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { LockError } = require('../errors')
const { ErrorCode } = require('../codes')

function defaultDir(root) {
  if (process.platform === 'win32') {
    const base = process.env.LOCALAPPDATA || path.join(os.homedir(), 'AppData', 'Local')
    return path.join(root ?? base, 'sema-native', 'locks')
  }
  return path.join(root ?? '/tmp', `sema-native-locks-${process.getuid()}`)
}

function refuse(dir, why) {
  return new LockError(`refusing the per-user lock directory ${dir}: ${why}`, ErrorCode.INVALID_PATH)
}

/** Creates or checks the per-user directory (under `root`, for tests) and returns its path. Throws LockError. */
function userLocksDir(root) {
  const dir = defaultDir(root)
  if (process.platform === 'win32') {
    fs.mkdirSync(dir, { recursive: true })
    return dir
  }
  try {
    fs.mkdirSync(dir, { mode: 0o700 })
  } catch (e) {
    if (e.code !== 'EEXIST') throw new LockError(`cannot create the per-user lock directory ${dir}: ${e.message}`, ErrorCode.IO_ERROR)
  }
  const st = fs.lstatSync(dir)
  if (st.isSymbolicLink()) throw refuse(dir, 'it is a symbolic link (another user may have planted it)')
  if (!st.isDirectory()) throw refuse(dir, 'it is not a directory')
  if (st.uid !== process.getuid()) throw refuse(dir, `it is owned by uid ${st.uid}, not by this user (uid ${process.getuid()})`)
  if ((st.mode & 0o077) !== 0) {
    throw refuse(dir, `its mode is ${(st.mode & 0o777).toString(8)}: others may write or read it (chmod 700 it if it is yours)`)
  }
  return dir
}

module.exports = { userLocksDir, defaultDir }
