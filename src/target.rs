//! The dflockd target string (`sema_core::dflockd::target`) for JS: its parse, "is this a
//! dflockd target?" and the redaction of its token. Conversion only.

use napi_derive::napi;
use sema_core::dflockd::target;

use crate::result::{thrown, Thrown};

/// A parsed `dflockd://` target: `host`/`port` the server that holds `key` (of `servers`, every
/// server named, given for a fleet only), `auth` the token, `params` the query's decoded pairs.
#[napi(object)]
pub struct NativeTarget {
    pub host: String,
    pub port: u32,
    pub servers: Option<Vec<Vec<String>>>,
    pub key: String,
    pub auth: Option<String>,
    pub params: Vec<Vec<String>>,
}

/// Parses a dflockd target (throws `INVALID_ARGUMENT`, with the target redacted).
#[napi(js_name = "dflockdParseTarget")]
pub fn dflockd_parse_target(url: String) -> Result<NativeTarget, Thrown> {
    let t = target::parse(&url).map_err(thrown)?;
    let chosen = &t.servers[t.server];
    Ok(NativeTarget {
        host: chosen.host.clone(),
        port: u32::from(chosen.port),
        servers: (t.servers.len() > 1).then(|| {
            t.servers
                .iter()
                .map(|s| vec![s.host.clone(), s.port.to_string()])
                .collect()
        }),
        key: t.key,
        auth: t.auth,
        params: t.params.into_iter().map(|(n, v)| vec![n, v]).collect(),
    })
}

/// Whether `s` is a dflockd target (`dflockd://` in any case).
#[napi(js_name = "dflockdIsTarget")]
pub fn dflockd_is_target(s: String) -> bool {
    target::is_dflockd(&s)
}

/// `text` with the token of every dflockd URL in it replaced by `***`.
#[napi(js_name = "dflockdRedact")]
pub fn dflockd_redact(text: String) -> String {
    target::redact(&text)
}
