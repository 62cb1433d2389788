//! The nine operations, answered from the request's object and its definition alone.
//! Synchronous: runs on an evaluation thread with a deadline (see [`super::handle`]).
//!
//! What each returns is documented in `docs/karmada.md`; in short: the pod-bearing instances
//! of the definition's components (in definition order) are Karmada's replicas and
//! components; their pod specs give node claims, priority classes and dependencies; the
//! normalized status gives health and picks the member status that aggregation keeps.

use super::patch::{self, Step};
use super::pods;
use super::wire::{Component, ReplicaRequirements, Request, RequestStatus, Response};
use crate::definition::plan::PodSpecSource;
use crate::definition::{Catalog, Definition};
use crate::excerpt::echo;
use crate::expr::Expr;
use crate::expr::value::Limits;
use crate::model::Object;
use crate::model::resources::{Amounts, format_quantity};
use crate::proto::v1 as pb;
use crate::resolve::evaluate::Cut;
use crate::resolve::{self, Prepared, Want, diagnostics::code};
use jaq_json::Val;
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Most member statuses one AggregateStatus request may carry.
pub const MAX_MEMBERS: usize = 1024;

/// Longest component name Karmada accepts.
pub const MAX_NAME: usize = 32;

/// An operation that could not be answered: a code and a message for `response.status`.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// See [`RequestStatus::code`].
    pub code: i32,
    /// Why.
    pub message: String,
}

impl Refusal {
    fn new(code: i32, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

type Answer<T> = Result<T, Refusal>;

/// The answer to `request`, and the kind it was answered for (empty when no definition
/// covers it), for metrics.
pub fn answer(catalog: &Catalog, request: &Request, deadline: Instant) -> (Response, String) {
    let mut kind = String::new();
    let outcome = run(catalog, request, deadline, &mut kind);
    let response = match outcome {
        Ok(mut r) => {
            r.uid = request.uid.clone();
            r.successful = true;
            r
        }
        Err(mut refusal) => Response {
            uid: request.uid.clone(),
            successful: false,
            status: Some(RequestStatus {
                message: {
                    crate::excerpt::bound(&mut refusal.message, crate::excerpt::STATUS_BYTES);
                    refusal.message
                },
                code: refusal.code,
            }),
            ..Response::default()
        },
    };
    (response, kind)
}

fn run(
    catalog: &Catalog,
    request: &Request,
    deadline: Instant,
    kind: &mut String,
) -> Answer<Response> {
    let op = request.operation.as_str();
    if !super::wire::OPERATIONS.contains(&op) {
        return Err(Refusal::new(
            400,
            format!("unknown operation `{}`", echo(op)),
        ));
    }
    let object = &request.object;
    if !object.is_object() {
        return Err(Refusal::new(400, "request.object is not a JSON object"));
    }
    let text = |k: &str| object.get(k).and_then(Json::as_str).unwrap_or_default();
    let (api_version, object_kind) = match (text("apiVersion"), text("kind")) {
        ("", _) | (_, "") => {
            let gvk = &request.kind;
            let api = if gvk.group.is_empty() {
                gvk.version.clone()
            } else {
                format!("{}/{}", gvk.group, gvk.version)
            };
            (api, gvk.kind.clone())
        }
        (a, k) => (a.to_owned(), k.to_owned()),
    };
    let lookup = catalog.lookup(&api_version, &object_kind).ok_or_else(|| {
        Refusal::new(
            404,
            format!(
                "no definition covers {}/{}",
                echo(&api_version),
                echo(&object_kind)
            ),
        )
    })?;
    let def = lookup.definition;
    *kind = def.root_kind.kind.clone();
    let root = parse(object)?;
    let ask = Ask {
        def: &def,
        root: &root,
        json: object,
        deadline,
    };
    match op {
        "InterpretReplica" => ask.replica(),
        "InterpretComponent" => ask.components(),
        "ReviseReplica" => ask.revise(request.replicas),
        "InterpretStatus" => Ok(Response {
            raw_status: Some(
                object
                    .get("status")
                    .cloned()
                    .unwrap_or_else(|| Json::Object(Default::default())),
            ),
            ..Response::default()
        }),
        "InterpretHealth" => {
            let prepared = ask.prepare(&root, STATUS)?;
            Ok(Response {
                healthy: Some(healthy(prepared.status())),
                ..Response::default()
            })
        }
        "AggregateStatus" => ask.aggregate(&request.aggregated_status),
        "InterpretDependency" => ask.dependencies(),
        "Retain" => ask.retain(request.observed_object.as_ref()),
        // Prune: the definition names no generated fields, so the object is applied as it
        // is (Karmada's answer for kinds without such rules).
        _ => Ok(Response::default()),
    }
}

/// The object as the resolver reads it; an object beyond the conversion limits is refused.
fn parse(object: &Json) -> Answer<Object> {
    let root = Object::from_json(object, Limits::default())
        .map_err(|e| Refusal::new(400, format!("request.object: {e}")))?;
    if let Some(problem) = &root.problem {
        return Err(Refusal::new(
            400,
            format!("request.object is unreadable: {problem}"),
        ));
    }
    Ok(root)
}

/// Healthy: the normalized status is Running or Completed.
pub fn healthy(status: &pb::Status) -> bool {
    status.phase == pb::Phase::Running as i32 || status.phase == pb::Phase::Completed as i32
}

/// The normalized status alone (health, aggregation).
const STATUS: Want = Want {
    status: true,
    pod_specs: false,
};
/// Instances with their pod specs (replicas, components).
const SPECS: Want = Want {
    status: false,
    pod_specs: true,
};
/// Instances alone (revise, dependencies).
const INSTANCES: Want = Want {
    status: false,
    pod_specs: false,
};

/// One pod-bearing instance, as the answers use it.
struct Instance {
    component: usize,
    position: usize,
    id: String,
    replicas: Option<i32>,
    desired: u32,
    per_pod: Amounts,
}

struct Ask<'a> {
    def: &'a Arc<Definition>,
    root: &'a Object,
    json: &'a Json,
    deadline: Instant,
}

impl Ask<'_> {
    /// What the object alone determines; an evaluation cut short is refused (a partial
    /// answer would mislead a scheduler).
    fn prepare(&self, root: &Object, want: Want) -> Answer<Prepared> {
        let prepared = resolve::prepare_with(self.def, root, Some(self.deadline), want);
        if let Some(d) = prepared.diagnostics().iter().find(|d| {
            resolve::diagnostics::evaluation_cut_short(&d.code)
                || d.code == code::OBJECT_UNREADABLE
                || d.code == code::QUANTITY_OUT_OF_RANGE
        }) {
            let status = match d.code.as_str() {
                code::OBJECT_UNREADABLE => 400,
                code::QUANTITY_OUT_OF_RANGE => 422,
                _ => 500,
            };
            let field = if d.expression.is_empty() {
                String::new()
            } else {
                format!(" (field `{}`)", echo(&d.expression))
            };
            return Err(Refusal::new(
                status,
                format!("{}: {}{field}", d.code, echo(&d.message)),
            ));
        }
        Ok(prepared)
    }

