'use strict'
// The dflockd URL, `dflockd://[token@]host[:port][,host2[:port]…]/key[?limit=N&mode=shared&leaseTtl=S&tls=1&ca=PATH]`,
// for the JS layer: conversions of the core's one parser, "is this dflockd?" and redaction
// (crates/sema-core/src/dflockd/target.rs: the scheme in any case, the user info up to its last '@', a token with
// '@', '/', ':' or '%' written percent-encoded; the token is never shown: every message, `lock.target`,
// `status().target` and the CLI print `dflockd://***@host:port/key`), the meaning of the query's parameters (the
// option table's) and the identity of the lock a URL names.

const { invalidArgument } = require('../errors')
const { one, unknownName, defaultsOf, SERVER, URL_QUERY } = require('../validate')

/** The port of a URL that names none (dflockd's own: the option table's). */
const DEFAULT_PORT = defaultsOf(SERVER).port

/**
 * `text` with the auth token of every dflockd URL in it (the URL's user info, up to its last `@`) replaced by `***`,
 * as every message, `lock.target` and `status().target` show it: a token must never reach a log. The rule is the
 * core's (`sema_core::dflockd::target::redact`), the one redaction of the package; LockError's constructor passes
 * every message through it. Without the addon (the CLI's help and load errors) a dflockd URL is hidden whole.
 */
function redactTarget(text) {
  text = String(text)
  if (!/dflockd:/i.test(text)) return text
  let native
  try {
    native = require('../native')
  } catch {
    return text.replace(/dflockd:[^\s'"]*/gi, 'dflockd:<target hidden>')
  }
  return native.dflockdRedact(text)
}

/** Whether `s` is a dflockd target: it starts with `dflockd://` in any case (the core's answer). */
function isDflockdTarget(s) {
  return typeof s === 'string' && /^dflockd:/i.test(s) && require('../native').dflockdIsTarget(s)
}

/**
 * `dflockd://[token@]host[:port][,host2[:port]…]/key[?limit=N&mode=shared&leaseTtl=S&tls=1&ca=PATH]` →
 * `{host, port, key, servers?, auth?, limit?, mode?, leaseTtl?, tls, ca?}` (`ca`: the PEM text of the file, read now):
 * `servers` (a fleet only) every `[host, port]` named, `host`/`port` the one that holds this key. The parse (scheme
 * in any case, user info, servers, key, the key's server in a fleet) is the core's
 * (`sema_core::dflockd::target::parse`); here the query's pairs get their meaning from the option table. The key is
 * URL-decoded (encode `#` as %23); unknown query parameters are rejected.
 */
function parseDflockdUrl(url) {
  if (typeof url !== 'string') throw invalidArgument('dflockd target must be a string')
  const { nativeSync } = require('./common')
  const t = nativeSync(() => require('../native').dflockdParseTarget(url))
  const shown = redactTarget(url)
  const out = { host: t.host, port: t.port, key: t.key, tls: false }
  if (t.servers != null) out.servers = t.servers.map(([h, p]) => Object.freeze([h, Number(p)]))
  if (t.auth != null) out.auth = t.auth
  const given = new Set()
  for (const [name, value] of t.params) {
    given.add(name)
    if (name === 'limit') out.limit = urlInt(shown, name, value)
    else if (name === 'mode') {
      if (value !== 'shared' && value !== 'exclusive') throw invalidArgument(`invalid mode=${value} in dflockd URL (use shared or exclusive): ${shown}`)
      out.mode = value
    } else if (name === 'leaseTtl') out.leaseTtl = one('leaseTtl', urlInt(shown, name, value), '?leaseTtl')
    else if (name === 'tls') {
      if (value === '1' || value === 'true' || value === '') out.tls = true
      else if (value === '0' || value === 'false') out.tls = false
      else throw invalidArgument(`invalid tls=${value} in dflockd URL (use 1 or 0): ${shown}`)
    } else if (name === 'ca') out.ca = caFile(shown, value)
    else throw invalidArgument(`${unknownName('parameter', name, URL_QUERY)} in dflockd URL: ${shown}`)
  }
  if (out.ca !== undefined) {
    // A CA means TLS: `?ca=` alone is enough, `?tls=0&ca=` contradicts itself.
    if (given.has('tls') && !out.tls) throw invalidArgument(`ca= needs TLS, but the dflockd URL says tls=0: ${shown}`)
    out.tls = true
  }
  return out
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

module.exports = { DEFAULT_PORT, redactTarget, isDflockdTarget, parseDflockdUrl, targetId }
