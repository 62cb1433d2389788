//! The gRPC services: `WorkloadResolver`, `Definitions`, `grpc.health.v1` and server
//! reflection (v1 and v1alpha), over a [`Store`]: the live index of one cluster, or an
//! aggregator of several.

mod admission;
pub mod auth;
pub mod conn;
mod definitions;
pub mod evaluations;
pub mod http;
mod observe;
mod open;
mod paging;
pub mod patch;
mod resolver;
mod routes;
mod store;
pub mod tls_reload;
pub mod validate;
mod watch;
mod watch_body;
mod wire;

pub use admission::Admission;
pub use auth::Tokens;
pub use definitions::{DefinitionsService, LoadReport};
pub use resolver::ResolverService;
pub use routes::ResolverRoutes;
pub use store::Store;
pub use watch::{DEFAULT_MAX_WATCH_STREAMS, WatchLimit};
pub use wire::{Frame, ResolveFrame, WatchFrame};

use crate::metrics::Metrics;
use crate::proto::v1 as pb;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch as signal;

/// Everything a running server shares.
#[derive(Clone)]
pub struct Shared {
    /// What is served: the index, or an aggregator.
    pub store: Arc<dyn Store>,
    /// Definition load errors, for `ListDefinitions`.
    pub report: Arc<LoadReport>,
    /// Flips to `true` when the server is shutting down.
    pub shutdown: signal::Receiver<bool>,
    /// Metrics (RPCs, Watch); `/metrics` on the admin port exposes them.
    pub metrics: Arc<Metrics>,
    /// Threads that evaluate callers' data (inline Resolve, ValidateDefinition previews).
    pub evaluations: Arc<evaluations::Evaluations>,
    /// `Host` names the web view answers besides IP literals and `localhost` when no bearer
    /// tokens guard it (`serve --ui-allowed-hosts`).
    pub ui_hosts: Arc<[String]>,
    /// The cap on `Watch` streams open at once (`serve --max-watch-streams`).
    pub watch_limit: Arc<WatchLimit>,
    /// The admission policies in force (`serve --policies`), and what the mutating
    /// webhook routes did.
    pub policies: Arc<crate::policy::Live>,
    /// Reads owners the cache has not seen yet straight from the cluster, for
    /// `POST /mutate/pods` (`None`: not from a cluster).
    pub owner_lookup: Option<Arc<dyn crate::board::OwnerLookup>>,
    /// `Patch` answers by reference, remembered per object version.
    pub patch_memo: Arc<patch::PatchMemo>,
}

impl Shared {
    /// Shared state over `store` (an `Arc<Index>` will do) and `report`, with fresh metrics
    /// over both.
    pub fn new(
        store: Arc<dyn Store>,
        report: Arc<LoadReport>,
        shutdown: signal::Receiver<bool>,
    ) -> Shared {
        let metrics = Metrics::new(store.clone(), report.clone());
        Shared {
            store,
            report,
            shutdown,
            metrics,
            evaluations: evaluations::Evaluations::for_machine(),
            ui_hosts: Arc::from(Vec::new()),
            watch_limit: WatchLimit::new(DEFAULT_MAX_WATCH_STREAMS),
            policies: crate::policy::Live::empty(),
            owner_lookup: None,
            patch_memo: patch::PatchMemo::new(),
        }
    }

    /// Applies these admission policies (see [`crate::policy`]).
    pub fn with_policies(mut self, policies: Arc<crate::policy::Live>) -> Shared {
        self.policies = policies;
        self
    }

    /// Reads owners not cached yet through `lookup` at pod admission.
    pub fn with_owner_lookup(mut self, lookup: Arc<dyn crate::board::OwnerLookup>) -> Shared {
        self.owner_lookup = Some(lookup);
        self
    }

    /// Keeps at most `max` `Watch` streams open at once.
    pub fn with_max_watch_streams(mut self, max: usize) -> Shared {
        self.watch_limit = WatchLimit::new(max);
        self
    }

