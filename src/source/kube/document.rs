//! Watched objects decoded straight from the API server's JSON into the form the index keeps.
//!
//! kube-rs' `DynamicObject` reads an object twice over (its flattened body is buffered, the
//! typed metadata is then serialized back to JSON), and keeps everything, managed fields and
//! all. A [`Document`] is packed while it is parsed ([`PackSeed`]), keeping only what the
//! index's rule for the kind keeps ([`POD_PROJECTION`] for pods, [`OBJECT_RULE`] otherwise):
//! no JSON tree is built, and what the rule drops is skipped by the parser. The index
//! converts the result as it would the whole object (`Cached::from_parsed`).

use crate::expr::Limits;
use crate::expr::value::{Keep, PackSeed, Parsed};
use crate::model::{OBJECT_RULE, POD_PROJECTION};
use ::kube::api::ApiResource;
use ::kube::core::{DynamicResourceScope, ObjectMeta, Resource};
use serde::de::{self, DeserializeSeed, Deserializer};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// The index's rule for a document type.
pub(super) trait Rule: Clone + fmt::Debug + Send + Sync + 'static {
    /// What is kept.
    const KEEP: &'static Keep;
}

/// Core v1 pods: [`POD_PROJECTION`].
#[derive(Clone, Debug)]
pub(super) struct PodRule;

impl Rule for PodRule {
    const KEEP: &'static Keep = &POD_PROJECTION;
}

/// Every other fully watched kind: [`OBJECT_RULE`].
#[derive(Clone, Debug)]
pub(super) struct ObjectRule;

impl Rule for ObjectRule {
    const KEEP: &'static Keep = &OBJECT_RULE;
}

/// Gang objects (KAI, Workload API, coscheduling PodGroups): metadata and spec only
/// (`crate::gangs::live::GANG_PROJECTION`).
#[derive(Clone, Debug)]
pub(super) struct GangRule;

impl Rule for GangRule {
    const KEEP: &'static Keep = &crate::gangs::live::GANG_PROJECTION;
}

/// What the watcher reads of an object, captured while it is parsed (whether the rule keeps
/// it or not): name, namespace, uid, resource version.
const CAPTURE: &[&[&str]] = &[
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "uid"],
    &["metadata", "resourceVersion"],
];

/// One watched object, packed by `R` while it is parsed. `meta` holds what the watcher
/// reads (the resource version, which the projection may drop, and the object's name).
#[derive(Clone, Debug)]
pub(super) struct Document<R> {
    /// The projected object, packed, without `apiVersion`/`kind` when the server left them
    /// out (see [`Document::into_parsed`]).
    parsed: Parsed,
    meta: ObjectMeta,
    rule: PhantomData<R>,
}

impl<R> Document<R> {
    /// The packed object with the watched kind's `apiVersion` and `kind` (list items of
    /// built-in kinds come without them).
    pub fn into_parsed(self, ar: &ApiResource) -> Parsed {
        let mut parsed = self.parsed;
        parsed.packed = parsed
            .packed
            .with_strings(&[("apiVersion", &ar.api_version), ("kind", &ar.kind)]);
        parsed
    }
}

