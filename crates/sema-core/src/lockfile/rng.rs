//! The per-process generator of ownership tokens: ChaCha20 (RFC 8439 block function) keyed
//! once from the OS generator, then a block counter. One `getrandom` per process (and per
//! `fork`), not one per acquisition; the output is as unguessable as ChaCha20 keystream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

struct State {
    key: [u32; 8],
    nonce: [u32; 3],
    counter: u32,
    /// Unused bytes of the last block.
    block: [u8; 64],
    used: usize,
    /// [`FORKS`] when keyed: a forked child re-keys instead of repeating its parent's stream.
    generation: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Bumped in the child after `fork` (see [`super::process`]).
pub(crate) static FORKS: AtomicU64 = AtomicU64::new(0);

fn quarter(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(16);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(12);
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(8);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(7);
}

/// The ChaCha20 block function (RFC 8439 §2.3).
pub(crate) fn chacha20_block(key: &[u32; 8], counter: u32, nonce: &[u32; 3]) -> [u8; 64] {
    let mut init = [0u32; 16];
    init[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
    init[4..12].copy_from_slice(key);
    init[12] = counter;
    init[13..].copy_from_slice(nonce);
    let mut s = init;
    for _ in 0..10 {
        quarter(&mut s, 0, 4, 8, 12);
        quarter(&mut s, 1, 5, 9, 13);
        quarter(&mut s, 2, 6, 10, 14);
        quarter(&mut s, 3, 7, 11, 15);
        quarter(&mut s, 0, 5, 10, 15);
        quarter(&mut s, 1, 6, 11, 12);
        quarter(&mut s, 2, 7, 8, 13);
        quarter(&mut s, 3, 4, 9, 14);
    }
    let mut out = [0u8; 64];
    for (i, chunk) in out.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&s[i].wrapping_add(init[i]).to_le_bytes());
    }
    out
}

/// 44 bytes of key material from the OS; if it fails (it does not in practice), a randomly
/// seeded hash of the time, the pid and a counter.
fn seed() -> [u8; 44] {
    let mut bytes = [0u8; 44];
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

fn keyed(generation: u64) -> State {
    let s = seed();
    let word = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    State {
        key: std::array::from_fn(word),
        nonce: [word(8), word(9), word(10)],
        counter: 0,
        block: [0; 64],
        used: 64,
        generation,
    }
}

/// Fill `out` with keystream bytes.
pub(crate) fn fill(out: &mut [u8]) {
    let generation = FORKS.load(Ordering::Relaxed);
    let mut guard = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    let state = match guard.as_mut() {
        Some(s) if s.generation == generation => s,
        _ => guard.insert(keyed(generation)),
    };
    for b in out.iter_mut() {
        if state.used == 64 {
            if state.counter == u32::MAX {
                *state = keyed(generation); // 256 GiB of output: take a fresh key
            }
            state.block = chacha20_block(&state.key, state.counter, &state.nonce);
            state.counter += 1;
            state.used = 0;
        }
        *b = state.block[state.used];
        // Never hand out the same keystream twice.
        state.block[state.used] = 0;
        state.used += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8439_block_vector() {
        // RFC 8439 §2.3.2.
        let key: [u32; 8] = std::array::from_fn(|i| {
            let b = (4 * i) as u8;
            u32::from_le_bytes([b, b + 1, b + 2, b + 3])
        });
        let nonce = [0x0900_0000, 0x4a00_0000, 0];
        let out = chacha20_block(&key, 1, &nonce);
        assert_eq!(
            &out[..16],
            &[
                0x10, 0xf1, 0xe7, 0xe4, 0xd1, 0x3b, 0x59, 0x15, 0x50, 0x0f, 0xdd, 0x1f, 0xa3, 0x20,
                0x71, 0xc4
            ]
        );
        assert_eq!(&out[60..], &[0xa2, 0x50, 0x3c, 0x4e]);
    }

    #[test]
    fn tokens_differ_and_refork_rekeys() {
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        fill(&mut a);
        fill(&mut b);
        assert_ne!(a, b);
        FORKS.fetch_add(1, Ordering::Relaxed);
        fill(&mut a);
        assert_ne!(a, b);
    }
}
