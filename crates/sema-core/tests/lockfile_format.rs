//! Property tests of the format: the parser never panics, what we write reads back, tags never
//! inject lines.

use proptest::prelude::*;
use sema_core::lockfile::*;

const SAFE: i64 = 9_007_199_254_740_991;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parser_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = read_lock_bytes_lossy(&bytes);
        let _ = parse_lock_info(&text);
    }

    #[test]
    fn parser_never_panics_on_line_soup(
        lines in proptest::collection::vec(
            prop_oneof![
                "pid=[ +\\-0-9a-z.]{0,24}",
                "timestamp=[ +\\-0-9e.]{0,24}",
                "tag=.{0,40}",
                "start=[0-9+]{0,25}",
                "[ \t\u{feff}\u{a0}]{0,3}[a-z=]{0,10}",
                ".{0,30}",
            ],
            0..12,
        ),
        sep in prop_oneof!["\n", "\r\n", "\r", "\0"],
    ) {
        let _ = parse_lock_info(&lines.join(&sep));
    }

    #[test]
    fn serialize_parse_round_trip(
        pid in -SAFE..=SAFE,
        timestamp in -SAFE..=SAFE,
        tag in proptest::option::of(".{0,64}"),
        max in proptest::option::of(0usize..80),
        start in proptest::option::of(any::<u64>()),
        with_ours in any::<bool>(),
    ) {
        let sanitized = tag.as_deref().map(|t| sanitize_tag(t, max));
        let info = LockInfo {
            heartbeat_ms: None,
            pid,
            timestamp,
            tag: sanitized.clone(),
            host: with_ours.then(|| host_identity().to_string()),
            start: if with_ours { start } else { None },
            token: with_ours.then(|| "0123456789abcdef0123456789abcdef".to_string()),
        };
        let text = info.serialize();
        let head = format!("pid={pid}\ntimestamp={timestamp}\n");
        prop_assert!(text.starts_with(&head));
        prop_assert_eq!(text.matches("\npid=").count() + usize::from(text.starts_with("pid=")), 1);
        let parsed = parse_lock_info(&text).unwrap();
        prop_assert_eq!(parsed.pid, pid);
        prop_assert_eq!(parsed.timestamp, timestamp);
        // The line is trimmed like JS does: trailing whitespace of the tag is lost (as in semats).
        let expected_tag = sanitized.as_deref().map(|t| t.trim_end_matches(is_js_whitespace).to_string());
        prop_assert_eq!(parsed.tag, expected_tag);
        prop_assert_eq!(parsed.host, info.host);
        prop_assert_eq!(parsed.start, info.start);
        prop_assert_eq!(parsed.token, info.token);
    }

    #[test]
    fn sanitized_tags_are_clean_and_bounded(tag in ".{0,200}", max in proptest::option::of(0usize..100)) {
        let s = sanitize_tag(&tag, max);
        let clean = !s.chars().any(|c| (c as u32) < 0x20 || c == '\x7f');
        prop_assert!(clean);
        if let Some(max) = max {
            prop_assert!(s.encode_utf16().count() <= max);
        }
        prop_assert_eq!(sanitize_tag(&s, None), s.clone());
    }

    #[test]
    fn parse_js_int_agrees_with_a_reference(n in -SAFE..=SAFE, junk in "[a-z. x]{0,5}", ws in "[ \t]{0,2}") {
        prop_assert_eq!(parse_js_int(&format!("{ws}{n}{junk}")), Some(n));
    }
}
