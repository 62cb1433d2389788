//! `POST /mutate/pods`: a pod being created gets [`super::labels`] naming its workload,
//! component and replica, found through its controller chain in the server's cache
//! ([`crate::server::Store::place_new_pod`]). Synchronous, on an evaluation thread.

use super::labels::for_pod;
use super::{allow, allow_patch, allow_warning, gvk, object};
use crate::board::NewPod;
use crate::model::Pod;
use crate::policy::Live;
use crate::server::Store;
use crate::webhook::admission::wire::{Head, Response};
use serde_json::{Value as Json, json};
use std::sync::atomic::Ordering;

/// Answers one review (always allowing).
pub fn answer(head: &Head, body: &[u8], store: &dyn Store, policies: &Live) -> Response {
    let uid = head.uid.as_str();
    let counters = &policies.counters;
    let unlabelled = || counters.pods_unlabelled.fetch_add(1, Ordering::Relaxed);
    if head.operation != "CREATE" {
        return allow(uid);
    }
    if gvk(head) != Some(("", "v1", "Pod")) {
        unlabelled();
        return allow_warning(uid, "this route labels core v1 Pods only".to_owned());
    }
    let mut pod = match object(body) {
        Ok(o) => o,
        Err(why) => {
            unlabelled();
            return allow_warning(uid, why);
        }
    };
    // On a create the namespace is the request's; the object may not carry it yet.
    let namespace = head.namespace.clone().unwrap_or_default();
    // Created by a controller, a pod has only `generateName` yet: named for the model (not
    // in the patch) so that it can be read like any cached pod.
    if let Some(meta) = pod.get_mut("metadata").and_then(Json::as_object_mut) {
        meta.insert("namespace".into(), Json::String(namespace));
        let unnamed = meta
            .get("name")
            .and_then(Json::as_str)
            .is_none_or(str::is_empty);
        if unnamed {
            let generated = meta
                .get("generateName")
                .and_then(Json::as_str)
                .filter(|g| !g.is_empty())
                .map_or_else(
                    || "pod-at-admission".to_owned(),
                    |g| format!("{g}at-admission"),
                );
            meta.insert("name".into(), Json::String(generated));
        }
    }
    let model = match Pod::from_json(&pod, crate::expr::Limits::default()) {
        Ok(p) => p,
        Err(why) => {
            unlabelled();
            return allow_warning(uid, format!("the pod could not be read: {why}"));
        }
    };
    let place = store.place_new_pod(&model);
    match &place {
        NewPod::Placed { .. } => counters.pods_labelled.fetch_add(1, Ordering::Relaxed),
        NewPod::OwnerNotCached { .. } => counters
            .pods_owner_not_cached
            .fetch_add(1, Ordering::Relaxed),
        NewPod::None => unlabelled(),
    };
    let labels = for_pod(&place);
    let ops = label_ops(&pod, &labels);
    if ops.is_empty() {
        allow(uid)
    } else {
        allow_patch(uid, &Json::Array(ops))
    }
}

/// The operations that make `object`'s labels hold `labels` (existing other labels kept).
fn label_ops(
    object: &Json,
    labels: &std::collections::BTreeMap<&'static str, String>,
) -> Vec<Json> {
    if labels.is_empty() {
        return Vec::new();
    }
    match object.pointer("/metadata/labels") {
        Some(Json::Object(have)) => labels
            .iter()
            .filter(|(k, v)| have.get(**k).and_then(Json::as_str) != Some(v.as_str()))
            .map(|(k, v)| {
                // RFC 6901: `~` → `~0`, `/` → `~1`.
                let key = k.replace('~', "~0").replace('/', "~1");
                json!({"op": "add", "path": format!("/metadata/labels/{key}"), "value": v})
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
