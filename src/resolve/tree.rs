//! The component tree: instances and replica slots, desired counts, pod placement and
//! resource roll-ups.
//!
//! Counting convention (as in Workload Map): a component's replica count is the number of
//! units at that level **across the whole workload**. When a component appears under
//! several parent slots (for example a LeaderWorkerSet's `leader` under each replica of
//! `group`), its count is shared evenly among those slots, so the slots add up to the
//! whole.

use super::diagnostics::{code, INFO, WARNING};
use super::resources::{self, Amounts};
use super::{Resolver, Slot};
use crate::definition::compile::{Compiled, PodSpecSource};
use crate::expr::value::{as_array, as_f64, as_str, get, get_path, to_text};
use crate::object::Pod;
use crate::proto::v1 as pb;
use jaq_json::Val;
use std::collections::BTreeSet;

/// What the root object says about one instance of a component.
#[derive(Debug, Clone, Default)]
struct InstanceSpec {
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
struct Tree {
    specs: Vec<Vec<InstanceSpec>>,
    facts: Vec<Option<Vec<PodFacts>>>,
    /// The only pod-bearing component, if there is exactly one.
    sole: Option<usize>,
}

/// What a component contributes to its parent slot.
#[derive(Default)]
struct Built {
    component: Option<pb::Component>,
    desired: u32,
    min: u32,
    current: u32,
    ready: u32,
    desired_amounts: Amounts,
    current_amounts: Amounts,
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

/// The proto view of one pod.
pub(super) fn pod_info(pod: &Pod) -> pb::PodInfo {
    pb::PodInfo {
        name: pod.meta.name.clone(),
        uid: pod.meta.uid.clone(),
        node: pod.node.clone(),
        phase: pod.phase.clone(),
        ready: pod.ready,
        resources: Some(pod.request.to_proto()),
        reason: pod.reason.clone(),
    }
}

impl Resolver<'_> {
    /// Builds the whole tree from the root component; records slots and pod placements.
    pub(super) fn build_tree(&mut self) -> Option<pb::Component> {
        let def = self.def;
        let specs = (0..def.components.len()).map(|c| self.extract(c)).collect();
        let pod_bearing: Vec<usize> = (0..def.components.len()).filter(|&c| def.components[c].pod_bearing()).collect();
        let sole = match pod_bearing.as_slice() {
            [only] => Some(*only),
            _ => None,
        };
        let mut tree = Tree { specs, facts: vec![None; def.components.len()], sole };
        let scope: Vec<usize> = (0..self.pods.len()).collect();
        let built = self.build(&mut tree, 0, &scope, 0, 1);
        self.root_desired = built.desired_amounts;
        built.component
    }

