//! Retry delays: every cluster watch (and the CRD watch of live drift) after list and watch
//! errors, and the aggregator's reconnections to its upstreams.

use std::time::Duration;

/// Retry delays: `initial × factor^n`, capped at `max`, each shortened by up to `jitter` (a
/// fraction) at random, so that many clients do not retry in step.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Growth per consecutive error.
    pub factor: f64,
    /// Largest delay.
    pub max: Duration,
    /// Random reduction of each delay, 0.0–1.0.
    pub jitter: f64,
}

impl Default for Backoff {
    /// 800 ms, ×2, at most 30 s, up to 20 % jitter.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(800),
            factor: 2.0,
            max: Duration::from_secs(30),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay after the `attempt`-th consecutive error (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = i32::try_from(attempt).unwrap_or(i32::MAX);
        let secs = self.initial.as_secs_f64() * self.factor.max(1.0).powi(exp);
        let capped = secs.min(self.max.as_secs_f64()).max(0.0);
        let jitter = self.jitter.clamp(0.0, 1.0) * crate::random::fraction();
        Duration::from_secs_f64(capped * (1.0 - jitter))
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn backoff_grows_caps_and_jitters_downwards() {
        let exact = Backoff {
            jitter: 0.0,
            ..Backoff::default()
        };
        let delays: Vec<Duration> = (0..8).map(|n| exact.delay(n)).collect();
        assert_eq!(delays[0], Duration::from_millis(800));
        assert_eq!(delays[1], Duration::from_millis(1600));
        assert_eq!(delays[5], Duration::from_millis(25_600));
        assert_eq!(delays[6], Duration::from_secs(30), "capped");
        assert_eq!(exact.delay(u32::MAX), Duration::from_secs(30));
        let jittered = Backoff::default();
        let samples: Vec<Duration> = (0..50).map(|_| jittered.delay(2)).collect();
        assert!(
            samples
                .iter()
                .all(|d| *d <= Duration::from_millis(3200) && *d >= Duration::from_millis(2560)),
            "{samples:?}"
        );
        assert!(samples.iter().any(|d| *d != samples[0]), "jitter varies");
    }
}
