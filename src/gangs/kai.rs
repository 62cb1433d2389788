//! KAI Scheduler's `scheduling.run.ai/v2alpha2` PodGroup: rendering and the admission rules
//! of KAI's PodGroup webhook (`pkg/apis/scheduling/v2alpha2/podgroup_webhook.go`).
//!
//! Rendering follows KAI's own pod-grouper (`podgroup/handler.go`): a gang with subgroups
//! sets `minSubGroup` (the number of direct subgroups) and no `minMember`; a subgroup with
//! children sets `minSubGroup`, a leaf `minMember`; children name their `parent`.

use super::names::kai_pod_group_name;
use super::{MAX_GROUPS, Rendered, Root, Rule};
use crate::proto::v1 as pb;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// The API, as errors name it.
pub const API: &str = "a KAI PodGroup (scheduling.run.ai/v2alpha2)";
/// `apiVersion` of KAI's PodGroup.
pub const API_VERSION: &str = "scheduling.run.ai/v2alpha2";
/// The pod annotation naming a pod's KAI PodGroup (`cluster_relations/pod_groups_to_pod.go`).
pub const POD_ANNOTATION: &str = "pod-group-name";

/// KAI's PodGroup name for a top-level gang: `pg-<uid>-<keys>` for a keyed (alpha) gang,
/// `pg-<uid>-<name>` for the v2 `podGroup`.
pub fn name(root: &Root, group: &pb::GangGroup) -> String {
    if group.keys.is_empty() {
        kai_pod_group_name(&root.uid, std::slice::from_ref(&group.name))
    } else {
        kai_pod_group_name(&root.uid, &group.keys)
    }
}

/// Renders one PodGroup per top-level gang, each checked by the webhook's rules.
pub(super) fn render(root: &Root, groups: &[pb::GangGroup]) -> Result<Rendered, Rule> {
    let mut out = Rendered::default();
    for (i, g) in groups.iter().enumerate() {
        out.paths.push(vec![i]);
        let name = name(root, g);
        let spec = spec(g);
        let problems = validate_spec(&spec);
        if let Some(p) = problems.into_iter().next() {
            return Err(Rule::PodGroup {
                pod_group: name,
                problem: p,
            });
        }
        out.objects.push(json!({
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            // KAI's pod-grouper sets the top owner as a plain owner (podgroup.Metadata.Owner).
            "metadata": root.metadata_owned(&name, false),
            "spec": spec,
        }));
    }
    Ok(out)
}

fn spec(g: &pb::GangGroup) -> Value {
    let mut spec = Map::new();
    if g.subgroups.is_empty() {
        spec.insert("minMember".into(), g.min_member.into());
        return Value::Object(spec);
    }
    spec.insert("minSubGroup".into(), (g.subgroups.len() as u64).into());
    let mut flat = Vec::new();
    // (group, parent name), parents before children.
    let mut stack: Vec<(&pb::GangGroup, Option<String>)> =
        g.subgroups.iter().rev().map(|s| (s, None)).collect();
    while let Some((s, parent)) = stack.pop() {
        let name = subgroup_name(s, parent.is_some());
        let mut sub = Map::new();
        sub.insert("name".into(), name.clone().into());
        if let Some(p) = parent {
            sub.insert("parent".into(), p.into());
        }
        if s.subgroups.is_empty() {
            sub.insert("minMember".into(), s.min_member.into());
        } else {
            sub.insert("minSubGroup".into(), (s.subgroups.len() as u64).into());
            stack.extend(s.subgroups.iter().rev().map(|c| (c, Some(name.clone()))));
        }
        flat.push(Value::Object(sub));
    }
    spec.insert("subGroups".into(), Value::Array(flat));
    Value::Object(spec)
}

/// A subgroup's name: the component's name at the first level (as KAI's Karta grouper names
/// it), the instance's label made a DNS label below.
pub(super) fn subgroup_name(s: &pb::GangGroup, nested: bool) -> String {
    if nested {
        super::names::dns_label(&s.name).unwrap_or_else(|| s.name.clone())
    } else {
        s.name.clone()
    }
}

/// One subgroup as read from a PodGroup spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubGroup {
    /// `name`.
    pub name: String,
    /// `minMember`.
    pub min_member: Option<i64>,
    /// `minSubGroup`.
    pub min_sub_group: Option<i64>,
    /// `parent`.
    pub parent: Option<String>,
}

