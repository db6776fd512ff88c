//! The option rules of every entry point, in one table: each option's name, kind (type, unit,
//! range and the "expected …" words of its message), default, and the backend it applies to.
//!
//! The core's own checks use these constants ([`MAX_LEASE_TTL_S`] in
//! [`validate_ttl`](crate::dflockd::protocol::validate_ttl), the defaults in
//! [`LockOptions`](crate::lockfile::LockOptions) and
//! [`PrimitiveOptions`](crate::dflockd::PrimitiveOptions)), and the Node binding hands the table
//! to the JS layer once, at load ([`rules_json`]): `lib/validate.js` builds its schemas from it,
//! so checking an option costs no call across the napi boundary.
//!
//! What is NOT in the table, and where it lives instead:
//! - the content of a dflockd key and auth token (bytes, forbidden characters):
//!   [`validate_key`](crate::dflockd::protocol::validate_key) and
//!   [`validate_auth`](crate::dflockd::protocol::validate_auth), run when a primitive or
//!   connection is built (the constructor of `DistributedLock` builds one, so it still throws);
//! - the fields of the `tls` object (PEM strings or Buffers, `NODE_EXTRA_CA_CERTS`):
//!   `lib/dflockd/common.js` `nativeTls`, since a Buffer is a JS value;
//! - `AbortSignal` and function options: JS values, checked by the JS kinds `signal` and
//!   `function` (their words are here);
//! - a `shardingStrategy`'s answer: known only when it is called, at `acquire()`;
//! - the URL query's text values (`?limit=`, `?leaseTtl=`, `?tls=`, `?ca=`): parsed in
//!   `lib/dflockd/url.js`, then checked by the kinds named here.

use serde::Serialize;

use crate::dflockd::connection::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_SOCKET_TIMEOUT};
use crate::dflockd::protocol::MAX_SECONDS;

/// The longest dflockd lease accepted, in seconds (1 hour). A lease is renewed while the lock
/// is held, so its length only bounds how long a crashed holder keeps the key; a longer value is
/// taken for milliseconds typed by habit among millisecond options (`leaseTtl: 30000` would be a
/// lease of over 8 hours) and refused with the unit named (see [`lease_ttl_too_long`]).
pub const MAX_LEASE_TTL_S: u64 = 3600;

/// The longest `acquireTimeoutS` accepted (DistributedLock, DistributedSemaphore), in seconds: the
/// lease's bound and reason. Among millisecond options a `10000` is 10 s typed by habit, which in
/// seconds waits close to 3 hours; it is refused with the unit named (see [`lease_ttl_too_long`]).
/// A longer wait is a loop of acquire() calls, or the target API's `timeout` (milliseconds).
pub const MAX_ACQUIRE_TIMEOUT_S: u64 = MAX_LEASE_TTL_S;

/// File locks: a lock older than this (with its holder not running) is stale: 1 hour, semats'.
pub const DEFAULT_STALE_TIMEOUT_MS: u64 = 3_600_000;
/// File locks: the polling fallback while waiting, semats' 100 ms.
pub const DEFAULT_RETRY_INTERVAL_MS: u64 = 100;
/// File locks: the longest tag written, in UTF-16 code units (semats').
pub const DEFAULT_MAX_TAG_LENGTH: usize = 10_000;
/// dflockd: how long `acquire()` waits, in seconds (dflockd-client's default).
pub const DEFAULT_ACQUIRE_TIMEOUT_S: u64 = 10;
/// dflockd: the fraction of the lease after which it is renewed (dflockd-client's default).
pub const DEFAULT_RENEW_RATIO: f64 = 0.5;
/// dflockd: the longest gap between two renewals, in ms: well below the server's default 23 s
/// idle limit.
pub const DEFAULT_RENEW_MAX_INTERVAL_MS: u64 = 15_000;
/// dflockd: the server when none is named.
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// dflockd: the port when none is named (dflockd's own).
pub const DEFAULT_PORT: u16 = 6388;
/// The largest process id (`pid_t` is a signed 32-bit integer; Linux pids are at most 2^22).
pub const MAX_PID: u32 = 0x7fff_ffff;

/// How a value is checked. `Number` kinds are checked alike by every side (the JS layer builds
/// one checker from the fields); the others have one implementation each, named by `check`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kind {
    /// The kind's name (`timeout`, `leaseSeconds`, …), as the JS layer and tests refer to it.
    pub name: &'static str,
    /// `number`, or the one implementation that checks it: `boolean`, `string`, `nonEmptyString`,
    /// `oneOf`, `heartbeat`, `servers`, `tls`, `signal`, `function`.
    pub check: &'static str,
    /// `ms`, `s` or `` (no unit).
    pub unit: &'static str,
    /// Smallest accepted number (`number` kinds).
    pub min: Option<f64>,
    /// `true`: `min` itself is refused.
    pub min_exclusive: bool,
    /// Largest accepted number; `None` = no bound.
    pub max: Option<f64>,
    /// `true`: `max` itself is refused.
    pub max_exclusive: bool,
    /// Whole numbers only.
    pub integer: bool,
    /// `Infinity` is accepted (it means "forever"); otherwise only finite numbers.
    pub infinite: bool,
    /// The accepted strings of a `oneOf` kind.
    pub values: &'static [&'static str],
    /// The words after "must be" in the message: `timeout must be <expected>, got "5s"`.
    pub expected: &'static str,
}

