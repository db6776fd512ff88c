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
pub mod kinds {
    use super::*;

    /// A wait in ms >= 0; `null`/`Infinity` = forever.
    pub const TIMEOUT: Kind = Kind {
        min: Some(0.0),
        infinite: true,
        ..number(
            "timeout",
            "ms",
            "a number of milliseconds >= 0 (or null to wait forever)",
        )
    };
    /// semats' staleTimeout: ms >= 0; `null` = never stale.
    pub const STALE_TIMEOUT: Kind = Kind {
        min: Some(0.0),
        infinite: true,
        ..number(
            "staleTimeout",
            "ms",
            "a number of milliseconds >= 0 (or null: never stale)",
        )
    };
    /// A finite positive number of ms (intervals, connection bounds).
    pub const POSITIVE_MS: Kind = Kind {
        min: Some(0.0),
        min_exclusive: true,
        ..number("positiveMs", "ms", "a positive number of milliseconds")
    };
    /// The file heartbeat: a positive number of ms, or `false`/`0`/`null` = off.
    pub const HEARTBEAT: Kind = Kind {
        unit: "ms",
        min: Some(0.0),
        ..kind(
            "heartbeat",
            "heartbeat",
            "a positive number of milliseconds (or null, false or 0: off)",
        )
    };
    /// A count >= 0 (semats' maxTagLength).
    pub const COUNT: Kind = Kind {
        min: Some(0.0),
        integer: true,
        ..number("count", "", "an integer >= 0")
    };
    /// A process id.
    pub const PID: Kind = Kind {
        min: Some(1.0),
        max: Some(MAX_PID as f64),
        integer: true,
        ..number("pid", "", "a process id (an integer from 1 to 2147483647)")
    };
    /// A semaphore's number of holders (the protocol's bound, also for files).
    pub const LIMIT: Kind = Kind {
        min: Some(1.0),
        max: Some(MAX_SECONDS as f64),
        integer: true,
        ..number("limit", "", "a positive integer")
    };
    /// dflockd's lease: whole seconds, the protocol's unit, 1 to [`MAX_LEASE_TTL_S`].
    pub const LEASE_SECONDS: Kind = Kind {
        min: Some(1.0),
        max: Some(MAX_LEASE_TTL_S as f64),
        integer: true,
        ..number(
            "leaseSeconds",
            "s",
            "a whole number of seconds >= 1 (the protocol's unit, as ?leaseTtl= in a URL)",
        )
    };
    /// dflockd-client's acquireTimeoutS: whole seconds, 0 = try once.
    pub const TIMEOUT_SECONDS: Kind = Kind {
        min: Some(0.0),
        max: Some(MAX_SECONDS as f64),
        integer: true,
        ..number(
            "timeoutSeconds",
            "s",
            "a whole number of seconds >= 0 (0: try once)",
        )
    };
    /// The renewal point, a fraction of the lease.
    pub const RATIO: Kind = Kind {
        min: Some(0.0),
        min_exclusive: true,
        max: Some(1.0),
        max_exclusive: true,
        ..number("ratio", "", "a number between 0 and 1 (exclusive)")
    };
    /// A TCP port.
    pub const PORT: Kind = Kind {
        min: Some(1.0),
        max: Some(65535.0),
        integer: true,
        ..number("port", "", "a port number (an integer from 1 to 65535)")
    };
    /// `true` or `false`.
    pub const BOOLEAN: Kind = kind("boolean", "boolean", "true or false");
    /// Any string (a tag, an auth token: its content is the protocol's to check).
    pub const STRING: Kind = kind("string", "string", "a string");
    /// A dflockd key or host: a non-empty string (a key's bytes: `validate_key`).
    pub const NON_EMPTY_STRING: Kind =
        kind("nonEmptyString", "nonEmptyString", "a non-empty string");
    /// A lock's mode (Web Locks' names).
    pub const MODE: Kind = Kind {
        values: &["shared", "exclusive"],
        ..kind("mode", "oneOf", "'shared' or 'exclusive'")
    };
    /// dflockd-client's `servers`: `[host, port]` pairs, at least one.
    pub const SERVERS: Kind = kind(
        "servers",
        "servers",
        "a non-empty array of [host, port] pairs",
    );
    /// `true`, or an object of TLS options (its fields: `lib/dflockd/common.js` `nativeTls`).
    pub const TLS: Kind = kind("tls", "tls", "true or an object of TLS options");
    /// An `AbortSignal` (a JS value: checked in JS).
    pub const SIGNAL: Kind = kind("signal", "signal", "an AbortSignal");
    /// A function (a JS value: checked in JS).
    pub const FUNCTION: Kind = kind("function", "function", "a function");

