//! Deterministic simulation of the lock engine: many simulated processes over a simulated clock, file
//! system and network, driven from one seed, with invariants checked after every step.
//!
//! The runner here is world-agnostic: a [`World`] lists the actions enabled in its current state
//! (a process takes its next step, a message is delivered, dropped or duplicated, a process is
//! SIGKILLed or stopped, the clock jumps, ...), applies the one the runner picks, and checks its
//! invariants. The runner picks with a seeded [`SimRng`], records the schedule (the actions taken,
//! as values), and on a violation shrinks that schedule to a minimal one that still fails and can
//! be replayed exactly ([`replay`]). Worlds live in submodules, one per backend.
//!
//! Built for `cargo test` (a fixed budget of seeds) and, with the `sim` feature, for the
//! `simulate` example behind `npm run simulate -- --seeds N`.

use std::fmt::Debug;

pub mod dflockd;
pub mod files;
pub mod steal;

/// A small, fast, seedable generator (SplitMix64): the same seed gives the same schedule on every
/// machine and build, which is all a simulation needs (it is not used for anything secret).
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; returns 0 for `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u32, den: u32) -> bool {
        den != 0 && (self.next_u64() % u64::from(den)) < u64::from(num)
    }
}

/// An invariant that did not hold, in words a reader of the schedule understands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

/// One simulated system. `Action` is a value (so a schedule can be printed, compared and replayed).
pub trait World {
    type Action: Clone + Debug + PartialEq;

    /// A fresh world, its configuration (how many processes, which kinds, which faults) drawn from `rng`.
    fn new(rng: &mut SimRng) -> Self
    where
        Self: Sized;

    /// The actions enabled now; empty when the world is quiescent (everyone has exited or is stuck).
    fn enabled(&self) -> Vec<Self::Action>;

    /// Applies one enabled action and checks every step invariant.
    fn apply(&mut self, action: &Self::Action, rng: &mut SimRng) -> Result<(), Violation>;

    /// Checks the end-of-run invariants (every request settled, nothing left behind, ...).
    fn finish(&mut self) -> Result<(), Violation>;
}

/// A failing run: its seed, the schedule that fails (shrunk when [`run_seed`] found it) and why.
#[derive(Clone, Debug)]
pub struct Failure<A> {
    pub seed: u64,
    pub schedule: Vec<A>,
    pub violation: Violation,
}

impl<A: Debug> std::fmt::Display for Failure<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} failed: {}", self.seed, self.violation.0)?;
        writeln!(f, "schedule ({} steps):", self.schedule.len())?;
        for (i, a) in self.schedule.iter().enumerate() {
            writeln!(f, "  {i:>4}: {a:?}")?;
        }
        Ok(())
    }
}

/// Separates the runner's choice stream from the world's stream of the same seed.
const CHOICE_STREAM: u64 = 0xC40C_E5EE_D5A1_7000;

/// Runs one seed for at most `max_steps` steps. `Ok(steps)` when every invariant held.
pub fn run_seed<W: World>(seed: u64, max_steps: usize) -> Result<usize, Failure<W::Action>> {
    explore::<W>(seed, max_steps)
        .map_err(|(schedule, violation)| shrink::<W>(seed, schedule, violation))
}

/// One seed's run as chosen by the seed, unshrunk: the steps taken, or the schedule and violation.
fn explore<W: World>(seed: u64, max_steps: usize) -> Result<usize, (Vec<W::Action>, Violation)> {
    let mut rng = SimRng::new(seed);
    let mut world = W::new(&mut rng);
    // The runner's choices come from their own stream, so the world's draws (in `new` and `apply`)
    // are the same whether the schedule is chosen here or read back by `replay`.
    let mut choices = SimRng::new(seed ^ CHOICE_STREAM);
    let mut schedule = Vec::new();
    for _ in 0..max_steps {
        let enabled = world.enabled();
        if enabled.is_empty() {
            break;
        }
        let action = enabled[choices.below(enabled.len())].clone();
        schedule.push(action.clone());
        if let Err(violation) = world.apply(&action, &mut rng) {
            return Err((schedule, violation));
        }
    }
    let steps = schedule.len();
    match world.finish() {
        Ok(()) => Ok(steps),
        Err(violation) => Err((schedule, violation)),
    }
}

/// Replays `schedule` from `seed` (the world's configuration and every random draw inside `apply`
/// come from the seed, the choices from the schedule). Actions not enabled at their turn are
/// skipped, so a shrunk schedule stays replayable. `Err` with the violation it reproduces.
pub fn replay<W: World>(seed: u64, schedule: &[W::Action]) -> Result<(), Violation> {
    let mut rng = SimRng::new(seed);
    let mut world = W::new(&mut rng);
    for action in schedule {
        if !world.enabled().contains(action) {
            continue;
        }
        world.apply(action, &mut rng)?;
    }
    world.finish()
}

/// Delta debugging on the schedule: drop chunks (halves, quarters, ... single steps) while the
/// replay still fails with any violation; what is left is a schedule where every step matters.
fn shrink<W: World>(
    seed: u64,
    schedule: Vec<W::Action>,
    violation: Violation,
) -> Failure<W::Action> {
    let mut best = schedule;
    let mut best_violation = violation;
    let mut chunk = best.len().div_ceil(2).max(1);
    // Bounded: each pass either shortens the schedule or halves the chunk.
    while chunk >= 1 && !best.is_empty() {
        let mut start = 0;
        let mut shortened = false;
        while start < best.len() {
            let end = (start + chunk).min(best.len());
            let candidate: Vec<_> = best[..start].iter().chain(&best[end..]).cloned().collect();
            match replay::<W>(seed, &candidate) {
                Err(v) => {
                    best = candidate;
                    best_violation = v;
                    shortened = true;
                }
                Ok(()) => start = end,
            }
        }
        if !shortened {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    Failure {
        seed,
        schedule: best,
        violation: best_violation,
    }
}

/// Runs `seeds` seeds from `first`, stopping at the first failure. Returns the total steps explored.
pub fn run_seeds<W: World>(
    first: u64,
    seeds: u64,
    max_steps: usize,
) -> Result<u64, Failure<W::Action>> {
    let mut steps = 0u64;
    for seed in first..first.saturating_add(seeds) {
        steps += run_seed::<W>(seed, max_steps)? as u64;
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy world with a known bug: two processes increment a shared counter with a read and a
    /// write step; the invariant (the counter equals the increments done) fails on an interleaving.
    struct Counter {
        value: u32,
        done: u32,
        read: [Option<u32>; 2],
        left: [u32; 2],
    }

    #[derive(Clone, Debug, PartialEq)]
    enum Step {
        Read(usize),
        Write(usize),
    }

    impl World for Counter {
        type Action = Step;
        fn new(_: &mut SimRng) -> Self {
            Counter {
                value: 0,
                done: 0,
                read: [None; 2],
                left: [3, 3],
            }
        }
        fn enabled(&self) -> Vec<Step> {
            (0..2)
                .filter(|&p| self.left[p] > 0)
                .map(|p| {
                    if self.read[p].is_some() {
                        Step::Write(p)
                    } else {
                        Step::Read(p)
                    }
                })
                .collect()
        }
        fn apply(&mut self, a: &Step, _: &mut SimRng) -> Result<(), Violation> {
            match *a {
                Step::Read(p) => self.read[p] = Some(self.value),
                Step::Write(p) => {
                    self.value = self.read[p].take().unwrap_or(0) + 1;
                    self.left[p] -= 1;
                    self.done += 1;
                }
            }
            if self.value != self.done {
                return Err(Violation(format!(
                    "counter {} after {} increments",
                    self.value, self.done
                )));
            }
            Ok(())
        }
        fn finish(&mut self) -> Result<(), Violation> {
            Ok(())
        }
    }

    #[test]
    fn a_lost_update_is_found_shrunk_and_replayed() {
        let failure = run_seeds::<Counter>(0, 100, 100).expect_err("the toy bug is found");
        // The minimal lost update: both read, one writes, the other writes.
        assert_eq!(failure.schedule.len(), 4, "{failure}");
        assert!(replay::<Counter>(failure.seed, &failure.schedule).is_err());
    }

    /// A world whose `apply` draws from the rng: its failure must replay exactly from the schedule.
    struct Drawing {
        sum: u64,
        steps: u32,
    }

    impl World for Drawing {
        type Action = u8;
        fn new(_: &mut SimRng) -> Self {
            Drawing { sum: 0, steps: 0 }
        }
        fn enabled(&self) -> Vec<u8> {
            if self.steps < 20 {
                vec![0, 1]
            } else {
                vec![]
            }
        }
        fn apply(&mut self, a: &u8, rng: &mut SimRng) -> Result<(), Violation> {
            self.steps += 1;
            self.sum += u64::from(*a) * (rng.next_u64() % 10);
            if self.sum > 40 {
                return Err(Violation(format!("sum {}", self.sum)));
            }
            Ok(())
        }
        fn finish(&mut self) -> Result<(), Violation> {
            Ok(())
        }
    }

    #[test]
    fn a_world_that_draws_in_apply_replays_its_failure_exactly() {
        let mut failed = 0;
        for seed in 0..50 {
            if let Err((schedule, violation)) = explore::<Drawing>(seed, 100) {
                failed += 1;
                assert_eq!(
                    replay::<Drawing>(seed, &schedule),
                    Err(violation),
                    "seed {seed}: {schedule:?}"
                );
            }
        }
        assert!(failed > 0, "some seed passes 40");
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let (mut a, mut b) = (SimRng::new(7), SimRng::new(7));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
    }
}
