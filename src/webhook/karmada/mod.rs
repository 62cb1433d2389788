//! Karmada's resource interpreter webhook (`POST /karmada/interpret`): the nine operations
//! of `ResourceInterpreterContext` (`config.karmada.io/v1alpha1`) answered from the request's
//! object and the catalog's definition of its kind, on the evaluation threads under the
//! resolve deadline. See `docs/karmada.md`.

pub mod config;
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

/// Answers one request body: 200 with the context's response (successful or not), 400
/// with an unsuccessful response when the body is not a `ResourceInterpreterContext`, or
/// 429 (an unsuccessful response, code 429) when no evaluation thread was free within the
/// queue wait. The body is decoded on the evaluation thread too, never on the async workers.
pub async fn handle(
    shared: &Shared,
    body: crate::server::http::BodyBytes,
    timeout: Duration,
) -> (StatusCode, Bytes) {
    let started = Instant::now();
    let catalog = shared.store.catalog();
    let deadline = started + timeout;
    let ran = shared
        .evaluations
        .run(move || {
            let answered = decode(&body.bytes).map(|request| {
                let operation = request.operation.clone();
                let (response, kind) = interpret::answer(&catalog, &request, deadline);
                (operation, response, kind)
            });
            drop(body);
            answered
        })
        .await;
    let (operation, response, kind) = match ran {
        Ok(Ok(answered)) => answered,
        Ok(Err(message)) => return bad_request(shared, started, message),
        Err(status) => {
            let busy = status.code() == tonic::Code::ResourceExhausted;
            let response = Response {
                successful: false,
                status: Some(RequestStatus {
                    message: status.message().to_owned(),
                    code: if busy { 429 } else { 500 },
                }),
                ..Response::default()
            };
            shared
                .metrics
                .karmada_request("other", "", "unsuccessful", started.elapsed());
            let http = if busy {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            return (http, encode(response));
        }
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

/// The request of a `ResourceInterpreterContext` body, or why it is none.
fn decode(body: &[u8]) -> Result<wire::Request, String> {
    let context: Context = serde_json::from_slice(body)
        .map_err(|e| format!("not a ResourceInterpreterContext: {e}"))?;
    if let Some(kind) = context.kind.as_deref().filter(|k| *k != wire::KIND) {
        return Err(format!(
            "kind `{}`, not {}",
            crate::excerpt::echo(kind),
            wire::KIND
        ));
    }
    if let Some(v) = context
        .api_version
        .as_deref()
        .filter(|v| *v != wire::API_VERSION)
    {
        return Err(format!(
            "apiVersion `{}`, not {}",
            crate::excerpt::echo(v),
            wire::API_VERSION
        ));
    }
    context
        .request
        .ok_or_else(|| "request is missing".to_owned())
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
