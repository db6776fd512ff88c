'use strict'
// Ownership across pid namespaces (containers sharing a lock directory): a holder in one pid namespace, the
// questions asked from another one that shares the directory. "Mine" is decided by the token and the host identity
// this package writes (hostname, boot id, pid namespace), never by the pid alone, so:
//   - the same pid in two namespaces (both pid 1): neither status, release(path), Semaphore.release(), the CLI
//     (own release, the semats front end's release and status) nor tryAcquire owns, deletes or takes the lock;
//   - a holder whose pid does not exist in the other namespace is not reclaimed, even with a short stale timeout.
// Real namespaces: `unshare -pf --mount-proc` (root only), real processes, one shared temp directory.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')

const BIN = path.join(u.ROOT, 'bin', 'sema-native.js')

function unshareWorks() {
  if (process.platform !== 'linux') return 'Linux only (pid namespaces)'
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return 'needs root (unshare -pf)'
  const r = spawnSync('unshare', ['-pf', '--mount-proc', '--kill-child', 'sh', '-c', 'echo $$'], {
    encoding: 'utf8',
    timeout: 10000,
  })
  if (r.error || r.status !== 0 || r.stdout.trim() !== '1') {
    return `unshare -pf --mount-proc is not available here (${r.error ? r.error.message : r.stderr.trim() || `exit ${r.status}`})`
  }
  return false
}
const skip = unshareWorks()

/** `unshare` into a new pid namespace (and a /proc of it), then `argv`; the namespace dies with the unshare process. */
function inNewPidNs(argv) {
  return u.spawnTracked('unshare', ['-pf', '--mount-proc', '--kill-child', ...argv], { cwd: u.ROOT })
}

/**
 * A holder of `file` in its own pid namespace: `node` there is pid 1, or with `highPid` a pid above 300 (its shell
 * forks 300 short processes first), one that the checker's namespace does not reach (the checker's own pids, its
 * threads' included, stay far below that).
 */
async function holderInNewNs(file, { highPid = false } = {}) {
  const holder = path.join(u.ROOT, '__test__', 'helpers', 'file-holder.js')
  const opts = JSON.stringify({ staleTimeout: 2000 }) // heartbeat every 500 ms: the lock stays younger than 2 s
  const burn = 'i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done'
  const argv = highPid
    ? ['sh', '-c', `${burn}; "$0" "$1" "$2" "$3"; exit $?`, process.execPath, holder, file, opts]
    : [process.execPath, holder, file, opts]
  const child = inNewPidNs(argv)
  const line = await u.lines(child).next(/^(held|failed|crashed) /, 20000)
  assert.match(line, /^held /, line)
  return { child, info: JSON.parse(line.slice('held '.length)) }
}

async function releaseAndEnd(holder) {
  const reader = u.lines(holder.child)
  holder.child.stdin.write('release\n')
  const released = await reader.next(/^released /, 10000)
  holder.child.stdin.end()
  holder.child.kill('SIGKILL')
  await u.waitExit(holder.child, 10000, 'holder')
  return released
}

async function checkFromNewNs(file, holderPid) {
  const child = inNewPidNs([process.execPath, path.join(u.ROOT, '__test__', 'helpers', 'file-pidns-check.js'), file, String(holderPid)])
  const { code, stdout, stderr } = await u.waitExit(child, 40000, 'checker')
  const line = stdout.split('\n').find((l) => l.startsWith('result '))
  assert.ok(line, `checker exit ${code}; stdout: ${stdout} stderr: ${stderr}`)
  return JSON.parse(line.slice('result '.length))
}

/** `sema-native <args>` run as pid 1 of a new pid namespace. */
async function cliInNewNs(...args) {
  const child = inNewPidNs([process.execPath, BIN, ...args])
  return u.waitExit(child, 20000, `sema-native ${args.join(' ')}`)
}

const tokenIn = (file) => /^token=(.*)$/m.exec(fs.readFileSync(file, 'utf8'))?.[1]