    fn instances(&self, prepared: &Prepared) -> Vec<Instance> {
        let mut out = Vec::new();
        for (c, comp) in self.def.components.iter().enumerate() {
            if !comp.pod_bearing() {
                continue;
            }
            for (position, inst) in prepared.instances(c).enumerate() {
                // No replica count and no pods: the object does not have this instance
                // (an optional replica type left out).
                if inst.scale.replicas.is_none() && inst.desired == 0 {
                    continue;
                }
                out.push(Instance {
                    component: c,
                    position,
                    id: inst.id.to_owned(),
                    replicas: inst.scale.replicas,
                    desired: inst.desired,
                    per_pod: inst.per_pod.clone(),
                });
            }
        }
        out
    }

    /// Evaluates `expr` on the root through the resolver's guarded evaluation (quarantine,
    /// deadline, budget overruns counted against the definition).
    fn eval(&self, expr: &Expr, root: &Val, what: &str) -> Answer<Vec<Val>> {
        resolve::evaluate::evaluate(self.def, expr, root, &[], Some(self.deadline)).map_err(|cut| {
            match cut {
                Cut::Quarantined(reason) => Refusal::new(
                    500,
                    format!("definition `{}` is quarantined: {reason}", self.def.name),
                ),
                Cut::Deadline => Refusal::new(
                    500,
                    format!("{}: {what}: resolve deadline exceeded", code::DEADLINE),
                ),
                Cut::Budget(what_ran_out) => Refusal::new(
                    500,
                    format!("{what}: evaluation budget exceeded ({what_ran_out:?})"),
                ),
                Cut::Failed(e) => Refusal::new(500, format!("{what}: {}", echo(&e.to_string()))),
            }
        })
    }

