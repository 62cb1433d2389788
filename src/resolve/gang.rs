//! Gang groups: the all-or-nothing groups a scheduler must place.
//!
//! v2 `podGroup`: one group for the workload with one subgroup per listed component (nested
//! per instance/replica when the component has several; omitted when the component wants no
//! pods and has none); minimums come from the tree's slots, so every instance counts even
//! before its pods exist.
//!
//! Alpha `podGroups`: each attributed, non-terminal pod finds its effective member (its own
//! component first, then the nearest ancestor; filters must pass), and pods with equal key
//! values form one gang. A gang's minimum is the extension `minMemberPath` when given, else
//! the minimum of every member component that has a single slot in the tree, plus the
//! minimum of each slot of the other (multi-slot) members that the gang's pods occupy.
//! This is KAI's instance-scoped rule without upstream's multiplication, which over-counts.

use super::diagnostics::VALUE_BYTES;
use super::diagnostics::{WARNING, code};
use super::{Answer, Asked, Resolver};
use crate::definition::plan::{Compiled, GangPlan, PodGroupPlan, PodGroupV2Plan};
use crate::expr::value::{self, as_f64, to_text_bounded};
use crate::proto::v1 as pb;
use jaq_json::{Rc, Val};
use std::collections::{BTreeMap, BTreeSet};

/// A gang's identity: (pod group index, key values).
type GangKey = (usize, Vec<String>);

/// Whether a `minMemberPath` reads `$pod` (a variable is only read by naming it).
pub(super) fn reads_pod(expr: &Compiled) -> bool {
    expr.source().contains("$pod")
}

