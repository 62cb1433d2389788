//! Watched objects as JSON documents for the index and the definition layers.

use ::kube::api::{ApiResource, DynamicObject};
use ::kube::core::PartialObjectMeta;
use serde_json::Value as Json;

/// The index identity of an object: its uid, or the stand-in the index derives without one.
pub(super) fn identity(json: &Json) -> String {
    let s = |p: &str| json.pointer(p).and_then(Json::as_str).unwrap_or_default();
    let uid = s("/metadata/uid");
    if !uid.is_empty() {
        return uid.to_owned();
    }
    let (ns, name) = (s("/metadata/namespace"), s("/metadata/name"));
    let key = if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    };
    format!("{}:{}:{key}", s("/apiVersion"), s("/kind"))
}

/// Converts a watched object (full or metadata-only) to JSON with the watched kind's
/// `apiVersion`/`kind` (metadata-only objects arrive as `meta.k8s.io/v1`
/// `PartialObjectMetadata`). What is never cached (managed fields, container environments,
/// …) is left out when the index converts it (`object::OBJECT_RULE`, `POD_PROJECTION`).
pub(super) fn to_json<K: IntoJson>(obj: K, ar: &ApiResource) -> Option<Json> {
    let mut json = match obj.into_json() {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!(kind = %ar.kind, "kubernetes: cannot convert object: {e}");
            return None;
        }
    };
    let map = json.as_object_mut()?;
    for (key, value) in [("apiVersion", &ar.api_version), ("kind", &ar.kind)] {
        map.insert(key.to_owned(), Json::String(value.clone()));
    }
    Some(json)
}

/// A watched object turned into JSON, moving what it already holds as JSON.
pub(super) trait IntoJson {
    fn into_json(self) -> serde_json::Result<Json>;
}

impl IntoJson for DynamicObject {
    fn into_json(self) -> serde_json::Result<Json> {
        // The body is JSON already: only the typed metadata is serialized.
        let mut json = match self.data {
            Json::Object(map) => Json::Object(map),
            _ => Json::Object(serde_json::Map::new()),
        };
        if let Json::Object(map) = &mut json {
            map.insert("metadata".to_owned(), serde_json::to_value(&self.metadata)?);
        }
        Ok(json)
    }
}

impl<R> IntoJson for super::document::Document<R> {
    fn into_json(self) -> serde_json::Result<Json> {
        Ok(self.json)
    }
}

impl IntoJson for PartialObjectMeta<DynamicObject> {
    fn into_json(self) -> serde_json::Result<Json> {
        serde_json::to_value(&self)
    }
}
