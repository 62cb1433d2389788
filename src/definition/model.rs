//! The Karta (`run.ai/v1alpha1`) definition format, as serde types.
//!
//! Field names and shapes follow the upstream CRD `kartas.run.ai`, so any upstream
//! definition loads unchanged. kartograf's optional extensions are marked "Extension" and
//! documented in `docs/definitions.md`. Unknown fields are ignored, as the API server would
//! prune them.

use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// The API version of definitions.
pub const API_VERSION: &str = "run.ai/v1alpha1";
/// The kind of definitions.
pub const KIND: &str = "Karta";

/// One workload definition.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Karta {
    /// Must be `run.ai/v1alpha1`.
    #[serde(default, deserialize_with = "null_default")]
    pub api_version: String,
    /// Must be `Karta`.
    #[serde(default, deserialize_with = "null_default")]
    pub kind: String,
    /// Object metadata; `name` identifies the definition.
    #[serde(default, deserialize_with = "null_default")]
    pub metadata: Metadata,
    /// The definition proper.
    pub spec: KartaSpec,
}

/// The parts of object metadata a definition uses.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Definition name.
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    /// Labels (upstream stamps `run.ai/karta-group|version|kind`).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
}

/// `spec`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KartaSpec {
    /// The component structure.
    pub structure_definition: StructureDefinition,
    /// Gang scheduling instructions.
    #[serde(default, deserialize_with = "null_default")]
    pub optimization_instructions: OptimizationInstructions,
}

/// `spec.structureDefinition`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StructureDefinition {
    /// The workload's own object.
    pub root_component: ComponentDefinition,
    /// Components below the root, each naming its parent in `ownerRef`.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub child_components: Vec<ComponentDefinition>,
    /// Kinds the workload creates that are not components; owner chains pass through them.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub additional_child_kinds: Vec<GroupVersionKind>,
}

/// A Kubernetes group/version/kind. `group` is empty for the core group.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupVersionKind {
    /// API group, empty for core.
    #[serde(default, deserialize_with = "null_default")]
    pub group: String,
    /// API version.
    #[serde(default, deserialize_with = "null_default")]
    pub version: String,
    /// Kind.
    #[serde(default, deserialize_with = "null_default")]
    pub kind: String,
}

impl GroupVersionKind {
    /// Builds a GVK.
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        GroupVersionKind {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// Parses an object's `apiVersion` (`group/version` or `v1`) and kind.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        GroupVersionKind::new(group, version, kind)
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for GroupVersionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

/// One component: the root, a child object kind, or a virtual grouping.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentDefinition {
    /// Unique name.
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    /// The object kind; absent for virtual components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<GroupVersionKind>,
    /// Parent component name (children only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_ref: Option<String>,
    /// Where the pod spec lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_definition: Option<SpecDefinition>,
    /// Replica counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_definition: Option<ScaleDefinition>,
    /// Normalized status (required on the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_definition: Option<StatusDefinition>,
    /// Native suspend/resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend_definition: Option<SuspendDefinition>,
    /// jq on the workload: one output per instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id_path: Option<String>,
    /// How pods map to this component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<PodSelector>,
    /// Extension: what resource interpreters (Karmada's webhook) need beyond the format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter_definition: Option<InterpreterDefinition>,
}

/// Extension `interpreterDefinition` of a component: names and writable replica counts for
/// multi-cluster resource interpreters (see `docs/karmada.md`). Both are jq on the workload,
/// lined up with the component's instances by position, like `scaleDefinition` paths.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InterpreterDefinition {
    /// One name per instance (default: the instance id, or the component name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_name_path: Option<String>,
    /// A jq path expression (as `path(...)` accepts) locating each instance's replica count
    /// where a new count may be written; without it the component's replicas are not
    /// assignable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_assign_path: Option<String>,
}

/// `specDefinition`: one of three shapes.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpecDefinition {
    /// jq to a PodTemplateSpec (`metadata` + `spec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_spec_path: Option<String>,
    /// jq to a bare PodSpec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_spec_path: Option<String>,
    /// jq to ObjectMeta (with `podSpecPath`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_path: Option<String>,
    /// Pod spec pieces scattered over the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragmented_pod_spec_definition: Option<FragmentedPodSpecDefinition>,
    /// Extension: jq to a resource list (name to quantity) per instance that the controller
    /// adds to each pod beyond what the spec shape shows (a device per passthrough GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_resources_path: Option<String>,
    /// Extension: jq to names of resources that count as one whole GPU per unit, in this
    /// workload's templates and pods (device-plugin names such as a GPU's PCI model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_resource_names_path: Option<String>,
}

