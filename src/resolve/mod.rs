//! Resolution: `(definition, root object, its pods) -> WorkloadGraph`.
//!
//! Pure and synchronous: no I/O, no async runtime, no Kubernetes client. Every jq
//! evaluation error becomes a diagnostic; nothing here panics on input.
//!
//! The steps: status from the root object ([`status`]); the component tree with instances,
//! replica slots, desired counts and pod placement ([`tree`]); gang groups ([`gang`]); then
//! workload totals and unattributed pods.

pub mod diagnostics;
pub mod evaluate;
mod extract;
mod gang;
mod status;
mod tree;

use crate::definition::Definition;
use crate::definition::plan::{Compiled, GangPlan};

use crate::model::resources::{Amounts, BadQuantity, Fault, Name};
use crate::model::{Object, Pod};
use crate::proto::v1 as pb;
use diagnostics::{Diagnostics, ERROR, INFO, WARNING, code};
use jaq_json::Val;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::model::memo::Answer;
use evaluate::{Asked, FILTER, KEY, TYPE, question};

/// What to resolve.
#[derive(Clone, Copy)]
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
    /// What [`prepare`] computed for this definition and root version, if cached.
    pub prepared: Option<&'a Prepared>,
}

/// What the root object alone determines — status and every component's instances, scale
/// and per-pod request — so that a pod change re-resolves without re-evaluating the root.
/// Valid for one definition (catalog generation) and one version of the root object.
#[derive(Debug, Clone)]
pub struct Prepared {
    status: pb::Status,
    specs: Vec<Vec<extract::InstanceSpec>>,
    /// With [`Want::pod_specs`]: each instance's pod spec, by component and instance.
    pod_specs: Vec<Vec<Option<Val>>>,
    diagnostics: Vec<pb::Diagnostic>,
    /// `minMemberPath` results for this root version (see [`MinMemberKey`]).
    min_members: Arc<Mutex<HashMap<MinMemberKey, MinMember>>>,
    /// Resource names the definition counts as whole GPUs for this root version.
    gpu_names: Arc<[Name]>,
}

/// A `minMemberPath` evaluation: the expression (its address in the definition), the gang's
/// key values and, for an expression that reads `$pod`, the pod's uid and a hash of its
/// packed content.
type MinMemberKey = (usize, Vec<String>, Option<(String, u64)>);
/// Its result and the diagnostics it reported.
type MinMember = (Option<u32>, Vec<pb::Diagnostic>);
/// Remembered `minMemberPath` results per root version at most (then forgotten at once).
const MAX_MIN_MEMBERS: usize = 64;

/// What the root object says about one instance of a component (see [`Prepared::instances`]).
#[derive(Debug, Clone, Copy)]
pub struct InstanceView<'a> {
    /// The instance id (empty for a component without `instanceIdPath`).
    pub id: &'a str,
    /// Its scale, as the definition's scale paths read it.
    pub scale: &'a pb::Scale,
    /// What one of its pods requests.
    pub per_pod: &'a Amounts,
    /// Its desired pods across the whole workload.
    pub desired: u32,
}

impl Prepared {
    /// The normalized status of the root.
    pub fn status(&self) -> &pb::Status {
        &self.status
    }

    /// The diagnostics of the evaluation.
    pub fn diagnostics(&self) -> &[pb::Diagnostic] {
        &self.diagnostics
    }

    /// The pod spec (a PodSpec, not a template) of instance `i` of component `c`, when
    /// [`prepare_with`] was asked to keep them and the instance has one.
    pub fn pod_spec(&self, c: usize, i: usize) -> Option<&Val> {
        self.pod_specs.get(c)?.get(i)?.as_ref()
    }

    /// The instances of component `c` (definition order), as the root object alone says.
    pub fn instances(&self, c: usize) -> impl Iterator<Item = InstanceView<'_>> {
        self.specs
            .get(c)
            .into_iter()
            .flatten()
            .map(|s| InstanceView {
                id: &s.id,
                scale: &s.scale,
                per_pod: &s.per_pod,
                desired: s.desired,
            })
    }

    /// Whether an evaluation was cut short (deadline, budget, quarantine): such answers
    /// are not to be remembered, since the next try may complete.
    pub fn is_partial(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| diagnostics::evaluation_cut_short(&d.code))
    }
}

