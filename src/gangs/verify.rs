//! Gang objects found in a cluster, compared with the graph of the workload their pods
//! belong to: stated minimums against the graph's, subgroups missing or extra, member pods
//! on one side only, the API's own admission rules, and whether the gang is intact now
//! (members running ≥ its stated minimum) — the signal no scheduler gives after placement.
//!
//! Which gang of the graph an object is about comes from data: the pods that name the
//! object (KAI's `pod-group-name` annotation, coscheduling's `scheduling.x-k8s.io/pod-group`
//! label, `spec.schedulingGroup.podGroupName`) and the graph's gang member lists; an object
//! no pod names yet is matched by the name kartograf would give it.

use super::{MAX_GROUPS, Root, coscheduling, kai, workload_api};
use crate::expr::value;
use crate::model::Pod;
use crate::proto::v1 as pb;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Stable diagnostic codes of gang findings.
pub mod code {
    /// The object breaks its API's admission rules (KAI's subgroup rules, …).
    pub const INVALID: &str = "gang_object_invalid";
    /// The object's minimum differs from the graph's gang minimum.
    pub const MIN_STALE: &str = "gang_min_stale";
    /// A subgroup of the graph's gang is missing from the object.
    pub const SUBGROUP_MISSING: &str = "gang_subgroup_missing";
    /// The object has a subgroup the graph's gang does not.
    pub const SUBGROUP_EXTRA: &str = "gang_subgroup_extra";
    /// A subgroup's minimum differs from the graph's.
    pub const SUBGROUP_MIN_STALE: &str = "gang_subgroup_min_stale";
    /// Pods name the object but are not members of the workload's gang.
    pub const MEMBER_OUTSIDE: &str = "gang_member_outside";
    /// Members of the workload's gang do not name the object.
    pub const MEMBER_MISSING: &str = "gang_member_missing";
    /// Fewer members run than the object's minimum, after some were placed.
    pub const BROKEN: &str = "gang_broken";
    /// No gang of the workload corresponds to the object.
    pub const UNMATCHED: &str = "gang_object_unmatched";
}

/// The gang object kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// KAI `scheduling.run.ai` PodGroup.
    Kai,
    /// `scheduling.k8s.io` PodGroup.
    PodGroup,
    /// `scheduling.k8s.io` CompositePodGroup.
    CompositePodGroup,
    /// `scheduling.x-k8s.io` PodGroup.
    Coscheduling,
}

impl Family {
    /// The family of an object of `api_version` and `kind`.
    pub fn of(api_version: &str, kind: &str) -> Option<Family> {
        // In the order of `model::object::GANG_KINDS` (the Workload is no family).
        match crate::model::object::gang_kind(api_version, kind)? {
            0 => Some(Family::Kai),
            1 => Some(Family::PodGroup),
            2 => Some(Family::CompositePodGroup),
            3 => Some(Family::Coscheduling),
            _ => None,
        }
    }

    /// A short label for messages and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Family::Kai => "kai",
            Family::PodGroup => "podgroup",
            Family::CompositePodGroup => "compositepodgroup",
            Family::Coscheduling => "coscheduling",
        }
    }
}

