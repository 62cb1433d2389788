//! The one HTTP/1 listener of every plain-HTTP port (admin, webhook, probes): the accept
//! loop (through [`super::conn::incoming`]), optional TLS re-read when its files change
//! ([`super::tls_reload`]), the connection caps, head and idle timeouts, and the byte budget
//! of request bodies. Each port brings only its routes, as a handler.
//!
//! - **Connections**: at most [`Limits::max_connections`], and [`Limits::max_per_peer`]
//!   from one IP address; at either cap a new connection evicts the one that has waited
//!   longest without completing a request head ([`super::conn::Gate::http`]), so a probe
//!   gets in however many slow heads hold the port.
//! - **Time**: a request head (and a TLS handshake) must arrive within
//!   [`Limits::head_timeout`], also between requests on a kept-alive connection; a
//!   connection on which no byte moved for [`Limits::idle_timeout`] is closed.
//! - **Bodies**: read only by the routes that want one, through [`Bodies::read`]: the
//!   declared length must fit the route's maximum (else 413) and the listener's budget of
//!   body bytes in flight ([`Limits::body_budget`], else 429 before a byte is read); a body
//!   without a declared length takes budget as it arrives. The budget is held until the
//!   bytes are dropped (after the answer was computed), so the bodies a listener holds never
//!   exceed it, however many connections send them.

use super::conn::{self, RequestGuard};
use super::tls_reload::Reloading;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A response body.
pub type Body = BoxBody<Bytes, Infallible>;

/// Default per-peer connection cap of an HTTP/1 port (`--max-connections-per-peer`).
pub const DEFAULT_MAX_PER_PEER: usize = 128;

/// Default byte budget of request bodies in flight on one listener
/// (`--max-body-bytes-in-flight`): eight of the largest webhook bodies.
pub const DEFAULT_BODY_BUDGET: usize = 64 * 1024 * 1024;

/// Largest request head (and read buffer) of a connection.
const MAX_HEAD: usize = 64 * 1024;

/// The bounds of one HTTP/1 listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_per_peer: usize,
    /// Time to send a request head (and to finish a TLS handshake).
    pub head_timeout: Duration,
    /// A connection on which no byte moved for this long is closed.
    pub idle_timeout: Duration,
    /// Bytes of request bodies held at once on the listener.
    pub body_budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            max_per_peer: DEFAULT_MAX_PER_PEER,
            head_timeout: super::DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: super::DEFAULT_IDLE_TIMEOUT,
            body_budget: DEFAULT_BODY_BUDGET,
        }
    }
}

/// Serves `handler` on an already bound listener until `shutdown` flips (or the task is
/// dropped). `port` names the listener in logs.
pub async fn serve<H, F>(
    listener: tokio::net::TcpListener,
    port: &'static str,
    limits: Limits,
    tls: Option<Arc<Reloading>>,
    mut shutdown: Option<tokio::sync::watch::Receiver<bool>>,
    handler: H,
) where
    H: Fn(Request<Incoming>, Bodies) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let gate = conn::Gate::http(
        conn::Limits {
            max_connections: limits.max_connections.max(1),
            handshake: limits.head_timeout,
            idle: limits.idle_timeout,
            watch_stall: limits.idle_timeout,
        },
        limits.max_per_peer,
    );
    let bodies = Bodies::new(limits.body_budget);
    let incoming = conn::incoming(listener, gate, port);
    let mut incoming = std::pin::pin!(incoming);
    loop {
        let next = futures::StreamExt::next(&mut incoming);
        let accepted = match shutdown.as_mut() {
            Some(signal) => tokio::select! {
                a = next => a,
                changed = signal.changed() => {
                    if changed.is_err() || *signal.borrow() {
                        return;
                    }
                    continue;
                }
            },
            None => next.await,
        };
        let Some(accepted) = accepted else { return };
        let Ok(stream) = accepted else { continue };
        let conn = stream.conn().clone();
        let handler = handler.clone();
        let bodies = bodies.clone();
        let acceptor = tls.as_ref().map(|t| t.acceptor());
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(limits.head_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            connection(TokioIo::new(stream), conn, handler, bodies, limits).await
                        }
                        Ok(Err(e)) => tracing::debug!(port, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(port, "TLS handshake timed out"),
                    }
                }
                None => connection(TokioIo::new(stream), conn, handler, bodies, limits).await,
            }
        });
    }
}

