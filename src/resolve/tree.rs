//! The component tree: instances and replica slots, desired counts, pod placement and
//! resource roll-ups.
//!
//! Counting convention (as in Workload Map): a component's replica count is the number of
//! units at that level **across the whole workload**. When a component appears under
//! several parent slots (for example a `leader` component under each replica of a grouping
//! `group`), its count is shared evenly among those slots, so the slots add up to the
//! whole.

use super::diagnostics::VALUE_BYTES;
use super::diagnostics::{INFO, WARNING, code};
use super::{Answer, Asked, Resolver, Slot};
use crate::definition::plan::{Compiled, PodSpecSource, TypeSelector};
use crate::expr::value::{as_array, as_f64, as_str, get, get_path, to_text, to_text_bounded};
use crate::model::Pod;
use crate::model::resources::{self, Amounts};
use crate::proto::v1 as pb;
use jaq_json::Val;
use std::collections::BTreeSet;

/// What the root object says about one instance of a component.
#[derive(Debug, Clone, Default)]
pub(super) struct InstanceSpec {
    id: String,
    scale: pb::Scale,
    per_pod: Amounts,
    /// Desired pods across the whole workload (pod-bearing components), or the number of
    /// replicas (components with a replica selector and no pods of their own).
    desired: u32,
    /// Gang minimum across the whole workload.
    min: u32,
}

/// What one component's pod selectors say about one pod.
#[derive(Debug, Clone, Default)]
struct PodFacts {
    type_ok: bool,
    instance: Option<String>,
    replica: Option<String>,
}

/// Per-resolution caches of the tree walk.
struct Tree<'s> {
    specs: &'s [Vec<InstanceSpec>],
    facts: Vec<Option<Vec<PodFacts>>>,
    /// The only pod-bearing component, if there is exactly one.
    sole: Option<usize>,
}

/// `total` shared among `of` places: the share of place `index` (remainders go first).
fn share(total: u32, of: u32, index: u32) -> u32 {
    if of == 0 {
        return 0;
    }
    total / of + u32::from(index < total % of)
}

/// Sorts keys numerically when they are all numbers, else as text.
fn sort_keys(keys: BTreeSet<String>) -> Vec<String> {
    let mut keys: Vec<String> = keys.into_iter().collect();
    if keys.iter().all(|k| k.parse::<u64>().is_ok()) {
        keys.sort_by_key(|k| k.parse::<u64>().unwrap_or(u64::MAX));
    }
    keys
}

/// Whether a pod matches a type selector: its labels, then its key path (evaluated only
/// when the labels match).
pub(super) fn type_matches(
    r: &mut Resolver<'_>,
    sel: &TypeSelector,
    pod: &Val,
    component: &str,
) -> Asked {
    let labels = get_path(pod, &["metadata", "labels"]);
    let labels_ok = sel
        .match_labels
        .iter()
        .all(|(k, v)| labels.and_then(|l| get(l, k)).and_then(as_str) == Some(v.as_str()));
    let (matched, failure, remember) = match (&sel.key_path, labels_ok) {
        (_, false) => (false, None, true),
        (None, true) => (true, None, true),
        (Some(expr), true) => {
            let (out, failure, remember) = r.evaluate(expr, pod, component);
            let out = out.unwrap_or_default();
            let matched = match &sel.value {
                None => out.iter().any(|v| !matches!(v, Val::Null)),
                Some(want) => out
                    .iter()
                    .any(|v| !matches!(v, Val::Null) && to_text(v) == *want),
            };
            (matched, failure, remember)
        }
    };
    Asked {
        answer: Answer::Flag(matched),
        failure,
        remember,
    }
}

/// The proto view of one pod.
pub(super) fn pod_info(pod: &Pod) -> pb::PodInfo {
    pod.info()
}