    /// Every kind, for the binding's export.
    pub const ALL: &[Kind] = &[
        TIMEOUT,
        STALE_TIMEOUT,
        POSITIVE_MS,
        HEARTBEAT,
        COUNT,
        PID,
        LIMIT,
        LEASE_SECONDS,
        TIMEOUT_SECONDS,
        RATIO,
        PORT,
        BOOLEAN,
        STRING,
        NON_EMPTY_STRING,
        MODE,
        SERVERS,
        TLS,
        SIGNAL,
        FUNCTION,
    ];
}

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

use kinds::*;
use Backend::{Both, Dflockd, File};

const fn ms(v: u64) -> Default {
    Default::Number(v as f64)
}

// The options shared by several entry points, so each is written once.
const R_TIMEOUT: Rule = rule("timeout", &TIMEOUT, Both);
const R_SIGNAL: Rule = rule("signal", &SIGNAL, Both);
const R_TAG: Rule = rule("tag", &STRING, Both);
const R_STALE_TIMEOUT: Rule = with_default(
    rule("staleTimeout", &STALE_TIMEOUT, File),
    ms(DEFAULT_STALE_TIMEOUT_MS),
);
const R_RETRY_INTERVAL: Rule = with_default(
    rule("retryInterval", &POSITIVE_MS, File),
    ms(DEFAULT_RETRY_INTERVAL_MS),
);
const R_FSYNC: Rule = with_default(rule("fsync", &BOOLEAN, File), Default::Bool(true));
const R_HEARTBEAT: Rule = rule("heartbeat", &HEARTBEAT, File);
const R_MAX_TAG_LENGTH: Rule = with_default(
    rule("maxTagLength", &COUNT, File),
    Default::Number(DEFAULT_MAX_TAG_LENGTH as f64),
);
const R_PID: Rule = rule("pid", &PID, File);
const R_LIMIT: Rule = with_default(rule("limit", &LIMIT, Both), Default::Number(1.0));
const R_MODE: Rule = rule("mode", &MODE, Both);
const R_TLS: Rule = rule("tls", &TLS, Dflockd);
const R_AUTH: Rule = rule("auth", &STRING, Dflockd);
const R_CONNECT_TIMEOUT: Rule = with_default(
    rule("connectTimeoutMs", &POSITIVE_MS, Dflockd),
    ms(DEFAULT_CONNECT_TIMEOUT.as_millis() as u64),
);
const R_SOCKET_TIMEOUT: Rule = with_default(
    rule("socketTimeoutMs", &POSITIVE_MS, Dflockd),
    ms(DEFAULT_SOCKET_TIMEOUT.as_millis() as u64),
);
const R_RENEW_RATIO: Rule = with_default(
    rule("renewRatio", &RATIO, Dflockd),
    Default::Number(DEFAULT_RENEW_RATIO),
);
const R_RENEW_MAX_INTERVAL: Rule = with_default(
    rule("renewMaxIntervalMs", &POSITIVE_MS, Dflockd),
    ms(DEFAULT_RENEW_MAX_INTERVAL_MS),
);
const R_HOST: Rule = with_default(
    rule("host", &NON_EMPTY_STRING, Dflockd),
    Default::Text(DEFAULT_HOST),
);
const R_PORT: Rule = with_default(
    rule("port", &PORT, Dflockd),
    Default::Number(DEFAULT_PORT as f64),
);