/// What [`prepare_with`] computes besides the components' instances.
#[derive(Debug, Clone, Copy)]
pub struct Want {
    /// The normalized status (skipped: left at its default).
    pub status: bool,
    /// Each instance's pod spec, kept for [`Prepared::pod_spec`].
    pub pod_specs: bool,
}

/// Evaluates everything that depends only on the definition and the root object.
pub fn prepare(definition: &Definition, root: &Object, deadline: Option<Instant>) -> Prepared {
    prepare_with(
        definition,
        root,
        deadline,
        Want {
            status: true,
            pod_specs: false,
        },
    )
}

/// [`prepare`], computing only what `want` asks for besides the instances.
pub fn prepare_with(
    definition: &Definition,
    root: &Object,
    deadline: Option<Instant>,
    want: Want,
) -> Prepared {
    let input = Input {
        definition,
        generation: 0,
        root,
        pods: &[],
        fallback_from: None,
        deadline,
        prepared: None,
    };
    let mut r = Resolver::new(&input);
    r.kept_specs = want.pod_specs.then(Vec::new);
    if let Some(problem) = &root.problem {
        r.diags.push(
            ERROR,
            code::OBJECT_UNREADABLE,
            format!("workload object unreadable: {problem}"),
            "",
            "",
        );
    }
    let status = if want.status {
        r.status()
    } else {
        pb::Status::default()
    };
    r.gpu_names = r.gpu_resource_names().into();
    let specs = (0..definition.components.len())
        .map(|c| r.extract(c))
        .collect();
    Prepared {
        status,
        specs,
        pod_specs: r.kept_specs.take().unwrap_or_default(),
        diagnostics: r.diags.into_vec(),
        min_members: Arc::default(),
        gpu_names: Arc::clone(&r.gpu_names),
    }
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
    let computed;
    let prepared = match input.prepared {
        Some(p) => p,
        None => {
            computed = prepare(input.definition, input.root, input.deadline);
            &computed
        }
    };
    let mut r = Resolver::new(input);
    for d in &prepared.diagnostics {
        r.diags.push_diagnostic(d.clone());
    }
    if let Some(from) = input.fallback_from {
        r.diags.push(
            INFO,
            code::DEFINITION_FALLBACK,
            format!(
                "no definition for {from}; used `{}` for {}",
                input.definition.name, input.definition.root_kind
            ),
            "",
            "",
        );
    }
    for pod in input.pods {
        r.note_pod_problems(pod);
    }
    let status = prepared.status.clone();
    r.gpu_names = Arc::clone(&prepared.gpu_names);
    let root_component = r.build_tree(&prepared.specs);
    let gang = r.gangs();

    let mut pods = pb::PodCounts {
        desired: 0,
        current: 0,
        ready: 0,
    };
    if let Some(root) = root_component.as_ref() {
        let desired = root
            .instances
            .iter()
            .map(|i| u64::from(i.pods.unwrap_or_default().desired))
            .sum::<u64>();
        pods.desired = u32::try_from(desired).unwrap_or_else(|_| {
            r.counts_saturated();
            u32::MAX
        });
    }
    let desired = std::mem::take(&mut r.root_desired);
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
            current.add_with_named_gpus(&pod.request, &r.gpu_names);
        }
        let mut placement = r.claimed[i].clone().unwrap_or_default();
        placement.gang_group = r.pod_gang[i].clone();
        if r.claimed[i].is_none() {
            unattributed.push(tree::pod_info(pod));
            r.diags.push(
                WARNING,
                code::UNATTRIBUTED_POD,
                format!(
                    "pod {} belongs to the workload but no component claims it",
                    pod.meta.name
                ),
                "",
                "",
            );
        }
        placements.insert(pod.meta.identity(), placement);
    }

    let per_pod_fits = prepared
        .specs
        .iter()
        .flatten()
        .all(|spec| spec.per_pod.fits());
    if !(desired.fits() && current.fits() && per_pod_fits) {
        r.diags.push(
            WARNING,
            code::QUANTITY_OUT_OF_RANGE,
            "a resource total exceeds the range of the graph's fields (CPU in int64 \
             milli-units, memory in int64 bytes, any resource 2^63-1 units); such fields \
             hold their maximum",
            "",
            "",
        );
    }

    let def = input.definition;
    let meta = &input.root.meta;
    let workload = pb::Workload {
        r#ref: Some(pb::ObjectRef {
            api_version: meta.api_version.clone(),
            kind: meta.kind.clone(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: meta.uid.to_string(),
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
        totals: Some(pb::Totals {
            desired: Some(desired.to_proto()),
            current: Some(current.to_proto()),
        }),
        gang: Some(gang),
        components: root_component.into_iter().collect(),
        unattributed_pods: unattributed,
        diagnostics: r.diags.into_vec(),
        created: meta.created.clone(),
        // A server sets the root's labels (and its cluster); offline they stay empty.
        labels: Default::default(),
    };
    Resolution {
        workload,
        placements,
    }
}

