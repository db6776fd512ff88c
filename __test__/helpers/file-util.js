'use strict'
// The test-helpers module of every suite (the dflockd server fixture is ./dflockd.js, Web Lock holders are in
// ./web-locks.js): temp dirs, a lock holder in a child process, where a waiter stands in the cross-process queue,
// acting as another user, really-dead pids, lock files written by a POSIX shell and read by Python; and, from
// ./children.js, the one factor that widens every time bound, real child processes with hard time bounds and a line
// reader, signals by pid and waits on an observable state. No mocks: everything here runs real processes against
// the real file system.

const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const children = require('./children')

const { ROOT, scaled, spawnTracked, spawnNode, lines, until, signalChild, pidAlive, killAll } = children
const HELPERS = __dirname

function mkTmp(prefix = 'file-') {
  return fs.mkdtempSync(path.join(os.tmpdir(), `sema-native-${prefix}`))
}

function rmTmp(dir) {
  if (dir) fs.rmSync(dir, { recursive: true, force: true })
}

/**
 * A copy of the package that any user can read, for a child run as another user: the clone may sit where that user
 * cannot go (a 0700 home such as /root). Holds package.json, index.js, lib/, the native binary this process loaded
 * (as the local build the loader looks for first) and the named helpers under __test__/helpers/; returns the path of
 * each helper in it, and `dir` (remove it with rmTmp).
 */
function packageForOtherUsers(...helpers) {
  const dir = mkTmp('pkg-')
  fs.chmodSync(dir, 0o755)
  for (const f of ['package.json', 'index.js', 'lib']) fs.cpSync(path.join(ROOT, f), path.join(dir, f), { recursive: true })
  require(ROOT) // loads the binary, so that require.cache names it
  const binary = Object.keys(require.cache).find((f) => f.endsWith('.node'))
  if (!binary) throw new Error('no native binary loaded')
  // The name of a local build, which the loader tries first (its platform key taken from the loaded file's name).
  const key = path.basename(binary).match(/^sema-native\.(.+)\.node$/)?.[1] ?? `${process.platform}-${process.arch}-gnu`
  fs.copyFileSync(binary, path.join(dir, `sema-native.${key}.node`))
  fs.mkdirSync(path.join(dir, '__test__', 'helpers'), { recursive: true })
  const paths = helpers.map((h) => {
    const to = path.join(dir, '__test__', 'helpers', h)
    fs.copyFileSync(path.join(HELPERS, h), to)
    return to
  })
  for (const f of walk(dir)) fs.chmodSync(f, fs.statSync(f).isDirectory() ? 0o755 : 0o644)
  return { dir, paths }
}

function walk(dir) {
  const out = [dir]
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) out.push(...walk(p))
    else out.push(p)
  }
  return out
}

/**
 * The temp directory of one test file: made before its tests, removed after them (with every child process
 * spawned here killed). `fresh(name)` is a new lock path in it, numbered; with `own: true` the path stands alone in
 * a new directory, so that `left(file)` lists every file a call leaves behind. `realpath: true` resolves the
 * directory (the tmpdir may be reached through a link). `dir` is set once the tests run.
 */
function testDir(prefix, { name = 'lock', own = false, realpath = false } = {}) {
  const { before, after } = require('node:test')
  let n = 0
  const t = {
    dir: null,
    fresh(base = name) {
      if (!own) return path.join(t.dir, `${base}-${++n}.lock`)
      const d = path.join(t.dir, `${base}-${++n}`)
      fs.mkdirSync(d)
      return path.join(d, `${base}.lock`)
    },
    left: (file) => ls(path.dirname(file)),
  }
  before(() => {
    t.dir = realpath ? fs.realpathSync(mkTmp(prefix)) : mkTmp(prefix)
  })
  after(() => {
    killAll()
    rmTmp(t.dir)
  })
  return t
}

/** Sorted directory listing (names only). */
function ls(dir) {
  return fs.readdirSync(dir).sort()
}

/** /proc/locks exists (Linux): where a process stands in a lock's cross-process wait queue can be read. */
// Linux only: Windows node.exe under Wine resolves '/proc/locks' on the Z: drive (the host's root) and sees the host's
// flocks, whose owners are Linux pids, never its own (file-contention waited 10 s for its place there).
const HAS_PROC_LOCKS = process.platform === 'linux' && fs.existsSync('/proc/locks')

/**
 * Where `pid` stands in a cross-process wait queue, from /proc/locks: 'head' (it holds its queue file's flock,
 * FLOCK WRITE: it watches the lock file), 'line' (blocked behind the head) or null (not waiting across processes;
 * a waiter whose holder is in its own process waits in-process and stands nowhere here). Lock files themselves
 * carry a shared flock (FLOCK READ), which is not a place.
 */
