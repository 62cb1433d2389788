//! Kubernetes objects as kartograf keeps them: the metadata ownership needs, the jq value
//! definitions read (built once per change), and for pods the facts accounting needs.

use crate::definition::GroupVersionKind;
use crate::expr::Limits;
use crate::expr::value::{self, Doc, Keep, PackSeed, Packed, Parsed};
use crate::model::resources::{self, Request};
use crate::model::{Memo, Skip};
use jaq_json::Val;
use serde::de::DeserializeSeed;
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
    /// `metadata.uid` (shared with the index's key for the object).
    pub uid: Arc<str>,
    /// `metadata.creationTimestamp`.
    pub created: String,
    /// `metadata.ownerReferences`.
    pub owners: Vec<OwnerRef>,
}

impl ObjectMeta {
    /// Reads metadata from a JSON object. Missing fields are empty; a missing kind or name
    /// is reported.
    pub fn from_json(json: &Json) -> Result<ObjectMeta, Skip> {
        ObjectMeta::read(json)
    }

    /// Reads metadata from a packed object, as [`ObjectMeta::from_json`] does.
    pub fn from_packed(packed: &Packed) -> Result<ObjectMeta, Skip> {
        packed.with_node(|root| ObjectMeta::read(root))
    }

    /// The one metadata reader, for any [`Doc`] (parsed JSON, a packed object).
    fn read<'a, D: Doc<'a>>(root: D) -> Result<ObjectMeta, Skip> {
        let text = |of: Option<D>, key: &str| {
            of.and_then(|o| o.get(key)?.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let meta = root.get("metadata");
        // Allocated at its length (`collect` would make room for at least four): the list is
        // kept for every cached object.
        let refs = meta.and_then(|m| m.get("ownerReferences"));
        let mut owners = Vec::with_capacity(refs.map_or(0, |r| r.items().size_hint().0));
        owners.extend(refs.into_iter().flat_map(Doc::items).map(|r| OwnerRef {
            api_version: text(Some(r), "apiVersion"),
            kind: text(Some(r), "kind"),
            name: text(Some(r), "name"),
            uid: text(Some(r), "uid"),
            controller: r.get("controller").is_some_and(Doc::is_true),
        }));
        let out = ObjectMeta {
            api_version: text(Some(root), "apiVersion"),
            kind: text(Some(root), "kind"),
            name: text(meta, "name"),
            namespace: text(meta, "namespace"),
            uid: Arc::from(
                meta.and_then(|m| m.get("uid")?.as_str())
                    .unwrap_or_default(),
            ),
            created: text(meta, "creationTimestamp"),
            owners,
        };
        if out.kind.is_empty() || out.name.is_empty() {
            return Err(Skip::NoKindOrName);
        }
        Ok(out.gang_owner())
    }

    /// A scheduler's gang object ([`is_gang_object`]) with one owner reference and no
    /// controller: that owner is its controller (KAI's pod-grouper leaves `controller` unset
    /// on the reference to the workload), so it joins the workload's owner tree.
    fn gang_owner(mut self) -> ObjectMeta {
        if let [only] = self.owners.as_mut_slice()
            && !only.controller
            && is_gang_object(&self.api_version, &self.kind)
        {
            only.controller = true;
        }
        self
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
        identity(
            &self.uid,
            &self.api_version,
            &self.kind,
            &self.namespace,
            &self.name,
        )
    }
}

/// The index identity of an object: its uid, or (without one) a stand-in derived from
/// `apiVersion`, kind and `namespace/name` (see [`ObjectMeta::identity`]).
pub fn identity(uid: &str, api_version: &str, kind: &str, namespace: &str, name: &str) -> String {
    match (uid, namespace) {
        ("", "") => format!("{api_version}:{kind}:{name}"),
        ("", ns) => format!("{api_version}:{kind}:{ns}/{name}"),
        (uid, _) => uid.to_owned(),
    }
}

/// Whether an object of this type is cached as a [`Pod`] (core `v1` kind `Pod`).
fn is_pod(api_version: &str, kind: &str) -> bool {
    kind == "Pod" && api_version == "v1"
}

/// An object or a pod, converted for the cache (pods are recognised by `v1` kind `Pod`).
#[derive(Clone, Debug)]
pub enum Cached {
    /// Any object but a pod.
    Object(Arc<Object>),
    /// A pod.
    Pod(Arc<Pod>),
}

impl Cached {
    /// True when both are the same object with the same packed bytes (what the index
    /// stores). Conservative: a key the process-wide key table learned between the two
    /// conversions is inline in the older one, so equal content may read as not the same
    /// (one needless update), never the other way round. Tests comparing two conversions
    /// use [`Cached::same_content`].
    pub fn same(&self, other: &Cached) -> bool {
        match (self, other) {
            (Cached::Object(a), Cached::Object(b)) => {
                a.meta == b.meta && a.packed == b.packed && a.problem == b.problem
            }
            (Cached::Pod(a), Cached::Pod(b)) => {
                a.meta == b.meta && a.packed == b.packed && a.problem == b.problem
            }
            _ => false,
        }
    }

    /// True when both have the same metadata, problem and content, however their keys
    /// were packed (see [`Cached::same`]).
    #[cfg(test)]
    pub(crate) fn same_content(&self, other: &Cached) -> bool {
        match (self, other) {
            (Cached::Object(a), Cached::Object(b)) => {
                a.meta == b.meta
                    && a.problem == b.problem
                    && a.packed.to_json() == b.packed.to_json()
            }
            (Cached::Pod(a), Cached::Pod(b)) => {
                a.meta == b.meta
                    && a.problem == b.problem
                    && a.packed.to_json() == b.packed.to_json()
            }
            _ => false,
        }
    }

    /// Converts a document (see [`Object::from_json`] and [`Pod::from_json`]).
    pub fn from_json(json: &Json, limits: Limits) -> Result<Cached, Skip> {
        Cached::convert(json, limits, false)
    }

    /// Like [`Cached::from_json`]; a pod also keeps its unpacked value for its first
    /// resolution (see `Pod::convert`).
    pub(crate) fn from_json_keeping_value(json: &Json, limits: Limits) -> Result<Cached, Skip> {
        Cached::convert(json, limits, true)
    }

    fn convert(json: &Json, limits: Limits, keep: bool) -> Result<Cached, Skip> {
        let text = |key: &str| json.get(key).and_then(Json::as_str).unwrap_or_default();
        Ok(if is_pod(text("apiVersion"), text("kind")) {
            Cached::Pod(Arc::new(Pod::convert(json, limits, keep)?))
        } else {
            Cached::Object(Arc::new(Object::from_json(json, limits)?))
        })
    }

    /// Converts a document packed while it was parsed (with [`POD_PROJECTION`] for a pod,
    /// [`OBJECT_RULE`] otherwise; see [`Parsed`]): the same as [`Cached::from_json`] on the
    /// document parsed whole. With `keep`, a pod also keeps its unpacked value (see
    /// [`Cached::from_json_keeping_value`]).
    pub fn from_parsed(parsed: Parsed, keep: bool) -> Result<Cached, Skip> {
        let meta = ObjectMeta::from_packed(&parsed.packed)?;
        let (packed, problem) = match parsed.over {
            None => (parsed.packed, None),
            Some(e) => (Packed::default(), Some(e.to_string())),
        };
        Ok(if is_pod(&meta.api_version, &meta.kind) {
            Cached::Pod(Arc::new(Pod::from_parts(meta, packed, problem, keep)))
        } else {
            Cached::Object(Arc::new(Object {
                meta,
                packed,
                problem,
            }))
        })
    }

    /// Converts one JSON object from its text, packed while it is parsed (no JSON tree is
    /// built): the same as [`Cached::from_json`] on the parsed text. `None` when the text is
    /// not for this: not JSON, a `…List` (whose items are the objects), or not an object
    /// this can read (the caller parses it whole and reports why).
    pub fn from_json_text(text: &str, limits: Limits) -> Option<Cached> {
        let pack = |pod: bool| {
            let keep = if pod { &POD_PROJECTION } else { &OBJECT_RULE };
            let mut parser = serde_json::Deserializer::from_str(text);
            let parsed = PackSeed {
                keep,
                limits,
                capture: &[],
            }
            .deserialize(&mut parser)
            .ok()?;
            parser.end().ok()?;
            Cached::from_parsed(parsed, false).ok()
        };
        // The rule is chosen by a glance at the text; the parsed object decides (an escaped
        // `kind`), and is packed again in the rare case they differ.
        let (api_version, kind) = super::peek::type_of(text);
        if kind.is_some_and(|k| k.ends_with("List")) {
            return None;
        }
        let pod = is_pod(api_version.unwrap_or_default(), kind.unwrap_or_default());
        let cached = pack(pod)?;
        let meta = cached.meta();
        if meta.kind.ends_with("List") {
            return None;
        }
        if matches!(cached, Cached::Pod(_)) == pod {
            Some(cached)
        } else {
            pack(!pod)
        }
    }

    /// Makes the object hold `uid` (the same text, shared) as its `metadata.uid`, when no
    /// one else holds the object yet.
    pub(crate) fn share_uid(&mut self, uid: &Arc<str>) {
        let meta = match self {
            Cached::Object(o) => Arc::get_mut(o).map(|o| &mut o.meta),
            Cached::Pod(p) => Arc::get_mut(p).map(|p| &mut p.meta),
        };
        if let Some(meta) = meta
            && *meta.uid == **uid
        {
            meta.uid = uid.clone();
        }
    }

    /// The metadata.
    pub fn meta(&self) -> &ObjectMeta {
        match self {
            Cached::Object(o) => &o.meta,
            Cached::Pod(p) => &p.meta,
        }
    }
}

/// A workload or intermediate object, packed (see [`Packed`]): definitions evaluate a root
/// when it changes (the index remembers the results per root version), so the value is
/// unpacked then and not kept.
#[derive(Clone, Debug)]
pub struct Object {
    /// Metadata.
    pub meta: ObjectMeta,
    /// The object, packed (empty when it could not be read; see `problem`).
    pub packed: Packed,
    /// Why the value is missing, if it is.
    pub problem: Option<String>,
}

impl Object {
    /// Builds an object from JSON. Fails only without kind/name; an object over the size or
    /// depth budget is kept with `problem` set so it still resolves (to a partial graph).
    pub fn from_json(json: &Json, limits: Limits) -> Result<Object, Skip> {
        let meta = ObjectMeta::from_json(json)?;
        let (packed, problem) = match Packed::pack(json, &OBJECT_RULE, limits) {
            Ok(p) => (p, None),
            Err(e) => (Packed::default(), Some(e.to_string())),
        };
        Ok(Object {
            meta,
            packed,
            problem,
        })
    }

    /// The object as a jq value (unpacked on every call; `null` when unreadable).
    pub fn value(&self) -> Val {
        self.packed.to_val()
    }

    /// `metadata.labels` as (key, text) pairs.
    pub fn labels(&self) -> Vec<(String, String)> {
        self.packed
            .lookup(&["metadata", "labels"])
            .map(|l| {
                value::entries(&l)
                    .map(|(k, v)| (value::to_text(k), value::to_text(v)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A pod: its projection packed (see [`project_pod`]), what accounting reads, computed once,
/// and what evaluations on it gave (remembered per definition, so a pod is unpacked when it
/// arrives and again only when the catalog changes).
#[derive(Clone, Debug)]
pub struct Pod {
    /// Metadata.
    pub meta: ObjectMeta,
    /// The [`project_pod`] projection, packed (empty when it could not be read; see `problem`).
    pub packed: Packed,
    /// Why the value is missing, if it is.
    pub problem: Option<Box<str>>,
    /// `spec.nodeName`.
    pub node: Box<str>,
    /// `status.phase`.
    pub phase: Box<str>,
    /// Condition `Ready=True`.
    pub ready: bool,
    /// Why the pod is not ready: PodScheduled=False reason, `status.reason` or Ready=False reason.
    pub reason: Box<str>,
    /// Effective request of the pod, shared between pods with equal requests.
    pub request: Arc<Request>,
    /// Resource quantities that were not counted (unparseable, negative, out of range).
    pub bad_quantities: Box<[resources::BadQuantity]>,
    /// Number of DRA resource claims.
    pub resource_claims: usize,
    /// Answers of evaluations on this pod (see [`crate::resolve`]).
    pub(crate) memo: Memo,
}

/// The schedulers' gang object kinds, by (API group, the version watched, kind): KAI's
/// `scheduling.run.ai` PodGroup, `scheduling.k8s.io` PodGroup, CompositePodGroup and
/// Workload, coscheduling's `scheduling.x-k8s.io` PodGroup (`crate::gangs` checks all but
/// the Workload, which only links owner chains). Any version is recognised; the one named is
/// what the Kubernetes source watches when the cluster serves it.
pub const GANG_KINDS: [(&str, &str, &str); 5] = [
    ("scheduling.run.ai", "v2alpha2", "PodGroup"),
    ("scheduling.k8s.io", "v1beta1", "PodGroup"),
    ("scheduling.k8s.io", "v1alpha3", "CompositePodGroup"),
    ("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
    ("scheduling.k8s.io", "v1beta1", "Workload"),
];

/// The index in [`GANG_KINDS`] of an object's kind, if it is one of them.
pub fn gang_kind(api_version: &str, kind: &str) -> Option<usize> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    GANG_KINDS
        .iter()
        .position(|(g, _, k)| *g == group && *k == kind)
}

/// Whether an object is a scheduler's gang object or its Workload ([`GANG_KINDS`]).
pub fn is_gang_object(api_version: &str, kind: &str) -> bool {
    gang_kind(api_version, kind).is_some()
}

/// What is kept of an object other than a pod: everything but `metadata.managedFields`,
/// kubectl's `last-applied-configuration` annotation (a copy of the whole applied object, env
/// values included) and the `env`/`envFrom` of containers in embedded pod templates. With
/// [`POD_PROJECTION`] for pods, this is the one rule of what kartograf caches, whatever the
/// source (Kubernetes watches, manifest files, inline objects).
pub const OBJECT_RULE: Keep = Keep::Shape(
    &[
        (
            "metadata",
            Keep::Shape(
                &[
                    ("managedFields", Keep::Drop),
                    (
                        "annotations",
                        Keep::Without(&["kubectl.kubernetes.io/last-applied-configuration"]),
                    ),
                ],
                &Keep::All,
            ),
        ),
        ("spec", Keep::NoEnv),
    ],
    &Keep::All,
);

/// The part of a pod that resolution and definitions read (see [`project_pod`]).
pub const POD_PROJECTION: Keep = Keep::Fields(&[
    ("apiVersion", Keep::All),
    ("kind", Keep::All),
    (
        "metadata",
        Keep::Fields(&[
            ("name", Keep::All),
            ("namespace", Keep::All),
            ("uid", Keep::All),
            ("labels", Keep::All),
            (
                "annotations",
                Keep::Without(&["kubectl.kubernetes.io/last-applied-configuration"]),
            ),
            ("ownerReferences", Keep::All),
            ("creationTimestamp", Keep::All),
            ("deletionTimestamp", Keep::All),
        ]),
    ),
    (
        "spec",
        Keep::Fields(&[
            ("nodeName", Keep::All),
            ("nodeSelector", Keep::All),
            ("schedulerName", Keep::All),
            ("priorityClassName", Keep::All),
            ("priority", Keep::All),
            ("serviceAccountName", Keep::All),
            ("restartPolicy", Keep::All),
            ("overhead", Keep::All),
            ("resources", Keep::All),
            ("resourceClaims", Keep::All),
            ("schedulingGates", Keep::All),
            // The Workload API's link from a pod to its PodGroup (gang verification).
            ("schedulingGroup", Keep::All),
            ("containers", Keep::Each(&CONTAINER)),
            ("initContainers", Keep::Each(&CONTAINER)),
        ]),
    ),
    (
        "status",
        Keep::Fields(&[
            ("phase", Keep::All),
            ("reason", Keep::All),
            ("message", Keep::All),
            ("qosClass", Keep::All),
            ("nominatedNodeName", Keep::All),
            // Conditions without timestamps.
            (
                "conditions",
                Keep::Each(&Keep::Fields(&[
                    ("type", Keep::All),
                    ("status", Keep::All),
                    ("reason", Keep::All),
                    ("message", Keep::All),
                ])),
            ),
            ("containerStatuses", Keep::Each(&CONTAINER_STATUS)),
            ("initContainerStatuses", Keep::Each(&CONTAINER_STATUS)),
        ]),
    ),
]);
/// Container fields kept by [`project_pod`].
const CONTAINER: Keep = Keep::Fields(&[
    ("name", Keep::All),
    ("resources", Keep::All),
    ("restartPolicy", Keep::All),
]);
/// Container status fields kept by [`project_pod`] (no `state`: it carries timestamps).
const CONTAINER_STATUS: Keep = Keep::Fields(&[
    ("name", Keep::All),
    ("ready", Keep::All),
    ("started", Keep::All),
    ("restartCount", Keep::All),
]);

/// The part of a pod that resolution and definitions read: `apiVersion`, `kind`; metadata
/// name, namespace, uid, labels, annotations (without the `kubectl` last-applied copy),
/// owner references, creation and deletion timestamps; the scheduling-relevant spec fields
/// with containers reduced to name, resources and restart policy; phase, reason, message,
/// conditions without timestamps and container readiness without `state`. Everything else
/// (managed fields, resource version, environment, commands, probes, volumes, images,
/// affinity, IPs, start times) is dropped before the pod is cached. Keys come out sorted.
/// Documented in docs/definitions.md. (`null` for a pod beyond the default size budget.)
pub fn project_pod(json: &Json) -> Json {
    Packed::pack(json, &POD_PROJECTION, Limits::default())
        .map(|p| p.to_json())
        .unwrap_or(Json::Null)
}

/// What accounting reads of a pod, once, when it is cached.
struct PodFacts {
    node: String,
    phase: String,
    ready: bool,
    reason: String,
    request: resources::Amounts,
    bad_quantities: Vec<resources::BadQuantity>,
    resource_claims: usize,
}

impl PodFacts {
    /// Reads the facts, walking to each field once.
    fn read<'a, D: Doc<'a>>(pod: D) -> PodFacts {
        // One pass over the pod's fields (each `get` would step over the ones before).
        let (mut metadata, mut spec, mut status) = (None, None, None);
        for (key, value) in pod.entries() {
            match key {
                b"metadata" => metadata = Some(value),
                b"spec" => spec = Some(value),
                b"status" => status = Some(value),
                _ => {}
            }
        }
        let text = |of: Option<D>, key: &str| of.and_then(|o| o.get(key)?.as_str());
        // The first condition of each type, as (status, reason).
        let (mut ready, mut scheduled) = (None, None);
        for c in status
            .and_then(|s| s.get("conditions"))
            .into_iter()
            .flat_map(Doc::items)
        {
            let slot = match text(Some(c), "type") {
                Some("Ready") => &mut ready,
                Some("PodScheduled") => &mut scheduled,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some((text(Some(c), "status"), text(Some(c), "reason")));
            }
        }
        let status_of = |c: Option<(Option<&'a str>, Option<&'a str>)>| c.and_then(|c| c.0);
        let reason_of = |c: Option<(Option<&'a str>, Option<&'a str>)>| {
            c.and_then(|c| c.1).unwrap_or_default().to_owned()
        };
        let is_ready = status_of(ready) == Some("True");
        let status_reason = text(status, "reason").unwrap_or_default();
        let reason = if status_of(scheduled) == Some("False") {
            reason_of(scheduled)
        } else if !status_reason.is_empty() {
            status_reason.to_owned()
        } else if !is_ready && status_of(ready) == Some("False") {
            reason_of(ready)
        } else {
            String::new()
        };
        let mut bad_quantities = Vec::new();
        let request = resources::Amounts {
            raw: match spec {
                Some(spec) => resources::pod_spec_request(spec, &mut bad_quantities),
                None => Default::default(),
            },
            gpu_fraction: resources::gpu_fraction(metadata.and_then(|m| m.get("annotations"))),
        };
        PodFacts {
            node: text(spec, "nodeName").unwrap_or_default().to_owned(),
            phase: text(status, "phase").unwrap_or_default().to_owned(),
            ready: is_ready,
            reason,
            request,
            bad_quantities,
            resource_claims: spec
                .and_then(|s| s.get("resourceClaims"))
                .map_or(0, |c| c.items().count()),
        }
    }
}

impl Pod {
    /// The value of label `key` (unpacking only that label), when it is a string.
    pub fn label(&self, key: &str) -> Option<String> {
        self.packed
            .lookup(&["metadata", "labels", key])
            .and_then(|v| crate::expr::value::as_str(&v).map(str::to_owned))
    }

    /// Builds a pod from JSON (see [`Object::from_json`] for failure rules), keeping only
    /// its [`project_pod`] projection, packed.
    pub fn from_json(json: &Json, limits: Limits) -> Result<Pod, Skip> {
        Pod::convert(json, limits, false)
    }

    /// [`Pod::from_json`]; with `keep`, the unpacked value is also kept for the pod's first
    /// resolution (which takes it) instead of unpacking twice — for one pod applied at a
    /// time: whoever keeps the pod without resolving it calls `memo.drop_value()`.
    fn convert(json: &Json, limits: Limits, keep: bool) -> Result<Pod, Skip> {
        let meta = ObjectMeta::from_json(json)?;
        let (packed, problem) = match Packed::pack(json, &POD_PROJECTION, limits) {
            Ok(p) => (p, None),
            Err(e) => (Packed::default(), Some(e.to_string())),
        };
        Ok(Pod::from_parts(meta, packed, problem, keep))
    }

    /// A pod from its metadata and packed projection: reads what accounting needs.
    fn from_parts(meta: ObjectMeta, packed: Packed, problem: Option<String>, keep: bool) -> Pod {
        let whole = keep.then(|| packed.to_val());
        // Read in place: the facts are a few fields of spec and status.
        let facts = match &whole {
            Some(v) => PodFacts::read(v),
            None => packed.with_node(|node| PodFacts::read(node)),
        };
        let memo = Memo::default();
        if let Some(v) = whole {
            memo.keep_value(v);
        }
        Pod {
            node: facts.node.into(),
            phase: facts.phase.into(),
            ready: facts.ready,
            reason: facts.reason.into(),
            request: resources::shared(facts.request),
            bad_quantities: facts.bad_quantities.into(),
            resource_claims: facts.resource_claims,
            meta,
            packed,
            problem: problem.map(String::into_boxed_str),
            memo,
        }
    }

    /// The pod as a jq value (unpacked on every call; `null` when unreadable).
    pub fn value(&self) -> Val {
        self.packed.to_val()
    }

    /// How many answers of evaluations on this pod are remembered (see [`crate::resolve`]).
    pub fn remembered(&self) -> usize {
        self.memo.len()
    }

    /// The pod as a workload object (for definitions whose root is a pod).
    pub fn to_object(&self) -> Object {
        Object {
            meta: self.meta.clone(),
            packed: self.packed.clone(),
            problem: self.problem.as_deref().map(str::to_owned),
        }
    }

    /// The pod as the graph lists it.
    pub fn info(&self) -> crate::proto::v1::PodInfo {
        crate::proto::v1::PodInfo {
            name: self.meta.name.clone(),
            uid: self.meta.uid.to_string(),
            node: self.node.to_string(),
            phase: self.phase.to_string(),
            ready: self.ready,
            resources: Some(self.request.proto.clone()),
            reason: self.reason.to_string(),
        }
    }

    /// Succeeded or Failed.
    pub fn terminal(&self) -> bool {
        matches!(&*self.phase, "Succeeded" | "Failed")
    }

    /// Holds resources now: bound to a node and not terminal.
    pub fn holds_resources(&self) -> bool {
        !self.node.is_empty() && !self.terminal()
    }
}

// A pod is cached once per pod: with `Arc`'s two counters it fits mimalloc's 384-byte size
// class (the next one up is 448 bytes, 6.4 MB more at 100k pods).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Pod>() <= 384 - 16);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    /// Converts `json` both ways (from its text, and parsed whole) and checks they agree.
    fn agree(json: &Json, text: &str, limits: Limits) -> Cached {
        // Packing once first puts the keys in the key table, so both write them as ids.
        let _ = Cached::from_json(json, limits);
        let whole = Cached::from_json(json, limits).expect("converts parsed whole");
        let packed = Cached::from_json_text(text, limits).expect("converts from its text");
        assert!(
            packed.same(&whole),
            "{text}: from text {packed:?}\nparsed whole {whole:?}"
        );
        packed
    }

    #[test]
    fn an_object_converted_from_its_text_is_the_object_parsed_whole() {
        let mut docs = Vec::new();
        let walk = crate::folder::walk(Path::new("examples/cluster"), crate::folder::is_manifest);
        for (file, _) in walk.files {
            let text = std::fs::read_to_string(&file).unwrap();
            docs.extend(crate::manifest::parse_documents(&text).unwrap());
        }
        assert!(docs.len() > 50, "{} documents", docs.len());
        let mut pods = 0;
        for doc in &docs {
            // Compact, and pretty with `kind` and `apiVersion` last (so the glance misses them).
            let mut late = serde_json::Map::new();
            for (k, v) in doc.as_object().unwrap() {
                if k != "kind" && k != "apiVersion" {
                    late.insert(k.clone(), v.clone());
                }
            }
            let mut text = serde_json::to_string_pretty(&Json::Object(late)).unwrap();
            text.truncate(text.trim_end().len() - 1);
            text.push_str(&format!(
                ",\n\"kind\": {},\n\"apiVersion\": {}\n}}",
                doc["kind"], doc["apiVersion"]
            ));
            for text in [doc.to_string(), text] {
                if let Cached::Pod(_) = agree(doc, &text, Limits::default()) {
                    pods += 1;
                }
            }
        }
        assert!(pods > 20, "{pods} pods");
    }

    #[test]
    fn duplicate_keys_are_left_to_the_whole_parse_and_escaped_type_fields_decide() {
        let pod = |kind: &str| {
            format!(
                r#"{{"kind": "Pod", "apiVersion": "v1", "kind": {kind},
                "metadata": {{"name": "p", "uid": "u"}},
                "spec": {{"containers": [{{"name": "c", "env": [{{"name": "E", "value": "x"}}]}}]}}}}"#
            )
        };
        // A duplicate key fails the packed parse; the whole parse refuses it too, naming it.
        let text = pod(r#""Deployment""#);
        assert!(Cached::from_json_text(&text, Limits::default()).is_none());
        let e = crate::manifest::parse_documents(&text)
            .expect_err("duplicate `kind`")
            .to_string();
        assert!(e.contains("duplicate") && e.contains("kind"), "{e}");
        // Also below the top, among kept fields.
        let text = r#"{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "uid": "u",
            "labels": {"a": "1", "a": "2"}}}"#;
        assert!(Cached::from_json_text(text, Limits::default()).is_none());
        // An escaped type field is read as what it says.
        let text = r#"{"kind": "P\u006fd", "apiVersion": "v1",
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "c", "env": [{"name": "E", "value": "x"}]}]}}"#;
        let again = agree(
            &serde_json::from_str(text).unwrap(),
            text,
            Limits::default(),
        );
        assert!(matches!(again, Cached::Pod(_)), "{again:?}");
        // Beyond the limits: kept with the same problem.
        let limits = Limits {
            max_bytes: 64,
            ..Limits::default()
        };
        let big = agree(&serde_json::from_str(text).unwrap(), text, limits);
        assert!(
            matches!(&big, Cached::Pod(p) if p.problem.is_some()),
            "{big:?}"
        );
    }

    #[test]
    fn what_is_not_one_readable_object_is_left_to_a_whole_parse() {
        let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"name": "l"},
            "items": [{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}}]});
        let late_list =
            r#"{"kind": "Pod", "metadata": {"name": "l"}, "kind": "PodList", "items": []}"#;
        for text in [
            list.to_string(),
            late_list.to_owned(),
            r#"{"kind": "Pod", "apiVersion": "v1"}"#.to_owned(),
            r#"{"kind": "Pod", "metadata": {"name": "p"}} {"#.to_owned(),
            r#"{"kind": "Pod", "metadata": {"name": "p"#.to_owned(),
            "[]".to_owned(),
            "".to_owned(),
        ] {
            let got = Cached::from_json_text(&text, Limits::default());
            assert!(got.is_none(), "{text}: {got:?}");
        }
    }
}
