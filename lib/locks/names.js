'use strict'
// Web Locks names → lock file names and dflockd keys. A W3C name is any DOMString: '', '/', '..', NUL, unpaired
// surrogates, '\uFFFF'. Each UTF-16 code unit outside [a-z0-9_-] becomes `%xx` (below 0x100) or `~xxxx` (lower-case
// hex), so the result is injective, reversible, never empty, never '.'/'..', holds no path separator, and stays
// injective on a case-insensitive file system (only lower-case letters appear). Code units, not UTF-8: an unpaired
// surrogate has no UTF-8 form and must not be mangled into U+FFFD (WPT resource-names).

const { createHash } = require('node:crypto')

const PREFIX = 'wl-'
/** Names whose encoding would be longer are named by a hash (file names are ≤ 255 bytes, dflockd keys ≤ 256). */
const MAX_ENCODED = 200
const HASHED = 'wl#'

function encodeName(name) {
  let out = ''
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i)
    if ((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x5f || c === 0x2d) out += name[i]
    else if (c < 0x100) out += `%${c.toString(16).padStart(2, '0')}`
    else out += `~${c.toString(16).padStart(4, '0')}`
  }
  return out
}

/** The name `encodeName` made `text` from, or null when `text` is not one of its outputs. */
function decodeName(text) {
  let out = ''
  for (let i = 0; i < text.length; ) {
    const ch = text[i]
    if (ch === '%' || ch === '~') {
      const n = ch === '%' ? 2 : 4
      const hex = text.slice(i + 1, i + 1 + n)
      if (!new RegExp(`^[0-9a-f]{${n}}$`).test(hex)) return null
      const c = parseInt(hex, 16)
      if (ch === '~' && c < 0x100) return null
      out += String.fromCharCode(c)
      i += 1 + n
    } else if (/[a-z0-9_-]/.test(ch)) {
      out += ch
      i++
    } else return null
  }
  return out
}

/** The stem of the lock file or key for `name`: `wl-<encoded>`, or `wl#<sha256 of the code units>` when long. */
function stemOf(name) {
  const encoded = encodeName(name)
  if (encoded.length <= MAX_ENCODED) return PREFIX + encoded
  return HASHED + createHash('sha256').update(Buffer.from(name, 'utf16le')).digest('hex')
}

/** The name a stem stands for; `undefined` for a hashed stem (only its holder's tag knows), null for no stem of ours. */
function nameOfStem(stem) {
  if (stem.startsWith(HASHED)) return /^wl#[0-9a-f]{64}$/.test(stem) ? undefined : null
  if (!stem.startsWith(PREFIX)) return null
  return decodeName(stem.slice(PREFIX.length))
}

module.exports = { encodeName, decodeName, stemOf, nameOfStem, MAX_ENCODED }
