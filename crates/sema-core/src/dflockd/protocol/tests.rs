//! Unit tests of the wire codec.

use super::*;
use crate::dflockd::error::ErrorCode;

#[test]
fn encodes_every_command() {
    let cases: Vec<(Request<'_>, &str)> = vec![
        (Request::Auth { token: "s3 cret" }, "auth\n_\ns3 cret\n"),
        (
            Request::Lock {
                key: "k",
                timeout_s: 10,
                ttl_s: None,
            },
            "l\nk\n10\n",
        ),
        (
            Request::Lock {
                key: "k",
                timeout_s: 0,
                ttl_s: Some(20),
            },
            "l\nk\n0 20\n",
        ),
        (
            Request::Release {
                key: "k",
                token: "t",
            },
            "r\nk\nt\n",
        ),
        (
            Request::Renew {
                key: "k",
                token: "t",
                ttl_s: Some(5),
            },
            "n\nk\nt 5\n",
        ),
        (
            Request::Renew {
                key: "k",
                token: "t",
                ttl_s: None,
            },
            "n\nk\nt\n",
        ),
        (
            Request::Enqueue {
                key: "k",
                ttl_s: None,
            },
            "e\nk\n\n",
        ),
        (
            Request::Enqueue {
                key: "k",
                ttl_s: Some(7),
            },
            "e\nk\n7\n",
        ),
        (
            Request::Wait {
                key: "k",
                timeout_s: 3,
            },
            "w\nk\n3\n",
        ),
        (
            Request::SemLock {
                key: "k",
                timeout_s: 10,
                limit: 3,
                ttl_s: Some(15),
            },
            "sl\nk\n10 3 15\n",
        ),
        (
            Request::SemRelease {
                key: "k",
                token: "t",
            },
            "sr\nk\nt\n",
        ),
        (
            Request::SemRenew {
                key: "k",
                token: "t",
                ttl_s: Some(9),
            },
            "sn\nk\nt 9\n",
        ),
        (
            Request::SemEnqueue {
                key: "k",
                limit: 2,
                ttl_s: None,
            },
            "se\nk\n2\n",
        ),
        (
            Request::SemWait {
                key: "k",
                timeout_s: 1,
            },
            "sw\nk\n1\n",
        ),
        (Request::Stats, "stats\n_\n\n"),
    ];
    for (req, want) in cases {
        assert_eq!(req.encode().ok(), Some(want.as_bytes().to_vec()), "{req:?}");
    }
}

#[test]
fn parses_replies_exactly() {
    assert_eq!(
        parse_acquire_reply("ok abc 30", "l").ok(),
        Some(AcquireReply::Granted(Grant {
            token: "abc".into(),
            lease_s: 30
        }))
    );
    assert_eq!(
        parse_acquire_reply("timeout", "l").ok(),
        Some(AcquireReply::TimedOut)
    );
    for bad in [
        "ok",
        "ok ",
        "okay abc 30",
        "ok abc",
        "ok abc x",
        "ok abc 30 1",
        "",
        "OK a 1",
    ] {
        let e = parse_acquire_reply(bad, "l").err().map(|e| e.code());
        assert_eq!(e, Some(ErrorCode::ProtocolError), "{bad:?}");
    }
    for srv in ["error", "error_max_locks", "error_new_thing"] {
        let e = parse_acquire_reply(srv, "l").err();
        assert_eq!(e.as_ref().map(|e| e.code()), Some(ErrorCode::ServerError));
        assert_eq!(e.as_ref().and_then(|e| e.reply()), Some(srv));
    }
    let e = parse_acquire_reply("error_limit_mismatch", "l").err();
    assert_eq!(e.as_ref().map(|e| e.code()), Some(ErrorCode::LimitMismatch));
    assert_eq!(
        e.as_ref().and_then(|e| e.reply()),
        Some("error_limit_mismatch")
    );
    assert_eq!(parse_renew_reply("ok 32", "n").ok(), Some(Some(32)));
    assert_eq!(parse_renew_reply("ok", "n").ok(), Some(None));
    assert!(parse_renew_reply("okay", "n").is_err());
    assert!(parse_renew_reply("ok x", "n").is_err());
    assert!(parse_release_reply("ok", "r").is_ok());
    assert!(parse_release_reply("okay", "r").is_err());
    assert!(parse_release_reply("ok 1", "r").is_err());
    assert_eq!(
        parse_enqueue_reply("queued", "e").ok(),
        Some(EnqueueReply::Queued)
    );
    assert!(parse_enqueue_reply("acquired", "e").is_err());
    assert!(parse_enqueue_reply("queued x", "e").is_err());
    assert_eq!(
        parse_auth_reply("error").err().map(|e| e.code()),
        Some(ErrorCode::AuthFailed)
    );
    assert_eq!(parse_stats_reply("ok {\"a\":1}").ok(), Some("{\"a\":1}"));
}

