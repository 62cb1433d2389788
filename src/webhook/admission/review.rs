//! The admission decisions on one Karta object; synchronous, run on an evaluation thread.

use super::answers::{allow, allow_patch, label_ops};
use super::wire::{Head, Objects, Response, Status};
use crate::definition::Catalog;
use crate::karta;
use serde_json::Value as Json;

/// Which webhook is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `POST /karta/validate`: admit or deny.
    Validate,
    /// `POST /karta/mutate`: stamp the index labels.
    Mutate,
}

/// Warnings returned with an admitted object (the API server may cut longer ones).
const WARNINGS: usize = 8;
const WARNING_BYTES: usize = 200;

fn deny(uid: &str, code: u16, reason: &str, message: String) -> Response {
    let mut message = message;
    crate::excerpt::bound(&mut message, karta::MESSAGE_BYTES);
    Response {
        uid: uid.to_owned(),
        allowed: false,
        status: Some(Status {
            status: "Failure".to_owned(),
            message,
            reason: reason.to_owned(),
            code,
        }),
        ..Response::default()
    }
}

/// Answers one review: `head` from the envelope, `body` the whole request (read again for
/// the objects), `catalog` for the Karta objects already in the cluster.
pub fn answer(mode: Mode, head: &Head, body: &[u8], catalog: &Catalog) -> Response {
    let uid = head.uid.as_str();
    if matches!(head.operation.as_str(), "DELETE" | "CONNECT") {
        return allow(uid);
    }
    if let Some(k) = &head.kind
        && (k.group != "run.ai" || k.kind != "Karta")
    {
        return deny(
            uid,
            400,
            "BadRequest",
            format!(
                "this webhook admits run.ai Karta objects, not {}/{} {}",
                crate::excerpt::echo(&k.group),
                crate::excerpt::echo(&k.version),
                crate::excerpt::echo(&k.kind)
            ),
        );
    }
    let objects: Objects = match serde_json::from_slice(body) {
        Ok(o) => o,
        Err(e) => {
            return deny(
                uid,
                400,
                "BadRequest",
                format!(
                    "the object could not be read: {}",
                    crate::excerpt::printable(&e.to_string(), crate::excerpt::PARSE_ERROR_BYTES)
                ),
            );
        }
    };
    let Some(object) = objects.request.object else {
        return deny(
            uid,
            400,
            "BadRequest",
            "request.object is missing".to_owned(),
        );
    };
    let name = head
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            object
                .pointer("/metadata/name")
                .and_then(Json::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    match mode {
        Mode::Mutate => mutate(uid, &object),
        Mode::Validate => validate(
            uid,
            head,
            &name,
            &object,
            objects.request.old_object.as_ref(),
            catalog,
        ),
    }
}

fn mutate(uid: &str, object: &Json) -> Response {
    let missing = karta::missing_labels(object);
    if missing.is_empty() {
        return allow(uid);
    }
    allow_patch(uid, &Json::Array(label_ops(object, &missing)))
}

fn validate(
    uid: &str,
    head: &Head,
    name: &str,
    object: &Json,
    old: Option<&Json>,
    catalog: &Catalog,
) -> Response {
    let def = match karta::validate(object, name) {
        Ok(def) => def,
        Err(errors) => {
            return deny(
                uid,
                403,
                "Forbidden",
                format!("invalid Karta: {}", karta::summarize(&errors)),
            );
        }
    };
    if head.operation == "UPDATE"
        && let Some(old) = old
    {
        let before = karta::root_kind(old);
        if before.as_ref() != Some(&def.root_kind) {
            return deny(
                uid,
                403,
                "Forbidden",
                format!(
                    "the root component kind is immutable: it was {}, the update makes it {}; create a new Karta instead",
                    before.map_or_else(|| "unset".to_owned(), |g| g.to_string()),
                    def.root_kind
                ),
            );
        }
    }
    let own = karta::origin(name);
    if let Some(other) = catalog.definitions().find(|d| {
        d.root_kind == def.root_kind && d.origin.starts_with("cluster:") && d.origin != own
    }) {
        return deny(
            uid,
            403,
            "Forbidden",
            format!(
                "{} is already claimed by Karta `{}`; only one Karta per group/version/kind is allowed",
                def.root_kind,
                other.origin.trim_start_matches("cluster:")
            ),
        );
    }
    let mut response = allow(uid);
    response.warnings = def
        .warnings
        .iter()
        .take(WARNINGS)
        .map(|w| crate::excerpt::excerpt(&karta::describe(w), WARNING_BYTES).into_owned())
        .collect();
    response
}
