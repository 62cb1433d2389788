//! Kubernetes objects as kartograf keeps them: the metadata ownership needs, the jq value
//! definitions read (built once per change), and for pods the facts accounting needs.

use crate::definition::GroupVersionKind;
use crate::expr::Limits;
use crate::expr::value::{self, as_array, as_str, get, get_path};
use crate::resolve::resources::{self, Amounts};
use jaq_json::Val;
use serde_json::Value as Json;
use std::sync::Arc;

/// A controller or plain owner reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    /// Owner `apiVersion`.
    pub api_version: String,
    /// Owner kind.
    pub kind: String,
    /// Owner name.
    pub name: String,
    /// Owner uid.
    pub uid: String,
    /// `controller: true`.
    pub controller: bool,
}

impl OwnerRef {
    /// The owner's group/version/kind.
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::from_api_version(&self.api_version, &self.kind)
    }
}

/// The metadata kartograf reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.creationTimestamp`.
    pub created: String,
    /// `metadata.ownerReferences`.
    pub owners: Vec<OwnerRef>,
}

impl ObjectMeta {
    /// Reads metadata from a JSON object. Missing fields are empty; a missing kind, name or
    /// uid is reported.
    pub fn from_json(json: &Json) -> Result<ObjectMeta, String> {
        let text = |v: Option<&Json>| v.and_then(Json::as_str).unwrap_or_default().to_owned();
        let meta = json.get("metadata");
        let field = |k: &str| text(meta.and_then(|m| m.get(k)));
        let owners = meta
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Json::as_array)
            .map(|refs| {
                refs.iter()
                    .map(|r| OwnerRef {
                        api_version: text(r.get("apiVersion")),
                        kind: text(r.get("kind")),
                        name: text(r.get("name")),
                        uid: text(r.get("uid")),
                        controller: r.get("controller").and_then(Json::as_bool).unwrap_or(false),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let out = ObjectMeta {
            api_version: text(json.get("apiVersion")),
            kind: text(json.get("kind")),
            name: field("name"),
            namespace: field("namespace"),
            uid: field("uid"),
            created: field("creationTimestamp"),
            owners,
        };
        if out.kind.is_empty() || out.name.is_empty() {
            return Err("object has no kind or no metadata.name".to_owned());
        }
        Ok(out)
    }

    /// The controller owner reference, if any.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owners.iter().find(|o| o.controller)
    }

    /// The object's group/version/kind.
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::from_api_version(&self.api_version, &self.kind)
    }

    /// `namespace/name` (or `name` when cluster-scoped).
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }

    /// The uid, or a stand-in derived from kind and key when the object has none (manifests
    /// written by hand often omit it).
    pub fn identity(&self) -> String {
        if self.uid.is_empty() {
            format!("{}:{}:{}", self.api_version, self.kind, self.key())
        } else {
            self.uid.clone()
        }
    }
}

/// A workload or intermediate object.
#[derive(Clone, Debug)]
pub struct Object {
    /// Metadata.
    pub meta: ObjectMeta,
    /// The object as a jq value (`null` when it could not be converted; see `problem`).
    pub value: Val,
    /// Why the value is missing, if it is.
    pub problem: Option<String>,
}

impl Object {
    /// Builds an object from JSON. Fails only without kind/name; an object over the size or
    /// depth budget is kept with `problem` set so it still resolves (to a partial graph).
    pub fn from_json(json: &Json, limits: Limits) -> Result<Object, String> {
        let meta = ObjectMeta::from_json(json)?;
        let (value, problem) = match value::from_json(json, limits) {
            Ok(v) => (v, None),
            Err(e) => (Val::Null, Some(e.to_string())),
        };
        Ok(Object {
            meta,
            value,
            problem,
        })
    }
}

/// A pod: its jq value (for selectors) plus what accounting reads, computed once.
#[derive(Clone, Debug)]
pub struct Pod {
    /// Metadata.
    pub meta: ObjectMeta,
    /// The pod as a jq value.
    pub value: Val,
    /// Why the value is missing, if it is.
    pub problem: Option<String>,
    /// `spec.nodeName`.
    pub node: String,
    /// `status.phase`.
    pub phase: String,
    /// Condition `Ready=True`.
    pub ready: bool,
    /// Why the pod is not ready: PodScheduled=False reason, `status.reason` or Ready=False reason.
    pub reason: String,
    /// Effective request of the pod, shared between pods with equal requests.
    pub request: Arc<Amounts>,
    /// Resource quantities that could not be parsed.
    pub bad_quantities: Vec<String>,
    /// Number of DRA resource claims.
    pub resource_claims: usize,
}

/// Pod metadata fields kept by [`project_pod`] (annotations without the `kubectl`
/// last-applied copy).
const POD_META_FIELDS: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
];
/// Pod spec fields kept by [`project_pod`] as they are.
const POD_SPEC_FIELDS: &[&str] = &[
    "nodeName",
    "nodeSelector",
    "schedulerName",
    "priorityClassName",
    "priority",
    "serviceAccountName",
    "restartPolicy",
    "overhead",
    "resources",
    "resourceClaims",
    "schedulingGates",
];
/// Container fields kept by [`project_pod`].
const CONTAINER_FIELDS: &[&str] = &["name", "resources", "restartPolicy"];
/// Pod status fields kept by [`project_pod`] as they are.
const POD_STATUS_FIELDS: &[&str] = &[
    "phase",
    "reason",
    "message",
    "qosClass",
    "nominatedNodeName",
];
/// Pod condition fields kept by [`project_pod`] (no timestamps).
const CONDITION_FIELDS: &[&str] = &["type", "status", "reason", "message"];
/// Container status fields kept by [`project_pod`] (no `state`: it carries timestamps).
const CONTAINER_STATUS_FIELDS: &[&str] = &["name", "ready", "started", "restartCount"];

