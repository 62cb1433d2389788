//! Why an object was not kept: one typed reason per case, each with a stable label for
//! `kartograf_objects_skipped_total{source,reason}`. Messages are for logs and problems; the
//! labels are an interface (dashboards and alerts select on them) and never change.

/// Why a document or object was skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    /// Not an object with a kind and a `metadata.name` (conversion fails on it).
    #[error("object has no kind or no metadata.name")]
    NoKindOrName,
    /// The same identity again in one file (the first document is used).
    #[error("{0} is defined more than once in this file; the first one is used")]
    Duplicate(String),
    /// An object of another namespace than the shard's (`--namespace` sharding).
    #[error("{0} is in another namespace than this shard's")]
    OtherNamespace(String),
}

impl Skip {
    /// Every label, in the order of [`Skip::index`].
    pub const LABELS: [&'static str; 3] = ["no_kind_or_name", "duplicate", "other_namespace"];

    /// The stable metric label of this reason.
    pub fn label(&self) -> &'static str {
        Skip::LABELS[self.index()]
    }

    /// This reason's position in [`Skip::LABELS`] (and in [`SkipCounts`]).
    pub fn index(&self) -> usize {
        match self {
            Skip::NoKindOrName => 0,
            Skip::Duplicate(_) => 1,
            Skip::OtherNamespace(_) => 2,
        }
    }
}

/// How many objects were skipped for each reason (a fixed table: bounded whatever the input).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SkipCounts([u64; Skip::LABELS.len()]);

impl SkipCounts {
    /// Counts one skip.
    pub fn add(&mut self, skip: &Skip) {
        self.add_n(skip.index(), 1);
    }

    /// Adds `n` skips of the reason at `index` (see [`Skip::index`]).
    pub fn add_n(&mut self, index: usize, n: u64) {
        if let Some(c) = self.0.get_mut(index) {
            *c = c.saturating_add(n);
        }
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &SkipCounts) {
        for (i, n) in other.0.iter().enumerate() {
            self.add_n(i, *n);
        }
    }

    /// Each reason's label with its count (zeros included).
    pub fn by_label(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Skip::LABELS.iter().copied().zip(self.0.iter().copied())
    }

    /// True when nothing was skipped.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|n| *n == 0)
    }
}

/// Skipped objects of one list or batch: the first [`Skipped::KEPT`] reasons kept (for logs),
/// all of them counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// The first reasons.
    pub first: Vec<Skip>,
    /// How many were skipped in all.
    pub total: u64,
}

impl Skipped {
    /// Reasons kept in full; the rest are counted only.
    pub const KEPT: usize = 32;

    /// Records one skip.
    pub fn push(&mut self, skip: Skip) {
        self.total = self.total.saturating_add(1);
        if self.first.len() < Skipped::KEPT {
            self.first.push(skip);
        }
    }

    /// True when nothing was skipped.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Adds `other`'s skips (its kept reasons while there is room).
    pub fn merge(&mut self, other: Skipped) {
        let room = Skipped::KEPT.saturating_sub(self.first.len());
        self.first.extend(other.first.into_iter().take(room));
        self.total = self.total.saturating_add(other.total);
    }

    /// One line per kept reason, and one for the number of the others.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        let more = self.total.saturating_sub(self.first.len() as u64);
        let more = (more > 0).then(|| format!("… and {more} more"));
        self.first.iter().map(Skip::to_string).chain(more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_has_its_own_stable_label_and_counts_saturate() {
        let all = [
            Skip::NoKindOrName,
            Skip::Duplicate("Pod/default/a".into()),
            Skip::OtherNamespace("Pod/other/a".into()),
        ];
        let labels: Vec<&str> = all.iter().map(Skip::label).collect();
        assert_eq!(labels, Skip::LABELS);
        let mut counts = SkipCounts::default();
        assert!(counts.is_empty());
        counts.add(&all[1]);
        counts.add_n(1, u64::MAX);
        counts.add_n(99, 5);
        let got: Vec<_> = counts.by_label().collect();
        assert_eq!(
            got,
            vec![
                ("no_kind_or_name", 0),
                ("duplicate", u64::MAX),
                ("other_namespace", 0)
            ]
        );
    }

    #[test]
    fn a_list_of_skips_keeps_the_first_and_counts_the_rest() {
        let mut skipped = Skipped::default();
        for _ in 0..1000 {
            skipped.push(Skip::NoKindOrName);
        }
        assert_eq!(skipped.first.len(), Skipped::KEPT);
        assert_eq!(skipped.total, 1000);
        let lines: Vec<String> = skipped.lines().collect();
        assert_eq!(lines.len(), Skipped::KEPT + 1);
        assert_eq!(lines.last().map(String::as_str), Some("… and 968 more"));
    }
}
