//! Admission policies (`serve --policies FILE`): which workloads get which write-path
//! intents when they are created. A policy names the namespaces and kinds it covers and the
//! intents it sets — exactly those of [`crate::patch::Intents`]:
//!
//! ```yaml
//! policies:
//!   - name: ml-to-kai
//!     namespaces: [ml]                          # optional: every namespace
//!     kinds: [JobSet, kubeflow.org/PyTorchJob]  # optional: every kind with a definition
//!     operations: [CREATE]                      # optional: CREATE (UPDATE on request)
//!     set:
//!       schedulerName: kai-scheduler
//!       labels: {kai.scheduler/queue: team-ml}
//!       priorityClassName: train
//! ```
//!
//! A file is read whole and judged whole: a value Kubernetes would refuse, an unknown field,
//! more than [`MAX_POLICIES`] policies, two policies with one name, or two policies that may
//! cover one workload and set one field to different values (a conflict) refuse the file,
//! with the policy, the field and the reason; the caller keeps the last good set.

pub mod live;
pub mod selector;

pub use live::Live;
pub use selector::Namespace;

use crate::model::names::is_dns1123_subdomain;
use crate::patch::{Intents, Lifecycle, Toleration};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Most policies in one file.
pub const MAX_POLICIES: usize = 1000;
/// Largest policy file read.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;
/// Most namespaces or kinds one policy lists.
pub const MAX_SCOPE: usize = 256;

/// Why a policy file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// The operation an AdmissionReview asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
}

impl Operation {
    /// The operation named in an AdmissionReview (`None`: one policies never act on).
    pub fn parse(text: &str) -> Option<Operation> {
        match text {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            _ => None,
        }
    }
}

/// A kind a policy covers: `Kind` (any group) or `group/Kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KindMatch {
    group: Option<String>,
    kind: String,
}

impl KindMatch {
    fn parse(text: &str) -> Result<KindMatch, String> {
        let (group, kind) = match text.rsplit_once('/') {
            Some((g, k)) => (Some(g.to_owned()), k),
            None => (None, text),
        };
        let kind_ok =
            !kind.is_empty() && kind.len() <= 63 && kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !kind_ok {
            return Err(format!(
                "`{}` is not KIND or GROUP/KIND",
                crate::excerpt::echo(text)
            ));
        }
        if let Some(g) = &group
            && !g.is_empty()
            && !is_dns1123_subdomain(g)
        {
            return Err(format!(
                "`{}`: the group must be a DNS-1123 subdomain",
                crate::excerpt::echo(text)
            ));
        }
        Ok(KindMatch {
            group,
            kind: kind.to_owned(),
        })
    }

    fn matches(&self, group: &str, kind: &str) -> bool {
        self.kind == kind && self.group.as_deref().is_none_or(|g| g == group)
    }

    /// True when some kind matches both.
    fn overlaps(&self, other: &KindMatch) -> bool {
        self.kind == other.kind
            && match (&self.group, &other.group) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

/// One policy, checked.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Its name (unique in the file).
    pub name: String,
    namespaces: Vec<String>,
    selector: Option<selector::Selector>,
    kinds: Vec<KindMatch>,
    operations: Vec<Operation>,
    /// What it sets.
    pub intents: Intents,
}

impl Policy {
    /// True when it covers a `group`/`kind` object in `namespace` on `operation`.
    pub fn covers(
        &self,
        namespace: Namespace<'_>,
        group: &str,
        kind: &str,
        operation: Operation,
    ) -> bool {
        self.operations.contains(&operation)
            && (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace.name))
            && self.selector.as_ref().is_none_or(|s| s.matches(namespace))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k.matches(group, kind)))
    }

    /// True when some object may be covered by both (selectors are not compared: two
    /// policies with selectors may always cover one namespace).
    fn overlaps(&self, other: &Policy) -> bool {
        let namespaces = self.namespaces.is_empty()
            || other.namespaces.is_empty()
            || self.namespaces.iter().any(|n| other.namespaces.contains(n));
        let kinds = self.kinds.is_empty()
            || other.kinds.is_empty()
            || self
                .kinds
                .iter()
                .any(|k| other.kinds.iter().any(|o| k.overlaps(o)));
        let operations = self.operations.iter().any(|o| other.operations.contains(o));
        namespaces && kinds && operations
    }
}