    /// Lets the web view answer these `Host` names too (see [`Shared::ui_hosts`]).
    pub fn with_ui_hosts(mut self, hosts: Vec<String>) -> Shared {
        self.ui_hosts = hosts.into();
        self
    }

    /// Uses `evaluations` for callers' data instead of one thread per core.
    pub fn with_evaluations(mut self, evaluations: Arc<evaluations::Evaluations>) -> Shared {
        self.evaluations = evaluations;
        self
    }
}

/// Server settings: every knob of `kartograf serve` that shapes the gRPC server.
#[derive(Debug, Clone)]
pub struct Settings {
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Per-request timeout (tonic honours a shorter `grpc-timeout`).
    pub request_timeout: Duration,
    /// Requests in flight across all connections before new ones are shed.
    pub concurrency_limit: usize,
    /// Largest request message accepted (decoded), in bytes.
    pub max_message_bytes: usize,
    /// HTTP/2 keepalive ping interval (`None`: no pings).
    pub keepalive_interval: Option<Duration>,
    /// How long a keepalive ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Connections are gracefully closed (GOAWAY) after this age, so clients rebalance across
    /// replicas (`None`: never).
    pub max_connection_age: Option<Duration>,
    /// Fraction (0–1) of random spread applied to `max_connection_age`.
    pub max_connection_age_jitter: f64,
    /// How long streams may continue on a connection past its age before it is closed.
    pub max_connection_age_grace: Duration,
    /// HTTP/2 streams per connection (Watch streams included).
    pub max_concurrent_streams: u32,
    /// After shutdown starts (health NOT_SERVING, Watch streams ended), how long requests are
    /// still answered before connections close.
    pub shutdown_delay: Duration,
    /// Serve TLS with these files (`None`: plaintext).
    pub tls: Option<TlsFiles>,
    /// Require bearer tokens from this set (`None`: no authentication).
    pub tokens: Option<Arc<Tokens>>,
    /// Connections open at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// Time a new connection has to send the HTTP/2 preface.
    pub handshake_timeout: Duration,
    /// A connection without an open request is closed after this long.
    pub idle_timeout: Duration,
    /// A Watch stream whose events wait this long for the client to take them ends with
    /// RESOURCE_EXHAUSTED when it is next polled; one still waiting after twice this long
    /// closes its connection.
    pub watch_stall_timeout: Duration,
}

/// Default of [`Settings::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default of [`Settings::handshake_timeout`] (and of the admin port's header read timeout).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`Settings::idle_timeout`] (and of the admin port's).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of [`Settings::watch_stall_timeout`].
pub const DEFAULT_WATCH_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// PEM files for TLS; with `client_ca`, clients must present a certificate it signed (mTLS).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Server certificate chain.
    pub cert: PathBuf,
    /// Server private key.
    pub key: PathBuf,
    /// CA bundle that client certificates must chain to.
    pub client_ca: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: ([0, 0, 0, 0], 50051).into(),
            request_timeout: Duration::from_secs(30),
            concurrency_limit: 1024,
            max_message_bytes: 4 * 1024 * 1024,
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(10),
            max_connection_age: Some(Duration::from_secs(30 * 60)),
            max_connection_age_jitter: 0.1,
            max_connection_age_grace: Duration::from_secs(60),
            max_concurrent_streams: 2048,
            shutdown_delay: Duration::from_secs(1),
            tls: None,
            tokens: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            watch_stall_timeout: DEFAULT_WATCH_STALL_TIMEOUT,
        }
    }
}

/// A TLS file of the server that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {}: {source}", .path.display())]
pub struct TlsFileError {
    /// The flag naming it (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
    pub flag: &'static str,
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

impl TlsFiles {
    fn config(&self) -> Result<tonic::transport::ServerTlsConfig, TlsFileError> {
        let read = |flag: &'static str, path: &PathBuf| {
            std::fs::read(path).map_err(|source| TlsFileError {
                flag,
                path: path.clone(),
                source,
            })
        };
        let identity = tonic::transport::Identity::from_pem(
            read("--tls-cert", &self.cert)?,
            read("--tls-key", &self.key)?,
        );
        let mut config = tonic::transport::ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &self.client_ca {
            config = config
                .client_ca_root(tonic::transport::Certificate::from_pem(read(
                    "--tls-client-ca",
                    ca,
                )?))
                .client_auth_optional(false);
        }
        Ok(config)
    }
}

