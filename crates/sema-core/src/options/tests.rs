use super::kinds::*;
use super::*;
use crate::dflockd::protocol::{validate_limit, validate_timeout, validate_ttl};

#[test]
fn every_rule_names_a_known_kind_once_per_entry_point() {
    for e in ENTRY_POINTS {
        for (i, r) in e.options.iter().enumerate() {
            assert!(kind_named(r.kind).is_some(), "{}.{}", e.name, r.name);
            assert!(
                e.options[..i].iter().all(|o| o.name != r.name),
                "{}.{} twice",
                e.name,
                r.name
            );
        }
    }
}

#[test]
fn the_core_refuses_the_bounds_the_table_gives() {
    // leaseTtl: 1 ..= 3600 in the table and in the protocol's own check.
    assert_eq!(LEASE_SECONDS.min, Some(1.0));
    assert_eq!(LEASE_SECONDS.max, Some(MAX_LEASE_TTL_S as f64));
    assert!(validate_ttl(0).is_err());
    assert!(validate_ttl(1).is_ok());
    assert!(validate_ttl(MAX_LEASE_TTL_S).is_ok());
    let e = validate_ttl(MAX_LEASE_TTL_S + 1).unwrap_err();
    assert_eq!(e.code(), crate::ErrorCode::InvalidArgument);
    let e = validate_ttl(30_000).unwrap_err();
    assert!(
        e.message()
            .contains("is in seconds: 30000 s is over 8 hours; the most is 3600 (1 hour)"),
        "{}",
        e.message()
    );
    // limit and acquireTimeoutS: the protocol's bounds.
    assert_eq!(LIMIT.max, Some(MAX_SECONDS as f64));
    assert!(validate_limit(0).is_err());
    assert!(validate_limit(MAX_SECONDS).is_ok());
    assert!(validate_limit(MAX_SECONDS + 1).is_err());
    assert_eq!(TIMEOUT_SECONDS.max, Some(MAX_SECONDS as f64));
    // acquireTimeoutS as a user passes it: at most an hour, as a lease (10000 is ms typed by habit).
    assert_eq!(
        ACQUIRE_TIMEOUT_SECONDS.max,
        Some(MAX_ACQUIRE_TIMEOUT_S as f64)
    );
    assert_eq!(ACQUIRE_TIMEOUT_SECONDS.min, Some(0.0));
    assert!(lease_ttl_too_long("acquireTimeoutS", 10_000).ends_with("write acquireTimeoutS: 10"));
    assert!(validate_timeout(MAX_SECONDS).is_ok());
    assert!(validate_timeout(MAX_SECONDS + 1).is_err());
    // A primitive's options: the same lease and ratio bounds, the table's words.
    let ok = crate::dflockd::PrimitiveOptions::new(
        "k",
        crate::dflockd::ConnectOptions::new(DEFAULT_HOST, DEFAULT_PORT),
    );
    assert!(ok.validate().is_ok());
    let lease = |s| crate::dflockd::PrimitiveOptions {
        lease_ttl_s: Some(s),
        ..ok.clone()
    };
    assert!(lease(MAX_LEASE_TTL_S).validate().is_ok());
    assert!(lease(MAX_LEASE_TTL_S + 1).validate().is_err());
    for r in [0.0, 1.0, f64::NAN] {
        let e = crate::dflockd::PrimitiveOptions {
            renew_ratio: r,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.message(),
            format!("renewRatio must be {}, got {r}", RATIO.expected)
        );
    }
}

#[test]
fn the_defaults_are_the_engines() {
    let file = crate::lockfile::LockOptions::default();
    assert_eq!(
        file.stale_timeout.map(|d| d.as_millis() as u64),
        Some(DEFAULT_STALE_TIMEOUT_MS)
    );
    assert_eq!(
        file.retry_interval.as_millis() as u64,
        DEFAULT_RETRY_INTERVAL_MS
    );
    assert_eq!(file.max_tag_length, Some(DEFAULT_MAX_TAG_LENGTH));
    assert!(file.fsync);
    let p = crate::dflockd::PrimitiveOptions::new(
        "k",
        crate::dflockd::ConnectOptions::new(DEFAULT_HOST, DEFAULT_PORT),
    );
    assert_eq!(p.acquire_timeout_s, DEFAULT_ACQUIRE_TIMEOUT_S);
    assert_eq!(p.renew_ratio, DEFAULT_RENEW_RATIO);
    assert_eq!(
        p.renew_max_interval.as_millis() as u64,
        DEFAULT_RENEW_MAX_INTERVAL_MS
    );
}

#[test]
fn the_export_is_json_with_every_entry_point() {
    let v: serde_json::Value = serde_json::from_str(&rules_json()).unwrap();
    for e in ENTRY_POINTS {
        assert_eq!(
            v["entryPoints"][e.name]["options"].as_array().map(Vec::len),
            Some(e.options.len())
        );
    }
    assert_eq!(v["kinds"]["leaseSeconds"]["max"], 3600.0);
    assert_eq!(v["maxLeaseTtlS"], 3600);
    assert_eq!(
        v["entryPoints"]["DISTRIBUTED_SEMAPHORE"]["options"][15]["name"],
        "limit"
    );
}

#[test]
fn human_lease_messages() {
    assert!(lease_ttl_too_long("leaseTtl", 7200).contains("is over 2 hours"));
    assert!(lease_ttl_too_long("leaseTtl", 90_000).contains("is over 1 day;"));
    assert!(lease_ttl_too_long("?leaseTtl", 30_000).ends_with("write ?leaseTtl=30"));
}

#[test]
fn every_instead_names_an_entry_point_and_a_name_it_does_not_have() {
    for i in INSTEAD {
        let e = ENTRY_POINTS.iter().find(|e| e.name == i.entry);
        let e = e.unwrap_or_else(|| panic!("{}: no such entry point", i.entry));
        assert!(
            e.options.iter().all(|r| r.name != i.name),
            "{}.{}",
            i.entry,
            i.name
        );
        assert!(i.message.contains(i.name), "{}", i.message);
    }
}
