'use strict'
// A fleet in the target (issue 23 point 6): `dflockd://[token@]host1[:port],host2[:port]/key` in acquire,
// tryAcquire, withLock, release, status and the CLI; each key lives on the server stableHashShard picks, the same
// as DistributedLock's `servers` (so the two contend), checked with `stats` on two real Go servers.

const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { execFile } = require('node:child_process')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')
const { DistributedLock, stableHashShard, stats, acquire, tryAcquire, withLock, release, status } = require('..')
const { parseDflockdUrl, redactTarget } = require('../lib/dflockd/url')

const skip = d.goOnly()
const CLI = path.join(__dirname, '..', 'bin', 'sema-native.js')

let a
let b
let servers
test.before(async () => {
  if (skip) return
  ;[a, b] = await Promise.all([d.startServer(), d.startServer()])
  servers = [[a.host, a.port], [b.host, b.port]]
})
test.after(() => d.stopAll())

const fleet = (key, token) => `dflockd://${token ? `${token}@` : ''}${a.host}:${a.port},${b.host}:${b.port}/${key}`
/** A key of this run that stableHashShard puts on server `idx` of 2. */
function keyOn(idx, name) {
  for (let i = 0; ; i++) {
    const k = `fleet-${name}-${process.pid}-${i}`
    if (stableHashShard(k, 2) === idx) return k
  }
}
async function heldOn(key) {
  const [sa, sb] = await Promise.all([stats({ host: a.host, port: a.port }), stats({ host: b.host, port: b.port })])
  const held = (s) => s.locks.some((l) => l.key === key && Number(l.owner_conn_id) !== 0)
  return [held(sa), held(sb)]
}

test('a key acquired through the fleet URL is held on the server stableHashShard picks, and contends with DistributedLock({servers})', { skip, timeout: u.scaled(60_000) }, async () => {
  for (const idx of [0, 1]) {
    const key = keyOn(idx, 'acq')
    const r = await acquire(fleet(key), { timeout: 5_000 })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.deepEqual(await heldOn(key), [idx === 0, idx === 1], `key on server ${idx} only`)
    const other = new DistributedLock({ key, servers, acquireTimeoutS: 0 })
    assert.equal(await other.acquire(), false, 'DistributedLock({servers}) sees it held')
    const st = await status(fleet(key))
    assert.equal(st.locked, true)
    assert.equal(st.isOwnedByCurrentProcess, true)
    assert.equal(st.target, fleet(key))
    // The fleet URL and the chosen server's own URL name the same lock.
    const single = (idx === 0 ? a : b).url(key)
    assert.equal((await status(single)).isOwnedByCurrentProcess, true)
    assert.deepEqual(await release(fleet(key)), { ok: true, value: undefined })
    assert.equal(await other.acquire(), true, 'free again after release(fleet URL)')
    const t = await tryAcquire(fleet(key))
    assert.equal(t.ok, false)
    assert.equal(t.error.type, 'ALREADY_LOCKED')
    await other.release()
    other.close()
  }
})

test('withLock and tryAcquire through the fleet URL; the CLI takes it too', { skip, timeout: u.scaled(60_000) }, async () => {
  const key = keyOn(1, 'with')
  const seen = await withLock(fleet(key), async () => heldOn(key))
  assert.deepEqual(seen, [false, true])
  const t = await tryAcquire(fleet(key))
  assert.equal(t.ok, true)
  const out = await new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'status', fleet(key), '--json'], (err, stdout, stderr) => resolve({ code: err ? err.code : 0, stdout, stderr }))
  })
  assert.equal(out.code, 0, out.stderr)
  const j = JSON.parse(out.stdout)
  assert.equal(j.locked, true, out.stdout)
  await t.value.release()
})

test('fleet URL parsing: hosts, default ports, IPv6, the token redacted, bad lists refused', () => {
  const u = parseDflockdUrl('dflockd://s%40cret@[::1]:7001,h2,10.0.0.3:7003/k?leaseTtl=5')
  assert.deepEqual(u.servers, [['::1', 7001], ['h2', 6388], ['10.0.0.3', 7003]])
  assert.deepEqual([u.host, u.port], u.servers[stableHashShard('k', 3)])
  assert.equal(u.auth, 's@cret')
  assert.equal(u.leaseTtl, 5)
  assert.equal(redactTarget('dflockd://s@cret@a,b/k'), 'dflockd://***@a,b/k')
  for (const bad of ['dflockd://a,,b/k', 'dflockd://a,/k', 'dflockd://a,b:0/k', 'dflockd://a,b:x/k']) {
    assert.throws(() => parseDflockdUrl(bad), (e) => e.code === 'INVALID_ARGUMENT' && !/tok/.test(e.message), bad)
  }
})
