//! The per-RPC tower layer: one `rpc` span (method, gRPC code, duration), the
//! `kartograf_rpc_requests` counter and the `kartograf_rpc_duration_seconds` histogram.
//!
//! An RPC counts when its response headers are ready: the code is the `grpc-status` header of
//! a trailers-only response (how tonic sends errors), else OK. A streaming RPC (Watch) thus
//! counts when its stream starts, as OK; its later end is not recorded. A request dropped
//! before answering (client gone, server timeout) counts as CANCELLED, one shed by the
//! concurrency limit as RESOURCE_EXHAUSTED. Unknown methods (UNIMPLEMENTED) are labelled
//! `unknown` so callers cannot grow the label set.

use crate::metrics::{Metrics, code_name};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tonic::Code;
use tonic::codegen::http;
use tracing::Instrument;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Adds [`RpcService`] around the gRPC router.
#[derive(Clone)]
pub struct RpcLayer {
    metrics: Arc<Metrics>,
}

impl RpcLayer {
    /// A layer recording into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        RpcLayer { metrics }
    }
}

impl<S> tower::Layer<S> for RpcLayer {
    type Service = RpcService<S>;

    fn layer(&self, inner: S) -> RpcService<S> {
        RpcService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct RpcService<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

/// Records the RPC when dropped: with the code set on completion, or CANCELLED.
/// Every method the server answers; any other path is counted as `unknown`, so callers
/// (authenticated or not) cannot grow the label set.
const KNOWN_METHODS: &[&str] = &[
    "/kartograf.v1.WorkloadResolver/Resolve",
    "/kartograf.v1.WorkloadResolver/List",
    "/kartograf.v1.WorkloadResolver/Watch",
    "/kartograf.v1.WorkloadResolver/Totals",
    "/kartograf.v1.Definitions/ListDefinitions",
    "/kartograf.v1.Definitions/ValidateDefinition",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// The metric and span name of a request path.
fn method_label(path: &str) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|m| **m == path)
        .copied()
        .unwrap_or("unknown")
}

struct Outcome {
    metrics: Arc<Metrics>,
    method: &'static str,
    start: Instant,
    span: tracing::Span,
    code: Option<Code>,
}

impl Drop for Outcome {
    fn drop(&mut self) {
        let code = self.code.unwrap_or(Code::Cancelled);
        let elapsed = self.start.elapsed();
        self.metrics.rpc(self.method, code, elapsed);
        self.span.record("rpc.grpc.status_code", code_name(code));
        self.span
            .record("duration_ms", elapsed.as_secs_f64() * 1000.0);
    }
}

fn response_code(headers: &http::HeaderMap) -> Code {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(Code::Ok, Code::from_i32)
}

impl<S, B, RB> tower::Service<http::Request<B>> for RpcService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = method_label(request.uri().path());
        let span = tracing::info_span!(
            "rpc",
            otel.name = method,
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.method = method,
            rpc.grpc.status_code = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let outcome = Outcome {
            metrics: self.metrics.clone(),
            method,
            start: Instant::now(),
            span: span.clone(),
            code: None,
        };
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        Box::pin(
            async move {
                // Moves the whole guard in (not just its `code` field): it records on drop.
                let mut outcome = outcome;
                match future.await {
                    Ok(response) => {
                        outcome.code = Some(response_code(response.headers()));
                        Ok(response)
                    }
                    Err(e) => {
                        let e: BoxError = e.into();
                        outcome.code = Some(if e.is::<tower::load_shed::error::Overloaded>() {
                            Code::ResourceExhausted
                        } else {
                            Code::Unknown
                        });
                        Err(e)
                    }
                }
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::method_label;

    #[test]
    fn only_known_methods_become_labels() {
        assert_eq!(
            method_label("/kartograf.v1.WorkloadResolver/Resolve"),
            "/kartograf.v1.WorkloadResolver/Resolve"
        );
        for path in [
            "/x1",
            "/kartograf.v1.WorkloadResolver/Nope",
            "//kartograf.v1.WorkloadResolver/Resolve",
            "",
        ] {
            assert_eq!(method_label(path), "unknown", "{path}");
        }
    }
}