/// `acquire`, `tryAcquire`, `withLock` (both backends).
pub const ACQUIRE: EntryPoint = EntryPoint {
    name: "ACQUIRE",
    used_by: "acquire, tryAcquire, withLock",
    options: &[
        R_TIMEOUT,
        R_SIGNAL,
        R_TAG,
        rule("onLost", &FUNCTION, Both),
        R_STALE_TIMEOUT,
        R_RETRY_INTERVAL,
        R_FSYNC,
        R_HEARTBEAT,
        R_MAX_TAG_LENGTH,
        R_PID,
        rule("leaseTtl", &LEASE_SECONDS, Dflockd),
        R_LIMIT,
        R_MODE,
        R_TLS,
        R_AUTH,
        R_CONNECT_TIMEOUT,
        R_SOCKET_TIMEOUT,
        R_RENEW_RATIO,
        R_RENEW_MAX_INTERVAL,
    ],
};

/// `release(target, options)`.
pub const RELEASE: EntryPoint = EntryPoint {
    name: "RELEASE",
    used_by: "release",
    options: &[
        with_default(rule("force", &BOOLEAN, File), Default::Bool(false)),
        R_PID,
        R_LIMIT,
    ],
};

/// `status(target, options)`.
pub const STATUS: EntryPoint = EntryPoint {
    name: "STATUS",
    used_by: "status",
    options: &[
        R_STALE_TIMEOUT,
        R_LIMIT,
        R_MODE,
        R_TLS,
        R_AUTH,
        R_CONNECT_TIMEOUT,
        R_SOCKET_TIMEOUT,
    ],
};

/// `wait(target, options)`: status's options and how long to wait.
pub const WAIT: EntryPoint = EntryPoint {
    name: "WAIT",
    used_by: "wait",
    options: &[
        R_STALE_TIMEOUT,
        R_LIMIT,
        R_MODE,
        R_TLS,
        R_AUTH,
        R_CONNECT_TIMEOUT,
        R_SOCKET_TIMEOUT,
        R_TIMEOUT,
        R_SIGNAL,
        R_RETRY_INTERVAL,
    ],
};

/// semats' `SemaphoreConfig` (`new Semaphore(path, config)`), semats' defaults.
pub const CONFIG: EntryPoint = EntryPoint {
    name: "CONFIG",
    used_by: "new Semaphore(path, config), Semaphore.withDefaults",
    options: &[
        R_STALE_TIMEOUT,
        R_RETRY_INTERVAL,
        rule("acquireTimeout", &TIMEOUT, File),
        R_MAX_TAG_LENGTH,
        R_FSYNC,
        R_HEARTBEAT,
    ],
};

/// `Semaphore#acquire(options)`.
pub const SEMATS_ACQUIRE: EntryPoint = EntryPoint {
    name: "SEMATS_ACQUIRE",
    used_by: "Semaphore#acquire",
    options: &[R_TIMEOUT, R_TAG, R_SIGNAL],
};

/// The LockInfo of `Semaphore#tryAcquireWithInfo(info)`: data, so other fields are allowed.
pub const SEMATS_INFO: EntryPoint = EntryPoint {
    name: "SEMATS_INFO",
    used_by: "Semaphore#tryAcquireWithInfo",
    options: &[R_PID, R_TAG],
};

/// `Connection.connect(options)` and `stats(options)`: the server and how to reach it.
pub const SERVER: EntryPoint = EntryPoint {
    name: "SERVER",
    used_by: "Connection.connect, stats",
    options: &[
        R_HOST,
        R_PORT,
        R_TLS,
        R_AUTH,
        R_CONNECT_TIMEOUT,
        R_SOCKET_TIMEOUT,
    ],
};

const DISTRIBUTED_LOCK_OPTIONS: [Rule; 15] = [
    required(rule("key", &NON_EMPTY_STRING, Dflockd)),
    with_default(
        rule("acquireTimeoutS", &TIMEOUT_SECONDS, Dflockd),
        Default::Number(DEFAULT_ACQUIRE_TIMEOUT_S as f64),
    ),
    rule("leaseTtlS", &LEASE_SECONDS, Dflockd),
    rule("servers", &SERVERS, Dflockd),
    R_HOST,
    R_PORT,
    rule("shardingStrategy", &FUNCTION, Dflockd),
    R_RENEW_RATIO,
    R_TLS,
    R_AUTH,
    rule("onLockLost", &FUNCTION, Dflockd),
    R_MODE,
    R_CONNECT_TIMEOUT,
    R_SOCKET_TIMEOUT,
    // Caps the renew interval (a server started with a short --read-timeout).
    R_RENEW_MAX_INTERVAL,
];

