//! Pure protocol checks: sharding vectors (the other clients' CRC-32 values), request validation, reply parsing.

use sema_core::dflockd::protocol::{
    encode_raw, parse_acquire_reply, parse_auth_reply, parse_enqueue_reply, parse_release_reply,
    parse_renew_reply, parse_stats_reply, validate_key, MAX_SECONDS,
};
use sema_core::dflockd::{
    parse_stats, stable_hash_shard, AcquireReply, EnqueueReply, ErrorCode, Request,
};
use sema_core::options::MAX_LEASE_TTL_S;

/// Every test's path contains `dflockd` so `cargo test -p sema-core dflockd` selects it.
mod dflockd {
    #![allow(clippy::module_inception)]
    use super::*;

    #[test]
    fn shard_vectors_match_the_official_clients() {
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        for (key, crc) in [
            ("test-key", 0x32db_1f79u32),
            ("my-key", 0xd6e3_3ac1),
            ("a", 0xe8b7_be43),
            ("worker-pool", 0xe746_ac78),
            ("ключ✓", 0x9116_6f7b),
            ("", 0),
        ] {
            assert_eq!(crc32fast::hash(key.as_bytes()), crc, "{key}");
        }
        let cases = [
            ("test-key", 3, 1),
            ("my-key", 3, 2),
            ("my-key", 5, 2),
            ("a", 3, 0),
            ("worker-pool", 5, 3),
            ("ключ✓", 3, 2),
            ("", 7, 0),
            ("anything", 1, 0),
        ];
        for (key, n, want) in cases {
            assert_eq!(stable_hash_shard(key, n).ok(), Some(want), "{key} % {n}");
        }
        assert_eq!(
            stable_hash_shard("k", 0).map_err(|e| e.code()),
            Err(ErrorCode::InvalidArgument)
        );
    }

    #[test]
    fn key_rules() {
        assert!(validate_key("k").is_ok());
        assert!(validate_key(&"k".repeat(256)).is_ok());
        assert!(validate_key("ключ✓").is_ok());
        for bad in ["", " ", "a b", "a\tb", "a\rb", "a\nb", "a\0b"] {
            assert_eq!(
                validate_key(bad).map_err(|e| e.code()),
                Err(ErrorCode::InvalidArgument),
                "{bad:?}"
            );
        }
        assert!(validate_key(&"k".repeat(257)).is_err());
        // 255 ASCII + one 2-byte char = 257 bytes.
        assert!(validate_key(&format!("{}é", "k".repeat(255))).is_err());
    }

    #[test]
    fn numeric_bounds() {
        let ok = |r: Request<'_>| r.encode().is_ok();
        assert!(ok(Request::Lock {
            key: "k",
            timeout_s: 0,
            ttl_s: Some(1)
        }));
        assert!(ok(Request::Lock {
            key: "k",
            timeout_s: MAX_SECONDS,
            ttl_s: Some(MAX_LEASE_TTL_S)
        }));
        assert!(!ok(Request::Lock {
            key: "k",
            timeout_s: MAX_SECONDS + 1,
            ttl_s: None
        }));
        assert!(!ok(Request::Lock {
            key: "k",
            timeout_s: 1,
            ttl_s: Some(MAX_LEASE_TTL_S + 1)
        }));
        assert!(!ok(Request::Renew {
            key: "k",
            token: "t",
            ttl_s: Some(0)
        }));
        assert!(!ok(Request::SemLock {
            key: "k",
            timeout_s: 1,
            limit: 0,
            ttl_s: None
        }));
        assert!(!ok(Request::Auth { token: "" }));
        assert!(!ok(Request::Auth { token: "a\nb" }));
        assert!(!ok(Request::Auth {
            token: &"a".repeat(257)
        }));
    }