/// A gang object as watched (metadata and spec).
#[derive(Debug, Clone)]
pub struct GangObject {
    /// Its kind.
    pub family: Family,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.ownerReferences[].uid`.
    pub owners: Vec<String>,
    /// `spec`.
    pub spec: Value,
    /// Why the object could not be read (over the size or depth budget): it is reported
    /// invalid, not checked.
    pub unreadable: Option<String>,
}

impl GangObject {
    /// Reads a cached gang object; `None` for any other object. An object that could not be
    /// read (over the conversion budget) is kept from its metadata, marked
    /// [`GangObject::unreadable`], so that it is reported, not silently left out.
    pub fn of_object(o: &crate::model::Object) -> Option<GangObject> {
        let Some(problem) = &o.problem else {
            return GangObject::from_json(&value::to_json(&o.value()));
        };
        Some(GangObject {
            family: Family::of(&o.meta.api_version, &o.meta.kind)?,
            namespace: o.meta.namespace.clone(),
            name: o.meta.name.clone(),
            owners: o
                .meta
                .owners
                .iter()
                .take(MAX_GROUPS)
                .map(|r| r.uid.to_string())
                .collect(),
            spec: Value::Null,
            unreadable: Some(problem.clone()),
        })
    }

    /// Reads a gang object; `None` for any other object.
    pub fn from_json(v: &Value) -> Option<GangObject> {
        let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
        let family = Family::of(
            v.get("apiVersion").and_then(Value::as_str)?,
            v.get("kind").and_then(Value::as_str)?,
        )?;
        let meta = v.get("metadata");
        Some(GangObject {
            family,
            namespace: s(meta.and_then(|m| m.get("namespace"))),
            name: s(meta.and_then(|m| m.get("name"))),
            owners: meta
                .and_then(|m| m.get("ownerReferences"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .take(MAX_GROUPS)
                        .filter_map(|o| o.get("uid").and_then(Value::as_str).map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            spec: v.get("spec").cloned().unwrap_or(Value::Null),
            unreadable: None,
        })
    }

    /// The minimum the object states (pods, or subgroups for `minSubGroup` and
    /// `minGroupCount`), with the field's name.
    pub fn stated_minimum(&self) -> Option<(&'static str, i64)> {
        match self.family {
            Family::Kai => self
                .spec
                .get("minMember")
                .and_then(Value::as_i64)
                .map(|n| ("minMember", n))
                .or_else(|| {
                    self.spec
                        .get("minSubGroup")
                        .and_then(Value::as_i64)
                        .map(|n| ("minSubGroup", n))
                }),
            Family::Coscheduling => self
                .spec
                .get("minMember")
                .and_then(Value::as_i64)
                .map(|n| ("minMember", n)),
            Family::PodGroup | Family::CompositePodGroup => {
                workload_api::stated_minimum(&self.spec)
            }
        }
    }
}

/// A pod as verification sees it.
#[derive(Debug, Clone, Default)]
pub struct MemberPod {
    /// Name.
    pub name: String,
    /// The gang object (of the family being checked) the pod names.
    pub names_object: Option<String>,
    /// Placed: bound to a node and not terminal.
    pub running: bool,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// A [`code`].
    pub code: &'static str,
    /// The message.
    pub message: String,
}

/// The verdict on one gang object.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The object's kind.
    pub family: Family,
    /// The object's name.
    pub name: String,
    /// The graph's gang it was matched to.
    pub gang: Option<String>,
    /// Member pods running now.
    pub running: u32,
    /// The object's stated minimum (pods), if it states one.
    pub minimum: Option<i64>,
    /// Running members ≥ the stated minimum (or nothing placed yet).
    pub intact: bool,
    /// Any finding other than `gang_broken`.
    pub stale: bool,
    /// Everything found.
    pub findings: Vec<Finding>,
}

/// Every gang group of the graph (all levels), with its depth.
fn all_groups(w: &pb::Workload) -> Vec<(&pb::GangGroup, usize)> {
    let mut out = Vec::new();
    let mut stack: Vec<(&pb::GangGroup, usize)> = w
        .gang
        .as_ref()
        .map(|g| g.groups.iter().map(|g| (g, 0)).collect())
        .unwrap_or_default();
    while let Some((g, d)) = stack.pop() {
        if out.len() >= MAX_GROUPS || d > super::MAX_DEPTH {
            break;
        }
        out.push((g, d));
        stack.extend(g.subgroups.iter().map(|s| (s, d + 1)));
    }
    out
}

/// The graph's gang an object is about: the deepest group holding every pod that names it
/// (top-level only for KAI and coscheduling, whose objects are whole gangs), else the one
/// whose rendered name is the object's.
fn match_gang<'w>(
    w: &'w pb::Workload,
    object: &GangObject,
    linked: &BTreeSet<&str>,
) -> Option<&'w pb::GangGroup> {
    let top_only = matches!(object.family, Family::Kai | Family::Coscheduling);
    let groups = all_groups(w);
    if !linked.is_empty() {
        let found = groups
            .iter()
            .filter(|(_, d)| !top_only || *d == 0)
            .filter(|(g, _)| {
                let pods: BTreeSet<&str> = g.pods.iter().map(String::as_str).collect();
                linked.iter().any(|p| pods.contains(p))
            })
            .max_by_key(|(g, d)| {
                let pods: BTreeSet<&str> = g.pods.iter().map(String::as_str).collect();
                (linked.iter().filter(|p| pods.contains(*p)).count(), *d)
            })
            .map(|(g, _)| *g);
        if found.is_some() {
            return found;
        }
    }
    // No pod names it (yet): the gang of the object kartograf renders under its name.
    let format = match object.family {
        Family::Kai => super::Format::Kai,
        Family::Coscheduling => super::Format::Coscheduling,
        Family::PodGroup | Family::CompositePodGroup => super::Format::Workload,
    };
    let rendered = super::render_graph(w, format).ok()?;
    let at = rendered
        .objects
        .iter()
        .position(|o| o["metadata"]["name"].as_str() == Some(object.name.as_str()))?;
    super::Rendered::group(w, rendered.paths.get(at)?)
}

/// Checks one gang object against the workload `w`. `pods` are the pods that name the
/// object (any workload's) and the workload's own pods.
pub fn verify(w: &pb::Workload, object: &GangObject, pods: &[MemberPod]) -> Verdict {
    let mut findings = Vec::new();
    let what = format!("{} {}", object.family.label(), object.name);
    if let Some(problem) = &object.unreadable {
        push(
            &mut findings,
            code::INVALID,
            format!(
                "{what}: could not be read ({problem}); it is not checked and gives no gang guarantee"
            ),
        );
        return Verdict {
            family: object.family,
            name: object.name.clone(),
            gang: None,
            running: 0,
            minimum: None,
            intact: true,
            stale: true,
            findings,
        };
    }
    if object.family == Family::Kai {
        for p in kai::validate_spec(&object.spec).into_iter().take(10) {
            push(&mut findings, code::INVALID, format!("{what}: {p}"));
        }
    }
    let linked: BTreeSet<&str> = pods
        .iter()
        .filter(|p| p.names_object.as_deref() == Some(object.name.as_str()))
        .map(|p| p.name.as_str())
        .collect();
    let stated = object.stated_minimum();
    let gang = match_gang(w, object, &linked);
    let Some(gang) = gang else {
        push(
            &mut findings,
            code::UNMATCHED,
            format!("{what}: no gang of the workload corresponds to it"),
        );
        return Verdict {
            family: object.family,
            name: object.name.clone(),
            gang: None,
            running: 0,
            minimum: stated.map(|(_, n)| n),
            intact: true,
            stale: true,
            findings,
        };
    };
    // Minimums.
    if let Some((field, n)) = stated {
        let (want, unit) = if field == "minSubGroup" || field == "gang.minGroupCount" {
            (i64::from(gang.min_subgroups), "subgroups")
        } else {
            (i64::from(gang.min_member), "pods")
        };
        if n != want {
            let effect = if n > want {
                "above what the workload has: the gang can deadlock"
            } else {
                "below what the workload needs: part of it can start and hold its resources"
            };
            push(
                &mut findings,
                code::MIN_STALE,
                format!(
                    "{what}: {field} is {n} but gang {} needs {want} {unit} ({effect})",
                    gang.name
                ),
            );
        }
    }
    // Subgroups (KAI), by (parent, name) as the renderer names them; a nested subgroup
    // counts as missing only under a parent the object subdivides (KAI's own pod-grouper
    // writes one level).
    if object.family == Family::Kai
        && let Ok(subs) = kai::subgroups(&object.spec)
        && !subs.is_empty()
    {
        type Key = (Option<String>, String);
        let mut want: BTreeMap<Key, &pb::GangGroup> = BTreeMap::new();
        let mut stack: Vec<(&pb::GangGroup, Option<String>, usize)> =
            gang.subgroups.iter().map(|s| (s, None, 1)).collect();
        while let Some((g, parent, depth)) = stack.pop() {
            if want.len() >= MAX_GROUPS || depth > super::MAX_DEPTH {
                break;
            }
            let name = kai::subgroup_name(g, parent.is_some());
            stack.extend(
                g.subgroups
                    .iter()
                    .map(|c| (c, Some(name.clone()), depth + 1)),
            );
            want.insert((parent, name), g);
        }
        let have: BTreeMap<Key, &kai::SubGroup> = subs
            .iter()
            .map(|s| ((s.parent.clone(), s.name.clone()), s))
            .collect();
        let parents: BTreeSet<&str> = subs.iter().filter_map(|s| s.parent.as_deref()).collect();
        let label = |(p, n): &Key| p.as_ref().map_or(n.clone(), |p| format!("{p}/{n}"));
        let missing = want
            .keys()
            .filter(|k| !have.contains_key(*k))
            .filter(|(p, _)| p.as_deref().is_none_or(|p| parents.contains(p)));
        for k in missing.take(10) {
            push(
                &mut findings,
                code::SUBGROUP_MISSING,
                format!(
                    "{what}: has no subgroup {} (gang {} has)",
                    label(k),
                    gang.name
                ),
            );
        }
        for k in have.keys().filter(|k| !want.contains_key(*k)).take(10) {
            push(
                &mut findings,
                code::SUBGROUP_EXTRA,
                format!("{what}: subgroup {} is not in gang {}", label(k), gang.name),
            );
        }
        let mut stale = 0;
        for (k, s) in &have {
            let Some(g) = want.get(k) else { continue };
            let (field, n, need) = match (s.min_member, s.min_sub_group) {
                (Some(n), _) => ("minMember", n, i64::from(g.min_member)),
                (None, Some(n)) => ("minSubGroup", n, i64::from(g.min_subgroups)),
                (None, None) => continue,
            };
            if n != need && stale < 10 {
                stale += 1;
                push(
                    &mut findings,
                    code::SUBGROUP_MIN_STALE,
                    format!(
                        "{what}: subgroup {} has {field} {n} but the workload needs {need}",
                        label(k)
                    ),
                );
            }
        }
    }
    // Members.
    let members: BTreeSet<&str> = gang.pods.iter().map(String::as_str).collect();
    let outside: Vec<&str> = linked
        .iter()
        .copied()
        .filter(|p| !members.contains(p))
        .collect();
    if !outside.is_empty() {
        push(
            &mut findings,
            code::MEMBER_OUTSIDE,
            format!(
                "{what}: {} pod(s) name it but are not in gang {}: {}",
                outside.len(),
                gang.name,
                first_five(&outside)
            ),
        );
    }
    if !linked.is_empty() {
        let missing: Vec<&str> = members
            .iter()
            .copied()
            .filter(|p| !linked.contains(p))
            .collect();
        if !missing.is_empty() {
            push(
                &mut findings,
                code::MEMBER_MISSING,
                format!(
                    "{what}: {} member(s) of gang {} do not name it: {}",
                    missing.len(),
                    gang.name,
                    first_five(&missing)
                ),
            );
        }
    }
    let stale = !findings.is_empty();
    // Intact: members running against the stated pod minimum.
    let running = pods
        .iter()
        .filter(|p| {
            p.running && (linked.contains(p.name.as_str()) || members.contains(p.name.as_str()))
        })
        .map(|p| p.name.as_str())
        .collect::<BTreeSet<_>>()
        .len() as u32;
    let minimum = match stated {
        Some(("minMember" | "gang.minCount", n)) => n,
        _ => i64::from(gang.min_member),
    };
    let intact = running == 0 || i64::from(running) >= minimum;
    if !intact {
        push(
            &mut findings,
            code::BROKEN,
            format!(
                "{what}: {running} member(s) placed (bound, not finished), below its minimum {minimum}: the gang was placed and has since lost members"
            ),
        );
    }
    Verdict {
        family: object.family,
        name: object.name.clone(),
        gang: Some(gang.name.clone()),
        running,
        minimum: Some(minimum),
        intact,
        stale,
        findings,
    }
}

fn push(findings: &mut Vec<Finding>, code: &'static str, message: String) {
    findings.push(Finding { code, message });
}

/// The findings as graph diagnostics (warnings; `gang_broken` is an error).
pub fn diagnostics(verdicts: &[Verdict]) -> Vec<pb::Diagnostic> {
    verdicts
        .iter()
        .flat_map(|v| v.findings.iter())
        .map(|f| pb::Diagnostic {
            severity: if f.code == code::BROKEN {
                "error"
            } else {
                "warning"
            }
            .into(),
            code: f.code.into(),
            message: f.message.clone(),
            ..Default::default()
        })
        .collect()
}

/// A pod's links to gang objects, as verification reads them.
#[derive(Debug, Clone, Default)]
pub struct PodLinks {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Placed: bound to a node and not terminal.
    pub running: bool,
    /// The gang objects it names, by family.
    pub names: Vec<(Family, String)>,
}

impl PodLinks {
    /// Reads a cached pod's links (its KAI annotation, coscheduling label,
    /// `schedulingGroup`) from its projection.
    pub fn of(p: &Pod) -> PodLinks {
        let text = |path: &[&str]| {
            p.packed
                .lookup(path)
                .and_then(|v| value::as_str(&v).map(str::to_owned))
        };
        let mut names = Vec::new();
        if let Some(n) = text(&["metadata", "annotations", kai::POD_ANNOTATION]) {
            names.push((Family::Kai, n));
        }
        if let Some(n) = text(&["metadata", "labels", coscheduling::POD_LABEL]) {
            names.push((Family::Coscheduling, n));
        }
        if let Some(n) = text(&["spec", "schedulingGroup", "podGroupName"]) {
            names.push((Family::PodGroup, n));
        }
        PodLinks {
            namespace: p.meta.namespace.clone(),
            name: p.meta.name.clone(),
            running: p.holds_resources(),
            names,
        }
    }
}

/// Names of the workload's pods (gang members and component pods).
fn workload_pods(w: &pb::Workload) -> BTreeSet<&str> {
    let mut out: BTreeSet<&str> = all_groups(w)
        .into_iter()
        .flat_map(|(g, _)| g.pods.iter().map(String::as_str))
        .collect();
    let mut stack: Vec<&pb::Component> = w.components.iter().collect();
    while let Some(c) = stack.pop() {
        for i in &c.instances {
            out.extend(i.pod_list.iter().map(|p| p.name.as_str()));
            stack.extend(i.children.iter());
        }
    }
    out
}

/// The gang objects of workload `w` among `objects` — in its namespace, and owned by its
/// root or named by one of its pods — each checked. `pods` are the namespace's pods.
pub fn check_workload(w: &pb::Workload, objects: &[GangObject], pods: &[PodLinks]) -> Vec<Verdict> {
    let root = Root::of(w);
    let own = workload_pods(w);
    let named: BTreeSet<(Family, &str)> = pods
        .iter()
        .filter(|p| p.namespace == root.namespace && own.contains(p.name.as_str()))
        .flat_map(|p| p.names.iter().map(|(f, n)| (*f, n.as_str())))
        .collect();
    let mut out = Vec::new();
    for o in objects.iter().filter(|o| o.namespace == root.namespace) {
        let owned = !root.uid.is_empty() && o.owners.contains(&root.uid);
        if !owned && !named.contains(&(o.family, o.name.as_str())) {
            continue;
        }
        let members: Vec<MemberPod> = pods
            .iter()
            .filter(|p| p.namespace == root.namespace)
            .filter_map(|p| {
                let names_object = p
                    .names
                    .iter()
                    .find(|(f, _)| *f == o.family)
                    .map(|(_, n)| n.clone());
                (names_object.is_some() || own.contains(p.name.as_str())).then(|| MemberPod {
                    name: p.name.clone(),
                    names_object,
                    running: p.running,
                })
            })
            .collect();
        out.push(verify(w, o, &members));
    }
    out
}

/// The first five names of a list, comma-separated (findings name a few, then count).
fn first_five(names: &[&str]) -> String {
    names[..names.len().min(5)].join(", ")
}

#[cfg(test)]
mod tests {
    use super::Family;

    #[test]
    fn each_gang_kind_has_its_family_and_the_workload_none() {
        let of = |v: &str, k: &str| Family::of(v, k);
        assert_eq!(
            of("scheduling.run.ai/v2alpha2", "PodGroup"),
            Some(Family::Kai)
        );
        assert_eq!(
            of("scheduling.k8s.io/v1beta1", "PodGroup"),
            Some(Family::PodGroup)
        );
        assert_eq!(
            of("scheduling.k8s.io/v1alpha3", "CompositePodGroup"),
            Some(Family::CompositePodGroup)
        );
        assert_eq!(
            of("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            Some(Family::Coscheduling)
        );
        assert_eq!(of("scheduling.k8s.io/v1beta1", "Workload"), None);
        assert_eq!(of("v1", "Pod"), None);
    }
}