impl Resolver<'_> {
    /// Builds the whole tree; records slots, pod placements and roll-ups.
    ///
    /// Pass 1 walks components in order (parents before children) and creates every slot
    /// under every parent slot, placing and claiming pods. Pass 2 shares each instance's
    /// desired count among all of that instance's slots and rolls counts and resources up.
    /// Pass 3 renders the proto tree.
    pub(super) fn build_tree(&mut self, specs: &[Vec<InstanceSpec>]) -> Option<pb::Component> {
        let def = self.def;
        let n = def.components.len();
        let pod_bearing: Vec<usize> = (0..n)
            .filter(|&c| def.components[c].pod_bearing())
            .collect();
        let sole = match pod_bearing.as_slice() {
            [only] => Some(*only),
            _ => None,
        };
        let mut tree = Tree {
            specs,
            facts: vec![None; n],
            sole,
        };
        let all_pods: Vec<usize> = (0..self.pods.len()).collect();
        let mut slots_of: Vec<Vec<usize>> = vec![Vec::new(); n];

        // Pass 1: slots and claims.
        for c in 0..n {
            self.facts(&mut tree, c);
            let facts = tree.facts[c].take().unwrap_or_default();
            let parents: Vec<Option<usize>> = match def.components[c].parent {
                None => vec![None],
                Some(p) => slots_of[p].iter().copied().map(Some).collect(),
            };
            let places = parents.len() as u32;
            for (ordinal, parent) in parents.into_iter().enumerate() {
                let scope = match parent {
                    Some(ps) => self.slots[ps].scope.clone(),
                    None => all_pods.clone(),
                };
                for k in 0..tree.specs[c].len() {
                    for (key, pods) in
                        self.slot_keys(&tree, c, k, &scope, &facts, places, ordinal as u32)
                    {
                        let id =
                            self.new_slot(c, k, &tree.specs[c][k].id, key, parent, pods, &facts);
                        slots_of[c].push(id);
                    }
                }
            }
            tree.facts[c] = Some(facts);
        }

        // Pass 2: desired counts shared over each instance's slots, then roll-ups.
        for (c, component_slots) in slots_of.iter().enumerate() {
            if !def.components[c].pod_bearing() {
                continue;
            }
            for (k, inst) in tree.specs[c].iter().enumerate() {
                let mine: Vec<usize> = component_slots
                    .iter()
                    .copied()
                    .filter(|&s| self.slots[s].instance_index == k)
                    .collect();
                let count = mine.len() as u32;
                for (i, s) in mine.into_iter().enumerate() {
                    let slot = &mut self.slots[s];
                    slot.own_desired = share(inst.desired, count, i as u32);
                    slot.own_min = share(inst.min, count, i as u32);
                    slot.desired_amounts = inst.per_pod.times(slot.own_desired);
                }
            }
        }
        for s in (0..self.slots.len()).rev() {
            let slot = &mut self.slots[s];
            slot.desired += slot.own_desired;
            slot.min += slot.own_min;
            let own = std::mem::take(&mut slot.own);
            for &p in &own {
                let pod = self.pods[p];
                let slot = &mut self.slots[s];
                slot.current += u32::from(!pod.terminal());
                slot.ready += u32::from(pod.ready);
                if pod.holds_resources() {
                    slot.current_amounts.add(&pod.request);
                }
            }
            self.slots[s].own = own;
            if let Some(parent) = self.slots[s].parent {
                let (d, m, cur, rdy) = {
                    let slot = &self.slots[s];
                    (slot.desired, slot.min, slot.current, slot.ready)
                };
                let (da, ca) = {
                    let slot = &self.slots[s];
                    (slot.desired_amounts.clone(), slot.current_amounts.clone())
                };
                let up = &mut self.slots[parent];
                up.desired += d;
                up.min += m;
                up.current += cur;
                up.ready += rdy;
                up.desired_amounts.add(&da);
                up.current_amounts.add(&ca);
            }
        }
        for &s in &slots_of[0] {
            let slot = &self.slots[s];
            self.root_desired.add(&slot.desired_amounts);
        }

        // Pass 3: the proto tree.
        let instances = slots_of[0]
            .iter()
            .map(|&s| self.instance_proto(&tree, s))
            .collect();
        Some(self.component_proto(0, instances))
    }

    /// The replica keys of instance `k` of component `c` under one parent slot, each with
    /// the pods of `scope` that fall into it.
    #[allow(clippy::too_many_arguments)]
    fn slot_keys(
        &self,
        tree: &Tree<'_>,
        c: usize,
        k: usize,
        scope: &[usize],
        facts: &[PodFacts],
        places: u32,
        ordinal: u32,
    ) -> Vec<(String, Vec<usize>)> {
        let comp = &self.def.components[c];
        let inst = &tree.specs[c][k];
        let inst_pods: Vec<usize> = scope
            .iter()
            .copied()
            .filter(|&p| {
                comp.instance_selector.is_none()
                    || facts[p].instance.as_deref() == Some(inst.id.as_str())
            })
            .collect();
        if comp.replica_selector.is_none() {
            return vec![(String::new(), inst_pods)];
        }
        let mut keys: BTreeSet<String> = inst_pods
            .iter()
            .filter_map(|&p| facts[p].replica.clone())
            .collect();
        if !comp.pod_bearing() {
            for r in 0..share(inst.desired, places, ordinal) {
                keys.insert(r.to_string());
            }
        }
        let keyless: Vec<usize> = inst_pods
            .iter()
            .copied()
            .filter(|&p| facts[p].replica.is_none())
            .collect();
        let mut out: Vec<(String, Vec<usize>)> = sort_keys(keys)
            .into_iter()
            .map(|key| {
                let pods = inst_pods
                    .iter()
                    .copied()
                    .filter(|&p| facts[p].replica.as_deref() == Some(key.as_str()))
                    .collect();
                (key, pods)
            })
            .collect();
        if out.is_empty() || !keyless.is_empty() {
            out.push((String::new(), keyless));
        }
        out
    }

    /// Creates a slot and lets a pod-bearing component claim its pods.
    #[allow(clippy::too_many_arguments)]
    fn new_slot(
        &mut self,
        c: usize,
        k: usize,
        id: &str,
        replica: String,
        parent: Option<usize>,
        scope: Vec<usize>,
        facts: &[PodFacts],
    ) -> usize {
        let slot_id = self.slots.len();
        let comp = &self.def.components[c];
        let mut own = Vec::new();
        if comp.pod_bearing() {
            for &p in &scope {
                if self.claimed[p].is_none() && facts[p].type_ok {
                    // A pod under a replicated parent (a group slot) carries that replica.
                    let mut placed_replica = replica.clone();
                    let mut up = parent;
                    while placed_replica.is_empty() {
                        let Some(s) = up else { break };
                        placed_replica = self.slots[s].replica.clone();
                        up = self.slots[s].parent;
                    }
                    self.claimed[p] = Some(pb::PodPlacement {
                        component: comp.name.clone(),
                        instance: id.to_owned(),
                        replica: placed_replica,
                        gang_group: String::new(),
                    });
                    let mut path = vec![slot_id];
                    let mut at = parent;
                    while let Some(s) = at {
                        path.push(s);
                        at = self.slots[s].parent;
                    }
                    path.reverse();
                    for &s in &path[..path.len() - 1] {
                        self.slots[s].members.push(p);
                    }
                    self.pod_slots[p] = path;
                    own.push(p);
                }
            }
        }
        let members = own.clone();
        self.slots.push(Slot {
            component: c,
            instance_index: k,
            instance: id.to_owned(),
            replica,
            parent,
            scope,
            own,
            members,
            ..Slot::default()
        });
        if let Some(p) = parent {
            self.slots[p].children.push(slot_id);
        }
        slot_id
    }

    fn component_proto(&self, c: usize, instances: Vec<pb::Instance>) -> pb::Component {
        let comp = &self.def.components[c];
        pb::Component {
            name: comp.name.clone(),
            kind: comp.kind.as_ref().map(|k| pb::GroupVersionKind {
                group: k.group.clone(),
                version: k.version.clone(),
                kind: k.kind.clone(),
            }),
            instances,
        }
    }

    /// Renders slot `s` and everything below it; empty plumbing components are dropped.
    fn instance_proto(&self, tree: &Tree<'_>, s: usize) -> pb::Instance {
        let slot = &self.slots[s];
        let comp = &self.def.components[slot.component];
        let inst = &tree.specs[slot.component][slot.instance_index];
        let mut children = Vec::new();
        for &child in &comp.children {
            let child_slots: Vec<usize> = slot
                .children
                .iter()
                .copied()
                .filter(|&x| self.slots[x].component == child)
                .collect();
            let instances: Vec<pb::Instance> = child_slots
                .iter()
                .map(|&x| self.instance_proto(tree, x))
                .collect();
            let keep = self.def.components[child].pod_bearing()
                || instances.iter().any(|i| {
                    !i.children.is_empty()
                        || !i.pod_list.is_empty()
                        || i.pods.is_some_and(|p| p.desired > 0 || p.current > 0)
                });
            if keep {
                children.push(self.component_proto(child, instances));
            }
        }
        let mut pod_list: Vec<pb::PodInfo> =
            slot.own.iter().map(|&p| pod_info(self.pods[p])).collect();
        pod_list.sort_by(|a, b| a.name.cmp(&b.name));
        pb::Instance {
            id: slot.instance.clone(),
            replica: slot.replica.clone(),
            scale: Some(inst.scale),
            pods: Some(pb::PodCounts {
                desired: slot.desired,
                current: slot.current,
                ready: slot.ready,
            }),
            per_pod: comp.pod_bearing().then(|| inst.per_pod.to_proto()),
            totals: Some(pb::Totals {
                desired: Some(slot.desired_amounts.to_proto()),
                current: Some(slot.current_amounts.to_proto()),
            }),
            pod_list,
            children,
        }
    }

    /// Extracts the instances of component `c` from the root object.
    pub(super) fn extract(&mut self, c: usize) -> Vec<InstanceSpec> {
        let comp = &self.def.components[c];
        let name = comp.name.as_str();
        let ids: Vec<String> = match &comp.instance_ids {
            None => vec![String::new()],
            Some(expr) => {
                let mut ids: Vec<String> = Vec::new();
                for v in self.eval_root(expr, name).unwrap_or_default() {
                    let id = if matches!(v, Val::Null) {
                        String::new()
                    } else {
                        to_text(&v)
                    };
                    if id.is_empty() {
                        self.diags.push(
                            WARNING,
                            code::BAD_VALUE,
                            "instance id path yielded an empty id; skipped",
                            name,
                            expr.source(),
                        );
                    } else if ids.contains(&id) {
                        self.diags.push(
                            WARNING,
                            code::BAD_VALUE,
                            format!("duplicate instance id `{id}`; merged"),
                            name,
                            expr.source(),
                        );
                    } else {
                        ids.push(id);
                    }
                }
                ids
            }
        };
        let count = ids.len();
        let replicas = self.positional_scale(comp.replicas.as_ref(), count, name);
        let min = self.positional_scale(comp.min_replicas.as_ref(), count, name);
        let max = self.positional_scale(comp.max_replicas.as_ref(), count, name);
        let specs = self.instance_amounts(c, count);
        let pod_bearing = comp.pod_bearing();
        ids.into_iter()
            .enumerate()
            .map(|(i, id)| {
                let scale = pb::Scale {
                    replicas: replicas[i],
                    min_replicas: min[i],
                    max_replicas: max[i],
                };
                let (per_pod, present) = specs[i].clone();
                let declared = scale.replicas.or(scale.min_replicas);
                let desired = if pod_bearing && !present {
                    if declared.is_some_and(|n| n > 0) {
                        let comp = &self.def.components[c];
                        let expr = comp.spec.as_ref().and_then(|s| s.primary());
                        self.diags.push_at(
                            INFO,
                            code::SPEC_MISSING,
                            format!("the pod spec of instance `{id}` is missing; counting no pods"),
                            &comp.name,
                            expr.map_or("", |e| e.source()),
                            expr.map_or("", |e| e.path.as_str()),
                        );
                    }
                    0
                } else {
                    declared.unwrap_or(1).max(0) as u32
                };
                // Elastic minimum first, as KAI's groupers read it.
                let min = match scale.min_replicas {
                    Some(m) if m > 0 && pod_bearing && present => m as u32,
                    _ => desired,
                };
                InstanceSpec {
                    id,
                    scale,
                    per_pod,
                    desired,
                    min,
                }
            })
            .collect()
    }

    /// Evaluates an expression on the root and lines its outputs up with `count` instances.
    fn positional(&mut self, expr: &Compiled, count: usize, component: &str) -> Vec<Option<Val>> {
        let out = self.eval_root(expr, component).unwrap_or_default();
        if out.len() != count && !(count == 1 && out.is_empty()) && count > 0 {
            self.diags.push(
                WARNING,
                code::COUNT_MISMATCH,
                format!(
                    "{} yielded {} values for {count} instance(s); matched by position",
                    expr.path,
                    out.len()
                ),
                component,
                expr.source(),
            );
        }
        let mut out = out.into_iter().map(Some).collect::<Vec<_>>();
        out.resize(count, None);
        out
    }

    fn positional_scale(
        &mut self,
        expr: Option<&Compiled>,
        count: usize,
        component: &str,
    ) -> Vec<Option<i32>> {
        let Some(expr) = expr else {
            return vec![None; count];
        };
        let values = self.positional(expr, count, component);
        values
            .into_iter()
            .map(|v| match v {
                None | Some(Val::Null) => None,
                Some(v) => {
                    let n = match &v {
                        Val::Num(_) => as_f64(&v),
                        _ => as_str(&v).and_then(|s| s.trim().parse::<f64>().ok()),
                    };
                    match n {
                        Some(n) if n.fract() == 0.0 && n.abs() <= f64::from(i32::MAX) => {
                            Some(n as i32)
                        }
                        _ => {
                            self.diags.push(
                                WARNING,
                                code::BAD_VALUE,
                                format!(
                                    "{} yielded `{}`, not a whole number",
                                    expr.path,
                                    to_text_bounded(&v, VALUE_BYTES)
                                ),
                                component,
                                expr.source(),
                            );
                            None
                        }
                    }
                }
            })
            .collect()
    }

    /// Per-pod request of each instance and whether the spec exists.
    fn instance_amounts(&mut self, c: usize, count: usize) -> Vec<(Amounts, bool)> {
        let comp = &self.def.components[c];
        let name = comp.name.as_str();
        let mut bad = Vec::new();
        let mut claims = 0usize;
        let result: Vec<(Amounts, bool)> = match &comp.spec {
            None => vec![(Amounts::default(), false); count],
            Some(PodSpecSource::Template(expr)) => self
                .positional(expr, count, name)
                .into_iter()
                .map(|t| match t {
                    None | Some(Val::Null) => (Amounts::default(), false),
                    Some(t) => {
                        claims += get_path(&t, &["spec", "resourceClaims"])
                            .map_or(0, |c| as_array(c).len());
                        (resources::pod_amounts(&t, &mut bad), true)
                    }
                })
                .collect(),
            Some(PodSpecSource::Spec { spec, metadata }) => {
                let specs = self.positional(spec, count, name);
                let metas = match metadata {
                    Some(m) => self.positional(m, count, name),
                    None => vec![None; count],
                };
                specs
                    .into_iter()
                    .zip(metas)
                    .map(|(s, m)| match s {
                        None | Some(Val::Null) => (Amounts::default(), false),
                        Some(s) => {
                            claims += get(&s, "resourceClaims").map_or(0, |c| as_array(c).len());
                            let raw = resources::pod_spec_request(&s, &mut bad);
                            let fraction = resources::gpu_fraction(
                                m.as_ref().and_then(|m| get(m, "annotations")),
                            );
                            (
                                Amounts {
                                    raw,
                                    gpu_fraction: fraction,
                                },
                                true,
                            )
                        }
                    })
                    .collect()
            }
            Some(PodSpecSource::Fragmented {
                resources: res,
                containers,
                container,
                resource_claims,
                annotations,
            }) => {
                let mut column = |e: &Option<Compiled>| match e {
                    Some(e) => self.positional(e, count, name),
                    None => vec![None; count],
                };
                let res = column(res);
                let containers = column(containers);
                let container = column(container);
                let claim_lists = column(resource_claims);
                let annotations = column(annotations);
                (0..count)
                    .map(|i| {
                        claims += claim_lists[i].as_ref().map_or(0, |c| as_array(c).len());
                        let list = containers[i].as_ref().map(as_array).unwrap_or_default();
                        let raw = resources::fragmented_request(
                            res[i].as_ref(),
                            list,
                            container[i].as_ref(),
                            &mut bad,
                        );
                        let fraction = resources::gpu_fraction(annotations[i].as_ref());
                        (
                            Amounts {
                                raw,
                                gpu_fraction: fraction,
                            },
                            true,
                        )
                    })
                    .collect()
            }
        };
        if !bad.is_empty() {
            self.diags.push(
                WARNING,
                code::BAD_QUANTITY,
                format!("unparseable quantities ignored: {}", bad.join(", ")),
                name,
                "",
            );
        }
        if claims > 0 {
            self.diags.push(
                INFO,
                code::DRA_CLAIMS,
                "pod spec uses DRA resource claims; devices from claims are not counted",
                name,
                "",
            );
        }
        result
    }

    /// Computes (once) what component `c`'s selectors say about every pod.
    fn facts(&mut self, tree: &mut Tree<'_>, c: usize) {
        if tree.facts[c].is_some() {
            return;
        }
        let comp = &self.def.components[c];
        let name = comp.name.as_str();
        let mut facts = Vec::with_capacity(self.pods.len());
        for i in 0..self.pods.len() {
            let type_ok = match &comp.type_selector {
                None => tree.sole == Some(c),
                Some(sel) => {
                    let question = super::question(sel, super::TYPE);
                    let answer = self.ask(i, question, sel.key_path.as_ref(), name, |r, pod| {
                        type_matches(r, sel, pod, name)
                    });
                    answer == Answer::Flag(true)
                }
            };
            let instance = match &comp.instance_selector {
                Some(e) => self.pod_key(e, i, name),
                None => None,
            };
            let replica = match &comp.replica_selector {
                Some(e) => self.pod_key(e, i, name),
                None => None,
            };
            facts.push(PodFacts {
                type_ok,
                instance,
                replica,
            });
        }
        tree.facts[c] = Some(facts);
    }
}
