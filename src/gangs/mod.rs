//! Gangs as the schedulers' own objects (DESIGN §8a, docs/gangs.md).
//!
//! A workload's gangs (computed by [`crate::resolve`] from the definitions' gang
//! instructions) are rendered as the objects each consumer reads — KAI Scheduler's
//! `scheduling.run.ai/v2alpha2` PodGroup ([`kai`]), Kubernetes' `scheduling.k8s.io` Workload,
//! PodGroup and CompositePodGroup ([`workload_api`]), scheduler-plugins coscheduling's
//! `scheduling.x-k8s.io/v1alpha1` PodGroup ([`coscheduling`]) — named as each ecosystem names
//! them ([`names`]) and checked against each API's own admission rules. [`verify`] compares
//! such objects found in a cluster with the graph of the workload their pods belong to.
//!
//! These are consumers' protocols, not framework knowledge: which workload a gang object
//! belongs to always comes from data (its pods' links, its owner references).

pub mod coscheduling;
pub mod kai;
pub mod live;
pub mod names;
mod rule;
pub mod verify;
pub mod workload_api;

use crate::proto::v1 as pb;
pub use rule::Rule;
use serde_json::Value;

/// Deepest gang tree rendered (the resolver builds at most two levels; a graph from
/// elsewhere is bounded here).
pub const MAX_DEPTH: usize = 8;
/// Most gang groups (all levels) rendered for one workload.
pub const MAX_GROUPS: usize = 10_000;

/// The gang object kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// KAI Scheduler `scheduling.run.ai/v2alpha2` PodGroup.
    Kai,
    /// Kubernetes `scheduling.k8s.io/v1beta1` Workload + PodGroups (+ `v1alpha3`
    /// CompositePodGroups).
    Workload,
    /// scheduler-plugins `scheduling.x-k8s.io/v1alpha1` PodGroup.
    Coscheduling,
}

impl Format {
    /// The API's format.
    pub fn to_proto(self) -> pb::GangFormat {
        match self {
            Format::Kai => pb::GangFormat::Kai,
            Format::Workload => pb::GangFormat::Workload,
            Format::Coscheduling => pb::GangFormat::Coscheduling,
        }
    }

    /// The API's format number, or `None` for an unknown or unset one.
    pub fn from_proto(n: i32) -> Option<Format> {
        match pb::GangFormat::try_from(n).ok()? {
            pb::GangFormat::Kai => Some(Format::Kai),
            pb::GangFormat::Workload => Some(Format::Workload),
            pb::GangFormat::Coscheduling => Some(Format::Coscheduling),
            pb::GangFormat::Unspecified => None,
        }
    }
}

/// Why a workload's gangs cannot be rendered in a format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The workload has no gang (its definition gives no gang instructions).
    #[error("{0} has no gang (its definition has no gangScheduling instruction)")]
    NoGang(String),
    /// The workload's graph was cut short (a deadline, budget or limit, a failed evaluation,
    /// an unreadable object): a gang object built from it could state a wrong minimum.
    #[error(
        "{workload}'s graph is incomplete, so no gang object is built from it ({count} problem(s): {first})"
    )]
    Incomplete {
        /// The workload, as `kind/namespace/name`.
        workload: String,
        /// How many diagnostics cut the graph short.
        count: usize,
        /// The first few of them, as `code: message`, `; `-separated.
        first: String,
    },
    /// The gangs break one of the target API's rules.
    #[error("{workload}'s gangs cannot be expressed as {api}: {rule}")]
    Inexpressible {
        /// The workload, as `kind/namespace/name`.
        workload: String,
        /// The target API.
        api: &'static str,
        /// The rule broken, and where.
        rule: Rule,
    },
}

/// Rendered gang objects.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    /// The objects, in creation order.
    pub objects: Vec<Value>,
    /// What the format cannot carry.
    pub notes: Vec<String>,
    /// For each object, the gang group it stands for, as indices from the top-level groups
    /// down the subgroups (empty for an object of no one gang: the Workload).
    pub paths: Vec<Vec<usize>>,
}

impl Rendered {
    /// The graph's gang group at `path`.
    pub fn group<'w>(workload: &'w pb::Workload, path: &[usize]) -> Option<&'w pb::GangGroup> {
        let (first, rest) = path.split_first()?;
        let mut g = workload.gang.as_ref()?.groups.get(*first)?;
        for &i in rest {
            g = g.subgroups.get(i)?;
        }
        Some(g)
    }
}

/// Diagnostic codes that mean a graph was cut short or computed from missing values: no gang
/// object is rendered from such a graph.
pub const INCOMPLETE_CODES: &[&str] = &[
    crate::resolve::diagnostics::code::DEADLINE,
    crate::resolve::diagnostics::code::BUDGET_EXCEEDED,
    crate::resolve::diagnostics::code::QUARANTINED,
    crate::resolve::diagnostics::code::LIMIT_EXCEEDED,
    crate::resolve::diagnostics::code::OBJECT_UNREADABLE,
    crate::resolve::diagnostics::code::EVAL_ERROR,
    crate::resolve::diagnostics::code::QUANTITY_OUT_OF_RANGE,
];

/// How many of the diagnostics that cut a graph short a refusal quotes.
const QUOTED_PROBLEMS: usize = 3;