/// True when `after`, a new version of pod `before`, answers every question `definition`
/// asked of `before` (in catalog `generation`) as `before` did. Resolution reads a pod only
/// through those answers and its accounting facts (node, phase, readiness, reason, request),
/// and asks the same questions when the answers are the same, so a pod change that passes
/// this check and keeps those facts cannot change the workload's graph. The answers are
/// remembered on `after`. False when `before` was not resolved under this definition, when
/// the deadline passes, or when the definition's `minMemberPath` reads `$pod` (not
/// remembered).
pub fn same_answers(
    definition: &Definition,
    generation: u64,
    before: &Pod,
    after: &Pod,
    deadline: Option<Instant>,
) -> bool {
    let owner = (generation, definition.id());
    let Some(asked) = before.memo.answers(owner) else {
        return false;
    };
    let reads_pod = |plan: &Option<Compiled>| plan.as_ref().is_some_and(gang::reads_pod);
    let min_member_reads_pod = match &definition.gang {
        Some(GangPlan::PodGroups(plans)) => plans.iter().any(|p| reads_pod(&p.min_member)),
        Some(GangPlan::PodGroup(plan)) => reads_pod(&plan.min_member),
        None => false,
    };
    if asked.is_empty() || min_member_reads_pod {
        return false;
    }
    let root = Object {
        meta: crate::model::ObjectMeta::default(),
        packed: Default::default(),
        problem: None,
    };
    let pods = [after];
    let input = Input {
        definition,
        generation,
        root: &root,
        pods: &pods,
        fallback_from: None,
        deadline,
        prepared: None,
    };
    let mut r = Resolver::new(&input);
    let was_asked = |q: usize| asked.iter().any(|(a, _, _)| *a == q);
    let mut checked = 0;
    for comp in &definition.components {
        let name = comp.name.as_str();
        if let Some(sel) = &comp.type_selector
            && was_asked(question(sel, TYPE))
        {
            r.ask(
                0,
                question(sel, TYPE),
                sel.key_path.as_ref(),
                name,
                |r, i| tree::type_matches(r, sel, i, name),
            );
            checked += 1;
        }
        for expr in [&comp.instance_selector, &comp.replica_selector]
            .into_iter()
            .flatten()
        {
            if was_asked(question(expr, KEY)) {
                r.pod_key(expr, 0, name);
                checked += 1;
            }
        }
    }
    if let Some(GangPlan::PodGroups(plans)) = &definition.gang {
        for member in plans.iter().flat_map(|p| &p.members) {
            let name = definition.components[member.component].name.as_str();
            for f in &member.filters {
                if was_asked(question(f, FILTER)) {
                    r.filters_pass(std::slice::from_ref(f), 0, name);
                    checked += 1;
                }
            }
            for k in &member.keys {
                if was_asked(question(k, KEY)) {
                    r.pod_key(k, 0, name);
                    checked += 1;
                }
            }
        }
    }
    !r.expired
        && checked == asked.len()
        && asked
            .into_iter()
            .all(|(q, answer, failure)| after.memo.get(owner, q) == Some((answer, failure)))
}

/// Strips a graph to its summary: no component tree, pod lists or gang members.
pub fn summarize(workload: &mut pb::Workload) {
    // Taken, not cleared: a cleared Vec keeps its buffer in the summary.
    drop(std::mem::take(&mut workload.components));
    drop(std::mem::take(&mut workload.unattributed_pods));
    if let Some(gang) = workload.gang.as_mut() {
        fn strip(g: &mut pb::GangGroup) {
            drop(std::mem::take(&mut g.pods));
            g.subgroups.iter_mut().for_each(strip);
        }
        gang.groups.iter_mut().for_each(strip);
    }
}

