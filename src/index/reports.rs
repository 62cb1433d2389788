//! What the index keeps about its sources beside their objects: the objects each skipped,
//! by reason (`kartograf_objects_skipped_total`), and the problems each reports (files that
//! did not parse, a missing directory).

use super::Index;
use crate::board::SourceProblem;
use crate::model::{Skip, SkipCounts};
use std::sync::Arc;

impl Index {
    /// Counts an object of `source` skipped for `skip`.
    pub(super) fn count_skip(&self, source: &str, skip: &Skip) {
        self.count_skips(source, |c| c.add(skip));
    }

    /// Adds to the skip counts of `source` (sources bounded: each is a source name, and
    /// one source's counts are a fixed table).
    pub(super) fn count_skips(&self, source: &str, add: impl FnOnce(&mut SkipCounts)) {
        let mut skips = self.skips.lock();
        match skips.get_mut(source) {
            Some(counts) => add(counts),
            None => add(skips.entry(Arc::from(source)).or_default()),
        }
    }

    /// Objects skipped so far, by source.
    pub fn skipped(&self) -> Vec<(String, SkipCounts)> {
        let skips = self.skips.lock();
        skips.iter().map(|(s, c)| (s.to_string(), *c)).collect()
    }

    /// Replaces the problems `source` reports.
    pub fn set_source_problems(&self, source: &str, problems: Vec<SourceProblem>) {
        let mut all = self.problems.lock();
        if problems.is_empty() {
            all.remove(source);
        } else {
            all.insert(source.to_owned(), problems);
        }
    }

    /// Every source (those the index was created with, and those that reported problems)
    /// with its reported problems, by source name.
    pub fn source_problems(&self) -> Vec<(String, Vec<SourceProblem>)> {
        let problems = self.problems.lock();
        let mut out: std::collections::BTreeMap<String, Vec<SourceProblem>> = self
            .sources
            .iter()
            .map(|s| (s.clone(), Vec::new()))
            .collect();
        for (s, p) in problems.iter() {
            out.insert(s.clone(), p.clone());
        }
        out.into_iter().collect()
    }
}