/// A rule of KAI's PodGroup webhook that a PodGroup spec breaks (or kartograf's bound on it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// More subgroups than kartograf checks ([`MAX_GROUPS`]).
    #[error("has {0} subgroups; kartograf checks at most {MAX_GROUPS}")]
    TooManySubgroups(usize),
    /// Both `minMember` and `minSubGroup` on the spec.
    #[error(
        "minMember and minSubGroup are mutually exclusive (minMember {min_member} and minSubGroup are both set)"
    )]
    BothMinimums {
        /// The spec's `minMember`.
        min_member: i64,
    },
    /// Two subgroups of one name.
    #[error("duplicate subgroup name {0}")]
    DuplicateSubgroup(String),
    /// A subgroup's `parent` names no subgroup.
    #[error("parent {parent} of {subgroup} was not found")]
    ParentNotFound {
        /// The missing parent.
        parent: String,
        /// The subgroup naming it.
        subgroup: String,
    },
    /// Following parents comes back to a subgroup.
    #[error("cycle detected in subgroups")]
    Cycle,
    /// The spec's `minSubGroup` exceeds its direct subgroups.
    #[error("minSubGroup ({min_sub_group}) exceeds the number of direct child SubGroups ({roots})")]
    MinSubGroupExceedsRoots {
        /// The spec's `minSubGroup`.
        min_sub_group: i64,
        /// Its direct subgroups.
        roots: usize,
    },
    /// Both `minMember` and `minSubGroup` on a subgroup.
    #[error("subgroup {0:?}: minMember and minSubGroup are mutually exclusive")]
    SubgroupBothMinimums(String),
    /// `minSubGroup` on a leaf subgroup.
    #[error("subgroup {0:?}: minSubGroup cannot be set on a leaf SubGroup (no child SubGroups)")]
    LeafMinSubGroup(String),
    /// A leaf subgroup without `minMember`.
    #[error("subgroup {0}: minMember is required")]
    LeafMinMemberMissing(String),
    /// `minMember` on a subgroup with children.
    #[error(
        "subgroup {0:?}: minMember cannot be set on a mid-level SubGroup (has child SubGroups); use minSubGroup instead"
    )]
    MidLevelMinMember(String),
    /// A subgroup's `minSubGroup` exceeds its children.
    #[error(
        "subgroup {subgroup:?}: minSubGroup ({min_sub_group}) exceeds the number of direct child SubGroups ({children})"
    )]
    MinSubGroupExceedsChildren {
        /// The subgroup.
        subgroup: String,
        /// Its `minSubGroup`.
        min_sub_group: i64,
        /// Its children.
        children: usize,
    },
}

/// Reads `spec.subGroups` (at most [`MAX_GROUPS`]; more is an error).
pub fn subgroups(spec: &Value) -> Result<Vec<SubGroup>, Problem> {
    let Some(list) = spec.get("subGroups") else {
        return Ok(Vec::new());
    };
    let Some(list) = list.as_array() else {
        return Ok(Vec::new());
    };
    if list.len() > MAX_GROUPS {
        return Err(Problem::TooManySubgroups(list.len()));
    }
    Ok(list
        .iter()
        .map(|s| SubGroup {
            name: s
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            min_member: s.get("minMember").and_then(Value::as_i64),
            min_sub_group: s.get("minSubGroup").and_then(Value::as_i64),
            parent: s.get("parent").and_then(Value::as_str).map(str::to_owned),
        })
        .collect())
}

/// The webhook's rules on a PodGroup spec (create rules; every finding is listed, structural
/// ones first). Linear in the number of subgroups, at most [`MAX_GROUPS`].
pub fn validate_spec(spec: &Value) -> Vec<Problem> {
    let min_member = spec.get("minMember").and_then(Value::as_i64);
    let min_sub_group = spec.get("minSubGroup").and_then(Value::as_i64);
    if let (Some(m), Some(_)) = (min_member, min_sub_group) {
        return vec![Problem::BothMinimums { min_member: m }];
    }
    let subs = match subgroups(spec) {
        Ok(s) => s,
        Err(e) => return vec![e],
    };
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(subs.len());
    for (i, s) in subs.iter().enumerate() {
        if index.insert(s.name.as_str(), i).is_some() {
            return vec![Problem::DuplicateSubgroup(s.name.clone())];
        }
    }
    let mut parent_of = vec![None; subs.len()];
    let mut children = vec![0usize; subs.len()];
    for (i, s) in subs.iter().enumerate() {
        if let Some(p) = &s.parent {
            let Some(&pi) = index.get(p.as_str()) else {
                return vec![Problem::ParentNotFound {
                    parent: p.clone(),
                    subgroup: s.name.clone(),
                }];
            };
            parent_of[i] = Some(pi);
            children[pi] += 1;
        }
    }
    if has_cycle(&parent_of) {
        return vec![Problem::Cycle];
    }
    let mut problems = Vec::new();
    if let Some(n) = min_sub_group {
        let roots = subs.iter().filter(|s| s.parent.is_none()).count();
        if n > roots as i64 {
            problems.push(Problem::MinSubGroupExceedsRoots {
                min_sub_group: n,
                roots,
            });
        }
    }
    let mut order: Vec<usize> = (0..subs.len()).collect();
    order.sort_by(|&a, &b| subs[a].name.cmp(&subs[b].name));
    for i in order {
        let s = &subs[i];
        if s.min_member.is_some() && s.min_sub_group.is_some() {
            problems.push(Problem::SubgroupBothMinimums(s.name.clone()));
            continue;
        }
        if children[i] == 0 {
            if s.min_sub_group.is_some() {
                problems.push(Problem::LeafMinSubGroup(s.name.clone()));
            }
            if s.min_member.is_none() {
                problems.push(Problem::LeafMinMemberMissing(s.name.clone()));
            }
        } else {
            if s.min_member.is_some() {
                problems.push(Problem::MidLevelMinMember(s.name.clone()));
            }
            if let Some(n) = s.min_sub_group
                && n > children[i] as i64
            {
                problems.push(Problem::MinSubGroupExceedsChildren {
                    subgroup: s.name.clone(),
                    min_sub_group: n,
                    children: children[i],
                });
            }
        }
    }
    problems
}

