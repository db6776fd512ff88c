//! The dflockd target string, `dflockd://[token@]host[:port][,host2[:port]…]/key[?name=value&…]`:
//! the one answer to "is this a dflockd target?" ([`is_dflockd`], scheme case-insensitive as
//! every URL scheme), the one redaction of its auth token ([`redact`], which every message,
//! error, `lock.target` and `util.inspect` of the package goes through) and its parse
//! ([`parse`]: user info, servers, key, the query's raw pairs; the JS layer gives the pairs their
//! meaning through the option table).
//!
//! URL semantics where they matter: the user info ends at the LAST `@` before the path (a raw `@`
//! in a token must not leave its tail visible), the key and the user info are percent-decoded as
//! UTF-8, the query as `application/x-www-form-urlencoded` (`+` is a space). Unlike a WHATWG
//! parse, the key is taken as written (no `.`/`..` segment folding: `a/../b` locks `a/../b`) and
//! a host is ASCII (a name with other characters is refused rather than punycoded).

use super::error::{DflockdError, Result};
use super::protocol::validate_key;
use super::shard::stable_hash_shard;
use crate::options::DEFAULT_PORT;

/// The scheme, with its `://`, as written in lower case.
const PREFIX: &str = "dflockd://";

/// One server of a target: `host` without the brackets of an IPv6 literal, in lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub host: String,
    pub port: u16,
}

/// A parsed target. `server` is the index in `servers` of the one that holds `key`
/// (`stable_hash_shard`, as every client of a fleet); a single-host target has one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub auth: Option<String>,
    pub servers: Vec<Server>,
    pub server: usize,
    pub key: String,
    /// The query's `(name, value)` pairs in order, decoded.
    pub params: Vec<(String, String)>,
}