impl Resolver<'_> {
    /// Computes the gang groups and records each pod's group.
    pub(super) fn gangs(&mut self) -> pb::Gang {
        let mut by_component = vec![Vec::new(); self.def.components.len()];
        for (s, slot) in self.slots.iter().enumerate() {
            if let Some(list) = by_component.get_mut(slot.component) {
                list.push(s);
            }
        }
        self.slots_by_component = by_component;
        let groups = match &self.def.gang {
            None => Vec::new(),
            Some(GangPlan::PodGroup(plan)) => vec![self.gang_v2(plan)],
            Some(GangPlan::PodGroups(plans)) => self.gang_alpha(plans),
        };
        pb::Gang { groups }
    }

    fn member_pod(&self, i: usize) -> bool {
        self.claimed[i].is_some() && !self.pods[i].terminal()
    }

    fn slot_label(&self, slot: usize) -> String {
        let s = &self.slots[slot];
        let mut label = self.def.components[s.component].name.clone();
        if !s.instance.is_empty() {
            label.push('/');
            label.push_str(&s.instance);
        }
        if !s.replica.is_empty() {
            label.push_str(&format!("[{}]", s.replica));
        }
        label
    }

    fn pods_in_slot(&self, slot: usize) -> Vec<String> {
        let mut names: Vec<String> = self.slots[slot]
            .members
            .iter()
            .filter(|&&i| !self.pods[i].terminal())
            .map(|&i| self.pods[i].meta.name.clone())
            .collect();
        names.sort();
        names
    }

    /// The slots of a component, in build order (indexed once per resolution).
    fn component_slots(&self, component: usize) -> &[usize] {
        self.slots_by_component
            .get(component)
            .map_or(&[], Vec::as_slice)
    }

    /// Sums gang minimums, saturating (noted once) instead of wrapping.
    fn sum_min(&mut self, mins: impl IntoIterator<Item = u32>) -> u32 {
        let total: u64 = mins.into_iter().map(u64::from).sum();
        u32::try_from(total).unwrap_or_else(|_| {
            self.counts_saturated();
            u32::MAX
        })
    }

    /// Evaluates a `minMemberPath`; `None` (with a diagnostic) when it yields no whole number.
    /// Results are remembered per root version (with the pod's content when the expression
    /// reads `$pod`), so an unrelated pod change does not evaluate it again.
    fn min_member_override(
        &mut self,
        expr: &Compiled,
        keys: &[String],
        pod: Option<usize>,
    ) -> Option<u32> {
        let reads_pod = reads_pod(expr);
        let key: super::MinMemberKey = (
            std::ptr::from_ref(expr) as usize,
            keys.to_vec(),
            pod.filter(|_| reads_pod).map(|i| {
                let p = self.pods[i];
                (p.meta.identity(), p.packed.content_hash())
            }),
        );
        let remembered = self.prepared.and_then(|p| {
            let table = p.min_members.lock();
            table.get(&key).cloned()
        });
        if let Some((result, diags)) = remembered {
            for d in diags {
                self.diags
                    .push(&d.severity, &d.code, d.message, &d.component, &d.expression);
            }
            return result;
        }
        // Evaluated with diagnostics of its own, so that what it reports is remembered whole
        // (not only what this resolution had not reported yet).
        let outer = std::mem::take(&mut self.diags);
        let result = self.evaluate_min_member(expr, keys, if reads_pod { pod } else { None });
        let reported = std::mem::replace(&mut self.diags, outer).into_vec();
        for d in &reported {
            self.diags.push(
                &d.severity,
                &d.code,
                d.message.clone(),
                &d.component,
                &d.expression,
            );
        }
        if let Some(p) = self.prepared
            && !self.expired
        {
            let mut table = p.min_members.lock();
            if table.len() >= super::MAX_MIN_MEMBERS {
                table.clear();
            }
            table.insert(key, (result, reported));
        }
        result
    }

    fn evaluate_min_member(
        &mut self,
        expr: &Compiled,
        keys: &[String],
        pod: Option<usize>,
    ) -> Option<u32> {
        let keys = Val::Arr(Rc::new(keys.iter().map(|k| value::string(k)).collect()));
        // `$pod` is unpacked only for an expression that names it.
        let pod = pod.map_or(Val::Null, |i| self.pod_value(i));
        // A literal reads nothing: the root is not unpacked for it.
        let root = if expr.expr.is_constant() {
            Val::Null
        } else {
            self.root_value()
        };
        let out = self.eval_on(expr, &root, &[keys, pod], "")?;
        match out.first().and_then(as_f64) {
            Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= f64::from(u32::MAX) => Some(n as u32),
            _ => {
                let got = out
                    .first()
                    .map_or("nothing".to_owned(), |v| to_text_bounded(v, VALUE_BYTES));
                self.diags.push(
                    WARNING,
                    code::BAD_VALUE,
                    format!("{} yielded {got}, not a count", expr.path),
                    "",
                    expr.source(),
                );
                None
            }
        }
    }

    fn gang_v2(&mut self, plan: &PodGroupV2Plan) -> pb::GangGroup {
        let mut subgroups = Vec::new();
        let mut member_slots: BTreeSet<usize> = BTreeSet::new();
        for &c in &plan.subgroups {
            let slots = self.component_slots(c).to_vec();
            member_slots.extend(slots.iter().copied());
            let name = self.def.components[c].name.clone();
            let leaves: Vec<pb::GangGroup> = slots
                .iter()
                .map(|&s| pb::GangGroup {
                    name: self.slot_label(s),
                    min_member: self.slots[s].min,
                    component: name.clone(),
                    instance: self.slots[s].instance.clone(),
                    replica: self.slots[s].replica.clone(),
                    pods: self.pods_in_slot(s),
                    ..Default::default()
                })
                .collect();
            let group = match <[pb::GangGroup; 1]>::try_from(leaves) {
                Ok([mut only]) => {
                    only.name = name;
                    only
                }
                Err(leaves) => pb::GangGroup {
                    name: name.clone(),
                    min_member: self.sum_min(leaves.iter().map(|l| l.min_member)),
                    min_subgroups: leaves.len() as u32,
                    component: name,
                    pods: leaves.iter().flat_map(|l| l.pods.iter().cloned()).collect(),
                    subgroups: leaves,
                    ..Default::default()
                },
            };
            // A component that wants no pods and has none (an absent optional role) is no
            // requirement of the gang.
            if group.min_member > 0 || !group.pods.is_empty() {
                subgroups.push(group);
            }
        }
        let members: Vec<usize> = (0..self.pods.len())
            .filter(|&i| self.member_pod(i))
            .filter(|&i| {
                plan.subgroups.is_empty()
                    || self.pod_slots[i].iter().any(|s| member_slots.contains(s))
            })
            .collect();
        let mins: Vec<u32> = if subgroups.is_empty() {
            self.component_slots(0)
                .iter()
                .map(|&s| self.slots[s].min)
                .collect()
        } else {
            subgroups.iter().map(|g| g.min_member).collect()
        };
        let computed = self.sum_min(mins);
        let min_member = match &plan.min_member {
            Some(expr) => self
                .min_member_override(expr, &[], members.first().copied())
                .unwrap_or(computed),
            None => computed,
        };
        let mut pods: Vec<String> = members
            .iter()
            .map(|&i| self.pods[i].meta.name.clone())
            .collect();
        pods.sort();
        for &i in &members {
            self.pod_gang[i] = plan.name.clone();
        }
        pb::GangGroup {
            name: plan.name.clone(),
            min_member,
            min_subgroups: subgroups.len() as u32,
            subgroups,
            pods,
            ..Default::default()
        }
    }

    fn gang_alpha(&mut self, plans: &[PodGroupPlan]) -> Vec<pb::GangGroup> {
        let def = self.def;
        // (group index, keys) -> (pods, occupied scoped slots)
        let mut gangs: BTreeMap<GangKey, (Vec<usize>, BTreeSet<usize>)> = BTreeMap::new();
        for i in 0..self.pods.len() {
            if !self.member_pod(i) {
                continue;
            }
            let component_name = self.claimed[i]
                .as_ref()
                .map(|p| p.component.clone())
                .unwrap_or_default();
            let Some(component) = def.component_index(&component_name) else {
                continue;
            };
            // Candidates: the pod's own component, then its ancestors, nearest first.
            let mut lineage = vec![component];
            while let Some(parent) = def.components[*lineage.last().unwrap_or(&0)].parent {
                if lineage.contains(&parent) {
                    break;
                }
                lineage.push(parent);
            }
            let mut chosen = None;
            'search: for &c in &lineage {
                for (g, plan) in plans.iter().enumerate() {
                    for (m, member) in plan.members.iter().enumerate() {
                        if member.component == c
                            && self.filters_pass(&member.filters, i, &def.components[c].name)
                        {
                            chosen = Some((g, m));
                            break 'search;
                        }
                    }
                }
            }
            let Some((g, m)) = chosen else {
                self.diags.push(
                    WARNING,
                    code::GANG_NO_MEMBER,
                    format!("pod {} matches no gang member", self.pods[i].meta.name),
                    &component_name,
                    "",
                );
                continue;
            };
            let member = &plans[g].members[m];
            let mut keys = Vec::with_capacity(member.keys.len());
            let mut missing = None;
            for key in &member.keys {
                match self.pod_key(key, i, &def.components[member.component].name) {
                    Some(k) => keys.push(k),
                    None => {
                        missing = Some(key);
                        break;
                    }
                }
            }
            if let Some(key) = missing {
                self.diags.push_at(
                    WARNING,
                    code::GANG_KEY_MISSING,
                    format!(
                        "pod {} has no value for gang key {}",
                        self.pods[i].meta.name, key.path
                    ),
                    &def.components[member.component].name,
                    key.source(),
                    &key.path,
                );
                continue;
            }
            let scoped = self.component_slots(member.component).len() > 1;
            let entry = gangs.entry((g, keys)).or_default();
            entry.0.push(i);
            if scoped
                && let Some(&slot) = self.pod_slots[i]
                    .iter()
                    .find(|&&s| self.slots[s].component == member.component)
            {
                entry.1.insert(slot);
            }
        }

        let mut out = Vec::new();
        for ((g, keys), (members, scoped_slots)) in gangs {
            let plan = &plans[g];
            let mut mins: Vec<u32> = Vec::new();
            let mut seen_components = BTreeSet::new();
            for member in &plan.members {
                let slots = self.component_slots(member.component);
                if slots.len() <= 1 && seen_components.insert(member.component) {
                    mins.extend(slots.iter().map(|&s| self.slots[s].min));
                }
            }
            mins.extend(scoped_slots.iter().map(|&s| self.slots[s].min));
            let computed = self.sum_min(mins);
            let min_member = match &plan.min_member {
                Some(expr) => self
                    .min_member_override(expr, &keys, members.first().copied())
                    .unwrap_or(computed),
                None => computed,
            };
            let mut name = plan.name.clone();
            for k in &keys {
                name.push('-');
                name.push_str(k);
            }
            let (component, instance, replica) = match (scoped_slots.len(), plan.members.len()) {
                (1, 1) => {
                    let s = &self.slots[*scoped_slots.iter().next().unwrap_or(&0)];
                    (
                        def.components[s.component].name.clone(),
                        s.instance.clone(),
                        s.replica.clone(),
                    )
                }
                (_, 1) => (
                    def.components[plan.members[0].component].name.clone(),
                    String::new(),
                    String::new(),
                ),
                _ => Default::default(),
            };
            let mut pods: Vec<String> = members
                .iter()
                .map(|&i| self.pods[i].meta.name.clone())
                .collect();
            pods.sort();
            for &i in &members {
                self.pod_gang[i] = name.clone();
            }
            out.push(pb::GangGroup {
                name,
                min_member,
                component,
                instance,
                replica,
                pods,
                keys,
                ..Default::default()
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// All filters must yield exactly one output, `true`.
    pub(super) fn filters_pass(&mut self, filters: &[Compiled], i: usize, component: &str) -> bool {
        filters.iter().all(|f| {
            let question = super::question(f, super::FILTER);
            let answer = self.ask(i, question, Some(f), component, |r, i| {
                let (out, failure, remember) = r.evaluate(f, i, component);
                Asked {
                    answer: Answer::Flag(matches!(out.as_deref(), Some([Val::Bool(true)]))),
                    failure,
                    remember,
                }
            });
            answer == Answer::Flag(true)
        })
    }
}