fn pick(from: &serde_json::Map<String, Json>, keys: &[&str]) -> serde_json::Map<String, Json> {
    keys.iter()
        .filter_map(|k| from.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect()
}

fn pick_each(list: Option<&Json>, keys: &[&str]) -> Option<Json> {
    let items = list?.as_array()?;
    Some(Json::Array(
        items
            .iter()
            .map(|c| match c.as_object() {
                Some(c) => Json::Object(pick(c, keys)),
                None => c.clone(),
            })
            .collect(),
    ))
}

/// The part of a pod that resolution and definitions read: `apiVersion`, `kind`; metadata
/// name, namespace, uid, labels, annotations (without the `kubectl` last-applied copy),
/// owner references, creation and deletion timestamps; the scheduling-relevant spec fields
/// with containers reduced to name, resources and restart policy; phase, reason, message,
/// conditions without timestamps and container readiness without `state`. Everything else
/// (managed fields, resource version, environment, commands, probes, volumes, images,
/// affinity, IPs, start times) is dropped before the pod is cached, so pods of one workload
/// share most of their converted value. Documented in docs/definitions.md.
pub fn project_pod(json: &Json) -> Json {
    let Some(pod) = json.as_object() else {
        return json.clone();
    };
    let mut out = serde_json::Map::new();
    for key in ["apiVersion", "kind"] {
        if let Some(v) = pod.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    if let Some(meta) = pod.get("metadata").and_then(Json::as_object) {
        let mut m = pick(meta, POD_META_FIELDS);
        if let Some(a) = m.get_mut("annotations").and_then(Json::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
        out.insert("metadata".to_owned(), Json::Object(m));
    }
    if let Some(spec) = pod.get("spec").and_then(Json::as_object) {
        let mut s = pick(spec, POD_SPEC_FIELDS);
        for list in ["containers", "initContainers"] {
            if let Some(v) = pick_each(spec.get(list), CONTAINER_FIELDS) {
                s.insert(list.to_owned(), v);
            }
        }
        out.insert("spec".to_owned(), Json::Object(s));
    }
    if let Some(status) = pod.get("status").and_then(Json::as_object) {
        let mut s = pick(status, POD_STATUS_FIELDS);
        if let Some(v) = pick_each(status.get("conditions"), CONDITION_FIELDS) {
            s.insert("conditions".to_owned(), v);
        }
        for list in ["containerStatuses", "initContainerStatuses"] {
            if let Some(v) = pick_each(status.get(list), CONTAINER_STATUS_FIELDS) {
                s.insert(list.to_owned(), v);
            }
        }
        out.insert("status".to_owned(), Json::Object(s));
    }
    Json::Object(out)
}

impl Pod {
    /// Builds a pod from JSON (see [`Object::from_json`] for failure rules), keeping only
    /// its [`project_pod`] projection.
    pub fn from_json(json: &Json, limits: Limits) -> Result<Pod, String> {
        let object = Object::from_json(&project_pod(json), limits)?;
        Ok(Pod::from_object(object))
    }

    /// Derives the pod facts from a converted object.
    pub fn from_object(object: Object) -> Pod {
        let v = &object.value;
        let text = |path: &[&str]| {
            get_path(v, path)
                .and_then(as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let conditions = get_path(v, &["status", "conditions"])
            .map(as_array)
            .unwrap_or_default();
        let condition = |t: &str| {
            conditions
                .iter()
                .find(|c| get(c, "type").and_then(as_str) == Some(t))
        };
        let cond_status = |t: &str| condition(t).and_then(|c| get(c, "status")).and_then(as_str);
        let cond_reason = |t: &str| {
            condition(t)
                .and_then(|c| get(c, "reason"))
                .and_then(as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let ready = cond_status("Ready") == Some("True");
        let reason = if cond_status("PodScheduled") == Some("False") {
            cond_reason("PodScheduled")
        } else if !text(&["status", "reason"]).is_empty() {
            text(&["status", "reason"])
        } else if !ready && cond_status("Ready") == Some("False") {
            cond_reason("Ready")
        } else {
            String::new()
        };
        let mut bad = Vec::new();
        let request = resources::pod_amounts(v, &mut bad);
        let resource_claims = get_path(v, &["spec", "resourceClaims"])
            .map(|c| as_array(c).len())
            .unwrap_or(0);
        let node = text(&["spec", "nodeName"]);
        let phase = text(&["status", "phase"]);
        Pod {
            node,
            phase,
            ready,
            reason,
            request: resources::shared(request),
            bad_quantities: bad,
            resource_claims,
            meta: object.meta,
            value: object.value,
            problem: object.problem,
        }
    }

    /// The pod as the graph lists it.
    pub fn info(&self) -> crate::proto::v1::PodInfo {
        crate::proto::v1::PodInfo {
            name: self.meta.name.clone(),
            uid: self.meta.uid.clone(),
            node: self.node.clone(),
            phase: self.phase.clone(),
            ready: self.ready,
            resources: Some(self.request.to_proto()),
            reason: self.reason.clone(),
        }
    }

    /// Succeeded or Failed.
    pub fn terminal(&self) -> bool {
        matches!(self.phase.as_str(), "Succeeded" | "Failed")
    }

    /// Holds resources now: bound to a node and not terminal.
    pub fn holds_resources(&self) -> bool {
        !self.node.is_empty() && !self.terminal()
    }
}
