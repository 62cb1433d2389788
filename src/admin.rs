//! The admin HTTP port (HTTP/1.1, plain text): `/livez`, `/readyz` and `/metrics`.
//!
//! - `/livez`: 200 while the process runs.
//! - `/readyz`: 200 once every source finished its first full sync and the server is not
//!   shutting down; otherwise 503 with a one-line reason.
//! - `/metrics`: every `kartograf_*` metric as OpenMetrics text. With metrics
//!   authentication (`serve --metrics-auth`), only for `Authorization: Bearer <token>` with a
//!   token of the `--auth-tokens` file that has the `metrics` scope (or `*`): 401 without a
//!   known token, 403 for a token without the scope. `/livez` and `/readyz` stay open.
//! - `/ui/…`: the web view ([`crate::ui`]); with `ui_tokens`, its data needs a read token.
//! - anything else: 404.
//!
//! The port is served by the one HTTP/1 listener ([`crate::server::http`]): at most
//! [`MAX_CONNECTIONS`] connections and `--max-connections-per-peer` from one address, where
//! at either cap a new connection evicts the one that has waited longest for a request
//! head (so probes get in while slow clients hold the port); a request's head must arrive
//! within the header read timeout (`--handshake-timeout`, also between requests on a
//! kept-alive connection), and a connection on which no byte moved for `--idle-timeout` is
//! closed. `serve --probe-listen` adds a listener with `/livez` and `/readyz` alone
//! ([`serve_probes`]).

use crate::metrics::CONTENT_TYPE;
use crate::server::{Shared, Tokens, http};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// The answer to one admin request, with `/metrics` open.
pub fn route(shared: &Shared, path: &str) -> Response<Full<Bytes>> {
    route_guarded(shared, path, None, None)
}

/// The answer to one admin request; with `metrics_tokens`, `/metrics` needs a bearer token
/// with the `metrics` scope in `authorization` (the request's `Authorization` header).
pub fn route_guarded(
    shared: &Shared,
    path: &str,
    metrics_tokens: Option<&Tokens>,
    authorization: Option<&[u8]>,
) -> Response<Full<Bytes>> {
    if path == "/metrics"
        && let Some(tokens) = metrics_tokens
        && let Err(denied) = tokens.authorize_metrics(authorization)
    {
        return refused(&denied);
    }
    match path {
        "/livez" => text(StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => match not_ready(shared) {
            None => text(StatusCode::OK, "ok\n".to_owned()),
            Some(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
        },
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(shared.metrics.encode())));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(CONTENT_TYPE),
            );
            response
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
    }
}

/// Why the server is not ready, if it is not.
fn not_ready(shared: &Shared) -> Option<String> {
    if *shared.shutdown.borrow() {
        return Some("shutting down".to_owned());
    }
    let pending = shared.store.pending();
    if pending.is_empty() {
        None
    } else {
        Some(format!(
            "waiting for the first full sync of: {}",
            pending.join(", ")
        ))
    }
}

/// 401 (with a `WWW-Authenticate: Bearer` challenge) or 403, with the reason.
fn refused(denied: &tonic::Status) -> Response<Full<Bytes>> {
    if denied.code() == tonic::Code::PermissionDenied {
        return text(StatusCode::FORBIDDEN, format!("{}\n", denied.message()));
    }
    let mut response = text(StatusCode::UNAUTHORIZED, format!("{}\n", denied.message()));
    response.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer realm=\"kartograf metrics\""),
    );
    response
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Connections the admin port keeps open at once; at the cap a new one evicts the one that
/// has waited longest for a request head (see [`crate::server::http`]).
pub const MAX_CONNECTIONS: usize = 256;

// The web view's live feeds leave half the connections to probes and scrapes.
const _: () = assert!(crate::ui::live::MAX_FEEDS * 2 <= MAX_CONNECTIONS);

/// The admin port's connection bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A request's head must arrive within this (also between requests on a kept-alive
    /// connection).
    pub header_read_timeout: Duration,
    /// A connection on which no byte moved for this long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once from one IP address (`--max-connections-per-peer`).
    pub max_per_peer: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: crate::server::DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: crate::server::DEFAULT_IDLE_TIMEOUT,
            max_per_peer: http::DEFAULT_MAX_PER_PEER,
        }
    }
}