function queuePlace(pid) {
  for (const line of fs.readFileSync('/proc/locks', 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/)
    const blocked = f[1] === '->'
    const [kind, , mode, owner] = blocked ? f.slice(2) : f.slice(1)
    if (kind === 'FLOCK' && mode === 'WRITE' && Number(owner) === pid) return blocked ? 'line' : 'head'
  }
  return null
}

/** Resolves once `pid` stands at `place` in a wait queue (polled: there is no event for "blocked in flock"). */
function untilQueued(pid, place = 'head', { timeoutMs = 10000 } = {}) {
  return until(() => queuePlace(pid) === place, { timeoutMs, intervalMs: 2, what: `process ${pid} at '${place}' in the queue` })
}

/**
 * A child process (helpers/file-holder.js) taking the lock `file` with `options` (AcquireOptions, or
 * `{ api: 'semats', ...config }`). Returns at once `{ child, out, held, release(), kill() }`: `held` resolves the
 * holder's `{ pid, token, timestamp }` once it holds (within `timeoutMs`), and rejects if it fails or exits;
 * `release()` releases and resolves whether the release succeeded; `kill(signal)` kills it (SIGKILL: a crash) and
 * resolves its exit. For a holder that must hold before the test goes on, use holder().
 */
function spawnHolder(file, options = {}, { timeoutMs = 15000 } = {}) {
  const child = spawnNode('file-holder.js', [file, JSON.stringify(options)])
  const out = lines(child)
  const held = out.next(/^held /, timeoutMs).then((line) => JSON.parse(line.slice(5)))
  held.catch(() => {}) // a caller that kills a waiting holder need not await it
  return {
    child,
    out,
    held,
    async release() {
      child.stdin.write('release\n')
      const line = await out.next(/^released /)
      child.stdin.end()
      return line === 'released true'
    },
    kill(signal = 'SIGKILL') {
      signalChild(child, signal)
      return child.exited
    },
  }
}

/** spawnHolder(), resolved once the child holds the lock; `held` is then its `{ pid, token, timestamp }`. */
async function holder(file, options = {}, { timeoutMs = 15000 } = {}) {
  const h = spawnHolder(file, options, { timeoutMs })
  return { ...h, held: await h.held }
}

/** setpriv's arguments that run a command as nobody (uid and gid 65534, no supplementary groups; root only). */
const NOBODY = ['--reuid=65534', '--regid=65534', '--clear-groups']

/** Runs `cmd args` as nobody (setpriv); throws unless it exits 0; returns its stdout. */
function asNobody(cmd, ...args) {
  const r = spawnSync('setpriv', [...NOBODY, cmd, ...args], { encoding: 'utf8', timeout: scaled(20000) })
  if (r.status !== 0) throw new Error(`as nobody: ${cmd} ${args.join(' ')}: ${r.status} ${r.stderr}`)
  return r.stdout
}

/**
 * Where another user attacks: `shared`, a sticky world-writable directory (as /tmp is) in which nobody plants links,
 * and `mine`, a directory of ours for the victims (0755: nobody can name them, not read them). Both resolved
 * (realpath); remove them with rmTmp.
 */
function attackDirs(prefix) {
  const shared = fs.realpathSync(mkTmp(`${prefix}shared-`))
  fs.chmodSync(shared, 0o1777)
  const mine = fs.realpathSync(mkTmp(`${prefix}victim-`))
  fs.chmodSync(mine, 0o755)
  return { shared, mine }
}

/** A pid that belonged to a real process which has exited and been reaped. */
async function deadPid() {
  for (let attempt = 0; attempt < 5; attempt++) {
    const child =
      process.platform === 'win32'
        ? spawnTracked(process.env.ComSpec || 'cmd.exe', ['/d', '/c', 'exit 0'])
        : spawnTracked('sh', ['-c', 'exit 0'])
    child.stdin.end()
    await child.exited
    const pid = child.pid
    if (!pidAlive(pid)) return pid
  }
  throw new Error('could not obtain a dead pid')
}

/** A live `sleep` process (a Node timer on Windows; killed at the end of the test file); resolves once it runs. */
async function liveSleeper(seconds = 120) {
  const child =
    process.platform === 'win32'
      ? spawnTracked(process.execPath, ['-e', `setTimeout(() => {}, ${seconds * 1000})`])
      : spawnTracked('sleep', [String(seconds)])
  child.stdin.end()
  await new Promise((resolve, reject) => {
    child.once('spawn', resolve)
    child.once('error', reject)
  })
  return child
}