/// `fragmentedPodSpecDefinition`: each path optional.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct FragmentedPodSpecDefinition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claims_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_affinity_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containers_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_path: Option<String>,
}

/// `scaleDefinition`: jq paths to numbers (or numeric strings).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct ScaleDefinition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas_path: Option<String>,
}

/// `statusDefinition`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusDefinition {
    /// jq to the phase string (first output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_definition: Option<PhaseDefinition>,
    /// jq to the conditions array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions_definition: Option<ConditionsDefinition>,
    /// Matchers per normalized status.
    #[serde(default, deserialize_with = "null_default")]
    pub status_mappings: StatusMappings,
}

/// `phaseDefinition`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct PhaseDefinition {
    /// jq on the workload.
    #[serde(default, deserialize_with = "null_default")]
    pub path: String,
}

/// `conditionsDefinition`, with the CRD's defaults for the field names.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionsDefinition {
    /// jq on the workload yielding an array of condition objects.
    #[serde(default, deserialize_with = "null_default")]
    pub path: String,
    /// Default `type`.
    #[serde(default = "default_type", deserialize_with = "type_field")]
    pub type_field_name: String,
    /// Default `status`.
    #[serde(default = "default_status", deserialize_with = "status_field")]
    pub status_field_name: String,
    /// Default `message`.
    #[serde(default = "default_message", deserialize_with = "message_field")]
    pub message_field_name: String,
    /// Default `reason` (the CRD default; upstream code built in Go leaves it unset).
    #[serde(default = "default_reason", deserialize_with = "reason_field")]
    pub reason_field_name: String,
}

// A field name written as `null` (as Go tooling emits an unset pointer) takes the default.
fn type_field<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(default_type))
}
fn status_field<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(default_status))
}
fn message_field<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(default_message))
}
fn reason_field<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_else(default_reason))
}

fn default_type() -> String {
    "type".into()
}
fn default_status() -> String {
    "status".into()
}
fn default_message() -> String {
    "message".into()
}
fn default_reason() -> String {
    "reason".into()
}

/// `statusMappings`: each a list of OR-ed matchers.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct StatusMappings {
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub initializing: Vec<StatusMatcher>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub running: Vec<StatusMatcher>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub completed: Vec<StatusMatcher>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub failed: Vec<StatusMatcher>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub degraded: Vec<StatusMatcher>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub suspended: Vec<StatusMatcher>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub suspending: Vec<StatusMatcher>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resuming: Vec<StatusMatcher>,
}

/// One matcher: all present parts must hold.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusMatcher {
    /// Equals the extracted phase.
    #[serde(
        default,
        deserialize_with = "scalar_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub by_phase: Option<String>,
    /// Every listed condition must hold.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub by_conditions: Vec<ExpectedCondition>,
    /// A jq expression whose first output, as text, equals `expectedResult`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_expression: Option<ByExpression>,
}

/// A condition a matcher expects.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ExpectedCondition {
    /// Condition type.
    #[serde(rename = "type", default, deserialize_with = "null_default")]
    pub type_: String,
    /// Expected status (`True`, `False`, `Unknown`), if constrained.
    #[serde(
        default,
        deserialize_with = "scalar_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub status: Option<String>,
    /// Expected reason, if constrained.
    #[serde(
        default,
        deserialize_with = "scalar_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub reason: Option<String>,
}

/// `byExpression`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ByExpression {
    /// jq on the workload.
    #[serde(default, deserialize_with = "null_default")]
    pub expression: String,
    /// Expected text of the first output (`true`, a number, a string).
    #[serde(default, deserialize_with = "scalar_string_required")]
    pub expected_result: String,
}

/// `suspendDefinition`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SuspendDefinition {
    /// Assignments that suspend.
    #[serde(default, deserialize_with = "null_default")]
    pub suspend_actions: Vec<SuspendAction>,
    /// Assignments that resume.
    #[serde(default, deserialize_with = "null_default")]
    pub resume_actions: Vec<SuspendAction>,
}

