//! The compiled form of a definition — what resolution reads: components with their pod spec
//! source, scale, instance and pod selectors, status plan and gang plan, every expression
//! compiled. Produced by [`super::compile`], immutable afterwards (shared behind `Arc`).

use super::DefinitionError;
use super::breaker::Breaker;
use super::model::*;
use crate::expr::Expr;
use std::collections::BTreeMap;

/// A compiled expression and where it was written.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The compiled expression.
    pub expr: Expr,
    /// YAML path of the field, for diagnostics.
    pub path: String,
}

impl Compiled {
    /// The expression's source text.
    pub fn source(&self) -> &str {
        self.expr.source()
    }
}

/// A validated, compiled definition. Immutable; shared behind `Arc`.
#[derive(Debug)]
pub struct Definition {
    /// Definition name (`metadata.name`, or a slug of the root kind).
    pub name: String,
    /// Where it was loaded from: `embedded`, `directory:<path>`, `cluster`, …
    pub origin: String,
    /// File (or object) it came from.
    pub source: String,
    /// The root component's kind.
    pub root_kind: GroupVersionKind,
    /// The definition as written.
    pub karta: Karta,
    /// Components; index 0 is the root and parents come before their children.
    pub components: Vec<Component>,
    /// Kinds owner chains may pass through besides component kinds.
    pub additional_child_kinds: Vec<GroupVersionKind>,
    /// Gang scheduling plan, if the definition has one.
    pub gang: Option<GangPlan>,
    /// Problems that do not stop the definition from loading (upstream accepts them).
    pub warnings: Vec<DefinitionError>,
    /// How `phase` is chosen among the matched statuses: the annotation
    /// [`PHASE_PRECEDENCE`]; without it kartograf's for the embedded catalog and
    /// the [`super::LoadOptions`]' (`--phase-precedence`) for any other origin.
    pub phase_precedence: PhasePrecedence,
    /// Unique within the process: what answers remembered on pods are keyed by.
    pub(super) id: u64,
    /// Quarantines this version of the definition when its evaluations keep exceeding
    /// their budgets.
    pub(super) breaker: Breaker,
    /// The catalog generation that first published this version (0: not yet).
    pub(super) published: std::sync::atomic::AtomicU64,
}

/// One compiled component.
#[derive(Debug)]
pub struct Component {
    /// Name.
    pub name: String,
    /// Object kind; `None` for virtual components.
    pub kind: Option<GroupVersionKind>,
    /// Parent component index (`None` for the root).
    pub parent: Option<usize>,
    /// Child component indexes, in definition order.
    pub children: Vec<usize>,
    /// Where this component's pod spec lives; `Some` makes it pod-bearing.
    pub spec: Option<PodSpecSource>,
    /// `specDefinition.extendedResourcesPath` (extension): requests added per pod.
    pub extended_resources: Option<Compiled>,
    /// `specDefinition.gpuResourceNamesPath` (extension): resource names counted as GPUs.
    pub gpu_resource_names: Option<Compiled>,
    /// `replicasPath`.
    pub replicas: Option<Compiled>,
    /// `minReplicasPath`.
    pub min_replicas: Option<Compiled>,
    /// `maxReplicasPath`.
    pub max_replicas: Option<Compiled>,
    /// Status plan (the root's is the workload status).
    pub status: Option<StatusPlan>,
    /// `instanceIdPath`.
    pub instance_ids: Option<Compiled>,
    /// `componentTypeSelector`.
    pub type_selector: Option<TypeSelector>,
    /// `componentInstanceSelector.idPath`.
    pub instance_selector: Option<Compiled>,
    /// `replicaSelector.keyPath`.
    pub replica_selector: Option<Compiled>,
    /// `interpreterDefinition` (Karmada's resource interpreter).
    pub interpreter: Interpreter,
    /// YAML path of the component, for diagnostics.
    pub path: String,
}

/// A component's `interpreterDefinition` extension, compiled with the definition.
#[derive(Debug, Default)]
pub struct Interpreter {
    /// `componentNamePath`.
    pub name_path: Option<Compiled>,
    /// `replicasAssignPath`.
    pub assign_path: Option<super::assign::AssignPath>,
}

impl Component {
    /// True when the component declares a pod spec.
    pub fn pod_bearing(&self) -> bool {
        self.spec.is_some()
    }
}

/// The three pod spec shapes.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a handful per definition; boxing buys nothing
pub enum PodSpecSource {
    /// `podTemplateSpecPath`: metadata + spec.
    Template(Compiled),
    /// `podSpecPath` (+ optional `metadataPath`).
    Spec {
        /// The PodSpec.
        spec: Compiled,
        /// The ObjectMeta.
        metadata: Option<Compiled>,
    },
    /// `fragmentedPodSpecDefinition`: the parts resource accounting reads.
    Fragmented {
        /// `resourcesPath`.
        resources: Option<Compiled>,
        /// `containersPath`.
        containers: Option<Compiled>,
        /// `containerPath`.
        container: Option<Compiled>,
        /// `resourceClaimsPath`.
        resource_claims: Option<Compiled>,
        /// `annotationsPath`.
        annotations: Option<Compiled>,
    },
}

impl PodSpecSource {
    /// The expression that finds the pod spec (the template or spec path; of a fragmented
    /// spec, the containers, container or resources path), for diagnostics.
    pub fn primary(&self) -> Option<&Compiled> {
        match self {
            PodSpecSource::Template(e) => Some(e),
            PodSpecSource::Spec { spec, .. } => Some(spec),
            PodSpecSource::Fragmented {
                containers,
                container,
                resources,
                ..
            } => containers
                .as_ref()
                .or(container.as_ref())
                .or(resources.as_ref()),
        }
    }
}