#[test]
fn parse_reply_dispatches_by_command_and_names_it() {
    let grant = Grant {
        token: "t".repeat(32),
        lease_s: 7,
    };
    let line = format!("ok {} 7", grant.token);
    let lock = Request::Lock {
        key: "k",
        timeout_s: 1,
        ttl_s: None,
    };
    assert_eq!(
        lock.parse_reply(&line),
        Ok(Reply::Acquire(AcquireReply::Granted(grant.clone())))
    );
    assert_eq!(
        lock.parse_reply("timeout"),
        Ok(Reply::Acquire(AcquireReply::TimedOut))
    );
    let sem_wait = Request::SemWait {
        key: "k",
        timeout_s: 1,
    };
    let e = sem_wait.parse_reply("ok").expect_err("bare ok to sw");
    assert!(e.message().contains("sem_wait"), "{e}");
    let enqueue = Request::SemEnqueue {
        key: "k",
        limit: 2,
        ttl_s: None,
    };
    assert_eq!(
        enqueue.parse_reply("queued"),
        Ok(Reply::Enqueue(EnqueueReply::Queued))
    );
    let renew = Request::Renew {
        key: "k",
        token: "t",
        ttl_s: None,
    };
    assert_eq!(renew.parse_reply("ok 30"), Ok(Reply::Renew(Some(30))));
    let release = Request::SemRelease {
        key: "k",
        token: "t",
    };
    assert_eq!(release.parse_reply("ok"), Ok(Reply::Release));
    let e = release.parse_reply("error").expect_err("error");
    assert_eq!(e.code(), ErrorCode::ServerError);
    assert!(e.message().contains("sem_release"), "{e}");
    assert_eq!(
        Request::Stats.parse_reply("ok {\"locks\":[]}"),
        Ok(Reply::Stats("{\"locks\":[]}".into()))
    );
    assert_eq!(
        Request::Auth { token: "x" }
            .parse_reply("error_auth")
            .map_err(|e| e.code()),
        Err(ErrorCode::AuthFailed)
    );
}

#[test]
fn the_lock_or_semaphore_variant_is_picked_by_limit_or_sem() {
    let cases: [(Request<'_>, &str); 10] = [
        (Request::lock("k", 3, Some(7), None), "l\nk\n3 7\n"),
        (Request::lock("k", 3, None, Some(1)), "sl\nk\n3 1\n"),
        (Request::enqueue("k", None, None), "e\nk\n\n"),
        (Request::enqueue("k", Some(5), Some(4)), "se\nk\n4 5\n"),
        (Request::release("k", "t", false), "r\nk\nt\n"),
        (Request::release("k", "t", true), "sr\nk\nt\n"),
        (Request::renew("k", "t", Some(9), false), "n\nk\nt 9\n"),
        (Request::renew("k", "t", None, true), "sn\nk\nt\n"),
        (Request::wait("k", 2, false), "w\nk\n2\n"),
        (Request::wait("k", 2, true), "sw\nk\n2\n"),
    ];
    for (req, wire) in cases {
        assert_eq!(req.encode().expect("valid"), wire.as_bytes(), "{req:?}");
    }
}