/// One slot of the tree: a component instance (and replica) under one parent slot.
#[derive(Debug, Clone, Default)]
struct Slot {
    component: usize,
    instance_index: usize,
    instance: String,
    replica: String,
    parent: Option<usize>,
    children: Vec<usize>,
    /// Pods that reached this slot (candidates for it and its children).
    scope: Vec<usize>,
    /// Pods this slot's component claimed here.
    own: Vec<usize>,
    /// Pods claimed here or below.
    members: Vec<usize>,
    own_desired: u32,
    own_min: u32,
    /// Desired pods of this slot and everything below it.
    desired: u32,
    /// Gang minimum of this slot and everything below it.
    min: u32,
    current: u32,
    ready: u32,
    desired_amounts: Amounts,
    current_amounts: Amounts,
}

/// Most instance and replica slots one resolution builds, whatever the workload asks for
/// (and fewer when the evaluation memory budget is smaller: one slot and what is rendered
/// of it take about [`SLOT_BYTES`]). A workload that needs more resolves partially, with a
/// `limit_exceeded` diagnostic.
pub const MAX_SLOTS: usize = 8192;

/// What one slot costs, rendered (the instance, its totals, its gang group), in bytes: the
/// evaluation memory budget divided by this bounds the slots of one resolution.
pub const SLOT_BYTES: u64 = 8 * 1024;

/// How often (in slots) the tree walk reads the clock for the deadline.
const CLOCK_EVERY: u32 = 64;

/// The native work one resolution may still do after its expressions ran: slots it may
/// build, and work units (a slot and each pod it considers cost one each) from the
/// evaluation work budget.
#[derive(Debug)]
struct Native {
    /// The slots one resolution may build.
    limit: usize,
    slots_left: usize,
    work_left: u64,
    since_clock: u32,
    /// Set once a limit refused a slot (every later one is refused too).
    cut: bool,
}

impl Native {
    fn new() -> Native {
        let budget = crate::expr::budget::configured();
        let by_memory = usize::try_from(budget.memory / SLOT_BYTES).unwrap_or(usize::MAX);
        let limit = MAX_SLOTS.min(by_memory).max(1);
        Native {
            limit,
            slots_left: limit,
            work_left: budget.work,
            since_clock: 0,
            cut: false,
        }
    }
}

/// Mutable state of one resolution.
struct Resolver<'a> {
    def: &'a Definition,
    root_object: &'a Object,
    /// The root unpacked, once something evaluates on it.
    root: Option<Val>,
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
    /// Desired resources of the whole workload.
    root_desired: Amounts,
    /// Whose answers the pods' memos hold: (catalog generation, definition id).
    owner: (u64, u64),
    /// The root version's cached evaluation, where `minMemberPath` results are remembered.
    prepared: Option<&'a Prepared>,
    /// Pods unpacked during this resolution (only those with an unanswered question).
    values: Vec<Option<Val>>,
    /// What native work (slots) this resolution may still do.
    native: Native,
    /// The slots of each component (filled when gangs are computed).
    slots_by_component: Vec<Vec<usize>>,
    /// When kept: each component's instances' pod specs, in component order.
    kept_specs: Option<Vec<Vec<Option<Val>>>>,
    /// Resource names the definition counts as whole GPUs (`gpuResourceNamesPath`).
    gpu_names: Arc<[Name]>,
}

impl<'a> Resolver<'a> {
    fn new(input: &'a Input<'a>) -> Self {
        let n = input.pods.len();
        Resolver {
            def: input.definition,
            root_object: input.root,
            root: None,
            pods: input.pods,
            deadline: input.deadline,
            expired: false,
            diags: Diagnostics::default(),
            claimed: vec![None; n],
            pod_gang: vec![String::new(); n],
            slots: Vec::new(),
            pod_slots: vec![Vec::new(); n],
            root_desired: Amounts::default(),
            owner: (input.generation, input.definition.id()),
            values: vec![None; n],
            prepared: input.prepared,
            native: Native::new(),
            slots_by_component: Vec::new(),
            kept_specs: None,
            gpu_names: Arc::from([]),
        }
    }