    #[test]
    fn raw_requests() {
        let (bytes, blocking) = encode_raw("l", "k", "10 5").expect("l");
        assert_eq!(bytes, b"l\nk\n10 5\n".to_vec());
        assert_eq!(blocking, Some(10));
        let (_, blocking) = encode_raw("sw", "k", " 3 ").expect("sw");
        assert_eq!(blocking, Some(3));
        let (_, blocking) = encode_raw("r", "k", "tok").expect("r");
        assert_eq!(blocking, None);
        let (bytes, _) = encode_raw("stats", "_", "").expect("stats");
        assert_eq!(bytes, b"stats\n_\n\n".to_vec());
        // Non-keyed commands may carry any framing-safe key line.
        assert!(encode_raw("auth", "", "tok").is_ok());
        for (cmd, key, arg) in [
            ("", "k", ""),
            ("Lx", "k", ""),
            ("l\n", "k", ""),
            ("l", "", "1"),
            ("l", "k\0", "1"),
            ("x", "k", "a\rb"),
        ] {
            assert!(
                encode_raw(cmd, key, arg).is_err(),
                "{cmd:?} {key:?} {arg:?}"
            );
        }
    }

    #[test]
    fn reply_parsing_is_exact() {
        let tok = "0123456789abcdef0123456789abcdef";
        assert!(matches!(
            parse_acquire_reply(&format!("ok {tok} 33"), "l"),
            Ok(AcquireReply::Granted(g)) if g.token == tok && g.lease_s == 33
        ));
        assert!(matches!(
            parse_enqueue_reply(&format!("acquired {tok} 5"), "e"),
            Ok(EnqueueReply::Acquired(g)) if g.lease_s == 5
        ));
        assert_eq!(parse_enqueue_reply("queued", "e"), Ok(EnqueueReply::Queued));
        assert_eq!(
            parse_acquire_reply("timeout", "w"),
            Ok(AcquireReply::TimedOut)
        );
        for bad in [
            "timeout ",
            "timeouts",
            "queued",
            "acquired x 1",
            "ok  tok 1",
            "ok tok -1",
        ] {
            assert_eq!(
                parse_acquire_reply(bad, "l").map_err(|e| e.code()),
                Err(ErrorCode::ProtocolError),
                "{bad:?}"
            );
        }
        assert_eq!(parse_renew_reply("ok 32", "n"), Ok(Some(32)));
        assert_eq!(parse_renew_reply("ok", "n"), Ok(None));
        for bad in ["ok -1", "ok 1.5", "ok 1 2", "okay"] {
            assert!(parse_renew_reply(bad, "n").is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_renew_reply("error", "n").map_err(|e| e.code()),
            Err(ErrorCode::ServerError)
        );
        assert!(parse_release_reply("ok", "r").is_ok());
        assert_eq!(
            parse_release_reply("error", "r").map_err(|e| e.code()),
            Err(ErrorCode::ServerError)
        );
        assert!(parse_auth_reply("ok").is_ok());
        let e = parse_auth_reply("error_auth").expect_err("auth");
        assert_eq!(
            (e.code(), e.reply()),
            (ErrorCode::AuthFailed, Some("error_auth"))
        );
        // The words say whether a token was sent: the reply to `auth` answers a sent one; an
        // `error_auth` to any other command means none was sent.
        assert!(e
            .message()
            .starts_with("authentication failed: the server refused the token sent"));
        let e = parse_acquire_reply("error_auth", "l").expect_err("auth required");
        assert_eq!(e.code(), ErrorCode::AuthFailed);
        assert!(e
            .message()
            .starts_with("authentication failed: the server requires a token and none was sent"));
        assert_eq!(parse_stats_reply("ok {}"), Ok("{}"));
        assert!(parse_stats_reply("ok").is_err());
        assert!(parse_stats_reply("error").is_err());
    }

    #[test]
    fn stats_json_shape() {
        let json = r#"{"connections":2,"locks":[{"key":"a\u0000b","owner_conn_id":3,"lease_expires_in_s":32.997458036,"waiters":1}],"semaphores":[{"key":"s","limit":3,"holders":2,"waiters":0}],"idle_locks":[{"key":"i","idle_s":1.5}],"idle_semaphores":[]}"#;
        let s = parse_stats(json).expect("parse");
        assert_eq!(s.connections, 2);
        assert_eq!(s.locks[0].key, "a\0b");
        assert_eq!(s.locks[0].owner_conn_id, 3);
        assert_eq!(s.semaphores[0].limit, 3);
        assert_eq!(s.idle_locks[0].idle_s, 1.5);
        assert!(s.idle_semaphores.is_empty());
        assert_eq!(
            parse_stats("{").map_err(|e| e.code()),
            Err(ErrorCode::ProtocolError)
        );
    }
}
