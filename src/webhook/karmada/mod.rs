//! Karmada's resource interpreter webhook (`POST /karmada/interpret`): the nine operations
//! of `ResourceInterpreterContext` (`config.karmada.io/v1alpha1`) answered from the request's
//! object and the catalog's definition of its kind, on the evaluation threads under the
//! resolve deadline. See `docs/karmada.md`.

pub mod config;
mod extras;
pub mod interpret;
mod patch;
mod pods;
pub mod wire;

use crate::server::Shared;
use bytes::Bytes;
use hyper::StatusCode;
use std::time::{Duration, Instant};
use wire::{Answer, Context, RequestStatus, Response};

/// The route.
pub const PATH: &str = "/karmada/interpret";

/// How long a request waits for room when every evaluation thread is busy and their queue
/// is full, before it is answered `successful: false` with code 429.
pub const QUEUE_WAIT: Duration = Duration::from_millis(100);

/// Answers one request body: 200 with the context's response (successful or not), or 400
/// with an unsuccessful response when the body is not a `ResourceInterpreterContext`.
pub async fn handle(shared: &Shared, body: Bytes, timeout: Duration) -> (StatusCode, Bytes) {
    let started = Instant::now();
    let context: Context = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => {
            return bad_request(
                shared,
                started,
                format!("not a ResourceInterpreterContext: {e}"),
            );
        }
    };
    if let Some(kind) = context.kind.as_deref().filter(|k| *k != wire::KIND) {
        let message = format!("kind `{}`, not {}", crate::excerpt::echo(kind), wire::KIND);
        return bad_request(shared, started, message);
    }
    if let Some(v) = context
        .api_version
        .as_deref()
        .filter(|v| *v != wire::API_VERSION)
    {
        let message = format!(
            "apiVersion `{}`, not {}",
            crate::excerpt::echo(v),
            wire::API_VERSION
        );
        return bad_request(shared, started, message);
    }
    let Some(request) = context.request else {
        return bad_request(shared, started, "request is missing".to_owned());
    };
    let operation = request.operation.clone();
    let catalog = shared.store.catalog();
    let deadline = started + timeout;
    let uid = request.uid.clone();
    let request = std::sync::Arc::new(request);
    // A full queue is usually a burst: wait a little for room before answering 429.
    let room_until = started + QUEUE_WAIT.min(timeout);
    let ran = crate::server::evaluations::Evaluations::retry_while_full(room_until, || {
        let (catalog, request) = (catalog.clone(), request.clone());
        shared
            .evaluations
            .run(move || interpret::answer(&catalog, &request, deadline))
    })
    .await;
    let (response, kind) = match ran {
        Ok(answered) => answered,
        Err(status) => (
            Response {
                uid,
                successful: false,
                status: Some(RequestStatus {
                    message: status.message().to_owned(),
                    code: if status.code() == tonic::Code::ResourceExhausted {
                        429
                    } else {
                        500
                    },
                }),
                ..Response::default()
            },
            String::new(),
        ),
    };
    let result = if response.successful {
        "successful"
    } else {
        "unsuccessful"
    };
    shared.metrics.karmada_request(
        operation_label(&operation),
        &kind,
        result,
        started.elapsed(),
    );
    (StatusCode::OK, encode(response))
}

/// The metric label of an operation: one Karmada defines, else `other` (bounded labels).
fn operation_label(operation: &str) -> &'static str {
    wire::OPERATIONS
        .iter()
        .find(|o| **o == operation)
        .copied()
        .unwrap_or("other")
}

fn bad_request(shared: &Shared, started: Instant, message: String) -> (StatusCode, Bytes) {
    shared
        .metrics
        .karmada_request("other", "", "bad_request", started.elapsed());
    let response = Response {
        successful: false,
        status: Some(RequestStatus {
            message: crate::excerpt::excerpt(&message, crate::excerpt::STATUS_BYTES).into_owned(),
            code: 400,
        }),
        ..Response::default()
    };
    (StatusCode::BAD_REQUEST, encode(response))
}

fn encode(response: Response) -> Bytes {
    Bytes::from(serde_json::to_vec(&Answer::new(response)).unwrap_or_default())
}
