//! What the cluster watches did, counted per kind: events by type, restarts (relists) and
//! errors. Kept here, in the source, and read by the metrics at scrape time, so the source
//! needs nothing of the metrics layer.

use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Counters of one Kubernetes source. Share it as `Arc<Counters>`.
#[derive(Debug, Default)]
pub struct Counters {
    by_kind: Mutex<BTreeMap<String, Kind>>,
}

/// The counts of one kind (`group/version/kind`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Kind {
    /// Events by type (`list`, `apply`, `delete`), in the order first seen.
    pub events: Vec<(&'static str, u64)>,
    /// Watches restarted with a full relist.
    pub restarts: u64,
    /// List or watch requests that failed.
    pub errors: u64,
}

impl Counters {
    fn with(&self, kind: &str, f: impl FnOnce(&mut Kind)) {
        // The map holds counts only: a panic elsewhere cannot leave it inconsistent.
        let mut map = self.by_kind.lock();
        match map.get_mut(kind) {
            Some(k) => f(k),
            None => f(map.entry(kind.to_owned()).or_default()),
        }
    }

    /// A watch of `kind` delivered an event of type `event`.
    pub fn event(&self, kind: &str, event: &'static str) {
        self.with(kind, |k| {
            match k.events.iter_mut().find(|(e, _)| *e == event) {
                Some((_, n)) => *n += 1,
                None => k.events.push((event, 1)),
            }
        });
    }

    /// A watch of `kind` restarted with a full relist.
    pub fn restart(&self, kind: &str) {
        self.with(kind, |k| k.restarts += 1);
    }

    /// A list or watch request of `kind` failed (it is retried).
    pub fn error(&self, kind: &str) {
        self.with(kind, |k| k.errors += 1);
    }

    /// Every kind's counts now, by kind.
    pub fn snapshot(&self) -> BTreeMap<String, Kind> {
        self.by_kind.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_events_restarts_and_errors_per_kind() {
        let c = Counters::default();
        c.event("v1/Pod", "apply");
        c.event("v1/Pod", "apply");
        c.event("v1/Pod", "delete");
        c.event("batch/v1/Job", "list");
        c.restart("v1/Pod");
        c.error("batch/v1/Job");
        c.error("batch/v1/Job");
        let s = c.snapshot();
        assert_eq!(
            s["v1/Pod"],
            Kind {
                events: vec![("apply", 2), ("delete", 1)],
                restarts: 1,
                errors: 0
            }
        );
        assert_eq!(s["batch/v1/Job"].errors, 2);
        assert_eq!(s["batch/v1/Job"].events, vec![("list", 1)]);
    }
}