    /// The pod spec of every instance of component `c` (by position; `None` when missing).
    fn specs(&self, root: &Val, c: usize) -> Answer<Vec<Option<Val>>> {
        let comp = &self.def.components[c];
        let (expr, template) = match &comp.spec {
            Some(PodSpecSource::Template(e)) => (e, true),
            Some(PodSpecSource::Spec { spec, .. }) => (spec, false),
            // A fragmented spec has no node claim or references to read.
            _ => return Ok(Vec::new()),
        };
        let out: Vec<Option<Val>> = self
            .eval(&expr.expr, root, &expr.path)?
            .into_iter()
            .map(|v| {
                let spec = if template {
                    crate::expr::value::get(&v, "spec").cloned()
                } else {
                    Some(v)
                };
                spec.filter(|s| !matches!(s, Val::Null))
            })
            .collect();
        Ok(out)
    }

    /// The object whole, as jq reads it (the cached form leaves out containers' `env`
    /// and `envFrom`, which dependencies need).
    fn whole(&self) -> Answer<Val> {
        crate::expr::value::from_json(self.json, Limits::default())
            .map_err(|e| Refusal::new(400, format!("request.object: {e}")))
    }

    /// The pod spec of each instance in `list` (same order).
    fn instance_specs(&self, list: &[Instance]) -> Answer<Vec<Option<Val>>> {
        let root = self.whole()?;
        let mut by_component: BTreeMap<usize, Vec<Option<Val>>> = BTreeMap::new();
        let mut out = Vec::with_capacity(list.len());
        for inst in list {
            if let std::collections::btree_map::Entry::Vacant(e) =
                by_component.entry(inst.component)
            {
                e.insert(self.specs(&root, inst.component)?);
            }
            out.push(
                by_component
                    .get(&inst.component)
                    .and_then(|s| s.get(inst.position).cloned())
                    .flatten(),
            );
        }
        Ok(out)
    }

    fn replica(&self) -> Answer<Response> {
        let prepared = self.prepare(self.root, SPECS)?;
        let list = self.instances(&prepared);
        let total: u64 = list.iter().map(|i| u64::from(i.desired)).sum();
        let replicas = i32::try_from(total).unwrap_or(i32::MAX);
        let specs = kept_specs(&prepared, &list);
        // The instances that run pods (all of them when none does).
        let active: Vec<usize> = {
            let running: Vec<usize> = (0..list.len()).filter(|&i| list[i].desired > 0).collect();
            if running.is_empty() {
                (0..list.len()).collect()
            } else {
                running
            }
        };
        // Per resource, the most any one replica requests: one pod of any kind fits.
        let mut request: BTreeMap<String, i128> = BTreeMap::new();
        for &i in &active {
            for (name, v) in &list[i].per_pod.raw {
                let at = request.entry(name.to_string()).or_default();
                *at = (*at).max(*v);
            }
        }
        let mut requirements = ReplicaRequirements {
            resource_request: quantities(&request),
            ..ReplicaRequirements::default()
        };
        if let Some(spec) = active.first().and_then(|&i| specs[i].as_ref()) {
            requirements.node_claim = pods::node_claim(spec);
            requirements.priority_class_name = pods::priority_class(spec);
        }
        Ok(Response {
            replicas: Some(replicas),
            replica_requirements: (!requirements.is_empty()).then_some(requirements),
            ..Response::default()
        })
    }

    fn components(&self) -> Answer<Response> {
        let prepared = self.prepare(self.root, SPECS)?;
        let list = self.instances(&prepared);
        let specs = kept_specs(&prepared, &list);
        let names = self.names(&list)?;
        let components = list
            .iter()
            .zip(specs)
            .zip(names)
            .map(|((inst, spec), name)| {
                let raw: BTreeMap<String, i128> = inst
                    .per_pod
                    .raw
                    .iter()
                    .map(|(k, v)| (k.to_string(), *v))
                    .collect();
                let mut req = ReplicaRequirements {
                    resource_request: quantities(&raw),
                    ..ReplicaRequirements::default()
                };
                if let Some(spec) = &spec {
                    req.node_claim = pods::node_claim(spec);
                    req.priority_class_name = pods::priority_class(spec);
                }
                Component {
                    name,
                    replicas: i32::try_from(inst.desired).unwrap_or(i32::MAX),
                    replica_requirements: (!req.is_empty()).then_some(req),
                }
            })
            .collect();
        Ok(Response {
            components: Some(components),
            ..Response::default()
        })
    }

