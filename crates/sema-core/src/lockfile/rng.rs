//! The per-process generator of ownership tokens: ChaCha20 (`rand_chacha`) keyed once from the
//! OS generator. One `getrandom` per process (and per `fork`), not one per acquisition: the
//! uncontended acquire is a few microseconds, and a `getrandom` syscall per token was a
//! measurable part of it. The output is as unguessable as ChaCha20 keystream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

struct State {
    rng: ChaCha20Rng,
    /// [`FORKS`] when keyed: a forked child re-keys instead of repeating its parent's stream.
    generation: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Bumped in the child after `fork` (see [`super::process`]).
pub(crate) static FORKS: AtomicU64 = AtomicU64::new(0);

/// 32 bytes of key material from the OS; if it fails (it does not in practice), a randomly
/// seeded hash of the time, the pid and a counter.
fn seed() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        use std::hash::{BuildHasher, Hasher};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let state = std::collections::hash_map::RandomState::new();
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut h = state.build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            h.write_usize(i);
            h.write_u32(std::process::id());
            if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
                h.write_u128(d.as_nanos());
            }
            let v = h.finish().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
    bytes
}

/// Fill `out` with keystream bytes (never the same bytes twice: the stream only moves forward).
pub(crate) fn fill(out: &mut [u8]) {
    let generation = FORKS.load(Ordering::Relaxed);
    let mut guard = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    let state = match guard.as_mut() {
        Some(s) if s.generation == generation => s,
        _ => guard.insert(State {
            rng: ChaCha20Rng::from_seed(seed()),
            generation,
        }),
    };
    state.rng.fill_bytes(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_and_refork_rekeys() {
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        fill(&mut a);
        fill(&mut b);
        assert_ne!(a, b);
        let before = STATE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|s| s.rng.get_seed());
        FORKS.fetch_add(1, Ordering::Relaxed);
        fill(&mut a);
        assert_ne!(a, b);
        let after = STATE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|s| s.rng.get_seed());
        assert!(before.is_some() && after.is_some());
        assert_ne!(before, after, "a forked child must take a fresh key");
    }
}