impl Limits {
    /// The listener's bounds (no route reads a body: no body budget to speak of).
    fn listener(self) -> http::Limits {
        http::Limits {
            max_connections: MAX_CONNECTIONS,
            max_per_peer: self.max_per_peer,
            head_timeout: self.header_read_timeout,
            idle_timeout: self.idle_timeout,
            body_budget: 64 * 1024,
        }
    }
}

/// Serves the admin port on an already bound listener until the task is dropped or aborted.
pub async fn serve(listener: tokio::net::TcpListener, shared: Shared) {
    serve_guarded(listener, shared, None).await
}

/// [`serve`], with `/metrics` only for bearer tokens of `metrics_tokens` that have the
/// `metrics` scope (when set).
pub async fn serve_guarded(
    listener: tokio::net::TcpListener,
    shared: Shared,
    metrics_tokens: Option<Arc<Tokens>>,
) {
    serve_limited(listener, shared, metrics_tokens, Limits::default()).await
}

/// [`serve_guarded`] with these connection bounds.
pub async fn serve_limited(
    listener: tokio::net::TcpListener,
    shared: Shared,
    metrics_tokens: Option<Arc<Tokens>>,
    limits: Limits,
) {
    serve_with_ui(listener, shared, metrics_tokens, None, limits).await
}

/// [`serve_limited`], with the web view's data only for bearer tokens of `ui_tokens` that
/// have the read scope (when set).
pub async fn serve_with_ui(
    listener: tokio::net::TcpListener,
    shared: Shared,
    metrics_tokens: Option<Arc<Tokens>>,
    ui_tokens: Option<Arc<Tokens>>,
    limits: Limits,
) {
    let view = Arc::new(crate::ui::View::default());
    let handler = move |request: Request<hyper::body::Incoming>, _bodies: http::Bodies| {
        let shared = shared.clone();
        let tokens = metrics_tokens.clone();
        let ui_tokens = ui_tokens.clone();
        answer(request, shared, view.clone(), tokens, ui_tokens)
    };
    http::serve(listener, "admin", limits.listener(), None, None, handler).await
}

/// Serves `/livez` and `/readyz` alone (`serve --probe-listen`: a listener for the
/// kubelet's probes that scrapes and the web view never share); anything else is 404.
pub async fn serve_probes(listener: tokio::net::TcpListener, shared: Shared, limits: Limits) {
    let handler = move |request: Request<hyper::body::Incoming>, _bodies: http::Bodies| {
        let path = request.uri().path();
        let response = match path {
            "/livez" | "/readyz" => route(&shared, path),
            _ => text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
        };
        std::future::ready(response.map(http_body_util::BodyExt::boxed))
    };
    http::serve(listener, "probes", limits.listener(), None, None, handler).await
}

/// The answer to one request on the admin port.
async fn answer(
    request: Request<hyper::body::Incoming>,
    shared: Shared,
    view: Arc<crate::ui::View>,
    tokens: Option<Arc<Tokens>>,
    ui_tokens: Option<Arc<Tokens>>,
) -> Response<http::Body> {
    let path = request.uri().path().to_owned();
    if crate::ui::serves(&path) {
        let header = |name: &str| request.headers().get(name).map(|v| v.as_bytes());
        let asked = crate::ui::Asked {
            method: request.method(),
            path: &path,
            query: request.uri().query(),
            authorization: header("authorization"),
            last_event_id: header("last-event-id"),
            host: header("host"),
        };
        return crate::ui::answer(&shared, &view, ui_tokens.as_ref(), asked).await;
    }
    // Checked before anything is rendered: a refused scrape costs nothing.
    let refusal = tokens
        .as_deref()
        .filter(|_| path == "/metrics")
        .and_then(|t| {
            let authorization = request
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .map(|v| v.as_bytes());
            t.authorize_metrics(authorization).err()
        });
    // A scrape renders every workload's and pod's series: on a blocking thread, so /livez
    // and /readyz never wait behind it.
    let response = if let Some(denied) = refusal {
        refused(&denied)
    } else if path == "/metrics" {
        tokio::task::spawn_blocking(move || route(&shared, &path))
            .await
            .unwrap_or_else(|_| {
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "metrics failed\n".to_owned(),
                )
            })
    } else {
        route(&shared, &path)
    };
    response.map(http_body_util::BodyExt::boxed)
}