/// `age` spread by ±`jitter` (one draw per server), so replicas started together do not
/// close their connections in step.
fn jittered(age: Duration, jitter: f64) -> Duration {
    let unit = crate::random::fraction();
    let factor = 1.0 + jitter.clamp(0.0, 1.0) * (2.0 * unit - 1.0);
    age.mul_f64(factor.max(0.0))
}

/// The health service name that reports SERVING whenever the process is up (liveness).
pub const LIVENESS: &str = "liveness";

/// Serves until `shutdown` flips, on an already bound listener (port 0 in tests).
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Shared,
    settings: Settings,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (reporter, health) = tonic_health::server::health_reporter();
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    // Health follows the index: NOT_SERVING until every source synced, and again at shutdown.
    // Set before the listener serves anything (the reporter starts with "" SERVING).
    let names = [
        "",
        "kartograf.v1.WorkloadResolver",
        "kartograf.v1.Definitions",
    ];
    for n in names {
        reporter
            .set_service_status(n, tonic_health::ServingStatus::NotServing)
            .await;
    }
    // `liveness` answers SERVING while the process runs: a liveness probe must not fail
    // during a long first sync.
    reporter
        .set_service_status(LIVENESS, tonic_health::ServingStatus::Serving)
        .await;
    let health_task = {
        let store = shared.store.clone();
        let mut shutdown = shared.shutdown.clone();
        tokio::spawn(async move {
            let mut serving = false;
            loop {
                let now = store.synced() && !*shutdown.borrow();
                if now != serving {
                    serving = now;
                    let status = if now {
                        tonic_health::ServingStatus::Serving
                    } else {
                        tonic_health::ServingStatus::NotServing
                    };
                    for n in names {
                        reporter.set_service_status(n, status).await;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    r = shutdown.changed() => if r.is_err() { break },
                }
            }
        })
    };

    let resolver = ResolverRoutes::new(
        ResolverService::new(shared.clone()),
        settings.max_message_bytes,
    );
    let definitions =
        pb::definitions_server::DefinitionsServer::new(DefinitionsService::new(shared.clone()))
            .max_decoding_message_size(settings.max_message_bytes);
    let mut shutdown = shared.shutdown.clone();
    let drain = settings.shutdown_delay;
    let gate = conn::Gate::grpc(conn::Limits {
        max_connections: settings.max_connections,
        handshake: settings.handshake_timeout,
        idle: settings.idle_timeout,
        watch_stall: settings.watch_stall_timeout,
    });
    let incoming = conn::incoming(listener, gate, "gRPC");
    let mut builder = tonic::transport::Server::builder()
        .timeout(settings.request_timeout)
        .http2_keepalive_interval(settings.keepalive_interval)
        .http2_keepalive_timeout(Some(settings.keepalive_timeout))
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_connection_age_grace(settings.max_connection_age_grace);
    if let Some(age) = settings.max_connection_age {
        builder = builder.max_connection_age(jittered(age, settings.max_connection_age_jitter));
    }
    if let Some(tls) = &settings.tls {
        builder = builder.tls_config(tls.config()?)?;
    }
    let result = builder
        .layer(
            tower::ServiceBuilder::new()
                .layer(open::OpenLayer)
                .layer(observe::RpcLayer::new(shared.metrics.clone()))
                .layer(Admission::new(
                    settings.concurrency_limit,
                    settings.tokens.clone(),
                ))
                .into_inner(),
        )
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(resolver)
        .add_service(definitions)
        .serve_with_incoming_shutdown(incoming, async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
            // Health already says NOT_SERVING and Watch streams are ending; keep answering
            // for a moment so load balancers see it before connections are closed.
            tokio::time::sleep(drain).await;
        })
        .await;
    health_task.abort();
    result.map_err(Into::into)
}