/// Whether `s` is a dflockd target: it starts with `dflockd://` in any case.
pub fn is_dflockd(s: &str) -> bool {
    s.get(..PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
}

/// `text` with the user info of every `dflockd:` URL in it (any case, any number of slashes)
/// replaced by `***`: the user info is everything before the last `@` of the authority, which
/// ends at the first `/`, `?`, `#` or line break. Text without such a URL is returned unchanged.
pub fn redact(text: &str) -> String {
    const SCHEME: &str = "dflockd:";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = find_ignore_case(rest, SCHEME) {
        let after_scheme = at + SCHEME.len();
        let slashes = rest[after_scheme..]
            .bytes()
            .take_while(|b| *b == b'/')
            .count();
        let start = after_scheme + slashes;
        let end = rest[start..]
            .find(['/', '?', '#', '\n', '\r'])
            .map_or(rest.len(), |i| start + i);
        out.push_str(&rest[..start]);
        match rest[start..end].rfind('@') {
            Some(i) => {
                out.push_str("***");
                out.push_str(&rest[start + i..end]);
            }
            None => out.push_str(&rest[start..end]),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn find_ignore_case(hay: &str, needle: &str) -> Option<usize> {
    let n = needle.len();
    (0..=hay.len().checked_sub(n)?)
        .find(|&i| hay.as_bytes()[i..i + n].eq_ignore_ascii_case(needle.as_bytes()))
}

/// Parses a dflockd target (see the module doc). Every error is `INVALID_ARGUMENT` and shows
/// the target redacted.
pub fn parse(url: &str) -> Result<Target> {
    let shown = redact(url);
    let bad = |what: &str| DflockdError::invalid(format!("{what}: {shown}"));
    if !is_dflockd(url) {
        return Err(bad("not a dflockd:// URL"));
    }
    let rest = &url[PREFIX.len()..];
    let (rest, has_fragment) = match rest.find('#') {
        Some(i) => (&rest[..i], true),
        None => (rest, false),
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let (path, query) = match rest[authority_end..].find('?') {
        Some(i) => (
            &rest[authority_end..authority_end + i],
            Some(&rest[authority_end + i + 1..]),
        ),
        None => (&rest[authority_end..], None),
    };
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let servers = if hosts.contains(',') {
        hosts
            .split(',')
            .map(|entry| {
                server(entry).map_err(|_| {
                    bad(&format!(
                        "invalid host '{entry}' in the dflockd URL's server list"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?
    } else {
        if hosts.is_empty() || hosts.starts_with(':') {
            return Err(bad("dflockd URL has no host"));
        }
        vec![server(hosts).map_err(|e| match e {
            HostError::Port => bad("invalid port in dflockd URL"),
            HostError::Syntax => bad("invalid dflockd URL"),
        })?]
    };
    if has_fragment {
        return Err(bad(
            "dflockd URL must not have a fragment (encode '#' in the key as %23)",
        ));
    }
    let decode_bad = || bad("invalid percent-encoding in dflockd URL");
    let auth = match userinfo {
        None => None,
        Some(info) => {
            // `user:password` is one token `user:password`; an empty password adds nothing.
            let (user, password) = info.split_once(':').unwrap_or((info, ""));
            let mut auth = percent_decode(user, false).ok_or_else(decode_bad)?;
            if !password.is_empty() {
                auth.push(':');
                auth.push_str(&percent_decode(password, false).ok_or_else(decode_bad)?);
            }
            Some(auth).filter(|a| !a.is_empty())
        }
    };
    let key =
        percent_decode(path.strip_prefix('/').unwrap_or(path), false).ok_or_else(decode_bad)?;
    if key.is_empty() {
        return Err(bad("dflockd URL has no key"));
    }
    validate_key(&key)?;
    let mut params = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        params.push((
            percent_decode(name, true).ok_or_else(decode_bad)?,
            percent_decode(value, true).ok_or_else(decode_bad)?,
        ));
    }
    let server = if servers.len() == 1 {
        0
    } else {
        // The length came from a split of a string shorter than 4 GiB of commas.
        stable_hash_shard(&key, u32::try_from(servers.len()).unwrap_or(u32::MAX))? as usize
    };
    Ok(Target {
        auth,
        servers,
        server,
        key,
        params,
    })
}

enum HostError {
    Syntax,
    Port,
}

/// One `host[:port]`: a name or IPv4 address of URL host characters (lower-cased), or a
/// bracketed IPv6 literal; the port 1..=65535 when given (a number over 65535 is not a URL).
fn server(entry: &str) -> std::result::Result<Server, HostError> {
    let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
        let close = v6.find(']').ok_or(HostError::Syntax)?;
        let literal = &v6[..close];
        if literal.is_empty()
            || !literal.contains(':')
            || !literal
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(HostError::Syntax);
        }
        let after = &v6[close + 1..];
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or(HostError::Syntax)?),
        };
        (literal, port)
    } else {
        let (host, port) = match entry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        };
        let url_host_byte = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+;=".contains(&b);
        if host.is_empty() || !host.bytes().all(url_host_byte) {
            return Err(HostError::Syntax);
        }
        (host, port)
    };
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => match p.parse::<u32>() {
            Ok(0) => return Err(HostError::Port),
            Ok(n) if n <= u32::from(u16::MAX) => n as u16,
            _ => return Err(HostError::Syntax),
        },
        Some(_) => return Err(HostError::Syntax),
    };
    Ok(Server {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// `%XX`-decoding to UTF-8 (`None` for a broken escape or bytes that are not UTF-8); with
/// `plus`, `+` is a space (a query's form encoding).
fn percent_decode(s: &str, plus: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(host: &str, port: u16) -> Vec<Server> {
        vec![Server {
            host: host.into(),
            port,
        }]
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        for url in ["dflockd://h/k", "DFLOCKD://h/k", "Dflockd://h/k"] {
            assert!(is_dflockd(url), "{url}");
            let t = parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!((t.servers, t.key.as_str()), (one("h", 6388), "k"));
        }
        for not in ["dflockd:/h/k", "dflockd:h", "file:///x", "/tmp/x", "dflock"] {
            assert!(!is_dflockd(not), "{not}");
        }
    }

    #[test]
    fn parts() {
        let t = parse("DFLOCKD://a%40b%3Ac@Locks.Example:7000/cat%23s/x?limit=3&mode=shared&x=a+b")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.auth.as_deref(), Some("a@b:c"));
        assert_eq!(t.servers, one("locks.example", 7000));
        assert_eq!(t.key, "cat#s/x");
        let params: Vec<_> = t
            .params
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(params, [("limit", "3"), ("mode", "shared"), ("x", "a b")]);
        let t = parse("dflockd://user:pw@[::1]:1/k").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.auth.as_deref(), t.servers),
            (Some("user:pw"), one("::1", 1))
        );
        let t = parse("dflockd://tok:@h:/k").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.auth.as_deref(), t.servers),
            (Some("tok"), one("h", 6388))
        );
        // A fleet: the key picks the server as stable_hash_shard does.
        let t = parse("dflockd://a:1,b:2,c/my-key").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.servers.len(), 3);
        assert_eq!(t.server, 2);
    }

    #[test]
    fn refusals_name_the_mistake_and_never_the_token() {
        for (url, message) in [
            ("dflockd://tok@127.0.0.1:99999/k", "invalid dflockd URL"),
            ("dflockd://tok@h:0/k", "invalid port in dflockd URL"),
            ("dflockd://tok@h:1/", "dflockd URL has no key"),
            ("dflockd://tok@/k", "dflockd URL has no host"),
            (
                "dflockd://tok@h/k#f",
                "dflockd URL must not have a fragment",
            ),
            ("dflockd://tok@h/%E0%A4%A", "invalid percent-encoding"),
            ("dflockd://tok:pass@[::1/k", "invalid dflockd URL"),
            (
                "dflockd://tok@h,,x/k",
                "invalid host '' in the dflockd URL's server list",
            ),
            ("dflockd://tok@h/a b", "forbidden character"),
            ("dflockd:/tok@h/k", "not a dflockd:// URL"),
        ] {
            let e = parse(url).err().unwrap_or_else(|| panic!("{url} parsed"));
            let text = e.to_string();
            assert!(text.contains(message), "{url}: {text}");
            assert!(!text.contains("tok"), "{url}: {text}");
        }
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("dflockd://a@b@h:1/k?x=@"), "dflockd://***@h:1/k?x=@");
        assert_eq!(redact("DFLOCKD://t@h/k"), "DFLOCKD://***@h/k");
        assert_eq!(redact("dflockd:t@h/k"), "dflockd:***@h/k");
        assert_eq!(redact("dflockd://h/k"), "dflockd://h/k");
        assert_eq!(
            redact("withLock('Dflockd://t@h/k') and dflockd://u@v"),
            "withLock('Dflockd://***@h/k') and dflockd://***@v"
        );
        assert_eq!(redact("/tmp/x.lock"), "/tmp/x.lock");
        assert_eq!(redact("ключ dflockd://т@х/к"), "ключ dflockd://***@х/к");
    }
}
