//! `kartograf serve`: the long-running gRPC service, over one cluster (Kubernetes or a
//! manifest directory) or, with `--upstream`/`--upstreams`, as an aggregator of other
//! kartografs.

use super::DefinitionArgs;
use crate::aggregate::{self, Aggregator, UpstreamConfig};
use crate::definition::{Catalog, LoadReport};
use crate::index::Index;
use crate::server::{self, Settings, Shared, TlsFiles};
use crate::source::definitions::{self, Layers};
use crate::source::{kube, manifests};
use crate::telemetry::{self, Logging};
use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Serve the cluster described by the manifest files below DIR (watched for changes).
    /// Without it, kartograf watches the Kubernetes cluster of the kubeconfig (or in-cluster
    /// config).
    #[arg(long, env = "KARTOGRAF_MANIFESTS", value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// Keep only this namespace's objects (namespace sharding: one replica per namespace,
    /// put back together by an aggregator). From Kubernetes only this namespace is read; from
    /// --manifests the other namespaces' objects are skipped. Default: all namespaces.
    #[arg(long, env = "KARTOGRAF_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,
    /// The cluster every graph names (`Workload.cluster`). Default: the kubeconfig's current
    /// context, or `default` (--manifests, in-cluster config). When given, metrics label
    /// per-workload series with `cluster` too.
    #[arg(
        long,
        env = "KARTOGRAF_CLUSTER_NAME",
        value_name = "NAME",
        conflicts_with_all = ["upstream", "upstreams"]
    )]
    pub cluster_name: Option<String>,
    /// Aggregate another kartograf: serve the union of every upstream's workloads (told
    /// apart by cluster) instead of reading a cluster. NAME is the upstream's cluster name,
    /// URL `http://host:port` (repeatable; TLS and tokens need --upstreams).
    #[arg(
        long = "upstream",
        env = "KARTOGRAF_UPSTREAM",
        value_name = "NAME=URL",
        value_delimiter = ',',
        conflicts_with_all = ["manifests", "namespace"]
    )]
    pub upstream: Vec<String>,
    /// Aggregate the upstreams listed in FILE (YAML: name, url, caFile, certFile, keyFile,
    /// tokenFile, serverName per upstream), re-read when it changes.
    #[arg(
        long,
        env = "KARTOGRAF_UPSTREAMS",
        value_name = "FILE",
        conflicts_with_all = ["manifests", "namespace"]
    )]
    pub upstreams: Option<PathBuf>,
    /// How long an unreachable (or resyncing) upstream's workloads stay, marked with an
    /// `upstream_stale` diagnostic, before they are deleted.
    #[arg(long, env = "KARTOGRAF_UPSTREAM_GRACE", default_value = "60s", value_parser = super::resolve::parse_duration)]
    pub upstream_grace: Duration,
    /// Largest graph (encoded) an upstream may send, and 16 times this decoded; a larger
    /// one isolates the upstream (its connection dropped, marked stale with the reason,
    /// reconnected with backoff).
    #[arg(long, env = "KARTOGRAF_UPSTREAM_MAX_GRAPH_BYTES", default_value = "16Mi", value_parser = super::parse_bytes)]
    pub upstream_max_graph_bytes: u64,
    /// Workloads held from one upstream (and in one snapshot); more isolate the upstream.
    #[arg(
        long,
        env = "KARTOGRAF_UPSTREAM_MAX_WORKLOADS",
        default_value_t = 100_000
    )]
    pub upstream_max_workloads: usize,
    /// Bytes held for one upstream's graphs, encodings and decoded summaries (and in one
    /// snapshot); more isolate the upstream.
    #[arg(long, env = "KARTOGRAF_UPSTREAM_MAX_BYTES", default_value = "2Gi", value_parser = super::parse_bytes)]
    pub upstream_max_bytes: u64,
    /// How long an upstream's snapshot may take to reach SYNCED before it is isolated.
    #[arg(long, env = "KARTOGRAF_UPSTREAM_SNAPSHOT_TIMEOUT", default_value = "5m", value_parser = super::resolve::parse_duration)]
    pub upstream_snapshot_timeout: Duration,
    /// An aggregator is ready at once, serving the upstreams that synced so far, instead of
    /// once every configured upstream synced.
    #[arg(long, env = "KARTOGRAF_SERVE_PARTIAL")]
    pub serve_partial: bool,
    /// How often kinds the cluster does not serve yet are looked up again.
    #[arg(long, env = "KARTOGRAF_REDISCOVER", default_value = "30s", value_parser = super::resolve::parse_duration)]
    pub rediscover: Duration,
    /// gRPC listen address.
    #[arg(long, env = "KARTOGRAF_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Admin HTTP listen address (`/livez`, `/readyz`, `/metrics`, the web view `/ui/`).
    #[arg(long, env = "KARTOGRAF_ADMIN_LISTEN", default_value = "0.0.0.0:9090")]
    pub admin_listen: SocketAddr,
    /// Changes kept for Watch resume (`since_revision`).
    #[arg(long, env = "KARTOGRAF_HISTORY", default_value_t = crate::board::DEFAULT_HISTORY)]
    pub history: usize,
    /// Evaluation deadline of one resolve.
    #[arg(long, env = "KARTOGRAF_RESOLVE_TIMEOUT", default_value = "2s", value_parser = super::resolve::parse_duration)]
    pub resolve_timeout: Duration,
    /// Per-request timeout (a shorter `grpc-timeout` from the client wins).
    #[arg(long, env = "KARTOGRAF_REQUEST_TIMEOUT", default_value = "30s", value_parser = super::resolve::parse_duration)]
    pub request_timeout: Duration,
    /// Concurrent requests before new ones are shed with RESOURCE_EXHAUSTED.
    #[arg(long, env = "KARTOGRAF_CONCURRENCY_LIMIT", default_value_t = 1024)]
    pub concurrency_limit: usize,
    /// Largest request message accepted, in bytes (larger ones fail with OUT_OF_RANGE).
    #[arg(long, env = "KARTOGRAF_MAX_MESSAGE_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_message_bytes: usize,
    /// HTTP/2 keepalive ping interval; 0 turns pings off.
    #[arg(long, env = "KARTOGRAF_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = super::resolve::parse_duration)]
    pub keepalive_interval: Duration,
    /// How long a keepalive ping may go unanswered before the connection is closed.
    #[arg(long, env = "KARTOGRAF_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = super::resolve::parse_duration)]
    pub keepalive_timeout: Duration,
    /// Connections are closed gracefully (GOAWAY) after this age so clients rebalance across
    /// replicas; 0 keeps them forever.
    #[arg(long, env = "KARTOGRAF_MAX_CONNECTION_AGE", default_value = "30m", value_parser = super::resolve::parse_duration)]
    pub max_connection_age: Duration,
    /// Random spread of --max-connection-age, as a fraction (0.1 = ±10%).
    #[arg(
        long,
        env = "KARTOGRAF_MAX_CONNECTION_AGE_JITTER",
        default_value_t = 0.1
    )]
    pub max_connection_age_jitter: f64,
    /// How long open streams (Watch) may continue after the connection's age before it is
    /// closed; clients then resume with since_revision.
    #[arg(long, env = "KARTOGRAF_MAX_CONNECTION_AGE_GRACE", default_value = "60s", value_parser = super::resolve::parse_duration)]
    pub max_connection_age_grace: Duration,
    /// HTTP/2 streams per connection (each Watch is one).
    #[arg(long, env = "KARTOGRAF_MAX_CONCURRENT_STREAMS", default_value_t = 2048)]
    pub max_concurrent_streams: u32,
    /// gRPC connections open at once; more are accepted and closed at once (the admin port
    /// keeps at most 256).
    #[arg(long, env = "KARTOGRAF_MAX_CONNECTIONS", default_value_t = server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Time a new gRPC connection has to send the HTTP/2 preface, and an admin request to
    /// send its head (also between requests on a kept-alive admin connection).
    #[arg(long, env = "KARTOGRAF_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = super::resolve::parse_duration)]
    pub handshake_timeout: Duration,
    /// A gRPC connection without an open request (open Watch streams count, however quiet),
    /// or an admin connection on which no byte moved, is closed after this long.
    #[arg(long, env = "KARTOGRAF_IDLE_TIMEOUT", default_value = "5m", value_parser = super::resolve::parse_duration)]
    pub idle_timeout: Duration,
    /// A Watch subscriber whose events wait this long for its client to take them is cut
    /// off: with RESOURCE_EXHAUSTED if it reads again, with its connection after twice this
    /// long if it does not. It reconnects and resumes with since_revision.
    #[arg(long, env = "KARTOGRAF_WATCH_STALL_TIMEOUT", default_value = "30s", value_parser = super::resolve::parse_duration)]
    pub watch_stall_timeout: Duration,
    /// On SIGTERM, how long to keep answering (health already NOT_SERVING, Watch streams
    /// ended) before closing connections; the process exits within 10 s regardless.
    #[arg(long, env = "KARTOGRAF_SHUTDOWN_DELAY", default_value = "1s", value_parser = super::resolve::parse_duration)]
    pub shutdown_delay: Duration,
    /// Serve TLS with this PEM certificate chain (needs --tls-key).
    #[arg(
        long,
        env = "KARTOGRAF_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        env = "KARTOGRAF_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA bundle (mutual TLS).
    #[arg(
        long,
        env = "KARTOGRAF_TLS_CLIENT_CA",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// Require bearer tokens listed in FILE (`TOKEN NAME SCOPES` per line; re-read when it
    /// changes). Health checks stay open.
    #[arg(long, env = "KARTOGRAF_AUTH_TOKENS", value_name = "FILE")]
    pub auth_tokens: Option<PathBuf>,
    /// Serve the admin port's /metrics only to bearer tokens of --auth-tokens with the
    /// `metrics` scope (or `*`); /livez and /readyz stay open.
    #[arg(long, env = "KARTOGRAF_METRICS_AUTH", requires = "auth_tokens")]
    pub metrics_auth: bool,
    /// Without --auth-tokens, the web view (`/ui/`) answers only requests whose `Host` is an
    /// IP address, `localhost`, or one of these names (comma-separated; any port). Others get
    /// 403, so a page of another site cannot read it through DNS rebinding.
    #[arg(
        long,
        env = "KARTOGRAF_UI_ALLOWED_HOSTS",
        value_name = "HOSTS",
        value_delimiter = ','
    )]
    pub ui_allowed_hosts: Vec<String>,
    /// `Watch` streams open at once across all connections; one more is refused with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "KARTOGRAF_MAX_WATCH_STREAMS", default_value_t = server::DEFAULT_MAX_WATCH_STREAMS)]
    pub max_watch_streams: usize,
    /// Threads that evaluate callers' data (inline Resolve, ValidateDefinition previews, the
    /// webhooks); 0: one per core. A request waits in a queue of four per thread for at most
    /// --eval-queue-wait, then is refused (RESOURCE_EXHAUSTED; HTTP 429 on the webhooks).
    #[arg(long, env = "KARTOGRAF_EVAL_THREADS", default_value_t = 0)]
    pub eval_threads: usize,
    /// Longest wait of a request for an evaluation thread before it is refused with
    /// RESOURCE_EXHAUSTED (gRPC) or HTTP 429 with Retry-After (webhooks).
    #[arg(long, env = "KARTOGRAF_EVAL_QUEUE_WAIT", default_value = "250ms", value_parser = super::resolve::parse_duration)]
    pub eval_queue_wait: Duration,
    /// Connections one IP address may keep open on the admin, probe and webhook ports; at
    /// this cap (or a port's total) a new connection evicts the one that has waited longest
    /// for a request head.
    #[arg(long, env = "KARTOGRAF_MAX_CONNECTIONS_PER_PEER", default_value_t = crate::server::http::DEFAULT_MAX_PER_PEER)]
    pub max_connections_per_peer: usize,
    /// Bytes of request bodies the webhook listener holds at once; a request whose body does
    /// not fit is refused with HTTP 429 before it is read.
    #[arg(long, env = "KARTOGRAF_MAX_BODY_BYTES_IN_FLIGHT", default_value_t = crate::server::http::DEFAULT_BODY_BUDGET)]
    pub max_body_bytes_in_flight: usize,
    /// Serve /livez and /readyz alone on this address too (for the kubelet's probes, as
    /// controller-runtime's --health-probe-bind-address); the admin port keeps them.
    #[arg(long, env = "KARTOGRAF_PROBE_LISTEN", value_name = "ADDR")]
    pub probe_listen: Option<SocketAddr>,
    /// Serve the webhooks (Karmada's resource interpreter, `POST /karmada/interpret`; Karta
    /// admission, `POST /karta/validate` and `POST /karta/mutate`; policies and workload
    /// labels, `POST /mutate/workloads` and `POST /mutate/pods`) on
    /// this address: HTTPS with --webhook-tls-cert/--webhook-tls-key, plain HTTP without.
    #[arg(long, env = "KARTOGRAF_WEBHOOK_LISTEN", value_name = "ADDR")]
    pub webhook_listen: Option<SocketAddr>,
    /// PEM certificate chain of the webhook listener (re-read when it changes).
    #[arg(
        long,
        env = "KARTOGRAF_WEBHOOK_TLS_CERT",
        value_name = "FILE",
        requires_all = ["webhook_tls_key", "webhook_listen"]
    )]
    pub webhook_tls_cert: Option<PathBuf>,
    /// PEM private key of --webhook-tls-cert (re-read when it changes).
    #[arg(
        long,
        env = "KARTOGRAF_WEBHOOK_TLS_KEY",
        value_name = "FILE",
        requires = "webhook_tls_cert"
    )]
    pub webhook_tls_key: Option<PathBuf>,
    /// Admission policies (YAML; see docs/policies.md) that `POST /mutate/workloads` applies:
    /// re-read when the file changes; a file that fails its checks is reported (log,
    /// ListSources, metrics) and the last good policies stay in force.
    #[arg(long, env = "KARTOGRAF_POLICIES", value_name = "FILE")]
    pub policies: Option<PathBuf>,
    /// Label cached pods of workloads whose `kartograf.io/workload-*` labels are missing or
    /// stale, as `POST /mutate/pods` would have (a pod created before its owner was cached,
    /// or before the webhook was registered). Kubernetes source only; needs `patch` on pods
    /// (ClusterRole kartograf-policies in deploy/policies/).
    #[arg(long, env = "KARTOGRAF_LABEL_PODS")]
    pub label_pods: bool,
    /// Namespaces whose pods the labelling pass leaves alone (comma-separated).
    #[arg(
        long,
        env = "KARTOGRAF_LABEL_PODS_SKIP_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system",
        value_name = "NAMESPACES"
    )]
    pub label_pods_skip_namespaces: Vec<String>,
    /// How often the labelling pass looks at every workload's pods (it looks at changed
    /// workloads' pods after every change).
    #[arg(long, env = "KARTOGRAF_LABEL_PODS_RESYNC", default_value = "60s", value_parser = super::resolve::parse_duration, value_name = "DURATION")]
    pub label_pods_resync: Duration,
    /// Largest webhook request body, in bytes (larger ones get HTTP 413).
    #[arg(long, env = "KARTOGRAF_WEBHOOK_MAX_BODY_BYTES", default_value_t = crate::webhook::DEFAULT_MAX_BODY)]
    pub webhook_max_body_bytes: usize,
    #[command(flatten)]
    pub definitions: DefinitionArgs,
    #[command(flatten)]
    pub budget: super::BudgetArgs,
    #[command(flatten)]
    pub file_limits: super::FileArgs,
    #[command(flatten)]
    pub karta: super::karta_status::KartaStatusArgs,
}

