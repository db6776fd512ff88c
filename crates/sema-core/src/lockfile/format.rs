//! The lock-file format: what we write, and how we read what anyone writes.
//!
//! We write exactly what `semats` and `sema` write (`pid=`, `timestamp=`, optional `tag=`, LF
//! line endings, no BOM), followed by keys of our own (`host=`, `start=`, `heartbeat=`, `token=`)
//! that both other tools ignore.
//!
//! We parse with `semats`' rules (its `parseLockInfo`), because they are
//! the more lenient of the two and accept everything either tool and the spec's shell example
//! write (CRLF, BOM, unknown keys, missing tag):
//! - split on `\n`, trim each line like JS `String.prototype.trim` (ES whitespace, line
//!   terminators and U+FEFF), ignore lines without `=`, split key and value at the first `=`;
//! - the last duplicate key wins, unknown keys are ignored;
//! - integers follow JS `parseInt(v, 10)` (leading whitespace, optional sign, leading digits,
//!   trailing garbage ignored). **Our documented rule:** a value whose magnitude exceeds
//!   2^53-1 (where JS starts rounding) counts as missing;
//! - `pid` is checked before `timestamp`; `tag` is everything after the first `=`;
//! - our own `start` and `heartbeat` must be plain decimal `u64`s (otherwise ignored); `host` and
//!   `token` are raw strings.

use std::fmt;

/// Largest integer JS represents exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Files larger than this are never parsed (they count as unparseable).
pub const MAX_LOCK_FILE_BYTES: usize = 1024 * 1024;

/// What a lock file says about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockInfo {
    /// The recorded owner pid (any integer a foreign file may carry; ours are positive).
    pub pid: i64,
    /// Unix seconds when the lock was taken (or last refreshed by a heartbeat).
    pub timestamp: i64,
    /// Optional description. `Some("")` writes `tag=`.
    pub tag: Option<String>,
    /// Our host identity (`<hostname>:<boot_id>:<pid-ns inode>` on Linux). Absent in foreign files.
    pub host: Option<String>,
    /// The holder's process start time in clock ticks since boot (Linux `/proc/<pid>/stat` field 22).
    pub start: Option<u64>,
    /// The holder's heartbeat period in milliseconds (`heartbeat=`), written with `host=` while the
    /// heartbeat runs: a waiter on another host judges the holder by this period (see
    /// `stale::remote`). Absent in foreign files, and when the holder's heartbeat is off.
    pub heartbeat_ms: Option<u64>,
    /// Our ownership token (32 lowercase hex). Absent in foreign files.
    pub token: Option<String>,
}

impl LockInfo {
    /// The exact bytes we write: `pid=`, `timestamp=`, `tag=` (if `Some`), then `host=`,
    /// `start=`, `heartbeat=`, `token=` (each if `Some`), every line LF-terminated.
    ///
    /// The tag, host and token are passed through [`sanitize_tag`] without a length limit (C0
    /// controls and DEL become spaces), so no value can inject a line. Cut the tag to the
    /// configured length before (or use [`LockInfo::serialize_with_max_tag`]).
    pub fn serialize(&self) -> String {
        self.serialize_with_max_tag(None)
    }

    /// Like [`LockInfo::serialize`], cutting the tag to `max_tag_utf16_units` UTF-16 code units
    /// first (semats' `serializeLockInfo(info, maxTagLength)`).
    pub fn serialize_with_max_tag(&self, max_tag_utf16_units: Option<usize>) -> String {
        use std::fmt::Write as _;
        let extra = self.tag.as_ref().map_or(0, |t| t.len() + 5)
            + self.host.as_ref().map_or(0, |h| h.len() + 6)
            + self.token.as_ref().map_or(0, |t| t.len() + 7);
        let mut out = String::with_capacity(64 + extra);
        let _ = write!(out, "pid={}\ntimestamp={}\n", self.pid, self.timestamp);
        if let Some(tag) = &self.tag {
            out.push_str("tag=");
            push_sanitized(&mut out, tag, max_tag_utf16_units);
            out.push('\n');
        }
        if let Some(host) = &self.host {
            out.push_str("host=");
            push_sanitized(&mut out, host, None);
            out.push('\n');
        }
        if let Some(start) = self.start {
            let _ = writeln!(out, "start={start}");
        }
        if let Some(ms) = self.heartbeat_ms {
            let _ = writeln!(out, "heartbeat={ms}");
        }
        if let Some(token) = &self.token {
            out.push_str("token=");
            push_sanitized(&mut out, token, None);
            out.push('\n');
        }
        out
    }
}

