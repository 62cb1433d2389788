//! Kubernetes admission for Karta objects (`admission.k8s.io/v1` AdmissionReview), as
//! upstream Workload Map's operator admits them:
//!
//! - `POST /karta/validate`: denies a definition the validator refuses (its first errors:
//!   path, expression, message; bounded), a second Karta for a root group/version/kind
//!   another Karta already claims, and an update that changes the root kind.
//! - `POST /karta/mutate`: stamps the index labels (`run.ai/karta-group`,
//!   `run.ai/karta-version`, `run.ai/karta-kind`) with a JSON Patch.
//!
//! The envelope (uid, operation, kind) is read first without the objects, skipped without
//! recursion, so even an object nested past the parser's depth limit gets a denial carrying
//! its uid. The objects are read and judged on the evaluation threads. See
//! `docs/karta-status.md` and `deploy/webhook/`.

pub mod review;
pub mod wire;

use crate::server::Shared;
use bytes::Bytes;
use hyper::StatusCode;
use review::Mode;
use std::time::{Duration, Instant};
use wire::{Answer, Envelope, Response, Status};

/// The validating route.
pub const VALIDATE: &str = "/karta/validate";
/// The mutating route.
pub const MUTATE: &str = "/karta/mutate";

/// The mode a path names.
pub fn mode_of(path: &str) -> Option<Mode> {
    match path {
        VALIDATE => Some(Mode::Validate),
        MUTATE => Some(Mode::Mutate),
        _ => None,
    }
}

/// Answers one request body: 200 with the review's response (allowed or not), or 400 when
/// the body is not an `admission.k8s.io/v1` AdmissionReview with a request.
pub async fn handle(
    shared: &Shared,
    mode: Mode,
    body: Bytes,
    timeout: Duration,
) -> (StatusCode, Bytes) {
    let envelope: Envelope = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => {
            let message = format!(
                "not an AdmissionReview: {}",
                crate::excerpt::printable(&e.to_string(), crate::excerpt::PARSE_ERROR_BYTES)
            );
            return bad_request(message);
        }
    };
    if envelope.api_version.as_deref() != Some(wire::API_VERSION)
        || envelope.kind.as_deref() != Some(wire::KIND)
    {
        return bad_request(format!(
            "expected apiVersion {} kind {}, got `{}` `{}`",
            wire::API_VERSION,
            wire::KIND,
            crate::excerpt::echo(envelope.api_version.as_deref().unwrap_or_default()),
            crate::excerpt::echo(envelope.kind.as_deref().unwrap_or_default())
        ));
    }
    let Some(head) = envelope.request else {
        return bad_request("request is missing".to_owned());
    };
    let started = Instant::now();
    let catalog = shared.store.catalog();
    let uid = head.uid.clone();
    let head = std::sync::Arc::new(head);
    let room_until = started + super::karmada::QUEUE_WAIT.min(timeout);
    let ran = crate::server::evaluations::Evaluations::retry_while_full(room_until, || {
        let (catalog, head, body) = (catalog.clone(), head.clone(), body.clone());
        let run = shared
            .evaluations
            .run(move || review::answer(mode, &head, &body, &catalog));
        async move {
            match tokio::time::timeout(timeout, run).await {
                Ok(r) => r,
                Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                    "the review took longer than {timeout:?}"
                ))),
            }
        }
    })
    .await;
    let response = match ran {
        Ok(r) => r,
        Err(status) => Response {
            uid,
            allowed: false,
            status: Some(Status {
                status: "Failure".to_owned(),
                message: status.message().to_owned(),
                reason: if status.code() == tonic::Code::ResourceExhausted {
                    "TooManyRequests"
                } else {
                    "InternalError"
                }
                .to_owned(),
                code: if status.code() == tonic::Code::ResourceExhausted {
                    429
                } else {
                    500
                },
            }),
            ..Response::default()
        },
    };
    (StatusCode::OK, encode(response))
}

fn bad_request(message: String) -> (StatusCode, Bytes) {
    let mut message = message;
    crate::excerpt::bound(&mut message, crate::excerpt::STATUS_BYTES);
    let response = Response {
        allowed: false,
        status: Some(Status {
            status: "Failure".to_owned(),
            message,
            reason: "BadRequest".to_owned(),
            code: 400,
        }),
        ..Response::default()
    };
    (StatusCode::BAD_REQUEST, encode(response))
}

fn encode(response: Response) -> Bytes {
    Bytes::from(serde_json::to_vec(&Answer::new(response)).unwrap_or_default())
}