/// Whether following parents from any subgroup comes back to it (iterative, each node
/// walked once).
fn has_cycle(parent_of: &[Option<usize>]) -> bool {
    // 0 unvisited, 1 on the current walk, 2 done.
    let mut state = vec![0u8; parent_of.len()];
    for start in 0..parent_of.len() {
        let mut walk = Vec::new();
        let mut at = Some(start);
        while let Some(i) = at {
            match state[i] {
                1 => return true,
                2 => break,
                _ => {
                    state[i] = 1;
                    walk.push(i);
                    at = parent_of[i];
                }
            }
        }
        for i in walk {
            state[i] = 2;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_rules_hold() {
        let ok = json!({"minSubGroup": 2, "subGroups": [
            {"name": "head", "minMember": 1},
            {"name": "worker", "minSubGroup": 1},
            {"name": "w-0", "parent": "worker", "minMember": 2}]});
        assert!(validate_spec(&ok).is_empty(), "{:?}", validate_spec(&ok));
        let both = json!({"minMember": 1, "minSubGroup": 1});
        assert!(
            validate_spec(&both)[0]
                .to_string()
                .contains("mutually exclusive")
        );
        let leaf = json!({"minSubGroup": 3, "subGroups": [
            {"name": "a", "minSubGroup": 1}, {"name": "b"}]});
        let p: Vec<String> = validate_spec(&leaf)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            p.iter()
                .any(|m| m.contains("exceeds the number of direct child SubGroups (2)")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|m| m.contains("cannot be set on a leaf")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.contains("subgroup b: minMember is required")),
            "{p:?}"
        );
        let mid = json!({"subGroups": [{"name": "a", "minMember": 1},
            {"name": "b", "parent": "a", "minMember": 1}]});
        assert!(validate_spec(&mid)[0].to_string().contains("mid-level"));
        let missing = json!({"subGroups": [{"name": "a", "parent": "zz", "minMember": 1}]});
        assert!(
            validate_spec(&missing)[0]
                .to_string()
                .contains("parent zz of a was not found")
        );
        let dup =
            json!({"subGroups": [{"name": "a", "minMember": 1}, {"name": "a", "minMember": 1}]});
        assert!(validate_spec(&dup)[0].to_string().contains("duplicate"));
    }

    #[test]
    fn a_parent_cycle_is_found() {
        let cycle = json!({"subGroups": [
            {"name": "a", "parent": "b", "minMember": 1},
            {"name": "b", "parent": "a", "minMember": 1},
            {"name": "c", "minMember": 1}]});
        assert_eq!(validate_spec(&cycle), vec![Problem::Cycle]);
        assert_eq!(Problem::Cycle.to_string(), "cycle detected in subgroups");
        let self_loop = json!({"subGroups": [{"name": "a", "parent": "a", "minMember": 1}]});
        assert_eq!(validate_spec(&self_loop), vec![Problem::Cycle]);
    }

    #[test]
    fn ten_thousand_subgroups_in_one_chain_are_checked_in_linear_time() {
        let n = MAX_GROUPS;
        let subs: Vec<Value> = (0..n)
            .map(|i| {
                let mut s = json!({"name": format!("s{i}")});
                if i + 1 < n {
                    s["minSubGroup"] = json!(1);
                } else {
                    s["minMember"] = json!(1);
                }
                if i > 0 {
                    s["parent"] = json!(format!("s{}", i - 1));
                }
                s
            })
            .collect();
        let spec = json!({"minSubGroup": 1, "subGroups": subs});
        assert!(validate_spec(&spec).is_empty());
        let mut more = spec.clone();
        more["subGroups"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "extra", "minMember": 1}));
        assert!(
            validate_spec(&more)[0]
                .to_string()
                .contains("kartograf checks at most")
        );
    }
}