/// Why a lock file could not be parsed. Display strings are semats' messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// No usable `pid=` line. Also reported for files that could not be read or exceed
    /// [`MAX_LOCK_FILE_BYTES`].
    MissingPid,
    /// A pid but no usable `timestamp=` line.
    MissingTimestamp,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::MissingPid => f.write_str("Missing pid in lock file"),
            ParseError::MissingTimestamp => f.write_str("Missing timestamp in lock file"),
        }
    }
}

impl std::error::Error for ParseError {}

/// ES `WhiteSpace` plus `LineTerminator`: the set JS `String.prototype.trim` and `parseInt`
/// skip. Includes U+FEFF (so a UTF-8 BOM is trimmed) and excludes U+0085 (unlike Rust's
/// `char::is_whitespace`).
pub fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{0009}'
            | '\u{000A}'
            | '\u{000B}'
            | '\u{000C}'
            | '\u{000D}'
            | '\u{0020}'
            | '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// JS `String.prototype.trim`.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

/// JS `parseInt(v, 10)`, restricted to safe integers: `None` where JS gives `NaN` and where
/// the magnitude exceeds 2^53-1 (our documented rule).
pub fn parse_js_int(value: &str) -> Option<i64> {
    let s = value.trim_start_matches(is_js_whitespace);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut magnitude: u64 = 0;
    let mut any = false;
    for b in digits.bytes() {
        if !b.is_ascii_digit() {
            break;
        }
        any = true;
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(b - b'0'))?;
        if magnitude > MAX_SAFE_INTEGER {
            return None;
        }
    }
    if !any {
        return None;
    }
    // magnitude <= 2^53-1, so the cast is exact.
    let m = magnitude as i64;
    Some(if negative { -m } else { m })
}

/// Strict unsigned decimal (our `start=` key): ASCII digits only, must fit `u64`.
fn parse_strict_u64(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// What the real `sema` 0.1.0 reads from a lock file (its `LockInfo::parse`): strict UTF-8,
/// `str::lines`, `str::trim`, `u32`/`u64` by `str::parse` (so `+5` is 5 and `5x` is nothing), the
/// last duplicate wins. The CLI's `sema` front end shows what `sema` would show, so it reads with
/// sema's rules rather than ours: here, in Rust, where those rules are the language's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaLockInfo {
    pub pid: u32,
    pub timestamp: u64,
    pub tag: Option<String>,
}

/// Parse lock-file bytes as `sema` does; `None` where `sema`'s `lock_info()` gives `None`.
pub fn parse_sema_lock_info(bytes: &[u8]) -> Option<SemaLockInfo> {
    let content = std::str::from_utf8(bytes).ok()?;
    let (mut pid, mut timestamp, mut tag) = (None, None, None);
    for line in content.lines() {
        let line = line.trim();
        if let Some((key, value)) = line.split_once('=') {
            match key {
                "pid" => pid = value.parse().ok(),
                "timestamp" => timestamp = value.parse().ok(),
                "tag" => tag = Some(value.to_string()),
                _ => {}
            }
        }
    }
    Some(SemaLockInfo {
        pid: pid?,
        timestamp: timestamp?,
        tag,
    })
}

