//! Run-time drift: how often a definition's path that should find something found nothing.

use crate::proto::v1 as pb;
use crate::resolve::diagnostics::code;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};

/// The field of a root's status mappings: counted when no mapping matches (status
/// `Undefined`), the sign of a renamed phase or condition type.
pub const STATUS_MAPPINGS: &str =
    "spec.structureDefinition.rootComponent.statusDefinition.statusMappings";

/// Most `(definition, path)` series kept; later new ones are dropped (the label set is
/// bounded by the definitions' fields, this is a backstop against churning definitions).
const MAX_SERIES: usize = 10_000;

/// Per definition and definition field (YAML path): how many times a workload graph began to
/// show that path finding nothing — a pod spec path that found no spec for an instance that
/// wants pods (`spec_missing`), a gang key a member pod does not have (`gang_key_missing`),
/// status mappings none of which matched (`Undefined`). A workload that keeps missing it
/// counts once, until its graph shows it found again. Labels come from definitions, never
/// from objects.
#[derive(Debug, Default)]
pub struct EmptyPaths {
    counts: Mutex<BTreeMap<(String, String), u64>>,
}

/// The definition fields `graph` shows finding nothing.
pub fn empty_in(graph: &pb::Workload) -> BTreeSet<&str> {
    let mut out: BTreeSet<&str> = graph
        .diagnostics
        .iter()
        .filter(|d| matches!(d.code.as_str(), code::SPEC_MISSING | code::GANG_KEY_MISSING))
        .filter(|d| !d.path.is_empty())
        .map(|d| d.path.as_str())
        .collect();
    if graph
        .status
        .as_ref()
        .is_some_and(|s| s.phase == pb::Phase::Undefined as i32)
    {
        out.insert(STATUS_MAPPINGS);
    }
    out
}

impl EmptyPaths {
    /// A workload's graph changed from `before` (`None`: it is new) to `after`: counts the
    /// fields `after` shows finding nothing that `before` did not.
    pub fn observe(&self, before: Option<&pb::Workload>, after: &pb::Workload) {
        let Some(definition) = after.definition.as_ref().map(|d| d.name.as_str()) else {
            return;
        };
        let now = empty_in(after);
        if now.is_empty() {
            return;
        }
        let same_definition = before
            .and_then(|b| b.definition.as_ref())
            .map(|d| d.name.as_str())
            == Some(definition);
        let was = match before {
            Some(b) if same_definition => empty_in(b),
            _ => BTreeSet::new(),
        };
        let mut counts = self.counts.lock();
        for path in now.difference(&was) {
            let key = (definition.to_owned(), (*path).to_owned());
            if counts.len() >= MAX_SERIES && !counts.contains_key(&key) {
                continue;
            }
            *counts.entry(key).or_default() += 1;
        }
    }

    /// Every `((definition, path), count)`.
    pub fn snapshot(&self) -> Vec<((String, String), u64)> {
        let counts = self.counts.lock();
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(phase: pb::Phase, missing: &[&str]) -> pb::Workload {
        pb::Workload {
            definition: Some(pb::DefinitionRef {
                name: "d".into(),
                ..Default::default()
            }),
            status: Some(pb::Status {
                phase: phase as i32,
                ..Default::default()
            }),
            diagnostics: missing
                .iter()
                .map(|p| pb::Diagnostic {
                    code: code::SPEC_MISSING.into(),
                    path: (*p).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn counts_onsets_per_definition_and_path() {
        let e = EmptyPaths::default();
        let ok = graph(pb::Phase::Running, &[]);
        let missing = graph(pb::Phase::Running, &["a.podTemplateSpecPath"]);
        e.observe(None, &ok);
        assert!(e.snapshot().is_empty());
        e.observe(Some(&ok), &missing);
        e.observe(Some(&missing), &missing);
        assert_eq!(
            e.snapshot(),
            [(("d".into(), "a.podTemplateSpecPath".into()), 1)]
        );
        e.observe(Some(&missing), &ok);
        e.observe(Some(&ok), &missing);
        let undefined = graph(pb::Phase::Undefined, &["a.podTemplateSpecPath"]);
        e.observe(Some(&missing), &undefined);
        assert_eq!(
            e.snapshot(),
            [
                (("d".into(), "a.podTemplateSpecPath".into()), 2),
                (("d".into(), STATUS_MAPPINGS.into()), 1),
            ]
        );
    }
}