const fn kind(name: &'static str, check: &'static str, expected: &'static str) -> Kind {
    Kind {
        name,
        check,
        unit: "",
        min: None,
        min_exclusive: false,
        max: None,
        max_exclusive: false,
        integer: false,
        infinite: false,
        values: &[],
        expected,
    }
}

const fn number(name: &'static str, unit: &'static str, expected: &'static str) -> Kind {
    Kind {
        unit,
        ..kind(name, "number", expected)
    }
}

/// The kinds of every table.
pub mod kinds;

/// The entry points and their options.
mod entry_points;
pub use entry_points::*;

/// Which targets an option applies to. Given for the other backend's target it is refused, not
/// dropped (a file lock given `limit: 2` would otherwise be a one-holder lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Backend {
    /// Both backends.
    Both,
    /// File targets only.
    File,
    /// `dflockd://` targets only.
    Dflockd,
}

/// An option's default, as the JS layer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Default {
    /// A number (in the kind's unit).
    Number(f64),
    /// A boolean.
    Bool(bool),
    /// A string.
    Text(&'static str),
}

/// One option of one entry point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Its name, as the user writes it.
    pub name: &'static str,
    /// The name of its [`Kind`].
    pub kind: &'static str,
    /// The targets it applies to.
    pub backend: Backend,
    /// Its default (`None`: absent means "none", "forever", "the server's", or computed, as its
    /// doc comment in `index.d.ts` says).
    pub default: Option<Default>,
    /// It must be given (`key` of `DistributedLock`, `limit` of `DistributedSemaphore`).
    pub required: bool,
}

const fn rule(name: &'static str, kind: &Kind, backend: Backend) -> Rule {
    Rule {
        name,
        kind: kind.name,
        backend,
        default: None,
        required: false,
    }
}

const fn with_default(r: Rule, d: Default) -> Rule {
    Rule {
        default: Some(d),
        ..r
    }
}

const fn required(r: Rule) -> Rule {
    Rule {
        required: true,
        ..r
    }
}

/// One entry point: the options object of one or more functions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryPoint {
    /// Its name in the JS layer (`ACQUIRE`, `CONFIG`, …).
    pub name: &'static str,
    /// The functions that take it.
    pub used_by: &'static str,
    /// Its options.
    pub options: &'static [Rule],
}

/// The kind named `name`.
pub fn kind_named(name: &str) -> Option<&'static Kind> {
    kinds::ALL.iter().find(|k| k.name == name)
}

/// `30000` → `over 8 hours`, for a message.
fn human_seconds(s: u64) -> String {
    if s >= 86_400 {
        let days = s / 86_400;
        format!("over {days} day{}", if s >= 172_800 { "s" } else { "" })
    } else {
        let hours = s / 3600;
        format!("over {hours} hour{}", if s >= 7200 { "s" } else { "" })
    }
}

/// The message for a lease above [`MAX_LEASE_TTL_S`] (or an `acquireTimeoutS` above
/// [`MAX_ACQUIRE_TIMEOUT_S`], the same bound), naming the unit and what was probably meant:
/// `leaseTtl is in seconds: 30000 s is over 8 hours; the most is 3600 (1 hour). For 30000 ms,
/// write leaseTtl: 30`. `name` is the option as the caller wrote it (`?leaseTtl` for a URL's).
pub fn lease_ttl_too_long(name: &str, ttl_s: u64) -> String {
    let sep = if name.starts_with('?') { "=" } else { ": " };
    let meant = ttl_s.div_ceil(1000).max(1);
    format!(
        "{name} is in seconds: {ttl_s} s is {}; the most is {MAX_LEASE_TTL_S} (1 hour). For {ttl_s} ms, write {name}{sep}{meant}",
        human_seconds(ttl_s)
    )
}

/// The whole table as JSON: `{kinds: {name: Kind}, entryPoints: {NAME: EntryPoint},
/// maxLeaseTtlS}` (what the binding's `optionRules()` returns, once, at load).
pub fn rules_json() -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Table {
        kinds: serde_json::Map<String, serde_json::Value>,
        entry_points: serde_json::Map<String, serde_json::Value>,
        instead: &'static [Instead],
        max_lease_ttl_s: u64,
    }
    let kinds = kinds::ALL
        .iter()
        .map(|k| (k.name.to_string(), serde_json::to_value(k)))
        .map(|(n, v)| v.map(|v| (n, v)))
        .collect::<Result<_, _>>();
    let entry_points = ENTRY_POINTS
        .iter()
        .map(|e| (e.name.to_string(), serde_json::to_value(e)))
        .map(|(n, v)| v.map(|v| (n, v)))
        .collect::<Result<_, _>>();
    match (kinds, entry_points) {
        (Ok(kinds), Ok(entry_points)) => serde_json::to_string(&Table {
            kinds,
            entry_points,
            instead: INSTEAD,
            max_lease_ttl_s: MAX_LEASE_TTL_S,
        })
        // Static data of plain strings and numbers always serialises; an empty table would
        // refuse every option by name (and fail every test), never accept one silently.
        .unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