/// Parse lock-file content with semats' rules (see the module docs).
pub fn parse_lock_info(content: &str) -> Result<LockInfo, ParseError> {
    // `Option<Option<..>>` would not express "last duplicate wins, a later bad value wipes an
    // earlier good one" more clearly than plain assignment per line, which is what semats does.
    let mut pid: Option<i64> = None;
    let mut timestamp: Option<i64> = None;
    let mut tag: Option<String> = None;
    let mut host: Option<String> = None;
    let mut start: Option<u64> = None;
    let mut token: Option<String> = None;
    let mut heartbeat_ms: Option<u64> = None;
    for line in content.split('\n') {
        let trimmed = js_trim(line);
        let Some(eq) = trimmed.find('=') else {
            continue;
        };
        let key = &trimmed[..eq];
        let value = &trimmed[eq + 1..];
        match key {
            "pid" => pid = parse_js_int(value),
            "timestamp" => timestamp = parse_js_int(value),
            "tag" => tag = Some(value.to_string()),
            "host" => host = Some(value.to_string()),
            "start" => start = parse_strict_u64(value),
            "token" => token = Some(value.to_string()),
            "heartbeat" => heartbeat_ms = parse_strict_u64(value),
            _ => {}
        }
    }
    let pid = pid.ok_or(ParseError::MissingPid)?;
    let timestamp = timestamp.ok_or(ParseError::MissingTimestamp)?;
    Ok(LockInfo {
        pid,
        timestamp,
        tag,
        host,
        start,
        heartbeat_ms,
        token,
    })
}

/// The line that makes a lock file a shared lock's *base* (see `shared`): the readers' group,
/// whose holders are the live `<path>.reader-<hex>` files, not the pid it names.
pub const SHARED_BASE_LINE: &str = "mode=shared";

/// Whether `content` is a shared base: its last `mode=` line (semats' parse rules: trimmed,
/// split at the first `=`, the last duplicate wins) says `shared`.
pub fn is_shared_base(content: &str) -> bool {
    let mut shared = false;
    for line in content.split('\n') {
        let trimmed = js_trim(line);
        if let Some(value) = trimmed.strip_prefix("mode=") {
            shared = value == "shared";
        }
    }
    shared
}

/// The bytes of a shared base naming `pid` (a live reader) at `timestamp`: semats' three keys
/// and the mode line, no `host=`/`token=`, so that `sema` and `semats` judge it by age (kept
/// young by the readers' heartbeat) and by that pid.
pub fn serialize_shared_base(pid: i64, timestamp: i64, tag: Option<&str>) -> String {
    let info = LockInfo {
        pid,
        timestamp,
        tag: tag.map(str::to_string),
        ..LockInfo::default()
    };
    let mut out = info.serialize();
    out.push_str(SHARED_BASE_LINE);
    out.push('\n');
    out
}

/// Decode bytes the way Node's `readFileSync(path, 'utf-8')` does: invalid UTF-8 becomes
/// U+FFFD, a BOM is kept (the parser trims it).
pub fn read_lock_bytes_lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// semats' tag rule: every U+0000–U+001F and U+007F becomes a space, then the result is cut
/// to `max_utf16_units` UTF-16 code units (`None` = no limit). A cut that would split a
/// surrogate pair leaves U+FFFD in its place, which is what Node writes for the lone high
/// surrogate JS `slice` leaves.
pub fn sanitize_tag(tag: &str, max_utf16_units: Option<usize>) -> String {
    let mut out = String::with_capacity(tag.len());
    push_sanitized(&mut out, tag, max_utf16_units);
    out
}

