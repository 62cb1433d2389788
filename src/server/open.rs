//! Counts each request as open on its connection from its start until its response body is
//! dropped (sent, or reset), so that the idle timeout spares connections with open streams.

use super::conn::{RequestGuard, conn_of};
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tonic::codegen::http;

/// The layer; add it outside every other one.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenLayer;

impl<S> tower::Layer<S> for OpenLayer {
    type Service = Open<S>;

    fn layer(&self, inner: S) -> Open<S> {
        Open { inner }
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct Open<S> {
    inner: S,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Open<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Counted<RB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let guard = conn_of(&request).map(|c| c.request());
        let future = self.inner.call(request);
        Box::pin(async move {
            let response = future.await?;
            Ok(response.map(|body| Counted {
                body,
                _guard: guard,
            }))
        })
    }
}

/// A response body that keeps its request counted as open until it is dropped.
#[derive(Debug)]
pub struct Counted<B> {
    body: B,
    _guard: Option<RequestGuard>,
}

impl<B: Body + Unpin> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
