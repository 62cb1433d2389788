//! What readers ask for: which workloads (a [`Filter`]: cluster, namespace, kinds, label
//! selector) and how totals are grouped ([`TotalsKey`]).

use crate::proto::v1 as pb;

/// Which workloads a List or Watch wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this namespace (empty: all).
    pub namespace: String,
    /// Only these kinds (case-insensitive `Kind`, or `group/Kind`); empty: all.
    pub kinds: Vec<String>,
    /// Kubernetes label selector on the root object ([`super::selector`]).
    pub label_selector: String,
    /// Only workloads of this cluster (`Workload.cluster`); empty: all.
    pub cluster: String,
}

/// A parsed label selector, or one that matches nothing (the filter's selector did not parse).
pub(crate) struct Selector(Option<super::selector::Selector>);

impl Selector {
    pub(crate) fn matches(&self, labels: &[(String, String)]) -> bool {
        self.0.as_ref().is_some_and(|s| s.matches(labels))
    }
}

impl Filter {
    /// Checks the selector syntax (see [`super::selector::parse`]).
    pub fn validate(&self) -> Result<(), super::selector::SelectorError> {
        super::selector::parse(&self.label_selector).map(|_| ())
    }

    /// The parsed label selector; one that does not parse matches nothing.
    pub(crate) fn selector(&self) -> Selector {
        Selector(super::selector::parse(&self.label_selector).ok())
    }

    /// Cluster, namespace and kind only.
    pub(crate) fn matches_scope(&self, w: &pb::Workload) -> bool {
        if !self.cluster.is_empty() && w.cluster != self.cluster {
            return false;
        }
        let r = w.r#ref.as_ref();
        let ns = r.map_or("", |r| r.namespace.as_str());
        if !self.namespace.is_empty() && ns != self.namespace {
            return false;
        }
        if !self.kinds.is_empty() {
            let kind = r.map_or("", |r| r.kind.as_str());
            let group = r.map_or("", |r| {
                r.api_version.rsplit_once('/').map_or("", |(g, _)| g)
            });
            let ok = self.kinds.iter().any(|k| match k.split_once('/') {
                Some((g, kd)) => g == group && kd.eq_ignore_ascii_case(kind),
                None => k.eq_ignore_ascii_case(kind) || k.eq_ignore_ascii_case(&format!("{kind}s")),
            });
            if !ok {
                return false;
            }
        }
        true
    }
}

/// Grouping of `Totals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TotalsKey {
    /// By namespace.
    Namespace,
    /// By `group/Kind`.
    Kind,
    /// By `namespace/Kind/name` (and cluster).
    Workload,
    /// By cluster.
    Cluster,
}
