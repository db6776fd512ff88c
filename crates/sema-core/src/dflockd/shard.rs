//! Key → server sharding, identical to every official client.

use super::error::{DflockdError, Result};

/// `stable_hash_shard(key, n)`: CRC-32/IEEE (zlib `crc32`, Go `crc32.ChecksumIEEE`) over the
/// key's UTF-8 bytes, modulo `n`. `n == 0` is `INVALID_ARGUMENT`.
///
/// Vectors: `"test-key"` → 1 of 3, `"my-key"` → 2 of 3 and 2 of 5, `"a"` → 0 of 3,
/// `"worker-pool"` → 3 of 5, `"ключ✓"` → 2 of 3, `""` → 0.
pub fn stable_hash_shard(key: &str, num_servers: u32) -> Result<u32> {
    if num_servers == 0 {
        return Err(DflockdError::invalid(
            "number of servers must be at least 1",
        ));
    }
    Ok(crc32fast::hash(key.as_bytes()) % num_servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_check_value() {
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(stable_hash_shard("my-key", 5).ok(), Some(2));
        assert!(stable_hash_shard("k", 0).is_err());
    }
}