    /// Whether one more slot, considering `pods` pods, may be built: false (with a
    /// diagnostic, once) when the slot limit, the work budget or the deadline says stop.
    fn room_for_slot(&mut self, pods: usize) -> bool {
        if self.native.cut {
            return false;
        }
        let cost = 1 + pods as u64;
        let why = if self.native.slots_left == 0 {
            Some(format!(
                "the workload needs more than {} instance and replica slots (the most one \
                 resolution builds); the graph is partial: later slots, their pods and \
                 gangs are missing",
                self.slots.len()
            ))
        } else if self.native.work_left < cost {
            Some(format!(
                "building the component tree exceeded the work budget ({} units: slots \
                 and the pods each considers); the graph is partial",
                crate::expr::budget::configured().work
            ))
        } else {
            None
        };
        if let Some(why) = why {
            self.native.cut = true;
            self.diags.push(ERROR, code::LIMIT_EXCEEDED, why, "", "");
            return false;
        }
        self.native.since_clock += 1;
        if self.native.since_clock >= CLOCK_EVERY {
            self.native.since_clock = 0;
            if self.deadline.is_some_and(|d| Instant::now() > d) {
                self.native.cut = true;
                self.expired = true;
                self.diags.push(
                    ERROR,
                    code::DEADLINE,
                    "the resolve deadline passed while the component tree was built; the \
                     graph is partial",
                    "",
                    "",
                );
                return false;
            }
        }
        self.native.slots_left -= 1;
        self.native.work_left -= cost;
        true
    }

    /// Notes that the replicas of `component` were cut to the slots there is room for.
    fn slots_cut(&mut self, component: &str, wanted: usize, room: usize) {
        self.diags.push(
            ERROR,
            code::LIMIT_EXCEEDED,
            format!(
                "{wanted} replicas, but room for {room} replica slots (at most {} slots per \
                 resolution, with what each holds below it); the graph shows the first \
                 {room}: desired counts and totals still count every desired replica, pods \
                 of the others are unattributed",
                self.native.limit
            ),
            component,
            "",
        );
    }

    /// Notes (once) that a pod count reached its field's maximum and stays there.
    fn counts_saturated(&mut self) {
        self.diags.push(
            WARNING,
            code::QUANTITY_OUT_OF_RANGE,
            format!(
                "a pod count exceeds {}, the most the graph can hold; it holds that maximum",
                u32::MAX
            ),
            "",
            "",
        );
    }

    /// One diagnostic per kind of fault among quantities that were not counted (`what`, when
    /// not empty, says whose they are).
    fn report_quantities(&mut self, what: &str, bad: &[BadQuantity], component: &str) {
        for (fault, code, why) in [
            (
                Fault::Unparseable,
                code::BAD_QUANTITY,
                "unparseable quantities ignored",
            ),
            (
                Fault::Negative,
                code::NEGATIVE_QUANTITY,
                "negative quantities not counted",
            ),
            (
                Fault::OutOfRange,
                code::QUANTITY_OUT_OF_RANGE,
                "quantities above 2^63-1 units not counted",
            ),
        ] {
            let texts: Vec<&str> = bad
                .iter()
                .filter(|b| b.fault == fault)
                .map(|b| b.text.as_str())
                .collect();
            if !texts.is_empty() {
                let prefix = if what.is_empty() {
                    String::new()
                } else {
                    format!("{what}: ")
                };
                self.diags.push(
                    WARNING,
                    code,
                    format!("{prefix}{why}: {}", texts.join(", ")),
                    component,
                    "",
                );
            }
        }
    }

    fn note_pod_problems(&mut self, pod: &Pod) {
        if let Some(problem) = &pod.problem {
            self.diags.push(
                WARNING,
                code::OBJECT_UNREADABLE,
                format!("pod {} unreadable: {problem}", pod.meta.name),
                "",
                "",
            );
        }
        if !pod.bad_quantities.is_empty() {
            let what = format!("pod {}", pod.meta.name);
            self.report_quantities(&what, &pod.bad_quantities, "");
        }
        if pod.resource_claims > 0 {
            self.diags.push(
                INFO,
                code::DRA_CLAIMS,
                format!(
                    "pod {} uses {} DRA resource claim(s); devices from claims are not counted",
                    pod.meta.name, pod.resource_claims
                ),
                "",
                "",
            );
        }
    }
}