/// Renders `workload`'s gangs as `format`'s objects, validated by that API's rules. A graph
/// that was cut short ([`INCOMPLETE_CODES`]) is refused with its diagnostics.
pub fn render(workload: &pb::Workload, format: Format) -> Result<Rendered, RenderError> {
    let problems: Vec<&pb::Diagnostic> = workload
        .diagnostics
        .iter()
        .filter(|d| INCOMPLETE_CODES.contains(&d.code.as_str()))
        .collect();
    if !problems.is_empty() {
        return Err(RenderError::Incomplete {
            workload: Root::of(workload).label(),
            count: problems.len(),
            first: problems
                .iter()
                .take(QUOTED_PROBLEMS)
                .map(|d| format!("{}: {}", d.code, d.message))
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    render_graph(workload, format)
}

/// [`render`] without the completeness check (verification matches objects by the names
/// kartograf would give them, whatever the graph).
pub(crate) fn render_graph(
    workload: &pb::Workload,
    format: Format,
) -> Result<Rendered, RenderError> {
    let root = Root::of(workload);
    let groups = workload
        .gang
        .as_ref()
        .map(|g| g.groups.as_slice())
        .unwrap_or_default();
    if groups.is_empty() {
        return Err(RenderError::NoGang(root.label()));
    }
    let fail = |api: &'static str| {
        let label = root.label();
        move |rule: Rule| RenderError::Inexpressible {
            workload: label.clone(),
            api,
            rule,
        }
    };
    check_shape(groups).map_err(fail("any gang object"))?;
    match format {
        Format::Kai => kai::render(&root, groups).map_err(fail(kai::API)),
        Format::Workload => workload_api::render(&root, groups).map_err(fail(workload_api::API)),
        Format::Coscheduling => {
            coscheduling::render(&root, workload, groups).map_err(fail(coscheduling::API))
        }
    }
}

/// Bounds the gang tree: at most [`MAX_DEPTH`] levels and [`MAX_GROUPS`] groups.
fn check_shape(groups: &[pb::GangGroup]) -> Result<(), Rule> {
    let mut stack: Vec<(&pb::GangGroup, usize)> = groups.iter().map(|g| (g, 1)).collect();
    let mut seen = 0usize;
    while let Some((g, depth)) = stack.pop() {
        seen += 1;
        if seen > MAX_GROUPS {
            return Err(Rule::TooManyGroups);
        }
        if depth > MAX_DEPTH {
            return Err(Rule::TooDeep {
                gang: g.name.clone(),
            });
        }
        stack.extend(g.subgroups.iter().map(|s| (s, depth + 1)));
    }
    Ok(())
}

/// The workload's root object, as gang objects name and own it.
#[derive(Debug, Clone, Default)]
pub struct Root {
    /// `group/version` (or `v1`).
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl Root {
    /// The root of `workload`'s graph.
    pub fn of(workload: &pb::Workload) -> Root {
        let r = workload.r#ref.clone().unwrap_or_default();
        Root {
            api_version: r.api_version,
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            uid: r.uid,
        }
    }

    /// `kind/namespace/name`.
    pub fn label(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.kind, self.name)
        } else {
            format!("{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }

    /// `metadata` of a gang object owned by this root, as its controller.
    pub fn metadata(&self, name: &str) -> Value {
        self.metadata_owned(name, true)
    }

    /// `metadata` of a gang object owned by this root; without `controller`, the owner
    /// reference carries no `controller`/`blockOwnerDeletion` (as KAI's pod-grouper writes it).
    pub fn metadata_owned(&self, name: &str, controller: bool) -> Value {
        let mut meta = serde_json::json!({
            "name": name,
            "ownerReferences": [{
                "apiVersion": self.api_version,
                "kind": self.kind,
                "name": self.name,
                "uid": self.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        });
        if !controller && let Some(owner) = meta["ownerReferences"][0].as_object_mut() {
            owner.remove("controller");
            owner.remove("blockOwnerDeletion");
        }
        if !self.namespace.is_empty() {
            meta["namespace"] = Value::from(self.namespace.clone());
        }
        meta
    }
}

/// The template (or plan) name of a top-level gang: its name without the alpha keys suffix.
pub(crate) fn plan_name(group: &pb::GangGroup) -> &str {
    let mut name = group.name.as_str();
    for key in group.keys.iter().rev() {
        match name
            .strip_suffix(key.as_str())
            .and_then(|n| n.strip_suffix('-'))
        {
            Some(rest) => name = rest,
            None => return group.name.as_str(),
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_names_drop_the_keys() {
        let g = pb::GangGroup {
            name: "group-0-a".into(),
            keys: vec!["0".into(), "a".into()],
            ..Default::default()
        };
        assert_eq!(plan_name(&g), "group");
        let v2 = pb::GangGroup {
            name: "raycluster".into(),
            ..Default::default()
        };
        assert_eq!(plan_name(&v2), "raycluster");
    }

    #[test]
    fn deep_trees_are_refused() {
        let mut g = pb::GangGroup::default();
        for _ in 0..MAX_DEPTH + 1 {
            g = pb::GangGroup {
                name: "n".into(),
                subgroups: vec![g],
                ..Default::default()
            };
        }
        let e = check_shape(&[g]).unwrap_err();
        assert!(matches!(e, Rule::TooDeep { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("gang n nests deeper than {MAX_DEPTH} levels")
        );
    }
}