    /// Extracts the instances of component `c` from the root object.
    fn extract(&mut self, c: usize) -> Vec<InstanceSpec> {
        let comp = &self.def.components[c];
        let name = comp.name.as_str();
        let ids: Vec<String> = match &comp.instance_ids {
            None => vec![String::new()],
            Some(expr) => {
                let mut ids: Vec<String> = Vec::new();
                for v in self.eval_root(expr, name).unwrap_or_default() {
                    let id = if matches!(v, Val::Null) { String::new() } else { to_text(&v) };
                    if id.is_empty() {
                        self.diags.push(WARNING, code::BAD_VALUE, "instance id path yielded an empty id; skipped", name, expr.source());
                    } else if ids.contains(&id) {
                        self.diags.push(WARNING, code::BAD_VALUE, format!("duplicate instance id `{id}`; merged"), name, expr.source());
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
                let scale = pb::Scale { replicas: replicas[i], min_replicas: min[i], max_replicas: max[i] };
                let (per_pod, present) = specs[i].clone();
                let declared = scale.replicas.or(scale.min_replicas);
                let desired = if pod_bearing && !present {
                    if declared.is_some_and(|n| n > 0) {
                        self.diags.push(
                            INFO,
                            code::SPEC_MISSING,
                            format!("the pod spec of instance `{id}` is missing; counting no pods"),
                            &self.def.components[c].name,
                            "",
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
                InstanceSpec { id, scale, per_pod, desired, min }
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
                format!("{} yielded {} values for {count} instance(s); matched by position", expr.path, out.len()),
                component,
                expr.source(),
            );
        }
        let mut out = out.into_iter().map(Some).collect::<Vec<_>>();
        out.resize(count, None);
        out
    }

    fn positional_scale(&mut self, expr: Option<&Compiled>, count: usize, component: &str) -> Vec<Option<i32>> {
        let Some(expr) = expr else { return vec![None; count] };
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
                        Some(n) if n.fract() == 0.0 && n.abs() <= f64::from(i32::MAX) => Some(n as i32),
                        _ => {
                            self.diags.push(
                                WARNING,
                                code::BAD_VALUE,
                                format!("{} yielded `{}`, not a whole number", expr.path, to_text(&v)),
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
                        claims += get_path(&t, &["spec", "resourceClaims"]).map_or(0, |c| as_array(c).len());
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
                            let fraction = resources::gpu_fraction(m.as_ref().and_then(|m| get(m, "annotations")));
                            (Amounts { raw, gpu_fraction: fraction }, true)
                        }
                    })
                    .collect()
            }
            Some(PodSpecSource::Fragmented { resources: res, containers, container, resource_claims, annotations }) => {
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
                        let raw = resources::fragmented_request(res[i].as_ref(), list, container[i].as_ref(), &mut bad);
                        let fraction = resources::gpu_fraction(annotations[i].as_ref());
                        (Amounts { raw, gpu_fraction: fraction }, true)
                    })
                    .collect()
            }
        };
        if !bad.is_empty() {
            self.diags.push(WARNING, code::BAD_QUANTITY, format!("unparseable quantities ignored: {}", bad.join(", ")), name, "");
        }
        if claims > 0 {
            self.diags.push(INFO, code::DRA_CLAIMS, "pod spec uses DRA resource claims; devices from claims are not counted", name, "");
        }
        result
    }

    /// Computes (once) what component `c`'s selectors say about every pod.
    fn facts(&mut self, tree: &mut Tree, c: usize) {
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
                    let pod = self.pods[i];
                    let labels = get_path(&pod.value, &["metadata", "labels"]);
                    let labels_ok = sel.match_labels.iter().all(|(k, v)| {
                        labels.and_then(|l| get(l, k)).and_then(as_str) == Some(v.as_str())
                    });
                    labels_ok
                        && match &sel.key_path {
                            None => true,
                            Some(expr) => {
                                let out = self.eval_on(expr, &pod.value, &[], name).unwrap_or_default();
                                match &sel.value {
                                    None => out.iter().any(|v| !matches!(v, Val::Null)),
                                    Some(want) => out.iter().any(|v| !matches!(v, Val::Null) && to_text(v) == *want),
                                }
                            }
                        }
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
            facts.push(PodFacts { type_ok, instance, replica });
        }
        tree.facts[c] = Some(facts);
    }

