//! The circuit breaker of a definition: a definition whose evaluations keep exceeding their
//! budgets is quarantined, so a bad (or hostile) definition costs a bounded amount of CPU
//! however many workloads it covers.
//!
//! Policy: [`TRIPS`] budget exhaustions within [`WINDOW`] quarantine the definition for
//! [`FIRST_COOLDOWN`]; while quarantined no expression of it is evaluated (its workloads
//! resolve to partial graphs with a `definition_quarantined` diagnostic). When the cooldown
//! ends the definition is on probation: the next exhaustion quarantines it again at once,
//! for twice as long (at most [`MAX_COOLDOWN`]). A new version of the definition (a changed
//! file or Karta object) starts with a fresh breaker.

use crate::expr::Exceeded;
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Exhaustions within [`WINDOW`] that quarantine a definition.
pub const TRIPS: usize = 3;
/// Window over which exhaustions count.
pub const WINDOW: Duration = Duration::from_secs(60);
/// First quarantine.
pub const FIRST_COOLDOWN: Duration = Duration::from_secs(300);
/// Longest quarantine.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(3600);

/// Why and until when a definition is quarantined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine {
    /// Human-readable reason (which budget, how often).
    pub reason: String,
    /// When evaluation is tried again.
    pub until: Instant,
}

#[derive(Debug, Default)]
struct State {
    recent: VecDeque<Instant>,
    quarantine: Option<Quarantine>,
    /// Quarantines so far (the cooldown doubles with each).
    times: u32,
    on_probation: bool,
    /// Exhaustions counted before the breaker was given its totals ([`Breaker::count_into`]).
    pending: BTreeMap<&'static str, u64>,
}

/// Budget exhaustions per (definition name, budget), shared by the breakers of every
/// definition published in a catalog and the catalogs built after it by the same layers (so
/// a new version of a definition counts on; `crate::definition::layers`): what
/// `kartograf_evaluation_budget_exceeded_total` shows. A value, not process state: each
/// server's layers own theirs.
#[derive(Debug, Default, Clone)]
pub struct ExceededTotals(Arc<Mutex<BTreeMap<(String, &'static str), u64>>>);

impl ExceededTotals {
    fn add(&self, name: &str, what: &'static str, n: u64) {
        *self.0.lock().entry((name.to_owned(), what)).or_default() += n;
    }

    /// Budget exhaustions so far, per (definition name, budget).
    pub fn snapshot(&self) -> Vec<(String, &'static str, u64)> {
        self.0
            .lock()
            .iter()
            .map(|((name, what), n)| (name.clone(), *what, *n))
            .collect()
    }
}

/// One definition's breaker (see the module docs).
#[derive(Debug)]
pub struct Breaker {
    name: String,
    state: Mutex<State>,
    /// Where its exhaustions are counted (set once, when a catalog publishes it).
    totals: OnceLock<ExceededTotals>,
}

impl Breaker {
    /// A closed breaker for the definition `name`.
    pub fn new(name: &str) -> Breaker {
        Breaker {
            name: name.to_owned(),
            state: Mutex::new(State::default()),
            totals: OnceLock::new(),
        }
    }

    /// Counts this breaker's exhaustions into `totals` from now on, with those counted so
    /// far (the first totals given win: a definition is counted where it was first
    /// published).
    pub(crate) fn count_into(&self, totals: &ExceededTotals) {
        let mut st = self.lock();
        if self.totals.set(totals.clone()).is_ok() {
            for (what, n) in std::mem::take(&mut st.pending) {
                totals.add(&self.name, what, n);
            }
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Records that an evaluation exceeded `what`; returns the quarantine when this one
    /// trips the breaker.
    pub fn record(&self, what: Exceeded) -> Option<Quarantine> {
        let now = Instant::now();
        let mut st = self.lock();
        match self.totals.get() {
            Some(totals) => totals.add(&self.name, what.as_str(), 1),
            None => *st.pending.entry(what.as_str()).or_default() += 1,
        }
        if st.quarantine.is_some() {
            return None;
        }
        st.recent.push_back(now);
        while st
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > WINDOW)
        {
            st.recent.pop_front();
        }
        if !(st.on_probation || st.recent.len() >= TRIPS) {
            return None;
        }
        let cooldown = FIRST_COOLDOWN
            .saturating_mul(1u32 << st.times.min(8))
            .min(MAX_COOLDOWN);
        let reason = if st.on_probation {
            format!(
                "its evaluations exceeded their {what} budget again after a quarantine; quarantined for {}s",
                cooldown.as_secs()
            )
        } else {
            format!(
                "its evaluations exceeded their budgets {} times within {}s (last: {what}); quarantined for {}s",
                st.recent.len(),
                WINDOW.as_secs(),
                cooldown.as_secs()
            )
        };
        let q = Quarantine {
            reason,
            until: now + cooldown,
        };
        st.quarantine = Some(q.clone());
        st.times += 1;
        st.recent.clear();
        tracing::warn!(definition = %self.name, reason = %q.reason, "definition quarantined");
        Some(q)
    }

    /// The quarantine in effect now, if any (an expired one turns into probation).
    pub fn quarantined(&self) -> Option<Quarantine> {
        let mut st = self.lock();
        match &st.quarantine {
            Some(q) if Instant::now() < q.until => Some(q.clone()),
            Some(_) => {
                st.quarantine = None;
                st.on_probation = true;
                tracing::info!(definition = %self.name, "definition quarantine ended; evaluating again on probation");
                None
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_after_repeated_exhaustion_and_counts_every_one() {
        let b = Breaker::new("breaker-test-definition");
        let totals = ExceededTotals::default();
        assert_eq!(b.record(Exceeded::Work), None);
        // Counted before it is published too.
        b.count_into(&totals);
        assert_eq!(b.quarantined(), None);
        assert_eq!(b.record(Exceeded::Memory), None);
        let q = b.record(Exceeded::Time).expect("third exhaustion trips");
        assert!(q.reason.contains("3 times"), "{}", q.reason);
        assert!(q.until > Instant::now() + FIRST_COOLDOWN - Duration::from_secs(1));
        assert_eq!(b.quarantined(), Some(q));
        // While quarantined, more records change nothing.
        assert_eq!(b.record(Exceeded::Work), None);
        let counted: u64 = totals
            .snapshot()
            .into_iter()
            .filter(|(n, _, _)| n == "breaker-test-definition")
            .map(|(_, _, n)| n)
            .sum();
        assert_eq!(counted, 4);
    }

    #[test]
    fn probation_trips_at_once_with_a_longer_cooldown() {
        let b = Breaker::new("breaker-probation");
        for _ in 0..TRIPS {
            b.record(Exceeded::Depth);
        }
        // End the quarantine by hand, as its cooldown would.
        if let Some(q) = b.lock().quarantine.as_mut() {
            q.until = Instant::now();
        }
        assert_eq!(b.quarantined(), None);
        let q = b.record(Exceeded::Depth).expect("probation trips at once");
        assert!(q.until > Instant::now() + 2 * FIRST_COOLDOWN - Duration::from_secs(1));
    }
}