    /// Component names: `componentNamePath`, else the instance id, else the component
    /// name; made unique and at most [`MAX_NAME`] characters.
    fn names(&self, list: &[Instance]) -> Answer<Vec<String>> {
        let root = self.root.value();
        let mut given: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (c, comp) in self.def.components.iter().enumerate() {
            if let Some(expr) = &comp.interpreter.name_path {
                let out = self.eval(&expr.expr, &root, "componentNamePath")?;
                given.insert(
                    c,
                    out.iter()
                        .map(|v| match v {
                            Val::Null => String::new(),
                            v => crate::expr::value::to_text(v),
                        })
                        .collect(),
                );
            }
        }
        let mut used = BTreeSet::new();
        let mut out = Vec::with_capacity(list.len());
        for inst in list {
            let comp = &self.def.components[inst.component];
            let name = given
                .get(&inst.component)
                .and_then(|n| n.get(inst.position))
                .filter(|n| !n.is_empty())
                .cloned()
                .unwrap_or_else(|| {
                    if inst.id.is_empty() {
                        comp.name.clone()
                    } else {
                        inst.id.clone()
                    }
                });
            let name = unique(&shorten(&name), &mut used);
            out.push(name);
        }
        Ok(out)
    }

    fn revise(&self, desired: Option<i32>) -> Answer<Response> {
        let Some(desired) = desired.filter(|n| *n >= 0) else {
            return Err(Refusal::new(
                400,
                "ReviseReplica needs request.replicas (a count of 0 or more)",
            ));
        };
        let prepared = self.prepare(self.root, INSTANCES)?;
        let list = self.instances(&prepared);
        // The writable location of each instance, if its component has one.
        let mut paths: BTreeMap<usize, Vec<Vec<Step>>> = BTreeMap::new();
        for (c, comp) in self.def.components.iter().enumerate() {
            if let Some(path) = &comp.interpreter.assign_path {
                let steps = path
                    .locations(self.json)
                    .map_err(|e| Refusal::new(422, format!("replicasAssignPath: {e}")))?;
                paths.insert(c, steps);
            }
        }
        let writable: Vec<(usize, &Vec<Step>)> = list
            .iter()
            .enumerate()
            .filter_map(|(i, inst)| {
                paths
                    .get(&inst.component)
                    .and_then(|p| p.get(inst.position))
                    .map(|p| (i, p))
            })
            .collect();
        let (i, path) = match writable.as_slice() {
            [one] => *one,
            [] if self
                .def
                .components
                .iter()
                .any(|c| c.interpreter.assign_path.is_some()) =>
            {
                // The definition says where counts go, but this object has no such
                // instance (no worker group): nothing can change.
                return Ok(Response::default());
            }
            [] => {
                return Err(Refusal::new(
                    422,
                    format!(
                        "{}: no component declares an assignable replica count \
                         (interpreterDefinition.replicasAssignPath)",
                        self.def.root_kind
                    ),
                ));
            }
            many => {
                return Err(Refusal::new(
                    422,
                    format!(
                        "{}: {} instances have assignable replica counts; one count cannot be \
                         divided among them (schedule by components instead)",
                        self.def.root_kind,
                        many.len()
                    ),
                ));
            }
        };
        let fixed: u64 = list
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, inst)| u64::from(inst.desired))
            .sum();
        let pods = u64::try_from(desired).unwrap_or(0).saturating_sub(fixed);
        let inst = &list[i];
        // Pods per replica of the writable count (a replica may be a group of pods).
        let per_replica = match inst.replicas {
            Some(r) if r > 0 && inst.desired > 0 && inst.desired.is_multiple_of(r as u32) => {
                u64::from(inst.desired / r as u32)
            }
            _ => 1,
        };
        if !pods.is_multiple_of(per_replica) {
            return Err(Refusal::new(
                422,
                format!(
                    "{} pods cannot be written: each replica of `{}` is {per_replica} pods",
                    pods, self.def.components[inst.component].name
                ),
            ));
        }
        let value = pods / per_replica;
        let op = patch::set(self.json, path, Json::from(value))
            .map_err(|e| Refusal::new(422, format!("replicasAssignPath: {e}")))?;
        Ok(with_patch(op.into_iter().collect()))
    }

    /// Retain: a template labelled `resourcetemplate.karmada.io/retain-replicas: "true"`
    /// keeps the member's replica counts (as Karmada's native rule keeps a Deployment's
    /// `spec.replicas`, for every instance the definition has a `replicasAssignPath` for;
    /// a count the member does not have is left as desired). Anything else keeps nothing.
    fn retain(&self, observed: Option<&Json>) -> Answer<Response> {
        let wants = self
            .json
            .pointer("/metadata/labels")
            .and_then(|labels| labels.get(RETAIN_REPLICAS_LABEL))
            .and_then(Json::as_str)
            == Some("true");
        let Some(observed) = observed.filter(|_| wants) else {
            return Ok(Response::default());
        };
        let mut ops = Vec::new();
        for path in self
            .def
            .components
            .iter()
            .filter_map(|c| c.interpreter.assign_path.as_ref())
        {
            let here = path
                .locations(self.json)
                .map_err(|e| Refusal::new(422, format!("replicasAssignPath: {e}")))?;
            for steps in here {
                let at = patch::pointer(&steps);
                let Some(kept) = observed.pointer(&at).filter(|v| v.is_u64()) else {
                    continue;
                };
                if kept.as_u64().is_none_or(|n| n > i32::MAX as u64) {
                    return Err(Refusal::new(
                        422,
                        format!(
                            "observedObject{at}: {} is beyond int32 (at most {}); not retained",
                            echo(&kept.to_string()),
                            i32::MAX
                        ),
                    ));
                }
                let op = patch::set(self.json, &steps, kept.clone())
                    .map_err(|e| Refusal::new(422, format!("replicasAssignPath: {e}")))?;
                ops.extend(op);
            }
        }
        Ok(with_patch(ops))
    }

    fn dependencies(&self) -> Answer<Response> {
        let prepared = self.prepare(self.root, INSTANCES)?;
        let list = self.instances(&prepared);
        let specs = self.instance_specs(&list)?;
        let mut refs = BTreeSet::new();
        for spec in specs.iter().flatten() {
            pods::references(spec, &mut refs);
        }
        Ok(Response {
            dependencies: Some(pods::dependencies(refs, &self.root.meta.namespace)),
            ..Response::default()
        })
    }

    fn aggregate(&self, items: &[super::wire::AggregatedStatusItem]) -> Answer<Response> {
        if items.len() > MAX_MEMBERS {
            return Err(Refusal::new(
                400,
                format!("{} member statuses; at most {MAX_MEMBERS}", items.len()),
            ));
        }
        let statuses: Vec<&Json> = items
            .iter()
            .filter_map(|i| i.status.as_ref())
            .filter(|s| s.is_object())
            .collect();
        if statuses.is_empty() {
            return Ok(Response::default());
        }
        // The bound on what is merged, checked before any work: one linear count.
        let mut total = 0usize;
        for status in &statuses {
            total = total.saturating_add(nodes(status, MAX_MERGED_KEYS + 1));
            if total > MAX_MERGED_KEYS {
                return Err(too_many_keys());
            }
        }
        let mut spend = Spend::new(self.deadline);
        // Each member is judged on the object with its status: the object's size counts
        // once per member.
        let object_size = nodes(self.json, MAX_MERGED_KEYS);
        // The member whose normalized status is least advanced speaks for all.
        let mut worst: Option<(u8, &Json)> = None;
        for status in &statuses {
            spend.work(object_size.saturating_add(nodes(status, MAX_MERGED_KEYS)))?;
            let mut member = self.json.clone();
            if let Some(map) = member.as_object_mut() {
                map.insert("status".to_owned(), (*status).clone());
            }
            let root = parse(&member)?;
            let before = crate::expr::budget::spent();
            let prepared = self.prepare(&root, STATUS)?;
            spend.work(crate::expr::budget::spent().saturating_sub(before) as usize)?;
            let rank = rank(prepared.status().phase);
            if worst.is_none_or(|(r, _)| rank < r) {
                worst = Some((rank, status));
            }
        }
        let Some((_, representative)) = worst else {
            return Ok(Response::default());
        };
        let mut merged = representative.clone();
        if statuses.len() > 1 {
            let others: Vec<&Json> = statuses
                .iter()
                .copied()
                .filter(|s| !std::ptr::eq(*s, representative))
                .collect();
            merge(&mut merged, &others, 0, &mut spend)?;
        }
        if let (Some(map), Some(generation)) = (
            merged.as_object_mut(),
            self.json
                .pointer("/metadata/generation")
                .filter(|g| g.is_i64()),
        ) && map.contains_key("observedGeneration")
        {
            map.insert("observedGeneration".to_owned(), generation.clone());
        }
        let op = patch::set(self.json, &[Step::Key("status".to_owned())], merged)
            .map_err(|e| Refusal::new(500, e.to_string()))?;
        Ok(with_patch(op.into_iter().collect()))
    }
}

