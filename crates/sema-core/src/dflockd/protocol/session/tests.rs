use std::time::Duration;

use super::*;
use crate::dflockd::error::ErrorCode;
use crate::dflockd::protocol::{AcquireReply, EnqueueReply, Grant};

/// Every line `input` holds, fed to the framing `chunk` bytes at a time.
fn lines_in(input: &[u8], chunk: usize) -> Vec<Result<String>> {
    let mut lines = ReplyLines::default();
    let mut out = Vec::new();
    for part in input.chunks(chunk) {
        lines.input().extend_from_slice(part);
        while let Some(l) = lines.next_line("peer") {
            out.push(l);
        }
    }
    out
}

#[test]
fn lines_come_out_whole_and_in_order_however_the_bytes_arrive() {
    let input = "ok abc 7\r\nqueued\n\nключ✓ ok\r\r\nlast".as_bytes();
    for chunk in 1..=input.len() {
        let got: Vec<String> = lines_in(input, chunk)
            .into_iter()
            .map(|l| l.expect("line"))
            .collect();
        // One `\r` stripped, not two; the unterminated tail is no line yet.
        assert_eq!(
            got,
            ["ok abc 7", "queued", "", "ключ✓ ok\r"],
            "chunk {chunk}"
        );
    }
}

#[test]
fn the_reply_bound_counts_the_line_without_its_cr() {
    let max = MAX_REPLY_LINE_BYTES;
    let cases: [(Vec<u8>, bool); 4] = [
        ([vec![b'a'; max], b"\n".to_vec()].concat(), true),
        ([vec![b'a'; max], b"\r\n".to_vec()].concat(), true),
        ([vec![b'a'; max + 1], b"\n".to_vec()].concat(), false),
        ([vec![b'a'; max + 1], b"\r\n".to_vec()].concat(), false),
    ];
    for (input, ok) in cases {
        let mut lines = ReplyLines::new(input.clone());
        let found = lines.find();
        assert_eq!(found.is_ok(), ok, "find, {} bytes", input.len());
        let got = lines_in(&input, 64 * 1024);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].is_ok(), ok, "next_line, {} bytes", input.len());
        if let Err(e) = &got[0] {
            assert_eq!(e.code(), ErrorCode::ProtocolError);
            assert!(e.to_string().contains("exceeds"), "{e}");
        }
    }
}

#[test]
fn an_incomplete_line_is_refused_once_it_cannot_fit() {
    let max = MAX_REPLY_LINE_BYTES;
    // The bound and a `\r` may still end well: not yet an error.
    let mut lines = ReplyLines::new(vec![b'a'; max + 1]);
    assert_eq!(lines.find().expect("room for a CR"), None);
    lines.check_partial().expect("room for a CR");
    lines.input().push(b'a');
    let e = lines.find().expect_err("overlong");
    assert_eq!(e.code(), ErrorCode::ProtocolError);
    assert!(lines.check_partial().is_err());
    // A complete short line before the long tail is still delivered.
    let mut lines = ReplyLines::new([b"ok\n".to_vec(), vec![b'z'; max + 5]].concat());
    let end = lines.find().expect("line").expect("complete");
    assert_eq!(lines.line(end, "p").expect("text"), "ok");
    lines.consume(end);
    assert!(lines.find().is_err());
}

#[test]
fn invalid_utf8_is_a_protocol_error_naming_the_server_and_the_line_is_consumed() {
    let got = lines_in(b"ok \xff\xfe 5\nnext\n", 3);
    let e = got[0].as_ref().expect_err("invalid UTF-8");
    assert_eq!(e.code(), ErrorCode::ProtocolError);
    assert_eq!(e.message(), "reply from peer is not valid UTF-8");
    assert_eq!(got[1].as_deref().expect("next"), "next");
}

#[test]
fn consumed_bytes_are_dropped_and_the_rest_kept() {
    // Many lines arriving behind an incomplete one: the buffer never holds much more than what
    // is unconsumed.
    let mut lines = ReplyLines::default();
    for i in 0..10_000 {
        lines
            .input()
            .extend_from_slice(format!("line {i}\nhalf").as_bytes());
        let end = lines.find().expect("ok").expect("complete");
        let want = if i == 0 {
            "line 0".to_string()
        } else {
            format!("halfline {i}")
        };
        assert_eq!(lines.line(end, "p").expect("text"), want);
        lines.consume(end);
        assert!(lines.buf.len() < 8192, "{}", lines.buf.len());
    }
    assert!(!lines.is_empty());
    lines.input().extend_from_slice(b" done\n");
    assert_eq!(
        lines.next_line("p").expect("line").expect("text"),
        "half done"
    );
    assert!(lines.is_empty());
}