function nowS() {
  return Math.floor(Date.now() / 1000)
}

/**
 * The spec's shell writer, run for real by /bin/sh:
 *   echo "pid=$$" > f; echo "timestamp=$(date +%s)" >> f; echo "tag=..." >> f
 * `keep: true` then execs `sleep` (same pid as `$$`), so the recorded holder stays alive; the returned child is
 * resolved after the shell printed "ready". Otherwise the shell exits and its (dead) pid is returned.
 * `crlf: true` writes the same with printf and CRLF line ends; `bom: true` prefixes a UTF-8 BOM.
 * `timestamp` replaces `$(date +%s)` with a fixed value (backdating).
 */
async function shellWriteLock(file, { tag, crlf = false, bom = false, keep = false, timestamp } = {}) {
  if (process.platform === 'win32') return foreignWriteLock(file, { tag, crlf, bom, keep, timestamp })
  const ts = timestamp === undefined ? '$(date +%s)' : String(timestamp)
  let script
  if (crlf || bom) {
    const eol = crlf ? '\\r\\n' : '\\n'
    const pre = bom ? '\\357\\273\\277' : ''
    script = `printf '${pre}pid=%s${eol}' "$$" > "$1"; printf 'timestamp=%s${eol}' "${ts}" >> "$1"`
    if (tag !== undefined) script += `; printf 'tag=%s${eol}' "$2" >> "$1"`
  } else {
    script = `echo "pid=$$" > "$1"; echo "timestamp=${ts}" >> "$1"`
    if (tag !== undefined) script += `; echo "tag=$2" >> "$1"`
  }
  if (keep) script += '; echo ready; exec sleep 120'
  return writerDone(spawnTracked('sh', ['-c', script, 'sh', file, tag ?? '']), keep, 10000, 'shell writer')
}

/**
 * Windows has no /bin/sh: the same foreign writer as a separate Node process that knows nothing of this package,
 * writing line by line with appends as the shell does (a reader may see a partial file) and exiting, or, with
 * `keep`, staying alive as the recorded holder.
 */
async function foreignWriteLock(file, { tag, crlf, bom, keep, timestamp }) {
  const script = `
    const fs = require('node:fs')
    const o = JSON.parse(process.argv[1])
    const eol = o.crlf ? '\\r\\n' : '\\n'
    fs.writeFileSync(o.file, (o.bom ? '\\ufeff' : '') + 'pid=' + process.pid + eol)
    fs.appendFileSync(o.file, 'timestamp=' + (o.timestamp ?? Math.floor(Date.now() / 1000)) + eol)
    if (o.tag !== null) fs.appendFileSync(o.file, 'tag=' + o.tag + eol)
    if (o.keep) { console.log('ready'); setTimeout(() => {}, 120000) }`
  const options = { file, tag: tag ?? null, crlf, bom, keep, timestamp: timestamp ?? null }
  return writerDone(spawnTracked(process.execPath, ['-e', script, JSON.stringify(options)]), keep, 20000, 'foreign writer')
}

/**
 * A foreign writer's `{ pid, child }`: with `keep`, once it said "ready" (within `ms`) and stays alive as the
 * recorded holder; otherwise once it exited, successfully.
 */
async function writerDone(child, keep, ms, what) {
  child.stdin.end()
  if (keep) {
    await lines(child).next(/^ready$/, ms)
    return { pid: child.pid, child }
  }
  const { code } = await child.closed
  assert.equal(code, 0, `${what} failed: ${child.stderrText}`)
  return { pid: child.pid, child }
}

/** A parser written from the spec, in Python: split lines, strip, split at the first '='. */
const PY_PARSER = `
import json, sys
d = {}
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f.read().split("\\n"):
        line = line.strip()
        if "=" not in line:
            continue
        k, v = line.split("=", 1)
        d[k] = v
print(json.dumps(d))
`

let pythonChecked
function python() {
  if (pythonChecked === undefined) {
    const r = spawnSync('python3', ['--version'], { encoding: 'utf8' })
    pythonChecked = r.status === 0 ? 'python3' : null
  }
  return pythonChecked
}

/** Python's view of a lock file: {key: value} strings. */
function pythonRead(file) {
  const r = spawnSync(python(), ['-c', PY_PARSER, file], { encoding: 'utf8', timeout: 10000 })
  assert.equal(r.status, 0, `python reader failed: ${r.stderr}`)
  return JSON.parse(r.stdout)
}

