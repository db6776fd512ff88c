'use strict'
// Nothing in the dflockd client keeps Node alive: child processes that acquire, release / close, or hold a
// renewing lock and then close, exit on their own.
const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('node:child_process')
const path = require('node:path')
const d = require('./helpers/dflockd')
const u = require('./helpers/file-util')

const skip = d.skipReason()
const pkg = path.resolve(__dirname, '..')
const s = d.serverFixture({ skip })

/** Runs `code` in a fresh `node`; resolves {code, signal, stdout, stderr, ms}; kills it after `boundMs`. */
function runChild(code, boundMs) {
  return new Promise((resolve) => {
    const t0 = Date.now()
    const child = spawn(process.execPath, ['-e', code], { cwd: pkg, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (b) => (stdout += b))
    child.stderr.on('data', (b) => (stderr += b))
    let killed = false
    const timer = setTimeout(() => {
      killed = true
      child.kill('SIGKILL')
    }, u.scaled(boundMs))
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, killed, stdout, stderr, ms: Date.now() - t0 })
    })
  })
}

const prelude = (port) => `
  const { DistributedLock, Connection, stats } = require(${JSON.stringify(pkg)})
  const { acquireTarget } = require(${JSON.stringify(path.join(pkg, 'lib/dflockd'))})
  const servers = [['127.0.0.1', ${port}]]
  const fail = (e) => { console.error(e && e.stack || e); process.exit(3) }
`

describe('process exit', { skip }, () => {
  test('acquire, release, close → exits 0 on its own', async () => {
    const r = await runChild(`${prelude(s.port)}
      ;(async () => {
        const l = new DistributedLock({ key: 'exit-a', servers })
        if (!(await l.acquire())) fail('not acquired')
        await l.release()
        l.close()
        const c = await Connection.connect({ host: '127.0.0.1', port: ${s.port} })
        const g = await c.acquire('exit-a2', 0, 5)
        await c.release('exit-a2', g.token)
        c.close()
        const t = await acquireTarget('dflockd://127.0.0.1:${s.port}/exit-a3', {}, { wait: true })
        if (!t.ok || !(await t.value.release())) fail(JSON.stringify(t))
        console.log('done')
      })().catch(fail)`, 15000)
    assert.equal(r.killed, false, `child still running after 15 s\n${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'done')
  })

  test('acquire, release without close() → the kept idle connection does not keep the process alive', async () => {
    const r = await runChild(`${prelude(s.port)}
      ;(async () => {
        const l = new DistributedLock({ key: 'exit-k', servers, onLockLost: () => fail('lost') })
        for (let i = 0; i < 2; i++) {
          if (!(await l.acquire())) fail('not acquired')
          await l.release()
        }
        console.log('released')
      })().catch(fail)`, 15000)
    assert.equal(r.killed, false, `child still running after 15 s\n${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'released')
    assert.ok(r.ms < u.scaled(10000), `took ${r.ms} ms`)
  })

  test('Connection: a pending request keeps the process alive until its reply; idle connections left open do not', async () => {
    const r = await runChild(`${prelude(s.port)}
      ;(async () => {
        const a = await Connection.connect({ host: '127.0.0.1', port: ${s.port} })
        // Kept reachable: a Connection collected by the GC closes its socket, and the server would grant b.
        globalThis.a = a
        const b = await Connection.connect({ host: '127.0.0.1', port: ${s.port} })
        await a.acquire('exit-pending', 0, 10)
        // Nothing else is pending: only b's request (the server answers 'timeout' after 1 s) keeps the
        // process alive; neither connection is ever closed.
        b.acquire('exit-pending', 1, 10).then(
          () => fail('acquired a held lock'),
          (e) => console.log(e.code),
        )
      })().catch(fail)`, 15000)
    assert.equal(r.killed, false, `child still running after 15 s\n${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'TIMEOUT')
    assert.ok(r.ms >= 1000, `exited after ${r.ms} ms, before the pending reply`)
  })

  test('holds a renewing lock, then close() → exits', async () => {
    const r = await runChild(`${prelude(s.port)}
      ;(async () => {
        const l = new DistributedLock({ key: 'exit-b', servers, leaseTtlS: 1, onLockLost: () => fail('lost') })
        if (!(await l.acquire())) fail('not acquired')
        const t = await acquireTarget('dflockd://127.0.0.1:${s.port}/exit-b2?leaseTtl=1', {}, { wait: true })
        if (!t.ok) fail(JSON.stringify(t))
        // keep it across several renewals; this timer is the only thing that should keep the process alive
        setTimeout(() => {
          l.close()
          t.value.release().then(() => console.log('closed'), fail)
        }, 2500)
      })().catch(fail)`, 15000)
    assert.equal(r.killed, false, `child still running after 15 s\n${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'closed')
    assert.ok(r.ms >= 2500)
  })

  test('a held lock that is never released does not keep the process alive (the server releases on exit)', async () => {
    const r = await runChild(`${prelude(s.port)}
      ;(async () => {
        const l = new DistributedLock({ key: 'exit-c', servers, leaseTtlS: 30 })
        if (!(await l.acquire())) fail('not acquired')
        console.log('holding')
      })().catch(fail)`, 15000)
    assert.equal(r.killed, false, `child still running after 15 s\n${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    const { DistributedLock } = require('..')
    const again = new DistributedLock({ key: 'exit-c', servers: [[s.host, s.port]], acquireTimeoutS: 5 })
    assert.equal(await again.acquire(), true)
    again.close()
  })
})
