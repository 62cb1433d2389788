//! The webhook listener (`serve --webhook-listen`): HTTPS with its own certificate
//! (`--webhook-tls-cert`/`--webhook-tls-key`, re-read when they change), plain HTTP only
//! when none is given. HTTP/1.1; routes:
//!
//! - `POST /karmada/interpret`: Karmada's resource interpreter ([`karmada`]).
//! - `POST /karta/validate`, `POST /karta/mutate`: admission of Karta objects
//!   ([`admission`], AdmissionReview v1).
//! - `POST /mutate/workloads`, `POST /mutate/pods`: policies and workload labels at
//!   admission of any kind with a definition ([`mutate`], AdmissionReview v1).
//! - anything else: 404 (a known path with another method: 405).
//!
//! The port is served by the one HTTP/1 listener ([`crate::server::http`]). Bodies above
//! `--webhook-max-body-bytes` are refused with 413 before they are read whole, and beyond
//! the listener's budget of body bytes in flight (`--max-body-bytes-in-flight`) with 429
//! before a byte is read; headers must arrive within [`HEADER_TIMEOUT`] and a body within
//! the request timeout; at most `--concurrency-limit` connections are open at once and
//! `--max-connections-per-peer` from one address, and at either cap a new connection evicts
//! the one that has waited longest for a request head. Bodies are decoded and answers
//! computed on the evaluation threads, never on the async workers, so a slow or hostile
//! request cannot stall gRPC, health or other webhook requests; a request that finds no
//! evaluation thread within `--eval-queue-wait` is answered HTTP 429 with `Retry-After`
//! (its body the route's refusal, code 429).

pub mod admission;
pub mod karmada;
pub mod mutate;

/// The listener's certificate, re-read when its files change.
pub use crate::server::tls_reload as tls;

use crate::server::{Shared, http};
use bytes::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a client has to send a request's headers (and to finish a TLS handshake).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Default `--webhook-max-body-bytes`: a Kubernetes object is at most ~1.5 MiB; an
/// AggregateStatus request carries one status per member cluster besides.
pub const DEFAULT_MAX_BODY: usize = 8 * 1024 * 1024;

/// Settings of the webhook listener.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Certificate and key (PEM); `None`: plain HTTP.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Evaluation deadline of one answer (`--resolve-timeout`).
    pub eval_timeout: Duration,
    /// Time to read a body and answer (`--request-timeout`).
    pub request_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one IP address (`--max-connections-per-peer`).
    pub max_per_peer: usize,
    /// Bytes of request bodies held at once (`--max-body-bytes-in-flight`).
    pub body_budget: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tls: None,
            max_body_bytes: DEFAULT_MAX_BODY,
            eval_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_per_peer: http::DEFAULT_MAX_PER_PEER,
            body_budget: http::DEFAULT_BODY_BUDGET,
        }
    }
}

/// Serves on an already bound listener until `shared.shutdown` flips. Fails at once when
/// the certificate does not load.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Shared,
    settings: Settings,
) -> Result<(), tls::TlsError> {
    let tls = match &settings.tls {
        Some((cert, key)) => Some(tls::Reloading::load(cert, key)?),
        None => None,
    };
    let limits = http::Limits {
        max_connections: settings.max_connections.max(1),
        max_per_peer: settings.max_per_peer,
        head_timeout: HEADER_TIMEOUT,
        idle_timeout: settings.request_timeout.max(HEADER_TIMEOUT),
        body_budget: settings.body_budget,
    };
    let shutdown = shared.shutdown.clone();
    let settings = Arc::new(settings);
    let handler = move |request: Request<hyper::body::Incoming>, bodies: http::Bodies| {
        let shared = shared.clone();
        let settings = settings.clone();
        async move { route(request, &bodies, &shared, &settings).await }
    };
    http::serve(listener, "webhook", limits, tls, Some(shutdown), handler).await;
    Ok(())
}

/// The answer to one request.
pub async fn route(
    request: Request<hyper::body::Incoming>,
    bodies: &http::Bodies,
    shared: &Shared,
    settings: &Settings,
) -> Response<http::Body> {
    let path = request.uri().path();
    let admission = admission::mode_of(path);
    let mutate = mutate::route_of(path);
    if path != karmada::PATH && admission.is_none() && mutate.is_none() {
        return http::text(StatusCode::NOT_FOUND, "not found\n");
    }
    if request.method() != Method::POST {
        return http::text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
    }
    let body = match bodies
        .read(
            request,
            settings.max_body_bytes,
            "--webhook-max-body-bytes",
            settings.request_timeout,
        )
        .await
    {
        Ok(body) => body,
        Err(refused) => return refused.response(),
    };
    let (status, answer) = match (admission, mutate) {
        (Some(mode), _) => admission::handle(shared, mode, body, settings.eval_timeout).await,
        (None, Some(route)) => mutate::handle(shared, route, body, settings.eval_timeout).await,
        (None, None) => karmada::handle(shared, body, settings.eval_timeout).await,
    };
    json(status, answer)
}

/// A JSON answer; 429 carries `Retry-After`.
fn json(status: StatusCode, answer: Bytes) -> Response<http::Body> {
    let mut response = Response::new(http::full(answer));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::TOO_MANY_REQUESTS {
        http::retry_after(&mut response);
    }
    response
}