/// Pod type selector.
#[derive(Debug)]
pub struct TypeSelector {
    /// Existence (no value) or equality (with value).
    pub key_path: Option<Compiled>,
    /// Expected value.
    pub value: Option<String>,
    /// Required pod labels.
    pub match_labels: BTreeMap<String, String>,
}

/// The normalized statuses, in upstream evaluation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusKind {
    /// Resuming.
    Resuming,
    /// Suspending.
    Suspending,
    /// Suspended.
    Suspended,
    /// Running.
    Running,
    /// Failed.
    Failed,
    /// Completed.
    Completed,
    /// Initializing.
    Initializing,
    /// Degraded.
    Degraded,
}

/// The annotation of a definition that chooses its [`PhasePrecedence`]: `kartograf` (the
/// default) or `workload-map`.
pub const PHASE_PRECEDENCE: &str = "kartograf.io/phase-precedence";

/// How a workload's single `phase` is chosen among its matched statuses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PhasePrecedence {
    /// kartograf's precedence: Failed > Completed > Suspending > Resuming > Suspended >
    /// Degraded > Running > Initializing (docs/resolution.md §7).
    #[default]
    Kartograf,
    /// Workload Map's: the first matched status in its fixed order (Resuming, Suspending,
    /// Suspended, Running, Failed, Completed, Initializing, Degraded), what a Workload Map
    /// consumer reading `matchedStatuses[0]` shows; for definitions moved from Workload Map.
    WorkloadMap,
}

impl PhasePrecedence {
    /// The precedence an annotation value names (`None`: not one).
    pub fn parse(value: &str) -> Option<PhasePrecedence> {
        match value {
            "kartograf" => Some(PhasePrecedence::Kartograf),
            "workload-map" => Some(PhasePrecedence::WorkloadMap),
            _ => None,
        }
    }
}

/// Compiled status definition.
#[derive(Debug)]
pub struct StatusPlan {
    /// Phase path.
    pub phase: Option<Compiled>,
    /// Conditions path and field names.
    pub conditions: Option<ConditionsPlan>,
    /// Matchers per status, in upstream order.
    pub mappings: Vec<(StatusKind, Vec<MatcherPlan>)>,
}

/// Compiled conditions definition.
#[derive(Debug)]
pub struct ConditionsPlan {
    /// jq to the conditions array.
    pub path: Compiled,
    /// Field holding the type.
    pub type_field: String,
    /// Field holding the status.
    pub status_field: String,
    /// Field holding the message.
    pub message_field: String,
    /// Field holding the reason.
    pub reason_field: String,
}

/// One compiled status matcher.
#[derive(Debug)]
pub struct MatcherPlan {
    /// Expected phase.
    pub by_phase: Option<String>,
    /// Expected conditions.
    pub by_conditions: Vec<ExpectedCondition>,
    /// Expression and expected text.
    pub by_expression: Option<(Compiled, String)>,
}

/// Compiled gang instructions.
#[derive(Debug)]
pub enum GangPlan {
    /// Alpha format.
    PodGroups(Vec<PodGroupPlan>),
    /// v2 format.
    PodGroup(PodGroupV2Plan),
}

/// Compiled alpha pod group.
#[derive(Debug)]
pub struct PodGroupPlan {
    /// Group definition name.
    pub name: String,
    /// Members.
    pub members: Vec<MemberPlan>,
    /// Extension: minimum member count (variables `$keys`, `$pod`).
    pub min_member: Option<Compiled>,
}

/// Compiled alpha member.
#[derive(Debug)]
pub struct MemberPlan {
    /// Member component index.
    pub component: usize,
    /// Grouping keys (jq on pods).
    pub keys: Vec<Compiled>,
    /// Filters (jq on pods).
    pub filters: Vec<Compiled>,
}

/// Compiled v2 pod group.
#[derive(Debug)]
pub struct PodGroupV2Plan {
    /// Group name.
    pub name: String,
    /// Subgroup component indexes.
    pub subgroups: Vec<usize>,
    /// Extension: minimum member count.
    pub min_member: Option<Compiled>,
}

impl Definition {
    /// The catalog generation that first published this version of the definition (0 when
    /// none has): what graphs name as the definition's generation, so a catalog change that
    /// leaves this definition alone changes nothing in its graphs.
    pub fn generation(&self) -> u64 {
        self.published.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records the generation of the first catalog that holds this version.
    pub(crate) fn published_in(&self, generation: u64) {
        let _ = self.published.compare_exchange(
            0,
            generation,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The definition's circuit breaker (see [`crate::definition::breaker`]).
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// A number no other definition compiled by this process has.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The root component.
    pub fn root(&self) -> &Component {
        &self.components[0]
    }

    /// Every kind an owner chain of this workload may pass through (component kinds and
    /// `additionalChildKinds`), root excluded.
    pub fn child_kinds(&self) -> impl Iterator<Item = &GroupVersionKind> {
        self.components
            .iter()
            .skip(1)
            .filter_map(|c| c.kind.as_ref())
            .chain(self.additional_child_kinds.iter())
    }

    /// Index of the component named `name`.
    pub fn component_index(&self, name: &str) -> Option<usize> {
        self.components.iter().position(|c| c.name == name)
    }

    /// Number of pod-bearing components.
    pub fn pod_bearing_count(&self) -> usize {
        self.components.iter().filter(|c| c.pod_bearing()).count()
    }
}