/// Most member status entries one AggregateStatus merges (every key of every member's
/// status, at every depth): more is refused (code 400) with this bound named.
pub const MAX_MERGED_KEYS: usize = 262_144;

/// What an AggregateStatus may spend besides its evaluations' own budgets: the deadline,
/// the work budget (`--eval-work`, over the member loop, the members' evaluations and the
/// merge together) and [`MAX_MERGED_KEYS`].
struct Spend {
    deadline: Instant,
    work_left: u64,
    keys_left: usize,
    until_clock: u32,
}

impl Spend {
    fn new(deadline: Instant) -> Spend {
        Spend {
            deadline,
            work_left: crate::expr::budget::configured().work,
            keys_left: MAX_MERGED_KEYS,
            until_clock: 0,
        }
    }

    fn work(&mut self, units: usize) -> Answer<()> {
        let units = units as u64;
        if units > self.work_left {
            return Err(Refusal::new(
                500,
                format!(
                    "{}: AggregateStatus exceeded the evaluation work budget (--eval-work {}) over its members and their merge",
                    code::BUDGET_EXCEEDED,
                    crate::expr::budget::configured().work
                ),
            ));
        }
        self.work_left -= units;
        self.clock()
    }

    fn keys(&mut self, n: usize) -> Answer<()> {
        if n > self.keys_left {
            return Err(too_many_keys());
        }
        self.keys_left -= n;
        self.work(n)
    }