describe('ownership across pid namespaces sharing a lock directory', { skip }, () => {
  const t = u.testDir('pidns-', { realpath: true })

  test('the same pid in another namespace neither owns, releases nor takes the lock', async () => {
    const file = t.fresh()
    const holder = await holderInNewNs(file)
    try {
      assert.equal(holder.info.pid, 1, 'premise: the holder is pid 1 of its namespace')
      const token = tokenIn(file)
      const r = await checkFromNewNs(file, holder.info.pid)
      assert.equal(r.pid, 1, 'premise: the checker is pid 1 of its own namespace too')
      assert.deepEqual(r.status, { locked: true, isStale: false, owned: false })
      assert.equal(r.semStatusOwned, false, 'Semaphore#status().isOwnedByCurrentProcess')
      assert.equal(r.release, 'PERMISSION_DENIED', 'release(path) is refused')
      assert.equal(r.unchangedAfterRelease, true, 'release(path) left the lock in place')
      assert.equal(r.semRelease, 'PERMISSION_DENIED', 'Semaphore#release() is refused')
      assert.equal(r.unchangedAfterSemRelease, true, 'Semaphore#release() left the lock in place')
      assert.equal(r.cliRelease, 1, 'sema-native release --pid 1 is refused')
      assert.equal(r.unchangedAfterCliRelease, true, 'the CLI release left the lock in place')
      assert.equal(r.tryAcquire, 'ALREADY_LOCKED')
      assert.equal(r.acquireShortStale, 'TIMEOUT')
      assert.equal(r.cleaned, false)
      assert.equal(r.unchangedAtEnd, true)

      // The front ends, each run as pid 1 of a namespace of its own.
      const status = await cliInNewNs('semats', 'status', file, '--json')
      assert.equal(JSON.parse(status.stdout).isOwnedByCurrentProcess, false, status.stdout)
      const semats = await cliInNewNs('semats', 'release', file)
      assert.equal(semats.code, 1, `semats release: ${semats.stdout}${semats.stderr}`)
      assert.match(semats.stderr, /PERMISSION_DENIED/)
      const own = await cliInNewNs('release', file, '--pid', '1')
      assert.equal(own.code, 1, `release --pid 1: ${own.stdout}${own.stderr}`)
      assert.equal(tokenIn(file), token, 'the holder still has its lock file')

      assert.equal(await releaseAndEnd(holder), 'released true', 'the holder releases its own lock at the end')
      assert.equal(fs.existsSync(file), false)
    } finally {
      holder.child.kill('SIGKILL')
    }
  })

  test('a holder whose pid does not exist in the other namespace is not reclaimed', async () => {
    const file = t.fresh()
    const holder = await holderInNewNs(file, { highPid: true })
    try {
      assert.ok(holder.info.pid > 300, `premise: the holder is pid ${holder.info.pid} > 300 of its namespace`)
      const token = tokenIn(file)
      const r = await checkFromNewNs(file, holder.info.pid)
      assert.equal(r.holderRunningHere, false, "premise: the holder's pid does not exist in the checker's namespace")
      assert.deepEqual(r.status, { locked: true, isStale: false, owned: false })
      assert.equal(r.release, 'PERMISSION_DENIED')
      assert.equal(r.semRelease, 'PERMISSION_DENIED')
      assert.equal(r.cliRelease, 1)
      assert.equal(r.tryAcquire, 'ALREADY_LOCKED')
      assert.equal(r.acquireShortStale, 'TIMEOUT', 'not reclaimed with a 2 s stale timeout either')
      assert.equal(r.cleaned, false, 'cleanStale() keeps it')
      assert.equal(r.unchangedAtEnd, true)
      assert.equal(tokenIn(file), token)
      assert.equal(await releaseAndEnd(holder), 'released true')
    } finally {
      holder.child.kill('SIGKILL')
    }
  })
})
