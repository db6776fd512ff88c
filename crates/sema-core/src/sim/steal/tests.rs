//! The steal world under a fixed budget of seeds (the CI budget), and what its seeds reach.

use super::*;
use crate::sim::{run_seed, run_seeds};

const MAX_STEPS: usize = 400;

/// The CI budget: every invariant over 20 000 seeds (`SIM_SEEDS` overrides).
#[test]
fn the_ci_budget_of_seeds_holds_every_invariant() {
    let seeds: u64 = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let started = std::time::Instant::now();
    match run_seeds::<StealWorld>(0, seeds, MAX_STEPS) {
        Ok(steps) => println!(
            "steal sim: {seeds} seeds, {steps} steps in {:.1} s",
            started.elapsed().as_secs_f64()
        ),
        Err(f) => panic!("{f}"),
    }
}

/// The world reaches every outcome: a proven hand-over, a take of a free key, a refusal,
/// a forged confirmation looked at and ignored.
#[test]
fn the_seeds_reach_every_outcome() {
    let (mut proven, mut taken, mut refused, mut forged_ignored) = (0, 0, 0, 0);
    for seed in 0..2_000 {
        let mut rng = SimRng::new(seed);
        let mut w = StealWorld::new(&mut rng);
        let mut choices = SimRng::new(seed ^ 0x5eed);
        for _ in 0..MAX_STEPS {
            let en = w.enabled();
            if en.is_empty() {
                break;
            }
            let a = en[choices.below(en.len())].clone();
            if w.apply(&a, &mut rng).is_err() {
                break;
            }
        }
        let t = w.trace.join("\n");
        proven += usize::from(t.contains("c13 l wl~stolen~k~S~H"));
        taken += usize::from(t.contains("c12 l k 0"));
        refused += usize::from(t.contains("Refuse("));
        forged_ignored += usize::from(t.contains("n k ") && t.contains("-> Reply(\"error\")"));
    }
    println!("of 2 000 seeds: proven {proven}, taken {taken}, refused {refused}, forged ignored {forged_ignored}");
    assert!(
        proven > 0 && taken > 0 && refused > 0 && forged_ignored > 0,
        "proven {proven}, taken {taken}, refused {refused}, forged ignored {forged_ignored}"
    );
}

#[test]
fn a_seed_replays_to_the_same_outcome() {
    assert_eq!(
        run_seed::<StealWorld>(11, MAX_STEPS).ok(),
        run_seed::<StealWorld>(11, MAX_STEPS).ok()
    );
}
