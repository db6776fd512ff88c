//! The kinds of every table: how each option's value is checked (type, unit, range, the
//! "expected …" words of its message).

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
/// dflockd-client's acquireTimeoutS as a user passes it: [`TIMEOUT_SECONDS`] up to
/// [`MAX_ACQUIRE_TIMEOUT_S`] (above it the message names the unit, as for a lease).
pub const ACQUIRE_TIMEOUT_SECONDS: Kind = Kind {
    name: "acquireTimeoutSeconds",
    max: Some(MAX_ACQUIRE_TIMEOUT_S as f64),
    expected: "a whole number of seconds from 0 to 3600 (0: try once)",
    ..TIMEOUT_SECONDS
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
pub const NON_EMPTY_STRING: Kind = kind("nonEmptyString", "nonEmptyString", "a non-empty string");
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
    ACQUIRE_TIMEOUT_SECONDS,
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
