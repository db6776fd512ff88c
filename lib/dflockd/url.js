'use strict'
// The one home of the dflockd URL, `dflockd://[token@]host[:port][,host2[:port]…]/key[?limit=N&mode=shared&leaseTtl=S&tls=1&ca=PATH]`:
// its parse (URL
// semantics: the user info ends at the last '@' before the path; a token with '@', '/', ':' or '%' is written
// percent-encoded), its redaction (the token is never shown: every message, `lock.target`, `status().target` and
// the CLI print `dflockd://***@host:port/key`) and the identity of the lock it names. Used by the target API,
// withLock, status and the CLI. Loads the native addon only to check a key, so that the CLI's help and messages
// can redact without it.

const { invalidArgument } = require('../errors')
const { one, unknownName, defaultsOf, kind, SERVER, URL_QUERY } = require('../validate')

/** The port of a URL that names none (dflockd's own: the option table's). */
const DEFAULT_PORT = defaultsOf(SERVER).port

/**
 * `url` with its auth token (the URL's user info) replaced by `***`, as every message, `lock.target` and
 * `status().target` show it: a token must never reach a log. The user info ends at the last `@` before the path, as
 * URL parsing has it (a raw `@` in a token must not leave its tail visible).
 */
function redactTarget(url) {
  return String(url).replace(/^(dflockd:\/\/)[^/?#]*@/i, '$1***@')
}

/**
 * `dflockd://[token@]host[:port][,host2[:port]…]/key[?limit=N&mode=shared&leaseTtl=S&tls=1&ca=PATH]` →
 * `{host, port, key, servers?, auth?, limit?, mode?, leaseTtl?, tls, ca?}` (`ca`: the PEM text of the file, read now):
 * `servers` (a fleet only) every `[host, port]` named, `host`/`port` the one that holds this key. The key is URL-decoded (encode `/`-free specials such as `#` as `%23`); unknown
 * query parameters are rejected.
 */
function parseDflockdUrl(url) {
  if (typeof url !== 'string') throw invalidArgument('dflockd target must be a string')
  const shown = redactTarget(url)
  // A fleet (`host1[:port],host2[:port],…`, the multi-host form of other URL schemes) is not a WHATWG host: the
  // authority is split here (the user info ends at its last '@'), each host parsed as a URL of its own, and the
  // rest parsed with one placeholder host in the list's place.
  let list = null
  const m = /^(dflockd:\/\/)([^/?#]*)(.*)$/is.exec(url)
  if (m) {
    const at = m[2].lastIndexOf('@')
    const hosts = m[2].slice(at + 1)
    if (hosts.includes(',')) {
      list = hosts.split(',').map((h) => serverOf(h, shown))
      url = `${m[1]}${m[2].slice(0, at + 1)}fleet.invalid${m[3]}`
    }
  }
  let u
  try {
    u = new URL(url)
  } catch {
    throw invalidArgument(`invalid dflockd URL: ${shown}`)
  }
  if (u.protocol !== 'dflockd:') throw invalidArgument(`not a dflockd:// URL: ${shown}`)
  if (!u.hostname) throw invalidArgument(`dflockd URL has no host: ${shown}`)
  if (u.hash) throw invalidArgument(`dflockd URL must not have a fragment (encode '#' in the key as %23): ${shown}`)
  const { nativeSync } = require('./common')
  const servers = list ?? [hostPort(u, shown)]
  let key
  let auth
  try {
    key = decodeURIComponent(u.pathname.replace(/^\//, ''))
    if (u.username) auth = decodeURIComponent(u.username) + (u.password ? ':' + decodeURIComponent(u.password) : '')
  } catch {
    throw invalidArgument(`invalid percent-encoding in dflockd URL: ${shown}`)
  }
  if (key === '') throw invalidArgument(`dflockd URL has no key: ${shown}`)
  nativeSync(() => require('../native').dflockdValidateKey(key))
  // Each key lives on the server stableHashShard picks (CRC-32/IEEE, as DistributedLock's `servers` and the Go,
  // Python and TypeScript clients), so every client of the fleet agrees.
  const [host, port] = servers.length === 1 ? servers[0] : servers[require('./common').stableHashShard(key, servers.length)]
  const out = { host, port, key, tls: false }
  if (servers.length > 1) out.servers = servers
  if (auth !== undefined && auth !== '') out.auth = auth
  for (const [name, value] of u.searchParams) {
    if (name === 'limit') out.limit = urlInt(shown, name, value)
    else if (name === 'mode') {
      if (value !== 'shared' && value !== 'exclusive') throw invalidArgument(`invalid mode=${value} in dflockd URL (use shared or exclusive): ${shown}`)
      out.mode = value
    }    else if (name === 'leaseTtl') out.leaseTtl = one('leaseTtl', urlInt(shown, name, value), '?leaseTtl')
    else if (name === 'tls') {
      if (value === '1' || value === 'true' || value === '') out.tls = true
      else if (value === '0' || value === 'false') out.tls = false
      else throw invalidArgument(`invalid tls=${value} in dflockd URL (use 1 or 0): ${shown}`)
    } else if (name === 'ca') out.ca = caFile(shown, value)
    else throw invalidArgument(`${unknownName('parameter', name, URL_QUERY)} in dflockd URL: ${shown}`)
  }
  if (out.ca !== undefined) {
    // A CA means TLS: `?ca=` alone is enough, `?tls=0&ca=` contradicts itself.
    if (u.searchParams.has('tls') && !out.tls) throw invalidArgument(`ca= needs TLS, but the dflockd URL says tls=0: ${shown}`)
    out.tls = true
  }
  return out
}

/** `[host, port]` of a parsed single-host URL (brackets of an IPv6 literal removed, the default port filled in). */
function hostPort(u, shown) {
  const { hostOption } = require('./common')
  const port = u.port === '' ? DEFAULT_PORT : Number(u.port)
  const { min, max } = kind('port')
  if (!Number.isInteger(port) || port < min || port > max) throw invalidArgument(`invalid port in dflockd URL: ${shown}`)
  return Object.freeze([hostOption(u.hostname), port])
}

/** One `host[:port]` of a fleet, parsed as the single-host form parses its host. */
function serverOf(entry, shown) {
  let u
  try {
    u = new URL(`dflockd://${entry}/`)
  } catch {
    throw invalidArgument(`invalid host '${entry}' in the dflockd URL's server list: ${shown}`)
  }
  if (entry === '' || !u.hostname || u.username || u.password) {
    throw invalidArgument(`invalid host '${entry}' in the dflockd URL's server list: ${shown}`)
  }
  return hostPort(u, shown)
}

/** The PEM text of `?ca=<path>` (percent-decoded), read now: an unreadable file is refused here, with its path. */
function caFile(shown, file) {
  if (file === '') throw invalidArgument(`empty ca= in dflockd URL (a path to a PEM file): ${shown}`)
  try {
    return require('node:fs').readFileSync(file, 'utf8')
  } catch (e) {
    throw invalidArgument(`cannot read the CA file ca=${file} of dflockd URL ${shown}: ${e && e.code ? e.code : e}`)
  }
}

function urlInt(shown, name, value) {
  if (!/^\d+$/.test(value)) throw invalidArgument(`invalid ${name}=${value} in dflockd URL: ${shown}`)
  const n = Number(value)
  if (!Number.isSafeInteger(n) || n < 1 || n > require('./common').MAX_TIMEOUT_S) throw invalidArgument(`invalid ${name}=${value} in dflockd URL: ${shown}`)
  return n
}

/** The identity of the lock a parsed URL names (the server that holds its key, and the key; so a fleet URL and the
 * single-host URL of its chosen server name the same lock): what "the same lock" means for release(url),
 * status().isOwnedByCurrentProcess and a nested withLock. */
function targetId(cfg) {
  return `${cfg.host.toLowerCase()}|${cfg.port}|${cfg.key}`
}

module.exports = { DEFAULT_PORT, redactTarget, parseDflockdUrl, targetId }
