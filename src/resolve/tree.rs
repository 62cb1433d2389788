//! The component tree: instances and replica slots, desired counts, pod placement and
//! resource roll-ups.
//!
//! Counting convention (as in Workload Map): a component's replica count is the number of
//! units at that level **across the whole workload**. When a component appears under
//! several parent slots (for example a `leader` component under each replica of a grouping
//! `group`), its count is shared evenly among those slots, so the slots add up to the
//! whole.

use super::extract::InstanceSpec;
use super::{Answer, Asked, Resolver, Slot};
use crate::definition::plan::TypeSelector;
use crate::expr::value::to_text;
use crate::model::Pod;
use crate::proto::v1 as pb;
use jaq_json::Val;
use std::collections::{BTreeMap, BTreeSet};

/// What one component's pod selectors say about one pod.
#[derive(Debug, Clone, Default)]
struct PodFacts {
    type_ok: bool,
    instance: Option<String>,
    replica: Option<String>,
}

/// Where a component's slots are made: under parent slot `ordinal` of `places`, with room
/// for `room` more slots of it (each with what it brings below it).
#[derive(Debug, Clone, Copy)]
struct Place {
    places: u32,
    ordinal: u32,
    room: usize,
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
    i: usize,
    component: &str,
) -> Asked {
    let labels_ok = sel
        .match_labels
        .iter()
        .all(|(k, v)| r.pod_label_is(i, k, v));
    let (matched, failure, remember) = match (&sel.key_path, labels_ok) {
        (_, false) => (false, None, true),
        (None, true) => (true, None, true),
        (Some(expr), true) => {
            let (out, failure, remember) = r.evaluate(expr, i, component);
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
        // The slots one slot of each component brings with it (itself and one per instance
        // of every component below it), so that desired replicas are cut to what fits
        // together with what they hold, not to the first level alone.
        let mut weight = vec![1usize; n];
        for c in (0..n).rev() {
            for &child in &def.components[c].children {
                if child > c && child < n {
                    let below = specs.get(child).map_or(1, Vec::len).max(1);
                    weight[c] = weight[c].saturating_add(below.saturating_mul(weight[child]));
                }
            }
        }

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
                    let room = self.native.slots_left / weight[c];
                    let place = Place {
                        places,
                        ordinal: ordinal as u32,
                        room,
                    };
                    for (key, pods) in self.slot_keys(&tree, c, k, &scope, &facts, place) {
                        if !self.room_for_slot(pods.len()) {
                            break;
                        }
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
        // Counts saturate at their field's maximum (noted once as a diagnostic), never wrap.
        let mut over = false;
        let mut add = |to: &mut u32, n: u32| {
            *to = to.checked_add(n).unwrap_or_else(|| {
                over = true;
                u32::MAX
            });
        };
        for s in (0..self.slots.len()).rev() {
            let slot = &mut self.slots[s];
            add(&mut slot.desired, slot.own_desired);
            add(&mut slot.min, slot.own_min);
            let own = std::mem::take(&mut slot.own);
            for &p in &own {
                let pod = self.pods[p];
                let slot = &mut self.slots[s];
                slot.current += u32::from(!pod.terminal());
                slot.ready += u32::from(pod.ready);
                if pod.holds_resources() {
                    slot.current_amounts
                        .add_with_named_gpus(&pod.request, &self.gpu_names);
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
                add(&mut up.desired, d);
                add(&mut up.min, m);
                add(&mut up.current, cur);
                add(&mut up.ready, rdy);
                up.desired_amounts.add(&da);
                up.current_amounts.add(&ca);
            }
        }
        if over {
            self.counts_saturated();
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
    /// the pods of `scope` that fall into it. Desired replicas that have no pods yet are cut
    /// to the room `place` leaves (with a `limit_exceeded` diagnostic).
    fn slot_keys(
        &mut self,
        tree: &Tree<'_>,
        c: usize,
        k: usize,
        scope: &[usize],
        facts: &[PodFacts],
        place: Place,
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
        // Pods by replica key, in one pass (a key per pod is possible: no key × pod scan).
        let mut by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut keyless: Vec<usize> = Vec::new();
        for &p in &inst_pods {
            match &facts[p].replica {
                Some(key) => by_key.entry(key.clone()).or_default().push(p),
                None => keyless.push(p),
            }
        }
        // Room for this many keyed slots here (each with what it brings below it).
        let room = place.room.saturating_sub(usize::from(!keyless.is_empty()));
        let mut wanted = by_key.len();
        if !comp.pod_bearing() {
            // Desired replicas without pods yet (keys `0`..), as many as there is room for.
            let desired = share(inst.desired, place.places, place.ordinal) as usize;
            for r in 0..desired.min(room) {
                by_key.entry(r.to_string()).or_default();
            }
            wanted = wanted.max(desired).max(by_key.len());
        }
        let keys: BTreeSet<String> = by_key.keys().cloned().collect();
        let mut keys = sort_keys(keys);
        if keys.len() > room || wanted > room {
            // The first keys in order are kept; the pods of the others stay unclaimed.
            keys.truncate(room);
            let name = comp.name.clone();
            self.slots_cut(&name, wanted, room);
        }
        let mut out: Vec<(String, Vec<usize>)> = keys
            .into_iter()
            .map(|key| {
                let pods = by_key.remove(&key).unwrap_or_default();
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
                    let answer = self.ask(i, question, sel.key_path.as_ref(), name, |r, i| {
                        type_matches(r, sel, i, name)
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
