//! The one source of randomness: jitter and start points that only need to differ between
//! processes and calls, drawn from std's randomly keyed hasher (no RNG dependency).

use std::hash::{BuildHasher, Hasher};

/// A random 64-bit number (each call its own draw).
pub fn next_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::UNIX_EPOCH
            .elapsed()
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A random number in `[0, 1)`.
pub fn fraction() -> f64 {
    (next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn fractions_are_in_range_and_vary() {
        let draws: Vec<f64> = (0..100).map(|_| super::fraction()).collect();
        assert!(draws.iter().all(|f| (0.0..1.0).contains(f)));
        assert!(draws.iter().any(|f| *f != draws[0]));
    }
}