/// `new DistributedLock(options)`: dflockd-client's names, seconds as it has them.
pub const DISTRIBUTED_LOCK: EntryPoint = EntryPoint {
    name: "DISTRIBUTED_LOCK",
    used_by: "new DistributedLock",
    options: &DISTRIBUTED_LOCK_OPTIONS,
};

/// `new DistributedSemaphore(options)`: DistributedLock's and its required `limit`.
pub const DISTRIBUTED_SEMAPHORE: EntryPoint = EntryPoint {
    name: "DISTRIBUTED_SEMAPHORE",
    used_by: "new DistributedSemaphore",
    options: &{
        let mut all = [required(rule("limit", &LIMIT, Dflockd)); 16];
        let mut i = 0;
        while i < DISTRIBUTED_LOCK_OPTIONS.len() {
            all[i] = DISTRIBUTED_LOCK_OPTIONS[i];
            i += 1;
        }
        all
    },
};

/// `DistributedLock#acquire(options)` and `#enqueue(options)` (dflockd-client's `force`, and a
/// signal).
pub const DISTRIBUTED_ACQUIRE: EntryPoint = EntryPoint {
    name: "DISTRIBUTED_ACQUIRE",
    used_by: "DistributedLock#acquire, DistributedLock#enqueue",
    options: &[
        with_default(rule("force", &BOOLEAN, Dflockd), Default::Bool(false)),
        R_SIGNAL,
    ],
};

/// `DistributedLock#wait(timeoutS, options)`.
pub const DISTRIBUTED_WAIT: EntryPoint = EntryPoint {
    name: "DISTRIBUTED_WAIT",
    used_by: "DistributedLock#wait",
    options: &[R_SIGNAL],
};

/// The query parameters of a `dflockd://` URL (their text parsed in `lib/dflockd/url.js`).
pub const URL_QUERY: EntryPoint = EntryPoint {
    name: "URL_QUERY",
    used_by: "dflockd:// URLs",
    options: &[
        rule("limit", &LIMIT, Dflockd),
        rule("mode", &MODE, Dflockd),
        rule("leaseTtl", &LEASE_SECONDS, Dflockd),
        rule("tls", &BOOLEAN, Dflockd),
        rule("ca", &NON_EMPTY_STRING, Dflockd),
    ],
};

/// The options of the own CLI (`sema-native acquire|try-acquire|release|status|clean|wait|run …`)
/// that take a value, by the kind their value has once parsed (`--timeout 2s` → 2000 ms); the text
/// forms (`500ms`, `2s`, `off`) are `lib/cli/common.js`'s, which command takes which flag
/// `lib/cli/own.js`'s. The `sema` and `semats` front ends keep those tools' own flags and words.
pub const CLI_FLAGS: EntryPoint = EntryPoint {
    name: "CLI_FLAGS",
    used_by: "sema-native <command> --flag value",
    options: &[
        R_TIMEOUT,
        R_TAG,
        R_PID,
        rule("stale", &STALE_TIMEOUT, File),
        rule("ca", &NON_EMPTY_STRING, Dflockd),
        R_LIMIT,
        R_MODE,
    ],
};

/// Every entry point, in the order of the export.
pub const ENTRY_POINTS: &[EntryPoint] = &[
    ACQUIRE,
    RELEASE,
    STATUS,
    WAIT,
    CONFIG,
    SEMATS_ACQUIRE,
    SEMATS_INFO,
    SERVER,
    DISTRIBUTED_LOCK,
    DISTRIBUTED_SEMAPHORE,
    DISTRIBUTED_ACQUIRE,
    DISTRIBUTED_WAIT,
    URL_QUERY,
    CLI_FLAGS,
];

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

/// The message for a lease above [`MAX_LEASE_TTL_S`], naming the unit and what was probably meant:
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