    /// The deadline, read every 64 calls.
    fn clock(&mut self) -> Answer<()> {
        if self.until_clock == 0 {
            self.until_clock = 64;
            if Instant::now() >= self.deadline {
                return Err(Refusal::new(
                    500,
                    format!(
                        "{}: AggregateStatus ran past the resolve deadline",
                        code::DEADLINE
                    ),
                ));
            }
        }
        self.until_clock -= 1;
        Ok(())
    }
}

/// The refusal of statuses beyond [`MAX_MERGED_KEYS`].
fn too_many_keys() -> Refusal {
    Refusal::new(
        400,
        format!(
            "AggregateStatus: the member statuses hold more than {MAX_MERGED_KEYS} keys and values to merge (the bound of one request)"
        ),
    )
}

/// The values of `json` (every array element and object entry, at every depth), counted up
/// to `cap`.
fn nodes(json: &Json, cap: usize) -> usize {
    let mut n = 0usize;
    let mut stack = vec![json];
    while let Some(v) = stack.pop() {
        n += 1;
        if n >= cap {
            return cap;
        }
        match v {
            Json::Array(a) => stack.extend(a),
            Json::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    n
}

/// How deep [`merge`] descends into status objects.
const MERGE_DEPTH: usize = 16;

/// Merges the other members' statuses into the representative's `into`: objects by key
/// (members' keys the representative lacks are added), whole-number counters summed
/// (except `observedGeneration`), everything else kept as the representative has it.
/// Linear: one pass over each member's entries groups their values by key.
fn merge(into: &mut Json, others: &[&Json], depth: usize, spend: &mut Spend) -> Answer<()> {
    let Json::Object(map) = into else {
        return Ok(());
    };
    if depth >= MERGE_DEPTH {
        return Ok(());
    }
    // Each key's values among the others (in member order), keys in first-seen order.
    let mut order: Vec<&str> = Vec::new();
    let mut groups: HashMap<&str, Vec<&Json>> = HashMap::new();
    for other in others {
        let Some(o) = other.as_object() else { continue };
        spend.keys(o.len())?;
        for (k, v) in o {
            match groups.entry(k.as_str()) {
                std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().push(v),
                std::collections::hash_map::Entry::Vacant(e) => {
                    order.push(k.as_str());
                    e.insert(vec![v]);
                }
            }
        }
    }
    let own: Vec<String> = map.keys().cloned().collect();
    for key in own {
        let Some(values) = groups.remove(key.as_str()) else {
            continue;
        };
        let Some(value) = map.get_mut(&key) else {
            continue;
        };
        if value.is_object() {
            let objects: Vec<&Json> = values.into_iter().filter(|v| v.is_object()).collect();
            merge(value, &objects, depth + 1, spend)?;
        } else if key != "observedGeneration"
            && let Some(mut sum) = value.as_i64()
            && values.iter().all(|v| v.is_i64())
        {
            for v in values.iter().filter_map(|v| v.as_i64()) {
                sum = sum.saturating_add(v);
            }
            *value = Json::from(sum);
        }
    }
    // Only other members have it: the first of them gives it, merged with the rest.
    for key in order {
        let Some(values) = groups.remove(key) else {
            continue;
        };
        if let Some((first, rest)) = values.split_first() {
            spend.work(nodes(first, MAX_MERGED_KEYS))?;
            let mut v = (*first).clone();
            merge(&mut v, rest, depth + 1, spend)?;
            map.insert(key.to_owned(), v);
        }
    }
    Ok(())
}

/// The pod specs [`resolve::prepare_with`] kept, for each instance of `list`.
fn kept_specs(prepared: &Prepared, list: &[Instance]) -> Vec<Option<Val>> {
    list.iter()
        .map(|i| prepared.pod_spec(i.component, i.position).cloned())
        .collect()
}

/// Least advanced first: the order in which a member's status speaks for the workload.
fn rank(phase: i32) -> u8 {
    use pb::Phase as P;
    let order = [
        P::Failed,
        P::Degraded,
        P::Initializing,
        P::Suspending,
        P::Resuming,
        P::Suspended,
        P::Running,
        P::Completed,
    ];
    order
        .iter()
        .position(|p| *p as i32 == phase)
        .map_or(order.len() as u8, |i| i as u8)
}

/// A response carrying `ops` as a base64 JSONPatch (none when there is nothing to change).
/// The label of a resource template whose member replica counts Karmada keeps (Retain).
const RETAIN_REPLICAS_LABEL: &str = "resourcetemplate.karmada.io/retain-replicas";

fn with_patch(ops: Vec<Json>) -> Response {
    if ops.is_empty() {
        return Response::default();
    }
    let bytes = serde_json::to_vec(&Json::Array(ops)).unwrap_or_default();
    Response {
        patch: Some(patch::base64(&bytes)),
        patch_type: Some("JSONPatch".to_owned()),
        ..Response::default()
    }
}

/// Milli-unit amounts as Kubernetes quantities (zero amounts left out).
fn quantities(raw: &BTreeMap<String, i128>) -> BTreeMap<String, String> {
    raw.iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| (k.clone(), format_quantity(k, *v)))
        .collect()
}

/// At most [`MAX_NAME`] characters: a longer name keeps its first 23 and a hash of the whole.
fn shorten(name: &str) -> String {
    if name.chars().count() <= MAX_NAME {
        return name.to_owned();
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let head: String = name.chars().take(MAX_NAME - 9).collect();
    format!("{head}-{:08x}", hash as u32)
}

/// `name`, or `name-2`, `name-3`, … (shortened) when taken.
fn unique(name: &str, used: &mut BTreeSet<String>) -> String {
    let mut candidate = name.to_owned();
    let mut n = 2u32;
    while used.contains(&candidate) {
        let suffix = format!("-{n}");
        let head: String = name
            .chars()
            .take(MAX_NAME.saturating_sub(suffix.len()))
            .collect();
        candidate = format!("{head}{suffix}");
        n += 1;
    }
    used.insert(candidate.clone());
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_and_unique() {
        let mut used = BTreeSet::new();
        assert_eq!(unique("worker", &mut used), "worker");
        assert_eq!(unique("worker", &mut used), "worker-2");
        assert_eq!(unique("worker", &mut used), "worker-3");
        let long = "a-very-long-component-instance-name-beyond-karmada";
        let short = shorten(long);
        assert_eq!(short.chars().count(), MAX_NAME);
        assert_ne!(short, shorten(&format!("{long}-2")));
        assert_eq!(shorten("short"), "short");
    }

    #[test]
    fn failed_speaks_before_running_and_unknown_last() {
        assert!(rank(pb::Phase::Failed as i32) < rank(pb::Phase::Running as i32));
        assert!(rank(pb::Phase::Running as i32) < rank(pb::Phase::Completed as i32));
        assert!(rank(pb::Phase::Completed as i32) < rank(pb::Phase::Undefined as i32));
    }
}
