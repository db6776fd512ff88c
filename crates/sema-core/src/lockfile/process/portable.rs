//! Process facts with std alone, for a system without a backend of its own yet: every pid
//! counts as alive (never break on a guess), start times are unknown, the host is its name.

use super::{clean_component, Liveness};

pub(crate) fn probe_liveness(_pid: i64) -> Liveness {
    Liveness::Alive
}

/// No fork here: nothing to hook.
pub(crate) fn hook_fork() {}

pub(crate) fn process_start_ticks(_pid: i64) -> Option<u64> {
    None
}

pub(crate) fn process_start_unix_secs(_pid: i64) -> Option<f64> {
    None
}

pub(crate) fn compute_host_identity() -> String {
    clean_component(
        &std::env::var("COMPUTERNAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_default(),
    )
}

/// No system call for it here.
pub(crate) fn process_command_line(_pid: i64) -> Option<String> {
    None
}

pub(crate) fn process_args(_pid: i64) -> Option<Vec<String>> {
    None
}
