//! The dflockd world under a fixed budget of seeds (the CI budget), and its regression seeds.

use std::time::Instant;

use super::super::{replay, run_seed, run_seeds};
use super::{DflockdWorld, StrictDflockdWorld};

/// Steps per seed at most (a world ends well before: its programs are short).
pub const MAX_STEPS: usize = 5_000;

/// Seeds found failing once, replayed on every run (none yet).
const REGRESSION_SEEDS: &[u64] = &[];

#[test]
fn the_ci_budget_of_seeds_holds_every_invariant() {
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        // 30 000 seeds: about 30 s in a debug build on the 2-core dev machine (100 000 took
        // 105 s there, 953 schedules/s, 62 steps per seed); `SIM_SEEDS` overrides.
        .unwrap_or(30_000);
    let started = Instant::now();
    let result = run_seeds::<DflockdWorld>(0, seeds, MAX_STEPS);
    let secs = started.elapsed().as_secs_f64();
    match result {
        Ok(steps) => println!(
            "dflockd sim: {seeds} seeds, {steps} steps in {secs:.1} s ({:.0} schedules/s)",
            seeds as f64 / secs
        ),
        Err(f) => panic!("{f}"),
    }
}

#[test]
fn regression_seeds_hold() {
    for &seed in REGRESSION_SEEDS {
        if let Err(f) = run_seed::<DflockdWorld>(seed, MAX_STEPS) {
            panic!("{f}");
        }
    }
}

#[test]
fn a_seed_replays_to_the_same_outcome() {
    // The same seed twice: the same number of steps (the world draws everything from it).
    let a = run_seed::<DflockdWorld>(7, MAX_STEPS);
    let b = run_seed::<DflockdWorld>(7, MAX_STEPS);
    assert_eq!(a.ok(), b.ok());
}

/// `SIM_REPLAY=<seed> SIM_TRACE=1 cargo test -p sema-core --lib sim::dflockd::tests::trace_a_seed
/// -- --nocapture`: the run of one seed, step by step.
#[test]
fn trace_a_seed() {
    if let Some(seed) = std::env::var("SIM_REPLAY")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        if let Err(f) = run_seed::<DflockdWorld>(seed, MAX_STEPS) {
            println!("{f}");
            println!("--- the minimal schedule replayed:");
            println!("{:?}", replay::<DflockdWorld>(seed, &f.schedule));
        }
    }
}

/// A finding for the lead, kept as a test until it is fixed (in `dflockd::held`, not here):
/// the Go server drops a connection that sent no request for `--read-timeout` (23 s) and
/// releases its key; a holder whose renews are stuck in the network that long is dropped while
/// its lease clock still proves the lease (up to lease − guard: 32 s for the default 33 s
/// lease), so the key is granted to a second holder that is told nothing is wrong. Seed 12872
/// of the strict world shows it; when the lease clock bounds the validity by the idle limit
/// too, this test fails: move the seed to `REGRESSION_SEEDS` (for the strict world).
#[test]
fn the_idle_limit_gap_is_found() {
    let f = run_seed::<StrictDflockdWorld>(12872, MAX_STEPS).expect_err("the known gap");
    assert!(f.violation.0.contains("not told of a loss"), "{f}");
    assert!(replay::<StrictDflockdWorld>(12872, &f.schedule).is_err());
    println!("{f}");
}
