//! Resolution: `(definition, root object, its pods) -> WorkloadGraph`.
//!
//! Pure and synchronous: no I/O, no async runtime, no Kubernetes client. Every jq
//! evaluation error becomes a diagnostic; nothing here panics on input.
//!
//! The steps: status from the root object ([`status`]); the component tree with instances,
//! replica slots, desired counts and pod placement ([`tree`]); gang groups ([`gang`]); then
//! workload totals and unattributed pods.

pub mod diagnostics;
mod gang;
pub mod ownership;
pub mod resources;
mod status;
mod tree;

use crate::definition::compile::Compiled;
use crate::definition::Definition;
use crate::expr::value::to_text;
use crate::expr::EvalError;
use crate::object::{Object, Pod};
use crate::proto::v1 as pb;
use diagnostics::{code, Diagnostics, ERROR, INFO, WARNING};
use jaq_json::Val;
use resources::Amounts;
use std::collections::HashMap;
use std::time::Instant;

/// What to resolve.
pub struct Input<'a> {
    /// The definition for the root's kind.
    pub definition: &'a Definition,
    /// Catalog generation the definition belongs to.
    pub generation: u64,
    /// The root workload object.
    pub root: &'a Object,
    /// The pods that belong to the workload (by controller chain).
    pub pods: &'a [&'a Pod],
    /// Set when the definition is for another version of the root's kind.
    pub fallback_from: Option<&'a str>,
    /// Evaluations stop (with a diagnostic) after this instant.
    pub deadline: Option<Instant>,
}

/// A resolved workload and where each of its pods sits.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// The graph.
    pub workload: pb::Workload,
    /// Placement of every pod, by pod uid (unattributed pods have an empty component).
    pub placements: HashMap<String, pb::PodPlacement>,
}

/// Resolves one workload.
pub fn resolve(input: &Input<'_>) -> Resolution {
    let mut r = Resolver::new(input);
    if let Some(problem) = &input.root.problem {
        r.diags.push(ERROR, code::OBJECT_UNREADABLE, format!("workload object unreadable: {problem}"), "", "");
    }
    if let Some(from) = input.fallback_from {
        r.diags.push(
            INFO,
            code::DEFINITION_FALLBACK,
            format!("no definition for {from}; used `{}` for {}", input.definition.name, input.definition.root_kind),
            "",
            "",
        );
    }
    for pod in input.pods {
        r.note_pod_problems(pod);
    }
    let status = r.status();
    let root_component = r.build_tree();
    let gang = r.gangs();

    let mut pods = pb::PodCounts { desired: 0, current: 0, ready: 0 };
    let mut desired = Amounts::default();
    if let Some(root) = root_component.as_ref() {
        for instance in &root.instances {
            let counts = instance.pods.unwrap_or_default();
            pods.desired += counts.desired;
        }
        desired = r.root_desired.clone();
    }
    let mut current = Amounts::default();
    let mut unattributed = Vec::new();
    let mut placements = HashMap::new();
    for (i, pod) in input.pods.iter().enumerate() {
        if !pod.terminal() {
            pods.current += 1;
        }
        if pod.ready {
            pods.ready += 1;
        }
        if pod.holds_resources() {
            current.add(&pod.request);
        }
        let mut placement = r.claimed[i].clone().unwrap_or_default();
        placement.gang_group = r.pod_gang[i].clone();
        if r.claimed[i].is_none() {
            unattributed.push(tree::pod_info(pod));
            r.diags.push(
                WARNING,
                code::UNATTRIBUTED_POD,
                format!("pod {} belongs to the workload but no component claims it", pod.meta.name),
                "",
                "",
            );
        }
        placements.insert(pod.meta.identity(), placement);
    }

    let def = input.definition;
    let meta = &input.root.meta;
    let workload = pb::Workload {
        r#ref: Some(pb::ObjectRef {
            api_version: meta.api_version.clone(),
            kind: meta.kind.clone(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: meta.uid.clone(),
        }),
        cluster: String::new(),
        definition: Some(pb::DefinitionRef {
            name: def.name.clone(),
            origin: def.origin.clone(),
            generation: input.generation,
        }),
        revision: 0,
        status: Some(status),
        pods: Some(pods),
        totals: Some(pb::Totals { desired: Some(desired.to_proto()), current: Some(current.to_proto()) }),
        gang: Some(gang),
        components: root_component.into_iter().collect(),
        unattributed_pods: unattributed,
        diagnostics: r.diags.into_vec(),
    };
    Resolution { workload, placements }
}

