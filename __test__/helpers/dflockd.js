'use strict'
// Test helper: real dflockd servers (and a TLS front end) on free loopback ports.
//
//   const d = require('./helpers/dflockd')
//   d.server                      → {kind: 'go'|'python'|'none', version, bin, reason?}  (scripts/dflockd-server.js)
//   d.skipReason()                → false when some server is installed, else why not (never skips in CI: loading
//                                   this helper throws there unless the Go server is installed)
//   d.goOnly()                    → false on the Go server, else 'needs the Go dflockd server: <why>'
//                                   (both fit node:test's `{ skip }` option, which treats null as "skip")
//   const s = await d.startServer({ args: ['--max-locks', '1'] })
//       s.host, s.port, s.kind, s.url(key, query?) → 'dflockd://127.0.0.1:<port>/<key>[?query]'
//       await s.stop()            SIGTERM, then SIGKILL after 3 s; resolves once the process is gone
//       await s.kill('SIGKILL')   signal and wait for exit
//       await s.restart()         same port, same args; resolves once it accepts connections again
//       s.log()                   last ~64 KiB of the server's stdout+stderr (for assertion messages)
//   const s = d.serverFixture({ args, skip })  the one server of a test file: started before its tests (unless `skip`,
//                                 default skipReason()), stopped after them (stopAll); `s` stands for that server
//                                 (s.url, s.host, s.port, s.restart...) once the tests run
//   await d.stopAll()             stops every server, proxy and fake server this process started and removes the
//                                 certificate directories (use in after())
//   const certs = d.makeCerts()   → {dir, caPem, certPem, keyPem, otherCaPem} via the openssl CLI, or
//                                   {skip: reason} when openssl is missing / fails
//   const ss = d.makeSelfSigned()  → {certPem, keyPem, certFile, keyFile}: `openssl req -x509` RSA, its own CA
//   const p = await d.startTlsProxy(s, certs)  TLS (127.0.0.1, SAN localhost + 127.0.0.1) piped to s;
//       p.host, p.port, await p.close()
//   const f = await d.fakeServer(reply)  a scripted TCP server: reply([cmd, key, arg]) → reply line (without \n),
//       or null to stay silent; f.port, f.connections, f.open, f.received (all bytes as text), f.hangUp(line?),
//       await f.close()
//   await d.freePort()            a free loopback TCP port
//   await d.waitForPort(port, {host, timeoutMs, exited})  polls connect() until accepted (bounded, × timeScale())
//   const h = d.holder(url, mode, {timeoutMs})  a child process taking `url` in a mode (helpers/dflockd-shared-child.js):
//       await h.next() → its next line ('held', 'error <type>'), h.unread(), await h.release(), await h.kill()
//
// Servers always bind 127.0.0.1 (the Python server defaults to 0.0.0.0), get `--host 127.0.0.1 --port N` before the
// extra args, and run with the DFLOCKD_* environment (and the Python server's unprefixed variables) removed so a
// developer's settings cannot change a test. Nothing here keeps the test process alive after stopAll().

const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const tls = require('node:tls')
const { readDflockd } = require('../../scripts/dflockd-server')
const assert = require('node:assert/strict')
const u = require('./file-util')

const server = readDflockd()
// CI runs every dflockd test on the Go server: a skip there would hide a missing server, so fail loudly instead.
if (process.env.CI && server.kind !== 'go') {
  throw new Error(`CI needs the Go dflockd server, found ${server.kind}${server.reason ? ` (${server.reason})` : ''}: run \`node scripts/setup.js --with-server\``)
}
const live = new Set()
const tempDirs = []
// Never leave a server running when a test process ends early (failed assertion, crash, forgotten stopAll).
process.once('exit', () => {
  for (const x of live) if (x.proc && x.proc.exitCode === null && x.proc.signalCode === null) x.proc.kill('SIGKILL')
})

function skipReason() {
  return server.kind === 'none' ? `no dflockd server installed: ${server.reason}` : false
}

function goOnly() {
  if (server.kind === 'go') return false
  if (server.kind === 'none') return `needs the Go dflockd server: ${server.reason}`
  const why = /403/.test(server.reason || '') ? 'the Go module proxy refused github.com/mtingers/dflockd (403)' : (server.reason || '').slice(0, 160)
  return `needs the Go dflockd server: only the Python dflockd ${server.version} is installed${why ? ` (${why})` : ''}`
}

function freePort(host = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, host, () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

function tryConnect(host, port) {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port })
    const done = (ok) => {
      sock.destroy()
      resolve(ok)
    }
    sock.setTimeout(500, () => done(false))
    sock.once('connect', () => done(true))
    sock.once('error', () => done(false))
  })
}

/** Polled (a listener opening has no event outside its process); throws at once if `exited()`. */
async function waitForPort(port, { host = '127.0.0.1', timeoutMs = 10000, exited = () => false } = {}) {
  await u.until(
    async () => {
      if (exited()) throw new Error(`server exited before accepting connections on ${host}:${port}`)
      return tryConnect(host, port)
    },
    { timeoutMs, intervalMs: 50, what: `connections accepted on ${host}:${port}` },
  )
}

