//! Karmada's `ResourceInterpreterContext` (`config.karmada.io/v1alpha1`) as serde types, with
//! the JSON names and omissions of Karmada's Go types (`interpretercontext_types.go`,
//! `binding_types.go`). Unknown fields are ignored, as Go's decoder ignores them.

use crate::definition::model::null_default;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// The API version of the context.
pub const API_VERSION: &str = "config.karmada.io/v1alpha1";
/// The kind of the context.
pub const KIND: &str = "ResourceInterpreterContext";

/// The operations, as Karmada names them.
pub const OPERATIONS: [&str; 9] = [
    "InterpretReplica",
    "InterpretComponent",
    "ReviseReplica",
    "InterpretStatus",
    "AggregateStatus",
    "InterpretHealth",
    "InterpretDependency",
    "Retain",
    "Prune",
];

/// A request as Karmada sends it.
#[derive(Debug, Deserialize)]
pub struct Context {
    /// `config.karmada.io/v1alpha1` when set (Karmada sends it).
    #[serde(default, rename = "apiVersion")]
    pub api_version: Option<String>,
    /// `ResourceInterpreterContext` when set.
    #[serde(default)]
    pub kind: Option<String>,
    /// The request.
    pub request: Option<Request>,
}

/// `ResourceInterpreterRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Echoed in the response.
    #[serde(default, deserialize_with = "null_default")]
    pub uid: String,
    /// The object's group, version and kind.
    #[serde(default, deserialize_with = "null_default")]
    pub kind: GroupVersionKind,
    /// The object's name.
    #[serde(default, deserialize_with = "null_default")]
    pub name: String,
    /// The object's namespace.
    #[serde(default, deserialize_with = "null_default")]
    pub namespace: String,
    /// One of [`OPERATIONS`].
    #[serde(default, deserialize_with = "null_default")]
    pub operation: String,
    /// The resource template (or, for status and health, the member cluster's object).
    #[serde(default, deserialize_with = "null_default")]
    pub object: Json,
    /// The member cluster's object (Retain).
    #[serde(default, deserialize_with = "null_default")]
    pub observed_object: Option<Json>,
    /// The desired replica count (ReviseReplica).
    #[serde(default, deserialize_with = "null_default")]
    pub replicas: Option<i32>,
    /// Member statuses (AggregateStatus).
    #[serde(default, deserialize_with = "null_default")]
    pub aggregated_status: Vec<AggregatedStatusItem>,
}

/// `metav1.GroupVersionKind`.
#[derive(Debug, Default, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct GroupVersionKind {
    /// API group (empty: core).
    #[serde(default, deserialize_with = "null_default")]
    pub group: String,
    /// Version.
    #[serde(default, deserialize_with = "null_default")]
    pub version: String,
    /// Kind.
    #[serde(default, deserialize_with = "null_default")]
    pub kind: String,
}

/// `AggregatedStatusItem`: one member cluster's status.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedStatusItem {
    /// The member cluster.
    #[serde(default)]
    pub cluster_name: String,
    /// What InterpretStatus returned for that cluster's object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Json>,
    /// Whether the object was applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub applied: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub applied_message: String,
    /// `Healthy`, `Unhealthy` or `Unknown`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub health: String,
}

/// The answer envelope.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    /// Always [`API_VERSION`].
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// The response.
    pub response: Response,
}

impl Answer {
    /// Wraps `response`.
    pub fn new(response: Response) -> Answer {
        Answer {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            response,
        }
    }
}

/// `ResourceInterpreterResponse`.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// False with `status` when the operation could not be answered.
    pub successful: bool,
    /// Why not (always set when `successful` is false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RequestStatus>,
    /// A JSONPatch, base64-encoded (Go `[]byte`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` whenever `patch` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// InterpretReplica: what one replica needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_requirements: Option<ReplicaRequirements>,
    /// InterpretReplica: the replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// InterpretComponent: the components.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components: Option<Vec<Component>>,
    /// InterpretDependency: the objects it depends on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Vec<Dependency>>,
    /// InterpretStatus: the status to collect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_status: Option<Json>,
    /// InterpretHealth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
}

/// `RequestStatus`.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestStatus {
    /// Why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// An HTTP-like code: 400 bad object or request, 404 no definition, 422 not assignable,
    /// 429 evaluation threads busy, 500 evaluation failed or cut short.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// `ReplicaRequirements` (also `ComponentReplicaRequirements`, which lacks `namespace`).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRequirements {
    /// Where a replica may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<NodeClaim>,
    /// What one replica requests (quantities).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_request: BTreeMap<String, String>,
    /// The object's namespace (InterpretReplica only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The pod template's priority class.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub priority_class_name: String,
}

impl ReplicaRequirements {
    /// True when nothing is set (Karmada omits such requirements).
    pub fn is_empty(&self) -> bool {
        self.node_claim.is_none()
            && self.resource_request.is_empty()
            && self.namespace.is_empty()
            && self.priority_class_name.is_empty()
    }
}

/// `NodeClaim`.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaim {
    /// `requiredDuringSchedulingIgnoredDuringExecution` of the node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_node_affinity: Option<Json>,
    /// The pod's node selector.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// The pod's tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Json>,
}

/// `Component`: one pod template's replicas and requirements.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// Unique within the workload, at most 32 characters.
    pub name: String,
    /// Its replicas (pods).
    pub replicas: i32,
    /// What one of them needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_requirements: Option<ReplicaRequirements>,
}

/// `DependentObjectReference`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// `v1`.
    pub api_version: String,
    /// `ConfigMap`, `Secret`, `PersistentVolumeClaim` or `ServiceAccount`.
    pub kind: String,
    /// The workload's namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}
