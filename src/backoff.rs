//! Retry delays: every cluster watch (and the CRD watch of live drift) after list and watch
//! errors, and the aggregator's reconnections to its upstreams. The delays are `backon`'s
//! exponential backoff, the one kube-runtime's own watcher backoff (`DefaultBackoff`) is made
//! of; this module holds only the settings.

use backon::{BackoffBuilder, ExponentialBuilder};
use std::time::Duration;

/// Retry delays: `initial × factor^n`, capped at `max`, each lengthened at random by up to
/// its own length when `jitter` is set, so that many clients do not retry in step.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Growth per consecutive error.
    pub factor: f32,
    /// Largest delay before jitter.
    pub max: Duration,
    /// Lengthen each delay by a random 0–100 % of itself.
    pub jitter: bool,
}

impl Default for Backoff {
    /// kube-runtime's default: 800 ms, ×2, at most 30 s, with jitter.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(800),
            factor: 2.0,
            max: Duration::from_secs(30),
            jitter: true,
        }
    }
}

impl Backoff {
    /// The delays of one run of consecutive errors; a success starts a new run.
    pub fn delays(&self) -> Delays {
        let builder = ExponentialBuilder::default()
            .with_min_delay(self.initial)
            .with_max_delay(self.max)
            .with_factor(self.factor.max(1.0))
            .without_max_times();
        let builder = if self.jitter {
            builder.with_jitter()
        } else {
            builder
        };
        Delays {
            run: builder.build(),
            max: self.max,
        }
    }
}

/// One run of retry delays (see [`Backoff::delays`]).
#[derive(Debug)]
pub struct Delays {
    run: backon::ExponentialBackoff,
    max: Duration,
}

impl Delays {
    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        self.run.next().unwrap_or(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn delays_grow_cap_and_jitter_upwards() {
        let exact = Backoff {
            jitter: false,
            ..Backoff::default()
        };
        let mut run = exact.delays();
        // In whole milliseconds: the factor is an f32.
        let ms = |d: Duration| (d.as_secs_f64() * 1000.0).round() as u64;
        let delays: Vec<u64> = (0..100).map(|_| ms(run.next_delay())).collect();
        assert_eq!(delays[..7], [800, 1600, 3200, 6400, 12_800, 25_600, 30_000]);
        assert_eq!(delays[99], 30_000, "capped");
        assert_eq!(
            ms(exact.delays().next_delay()),
            800,
            "a new run starts over"
        );
        let jittered = Backoff::default();
        let samples: Vec<Duration> = (0..50)
            .map(|_| {
                let mut run = jittered.delays();
                run.next_delay();
                run.next_delay();
                run.next_delay()
            })
            .collect();
        assert!(
            samples
                .iter()
                .all(|d| *d >= Duration::from_millis(3199) && *d <= Duration::from_millis(6401)),
            "{samples:?}"
        );
        assert!(samples.iter().any(|d| *d != samples[0]), "jitter varies");
    }
}