/// [`sanitize_tag`] appended to `out`.
fn push_sanitized(out: &mut String, tag: &str, max_utf16_units: Option<usize>) {
    // Nothing to replace and short enough (UTF-16 units never exceed UTF-8 bytes): as is.
    if max_utf16_units.is_none_or(|max| tag.len() <= max)
        && !tag.bytes().any(|b| b < 0x20 || b == 0x7f)
    {
        out.push_str(tag);
        return;
    }
    let mut units = 0usize;
    for c in tag.chars() {
        let c = if (c as u32) < 0x20 || c == '\u{7f}' {
            ' '
        } else {
            c
        };
        if let Some(max) = max_utf16_units {
            let width = c.len_utf16();
            if units + width > max {
                if units < max {
                    out.push('\u{FFFD}');
                }
                break;
            }
            units += width;
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(content: &str) -> LockInfo {
        match parse_lock_info(content) {
            Ok(info) => info,
            Err(e) => panic!("expected {content:?} to parse, got {e}"),
        }
    }

    #[test]
    fn parse_int_matches_js_parse_int() {
        let cases: &[(&str, Option<i64>)] = &[
            ("12abc", Some(12)),
            ("1.9", Some(1)),
            ("+5", Some(5)),
            ("-1", Some(-1)),
            ("0x10", Some(0)),
            (" 7", Some(7)),
            ("\u{FEFF}7", Some(7)),
            ("\u{3000}7", Some(7)),
            ("99999999999", Some(99_999_999_999)),
            ("007", Some(7)),
            ("1e5", Some(1)),
            ("-0", Some(0)),
            ("", None),
            ("abc", None),
            ("+", None),
            ("-", None),
            ("--1", None),
            ("+-1", None),
            (" ", None),
            ("Infinity", None),
            ("\u{0085}7", None), // NEL is not JS whitespace
            ("9007199254740991", Some(9_007_199_254_740_991)),
            ("-9007199254740991", Some(-9_007_199_254_740_991)),
            ("9007199254740992", None),
            ("99999999999999999999999999", None),
            ("00000000000000000000000000000001", Some(1)),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_js_int(input), *expected, "parseInt({input:?})");
        }
    }

    /// semats' reading of every quirk of the format (what its `parseLockInfo` returns).
    #[test]
    fn a2_table_ts_column() {
        // Reading bytes: lossy
        let lossy = read_lock_bytes_lossy(b"pid=1\ntimestamp=2\ntag=\xff\xfe\n");
        assert_eq!(ok(&lossy).tag.as_deref(), Some("\u{FFFD}\u{FFFD}"));
        // Line split on \n; CRLF / mixed endings OK
        assert_eq!(ok("pid=1\r\ntimestamp=2\r\n").timestamp, 2);
        assert_eq!(
            ok("pid=1\r\ntimestamp=2\ntag=x\r\n").tag.as_deref(),
            Some("x")
        );
        // Lone CR: one line, fails ("pid=1\rtimestamp=2\r" -> pid value "1\rtimestamp=2" -> 1)
        assert_eq!(
            parse_lock_info("pid=1\rtimestamp=2\r"),
            Err(ParseError::MissingTimestamp)
        );
        // Trimming whole line incl. U+FEFF; BOM at the start parses
        assert_eq!(ok("\u{FEFF}pid=1\ntimestamp=2\n").pid, 1);
        assert_eq!(ok("  pid=1  \n\ttimestamp=2\u{00A0}\n").timestamp, 2);
        // Key/value split at the first '='; key not trimmed separately
        assert_eq!(
            parse_lock_info("pid = 1\ntimestamp=2"),
            Err(ParseError::MissingPid)
        );
        // Lines without '=', blank lines, unknown keys ignored
        let info = ok("hello\n\n\npid=3\nfoo=bar\ntimestamp=4\n\n");
        assert_eq!((info.pid, info.timestamp, info.tag), (3, 4, None));
        // Duplicates: last wins; a later bad value wipes an earlier good one
        assert_eq!(ok("pid=1\npid=2\ntimestamp=3").pid, 2);
        assert_eq!(
            parse_lock_info("pid=1\npid=abc\ntimestamp=3"),
            Err(ParseError::MissingPid)
        );
        // pid lenient parseInt
        assert_eq!(ok("pid=12abc\ntimestamp=0").pid, 12);
        assert_eq!(ok("pid=1.9\ntimestamp=0").pid, 1);
        assert_eq!(ok("pid=+5\ntimestamp=0").pid, 5);
        assert_eq!(ok("pid=-1\ntimestamp=0").pid, -1);
        assert_eq!(ok("pid=0x10\ntimestamp=0").pid, 0);
        assert_eq!(ok("pid= 7\ntimestamp=0").pid, 7);
        assert_eq!(ok("pid=99999999999\ntimestamp=0").pid, 99_999_999_999);
        // timestamp: negative allowed, 1e5 -> 1
        assert_eq!(ok("pid=1\ntimestamp=-5").timestamp, -5);
        assert_eq!(ok("pid=1\ntimestamp=1e5").timestamp, 1);
        // tag: everything after the first '=', trailing whitespace lost, leading kept
        assert_eq!(
            ok("pid=1\ntimestamp=2\ntag= a=b=c  ").tag.as_deref(),
            Some(" a=b=c")
        );
        assert_eq!(ok("pid=1\ntimestamp=2\ntag=").tag.as_deref(), Some(""));
        // NUL as separator: one line, pid=123, then Missing timestamp
        assert_eq!(
            parse_lock_info("pid=123\0timestamp=0\0tag=test"),
            Err(ParseError::MissingTimestamp)
        );
        // Empty, whitespace only, '===', '=1234', garbage -> error
        for bad in ["", "   \n\t\n", "===", "=1234", "\u{1}\u{2}garbage", "pid="] {
            assert_eq!(parse_lock_info(bad), Err(ParseError::MissingPid), "{bad:?}");
        }
        // pid checked before timestamp
        assert_eq!(parse_lock_info("timestamp=x"), Err(ParseError::MissingPid));
        assert_eq!(parse_lock_info("pid=1"), Err(ParseError::MissingTimestamp));
        // Error text
        assert_eq!(
            ParseError::MissingPid.to_string(),
            "Missing pid in lock file"
        );
        assert_eq!(
            ParseError::MissingTimestamp.to_string(),
            "Missing timestamp in lock file"
        );
    }

    #[test]
    fn our_extra_keys() {
        let info = ok("pid=1\ntimestamp=2\nhost=h:b:1\nstart=+5\ntoken=abc\n");
        assert_eq!(info.host.as_deref(), Some("h:b:1"));
        assert_eq!(info.start, None, "start is strict");
        assert_eq!(info.token.as_deref(), Some("abc"));
        assert_eq!(ok("pid=1\ntimestamp=2\nstart=42").start, Some(42));
        assert_eq!(
            ok("pid=1\ntimestamp=2\nstart=18446744073709551616").start,
            None
        );
    }

    #[test]
    fn serialize_exact_bytes() {
        let mut info = LockInfo {
            pid: 42,
            timestamp: 1_700_000_000,
            ..Default::default()
        };
        assert_eq!(info.serialize(), "pid=42\ntimestamp=1700000000\n");
        info.tag = Some(String::new());
        assert_eq!(info.serialize(), "pid=42\ntimestamp=1700000000\ntag=\n");
        info.tag = Some("a\nb\r\nc".into());
        info.host = Some("h:b:1".into());
        info.start = Some(7);
        info.token = Some("00ff".into());
        assert_eq!(
            info.serialize(),
            "pid=42\ntimestamp=1700000000\ntag=a b  c\nhost=h:b:1\nstart=7\ntoken=00ff\n"
        );
    }

    #[test]
    fn sanitize_tag_rules() {
        assert_eq!(sanitize_tag("a\tb\0c\u{1b}d\u{7f}e", None), "a b c d e");
        assert_eq!(sanitize_tag("\u{85}\u{2028}", None), "\u{85}\u{2028}");
        assert_eq!(sanitize_tag("abcdef", Some(3)), "abc");
        assert_eq!(sanitize_tag("abc", Some(0)), "");
        // 😀 is two UTF-16 units: a cut after one leaves U+FFFD, like Node.
        assert_eq!(sanitize_tag("a😀b", Some(2)), "a\u{FFFD}");
        assert_eq!(sanitize_tag("a😀b", Some(3)), "a😀");
        assert_eq!(sanitize_tag("😀", Some(1)), "\u{FFFD}");
        assert_eq!(sanitize_tag("é", Some(1)), "é");
    }

    #[test]
    fn sema_rules() {
        let p = |b: &[u8]| parse_sema_lock_info(b);
        let info = p(b"\xef\xbb\xbfx=1\r\npid=+7\ntimestamp=12\ntag= a=b \n").unwrap();
        // A BOM makes the first line's key "\u{feff}x" (str::trim keeps U+FEFF); `+7` is 7.
        assert_eq!((info.pid, info.timestamp), (7, 12));
        assert_eq!(info.tag.as_deref(), Some(" a=b"));
        assert_eq!(
            p(b"pid=1\ntimestamp=2\npid=x\n"),
            None,
            "a later bad pid wipes the good one"
        );
        assert_eq!(p(b"pid=4294967296\ntimestamp=2\n"), None, "pid is a u32");
        assert_eq!(
            p(b"pid=1\ntimestamp=18446744073709551615\n")
                .unwrap()
                .timestamp,
            u64::MAX
        );
        assert_eq!(p(b"pid=1\ntimestamp=2\xff\n"), None, "not UTF-8");
        assert_eq!(
            p("pid=1\u{85}\ntimestamp=2".as_bytes()).unwrap().pid,
            1,
            "U+0085 is trimmed"
        );
    }
}