/// A checked policy file: the policies in file order.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    policies: Vec<Policy>,
}

impl PolicySet {
    /// Reads and checks a policy file's text (YAML or JSON).
    pub fn parse(text: &str) -> Result<PolicySet, PolicyError> {
        if text.len() > MAX_FILE_BYTES {
            return Err(PolicyError(format!(
                "the file has {} bytes; at most {MAX_FILE_BYTES} are read",
                text.len()
            )));
        }
        let file: File = serde_saphyr::from_str(text).map_err(|e| {
            PolicyError(crate::excerpt::printable(
                &e.to_string(),
                crate::excerpt::PARSE_ERROR_BYTES,
            ))
        })?;
        if file.policies.len() > MAX_POLICIES {
            return Err(PolicyError(format!(
                "{} policies; at most {MAX_POLICIES} are accepted",
                file.policies.len()
            )));
        }
        let mut policies: Vec<Policy> = Vec::with_capacity(file.policies.len());
        for (n, spec) in file.policies.into_iter().enumerate() {
            let at = format!("policies[{n}]");
            let policy = spec.check(&at)?;
            if let Some(p) = policies.iter().find(|p| p.name == policy.name) {
                return Err(PolicyError(format!(
                    "{at}: the name `{}` is taken by an earlier policy",
                    p.name
                )));
            }
            for earlier in &policies {
                if let Some(field) = conflict(earlier, &policy) {
                    return Err(PolicyError(format!(
                        "{at} (`{}`) conflicts with `{}`: both may cover one workload and set {field} to different values",
                        policy.name, earlier.name
                    )));
                }
            }
            policies.push(policy);
        }
        Ok(PolicySet { policies })
    }

    /// True when some policy's `namespaceSelector` reads namespace labels beyond the name:
    /// the caller then reads the namespace's labels before asking.
    pub fn needs_namespace_labels(&self) -> bool {
        self.policies.iter().any(|p| {
            p.selector
                .as_ref()
                .is_some_and(selector::Selector::needs_labels)
        })
    }

    /// How many policies it holds.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The policies covering a `group`/`kind` object in `namespace` on `operation`, in file
    /// order, and their intents merged (maps joined, tolerations appended once); `None` when
    /// none covers it.
    pub fn intents_for(
        &self,
        namespace: Namespace<'_>,
        group: &str,
        kind: &str,
        operation: Operation,
    ) -> Option<(Vec<&str>, Intents)> {
        let mut names = Vec::new();
        let mut merged = Intents::default();
        for p in self
            .policies
            .iter()
            .filter(|p| p.covers(namespace, group, kind, operation))
        {
            names.push(p.name.as_str());
            merge(&mut merged, &p.intents);
        }
        (!names.is_empty()).then_some((names, merged))
    }
}

fn merge(into: &mut Intents, from: &Intents) {
    if from.scheduler_name.is_some() {
        into.scheduler_name.clone_from(&from.scheduler_name);
    }
    if from.priority_class_name.is_some() {
        into.priority_class_name
            .clone_from(&from.priority_class_name);
    }
    into.labels.extend(from.labels.clone());
    into.annotations.extend(from.annotations.clone());
    into.node_selector.extend(from.node_selector.clone());
    for t in &from.tolerations {
        if !into.tolerations.contains(t) {
            into.tolerations.push(t.clone());
        }
    }
    if from.lifecycle.is_some() {
        into.lifecycle = from.lifecycle;
    }
    into.replicas.extend(from.replicas.clone());
}

