//! `npm run simulate -- --seeds N [--first S] [--world dflockd|files|steal|all] [--replay SEED]`:
//! runs the deterministic simulator's worlds over many seeds (release build), prints
//! schedules per second, and for a failure its minimal schedule (which `--replay SEED` runs
//! again; `SIM_TRACE=1` prints every step of a world that supports it). Exit code 1 on a
//! failure, 2 on bad arguments.

use std::process::ExitCode;
use std::time::Instant;

use sema_core::sim::{self, World};

/// Steps per seed at most.
const MAX_STEPS: usize = 5_000;

/// What one world's run came to: seeds run, steps explored, or the failure's report.
type Outcome = Result<(u64, u64), String>;

/// Runs `seeds` seeds of world `W` from `first`.
fn run<W: World>(first: u64, seeds: u64) -> Outcome {
    sim::run_seeds::<W>(first, seeds, MAX_STEPS)
        .map(|steps| (seeds, steps))
        .map_err(|f| f.to_string())
}

/// A world's runner: `(first seed, seeds)` → what the run came to.
type Runner = fn(u64, u64) -> Outcome;

/// The worlds by name: a backend's world is one line here.
fn worlds() -> Vec<(&'static str, Runner)> {
    vec![
        ("dflockd", run::<sim::dflockd::DflockdWorld>),
        ("files", run::<sim::files::FilesWorld>),
        ("steal", run::<sim::steal::StealWorld>),
    ]
}

fn usage() -> ExitCode {
    let names: Vec<_> = worlds().iter().map(|w| w.0).collect();
    eprintln!(
        "usage: simulate --seeds N [--first S] [--world {}|all] [--replay SEED]",
        names.join("|")
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut seeds, mut first, mut world, mut replay) = (1000u64, 0u64, "all".to_string(), None);
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned();
        let number = value.as_deref().and_then(|v| v.parse::<u64>().ok());
        match (args[i].as_str(), number) {
            ("--seeds", Some(n)) => seeds = n,
            ("--first", Some(n)) => first = n,
            ("--replay", Some(n)) => replay = Some(n),
            ("--world", _) if value.is_some() => world = value.unwrap_or_default(),
            _ => return usage(),
        }
        i += 2;
    }
    if let Some(seed) = replay {
        (first, seeds) = (seed, 1);
    }
    let chosen: Vec<_> = worlds()
        .into_iter()
        .filter(|(name, _)| world == "all" || *name == world)
        .collect();
    if chosen.is_empty() {
        return usage();
    }
    let mut failed = false;
    for (name, runner) in chosen {
        let started = Instant::now();
        match runner(first, seeds) {
            Ok((n, steps)) => {
                let secs = started.elapsed().as_secs_f64().max(1e-9);
                println!(
                    "{name}: seeds {first}..{} passed: {steps} steps in {secs:.1} s ({:.0} schedules/s, {:.0} steps/s)",
                    first + n,
                    n as f64 / secs,
                    steps as f64 / secs
                );
            }
            Err(report) => {
                failed = true;
                println!("{name}: {report}");
                println!("replay: npm run simulate -- --world {name} --replay <seed above>");
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