function cleanEnv() {
  const env = { ...process.env }
  for (const k of Object.keys(env)) {
    if (k.startsWith('DFLOCKD_')) delete env[k]
  }
  for (const k of ['DEFAULT_LEASE_TTL_S', 'LEASE_SWEEP_INTERVAL_S', 'GC_LOOP_SLEEP', 'GC_MAX_UNUSED_TIME', 'MAX_LOCKS']) {
    delete env[k]
  }
  env.PYTHONUNBUFFERED = '1'
  return env
}

/** Starts the installed dflockd on a free loopback port with `args`; resolves once it accepts connections. */
async function startServer({ args = [], port, startTimeoutMs = 15000 } = {}) {
  if (server.kind === 'none') throw new Error(skipReason())
  const host = '127.0.0.1'
  const s = {
    host,
    port: port ?? (await freePort()),
    kind: server.kind,
    version: server.version,
    args,
    proc: null,
    url(key, query) {
      return `dflockd://${host}:${this.port}/${encodeURIComponent(key)}${query ? `?${query}` : ''}`
    },
    log() {
      return output
    },
    async stop() {
      await stopProc('SIGTERM')
    },
    async kill(signal = 'SIGKILL') {
      await stopProc(signal)
    },
    async restart() {
      await stopProc('SIGTERM')
      await launch()
    },
  }
  let output = ''
  let exited = true
  let exitPromise = Promise.resolve()

  async function launch() {
    const child = spawn(server.bin, ['--host', host, '--port', String(s.port), ...args], {
      env: cleanEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    s.proc = child
    exited = false
    const keep = (d) => {
      output = (output + d.toString()).slice(-65536)
    }
    child.stdout.on('data', keep)
    child.stderr.on('data', keep)
    exitPromise = new Promise((resolve) => {
      child.once('exit', () => {
        exited = true
        resolve()
      })
      child.once('error', (e) => {
        output += `\nspawn error: ${e.message}`
        exited = true
        resolve()
      })
    })
    live.add(s)
    try {
      await waitForPort(s.port, { host, timeoutMs: startTimeoutMs, exited: () => exited })
    } catch (e) {
      await stopProc('SIGKILL')
      e.message += `\n--- ${server.bin} output ---\n${output}`
      throw e
    }
  }

  async function stopProc(signal) {
    const child = s.proc
    live.delete(s)
    if (!child || exited) return exitPromise
    child.kill(signal)
    let timer
    const forced = new Promise((resolve) => {
      timer = setTimeout(() => {
        if (!exited) child.kill('SIGKILL')
        resolve()
      }, 3000)
    })
    await Promise.race([exitPromise, forced.then(() => exitPromise)])
    clearTimeout(timer)
  }

  s._close = () => stopProc('SIGKILL')
  await launch()
  return s
}

/** Generates a CA, a server certificate for localhost/127.0.0.1 signed by it, and an unrelated CA. */
function makeCerts() {
  const which = spawnSync('openssl', ['version'], { encoding: 'utf8' })
  if (which.error || which.status !== 0) return { skip: 'the openssl command-line tool is not available' }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sema-native-tls-'))
  tempDirs.push(dir)
  const run = (...a) => {
    const r = spawnSync('openssl', a, { cwd: dir, encoding: 'utf8' })
    if (r.error || r.status !== 0) throw new Error(`openssl ${a.join(' ')} failed: ${r.error ? r.error.message : r.stderr}`)
  }
  try {
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']
    const caExt = ['-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']
    run('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=sema-native test CA', ...caExt)
    run('req', '-x509', ...ec, '-keyout', 'other.key', '-out', 'other.pem', '-days', '2', '-subj', '/CN=unrelated CA', ...caExt)
    run('req', '-new', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost')
    fs.writeFileSync(
      path.join(dir, 'server.ext'),
      'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' +
        'subjectAltName=DNS:localhost,IP:127.0.0.1\n',
    )
    run('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
      '-extfile', 'server.ext', '-out', 'server.pem')
  } catch (e) {
    return { skip: e.message }
  }
  const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8')
  return { dir, caPem: read('ca.pem'), certPem: read('server.pem'), keyPem: read('server.key'), otherCaPem: read('other.pem') }
}

/**
 * The most common self-signed server certificate: RSA, its own CA (OpenSSL marks `req -x509` output CA:TRUE),
 * SAN localhost + 127.0.0.1. → {certPem, keyPem, certFile, keyFile} or {skip: reason}.
 */
function makeSelfSigned(name = 'self') {
  const which = spawnSync('openssl', ['version'], { encoding: 'utf8' })
  if (which.error || which.status !== 0) return { skip: 'the openssl command-line tool is not available' }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sema-native-tls-'))
  tempDirs.push(dir)
  const certFile = path.join(dir, `${name}.pem`)
  const keyFile = path.join(dir, `${name}.key`)
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', keyFile, '-out', certFile], { encoding: 'utf8' })
  if (r.error || r.status !== 0) return { skip: `openssl req -x509 failed: ${r.error ? r.error.message : r.stderr}` }
  return { certFile, keyFile, certPem: fs.readFileSync(certFile, 'utf8'), keyPem: fs.readFileSync(keyFile, 'utf8') }
}

/** A TLS-terminating proxy on a free loopback port in front of `target` ({host, port}). */
async function startTlsProxy(target, certs) {
  const sockets = new Set()
  const srv = tls.createServer({ key: certs.keyPem, cert: certs.certPem }, (client) => {
    const upstream = net.connect({ host: target.host, port: target.port })
    sockets.add(client)
    sockets.add(upstream)
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on('error', end)
    upstream.on('error', end)
    client.on('close', end)
    upstream.on('close', end)
    client.pipe(upstream)
    upstream.pipe(client)
  })
  // Failed handshakes (the plain-client and unknown-CA tests) are expected.
  srv.on('tlsClientError', () => {})
  const port = await freePort()
  await new Promise((resolve, reject) => {
    srv.once('error', reject)
    srv.listen(port, '127.0.0.1', resolve)
  })
  const p = {
    host: '127.0.0.1',
    port,
    async close() {
      live.delete(p)
      for (const s of sockets) s.destroy()
      await new Promise((r) => srv.close(() => r()))
    },
  }
  p._close = p.close
  live.add(p)
  return p
}

/** A TCP server that records what it receives and answers each 3-line request with `reply(lines)`. */
async function fakeServer(reply = () => null) {
  const sockets = new Set()
  const f = {
    host: '127.0.0.1',
    port: 0,
    connections: 0,
    received: '',
    /** Connections open now. */
    get open() {
      return sockets.size
    },
    /** Ends every open connection from the server side, after writing `line` (e.g. 'error', as an idle timeout). */
    hangUp(line) {
      for (const s of sockets) {
        if (line !== undefined) s.write(line + '\n', () => s.destroy())
        else s.destroy()
      }
    },
    async close() {
      live.delete(f)
      for (const s of sockets) s.destroy()
      await new Promise((r) => srv.close(() => r()))
    },
  }
  const srv = net.createServer((sock) => {
    f.connections++
    sockets.add(sock)
    let buf = ''
    const lines = []
    sock.on('data', (d) => {
      const text = d.toString('utf8')
      f.received += text
      buf += text
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        lines.push(buf.slice(0, i))
        buf = buf.slice(i + 1)
      }
      while (lines.length >= 3) {
        const out = reply(lines.splice(0, 3))
        if (out !== null && out !== undefined) sock.write(out + '\n')
      }
    })
    sock.on('error', () => {})
    sock.on('close', () => sockets.delete(sock))
  })
  await new Promise((resolve, reject) => {
    srv.once('error', reject)
    srv.listen(0, '127.0.0.1', resolve)
  })
  f.port = srv.address().port
  f._close = f.close
  live.add(f)
  return f
}

async function stopAll() {
  await Promise.all([...live].map((x) => x._close()))
  for (const dir of tempDirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
}

/**
 * The server of a test file: registers node:test hooks that start it before the file's tests (not when `skip`, a
 * skip reason) and stop every server after them. Returns a stand-in for it, usable once the tests run.
 */
function serverFixture({ args = [], skip = skipReason() } = {}) {
  const { before, after } = require('node:test')
  let started = null
  before(async () => {
    if (!skip) started = await startServer({ args })
  })
  after(() => stopAll())
  return new Proxy(
    {},
    {
      get(_, key) {
        if (!started) throw new Error(`the dflockd server fixture is not running (${skip || 'read before the tests ran'})`)
        const value = started[key]
        return typeof value === 'function' ? value.bind(started) : value
      },
    },
  )
}

/**
 * A child process (helpers/dflockd-shared-child.js) acquiring the dflockd target `url` in `mode` ('shared',
 * 'exclusive', or 'none': the plain mutex) with a `timeoutMs` acquire timeout. Returns at once `{ child, out, next(),
 * unread(), release(), kill() }`: `next()` resolves its next stdout line (`held`, or `error <type>`) and rejects if
 * none comes within the acquire's timeout and 10 s more (× timeScale()), or its stdout ends first; `unread()` is how
 * many lines it printed that nobody read; `release()` releases and asserts it said so; `kill(signal)` signals it by
 * pid (u.signalChild(): the child ends when its stdin ends, which a runtime's ChildProcess.kill() may close first) and
 * resolves its exit (a SIGKILL is a crash: the server frees its lock by disconnect).
 */
function holder(url, mode, { timeoutMs = 30000 } = {}) {
  const child = u.spawnNode('dflockd-shared-child.js', [url, mode, timeoutMs])
  const out = u.lines(child)
  return {
    child,
    out,
    next: () => out.next(undefined, timeoutMs + 10000),
    unread: out.unread,
    async release() {
      child.stdin.write('release\n')
      assert.equal(await out.next(), 'released')
    },
    kill(signal = 'SIGKILL') {
      u.signalChild(child, signal)
      return child.exited
    },
  }
}

module.exports = { holder, server, serverFixture, skipReason, goOnly, freePort, waitForPort, startServer, makeCerts, makeSelfSigned, startTlsProxy, fakeServer, stopAll }
