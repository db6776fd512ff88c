'use strict'
// Sharding across two real servers: each key lands on the server stableHashShard names (checked with stats on Go,
// and on any server by trying the key with timeout 0 on each server from a second client); custom strategies;
// an unreachable shard fails without failover.
const { test, describe, before, after } = require('node:test')
const assert = require('node:assert/strict')
const d = require('./helpers/dflockd')
const { DistributedLock, Connection, stableHashShard, stats } = require('../lib/dflockd')
const { LockError, AcquireTimeoutError } = require('../lib/errors')

const skip = d.skipReason()
const KEYS = ['test-key', 'my-key', 'a', 'worker-pool', 'ключ✓', 'shard-5', 'shard-6', 'shard-7']
let servers = []
before(async () => {
  if (!skip) servers = await Promise.all([d.startServer(), d.startServer()])
})
after(() => d.stopAll())

/** Which servers hold `key` (a timeout-0 try from a fresh connection fails there). */
async function holdersOf(key) {
  const out = []
  for (const [i, s] of servers.entries()) {
    const c = await Connection.connect({ host: s.host, port: s.port })
    try {
      const g = await c.acquire(key, 0)
      await c.release(key, g.token)
    } catch (e) {
      if (!(e instanceof AcquireTimeoutError)) throw e
      out.push(i)
    } finally {
      c.close()
    }
  }
  return out
}

describe('sharding', { skip }, () => {
  test('the keys spread over both servers (sanity of the key set)', () => {
    const shards = new Set(KEYS.map((k) => stableHashShard(k, 2)))
    assert.deepEqual([...shards].sort(), [0, 1])
  })

  for (const key of KEYS) {
    test(`'${key}' lands on server ${stableHashShard(key, 2)} (= stableHashShard)`, async () => {
      const list = servers.map((s) => [s.host, s.port])
      const l = new DistributedLock({ key, servers: list })
      assert.equal(await l.acquire(), true)
      try {
        assert.deepEqual(await holdersOf(key), [stableHashShard(key, 2)])
        if (d.server.kind === 'go') {
          const st = await Promise.all(servers.map((s) => stats({ host: s.host, port: s.port })))
          const where = st.map((x) => x.locks.some((e) => e.key === key && e.owner_conn_id !== 0))
          assert.deepEqual(where, servers.map((_, i) => i === stableHashShard(key, 2)))
        }
      } finally {
        await l.release()
      }
    })
  }

  test('a custom strategy is honoured', async () => {
    const list = servers.map((s) => [s.host, s.port])
    const seen = []
    const l = new DistributedLock({ key: 'custom-shard', servers: list, shardingStrategy: (k, n) => (seen.push([k, n]), 1) })
    assert.equal(await l.acquire(), true)
    assert.deepEqual(seen, [['custom-shard', 2]])
    assert.deepEqual(await holdersOf('custom-shard'), [1])
    await l.release()
  })

  test('an unreachable shard fails (no failover to the other server)', async () => {
    const dead = await d.freePort()
    const l = new DistributedLock({
      key: 'dead-shard',
      servers: [['127.0.0.1', dead], [servers[1].host, servers[1].port]],
      shardingStrategy: () => 0,
      connectTimeoutMs: 2000,
    })
    await assert.rejects(l.acquire(), (e) => e instanceof LockError && e.code === 'CONNECTION_ERROR')
    assert.deepEqual(await holdersOf('dead-shard'), [])
    // the instance is reusable afterwards
    await assert.rejects(l.acquire(), (e) => e instanceof LockError && e.code === 'CONNECTION_ERROR')
  })
})
