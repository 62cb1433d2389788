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

pub(crate) mod answers;
pub mod review;
pub mod wire;

use crate::server::Shared;
use bytes::Bytes;
use hyper::StatusCode;
use review::Mode;
use std::time::Duration;
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

/// Answers one request body: 200 with the review's response (allowed or not), 400 when
/// the body is not an `admission.k8s.io/v1` AdmissionReview with a request, or 429 (a
/// denial, code 429) when no evaluation thread was free within the queue wait. The body is
/// read on the evaluation thread too, never on the async workers.
pub async fn handle(
    shared: &Shared,
    mode: Mode,
    body: crate::server::http::BodyBytes,
    timeout: Duration,
) -> (StatusCode, Bytes) {
    let catalog = shared.store.catalog();
    let run = shared.evaluations.run(move || {
        let answered =
            envelope(&body.bytes).map(|head| review::answer(mode, &head, &body.bytes, &catalog));
        drop(body);
        answered
    });
    let ran = match tokio::time::timeout(timeout, run).await {
        Ok(r) => r,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "the review took longer than {timeout:?}"
        ))),
    };
    let (http, response) = match ran {
        Ok(Ok(r)) => (StatusCode::OK, r),
        Ok(Err(message)) => return bad_request(message),
        Err(status) => {
            let busy = status.code() == tonic::Code::ResourceExhausted;
            let response = Response {
                allowed: false,
                status: Some(Status {
                    status: "Failure".to_owned(),
                    message: status.message().to_owned(),
                    reason: if busy {
                        "TooManyRequests"
                    } else {
                        "InternalError"
                    }
                    .to_owned(),
                    code: if busy { 429 } else { 500 },
                }),
                ..Response::default()
            };
            let http = if busy {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (http, response)
        }
    };
    (http, encode(response))
}

/// The request head of an AdmissionReview body (its objects skipped), or why it is none.
pub(crate) fn envelope(body: &[u8]) -> Result<wire::Head, String> {
    let envelope: Envelope = serde_json::from_slice(body).map_err(|e| {
        format!(
            "not an AdmissionReview: {}",
            crate::excerpt::printable(&e.to_string(), crate::excerpt::PARSE_ERROR_BYTES)
        )
    })?;
    if envelope.api_version.as_deref() != Some(wire::API_VERSION)
        || envelope.kind.as_deref() != Some(wire::KIND)
    {
        return Err(format!(
            "expected apiVersion {} kind {}, got `{}` `{}`",
            wire::API_VERSION,
            wire::KIND,
            crate::excerpt::echo(envelope.api_version.as_deref().unwrap_or_default()),
            crate::excerpt::echo(envelope.kind.as_deref().unwrap_or_default())
        ));
    }
    envelope
        .request
        .ok_or_else(|| "request is missing".to_owned())
}

pub(crate) fn bad_request(message: String) -> (StatusCode, Bytes) {
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

pub(crate) fn encode(response: Response) -> Bytes {
    Bytes::from(serde_json::to_vec(&Answer::new(response)).unwrap_or_default())
}
