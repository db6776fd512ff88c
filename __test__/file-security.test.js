'use strict'
// Hostile lock directories, with another user as the adversary (root runs the suite; the adversary is `nobody`
// through setpriv) in a sticky world-writable directory, as /tmp is:
// - a symlink planted at the lock path (to an existing file, an old one, or nowhere) is refused by every operation
//   of the API, the semats class and the CLI with INVALID_PATH, and its target is never touched;
// - a reader who can only read a dead holder's lock file and holds a shared flock on it cannot keep the lock from
//   being reclaimed (status, tryAcquire, acquire, clean), and afterwards processes still exclude each other.
// Skipped when not root (another user is needed) or not on Linux.

const { describe, test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const { cli } = require('./fixtures/cli/helpers')
const sema = require('..')

const linux = process.platform === 'linux'
const root = typeof process.getuid === 'function' && process.getuid() === 0
const skip = !linux ? 'Linux only' : !root ? 'needs root, to act as another user (setpriv)' : false
const { NOBODY, asNobody } = u

function snapshot(file) {
  const st = fs.statSync(file)
  return { text: fs.readFileSync(file, 'utf8'), mtimeMs: st.mtimeMs, ino: st.ino, mode: st.mode }
}

describe('a symlink planted at the lock path by another user', { skip }, () => {
  let d
  const victims = {}
  before(() => {
    d = u.attackDirs('security-')
    for (const [name, age] of [['fresh', 0], ['old', 7200]]) {
      const file = path.join(d.mine, `${name}-secret.txt`)
      fs.writeFileSync(file, `${name} secret\n`, { mode: 0o600 })
      const t = new Date(Date.now() - age * 1000)
      fs.utimesSync(file, t, t)
      victims[name] = { file, before: snapshot(file) }
    }
    // The adversary plants the links (it cannot read the victims, only name them).
    asNobody('ln', '-s', victims.fresh.file, path.join(d.shared, 'fresh.lock'))
    asNobody('ln', '-s', victims.old.file, path.join(d.shared, 'old.lock'))
    asNobody('ln', '-s', path.join(d.mine, 'created-through-link'), path.join(d.shared, 'dangling.lock'))
  })
  after(() => {
    u.rmTmp(d && d.shared)
    u.rmTmp(d && d.mine)
  })

  const links = ['fresh.lock', 'old.lock', 'dangling.lock']
  const refused = (r, what) => {
    assert.equal(r.ok, false, `${what} succeeded`)
    assert.equal(r.error.type, 'INVALID_PATH', `${what}: ${JSON.stringify(r.error)}`)
    assert.match(r.error.message, /symbolic link/, what)
  }
  const victimsUntouched = () => {
    for (const v of Object.values(victims)) assert.deepEqual(snapshot(v.file), v.before, `${v.file} was touched`)
    assert.equal(fs.existsSync(path.join(d.mine, 'created-through-link')), false, 'a file was created through the link')
    for (const l of links) assert.ok(fs.lstatSync(path.join(d.shared, l)).isSymbolicLink(), `${l} is still the link`)
  }

  test('acquire, tryAcquire, release and release with force refuse it (INVALID_PATH)', async () => {
    for (const l of links) {
      const p = path.join(d.shared, l)
      refused(await sema.acquire(p, { timeout: 300, staleTimeout: 1000 }), `acquire ${l}`)
      refused(await sema.tryAcquire(p, { staleTimeout: 1000 }), `tryAcquire ${l}`)
      refused(await sema.release(p), `release ${l}`)
      refused(await sema.release(p, { force: true }), `release --force ${l}`)
      const s = await sema.status(p)
      assert.equal(s.locked, true, `status ${l}`)
      assert.equal(s.isStale, false, `status ${l}`)
    }
    victimsUntouched()
  })

  test('the semats class refuses it too; getPath() is the link, not its target', async () => {
    for (const l of links) {
      const p = path.join(d.shared, l)
      const s = new sema.Semaphore(p, { staleTimeout: 1000 })
      assert.equal(s.getPath(), p)
      refused(s.tryAcquire(), `Semaphore#tryAcquire ${l}`)
      refused(await s.acquire({ timeout: 200 }), `Semaphore#acquire ${l}`)
      refused(s.release(), `Semaphore#release ${l}`)
      refused(s.release(true), `Semaphore#release(true) ${l}`)
      refused(s.forceRelease(), `Semaphore#forceRelease ${l}`)
      assert.equal(s.status().isStale, false)
      assert.equal(s.cleanStale(), false) // semats' boolean; the CLI's clean reports why (below)
    }
    victimsUntouched()
  })

  test('CLI release --force, clean, try-acquire and acquire refuse it', async () => {
    for (const l of links) {
      const p = path.join(d.shared, l)
      for (const args of [['release', p, '--force'], ['clean', p, '--stale', '1s'], ['try-acquire', p], ['acquire', p, '--timeout', '200ms']]) {
        const r = await cli(args)
        assert.notEqual(r.code, 0, `${args.join(' ')} succeeded: ${r.stdout} ${r.stderr}`)
        assert.match(r.stderr, /symbolic link/, args.join(' '))
      }
    }
    victimsUntouched()
  })
})

describe("a reader's shared flock on a dead holder's lock", { skip }, () => {
  let d
  let reader = null
  before(() => {
    d = u.attackDirs('security-')
  })
  after(() => {
    if (reader) reader.kill('SIGKILL')
    u.rmTmp(d && d.shared)
    u.rmTmp(d && d.mine)
  })

  /** A holder process takes `file` and is SIGKILLed: its lock stays, naming a dead pid. */
  async function deadHolder(file) {
    await (await u.holder(file, {}, { timeoutMs: 20000 })).kill('SIGKILL')
    assert.ok(fs.existsSync(file))
  }

  /** nobody takes a shared flock on `file` (it can only read it) and keeps it until killed. */
  async function sharedFlockAsNobody(file) {
    if (reader) reader.kill('SIGKILL')
    reader = u.spawnTracked('setpriv', [...NOBODY, 'flock', '--shared', '--nonblock', '--no-fork', file, 'sh', '-c', 'echo locked; exec sleep 600'])
    reader.stdin.end()
    await u.lines(reader).next(/^locked$/, 10000)
  }

  test('status says stale, and tryAcquire, acquire and clean reclaim it', async () => {
    const file = path.join(d.shared, 'dead.lock')
    for (const how of ['tryAcquire', 'acquire', 'clean']) {
      await deadHolder(file)
      await sharedFlockAsNobody(file)
      const s = await sema.status(file)
      assert.equal(s.isStale, true, `${how}: status`)
      if (how === 'clean') {
        const r = await cli(['clean', file])
        assert.equal(r.code, 0, r.stderr)
        assert.equal(fs.existsSync(file), false, 'clean removed it')
      } else {
        const r = how === 'acquire' ? await sema.acquire(file, { timeout: 5000 }) : await sema.tryAcquire(file)
        assert.equal(r.ok, true, `${how}: ${JSON.stringify(r.error)}`)
        assert.equal(await r.value.release(), true)
      }
    }
  })

  test('after the reclaim, 4 processes × 60 acquisitions still never overlap', { timeout: u.scaled(120000) }, async () => {
    const file = path.join(d.shared, 'mutex.lock')
    await deadHolder(file)
    await sharedFlockAsNobody(file)
    const marker = path.join(d.shared, 'inside.marker')
    const counter = path.join(d.shared, 'counter')
    fs.writeFileSync(counter, '0')
    const kids = Array.from({ length: 4 }, () => u.spawnNode('file-mutex-worker.js', [file, marker, counter, 60, 'async']))
    await Promise.all(kids.map((k) => u.lines(k).next(/^ready$/, 20000)))
    for (const k of kids) k.stdin.end('go\n')
    const exits = await Promise.all(kids.map((k) => u.waitExit(k, 100000, 'mutex worker')))
    let overlaps = 0
    let acquired = 0
    for (const e of exits) {
      assert.equal(e.code, 0, e.stdout + e.stderr)
      const r = JSON.parse(e.stdout.split('\n').find((l) => l.startsWith('result ')).slice(7))
      assert.deepEqual(r.errors, [])
      overlaps += r.overlaps
      acquired += r.acquired
    }
    assert.equal(overlaps, 0)
    assert.equal(acquired, 240)
    assert.equal(Number(fs.readFileSync(counter, 'utf8')), 240)
  })
})

describe('a tag over the 1 MiB readers accept', () => {
  let dir
  before(() => {
    dir = u.mkTmp('security-tag-')
  })
  after(() => u.rmTmp(dir))

  test('is refused with INVALID_ARGUMENT by acquire, tryAcquire and the semats class, leaving no file', async () => {
    const file = path.join(dir, 'big.lock')
    const tag = 'x'.repeat(1024 * 1024 + 1)
    const options = { maxTagLength: 4 * 1024 * 1024, timeout: 1000 }
    for (const r of [
      await sema.acquire(file, { ...options, tag }),
      await sema.tryAcquire(file, { ...options, tag }),
      new sema.Semaphore(file, { maxTagLength: 4 * 1024 * 1024 }).tryAcquire(tag),
      await new sema.Semaphore(file, { maxTagLength: 4 * 1024 * 1024 }).acquire({ tag, timeout: 1000 }),
    ]) {
      assert.equal(r.ok, false)
      assert.equal(r.error.type, 'INVALID_ARGUMENT', JSON.stringify(r.error))
      assert.match(r.error.message, /^tag: 1048577 UTF-16 units \(maxTagLength 4194304\)/)
    }
    assert.deepEqual(fs.readdirSync(dir), [])
    // A big tag that fits is written, and released (before, a lock file over the limit could not be released).
    const r = await sema.acquire(file, { ...options, tag: 'y'.repeat(1000 * 1000) })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(await r.value.release(), true)
    assert.deepEqual(fs.readdirSync(dir), [])
  })
})

describe('the queue directory in /dev/shm', { skip: skip || (!fs.existsSync('/dev/shm') && 'no /dev/shm') }, () => {
  // Users of their own (no other test runs as them), so that this suite owns their queue directories.
  const VICTIM = 54321
  const ATTACKER = 54322
  const KILLED = 54323
  const qdir = (uid) => `/dev/shm/sema-native-${uid}`
  let shared
  let mine
  const kids = []
  let pkg
  before(() => {
    pkg = u.packageForOtherUsers('file-user-cmd.js')
    ;({ shared, mine } = u.attackDirs('security-'))
    for (const uid of [VICTIM, KILLED]) fs.rmSync(qdir(uid), { recursive: true, force: true })
  })
  after(() => {
    for (const k of kids) u.signalChild(k)
    for (const uid of [VICTIM, KILLED]) fs.rmSync(qdir(uid), { recursive: true, force: true })
    u.rmTmp(shared)
    u.rmTmp(mine)
    u.rmTmp(pkg && pkg.dir)
  })

  /** `file-user-cmd.js` as `uid`, once it is ready; `.run(line, pred)` sends a command and resolves its answer. */
  async function userProcess(uid) {
    // From a copy the other user can read: the clone may sit in a directory that user cannot enter (/root).
    const env = { ...process.env }
    delete env.NAPI_RS_NATIVE_LIBRARY_PATH
    const child = u.spawnTracked('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', process.execPath, pkg.paths[0]], {
      cwd: pkg.dir,
      env,
    })
    kids.push(child)
    const out = u.lines(child)
    await out.next(/^ready$/, 20000)
    child.run = (line, pred) => {
      child.stdin.write(`${line}\n`)
      return out.next(pred, 30000)
    }
    child.out = out
    return child
  }

  const queueFiles = (uid) => (fs.existsSync(qdir(uid)) ? fs.readdirSync(qdir(uid)).filter((n) => /^q-[0-9a-f]{16}$/.test(n)) : [])

  test("removed while a process runs and put back as another user's symlink: the process never uses it", async () => {
    const a = path.join(shared, 'queued.lock')
    const b = path.join(shared, 'queued-later.lock') // another lock: a queue file not opened before
    const holder = await userProcess(VICTIM)
    const holderB = await userProcess(VICTIM)
    assert.equal(await holder.run(`acquire ${a} 1000`, /^(acquired|failed)/), 'acquired')
    assert.equal(await holderB.run(`acquire ${b} 1000`, /^(acquired|failed)/), 'acquired')
    const waiter = await userProcess(VICTIM)
    // It waits: its queue directory is made and verified.
    assert.equal(await waiter.run(`acquire ${a} 300`, /^(acquired|failed)/), 'failed TIMEOUT')
    // The directory goes away while the waiter runs; another user puts a symlink to a directory of their own (open
    // to everyone) in its place.
    fs.rmSync(qdir(VICTIM), { recursive: true, force: true })
    const trap = fs.mkdtempSync('/dev/shm/sema-native-trap-')
    try {
      fs.chownSync(trap, ATTACKER, ATTACKER)
      fs.chmodSync(trap, 0o777)
      const ln = spawnSync('setpriv', [`--reuid=${ATTACKER}`, `--regid=${ATTACKER}`, '--clear-groups', 'ln', '-s', trap, qdir(VICTIM)])
      assert.equal(ln.status, 0, String(ln.stderr))
      // Every name made in the trap while the waiter waits (a queue file would be removed again when it gives up).
      const made = []
      let sentinelSeen
      const seen = new Promise((resolve) => (sentinelSeen = resolve))
      const watcher = fs.watch(trap, (_event, name) => {
        made.push(name)
        if (name === 'sentinel') sentinelSeen()
      })
      try {
        assert.equal(await waiter.run(`acquire ${b} 300`, /^(acquired|failed)/), 'failed TIMEOUT')
        fs.writeFileSync(path.join(trap, 'sentinel'), '') // every earlier event has been delivered once this one is
        await seen
      } finally {
        watcher.close()
      }
      fs.unlinkSync(path.join(trap, 'sentinel'))
      assert.deepEqual([...new Set(made)], ['sentinel'], "a queue file was made in the other user's directory")
      // Waiting still works without the queue.
      assert.equal(await holderB.run('release', /^released/), 'released true')
      assert.equal(await waiter.run(`acquire ${b} 10000`, /^(acquired|failed)/), 'acquired')
      assert.equal(await waiter.run('release', /^released/), 'released true')
      assert.deepEqual(fs.readdirSync(trap), [])
    } finally {
      fs.rmSync(qdir(VICTIM), { force: true })
      fs.rmSync(trap, { recursive: true, force: true })
    }
  })

  test('after a contended run the queue file and the emptied directory are gone', async () => {
    const a = path.join(shared, 'handoff.lock')
    const holder = await userProcess(VICTIM)
    assert.equal(await holder.run(`acquire ${a} 1000`, /^(acquired|failed)/), 'acquired')
    const waiter = await userProcess(VICTIM)
    const got = waiter.run(`acquire ${a} 20000`, /^(acquired|failed)/)
    await u.until(() => queueFiles(VICTIM).length === 1, { timeoutMs: 20000, what: 'the waiter lined up' })
    assert.equal(await holder.run('release', /^released/), 'released true')
    assert.equal(await got, 'acquired')
    assert.equal(await waiter.run('release', /^released/), 'released true')
    assert.equal(fs.existsSync(qdir(VICTIM)), false, `left: ${queueFiles(VICTIM)}`)
  })

  test('queue files of SIGKILLed waiters are swept by the next process of their user', async () => {
    const a = path.join(shared, 'killed.lock')
    const holder = await userProcess(KILLED)
    assert.equal(await holder.run(`acquire ${a} 1000`, /^(acquired|failed)/), 'acquired')
    const waiters = [await userProcess(KILLED), await userProcess(KILLED)]
    for (const w of waiters) w.stdin.write(`acquire ${a} 60000\n`)
    await u.until(() => queueFiles(KILLED).length === 1, { timeoutMs: 20000, what: 'the waiters lined up' })
    for (const p of [...waiters, holder]) {
      u.signalChild(p) // by pid: it ends when its stdin ends, which Deno's ChildProcess.kill() closes first
      await p.exited
    }
    const left = queueFiles(KILLED)
    assert.equal(left.length, 1, 'SIGKILL leaves the queue file')
    // The next process of that user to acquire a lock (here an uncontended one of its own) sweeps it.
    const next = await userProcess(KILLED)
    assert.equal(await next.run(`acquire ${path.join(shared, 'other.lock')} 1000`, /^(acquired|failed)/), 'acquired')
    assert.equal(await next.run('release', /^released/), 'released true')
    assert.deepEqual(queueFiles(KILLED), [])
    assert.equal(fs.existsSync(qdir(KILLED)), false)
  })
})
