//! Admission in front of every service: bearer-token checks and a global concurrency limit
//! that sheds (RESOURCE_EXHAUSTED) instead of queueing. Health `Check` skips both, so
//! kubelet probes keep answering while the server is saturated.

use super::auth::{HEALTH_CHECK, Tokens};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::Semaphore;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};

/// The admission layer; cheap to clone.
#[derive(Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    limit: usize,
    tokens: Option<Arc<Tokens>>,
}

impl Admission {
    /// At most `limit` requests in flight (until their response starts); `tokens` if
    /// authentication is on.
    pub fn new(limit: usize, tokens: Option<Arc<Tokens>>) -> Admission {
        let limit = limit.max(1);
        Admission {
            permits: Arc::new(Semaphore::new(limit)),
            limit,
            tokens,
        }
    }
}

impl<S> tower::Layer<S> for Admission {
    type Service = Admitted<S>;

    fn layer(&self, inner: S) -> Admitted<S> {
        Admitted {
            inner,
            admission: self.clone(),
        }
    }
}

/// A service behind [`Admission`].
#[derive(Clone)]
pub struct Admitted<S> {
    inner: S,
    admission: Admission,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> tower::Service<Request<Body>> for Admitted<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let path = request.uri().path();
        let health = path == HEALTH_CHECK;
        if let Some(tokens) = &self.admission.tokens {
            let header = request.headers().get("authorization").map(|v| v.as_bytes());
            if let Err(status) = tokens.authorize(path, header) {
                return Box::pin(std::future::ready(Ok(status.into_http())));
            }
        }
        let permit = if health {
            None
        } else {
            match self.admission.permits.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    let status = Status::resource_exhausted(format!(
                        "kartograf is at its limit of {} concurrent requests; retry with backoff",
                        self.admission.limit
                    ));
                    return Box::pin(std::future::ready(Ok(status.into_http())));
                }
            }
        };
        // The clone is ready only if it is the one that was polled: swap it in.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let response = inner.call(request).await;
            drop(permit);
            response
        })
    }
}