/// One assignment: `value` (JSON-encoded text, or raw JSON in older definitions) at `path`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct SuspendAction {
    /// jq path on the workload.
    #[serde(default, deserialize_with = "null_default")]
    pub path: String,
    /// JSON-encoded value.
    #[serde(default, deserialize_with = "null_default")]
    pub value: serde_json::Value,
}

/// `podSelector`: jq on pods.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSelector {
    /// Decides whether a pod plays this component's role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_type_selector: Option<ComponentTypeSelector>,
    /// Pod to instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_instance_selector: Option<ComponentInstanceSelector>,
    /// Pod to replica key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_selector: Option<ReplicaSelector>,
}

/// `componentTypeSelector`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentTypeSelector {
    /// jq on the pod: existence (no `value`) or equality (with `value`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_path: Option<String>,
    /// Expected value.
    #[serde(
        default,
        deserialize_with = "scalar_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<String>,
    /// Pod labels that must all be present with these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
}

/// `componentInstanceSelector`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentInstanceSelector {
    /// jq on the pod yielding its instance id.
    #[serde(default, deserialize_with = "null_default")]
    pub id_path: String,
}

/// `replicaSelector`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSelector {
    /// jq on the pod yielding its replica key.
    #[serde(default, deserialize_with = "null_default")]
    pub key_path: String,
}

/// `spec.optimizationInstructions`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OptimizationInstructions {
    /// Gang scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_scheduling: Option<GangScheduling>,
}

/// `gangScheduling`: the alpha `podGroups` list and/or the v2 `podGroup`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GangScheduling {
    /// Alpha format: groups formed from pod keys.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pod_groups: Vec<PodGroupDefinition>,
    /// v2 format: one group with per-component subgroups. Preferred when both are present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group: Option<PodGroupV2>,
}

/// One alpha pod group.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupDefinition {
    /// Name of the group definition.
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    /// Member components.
    #[serde(default, deserialize_with = "null_default")]
    pub members: Vec<PodGroupMember>,
    /// Extension: jq on the workload giving each gang's minimum member count. Variables:
    /// `$keys` (the gang's key values) and `$pod` (one member pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member_path: Option<String>,
}

/// An alpha pod-group member.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupMember {
    /// The member component.
    #[serde(default, deserialize_with = "null_default")]
    pub component_name: String,
    /// jq on pods; each must yield one non-empty value; together they name the gang.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub group_by_key_paths: Vec<String>,
    /// jq on pods; all must yield `true`.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub filters: Vec<String>,
}

/// The v2 pod group.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupV2 {
    /// Group name.
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    /// One subgroup per listed component.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub sub_groups: Vec<SubGroup>,
    /// Topology constraint of the whole group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyConstraint>,
    /// Extension: jq on the workload giving the group's minimum member count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member_path: Option<String>,
}

/// A v2 subgroup.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SubGroup {
    /// The component the subgroup covers (with its descendants).
    #[serde(default, deserialize_with = "null_default")]
    pub component_name: String,
    /// Topology constraint of the subgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyConstraint>,
}

/// A topology constraint (kept, not interpreted).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct TopologyConstraint {
    #[serde(default, deserialize_with = "null_default")]
    pub topology_name: String,
    #[serde(default, deserialize_with = "null_default")]
    pub preferred_topology_level: String,
    #[serde(default, deserialize_with = "null_default")]
    pub required_topology_level: String,
}

/// Accepts a string or any scalar (YAML `true`, `0`) as text.
/// `null` reads as the field's default, as Go's decoder leaves a field untouched on `null`:
/// upstream accepts such definitions, so they load here too.
/// Deserializes `null` (or a missing field, with `#[serde(default)]`) as the type's default:
/// what Go's JSON encoding writes for an empty slice, map or pointer.
pub(crate) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn scalar_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(v @ (serde_json::Value::Bool(_) | serde_json::Value::Number(_))) => {
            Ok(Some(v.to_string()))
        }
        Some(other) => Err(serde::de::Error::custom(format!(
            "expected a string, found {}",
            json_type(&other)
        ))),
    }
}

fn scalar_string_required<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(scalar_string(d)?.unwrap_or_default())
}

/// The JSON type name of a value, for messages.
pub fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}
