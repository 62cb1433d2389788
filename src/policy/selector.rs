//! A policy's `namespaceSelector`: a Kubernetes `LabelSelector` (`matchLabels` and
//! `matchExpressions` with `In`, `NotIn`, `Exists`, `DoesNotExist`), checked at load, matched
//! against a namespace's labels. Every namespace carries `kubernetes.io/metadata.name` (the
//! API server sets it), so that label is known even when the others are not.

use crate::patch::intents::{check_label_value, check_qualified_name};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The label the API server puts on every namespace: its name.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Most requirements (labels plus expressions) and values of one selector.
const MAX_REQUIREMENTS: usize = 64;

/// A namespace being asked about: its name and, when known, its labels.
#[derive(Debug, Clone, Copy)]
pub struct Namespace<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its labels; `None` when they could not be read (then only [`NAME_LABEL`] is known).
    pub labels: Option<&'a BTreeMap<String, String>>,
}

impl<'a> Namespace<'a> {
    /// A namespace whose labels are not known.
    pub fn named(name: &'a str) -> Namespace<'a> {
        Namespace { name, labels: None }
    }

    /// The value of label `key`: `Some(None)` when the label is known to be absent, `None`
    /// when it is not known.
    fn label(&self, key: &str) -> Option<Option<&str>> {
        if key == NAME_LABEL {
            return Some(Some(self.name));
        }
        self.labels.map(|l| l.get(key).map(String::as_str))
    }
}

/// The selector as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Spec {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<ExpressionSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpressionSpec {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A checked `namespaceSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Spec {
    /// Checks the selector as the API server checks a `LabelSelector`.
    pub(super) fn check(self) -> Result<Selector, String> {
        let count = self.match_labels.len() + self.match_expressions.len();
        if count > MAX_REQUIREMENTS {
            return Err(format!("{count} requirements; at most {MAX_REQUIREMENTS}"));
        }
        let mut requirements = Vec::with_capacity(count);
        for (k, v) in self.match_labels {
            check_qualified_name("matchLabels key", &k).map_err(|e| e.to_string())?;
            check_label_value("matchLabels value", &v).map_err(|e| e.to_string())?;
            requirements.push(Requirement::In(k, vec![v]));
        }
        for (n, e) in self.match_expressions.into_iter().enumerate() {
            let at = format!("matchExpressions[{n}]");
            check_qualified_name("key", &e.key).map_err(|x| format!("{at}: {x}"))?;
            if e.values.len() > MAX_REQUIREMENTS {
                return Err(format!("{at}: at most {MAX_REQUIREMENTS} values"));
            }
            for v in &e.values {
                check_label_value("value", v).map_err(|x| format!("{at}: {x}"))?;
            }
            let r = match (e.operator.as_str(), e.values.is_empty()) {
                ("In", false) => Requirement::In(e.key, e.values),
                ("NotIn", false) => Requirement::NotIn(e.key, e.values),
                ("Exists", true) => Requirement::Exists(e.key),
                ("DoesNotExist", true) => Requirement::DoesNotExist(e.key),
                ("In" | "NotIn", true) => {
                    return Err(format!("{at}: {} needs values", e.operator));
                }
                ("Exists" | "DoesNotExist", false) => {
                    return Err(format!("{at}: {} takes no values", e.operator));
                }
                (other, _) => {
                    return Err(format!(
                        "{at}: operator `{}` is not In, NotIn, Exists or DoesNotExist",
                        crate::excerpt::echo(other)
                    ));
                }
            };
            requirements.push(r);
        }
        Ok(Selector { requirements })
    }
}

impl Selector {
    /// True when `namespace` matches. A requirement on a label that is not known does not
    /// match (a policy never acts on a guess).
    pub fn matches(&self, namespace: Namespace<'_>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::In(k, vs) => {
                matches!(namespace.label(k), Some(Some(v)) if vs.iter().any(|x| x == v))
            }
            Requirement::NotIn(k, vs) => match namespace.label(k) {
                Some(Some(v)) => !vs.iter().any(|x| x == v),
                Some(None) => true,
                None => false,
            },
            Requirement::Exists(k) => matches!(namespace.label(k), Some(Some(_))),
            Requirement::DoesNotExist(k) => matches!(namespace.label(k), Some(None)),
        })
    }

    /// True when matching needs labels other than [`NAME_LABEL`].
    pub fn needs_labels(&self) -> bool {
        self.requirements.iter().any(|r| {
            let key = match r {
                Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::DoesNotExist(k) => k,
            };
            key != NAME_LABEL
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(yaml: &str) -> Result<Selector, String> {
        let spec: Spec = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        spec.check()
    }

    #[test]
    fn matches_as_kubernetes_label_selectors_do() {
        let s = selector(
            "matchLabels: {team: ml}\nmatchExpressions:\n  - {key: tier, operator: NotIn, values: [dev]}\n  - {key: gpu, operator: Exists}",
        )
        .expect("valid");
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ml = labels(&[("team", "ml"), ("gpu", "h100")]);
        assert!(s.matches(Namespace {
            name: "a",
            labels: Some(&ml)
        }));
        let dev = labels(&[("team", "ml"), ("gpu", "h100"), ("tier", "dev")]);
        assert!(!s.matches(Namespace {
            name: "a",
            labels: Some(&dev)
        }));
        let no_gpu = labels(&[("team", "ml")]);
        assert!(!s.matches(Namespace {
            name: "a",
            labels: Some(&no_gpu)
        }));
        // Labels not known: no match.
        assert!(!s.matches(Namespace::named("a")));
        assert!(s.needs_labels());
        // The name label is always known.
        let by_name = selector(
            "matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]",
        )
        .expect("valid");
        assert!(!by_name.needs_labels());
        assert!(by_name.matches(Namespace::named("ml")));
        assert!(!by_name.matches(Namespace::named("kube-system")));
    }

    #[test]
    fn a_selector_kubernetes_would_refuse_is_refused_with_the_reason() {
        for (yaml, why) in [
            ("matchExpressions: [{key: a, operator: In}]", "needs values"),
            (
                "matchExpressions: [{key: a, operator: Exists, values: [x]}]",
                "takes no values",
            ),
            (
                "matchExpressions: [{key: a, operator: Near, values: [x]}]",
                "is not In",
            ),
            ("matchLabels: {\"bad key!\": x}", "matchLabels key"),
            ("matchLabels: {a: \"bad value!\"}", "matchLabels value"),
            ("matchLabel: {a: b}", "unknown field"),
        ] {
            let e = selector(yaml).expect_err(yaml);
            assert!(e.contains(why), "{yaml}: {e}");
        }
        let many: String = (0..65).map(|i| format!("k{i}: v\n")).collect();
        let e = selector(&format!(
            "matchLabels:\n{}",
            many.lines().map(|l| format!("  {l}\n")).collect::<String>()
        ))
        .expect_err("too many");
        assert!(e.contains("at most 64"), "{e}");
    }
}
