'use strict'
// The low-level Connection on a host whose libuv cannot serve the addon: it must run on the tokio driver, chosen
// before any libuv call, and neither abort nor hang. Under Node with the libuv verdict forced (SEMA_NATIVE_LIBUV=off)
// or with the host naming itself Bun or Deno, and under the real Bun (whose uv_* functions are aborting stubs:
// `panic: unsupported uv function: uv_poll_init_socket` before the fallback) and the real Deno (its second request
// on a connection hung until the 30 s reply timeout before it), installed by scripts/test-runtimes.js.
const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const d = require('./helpers/dflockd')
const { spawnTracked, waitExit } = require('./helpers/file-util')
const runtimes = require('../scripts/runtimes')

const skip = d.skipReason()
const pkg = path.resolve(__dirname, '..')
const s = d.serverFixture({ skip })

/**
 * A script (CommonJS, for node, bun and deno alike) that connects through the native class and the public
 * Connection, makes round trips, closes a connection with two requests pending, leaves one idle connection open
 * (it must not keep the process alive) and prints one JSON line.
 */
const script = (port, prelude = '') => `${prelude}
  const { Connection } = require(${JSON.stringify(pkg)})
  const native = require(${JSON.stringify(path.join(pkg, 'lib', 'native.js'))})
  const fail = (e) => { console.error(e && e.stack || e); process.exit(3) }
  ;(async () => {
    const raw = await new Promise((resolve, reject) => {
      native.NativeDflockdConnection.connect({ server: { host: '127.0.0.1', port: ${port} } })
        .then((r) => (r.ok ? resolve(r.value) : reject(r.error)), reject)
    })
    const driver = raw.driver
    raw.close()
    const c = await Connection.connect({ host: '127.0.0.1', port: ${port} })
    const leases = []
    for (let i = 1; i <= 20; i++) {
      const g = await c.acquire('rt-' + (i % 3), 0, i)
      leases.push(g.lease)
      await c.release('rt-' + (i % 3), g.token)
    }
    const holder = await Connection.connect({ host: '127.0.0.1', port: ${port} })
    const held = await holder.acquire('rt-held', 0, 30)
    const timedOut = await c.acquire('rt-held', 1).then(() => 'granted', (e) => e.code)
    const pending = [c.acquire('rt-held', 30), c.stats()]
    c.close()
    const closed = (await Promise.allSettled(pending)).map((r) => r.reason && r.reason.code)
    await holder.release('rt-held', held.token)
    console.log(JSON.stringify({ driver, leases, timedOut, closed }))
  })().catch(fail)`

function check(r) {
  assert.equal(r.signal, null, r.stderr)
  assert.equal(r.code, 0, `exit ${r.code}: ${r.stderr}`)
  const out = JSON.parse(r.stdout.trim().split('\n').pop())
  assert.deepEqual(out.leases, Array.from({ length: 20 }, (_, i) => i + 1))
  assert.equal(out.timedOut, 'TIMEOUT')
  assert.deepEqual(out.closed, ['ABORTED', 'CONNECTION_ERROR'])
  return out
}

function run(cmd, args, env = {}) {
  const child = spawnTracked(cmd, args, { cwd: pkg, env: { ...process.env, ...env } })
  child.stdin.end()
  return waitExit(child, 30000, path.basename(cmd))
}

describe('Connection where libuv cannot serve', { skip }, () => {
  test('Node as it is: the event-loop driver', async () => {
    const out = check(await run(process.execPath, ['-e', script(s.port)]))
    assert.equal(out.driver, 'event-loop')
  })

  test('SEMA_NATIVE_LIBUV=off (libuv taken as absent): the tokio driver, same results', async () => {
    const out = check(await run(process.execPath, ['-e', script(s.port)], { SEMA_NATIVE_LIBUV: 'off' }))
    assert.equal(out.driver, 'tokio')
  })

  for (const [host, prelude] of [
    ['Bun', 'globalThis.Bun = {}'],
    ['Deno', "process.versions.deno = '2.9.6'"],
  ]) {
    test(`a host that names itself ${host} gets the tokio driver before any libuv call`, async () => {
      const out = check(await run(process.execPath, ['-e', script(s.port, prelude)]))
      assert.equal(out.driver, 'tokio')
    })
  }

  for (const name of Object.keys(runtimes.RUNTIMES)) {
    const rt = runtimes.find(name)
    // CI installs them (scripts/test-runtimes.js runs before npm test): a skip there would hide a broken install.
    const why = rt.skip && !process.env.CI ? rt.skip : false
    test(`the real ${name} ${rt.version}: the tokio driver, no abort, no hang`, { skip: why }, async () => {
      assert.ok(rt.bin, rt.skip)
      const args = name === 'deno' ? ['eval', '--ext=cjs', script(s.port)] : ['-e', script(s.port)]
      const out = check(await run(rt.bin, args, { DENO_NO_UPDATE_CHECK: '1', NO_COLOR: '1' }))
      assert.equal(out.driver, 'tokio')
    })
  }
})
