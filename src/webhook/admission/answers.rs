//! The allowing answers every admission route gives (Karta admission, policies at
//! admission), and the JSON Patch that puts labels on an object.

use super::wire::Response;
use crate::definition::assign::Step;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;

/// Admitted unchanged.
pub(crate) fn allow(uid: &str) -> Response {
    Response {
        uid: uid.to_owned(),
        allowed: true,
        ..Response::default()
    }
}

/// Admitted unchanged, with a warning for the client (bounded).
pub(crate) fn allow_warning(uid: &str, warning: String) -> Response {
    let mut warning = format!("kartograf: {warning}");
    crate::excerpt::bound(&mut warning, 512);
    Response {
        uid: uid.to_owned(),
        allowed: true,
        warnings: vec![warning],
        ..Response::default()
    }
}

/// Admitted with `ops` (an RFC 6902 patch), base64 as Go encodes `[]byte`.
pub(crate) fn allow_patch(uid: &str, ops: &Json) -> Response {
    let bytes = serde_json::to_vec(ops).unwrap_or_default();
    Response {
        uid: uid.to_owned(),
        allowed: true,
        patch: Some(base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            bytes,
        )),
        patch_type: Some("JSONPatch".to_owned()),
        ..Response::default()
    }
}

/// The operations that make `object`'s labels hold `labels` (its other labels kept; labels
/// it holds already with the same value left alone; empty when nothing is missing).
pub(crate) fn label_ops(object: &Json, labels: &BTreeMap<&'static str, String>) -> Vec<Json> {
    if labels.is_empty() {
        return Vec::new();
    }
    match object.pointer("/metadata/labels") {
        Some(Json::Object(have)) => labels
            .iter()
            .filter(|(k, v)| have.get(**k).and_then(Json::as_str) != Some(v.as_str()))
            .map(|(k, v)| {
                let at = [
                    Step::Key("metadata".into()),
                    Step::Key("labels".into()),
                    Step::Key((*k).to_owned()),
                ];
                json!({"op": "add", "path": crate::patch::ops::pointer(&at), "value": v})
            })
            .collect(),
        // Absent or null (a non-object is replaced: the API server would refuse it anyway).
        _ => match object.get("metadata") {
            Some(Json::Object(_)) => {
                vec![json!({"op": "add", "path": "/metadata/labels", "value": labels})]
            }
            _ => vec![json!({"op": "add", "path": "/metadata", "value": {"labels": labels}})],
        },
    }
}
