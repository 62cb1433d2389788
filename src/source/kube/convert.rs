//! Watched objects as the index and the definition layers take them: JSON documents, or
//! documents packed while they were parsed.

use super::document::Document;
use crate::expr::value::Parsed;
use ::kube::api::{ApiResource, DynamicObject};
use ::kube::core::PartialObjectMeta;
use serde_json::Value as Json;

/// A watched object as it came: a JSON document, or packed while parsed (fully watched
/// kinds; see [`Document`]). Both carry the watched kind's `apiVersion`/`kind`.
pub(super) enum Body {
    /// A JSON document.
    Json(Json),
    /// A document packed while parsed.
    Parsed(Parsed),
}

impl Body {
    /// The object as JSON (unpacked when it was packed).
    pub fn into_json(self) -> Json {
        match self {
            Body::Json(json) => json,
            Body::Parsed(parsed) => parsed.packed.to_json(),
        }
    }

    /// The index identity of the object: its uid, or the stand-in the index derives
    /// without one.
    pub fn identity(&self) -> String {
        let s = |path: &[&str]| match self {
            Body::Json(json) => {
                let mut at = Some(json);
                for key in path {
                    at = at.and_then(|v| v.get(key));
                }
                at.and_then(Json::as_str).unwrap_or_default().to_owned()
            }
            Body::Parsed(parsed) => parsed.packed.text(path).unwrap_or_default().to_owned(),
        };
        crate::model::object::identity(
            &s(&["metadata", "uid"]),
            &s(&["apiVersion"]),
            &s(&["kind"]),
            &s(&["metadata", "namespace"]),
            &s(&["metadata", "name"]),
        )
    }
}

/// Converts a watched object (full, packed or metadata-only) to a [`Body`] with the watched
/// kind's `apiVersion`/`kind` (metadata-only objects arrive as `meta.k8s.io/v1`
/// `PartialObjectMetadata`). What is never cached (managed fields, container environments,
/// …) is left out when the index converts it (`object::OBJECT_RULE`, `POD_PROJECTION`).
pub(super) fn to_body<K: IntoBody>(obj: K, ar: &ApiResource) -> Option<Body> {
    let mut json = match obj.into_body(ar) {
        Ok(Body::Json(j)) => j,
        Ok(parsed) => return Some(parsed),
        Err(e) => {
            tracing::warn!(kind = %ar.kind, "kubernetes: cannot convert object: {e}");
            return None;
        }
    };
    let map = json.as_object_mut()?;
    for (key, value) in [("apiVersion", &ar.api_version), ("kind", &ar.kind)] {
        map.insert(key.to_owned(), Json::String(value.clone()));
    }
    Some(Body::Json(json))
}

/// A watched object turned into a [`Body`], moving what it already holds.
pub(super) trait IntoBody {
    fn into_body(self, ar: &ApiResource) -> serde_json::Result<Body>;
}

impl IntoBody for DynamicObject {
    fn into_body(self, _: &ApiResource) -> serde_json::Result<Body> {
        // The body is JSON already: only the typed metadata is serialized.
        let mut json = match self.data {
            Json::Object(map) => Json::Object(map),
            _ => Json::Object(serde_json::Map::new()),
        };
        if let Json::Object(map) = &mut json {
            map.insert("metadata".to_owned(), serde_json::to_value(&self.metadata)?);
        }
        Ok(Body::Json(json))
    }
}

impl<R> IntoBody for Document<R> {
    fn into_body(self, ar: &ApiResource) -> serde_json::Result<Body> {
        Ok(Body::Parsed(self.into_parsed(ar)))
    }
}

impl IntoBody for PartialObjectMeta<DynamicObject> {
    fn into_body(self, _: &ApiResource) -> serde_json::Result<Body> {
        serde_json::to_value(&self).map(Body::Json)
    }
}
