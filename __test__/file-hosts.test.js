'use strict'
// One lock directory shared by several "hosts": each host is a UTS + pid namespace (`unshare -u -p -f --mount-proc`)
// with its own hostname, so its host identity differs and its pids cannot be probed from the other. A holder on
// another host is judged by its heartbeat's progress on the waiter's own monotonic clock (crates/sema-core
// stale::remote): 6 heartbeat periods (6 s by default) without a change and it is taken; a live holder never is,
// also while its JS thread is blocked for longer than that (the heartbeat is a native thread: it keeps the lock
// alive, and the holder is not told it lost it).

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const u = require('./helpers/file-util')
const { readSema } = require('../scripts/sema-tool')

const BIN = path.join(u.ROOT, 'bin', 'sema-native.js')
const SEMA = readSema()

/** `argv` run on host `name` to its end: { code, stdout, stderr }. */
function runOnHost(name, argv) {
  const child = u.spawnTracked('unshare', ['-u', '-p', '-f', '--mount-proc', '--kill-child', 'sh', '-c', 'hostname "$0" && exec "$@"', name, ...argv], {
    cwd: u.ROOT,
  })
  return u.waitExit(child, 30000, argv.join(' '))
}

function unshareWorks() {
  if (process.platform !== 'linux') return 'Linux only (UTS and pid namespaces)'
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return 'needs root (unshare -u -p -f)'
  const r = spawnSync('unshare', ['-u', '-p', '-f', '--mount-proc', '--kill-child', 'sh', '-c', 'hostname h-probe && hostname && echo $$'], {
    encoding: 'utf8',
    timeout: 10000,
  })
  if (r.error || r.status !== 0 || r.stdout.trim() !== 'h-probe\n1') {
    return `unshare -u -p -f --mount-proc is not available here (${r.error ? r.error.message : r.stderr.trim() || `exit ${r.status}`})`
  }
  return false
}
const skip = unshareWorks()

/** `node -e <code> <args>` on host `name` (its own hostname and pid namespace). */
function onHost(name, code, ...args) {
  return onHostAt(name, null, code, ...args)
}

/**
 * onHost(), with the host's wall clock `offset` off (libfaketime: `faketime -f +5h`), its monotonic clock untouched
 * (FAKETIME_DONT_FAKE_MONOTONIC=1: another machine's wall clock is wrong, its monotonic clock still runs).
 */
function onHostAt(name, offset, code, ...args) {
  const clock = offset ? ['faketime', '-f', offset] : []
  return u.spawnTracked(
    'unshare',
    ['-u', '-p', '-f', '--mount-proc', '--kill-child', 'sh', '-c', 'hostname "$0" && exec "$@"', name, ...clock, process.execPath, '-e', code, ...args],
    { cwd: u.ROOT, env: { ...process.env, FAKETIME_DONT_FAKE_MONOTONIC: '1' } },
  )
}

/** Why the wall-clock test cannot run here, or false. */
function faketimeMissing() {
  const r = spawnSync('faketime', ['-f', '+5h', process.execPath, '-e', 'console.log(Date.now())'], {
    encoding: 'utf8',
    timeout: 10000,
    env: { ...process.env, FAKETIME_DONT_FAKE_MONOTONIC: '1' },
  })
  if (r.error || r.status !== 0) return 'faketime (Debian package faketime) is not installed: .ci/run installs it'
  const ahead = Number(r.stdout.trim()) - Date.now()
  return ahead > 4 * 3600e3 ? false : `faketime did not move Node's wall clock (${ahead} ms)`
}

/** Holds the lock, prints `held`; on `block <ms>` blocks its JS thread that long, then prints `after-block <aborted>`. */
const HOLDER = `
const sema = require(${JSON.stringify(u.ROOT)})
const readline = require('node:readline')
;(async () => {
  const r = await sema.acquire(process.argv[1], { tag: 'on host a' })
  if (!r.ok) { console.log('failed ' + r.error.type); process.exit(1) }
  const lock = r.value
  console.log('held ' + lock.pid)
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const [cmd, arg] = line.split(' ')
    if (cmd === 'block') {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(arg))
      await new Promise((r) => setImmediate(r))
      console.log('after-block ' + lock.signal.aborted)
    } else if (cmd === 'release') console.log('released ' + (await lock.release()))
  }
})()
`

/** Waits up to `timeout` ms; prints `waiting`, then `got <ms>` or `error <code>`. */
const WAITER = `
const sema = require(${JSON.stringify(u.ROOT)})
;(async () => {
  console.log('waiting')
  const t0 = performance.now()
  const r = await sema.acquire(process.argv[1], { timeout: Number(process.argv[2]) })
  if (!r.ok) { console.log('error ' + r.error.type); return }
  console.log('got ' + Math.round(performance.now() - t0))
  await r.value.release()
})()
`