/// Runs `serve` until SIGINT/SIGTERM; sets up logging and tracing first.
pub fn run(args: Args, logging: &Logging) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let telemetry = {
        let _entered = runtime.enter();
        telemetry::init(logging, "info", true)
    };
    let result = runtime.block_on(serve(args));
    // Exports the last spans; the runtime (still alive here) carries the exporter's connection.
    telemetry.shutdown();
    // Blocking tasks still running (a directory read) do not hold the exit up.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The cluster name of `serve` without upstreams, and whether it was given explicitly.
fn cluster_name(args: &Args) -> anyhow::Result<(String, bool)> {
    if let Some(name) = &args.cluster_name {
        if !server::validate::is_cluster_name(name) {
            anyhow::bail!(
                "--cluster-name {name:?}: a cluster name is 1 to 253 bytes without whitespace or control characters"
            );
        }
        return Ok((name.clone(), true));
    }
    if args.manifests.is_some() {
        return Ok(("default".to_owned(), false));
    }
    let context = ::kube::config::Kubeconfig::read()
        .ok()
        .and_then(|k| k.current_context)
        .filter(|c| server::validate::is_cluster_name(c));
    Ok((context.unwrap_or_else(|| "default".to_owned()), false))
}

async fn serve(args: Args) -> anyhow::Result<ExitCode> {
    args.budget.apply();
    args.file_limits.apply();
    let report = Arc::new(LoadReport::default());
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    // Every long-lived task is watched: one that ends (none should) or panics is logged and
    // ends the process with an error, so the orchestrator restarts it instead of keeping a
    // replica whose source silently stopped.
    let mut tasks = Tasks::default();
    let policies = match &args.policies {
        Some(path) => {
            let policies =
                crate::policy::Live::load(path).map_err(|e| anyhow::anyhow!("--policies: {e}"))?;
            tracing::info!(policies = policies.current().len(), file = %path.display(), "admission policies loaded");
            tasks.watch(
                "policy file",
                tokio::spawn(reload_policies(policies.clone())),
            );
            policies
        }
        None => crate::policy::Live::empty(),
    };
    let (mut shared, origin) = if args.upstream.is_empty() && args.upstreams.is_none() {
        serve_cluster(&args, report, policies.clone(), shutdown_rx, &mut tasks).await?
    } else {
        if args.label_pods {
            anyhow::bail!(
                "--label-pods labels a cluster's pods: it needs the Kubernetes source, not upstreams"
            );
        }
        serve_upstreams(&args, report, shutdown_rx, &mut tasks)?
    };
    shared = shared.with_policies(policies);
    let wait = positive(args.eval_queue_wait);
    shared = shared.with_evaluations(if args.eval_threads > 0 {
        server::evaluations::Evaluations::bounded(args.eval_threads, 4 * args.eval_threads, wait)
    } else {
        server::evaluations::Evaluations::for_machine_waiting(wait)
    });
    shared = shared
        .with_ui_hosts(args.ui_allowed_hosts.clone())
        .with_max_watch_streams(args.max_watch_streams);
    shared.metrics.count_policies(shared.policies.clone());
    let tokens = match &args.auth_tokens {
        Some(path) => {
            let tokens = Arc::new(server::Tokens::load(path).map_err(anyhow::Error::msg)?);
            tokens.spawn_reloader(Duration::from_secs(1));
            Some(tokens)
        }
        None => None,
    };
    let listener = crate::server::conn::listen(args.listen)
        .with_context(|| format!("binding the gRPC port {}", args.listen))?;
    let local = listener.local_addr()?;
    let admin_listener = crate::server::conn::listen(args.admin_listen)
        .with_context(|| format!("binding the admin port {}", args.admin_listen))?;
    let admin_local = admin_listener.local_addr()?;
    let tls = args.tls_cert.is_some();
    let metrics_auth = args.metrics_auth;
    tracing::info!(grpc = %local, admin = %admin_local, source = %origin, tls, metrics_auth, "kartograf serving");
    let metrics_tokens = if args.metrics_auth {
        tokens.clone()
    } else {
        None
    };
    let admin_limits = crate::admin::Limits {
        header_read_timeout: positive(args.handshake_timeout),
        idle_timeout: positive(args.idle_timeout),
        max_per_peer: args.max_connections_per_peer,
    };
    let admin = tokio::spawn(crate::admin::serve_with_ui(
        admin_listener,
        shared.clone(),
        metrics_tokens,
        tokens.clone(),
        admin_limits,
    ));
    let admin_watch = admin.abort_handle();
    if let Some(addr) = args.probe_listen {
        let probe_listener = crate::server::conn::listen(addr)
            .with_context(|| format!("binding the probe port {addr}"))?;
        tracing::info!(probes = %probe_listener.local_addr()?, "probe listener");
        tasks.watch(
            "probe port",
            tokio::spawn(crate::admin::serve_probes(
                probe_listener,
                shared.clone(),
                admin_limits,
            )),
        );
    }
    let settings = Settings {
        listen: local,
        request_timeout: args.request_timeout,
        concurrency_limit: args.concurrency_limit,
        max_message_bytes: args.max_message_bytes,
        keepalive_interval: nonzero(args.keepalive_interval),
        keepalive_timeout: args.keepalive_timeout,
        max_connection_age: nonzero(args.max_connection_age),
        max_connection_age_jitter: args.max_connection_age_jitter,
        max_connection_age_grace: args.max_connection_age_grace,
        max_concurrent_streams: args.max_concurrent_streams,
        shutdown_delay: args.shutdown_delay.min(Duration::from_secs(8)),
        tls: args
            .tls_cert
            .clone()
            .zip(args.tls_key.clone())
            .map(|(cert, key)| TlsFiles {
                cert,
                key,
                client_ca: args.tls_client_ca.clone(),
            }),
        tokens,
        max_connections: args.max_connections,
        handshake_timeout: positive(args.handshake_timeout),
        idle_timeout: positive(args.idle_timeout),
        watch_stall_timeout: positive(args.watch_stall_timeout),
    };
    if let Some(addr) = args.webhook_listen {
        let webhook_listener = crate::server::conn::listen(addr)
            .with_context(|| format!("binding the webhook port {addr}"))?;
        let webhook = crate::webhook::Settings {
            tls: args
                .webhook_tls_cert
                .clone()
                .zip(args.webhook_tls_key.clone()),
            max_body_bytes: args.webhook_max_body_bytes,
            eval_timeout: args.resolve_timeout,
            request_timeout: args.request_timeout,
            max_connections: args.concurrency_limit,
            max_per_peer: args.max_connections_per_peer,
            body_budget: args.max_body_bytes_in_flight,
        };
        tracing::info!(webhook = %webhook_listener.local_addr()?, tls = webhook.tls.is_some(), "webhook listening");
        let task = crate::webhook::serve(webhook_listener, shared.clone(), webhook);
        tasks.watch(
            "webhook listener",
            tokio::spawn(async move {
                if let Err(e) = task.await {
                    tracing::error!(error = %e, "the webhook listener failed");
                }
            }),
        );
    }
    let mut server = tokio::spawn(server::serve(listener, shared, settings));
    // A server that stops on its own (bad TLS files, a failed listener) ends the process
    // with its error instead of leaving the admin port reporting a healthy process.
    tasks.watch("admin port", admin);
    tokio::select! {
        () = wait_for_signal() => {}
        (name, ended) = tasks.next_exit() => {
            let why = match ended {
                Ok(()) => "it stopped".to_owned(),
                Err(e) => format!("it failed: {e}"),
            };
            tracing::error!(task = name, "a background task ended ({why}); exiting so the process is restarted");
            return Err(anyhow::anyhow!("background task `{name}` ended: {why}"));
        }
        ended = &mut server => {
            admin_watch.abort();
            return match ended {
                Ok(Ok(())) => Err(anyhow::anyhow!("the gRPC server stopped unexpectedly")),
                Ok(Err(e)) => Err(anyhow::anyhow!("gRPC server failed: {e}")),
                Err(e) => Err(anyhow::anyhow!("gRPC server task failed: {e}")),
            };
        }
    }
    tracing::info!("kartograf shutting down");
    let _ = shutdown_tx.send(true);
    let outcome = tokio::time::timeout(Duration::from_secs(10), server).await;
    // The admin port answers (`/readyz` 503) while the gRPC connections drain.
    admin_watch.abort();
    match outcome {
        Ok(Ok(Ok(()))) => Ok(ExitCode::SUCCESS),
        Ok(Ok(Err(e))) => Err(anyhow::anyhow!("server failed: {e}")),
        Ok(Err(e)) => Err(anyhow::anyhow!("server task failed: {e}")),
        Err(_) => {
            tracing::warn!("connections still open after 10s; exiting");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The index of one cluster (Kubernetes or a manifest directory) and its sources.
async fn serve_cluster(
    args: &Args,
    report: Arc<LoadReport>,
    policies: Arc<crate::policy::Live>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    tasks: &mut Tasks,
) -> anyhow::Result<(Shared, String)> {
    if let Some(dir) = &args.manifests
        && !dir.exists()
    {
        anyhow::bail!("--manifests {}: no such file or directory", dir.display());
    }
    let source = if args.manifests.is_some() {
        manifests::SOURCE
    } else {
        kube::SOURCE
    };
    let (cluster, explicit) = cluster_name(args)?;
    let index = Arc::new(
        Index::new(Catalog::default(), &[source])
            .with_history(args.history)
            .with_resolve_timeout(args.resolve_timeout)
            .with_cluster(&cluster, explicit)
            .with_namespace(args.namespace.clone()),
    );
    // Embedded < --definitions DIR < cluster Karta objects, published by one owner.
    let options = args.definitions.options();
    let publisher =
        definitions::Publisher::new(Layers::new(options), index.clone(), report.clone());
    let mut reloader = args
        .definitions
        .definitions
        .as_deref()
        .map(|dir| definitions::Reloader::new(dir, options));
    match reloader.as_mut() {
        Some(r) => r.publish(&publisher),
        None => publisher.update(|_| {}),
    }
    let mut shared = Shared::new(index.clone(), report, shutdown);
    if args.label_pods && args.manifests.is_some() {
        anyhow::bail!(
            "--label-pods labels a cluster's pods: it needs the Kubernetes source, not --manifests"
        );
    }
    let origin = match &args.manifests {
        Some(dir) => {
            tasks.watch(
                "manifest source",
                tokio::spawn(manifests::run(index.clone(), dir.clone())),
            );
            format!("manifests: {} (cluster {cluster})", dir.display())
        }
        None => {
            let client = ::kube::Client::try_default()
                .await
                .context("no --manifests given and no usable kubeconfig or in-cluster config")?;
            let settings = kube::Settings {
                rediscover: args.rediscover,
                counters: {
                    let counters = Arc::default();
                    shared
                        .metrics
                        .count_informers(std::sync::Arc::clone(&counters));
                    counters
                },
                namespace: args.namespace.clone(),
                ..kube::Settings::default()
            };
            if args.karta.karta_status {
                let settings = crate::source::kube::karta::status::Settings {
                    lease: args.karta.lease(),
                    resync: args.karta.karta_resync,
                };
                tasks.watch(
                    "Karta status",
                    tokio::spawn(crate::source::kube::karta::status::run(
                        client.clone(),
                        shared.report.clone(),
                        settings,
                        Some(publisher.subscribe()),
                        shared.shutdown.clone(),
                    )),
                );
            }
            // Owners not cached yet are read directly when a pod is admitted.
            shared = shared.with_owner_lookup(Arc::new(
                crate::source::kube::owner_lookup::ClusterLookup::new(client.clone()),
            ));
            if args.label_pods {
                let settings = crate::source::kube::pod_labels::Settings {
                    skip_namespaces: args.label_pods_skip_namespaces.clone(),
                    resync: args.label_pods_resync,
                };
                tasks.watch(
                    "pod labelling pass",
                    tokio::spawn(crate::source::kube::pod_labels::run(
                        client.clone(),
                        index.clone(),
                        policies,
                        settings,
                        shared.shutdown.clone(),
                    )),
                );
            }
            tasks.watch(
                "Kubernetes source",
                tokio::spawn(kube::run(
                    client,
                    index.clone(),
                    settings,
                    Some(publisher.clone()),
                )),
            );
            format!("the Kubernetes cluster of the current kubeconfig (cluster {cluster})")
        }
    };
    if let Some(r) = reloader {
        tasks.watch(
            "definitions directory",
            tokio::spawn(definitions::run(r, publisher.clone())),
        );
    }
    Ok((shared, origin))
}

/// An aggregator of the `--upstream` and `--upstreams` kartografs.
fn serve_upstreams(
    args: &Args,
    report: Arc<LoadReport>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    tasks: &mut Tasks,
) -> anyhow::Result<(Shared, String)> {
    let flags: Vec<UpstreamConfig> = args
        .upstream
        .iter()
        .map(|f| aggregate::config::parse_flag(f))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    let (all, loaded) = match &args.upstreams {
        Some(path) => {
            let loaded = aggregate::config::load(path, &flags).map_err(anyhow::Error::msg)?;
            (loaded.upstreams, loaded.bytes)
        }
        None => (flags.clone(), Vec::new()),
    };
    // Definitions serve ListDefinitions, ValidateDefinition and inline requests that name no
    // cluster (loaded once: an aggregator resolves nothing else itself).
    let catalog = super::load_catalog(&args.definitions)?;
    let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let settings = aggregate::Settings {
        grace: args.upstream_grace,
        serve_partial: args.serve_partial,
        history: args.history,
        limits: aggregate::Limits {
            max_graph_bytes: bytes(args.upstream_max_graph_bytes),
            max_workloads: args.upstream_max_workloads,
            max_bytes: bytes(args.upstream_max_bytes),
            snapshot_timeout: args.upstream_snapshot_timeout,
        },
        ..aggregate::Settings::default()
    };
    let aggregator = Aggregator::new(catalog, settings);
    let names: Vec<String> = all.iter().map(|u| u.name.clone()).collect();
    aggregator.set_upstreams(all);
    if let Some(path) = &args.upstreams {
        tasks.watch(
            "upstreams file",
            tokio::spawn(aggregate::config::reload(
                aggregator.clone(),
                path.clone(),
                flags,
                loaded,
                Duration::from_secs(2),
            )),
        );
    }
    let shared = Shared::new(aggregator, report, shutdown);
    Ok((shared, format!("aggregator of {}", names.join(", "))))
}

/// The long-lived tasks of `serve`, each with a name for the log.
#[derive(Default)]
struct Tasks(tokio::task::JoinSet<(&'static str, Result<(), tokio::task::JoinError>)>);

impl Tasks {
    /// Watches a spawned task that should run until the process ends.
    fn watch(&mut self, name: &'static str, task: tokio::task::JoinHandle<()>) {
        self.0.spawn(async move { (name, task.await) });
    }

    /// The first task that ends, with how it ended; pending forever when none is watched.
    async fn next_exit(&mut self) -> (&'static str, Result<(), tokio::task::JoinError>) {
        match self.0.join_next().await {
            Some(Ok(ended)) => ended,
            Some(Err(e)) => ("task watcher", Err(e)),
            None => std::future::pending().await,
        }
    }
}

/// Re-reads the policy file every [`POLICY_RELOAD`] when it changed; a refused file is
/// logged once per change and the last good policies stay.
async fn reload_policies(policies: Arc<crate::policy::Live>) {
    let mut tick = tokio::time::interval(POLICY_RELOAD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let live = policies.clone();
        let reloaded = tokio::task::spawn_blocking(move || live.reload_if_changed()).await;
        match reloaded {
            Ok(Ok(true)) => tracing::info!(
                policies = policies.current().len(),
                "admission policies reloaded"
            ),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                "the policy file was refused; the last good policies stay in force"
            ),
            Err(e) => tracing::warn!(error = %e, "reading the policy file failed"),
        }
    }
}

/// How often the policy file is looked at.
const POLICY_RELOAD: Duration = Duration::from_secs(2);

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// A connection bound: at least 100 ms (0 would close every connection at once).
fn positive(d: Duration) -> Duration {
    d.max(Duration::from_millis(100))
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::Tasks;

    #[tokio::test]
    async fn a_watched_task_that_ends_or_panics_is_reported_by_name() {
        let mut tasks = Tasks::default();
        tasks.watch("forever", tokio::spawn(std::future::pending()));
        tasks.watch("source", tokio::spawn(async {}));
        let (name, ended) = tasks.next_exit().await;
        assert_eq!(name, "source");
        assert!(ended.is_ok());
        tasks.watch("broken", tokio::spawn(async { panic!("a source bug") }));
        let (name, ended) = tasks.next_exit().await;
        assert_eq!(name, "broken");
        assert!(ended.is_err_and(|e| e.is_panic()));
    }
}
