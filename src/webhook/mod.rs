//! The webhook listener (`serve --webhook-listen`): HTTPS with its own certificate
//! (`--webhook-tls-cert`/`--webhook-tls-key`, re-read when they change), plain HTTP only
//! when none is given. HTTP/1.1; routes:
//!
//! - `POST /karmada/interpret`: Karmada's resource interpreter ([`karmada`]).
//! - `POST /karta/validate`, `POST /karta/mutate`: admission of Karta objects
//!   ([`admission`], AdmissionReview v1).
//! - anything else: 404 (a known path with another method: 405).
//!
//! Bodies above `--webhook-max-body-bytes` are refused with 413 before they are read
//! whole; headers must arrive within [`HEADER_TIMEOUT`] and a body within the request
//! timeout; at most `--concurrency-limit` connections are open at once (more are closed at
//! once). Answers are computed on the evaluation threads, never on the async workers, so a
//! slow or hostile request cannot stall gRPC, health or other webhook requests.

pub mod admission;
pub mod karmada;
pub mod tls;

use crate::server::Shared;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tls: None,
            max_body_bytes: DEFAULT_MAX_BODY,
            eval_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
            max_connections: 1024,
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
    let settings = Arc::new(settings);
    let permits = Arc::new(tokio::sync::Semaphore::new(settings.max_connections.max(1)));
    let mut shutdown = shared.shutdown.clone();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return Ok(());
                }
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Over the connection limit: closed at once.
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let settings = settings.clone();
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        tokio::spawn(async move {
            let _permit = permit;
            match acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => connection(TokioIo::new(stream), shared, settings).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "webhook: TLS handshake failed"),
                        Err(_) => tracing::debug!("webhook: TLS handshake timed out"),
                    }
                }
                None => connection(TokioIo::new(stream), shared, settings).await,
            }
        });
    }
}

async fn connection<I>(io: I, shared: Shared, settings: Arc<Settings>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let shared = shared.clone();
        let settings = settings.clone();
        async move { Ok::<_, Infallible>(route(request, &shared, &settings).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(io, service)
        .await;
}

/// The answer to one request.
pub async fn route(
    request: Request<hyper::body::Incoming>,
    shared: &Shared,
    settings: &Settings,
) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let admission = admission::mode_of(path);
    if path != karmada::PATH && admission.is_none() {
        return text(StatusCode::NOT_FOUND, "not found\n");
    }
    if request.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n");
    }
    let declared = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > settings.max_body_bytes as u64) {
        return too_large(settings);
    }
    let body = Limited::new(request.into_body(), settings.max_body_bytes);
    let read = tokio::time::timeout(settings.request_timeout, body.collect()).await;
    let body = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return too_large(settings),
        Ok(Err(_)) => {
            return text(
                StatusCode::BAD_REQUEST,
                "the request body could not be read\n",
            );
        }
        Err(_) => {
            return text(
                StatusCode::REQUEST_TIMEOUT,
                "the request body was not sent in time\n",
            );
        }
    };
    let (status, answer) = match admission {
        Some(mode) => admission::handle(shared, mode, body, settings.eval_timeout).await,
        None => karmada::handle(shared, body, settings.eval_timeout).await,
    };
    let mut response = Response::new(Full::new(answer));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn too_large(settings: &Settings) -> Response<Full<Bytes>> {
    let message = format!(
        "the request body is larger than {} bytes (--webhook-max-body-bytes)\n",
        settings.max_body_bytes
    );
    let mut r = text(StatusCode::PAYLOAD_TOO_LARGE, "");
    *r.body_mut() = Full::new(Bytes::from(message));
    r
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