/// The first field two overlapping policies set to different values.
fn conflict(a: &Policy, b: &Policy) -> Option<String> {
    if !a.overlaps(b) {
        return None;
    }
    let (x, y) = (&a.intents, &b.intents);
    if let (Some(s), Some(t)) = (&x.scheduler_name, &y.scheduler_name)
        && s != t
    {
        return Some("schedulerName".into());
    }
    if let (Some(s), Some(t)) = (&x.priority_class_name, &y.priority_class_name)
        && s != t
    {
        return Some("priorityClassName".into());
    }
    if let (Some(s), Some(t)) = (x.lifecycle, y.lifecycle)
        && s != t
    {
        return Some("suspend".into());
    }
    let maps = [
        ("labels", &x.labels, &y.labels),
        ("annotations", &x.annotations, &y.annotations),
        ("nodeSelector", &x.node_selector, &y.node_selector),
    ];
    for (what, m, n) in maps {
        if let Some(k) = m.iter().find(|(k, v)| n.get(*k).is_some_and(|w| w != *v)) {
            return Some(format!("{what}.{}", k.0));
        }
    }
    if let Some((c, _)) = x
        .replicas
        .iter()
        .find(|(c, n)| y.replicas.get(*c).is_some_and(|m| m != *n))
    {
        return Some(format!("replicas.{c}"));
    }
    None
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    policies: Vec<Spec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    name: String,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    namespace_selector: Option<selector::Spec>,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    operations: Vec<String>,
    set: Set,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Set {
    #[serde(default)]
    scheduler_name: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    priority_class_name: Option<String>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    /// `KEY[=VALUE]:EFFECT`, as `kartograf patch --toleration`.
    #[serde(default)]
    tolerations: Vec<String>,
    /// `true`: suspend; `false`: resume.
    #[serde(default)]
    suspend: Option<bool>,
    /// Replicas by component name.
    #[serde(default)]
    replicas: BTreeMap<String, i32>,
}

impl Spec {
    fn check(self, at: &str) -> Result<Policy, PolicyError> {
        let err = |m: String| PolicyError(format!("{at}: {m}"));
        if self.name.is_empty() || self.name.len() > 253 || !is_dns1123_subdomain(&self.name) {
            return Err(err(format!(
                "name `{}` must be a DNS-1123 subdomain (lower-case alphanumerics, `-`, `.`)",
                crate::excerpt::echo(&self.name)
            )));
        }
        let at = format!("{at} (`{}`)", self.name);
        let err = |m: String| PolicyError(format!("{at}: {m}"));
        let selector = self
            .namespace_selector
            .map(|s| {
                s.check()
                    .map_err(|m| err(format!("namespaceSelector: {m}")))
            })
            .transpose()?;
        if self.namespaces.len() > MAX_SCOPE || self.kinds.len() > MAX_SCOPE {
            return Err(err(format!(
                "at most {MAX_SCOPE} namespaces and {MAX_SCOPE} kinds"
            )));
        }
        for n in &self.namespaces {
            if n.is_empty() || n.len() > 63 || !crate::model::names::is_dns1123_label_chars(n) {
                return Err(err(format!(
                    "namespaces: `{}` is not a namespace name",
                    crate::excerpt::echo(n)
                )));
            }
        }
        let kinds = self
            .kinds
            .iter()
            .map(|k| KindMatch::parse(k).map_err(|m| err(format!("kinds: {m}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let operations = if self.operations.is_empty() {
            vec![Operation::Create]
        } else {
            let mut ops = Vec::new();
            for o in &self.operations {
                let op = Operation::parse(o).ok_or_else(|| {
                    err(format!(
                        "operations: `{}` is not CREATE or UPDATE",
                        crate::excerpt::echo(o)
                    ))
                })?;
                if !ops.contains(&op) {
                    ops.push(op);
                }
            }
            ops
        };
        let s = self.set;
        let tolerations = s
            .tolerations
            .iter()
            .map(|t| Toleration::parse(t).map_err(|e| err(format!("set.tolerations: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let intents = Intents {
            scheduler_name: s.scheduler_name,
            labels: s.labels,
            annotations: s.annotations,
            priority_class_name: s.priority_class_name,
            node_selector: s.node_selector,
            tolerations,
            lifecycle: s.suspend.map(|on| {
                if on {
                    Lifecycle::Suspend
                } else {
                    Lifecycle::Resume
                }
            }),
            replicas: s.replicas,
        };
        if intents.is_empty() {
            return Err(err("`set` sets nothing".into()));
        }
        intents.validate().map_err(|e| err(format!("set: {e}")))?;
        Ok(Policy {
            name: self.name,
            namespaces: self.namespaces,
            selector,
            kinds,
            operations,
            intents,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
policies:
  - name: ml-to-kai
    namespaces: [ml]
    kinds: [JobSet, kubeflow.org/PyTorchJob]
    set:
      schedulerName: kai-scheduler
      labels: {kai.scheduler/queue: team-ml}
      priorityClassName: train
  - name: queue-everywhere
    set:
      labels: {kueue.x-k8s.io/queue-name: default}
      tolerations: ["nvidia.com/gpu:NoSchedule"]
"#;

    #[test]
    fn matching_policies_merge_in_file_order() {
        let set = PolicySet::parse(FILE).expect("valid");
        assert_eq!(set.len(), 2);
        let (names, intents) = set
            .intents_for(
                Namespace::named("ml"),
                "jobset.x-k8s.io",
                "JobSet",
                Operation::Create,
            )
            .expect("covered");
        assert_eq!(names, ["ml-to-kai", "queue-everywhere"]);
        assert_eq!(intents.scheduler_name.as_deref(), Some("kai-scheduler"));
        assert_eq!(intents.labels.len(), 2);
        assert_eq!(intents.tolerations.len(), 1);
        // Another namespace: only the policy for every namespace.
        let (names, intents) = set
            .intents_for(
                Namespace::named("web"),
                "jobset.x-k8s.io",
                "JobSet",
                Operation::Create,
            )
            .expect("covered");
        assert_eq!(names, ["queue-everywhere"]);
        assert_eq!(intents.scheduler_name, None);
        // A group that is not the one named; UPDATE by default is not acted on.
        let (names, _) = set
            .intents_for(
                Namespace::named("ml"),
                "other.io",
                "PyTorchJob",
                Operation::Create,
            )
            .expect("covered");
        assert_eq!(names, ["queue-everywhere"]);
        assert!(
            set.intents_for(
                Namespace::named("ml"),
                "jobset.x-k8s.io",
                "JobSet",
                Operation::Update
            )
            .is_none()
        );
    }

    #[test]
    fn conflicts_are_refused_naming_both_policies_and_the_field() {
        let text = r#"
policies:
  - name: a
    namespaces: [ml]
    set: {schedulerName: kai-scheduler}
  - name: b
    kinds: [JobSet]
    set: {schedulerName: volcano}
"#;
        let e = PolicySet::parse(text).unwrap_err().0;
        assert!(
            e.contains("`b`") && e.contains("`a`") && e.contains("schedulerName"),
            "{e}"
        );
        // Disjoint namespaces: no conflict.
        let ok = text.replace("kinds: [JobSet]", "namespaces: [web]");
        assert!(PolicySet::parse(&ok).is_ok());
        let labels = r#"
policies:
  - {name: a, set: {labels: {q: one}}}
  - {name: b, set: {labels: {q: two}}}
"#;
        let e = PolicySet::parse(labels).unwrap_err().0;
        assert!(e.contains("labels.q"), "{e}");
    }

    #[test]
    fn hostile_files_are_refused_with_the_reason() {
        let many: String = std::iter::once("policies:\n".to_owned())
            .chain((0..10_000).map(|n| format!("  - {{name: p{n}, set: {{schedulerName: s}}}}\n")))
            .collect();
        let e = PolicySet::parse(&many).unwrap_err().0;
        assert!(e.contains("at most 1000"), "{e}");
        for (text, says) in [
            (
                "policies:\n  - {name: a, set: {labels: {'-bad': x}}}\n",
                "label",
            ),
            (
                "policies:\n  - {name: a, set: {labels: {q: 'not valid!'}}}\n",
                "label",
            ),
            (
                "policies:\n  - {name: A_B, set: {schedulerName: s}}\n",
                "DNS-1123",
            ),
            ("policies:\n  - {name: a, set: {}}\n", "sets nothing"),
            ("policies:\n  - {name: a, sett: {}}\n", "sett"),
            (
                "policies:\n  - {name: a, kinds: ['a b'], set: {schedulerName: s}}\n",
                "KIND",
            ),
            (
                "policies:\n  - {name: a, operations: [DELETE], set: {schedulerName: s}}\n",
                "DELETE",
            ),
            (
                "policies:\n  - {name: a, set: {schedulerName: s}}\n  - {name: a, set: {schedulerName: s}}\n",
                "taken",
            ),
            (
                "policies:\n  - {name: a, set: {tolerations: ['k:Sometimes']}}\n",
                "effect",
            ),
        ] {
            let e = PolicySet::parse(text).map(|_| ()).unwrap_err().0;
            assert!(e.contains(says), "{text}: {e}");
        }
        let big = "#".repeat(MAX_FILE_BYTES + 1);
        assert!(PolicySet::parse(&big).unwrap_err().0.contains("bytes"));
    }
}
