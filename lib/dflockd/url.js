'use strict'
// The one home of the dflockd URL, `dflockd://[token@]host[:port]/key[?limit=N&leaseTtl=S&tls=1]`: its parse (URL
// semantics: the user info ends at the last '@' before the path; a token with '@', '/', ':' or '%' is written
// percent-encoded), its redaction (the token is never shown: every message, `lock.target`, `status().target` and
// the CLI print `dflockd://***@host:port/key`) and the identity of the lock it names. Used by the target API,
// withLock, status and the CLI. Loads the native addon only to check a key, so that the CLI's help and messages
// can redact without it.

const { invalidArgument } = require('../errors')
const { one } = require('../validate')

/** The port of a URL that names none (dflockd's own). */
const DEFAULT_PORT = 6388

/**
 * `url` with its auth token (the URL's user info) replaced by `***`, as every message, `lock.target` and
 * `status().target` show it: a token must never reach a log. The user info ends at the last `@` before the path, as
 * URL parsing has it (a raw `@` in a token must not leave its tail visible).
 */
function redactTarget(url) {
  return String(url).replace(/^(dflockd:\/\/)[^/?#]*@/i, '$1***@')
}

/**
 * `dflockd://[token@]host[:port]/key[?limit=N&leaseTtl=S&tls=1]` → `{host, port, key, auth?, limit?, leaseTtl?, tls}`.
 * The key is URL-decoded (encode `/`-free specials such as `#` as `%23`); unknown query parameters are rejected.
 */
function parseDflockdUrl(url) {
  if (typeof url !== 'string') throw invalidArgument('dflockd target must be a string')
  const shown = redactTarget(url)
  let u
  try {
    u = new URL(url)
  } catch {
    throw invalidArgument(`invalid dflockd URL: ${shown}`)
  }
  if (u.protocol !== 'dflockd:') throw invalidArgument(`not a dflockd:// URL: ${shown}`)
  if (!u.hostname) throw invalidArgument(`dflockd URL has no host: ${shown}`)
  if (u.hash) throw invalidArgument(`dflockd URL must not have a fragment (encode '#' in the key as %23): ${shown}`)
  const { hostOption, nativeSync } = require('./common')
  const host = hostOption(u.hostname)
  const port = u.port === '' ? DEFAULT_PORT : Number(u.port)
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw invalidArgument(`invalid port in dflockd URL: ${shown}`)
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
  const out = { host, port, key, tls: false }
  if (auth !== undefined && auth !== '') out.auth = auth
  for (const [name, value] of u.searchParams) {
    if (name === 'limit') out.limit = urlInt(shown, name, value)
    else if (name === 'leaseTtl') out.leaseTtl = one('leaseTtl', urlInt(shown, name, value), '?leaseTtl')
    else if (name === 'tls') {
      if (value === '1' || value === 'true' || value === '') out.tls = true
      else if (value === '0' || value === 'false') out.tls = false
      else throw invalidArgument(`invalid tls=${value} in dflockd URL (use 1 or 0): ${shown}`)
    } else throw invalidArgument(`unknown parameter '${name}' in dflockd URL (known: limit, leaseTtl, tls): ${shown}`)
  }
  return out
}

function urlInt(shown, name, value) {
  if (!/^\d+$/.test(value)) throw invalidArgument(`invalid ${name}=${value} in dflockd URL: ${shown}`)
  const n = Number(value)
  if (!Number.isSafeInteger(n) || n < 1 || n > require('./common').MAX_TIMEOUT_S) throw invalidArgument(`invalid ${name}=${value} in dflockd URL: ${shown}`)
  return n
}

/** The identity of the lock a parsed URL names (its server and key): what "the same lock" means for release(url),
 * status().isOwnedByCurrentProcess and a nested withLock. */
function targetId(cfg) {
  return `${cfg.host.toLowerCase()}|${cfg.port}|${cfg.key}`
}

module.exports = { DEFAULT_PORT, redactTarget, parseDflockdUrl, targetId }