    /// Builds component `c` under one parent slot. `scope` holds the pods that reached this
    /// slot; the parent slot is place `ordinal` of `places` places the component appears in.
    fn build(&mut self, tree: &mut Tree, c: usize, scope: &[usize], ordinal: u32, places: u32) -> Built {
        self.facts(tree, c);
        let def = self.def;
        let comp = &def.components[c];
        let facts = tree.facts[c].clone().unwrap_or_default();
        let pod_bearing = comp.pod_bearing();

        // Slots: (instance index, replica key, pods, index within the instance, slots of the instance).
        let mut slots: Vec<(usize, String, Vec<usize>, u32, u32)> = Vec::new();
        for (k, inst) in tree.specs[c].iter().enumerate() {
            let inst_pods: Vec<usize> = scope
                .iter()
                .copied()
                .filter(|&p| comp.instance_selector.is_none() || facts[p].instance.as_deref() == Some(inst.id.as_str()))
                .collect();
            if comp.replica_selector.is_none() {
                slots.push((k, String::new(), inst_pods, 0, 1));
                continue;
            }
            let mut keys: BTreeSet<String> = inst_pods.iter().filter_map(|&p| facts[p].replica.clone()).collect();
            if !pod_bearing {
                for r in 0..share(inst.desired, places, ordinal) {
                    keys.insert(r.to_string());
                }
            }
            let keys = sort_keys(keys);
            if keys.is_empty() {
                slots.push((k, String::new(), Vec::new(), 0, 1));
            }
            let n = keys.len() as u32;
            for (j, key) in keys.into_iter().enumerate() {
                let pods = inst_pods.iter().copied().filter(|&p| facts[p].replica.as_deref() == Some(key.as_str())).collect();
                slots.push((k, key, pods, j as u32, n));
            }
        }

        let total = slots.len() as u32;
        let mut built = Built::default();
        let mut instances = Vec::new();
        let mut any_kept_child = false;
        for (s, (k, key, slot_pods, index_in_instance, instance_slots)) in slots.into_iter().enumerate() {
            let inst = tree.specs[c][k].clone();
            let slot_id = self.slots.len();
            self.slots.push(Slot { component: c, instance: inst.id.clone(), replica: key.clone(), desired: 0, min: 0 });
            self.slot_path.push(slot_id);

            let (own_desired, own_min) = if pod_bearing {
                let d = share(share(inst.desired, places, ordinal), instance_slots, index_in_instance);
                let m = share(share(inst.min, places, ordinal), instance_slots, index_in_instance);
                (d, m)
            } else {
                (0, 0)
            };
            let mut own: Vec<usize> = Vec::new();
            if pod_bearing {
                for &p in &slot_pods {
                    if self.claimed[p].is_none() && facts[p].type_ok {
                        self.claimed[p] = Some(pb::PodPlacement {
                            component: comp.name.clone(),
                            instance: inst.id.clone(),
                            replica: key.clone(),
                            gang_group: String::new(),
                        });
                        self.pod_slots[p] = self.slot_path.clone();
                        own.push(p);
                    }
                }
            }

            let mut desired = own_desired;
            let mut min = own_min;
            let mut current = 0;
            let mut ready = 0;
            let mut desired_amounts = inst.per_pod.times(own_desired);
            let mut current_amounts = Amounts::default();
            for &p in &own {
                let pod = self.pods[p];
                current += u32::from(!pod.terminal());
                ready += u32::from(pod.ready);
                if pod.holds_resources() {
                    current_amounts.add(&pod.request);
                }
            }
            let mut children = Vec::new();
            for &ch in &comp.children {
                let child = self.build(tree, ch, &slot_pods, ordinal * total + s as u32, places * total);
                desired += child.desired;
                min += child.min;
                current += child.current;
                ready += child.ready;
                desired_amounts.add(&child.desired_amounts);
                current_amounts.add(&child.current_amounts);
                if let Some(component) = child.component {
                    children.push(component);
                    any_kept_child = true;
                }
            }
            self.slot_path.pop();
            self.slots[slot_id].desired = desired;
            self.slots[slot_id].min = min;
            built.desired += desired;
            built.min += min;
            built.current += current;
            built.ready += ready;
            built.desired_amounts.add(&desired_amounts);
            built.current_amounts.add(&current_amounts);

            let mut pod_list: Vec<pb::PodInfo> = own.iter().map(|&p| pod_info(self.pods[p])).collect();
            pod_list.sort_by(|a, b| a.name.cmp(&b.name));
            instances.push(pb::Instance {
                id: inst.id.clone(),
                replica: key,
                scale: Some(inst.scale.clone()),
                pods: Some(pb::PodCounts { desired, current, ready }),
                per_pod: pod_bearing.then(|| inst.per_pod.to_proto()),
                totals: Some(pb::Totals {
                    desired: Some(desired_amounts.to_proto()),
                    current: Some(current_amounts.to_proto()),
                }),
                pod_list,
                children,
            });
        }

        let empty = built.desired == 0 && built.current == 0 && instances.iter().all(|i| i.pod_list.is_empty());
        let keep = c == 0 || pod_bearing || any_kept_child || !empty;
        if keep {
            built.component = Some(pb::Component {
                name: comp.name.clone(),
                kind: comp.kind.as_ref().map(|k| pb::GroupVersionKind {
                    group: k.group.clone(),
                    version: k.version.clone(),
                    kind: k.kind.clone(),
                }),
                instances,
            });
        }
        built
    }
}
