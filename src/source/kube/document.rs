//! Watched objects decoded straight from the API server's JSON into the part the index keeps.
//!
//! kube-rs' `DynamicObject` reads an object twice over (its flattened body is buffered, the
//! typed metadata is then serialized back to JSON), and keeps everything, managed fields and
//! all. A [`Document`] reads the JSON once, keeping only what the index's rule for the kind
//! keeps ([`POD_PROJECTION`] for pods, [`OBJECT_RULE`] otherwise): what the rule drops is
//! skipped by the parser without building it. The index applies the same rule again when it
//! packs the document, so the projection here only has to keep at least what that rule
//! keeps (it does: fields are picked by [`Keep::field`], as the packer picks them, and values
//! are kept whole where the packer decides by their content, such as `NoEnv`).

use crate::expr::value::Keep;
use crate::model::{OBJECT_RULE, POD_PROJECTION};
use ::kube::api::ApiResource;
use ::kube::core::{DynamicResourceScope, ObjectMeta, Resource};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value as Json};
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

/// One watched object, projected by `R` while it is parsed. `meta` holds what the watcher
/// reads (the resource version, which the projection may drop) and the object's name.
#[derive(Clone, Debug)]
pub(super) struct Document<R> {
    /// The projected object, without `apiVersion`/`kind` when the server left them out.
    pub json: Json,
    meta: ObjectMeta,
    rule: PhantomData<R>,
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
        let mut version = None;
        let json = d.deserialize_any(Project {
            keep: R::KEEP,
            version: Some(&mut version),
            level: Level::Top,
        })?;
        let text = |key: &str| {
            json.get("metadata")
                .and_then(|m| m.get(key))
                .and_then(Json::as_str)
                .map(str::to_owned)
        };
        let meta = ObjectMeta {
            name: text("name"),
            namespace: text("namespace"),
            uid: text("uid"),
            resource_version: version,
            ..ObjectMeta::default()
        };
        Ok(Document {
            json,
            meta,
            rule: PhantomData,
        })
    }
}

/// Where a [`Project`] is: the object itself (whose `metadata` holds the resource version),
/// its metadata, or anywhere below.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Top,
    Metadata,
    Below,
}

/// Parses one value, keeping what `keep` keeps (and whole values where it is not sure), and
/// takes `metadata.resourceVersion` into `version` whether kept or not.
struct Project<'a> {
    keep: &'a Keep,
    version: Option<&'a mut Option<String>>,
    level: Level,
}

impl<'de> DeserializeSeed<'de> for Project<'_> {
    type Value = Json;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        match self.keep {
            // Only maps and sequences are projected; any other rule keeps the whole value.
            Keep::Fields(_) | Keep::Shape(..) | Keep::Without(_) | Keep::Each(_) => {
                d.deserialize_any(self)
            }
            _ if self.level != Level::Below => d.deserialize_any(self),
            _ => <Json as de::Deserialize>::deserialize(d),
        }
    }
}

impl<'de> Visitor<'de> for Project<'_> {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Json, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.level == Level::Metadata && key == "resourceVersion" {
                let value: Json = map.next_value()?;
                if let (Some(slot), Json::String(s)) = (self.version.as_deref_mut(), &value) {
                    *slot = Some(s.clone());
                }
                if self.keep.field(&key).is_some() {
                    out.insert(key, value);
                }
                continue;
            }
            match self.keep.field(&key) {
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
                Some(rule) => {
                    let (level, version) = match (self.level, key.as_str()) {
                        (Level::Top, "metadata") => (Level::Metadata, self.version.as_deref_mut()),
                        _ => (Level::Below, None),
                    };
                    let value = map.next_value_seed(Project {
                        keep: rule,
                        version,
                        level,
                    })?;
                    out.insert(key, value);
                }
            }
        }
        Ok(Json::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let item = match self.keep {
            Keep::Each(item) => *item,
            _ => &Keep::All,
        };
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(value) = seq.next_element_seed(Project {
            keep: item,
            version: None,
            level: Level::Below,
        })? {
            out.push(value);
        }
        Ok(Json::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        de::DeserializeSeed::deserialize(self, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Limits;
    use crate::model::Cached;
    use serde_json::json;

    /// What the index keeps of `full` when it arrives as a `Document<R>` (the list item as
    /// the API server sends it, without apiVersion/kind) and as the whole object.
    fn both<R: Rule>(full: &Json) -> (Document<R>, Cached, Cached) {
        let mut item = full.clone();
        if let Some(map) = item.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        let doc: Document<R> = serde_json::from_str(&item.to_string()).unwrap();
        let mut projected = doc.json.clone();
        for key in ["apiVersion", "kind"] {
            projected[key] = full[key].clone();
        }
        // Packing the whole object first puts its keys in the key table, so both pack to the
        // same bytes when they hold the same (a key is written inline when first seen).
        let _ = Cached::from_json(full, Limits::default());
        let kept = Cached::from_json(&projected, Limits::default()).unwrap();
        let whole = Cached::from_json(full, Limits::default()).unwrap();
        (doc, kept, whole)
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
        let (doc, kept, whole) = both::<PodRule>(&pod);
        assert!(kept.same(&whole), "{kept:?}\n{whole:?}");
        assert_eq!(doc.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(doc.meta().name.as_deref(), Some("p"));
        // Dropped by the parser, not only by the packer.
        assert!(doc.json["metadata"].get("managedFields").is_none());
        assert!(doc.json["spec"].get("volumes").is_none());
        assert!(doc.json["spec"]["containers"][0].get("env").is_none());
        assert!(doc.json["status"].get("podIP").is_none());
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
        let (doc, kept, whole) = both::<ObjectRule>(&job);
        assert!(kept.same(&whole), "{kept:?}\n{whole:?}");
        assert_eq!(doc.meta().resource_version.as_deref(), Some("7"));
        assert!(doc.json["metadata"].get("managedFields").is_none());
        assert_eq!(doc.json["metadata"]["annotations"], json!({}));
    }

    #[test]
    fn odd_shapes_still_parse() {
        // Fields of an unexpected type are kept as they are (the packer decides), nulls and
        // numbers of every kind parse, and a missing metadata gives no resource version.
        let odd = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "uid": "u", "labels": null, "resourceVersion": 5},
            "spec": {"containers": "none", "priority": -3, "overhead": {"cpu": 1.5}},
            "status": [1, 2]});
        let (doc, kept, whole) = both::<PodRule>(&odd);
        assert!(kept.same(&whole), "{kept:?}\n{whole:?}");
        assert_eq!(doc.meta().resource_version, None);
        let none: Document<PodRule> = serde_json::from_str(r#"{"spec": {}}"#).unwrap();
        assert_eq!(none.meta().resource_version, None);
        assert!(serde_json::from_str::<Document<PodRule>>("[1, 2]").is_ok());
    }
}