#[test]
fn an_unprompted_line_is_seen_raw_and_the_rest_stays_buffered() {
    let mut lines = ReplyLines::new(b"error\r\nrest".to_vec());
    assert!(lines.has_line());
    assert_eq!(lines.raw_line(), Some(&b"error\r"[..]));
    let end = lines.find().expect("ok").expect("line");
    lines.consume(end);
    assert_eq!(lines.raw_line(), None);
    assert!(!lines.has_line());
    assert!(!lines.is_empty());
    lines.input().push(b'\n');
    assert_eq!(lines.raw_line(), Some(&b"rest"[..]));
    assert_eq!(
        lines.closed("h:1").message(),
        "server h:1 closed the connection mid-reply"
    );
    let mut lines = ReplyLines::new(b"x\n".to_vec());
    lines.clear();
    assert!(lines.is_empty());
    assert_eq!(
        lines.closed("h:1").message(),
        "server h:1 closed the connection"
    );
}

#[test]
fn reply_limit_gives_blocking_commands_their_timeout_and_a_bounded_margin() {
    let s = Duration::from_secs;
    let ms = Duration::from_millis;
    assert_eq!(reply_limit(s(30), None), s(30));
    assert_eq!(reply_limit(s(30), Some(0)), BLOCKING_REPLY_MARGIN);
    assert_eq!(reply_limit(s(30), Some(10)), s(10) + BLOCKING_REPLY_MARGIN);
    // The margin never exceeds the socket timeout: a try to a silent server ends with it.
    assert_eq!(reply_limit(ms(200), Some(0)), ms(200));
    assert_eq!(
        reply_limit(s(1), Some(u64::MAX)),
        s(MAX_SECONDS) + s(1),
        "clamped to the client bound"
    );
}

#[test]
fn an_encoded_request_carries_what_its_reply_needs() {
    let lock = Encoded::new(&Request::Lock {
        key: "jobs",
        timeout_s: 10,
        ttl_s: Some(5),
    })
    .expect("lock");
    assert_eq!(lock.bytes(), b"l\njobs\n10 5\n");
    assert_eq!(lock.blocking_s(), Some(10));
    assert_eq!(lock.key(), "jobs");
    assert_eq!(
        lock.parse_reply("ok tok 5").expect("grant"),
        Reply::Acquire(AcquireReply::Granted(Grant {
            token: "tok".into(),
            lease_s: 5
        }))
    );
    let e = lock.parse_reply("bogus").expect_err("unexpected");
    assert_eq!(e.code(), ErrorCode::ProtocolError);
    assert!(e.message().starts_with("acquire:"), "{e}");

    let renew = Encoded::new(&Request::SemRenew {
        key: "k",
        token: "t",
        ttl_s: Some(9),
    })
    .expect("renew");
    assert_eq!(renew.sent_ttl(), Some(9));
    assert_eq!(renew.blocking_s(), None);
    assert_eq!(renew.parse_reply("ok").expect("ok"), Reply::Renew(None));

    let enqueue = Encoded::new(&Request::Enqueue {
        key: "k",
        ttl_s: None,
    })
    .expect("e");
    assert_eq!(enqueue.sent_ttl(), None);
    assert_eq!(
        enqueue.parse_reply("queued").expect("queued"),
        Reply::Enqueue(EnqueueReply::Queued)
    );

    let stats = Encoded::new(&Request::Stats).expect("stats");
    assert_eq!(stats.key(), "_");
    assert_eq!(
        stats.parse_reply("ok {}").expect("json"),
        Reply::Stats("{}".into())
    );

    let raw = Encoded::raw("sw", "k", "3").expect("raw");
    assert_eq!(raw.bytes(), b"sw\nk\n3\n");
    assert_eq!(raw.blocking_s(), Some(3));
    assert_eq!(
        raw.parse_reply("whatever").expect("line"),
        Reply::Line("whatever".into())
    );

    // Validation before anything is encoded, as from Request::encode_into.
    let e = Encoded::new(&Request::Release {
        key: "a b",
        token: "t",
    })
    .expect_err("bad key");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert!(Encoded::raw("L", "k", "").is_err());
}