describe('hosts sharing one lock directory', { skip }, () => {
  const t = u.testDir('hosts-', { realpath: true })

  test('a holder SIGKILLed on host A: a waiter on host B gets the lock within 6 heartbeat periods of its last beat', async () => {
    const file = t.fresh()
    const holder = onHost('host-a', HOLDER, file)
    assert.match(await u.lines(holder).next(/^(held|failed) /, 20000), /^held /)
    const waiter = onHost('host-b', WAITER, file, String(u.scaled(60000)))
    const out = u.lines(waiter)
    await out.next(/^waiting$/, 20000)
    // Let B see the live holder beat for a while (never taken meanwhile), then crash A.
    await new Promise((r) => setTimeout(r, 2500))
    const killedAt = performance.now()
    holder.kill('SIGKILL') // --kill-child: the holder dies with its namespace
    const got = await out.next(/^(got|error) /, u.scaled(60000))
    const reclaimMs = Math.round(performance.now() - killedAt)
    assert.match(got, /^got /, got)
    assert.ok(Number(got.slice(4)) >= 2500, `not taken while A was alive: ${got}`)
    // The bound: 6 s of no change from B's last look at A's last beat (1 s apart at most), plus B's 100 ms polls.
    assert.ok(reclaimMs < u.scaled(20000), `reclaimed ${reclaimMs} ms after the kill`)
    console.log(`# reclaimed across hosts ${reclaimMs} ms after SIGKILL (bound: 6 s after the last beat B saw)`)
    await u.waitExit(waiter, 20000, 'waiter')
  })

  test("status, ls and the real sema on host B: host A's live holder named (host, pid, tag), its reclaim rule said; sema --stale 1 sees it live", async () => {
    const file = t.fresh()
    const holder = onHost('host-a', HOLDER, file)
    const hl = u.lines(holder)
    const held = await hl.next(/^(held|failed) /, 20000)
    assert.match(held, /^held /)
    const pid = held.slice(5)
    try {
      const status = await runOnHost('host-b', [process.execPath, BIN, 'status', file])
      assert.match(status.stdout, /heartbeat unchanged for 6 × its period, observed locally/, status.stdout)
      const ls = await runOnHost('host-b', [process.execPath, BIN, 'ls', path.dirname(file)])
      assert.match(ls.stdout, new RegExp(`${pid}.*"on host a".*on host host-a: reclaimed once its heartbeat stays unchanged 6 periods here`), ls.stdout)
      const json = await runOnHost('host-b', [process.execPath, BIN, 'ls', path.dirname(file), '--json'])
      const rec = JSON.parse(json.stdout).locks.find((l) => l.name === path.basename(file))
      assert.deepEqual({ host: rec.host, thisHost: rec.thisHost, pid: rec.pid, tag: rec.tag, state: rec.state, reason: rec.reason },
        { host: 'host-a', thisHost: false, pid: Number(pid), tag: 'on host a', state: 'held', reason: 'other-host-heartbeat-moving' })
      if (SEMA.bin) {
        // Mixed fleets: the holder's heartbeat keeps its timestamp within 1 s, so sema --stale 1 on B sees it live.
        for (let i = 0; i < 3; i++) {
          const r = await runOnHost('host-b', [SEMA.bin, 'try', file, '--stale', '1'])
          assert.equal(r.code, 1, `sema try --stale 1: ${r.stdout} ${r.stderr}`)
          await new Promise((res) => setTimeout(res, 700))
        }
      }
      holder.stdin.write('release\n')
      assert.equal(await hl.next(/^released /, 10000), 'released true')
    } finally {
      holder.kill('SIGKILL')
    }
  })

  test("host B's wall clock 5 h ahead, then 5 h behind: A's live holder is never taken; once SIGKILLed it is, within the bound", { skip: faketimeMissing() }, async () => {
    for (const offset of ['+5h', '-5h']) {
      const file = t.fresh()
      const holder = onHost('host-a', HOLDER, file)
      assert.match(await u.lines(holder).next(/^(held|failed) /, 20000), /^held /)
      const waiter = onHostAt('host-b', offset, WAITER, file, String(u.scaled(60000)))
      const out = u.lines(waiter)
      await out.next(/^waiting$/, 20000)
      // Longer than the 6 s bound: a waiter that compared A's timestamps with its own wall clock would have taken
      // the live lock at once (before the cross-host rule, an hours-old timestamp was stale); the pause is the case.
      await new Promise((r) => setTimeout(r, 7500))
      const killedAt = performance.now()
      holder.kill('SIGKILL')
      const got = await out.next(/^(got|error) /, u.scaled(60000))
      const reclaimMs = Math.round(performance.now() - killedAt)
      assert.match(got, /^got /, `${offset}: ${got}`)
      assert.ok(Number(got.slice(4)) >= 7500, `${offset}: taken while A was alive: ${got}`)
      assert.ok(reclaimMs < u.scaled(20000), `${offset}: reclaimed ${reclaimMs} ms after the kill`)
      console.log(`# wall clock ${offset}: reclaimed ${reclaimMs} ms after SIGKILL`)
      await u.waitExit(waiter, 20000, 'waiter')
    }
  })

  test("a live holder on host A is never taken, also while its JS thread is blocked longer than the bound", async () => {
    const file = t.fresh()
    const holder = onHost('host-a', HOLDER, file)
    const hl = u.lines(holder)
    assert.match(await hl.next(/^(held|failed) /, 20000), /^held /)
    holder.stdin.write('block 10000\n') // 10 s > 6 s: only the native heartbeat thread runs
    const waiter = onHost('host-b', WAITER, file, '9000')
    const out = u.lines(waiter)
    await out.next(/^waiting$/, 20000)
    assert.equal(await out.next(/^(got|error) /, u.scaled(60000)), 'error TIMEOUT')
    // The heartbeat thread kept it: the holder was not told it lost the lock.
    assert.equal(await hl.next(/^after-block /, u.scaled(30000)), 'after-block false')
    holder.stdin.write('release\n')
    assert.equal(await hl.next(/^released /, 10000), 'released true')
    holder.stdin.end()
    holder.kill('SIGKILL')
    await u.waitExit(waiter, 20000, 'waiter')
  })
})
