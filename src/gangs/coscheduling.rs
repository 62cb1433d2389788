//! scheduler-plugins coscheduling's `scheduling.x-k8s.io/v1alpha1` PodGroup
//! (`apis/scheduling/v1alpha1`: `spec.minMember`, `spec.minResources`); pods join it with the
//! label `scheduling.x-k8s.io/pod-group`.
//!
//! The API has no subgroups: a gang's subgroups fold into its one `minMember` (noted).
//! `minResources` is the gang's minimum pods times each one's effective request, when every
//! leaf of the gang names an instance of the graph. The name is the root's (the framework
//! controllers that create these, e.g. KubeRay and the training operator, name it after
//! their object), with `-<gang>` when the workload has several gangs.

use super::names::dns_label;
use super::{Rendered, Root, Rule};
use crate::model::resources::{format_quantity, parse_quantity};
use crate::proto::v1 as pb;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The API, as errors name it.
pub const API: &str = "a coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1)";
/// `apiVersion` of the PodGroup.
pub const API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";
/// The pod label naming a pod's PodGroup.
pub const POD_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// The PodGroup name of top-level gang `g`.
pub fn name(root: &Root, groups: &[pb::GangGroup], g: &pb::GangGroup) -> String {
    if groups.len() == 1 {
        return root.name.clone();
    }
    let suffix = dns_label(&g.name).unwrap_or_default();
    format!("{}-{suffix}", root.name)
}

pub(super) fn render(
    root: &Root,
    workload: &pb::Workload,
    groups: &[pb::GangGroup],
) -> Result<Rendered, Rule> {
    let mut out = Rendered::default();
    let per_pod = per_pod_requests(workload);
    for (i, g) in groups.iter().enumerate() {
        out.paths.push(vec![i]);
        let name = name(root, groups, g);
        if i32::try_from(g.min_member).is_err() {
            return Err(Rule::PodsBeyondInt32 {
                gang: g.name.clone(),
                pods: g.min_member,
            });
        }
        let mut spec = Map::new();
        spec.insert("minMember".into(), g.min_member.into());
        match min_resources(g, &per_pod, 0) {
            Some(r) if !r.is_empty() => {
                let raw: Map<String, Value> = r
                    .into_iter()
                    .map(|(k, milli)| {
                        let q = format_quantity(&k, milli);
                        (k, Value::from(q))
                    })
                    .collect();
                spec.insert("minResources".into(), Value::Object(raw));
            }
            _ => out.notes.push(format!(
                "PodGroup {name}: no minResources (some member of gang {} has no known request)",
                g.name
            )),
        }
        if !g.subgroups.is_empty() {
            out.notes.push(format!(
                "PodGroup {name}: coscheduling has no subgroups; gang {}'s {} subgroups are folded into minMember {}",
                g.name,
                g.subgroups.len(),
                g.min_member
            ));
        }
        out.objects.push(json!({
            "apiVersion": API_VERSION,
            "kind": "PodGroup",
            "metadata": root.metadata(&name),
            "spec": spec,
        }));
    }
    Ok(out)
}

type Key = (String, String, String);

/// Effective request of one pod per (component, instance, replica), in milli-units.
fn per_pod_requests(w: &pb::Workload) -> BTreeMap<Key, BTreeMap<String, i128>> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<&pb::Component> = w.components.iter().collect();
    while let Some(c) = stack.pop() {
        for i in &c.instances {
            if let Some(r) = &i.per_pod {
                let parsed: BTreeMap<String, i128> = r
                    .raw
                    .iter()
                    .filter_map(|(k, v)| parse_quantity(v).map(|q| (k.clone(), q)))
                    .collect();
                out.insert((c.name.clone(), i.id.clone(), i.replica.clone()), parsed);
            }
            stack.extend(i.children.iter());
        }
    }
    out
}

/// Sum over the gang's leaves of minimum × per-pod request; `None` when a leaf has no
/// known request (or the tree is deeper than the bound).
fn min_resources(
    g: &pb::GangGroup,
    per_pod: &BTreeMap<Key, BTreeMap<String, i128>>,
    depth: usize,
) -> Option<BTreeMap<String, i128>> {
    if depth > super::MAX_DEPTH {
        return None;
    }
    let mut total: BTreeMap<String, i128> = BTreeMap::new();
    if g.subgroups.is_empty() {
        let req = per_pod.get(&(g.component.clone(), g.instance.clone(), g.replica.clone()))?;
        for (k, v) in req {
            let add = v.saturating_mul(i128::from(g.min_member));
            let e = total.entry(k.clone()).or_default();
            *e = e.saturating_add(add);
        }
        return Some(total);
    }
    for s in &g.subgroups {
        for (k, v) in min_resources(s, per_pod, depth + 1)? {
            let e = total.entry(k).or_default();
            *e = e.saturating_add(v);
        }
    }
    Some(total)
}