impl<R: Rule> Resource for Document<R> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl<'de, R: Rule> de::Deserialize<'de> for Document<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut parsed = PackSeed {
            keep: R::KEEP,
            limits: Limits::default(),
            capture: CAPTURE,
        }
        .deserialize(d)?;
        let mut captured = std::mem::take(&mut parsed.captured).into_iter();
        let mut next = || captured.next().flatten();
        let meta = ObjectMeta {
            name: next(),
            namespace: next(),
            uid: next(),
            resource_version: next(),
            ..ObjectMeta::default()
        };
        Ok(Document {
            parsed,
            meta,
            rule: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Limits;
    use crate::model::Cached;
    use serde_json::{Value as Json, json};

    /// The watched kind `kind` of `api_version` (`group/version`, or `version` for core).
    fn resource(api_version: &str, kind: &str) -> ApiResource {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            plural: String::new(),
        }
    }

    /// What the index keeps of `full` when it arrives as a `Document<R>` (the list item as
    /// the API server sends it, without apiVersion/kind) and as the whole object; and what
    /// the document holds, as JSON.
    fn both<R: Rule>(full: &Json) -> (Document<R>, Cached, Cached, Json) {
        let mut item = full.clone();
        if let Some(map) = item.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        let text = |k: &str| full[k].as_str().unwrap_or_default();
        let ar = resource(text("apiVersion"), text("kind"));
        // Packing the whole object first puts its keys in the key table, so both pack to the
        // same bytes when they hold the same (a key is written inline when first seen).
        let _ = Cached::from_json(full, Limits::default());
        let doc: Document<R> = serde_json::from_str(&item.to_string()).unwrap();
        let parsed = doc.clone().into_parsed(&ar);
        let held = parsed.packed.to_json();
        let kept = Cached::from_parsed(parsed, false).unwrap();
        let whole = Cached::from_json(full, Limits::default()).unwrap();
        (doc, kept, whole, held)
    }

    #[test]
    fn a_pod_keeps_what_the_index_keeps_and_its_resource_version() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "a"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{…}", "x": "y"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                     "uid": "j-1", "controller": true}],
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
                "creationTimestamp": "2025-06-01T08:00:00Z"
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "c", "image": "i", "env": [{"name": "SECRET", "value": "s"}],
                                "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "tolerations": [{"key": "k", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "t"}],
                "containerStatuses": [{"name": "c", "ready": true, "restartCount": 1,
                                       "state": {"running": {"startedAt": "t"}}}],
                "podIP": "10.0.0.1"
            }
        });
        let (doc, kept, whole, held) = both::<PodRule>(&pod);
        assert!(kept.same(&whole), "{kept:?}\n{whole:?}");
        let Cached::Pod(p) = &kept else {
            panic!("not a pod: {kept:?}")
        };
        assert_eq!((&*p.node, &*p.phase, p.ready), ("n1", "Running", true));
        assert_eq!(p.meta.owners.len(), 1);
        assert_eq!(doc.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(doc.meta().name.as_deref(), Some("p"));
        assert_eq!(doc.meta().namespace.as_deref(), Some("ns"));
        assert_eq!(doc.meta().uid.as_deref(), Some("u-1"));
        assert_eq!(held["kind"], "Pod");
        assert!(held["metadata"].get("managedFields").is_none());
        assert!(held["metadata"].get("resourceVersion").is_none());
        assert!(held["spec"].get("volumes").is_none());
        assert!(held["spec"]["containers"][0].get("env").is_none());
        assert!(held["status"].get("podIP").is_none());
    }

    #[test]
    fn another_object_keeps_what_the_index_keeps() {
        let job = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {
                "name": "js", "namespace": "ns", "uid": "js-1", "resourceVersion": "7",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{…}"},
                "managedFields": [{"manager": "m"}]
            },
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
                "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "E"}],
                                                     "resources": {"limits": {"cpu": "1"}}}]}}}}}]},
            "status": {"conditions": [{"type": "Completed", "status": "False"}]}
        });
        let (doc, kept, whole, held) = both::<ObjectRule>(&job);
        assert!(kept.same(&whole), "{kept:?}\n{whole:?}");
        assert_eq!(doc.meta().resource_version.as_deref(), Some("7"));
        assert_eq!(held["apiVersion"], "jobset.x-k8s.io/v1alpha2");
        assert!(held["metadata"].get("managedFields").is_none());
        assert_eq!(held["metadata"]["annotations"], json!({}));
    }

    #[test]
    fn odd_shapes_still_parse() {
        // Fields of an unexpected type are kept as they are (the packer decides), nulls and
        // numbers of every kind parse, and a missing metadata gives no resource version.
        let odd = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "u", "labels": null, "resourceVersion": 5},
            "spec": {"containers": "none", "priority": -3, "overhead": {"cpu": 1.5}},
            "status": [1, 2]});
        let (doc, kept, whole, _) = both::<PodRule>(&odd);
        assert!(kept.same(&whole), "{kept:?}\n{whole:?}");
        assert_eq!(doc.meta().resource_version, None);
        let none: Document<PodRule> = serde_json::from_str(r#"{"spec": {}}"#).unwrap();
        assert_eq!(none.meta().resource_version, None);
        assert!(serde_json::from_str::<Document<PodRule>>("[1, 2]").is_ok());
    }

    #[test]
    fn an_object_beyond_the_limits_keeps_its_metadata_and_a_problem() {
        let big = "x".repeat(Limits::default().max_bytes + 1);
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "big", "namespace": "ns", "uid": "u-big", "resourceVersion": "9",
                         "annotations": {"a": big}},
            "spec": {"nodeName": "n"}});
        let (doc, kept, whole, _) = both::<PodRule>(&pod);
        assert!(kept.same(&whole), "{kept:?}\n{whole:?}");
        assert_eq!(doc.meta().resource_version.as_deref(), Some("9"));
        let Cached::Pod(p) = &kept else {
            panic!("not a pod: {kept:?}")
        };
        assert!(p.packed.is_empty());
        assert!(p.problem.as_deref().unwrap_or_default().contains("budget"));
        assert_eq!(p.meta.name, "big");
    }

    #[test]
    fn an_object_without_a_name_is_rejected_as_the_whole_object_is() {
        let nameless = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"uid": "u"}});
        let doc: Document<PodRule> = serde_json::from_str(&nameless.to_string()).unwrap();
        let parsed = Cached::from_parsed(doc.into_parsed(&resource("v1", "Pod")), false);
        assert_eq!(
            parsed.unwrap_err(),
            Cached::from_json(&nameless, Limits::default()).unwrap_err()
        );
    }
}
