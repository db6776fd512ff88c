'use strict'
// The option contract, walked entry point by entry point: a misspelt name, a wrong type and a wrong unit each give
// INVALID_ARGUMENT naming the option (a failed result where the function returns one, a LockError where it throws),
// and an option of the other backend is refused, not dropped. Nothing is sent or written: every dflockd target points
// at a closed port (a call that got past the check would answer CONNECTION_ERROR), and no lock file is left behind.

const { test, describe } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const net = require('node:net')
const path = require('node:path')
const u = require('./helpers/file-util')
const sema = require('..')

const tmp = u.testDir('options-contract-', { name: 'options-contract' })

/** A loopback port with nothing listening on it. */
async function closedPort() {
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** Runs `call` and returns the coded error it produced, as a result, a rejection or a throw. */
async function codedError(call) {
  try {
    const r = await call()
    assert.equal(r && r.ok, false, `expected a failure, got ${JSON.stringify(r)}`)
    return { code: r.error.type, message: r.error.message }
  } catch (e) {
    assert.ok(e instanceof sema.LockError, `expected a LockError, got ${e}`)
    return { code: e.code, message: e.message }
  }
}

describe('every entry point refuses a misspelt name, a wrong type and a wrong unit', async () => {
  const port = await closedPort()
  const file = () => tmp.fresh('c')
  const url = `dflockd://127.0.0.1:${port}/contract`
  // [entry point, call with options] — each called with the bad options below.
  const entries = [
    ['acquire(file)', (o) => sema.acquire(file(), o)],
    ['tryAcquire(file)', (o) => sema.tryAcquire(file(), o)],
    ['withLock(file)', (o) => sema.withLock(file(), () => 'ran', o)],
    ['status(file)', (o) => sema.status(file(), o)],
    ['acquire(dflockd)', (o) => sema.acquire(url, o)],
    ['tryAcquire(dflockd)', (o) => sema.tryAcquire(url, o)],
    ['withLock(dflockd)', (o) => sema.withLock(url, () => 'ran', o)],
  ]
  const cases = [
    { what: 'misspelt name', options: { timeOut: 300 }, message: /unknown option 'timeOut' \(did you mean 'timeout'\?\)/ },
    { what: 'misspelt name', options: { staleTimout: 5 }, message: /unknown option 'staleTimout' \(did you mean 'staleTimeout'\?\)/ },
    { what: 'wrong type', options: { timeout: '5s' }, message: /timeout must be a number of milliseconds/ },
  ]
  for (const [name, call] of entries) {
    for (const c of cases) {
      if (name.startsWith('status') && c.options.timeout !== undefined) continue // status has no timeout
      if (name.startsWith('status') && c.options.timeOut !== undefined) {
        test(`${name}: ${c.what} ${JSON.stringify(c.options)}`, async () => {
          const e = await codedError(() => call(c.options))
          assert.equal(e.code, 'INVALID_ARGUMENT')
          assert.match(e.message, /unknown option 'timeOut'/)
        })
        continue
      }
      test(`${name}: ${c.what} ${JSON.stringify(c.options)}`, async () => {
        const e = await codedError(() => call(c.options))
        assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
        assert.match(e.message, c.message)
      })
    }
  }

  test('release: a misspelt name and a wrong type', async () => {
    for (const [options, message] of [
      [{ forse: true }, /unknown option 'forse' \(did you mean 'force'\?\)/],
      [{ force: 'yes' }, /force must be true or false/],
    ]) {
      const r = await sema.release(file(), options)
      assert.equal(r.ok, false)
      assert.equal(r.error.type, 'INVALID_ARGUMENT')
      assert.match(r.error.message, message)
    }
  })

  test('leaseTtl in milliseconds by habit is refused with its unit named', async () => {
    for (const call of [(o) => sema.acquire(url, o), (o) => sema.tryAcquire(url, o), (o) => sema.withLock(url, () => 'ran', o)]) {
      const e = await codedError(() => call({ leaseTtl: 30000 }))
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.match(e.message, /leaseTtl is in seconds: 30000 s is over 8 hours/)
      assert.match(e.message, /leaseTtl: 30\b/)
    }
    const e = await codedError(() => sema.acquire(url, { leaseTTL: 5 }))
    assert.match(e.message, /unknown option 'leaseTTL' \(did you mean 'leaseTtl'\?\)/)
  })

  test("an option of the other backend is refused, not dropped (a file given leaseTtl: 5 has no lease)", async () => {
    const f = file()
    for (const call of [(o) => sema.acquire(f, o), (o) => sema.tryAcquire(f, o), (o) => sema.withLock(f, () => 'ran', o)]) {
      const e = await codedError(() => call({ leaseTtl: 5 }))
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.match(e.message, /option 'leaseTtl' applies to dflockd:\/\/ targets only/)
    }
    assert.equal(fs.existsSync(f), false, 'no lock file was written')
    for (const [options, key] of [
      [{ staleTimeout: 1000 }, 'staleTimeout'],
      [{ fsync: false }, 'fsync'],
      [{ pid: 1 }, 'pid'],
    ]) {
      const e = await codedError(() => sema.tryAcquire(url, options))
      assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
      assert.match(e.message, new RegExp(`option '${key}' applies to file targets only`))
    }
    const s = await codedError(() => sema.status(url, { staleTimeout: 5 }))
    assert.match(s.message, /option 'staleTimeout' applies to file targets only/)
    const r = await sema.release(url, { force: true })
    assert.equal(r.error.type, 'INVALID_ARGUMENT')
    assert.match(r.error.message, /option 'force' applies to file targets only/)
  })

  test('null and undefined still mean the default, also for the other backend', async () => {
    const f = file()
    const r = await sema.tryAcquire(f, { limit: undefined, leaseTtl: null, timeout: undefined })
    assert.equal(r.ok, true, JSON.stringify(r.error))
    assert.equal(await r.value.release(), true)
  })

  test('Semaphore: config and acquire options', async () => {
    assert.throws(() => new sema.Semaphore(file(), { stale: 5 }), (e) => e.code === 'INVALID_ARGUMENT' && /unknown config option 'stale' \(did you mean 'staleTimeout'\?\)/.test(e.message))
    assert.throws(() => new sema.Semaphore(file(), { retryInterval: '1s' }), (e) => e.code === 'INVALID_ARGUMENT' && /config\.retryInterval must be/.test(e.message))
    const s = new sema.Semaphore(file())
    const r = await s.acquire({ timout: 5 })
    assert.equal(r.ok, false)
    assert.equal(r.error.type, 'INVALID_ARGUMENT')
    assert.match(r.error.message, /unknown option 'timout' \(did you mean 'timeout'\?\)/)
    // A LockInfo is data, not options: its timestamp (and any other field) is accepted.
    const w = s.tryAcquireWithInfo({ pid: process.pid, timestamp: 1, tag: 't', extra: true })
    assert.equal(w.ok, true, JSON.stringify(w.error))
    assert.equal(s.release().ok, true)
  })
})

describe('the dflockd classes and functions refuse the same mistakes (thrown, dflockd-client style)', () => {
  const bad = (fn, message) => assert.throws(fn, (e) => e instanceof sema.LockError && e.code === 'INVALID_ARGUMENT' && message.test(e.message))
  test('DistributedLock and DistributedSemaphore: a misspelt name, a wrong type, a wrong unit', () => {
    bad(() => new sema.DistributedLock({ key: 'k', acquireTimeoutMs: 5 }), /unknown option 'acquireTimeoutMs' \(did you mean 'acquireTimeoutS'\?\)/)
    bad(() => new sema.DistributedLock({ key: 'k', renewRatio: '0.5' }), /renewRatio must be a number between 0 and 1/)
    bad(() => new sema.DistributedLock({ key: 'k', leaseTtlS: 30000 }), /leaseTtlS is in seconds: 30000 s is over 8 hours/)
    bad(() => new sema.DistributedSemaphore({ key: 'k', limit: 2, lmit: 3 }), /unknown option 'lmit' \(did you mean 'limit'\?\)/)
    bad(() => new sema.DistributedSemaphore({ key: 'k', limit: 2, leaseTtlS: 7200 }), /leaseTtlS is in seconds/)
  })
  test('Connection.connect and stats: a misspelt name and a wrong type, before any connection', async () => {
    const port = await closedPort()
    await assert.rejects(sema.Connection.connect({ port, socketTimeout: 5 }), (e) => e.code === 'INVALID_ARGUMENT' && /did you mean 'socketTimeoutMs'/.test(e.message))
    await assert.rejects(sema.stats({ port, connectTimeoutMs: '5' }), (e) => e.code === 'INVALID_ARGUMENT' && /connectTimeoutMs must be a positive number of milliseconds/.test(e.message))
  })
  test('a dflockd URL: an unknown parameter and ?leaseTtl= in milliseconds', async () => {
    const port = await closedPort()
    for (const [query, message] of [
      ['leaseTTL=5', /unknown parameter 'leaseTTL'/],
      ['leaseTtl=30000', /\?leaseTtl is in seconds: 30000 s is over 8 hours.*\?leaseTtl=30/],
    ]) {
      const r = await sema.tryAcquire(`dflockd://127.0.0.1:${port}/k?${query}`)
      assert.equal(r.error.type, 'INVALID_ARGUMENT')
      assert.match(r.error.message, message)
    }
  })
})

// ───────────────────────────── walked from the native table ─────────────────────────────
// Every option of every entry point of the core's table (crates/sema-core/src/options.rs, read through the binding's
// optionRules()), so an option added there is tested here without a line of its own.

const { RULES } = require('../lib/validate')

/** A name one typo away from `name` that the nearest-name rule must bring back to it. */
function misspelt(name) {
  return name === name.toLowerCase() ? `${name}x` : name.toLowerCase()
}

/** A value of the wrong type for `kind` (a string where a number is meant, and so on). */
function wrongType(kind) {
  switch (kind.check) {
    case 'number':
    case 'heartbeat':
      return kind.unit === 'ms' ? '5s' : kind.unit === 's' ? '5000ms' : '5'
    case 'boolean':
      return 'yes'
    case 'string':
    case 'nonEmptyString':
      return 5
    case 'oneOf':
      return kind.values.join('|')
    case 'tls':
      return 'on'
    case 'servers':
      return '127.0.0.1:6388'
    default:
      return 'x' // function, signal
  }
}

/** Values out of range for a number kind: below its minimum, above its maximum, a fraction for an integer. */
function outOfRange(kind) {
  if (kind.check !== 'number') return []
  const out = []
  if (kind.min !== null) out.push(kind.minExclusive ? kind.min : kind.min - 1)
  if (kind.max !== null) out.push(kind.maxExclusive ? kind.max : kind.max + 1)
  if (kind.integer) out.push((kind.min ?? 0) + 1.5)
  if (!kind.infinite) out.push(Infinity)
  return out.filter((v) => !(kind.name === 'timeout' && v === Infinity))
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

describe('every option of the table, at every entry point', async () => {
  const port = await closedPort()
  const url = `dflockd://127.0.0.1:${port}/contract`
  const file = () => tmp.fresh('t')
  // [entry point of the table, label, what the messages call the object, call(options)]
  const walks = [
    ['ACQUIRE', 'acquire(file)', 'options', (o) => sema.acquire(file(), o)],
    ['ACQUIRE', 'tryAcquire(dflockd)', 'options', (o) => sema.tryAcquire(url, o)],
    ['ACQUIRE', 'withLock(file)', 'options', (o) => sema.withLock(file(), () => 'ran', o)],
    ['RELEASE', 'release(file)', 'options', (o) => sema.release(file(), o)],
    ['STATUS', 'status(file)', 'options', (o) => sema.status(file(), o)],
    ['WAIT', 'wait(file)', 'options', (o) => sema.wait(file(), o)],
    ['CONFIG', 'new Semaphore', 'config', (o) => new sema.Semaphore(file(), o)],
    ['SEMATS_ACQUIRE', 'Semaphore#acquire', 'options', (o) => new sema.Semaphore(file()).acquire(o)],
    ['SERVER', 'Connection.connect', 'options', (o) => sema.Connection.connect({ port, ...o })],
    ['SERVER', 'stats', 'options', (o) => sema.stats({ port, ...o })],
    ['DISTRIBUTED_LOCK', 'new DistributedLock', 'options', (o) => new sema.DistributedLock({ key: 'k', port, ...o })],
    ['DISTRIBUTED_SEMAPHORE', 'new DistributedSemaphore', 'options', (o) => new sema.DistributedSemaphore({ key: 'k', limit: 2, port, ...o })],
    ['DISTRIBUTED_ACQUIRE', 'DistributedLock#acquire', 'options', (o) => new sema.DistributedLock({ key: 'k', port }).acquire(o)],
    ['DISTRIBUTED_ACQUIRE', 'DistributedSemaphore#enqueue', 'options', (o) => new sema.DistributedSemaphore({ key: 'k', limit: 2, port }).enqueue(o)],
    ['DISTRIBUTED_WAIT', 'DistributedLock#wait', 'options', (o) => new sema.DistributedLock({ key: 'k', port }).wait(1, o)],
  ]
  for (const [entry, label, what, call] of walks) {
    const prefix = what === 'options' ? '' : `${what}.`
    for (const rule of RULES.entryPoints[entry].options) {
      const kind = RULES.kinds[rule.kind]
      test(`${label}: ${rule.name} (${kind.name}${kind.unit ? `, ${kind.unit}` : ''})`, async () => {
        const bad = misspelt(rule.name)
        let e = await codedError(() => call({ [bad]: 1 }))
        assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
        const kindOf = what === 'options' ? 'option' : `${what} option`
        assert.match(e.message, new RegExp(`unknown ${kindOf} '${escape(bad)}' \\(did you mean '${escape(rule.name)}'\\?\\)`))

        const wrong = wrongType(kind)
        e = await codedError(() => call({ [rule.name]: wrong }))
        assert.equal(e.code, 'INVALID_ARGUMENT', e.message)
        assert.match(e.message, new RegExp(`^${escape(prefix + rule.name)} must be ${escape(kind.expected)}, got `))

        for (const v of outOfRange(kind)) {
          e = await codedError(() => call({ [rule.name]: v }))
          assert.equal(e.code, 'INVALID_ARGUMENT', `${v}: ${e.message}`)
          assert.match(e.message, new RegExp(`^${escape(prefix + rule.name)} (must be|is in seconds)`), `${v}`)
        }
        if (kind.name === 'servers') {
          for (const [v, message] of [
            [[['127.0.0.1', 0]], /^servers\[0\]\[1\] must be a port number/],
            [[['127.0.0.1', 6388], ['', 1]], /^servers\[1\]\[0\] must be a non-empty string/],
            [[['127.0.0.1']], /^servers\[0\] must be a \[host, port\] pair/],
          ]) {
            e = await codedError(() => call({ [rule.name]: v }))
            assert.equal(e.code, 'INVALID_ARGUMENT')
            assert.match(e.message, message)
          }
        }
        if (kind.name === 'leaseSeconds') {
          // The wrong unit: milliseconds by habit, refused with the unit named and what was meant.
          e = await codedError(() => call({ [rule.name]: 30000 }))
          assert.match(e.message, new RegExp(`^${escape(rule.name)} is in seconds: 30000 s is over 8 hours; the most is ${RULES.maxLeaseTtlS} \\(1 hour\\)\\. For 30000 ms, write ${escape(rule.name)}: 30$`))
        }
      })
    }
    if (RULES.entryPoints[entry].options.some((r) => r.required)) {
      test(`${label}: a required option left out`, async () => {
        for (const rule of RULES.entryPoints[entry].options.filter((r) => r.required)) {
          const e = await codedError(() => (entry === 'DISTRIBUTED_SEMAPHORE' ? new sema.DistributedSemaphore({ key: 'k', limit: 2, [rule.name]: undefined }) : new sema.DistributedLock({ key: undefined })))
          assert.equal(e.code, 'INVALID_ARGUMENT')
          assert.match(e.message, new RegExp(`^${escape(rule.name)} must be ${escape(RULES.kinds[rule.kind].expected)}, got undefined$`))
        }
      })
    }
  }

  test('the URL query: a misspelt parameter, a wrong type and a wrong unit for each', async () => {
    for (const rule of RULES.entryPoints.URL_QUERY.options) {
      const kind = RULES.kinds[rule.kind]
      const bad = misspelt(rule.name)
      let r = await sema.tryAcquire(`${url}?${bad}=1`)
      assert.equal(r.error.type, 'INVALID_ARGUMENT')
      assert.match(r.error.message, new RegExp(`unknown parameter '${escape(bad)}' \\(did you mean '${escape(rule.name)}'\\?\\)`))
      const wrong = kind.name === 'nonEmptyString' ? '' : 'abc'
      r = await sema.tryAcquire(`${url}?${rule.name}=${wrong}`)
      assert.equal(r.error.type, 'INVALID_ARGUMENT', `${rule.name}=${wrong}: ${r.error.message}`)
      assert.match(r.error.message, new RegExp(`\\b${escape(rule.name)}=`))
    }
    const r = await sema.tryAcquire(`${url}?leaseTtl=30000`)
    assert.match(r.error.message, /^\?leaseTtl is in seconds: 30000 s is over 8 hours; .*write \?leaseTtl=30$/)
  })

  test('the low-level Connection methods take a lease by the same rule', async () => {
    // The rule is checked before the connection is used: a closed port is never reached.
    const { one } = require('../lib/validate')
    assert.throws(() => one('leaseTtl', 3601, 'leaseTtlS'), (e) => e.code === 'INVALID_ARGUMENT' && /^leaseTtlS is in seconds: 3601 s is over 1 hour/.test(e.message))
    assert.equal(one('leaseTtl', RULES.maxLeaseTtlS, 'leaseTtlS'), RULES.maxLeaseTtlS)
  })
})

describe('the CLI: every value flag of the table, misspelt, of the wrong type and in the wrong unit', () => {
  const { execFile } = require('node:child_process')
  const bin = path.join(__dirname, '..', 'bin', 'sema-native.js')
  /** Runs the CLI; resolves {code, stdout, stderr}. */
  const cli = (args) =>
    new Promise((resolve) => {
      execFile(process.execPath, [bin, ...args], { encoding: 'utf8' }, (e, stdout, stderr) => resolve({ code: e ? e.code : 0, stdout, stderr }))
    })
  // The command that takes each flag (run prints no JSON: its stdout is the command's).
  const command = { timeout: 'acquire', tag: 'acquire', pid: 'acquire', stale: 'acquire', ca: 'status', limit: 'acquire', mode: 'run' }
  // Text that is not a value of the flag's kind, and text in a unit the flag does not have.
  const wrongText = { timeout: ['soon', '5x'], pid: ['abc', '1.5'], stale: ['abc', '1d'], ca: [''], limit: ['two', '0'], mode: ['both'] }
  /** The coded error of a failed CLI call: its JSON with --json, else its stderr (exit code 2 either way). */
  async function usage(flagCommand, args) {
    const json = flagCommand !== 'run'
    const r = await cli([flagCommand, tmp.fresh('cli'), ...args, ...(json ? ['--json'] : ['--', process.execPath, '-e', ''])])
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stdout}${r.stderr}`)
    if (!json) return { code: 'INVALID_ARGUMENT', message: r.stderr }
    const out = JSON.parse(r.stdout)
    return { code: out.error.type, message: out.error.message }
  }
  for (const rule of RULES.entryPoints.CLI_FLAGS.options) {
    test(`--${rule.name}`, async () => {
      const on = command[rule.name]
      assert.ok(on, `a command that takes --${rule.name}`)
      const bad = misspelt(rule.name)
      let e = await usage(on, [`--${bad}`, 'x'])
      assert.equal(e.code, 'INVALID_ARGUMENT')
      assert.match(e.message, new RegExp(`unknown option: --${bad} \\(did you mean --${rule.name}\\?\\)`))
      for (const text of wrongText[rule.name] ?? []) {
        e = await usage(on, [`--${rule.name}=${text}`])
        assert.equal(e.code, 'INVALID_ARGUMENT')
        assert.match(e.message, new RegExp(`\\b${rule.name}\\b`), `--${rule.name}=${text}: ${e.message}`)
      }
    })
  }
})

describe('the native side refuses what the table refuses (a direct call, past the JS checks)', () => {
  const native = require('../lib/native')
  const prim = { key: 'k', limit: 1, acquireTimeoutS: 1, renewRatio: 0.5, server: { host: '127.0.0.1', port: 6388 } }
  test(`leaseTtlS: ${RULES.maxLeaseTtlS} is accepted, one more is refused with the unit named`, () => {
    native.dflockdValidateOptions({ ...prim, leaseTtlS: RULES.maxLeaseTtlS })
    assert.throws(
      () => native.dflockdValidateOptions({ ...prim, leaseTtlS: RULES.maxLeaseTtlS + 1 }),
      (e) => e.code === 'INVALID_ARGUMENT' && /^leaseTtlS is in seconds: 3601 s is over 1 hour; the most is 3600/.test(e.message),
    )
  })
  test('the defaults the JS layer uses are the table\'s', () => {
    const { DEFAULT_CONFIG } = require('../lib/file/engine')
    const common = require('../lib/dflockd/common')
    const d = Object.fromEntries(RULES.entryPoints.CONFIG.options.filter((r) => r.default != null).map((r) => [r.name, r.default]))
    for (const [k, v] of Object.entries(d)) assert.equal(DEFAULT_CONFIG[k], v, k)
    const l = Object.fromEntries(RULES.entryPoints.DISTRIBUTED_LOCK.options.filter((r) => r.default != null).map((r) => [r.name, r.default]))
    assert.equal(common.DEFAULT_ACQUIRE_TIMEOUT_S, l.acquireTimeoutS)
    assert.equal(common.DEFAULT_RENEW_RATIO, l.renewRatio)
    assert.equal(common.DEFAULT_HOST, l.host)
    assert.equal(common.DEFAULT_PORT, l.port)
    const lock = new sema.DistributedLock({ key: 'k' })
    assert.equal(lock.acquireTimeoutS, l.acquireTimeoutS)
    assert.deepEqual(lock.servers, [[l.host, l.port]])
  })
})

test("index.d.ts quotes each of the table's defaults where it documents the option", () => {
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')
  /** The doc comment of `name` in interface `iface` (following a `{@link Other.name}`), or '' when it has none. */
  function docOf(iface, name) {
    const body = new RegExp(`export interface ${iface}\\b[^{]*\\{([\\s\\S]*?)\\n\\}`).exec(dts)
    assert.ok(body, `interface ${iface} in index.d.ts`)
    const m = new RegExp(`(/\\*\\*(?:(?!\\*/)[\\s\\S])*\\*/)\\s*\\n\\s*${name}\\?:`).exec(body[1])
    if (!m) return ''
    const link = /\{@link (\w+)\.(\w+)\}/.exec(m[1])
    return link ? docOf(link[1], link[2]) : m[1]
  }
  const shown = (v) => (typeof v === 'number' ? `(${v}|${v.toLocaleString('en').replace(/,/g, '_')})` : typeof v === 'string' ? escape(v) : String(v))
  const interfaces = { CONFIG: 'SemaphoreConfig', ACQUIRE: 'AcquireOptions', DISTRIBUTED_LOCK: 'DistributedLockOptions' }
  let checked = 0
  for (const [entry, iface] of Object.entries(interfaces)) {
    for (const rule of RULES.entryPoints[entry].options) {
      if (rule.default === null || rule.default === undefined) continue
      if (entry === 'DISTRIBUTED_LOCK' && (rule.name === 'host' || rule.name === 'port')) continue // in `servers`' default
      const doc = docOf(iface, rule.name)
      assert.match(doc, new RegExp(`[Dd]efault\\b[^.]*?(?<![\\d_])${shown(rule.default)}(?![\\d_])`), `${iface}.${rule.name}: default ${rule.default}`)
      checked++
    }
  }
  const l = Object.fromEntries(RULES.entryPoints.DISTRIBUTED_LOCK.options.map((r) => [r.name, r.default]))
  assert.match(docOf('DistributedLockOptions', 'servers'), new RegExp(`Default \`\\[\\["${escape(l.host)}", ${l.port}\\]\\]\``))
  assert.match(dts, new RegExp(`connect to a dflockd server \\(\`${escape(l.host)}:${l.port}\` by default\\)`))
  assert.match(dts, new RegExp(`whole seconds, 1 to ${RULES.maxLeaseTtlS} `))
  assert.ok(checked >= 15, `${checked} defaults checked`)
})

test('index.d.ts declares exactly the options of the table, interface by interface', () => {
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')
  /** The property names of `iface` (and of the interface it extends). */
  function props(iface) {
    const m = new RegExp(`export interface ${iface}\\b(?: extends (\\w+))?[^{]*\\{([\\s\\S]*?)\\n\\}`).exec(dts)
    assert.ok(m, iface)
    const own = [...m[2].matchAll(/^ {2}(\w+)\??:/gm)].map((x) => x[1])
    return [...(m[1] ? props(m[1]) : []), ...own]
  }
  for (const [entry, iface] of Object.entries({
    ACQUIRE: 'AcquireOptions',
    STATUS: 'StatusOptions',
    RELEASE: 'ReleaseOptions',
    WAIT: 'WaitOptions',
    CONFIG: 'SemaphoreConfig',
    SERVER: 'ConnectionOptions',
    DISTRIBUTED_LOCK: 'DistributedLockOptions',
    DISTRIBUTED_SEMAPHORE: 'DistributedSemaphoreOptions',
  })) {
    const table = RULES.entryPoints[entry].options.map((r) => r.name)
    assert.deepEqual([...new Set(props(iface))].sort(), table.sort(), `${iface} and the table's ${entry}`)
  }
})

test('the README sentence on option checking names what is checked', () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')
  assert.match(readme, /unknown option/i)
  assert.match(readme.replace(/\s+/g, ' '), new RegExp(`\`leaseTtl\` is in seconds, 1 to ${RULES.maxLeaseTtlS}:`))
})