/// Serves one connection: each request counts as in progress on it (not waiting for a
/// head, so not evictable) until its response body is dropped.
async fn connection<I, H, F>(
    io: I,
    conn: Arc<conn::Conn>,
    handler: H,
    bodies: Bodies,
    limits: Limits,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: Fn(Request<Incoming>, Bodies) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let guard = conn.request();
        let answer = handler(request, bodies.clone());
        async move {
            let response = answer.await;
            Ok::<_, Infallible>(response.map(|body| Held {
                body,
                _guard: guard,
            }))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_buf_size(MAX_HEAD)
        .serve_connection(io, service)
        .await;
}

/// A response body that keeps its request counted as in progress until it is dropped.
struct Held {
    body: Body,
    _guard: RequestGuard,
}

impl hyper::body::Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The budget of request bodies in flight on one listener.
#[derive(Debug, Clone)]
pub struct Bodies {
    budget: Arc<Semaphore>,
    total: usize,
}

/// A body read whole; its bytes count against the listener's budget until it is dropped.
#[derive(Debug)]
pub struct BodyBytes {
    /// The bytes.
    pub bytes: Bytes,
    _budget: Option<OwnedSemaphorePermit>,
}

/// Slowest a request body may arrive, on average, once [`BODY_GRACE`] has passed: a client
/// trickling a body holds its connection and its share of the body budget, so one that falls
/// behind is cut off (408) instead of being waited for until the request timeout. An API server
/// or Karmada sends a whole object in milliseconds.
pub const MIN_BODY_RATE: usize = 64 * 1024;

/// Time a body may take before [`MIN_BODY_RATE`] applies.
pub const BODY_GRACE: Duration = Duration::from_secs(2);

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefused {
    /// Larger than the route accepts.
    #[error("the request body is larger than {max} bytes ({flag})")]
    TooLarge {
        /// The route's maximum.
        max: usize,
        /// The flag setting it.
        flag: &'static str,
    },
    /// The listener holds its budget of body bytes already.
    #[error(
        "the listener already holds {budget} bytes of request bodies (--max-body-bytes-in-flight); retry shortly"
    )]
    Busy {
        /// The budget.
        budget: usize,
    },
    /// The body was not sent in time.
    #[error("the request body was not sent within {0:?}")]
    Timeout(Duration),
    /// The body came slower than [`MIN_BODY_RATE`] after [`BODY_GRACE`].
    #[error(
        "the request body came slower than {MIN_BODY_RATE} bytes per second (after {BODY_GRACE:?})"
    )]
    TooSlow,
    /// The body could not be read (the connection broke, a malformed chunk).
    #[error("the request body could not be read")]
    Unreadable,
}

impl BodyRefused {
    /// The HTTP answer: 413, 429 (with `Retry-After`), 408 or 400.
    pub fn response(&self) -> Response<Body> {
        let status = match self {
            BodyRefused::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            BodyRefused::Timeout(_) | BodyRefused::TooSlow => StatusCode::REQUEST_TIMEOUT,
            BodyRefused::Unreadable => StatusCode::BAD_REQUEST,
        };
        let mut r = text(status, format!("{self}\n"));
        if status == StatusCode::TOO_MANY_REQUESTS {
            retry_after(&mut r);
        }
        r
    }
}

impl Bodies {
    /// A budget of `bytes` (at least one maximal frame).
    pub fn new(bytes: usize) -> Bodies {
        let bytes = bytes.clamp(1, Semaphore::MAX_PERMITS);
        Bodies {
            budget: Arc::new(Semaphore::new(bytes)),
            total: bytes,
        }
    }

    /// Bytes of the budget not held now.
    pub fn available(&self) -> usize {
        self.budget.available_permits()
    }

    fn take(&self, n: usize) -> Result<OwnedSemaphorePermit, BodyRefused> {
        let busy = BodyRefused::Busy { budget: self.total };
        let n = u32::try_from(n).map_err(|_| busy.clone())?;
        self.budget
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| busy)
    }

    /// Reads `request`'s body whole: at most `max` bytes (`flag` names that bound), within
    /// `timeout`, and within the listener's budget (refused before reading when its
    /// declared length does not fit).
    pub async fn read(
        &self,
        request: Request<Incoming>,
        max: usize,
        flag: &'static str,
        timeout: Duration,
    ) -> Result<BodyBytes, BodyRefused> {
        let too_large = BodyRefused::TooLarge { max, flag };
        let declared = request
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut held = match declared {
            Some(n) if n > max as u64 => return Err(too_large),
            Some(0) => None,
            Some(n) => Some(self.take(n as usize)?),
            None => None,
        };
        let mut body = request.into_body();
        let mut bytes = BytesMut::with_capacity(declared.unwrap_or(0) as usize);
        let started = tokio::time::Instant::now();
        let read = async {
            loop {
                // Behind the minimum rate: what has come so far should have come by then.
                let behind = started
                    + BODY_GRACE
                    + Duration::from_secs_f64(bytes.len() as f64 / MIN_BODY_RATE as f64);
                let frame = tokio::select! {
                    frame = body.frame() => frame,
                    () = tokio::time::sleep_until(behind) => return Err(BodyRefused::TooSlow),
                };
                let Some(frame) = frame else {
                    break;
                };
                let frame = frame.map_err(|_| BodyRefused::Unreadable)?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if bytes.len() + data.len() > max {
                    return Err(too_large.clone());
                }
                if declared.is_none() {
                    let more = self.take(data.len())?;
                    match held.as_mut() {
                        Some(h) => h.merge(more),
                        None => held = Some(more),
                    }
                }
                bytes.extend_from_slice(&data);
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(())) => Ok(BodyBytes {
                bytes: bytes.freeze(),
                _budget: held,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(BodyRefused::Timeout(timeout)),
        }
    }
}

/// A plain-text response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into()).boxed()
}

/// Adds `Retry-After: 1` (a busy answer: try again in a second).
pub fn retry_after<B>(response: &mut Response<B>) {
    response.headers_mut().insert(
        hyper::header::RETRY_AFTER,
        hyper::header::HeaderValue::from_static("1"),
    );
}
