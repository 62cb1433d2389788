//! Prometheus metrics (all named `kartograf_*`), exposed as OpenMetrics text on the admin
//! port's `/metrics`.
//!
//! Two kinds: event counters kept here (RPCs, Watch subscribers) or by the source that
//! counts them (informer events, read at scrape time), and
//! state computed at every scrape from what the server serves ([`Observed`]: the index, or an
//! aggregator; [`inventory`]: index sizes, definition load errors, diagnostics, per-workload
//! GPUs/pods/phase, the pod-to-workload join, upstreams). The per-workload and per-pod series
//! are never stored, so a deleted workload's series vanish with it.

mod inventory;

pub use inventory::{Observed, UpstreamHealth};

use crate::definition::LoadReport;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    method: String,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

type HistogramFamily = Family<MethodLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs … ~6 s.
    Histogram::new(exponential_buckets(0.0001, 2.5, 13))
}

/// The metrics of one server. Share it as `Arc<Metrics>`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    rpc_requests: Family<RpcLabels, Counter>,
    rpc_duration: HistogramFamily,
    watch_subscribers: Gauge,
    watch_coalesced: Counter,
    /// The Kubernetes source's counters (read at scrape time), once one runs.
    informers: Arc<std::sync::OnceLock<Arc<crate::source::kube::Counters>>>,
    /// The admission policies and the mutating routes' counters, once a server sets them.
    policies: Arc<std::sync::OnceLock<Arc<crate::policy::Live>>>,
    karmada_requests: Family<KarmadaLabels, Counter>,
    karmada_duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KarmadaLabels {
    operation: &'static str,
    kind: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

fn webhook_histogram() -> Histogram {
    // 50 µs … ~0.8 s.
    Histogram::new(exponential_buckets(0.00005, 2.0, 15))
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics over `source` (read at scrape time: the index, or an aggregator) and the
    /// definition load `report`.
    pub fn new(source: Arc<dyn Observed>, report: Arc<LoadReport>) -> Arc<Metrics> {
        let mut registry = Registry::default();
        let rpc_requests = Family::<RpcLabels, Counter>::default();
        registry.register(
            "kartograf_rpc_requests",
            "RPCs handled, by method (request path) and gRPC status code",
            rpc_requests.clone(),
        );
        let rpc_duration: HistogramFamily = Family::new_with_constructor(latency_histogram);
        registry.register(
            "kartograf_rpc_duration_seconds",
            "Time from request to response headers, by method (for Watch: until the stream starts)",
            rpc_duration.clone(),
        );
        let watch_subscribers = Gauge::default();
        registry.register(
            "kartograf_watch_subscribers",
            "Open Watch streams",
            watch_subscribers.clone(),
        );
        let watch_coalesced = Counter::default();
        registry.register(
            "kartograf_watch_coalesced",
            "Watch changes merged into a later change of the same workload for a slow subscriber",
            watch_coalesced.clone(),
        );
        let karmada_requests = Family::<KarmadaLabels, Counter>::default();
        registry.register(
            "kartograf_karmada_requests",
            "Karmada interpreter webhook requests, by operation, kind (a catalog root kind, \
             or empty) and result (successful, unsuccessful, bad_request)",
            karmada_requests.clone(),
        );
        let karmada_duration: Family<OperationLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(webhook_histogram);
        registry.register(
            "kartograf_karmada_duration_seconds",
            "Time from a Karmada interpreter request's body read to its answer, by operation",
            karmada_duration.clone(),
        );
        let informers = Arc::new(std::sync::OnceLock::new());
        let policies = Arc::new(std::sync::OnceLock::new());
        registry.register_collector(Box::new(inventory::Inventory {
            source,
            report,
            informers: informers.clone(),
            policies: policies.clone(),
        }));
        Arc::new(Metrics {
            registry,
            rpc_requests,
            rpc_duration,
            watch_subscribers,
            watch_coalesced,
            informers,
            policies,
            karmada_requests,
            karmada_duration,
        })
    }

    /// Records one Karmada interpreter request. Labels stay bounded: `operation` is one of
    /// the operations Karmada defines (the caller names any other `other`), and `kind` is
    /// only ever a definition's root kind.
    pub fn karmada_request(
        &self,
        operation: &'static str,
        kind: &str,
        result: &'static str,
        elapsed: Duration,
    ) {
        self.karmada_duration
            .get_or_create(&OperationLabels { operation })
            .observe(elapsed.as_secs_f64());
        self.karmada_requests
            .get_or_create(&KarmadaLabels {
                operation,
                kind: kind.to_owned(),
                result,
            })
            .inc();
    }

    /// Records one finished RPC.
    pub fn rpc(&self, method: &str, code: tonic::Code, elapsed: Duration) {
        let method = method.to_owned();
        self.rpc_duration
            .get_or_create(&MethodLabels {
                method: method.clone(),
            })
            .observe(elapsed.as_secs_f64());
        self.rpc_requests
            .get_or_create(&RpcLabels {
                method,
                code: code_name(code),
            })
            .inc();
    }

    /// A Watch stream opened; the returned guard closes it when dropped.
    pub fn watch_subscribed(self: &Arc<Self>) -> WatchSubscription {
        self.watch_subscribers.inc();
        WatchSubscription(self.clone())
    }

    /// A Watch stream closed (done by dropping [`WatchSubscription`]).
    pub fn watch_unsubscribed(&self) {
        self.watch_subscribers.dec();
    }

    /// `n` changes were merged into later ones for a slow Watch subscriber.
    pub fn watch_coalesced(&self, n: usize) {
        if n > 0 {
            self.watch_coalesced.inc_by(n as u64);
        }
    }

    /// Exposes the informer counters of the Kubernetes source (events, restarts and
    /// errors by kind) from now on; only the first source given is read.
    pub fn count_informers(&self, counters: Arc<crate::source::kube::Counters>) {
        let _ = self.informers.set(counters);
    }

    /// Exposes the admission policies' state and the mutating routes' counters from now on;
    /// only the first set given is read.
    pub fn count_policies(&self, policies: Arc<crate::policy::Live>) {
        let _ = self.policies.set(policies);
    }

    /// Every metric, in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }
}

/// An open Watch stream; dropping it decrements `kartograf_watch_subscribers`.
pub struct WatchSubscription(Arc<Metrics>);

impl Drop for WatchSubscription {
    fn drop(&mut self) {
        self.0.watch_unsubscribed();
    }
}

/// The canonical name of a gRPC status code (`OK`, `NOT_FOUND`, …).
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