/// Strips a graph to its summary: no component tree, pod lists or gang members.
pub fn summarize(workload: &mut pb::Workload) {
    workload.components.clear();
    workload.unattributed_pods.clear();
    if let Some(gang) = workload.gang.as_mut() {
        fn strip(g: &mut pb::GangGroup) {
            g.pods.clear();
            g.subgroups.iter_mut().for_each(strip);
        }
        gang.groups.iter_mut().for_each(strip);
    }
}

/// One slot of the tree: a component instance (and replica) under one parent slot.
#[derive(Debug, Clone)]
struct Slot {
    component: usize,
    instance: String,
    replica: String,
    /// Desired pods of this slot and everything below it.
    desired: u32,
    /// Gang minimum of this slot and everything below it.
    min: u32,
}

/// Mutable state of one resolution.
struct Resolver<'a> {
    def: &'a Definition,
    root: &'a Val,
    pods: &'a [&'a Pod],
    deadline: Option<Instant>,
    expired: bool,
    diags: Diagnostics,
    /// Placement of each pod that a component claimed.
    claimed: Vec<Option<pb::PodPlacement>>,
    /// Gang group name of each pod.
    pod_gang: Vec<String>,
    /// All slots, in build order.
    slots: Vec<Slot>,
    /// For each claimed pod, the slots it sits in from the root down to its own.
    pod_slots: Vec<Vec<usize>>,
    /// Slots from the root to the one being built.
    slot_path: Vec<usize>,
    /// Desired resources of the whole workload.
    root_desired: Amounts,
}

impl<'a> Resolver<'a> {
    fn new(input: &'a Input<'a>) -> Self {
        let n = input.pods.len();
        Resolver {
            def: input.definition,
            root: &input.root.value,
            pods: input.pods,
            deadline: input.deadline,
            expired: false,
            diags: Diagnostics::default(),
            claimed: vec![None; n],
            pod_gang: vec![String::new(); n],
            slots: Vec::new(),
            pod_slots: vec![Vec::new(); n],
            slot_path: Vec::new(),
            root_desired: Amounts::default(),
        }
    }

    fn note_pod_problems(&mut self, pod: &Pod) {
        if let Some(problem) = &pod.problem {
            self.diags.push(WARNING, code::OBJECT_UNREADABLE, format!("pod {} unreadable: {problem}", pod.meta.name), "", "");
        }
        if !pod.bad_quantities.is_empty() {
            self.diags.push(
                WARNING,
                code::BAD_QUANTITY,
                format!("pod {}: unparseable quantities ignored: {}", pod.meta.name, pod.bad_quantities.join(", ")),
                "",
                "",
            );
        }
        if pod.resource_claims > 0 {
            self.diags.push(
                INFO,
                code::DRA_CLAIMS,
                format!("pod {} uses {} DRA resource claim(s); devices from claims are not counted", pod.meta.name, pod.resource_claims),
                "",
                "",
            );
        }
    }

    /// Evaluates `expr` on `input`; errors become diagnostics and `None`.
    fn eval_on(&mut self, expr: &Compiled, input: &Val, vars: &[Val], component: &str) -> Option<Vec<Val>> {
        if self.expired {
            return None;
        }
        match expr.expr.eval_with(input, vars, self.deadline) {
            Ok(out) => Some(out),
            Err(EvalError::Deadline) => {
                self.expired = true;
                self.diags.push(ERROR, code::DEADLINE, "resolve deadline exceeded; the graph is partial", component, expr.source());
                None
            }
            Err(e) => {
                self.diags.push(
                    WARNING,
                    code::EVAL_ERROR,
                    format!("{} failed: {e}", expr.path),
                    component,
                    expr.source(),
                );
                None
            }
        }
    }

    /// Evaluates on the root object.
    fn eval_root(&mut self, expr: &Compiled, component: &str) -> Option<Vec<Val>> {
        let root = self.root;
        self.eval_on(expr, root, &[], component)
    }

    /// Evaluates on pod `i` and requires exactly one non-empty output, returned as text.
    fn pod_key(&mut self, expr: &Compiled, i: usize, component: &str) -> Option<String> {
        let pod = self.pods[i];
        let out = self.eval_on(expr, &pod.value, &[], component)?;
        match out.as_slice() {
            [v] if !matches!(v, Val::Null) => Some(to_text(v)).filter(|s| !s.is_empty()),
            _ => None,
        }
    }
}