/** Runs `sh -c script` synchronously; returns trimmed stdout. */
function sh(script, ...args) {
  const r = spawnSync('sh', ['-c', script, 'sh', ...args], { encoding: 'utf8', timeout: 10000 })
  assert.equal(r.status, 0, `sh failed (${r.status}): ${r.stderr}`)
  return r.stdout.trim()
}

/** Sets a file's mtime (and atime) `ageS` seconds into the past. */
function backdate(file, ageS) {
  const t = Date.now() / 1000 - ageS
  fs.utimesSync(file, t, t)
}

/** {ok:false} result or a thrown/rejected LockError → its type/code; a success → 'OK'. */
async function outcome(fn) {
  try {
    const r = await fn()
    if (r && typeof r === 'object' && 'ok' in r) {
      if (r.ok) return { type: 'OK', value: r.value }
      return { type: r.error.type, error: r.error, delivered: 'result' }
    }
    return { type: 'OK', value: r }
  } catch (e) {
    return { type: e && (e.code ?? e.type), error: e, delivered: 'throw' }
  }
}

/** Parses key=value lines of a lock file as the spec's readers do. */
function readLockKeys(file) {
  const out = {}
  for (const raw of fs.readFileSync(file, 'utf8').split('\n')) {
    const line = raw.trim()
    const i = line.indexOf('=')
    if (i < 0) continue
    out[line.slice(0, i)] = line.slice(i + 1)
  }
  return out
}

/**
 * Resolves when `file`'s content satisfies `pred` (checked on every fs.watch event on its directory, and once at
 * the start); rejects after `ms` × timeScale().
 */
function whenFile(file, pred, ms, what = 'file condition') {
  ms = scaled(ms)
  return new Promise((resolve, reject) => {
    let done = false
    let watcher
    const check = () => {
      if (done) return
      let content = null
      try {
        content = fs.readFileSync(file, 'utf8')
      } catch {}
      let ok = false
      try {
        ok = pred(content)
      } catch {}
      if (ok) finish(null, content)
    }
    const finish = (err, value) => {
      if (done) return
      done = true
      clearTimeout(timer)
      clearInterval(fallback)
      if (watcher) watcher.close()
      err ? reject(err) : resolve(value)
    }
    const timer = setTimeout(() => finish(new Error(`${what} not reached within ${ms} ms`)), ms)
    // fs.watch on a directory can miss in-place writes on some systems: a coarse re-check backs it up.
    const fallback = setInterval(check, 250)
    watcher = fs.watch(path.dirname(file), check)
    check()
  })
}

/**
 * Windows node.exe under Wine (Wine's system32 has winecfg.exe). Wine differs from Windows 10 and later where a test
 * depends on it: a name deleted while a handle is open stays until that handle closes (Windows removes it at once),
 * and renaming over a file another handle holds open is refused (Windows allows it with FILE_SHARE_DELETE).
 */
const underWine =
  process.platform === 'win32' &&
  fs.existsSync(path.join(process.env.SystemRoot || 'C:\\windows', 'system32', 'winecfg.exe'))
const WINE_DELETE = underWine && 'Wine keeps a deleted name while the holder’s handle is open (Windows 10+ removes it at once)'

/**
 * The `result {...}` lines of exited mutex workers (helpers/file-mutex-worker.js) summed: asserts that each exited 0
 * and printed one. `{ acquired, overlaps, failedReleases, wrongOwner, errors }`.
 */
function workerTotals(exits) {
  const total = { acquired: 0, overlaps: 0, failedReleases: 0, wrongOwner: 0, errors: [] }
  for (const e of exits) {
    assert.equal(e.code, 0, `worker exit ${e.code}/${e.signal}: ${e.stdout} ${e.stderr}`)
    const line = e.stdout.split('\n').find((l) => l.startsWith('result '))
    assert.ok(line, `worker printed a result: ${e.stdout} ${e.stderr}`)
    const r = JSON.parse(line.slice(7))
    for (const k of ['acquired', 'overlaps', 'failedReleases', 'wrongOwner']) total[k] += r[k]
    total.errors.push(...r.errors)
  }
  return total
}

module.exports = {
  workerTotals,
  ...children,
  NOBODY,
  asNobody,
  attackDirs,
  HAS_PROC_LOCKS,
  queuePlace,
  untilQueued,
  spawnHolder,
  holder,
  underWine,
  WINE_DELETE,
  mkTmp,
  rmTmp,
  testDir,
  packageForOtherUsers,
  ls,
  deadPid,
  liveSleeper,
  nowS,
  shellWriteLock,
  python,
  pythonRead,
  sh,
  backdate,
  outcome,
  readLockKeys,
  whenFile,
}
