//! The entry points: each function's (or constructor's) options, with their kinds, backends and
//! defaults.

use super::kinds::*;
use super::*;
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
        rule("acquireTimeoutS", &ACQUIRE_TIMEOUT_SECONDS, Dflockd),
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

/// `LockManager#request(name, options, callback)`: the Web Locks spec's `LockOptions`. Their values
/// are converted as WebIDL does (`lib/locks/manager.js`: `ifAvailable: 1` is `true`, a bad `mode`
/// or `signal` a `TypeError`); the table gives the names, so that a misspelt one is refused.
pub const LOCK_REQUEST: EntryPoint = EntryPoint {
    name: "LOCK_REQUEST",
    used_by: "LockManager#request",
    options: &[
        with_default(rule("mode", &MODE, Both), Default::Text("exclusive")),
        with_default(rule("ifAvailable", &BOOLEAN, Both), Default::Bool(false)),
        with_default(rule("steal", &BOOLEAN, Both), Default::Bool(false)),
        R_SIGNAL,
    ],
};

/// A name an entry point does not have but users bring from elsewhere, refused with what to write
/// instead (in place of the nearest-name hint).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Instead {
    /// The entry point's `name`.
    pub entry: &'static str,
    /// The name refused.
    pub name: &'static str,
    /// The whole message.
    pub message: &'static str,
}

/// Every [`Instead`].
pub const INSTEAD: &[Instead] = &[Instead {
    entry: "LOCK_REQUEST",
    name: "timeout",
    // The spec's LockOptions have no timeout: a signal that aborts after the time does it.
    message:
        "there is no option 'timeout': pass signal: AbortSignal.timeout(ms) instead (the request \
              rejects with a TimeoutError DOMException if the lock is not granted by then)",
}];

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
    LOCK_REQUEST,
];
