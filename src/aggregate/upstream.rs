//! One upstream: how to connect to it, and the task that follows its `Watch`.
//!
//! The task subscribes with the last revision it is current to (0 the first time, and after
//! the upstream's workloads were dropped), applies ADDED/MODIFIED/DELETED as they come, and
//! collects a snapshot (after RESET, or on a first subscription) until SYNCED, then
//! reconciles it against what the aggregator holds: only differences are published (see
//! [`super::session`]). When the stream fails, or the upstream breaks one of the
//! [`Limits`], it marks the upstream stale (with the reason) and reconnects with backoff.

use super::breach::{Breach, ConnectError};
use super::config::UpstreamConfig;
use super::session::Session;
use super::wire;
use super::{Aggregator, Limits};
use crate::proto::v1 as pb;
use futures::FutureExt;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Events applied under one publication at most (a burst is applied in batches).
const BATCH: usize = 512;
/// Bytes of graphs a batch gathers at most (beyond its first event).
const BATCH_BYTES: usize = 8 << 20;

/// What the aggregator knows of one upstream besides its workloads.
#[derive(Debug, Default)]
pub(super) struct State {
    /// Since when (and why) its workloads are served as last seen.
    pub(super) stale: Option<Stale>,
    /// Bumped at every transition to stale, so that an old expiry timer does nothing.
    pub(super) epoch: u64,
    /// Its workloads were dropped after the grace period: the next subscription starts
    /// from a full snapshot.
    pub(super) expired: bool,
    /// It completed a first full sync.
    pub(super) synced: bool,
    /// Clusters its graphs named.
    pub(super) clusters: BTreeSet<String>,
    /// Workloads the aggregator holds from it.
    pub(super) workloads: usize,
    /// Bytes the aggregator holds for its graphs ([`super::cost::held`]).
    pub(super) bytes: usize,
    /// Graphs refused (naming a cluster it may not speak for, or not decoding).
    pub(super) refused: u64,
    /// Why the last one was refused.
    pub(super) refusal: Option<String>,
}

/// Why an upstream is stale.
#[derive(Debug, Clone)]
pub(super) struct Stale {
    pub(super) since: Instant,
    pub(super) at: SystemTime,
    pub(super) reason: String,
}

/// One upstream of the aggregator.
pub struct Upstream {
    /// How to reach it.
    pub config: UpstreamConfig,
    /// Its workloads' keys on the board start with this.
    pub(super) prefix: String,
    pub(super) state: Mutex<State>,
    /// The connection (for forwarded Resolve calls) and the token sent on it.
    connection: Mutex<Option<(Channel, Option<MetadataValue<Ascii>>)>>,
    /// The task that follows its Watch.
    pub(super) task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Upstream {
    pub(super) fn new(config: UpstreamConfig) -> Upstream {
        Upstream {
            prefix: format!("{}\u{0}", config.name),
            config,
            state: Mutex::default(),
            connection: Mutex::default(),
            task: Mutex::default(),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub(super) fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The board key of its workload `uid`.
    pub(super) fn key(&self, uid: &str) -> String {
        format!("{}{uid}", self.prefix)
    }

    /// True while it has a connection (it is followed, or being resynced).
    pub fn connected(&self) -> bool {
        self.connection().is_some()
    }

    /// True when it serves `cluster`: its name, or a cluster its graphs named.
    pub fn serves(&self, cluster: &str) -> bool {
        cluster == self.config.name || self.state().clusters.contains(cluster)
    }

    /// True when its graphs named more than one cluster (it is an aggregator itself).
    pub(super) fn several_clusters(&self) -> bool {
        self.state().clusters.len() > 1
    }

    /// The current connection, if it has one.
    pub(super) fn connection(&self) -> Option<(Channel, Option<MetadataValue<Ascii>>)> {
        self.connection.lock().clone()
    }

    fn set_connection(&self, connection: Option<(Channel, Option<MetadataValue<Ascii>>)>) {
        *self.connection.lock() = connection;
    }

    /// Connects (TLS and token as configured).
    async fn connect(
        &self,
        timeout: Duration,
    ) -> Result<(Channel, Option<MetadataValue<Ascii>>), ConnectError> {
        let c = &self.config;
        let read = |field: &'static str, path: &std::path::Path| {
            std::fs::read(path).map_err(|source| ConnectError::Read {
                field,
                path: path.to_owned(),
                source,
            })
        };
        let mut endpoint = Endpoint::from_shared(c.url.clone())
            .map_err(|source| ConnectError::Url {
                url: c.url.clone(),
                source,
            })?
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        if let Some(ca) = &c.ca_file {
            let mut tls =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read("caFile", ca)?));
            if let (Some(cert), Some(key)) = (&c.cert_file, &c.key_file) {
                tls = tls.identity(Identity::from_pem(
                    read("certFile", cert)?,
                    read("keyFile", key)?,
                ));
            }
            if let Some(name) = &c.server_name {
                tls = tls.domain_name(name.clone());
            }
            endpoint = endpoint.tls_config(tls).map_err(ConnectError::Tls)?;
        }
        let token = match &c.token_file {
            Some(path) => {
                let text = String::from_utf8(read("tokenFile", path)?)
                    .map_err(|_| ConnectError::TokenNotUtf8(path.clone()))?;
                Some(
                    format!("Bearer {}", text.trim())
                        .parse::<MetadataValue<Ascii>>()
                        .map_err(|_| ConnectError::TokenNotMetadata(path.clone()))?,
                )
            }
            None => None,
        };
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| ConnectError::Connect {
                url: c.url.clone(),
                source,
            })?;
        Ok((channel, token))
    }
}

/// How a subscription ended.
struct Ended {
    reason: String,
    /// It had reached SYNCED (the backoff starts over).
    synced: bool,
}

/// Follows `upstream` until the task is aborted.
pub(super) async fn run(aggregator: Arc<Aggregator>, upstream: Arc<Upstream>) {
    let mut since = 0u64;
    let mut attempt = 0u32;
    let mut delays = aggregator.settings.backoff.delays();
    loop {
        if std::mem::take(&mut upstream.state().expired) {
            since = 0;
        }
        let ended = follow(&aggregator, &upstream, &mut since).await;
        upstream.set_connection(None);
        if ended.synced {
            attempt = 0;
            delays = aggregator.settings.backoff.delays();
        }
        // The first failure of a streak, then every tenth, so an upstream that stays down is
        // still visible in the log without a line per attempt.
        if attempt.is_multiple_of(10) {
            tracing::warn!(upstream = %upstream.name(), reason = %ended.reason, attempt, "upstream lost; reconnecting");
        } else {
            tracing::debug!(upstream = %upstream.name(), reason = %ended.reason, attempt, "upstream lost; reconnecting");
        }
        aggregator.mark_stale(&upstream, &ended.reason);
        tokio::time::sleep(delays.next_delay()).await;
        attempt = attempt.saturating_add(1);
    }
}

/// A one-line description of a status from an upstream (or of the Watch client refusing
/// one of its messages).
fn describe(status: &tonic::Status, limits: &Limits) -> String {
    if status.code() == tonic::Code::OutOfRange
        && status.message().contains("message length too large")
    {
        return format!(
            "it sent a message larger than {} bytes (--upstream-max-graph-bytes): {}",
            limits.max_graph_bytes,
            crate::excerpt::excerpt(status.message(), 512)
        );
    }
    format!(
        "{}: {}",
        crate::metrics::code_name(status.code()),
        crate::excerpt::excerpt(status.message(), 512)
    )
}

/// One subscription: connect, Watch from `since`, apply until the stream ends or the
/// upstream breaks a bound.
async fn follow(aggregator: &Arc<Aggregator>, upstream: &Arc<Upstream>, since: &mut u64) -> Ended {
    let lost = |reason: String, synced: bool| Ended { reason, synced };
    let limits = aggregator.settings.limits;
    let (channel, token) = match upstream.connect(aggregator.settings.connect_timeout).await {
        Ok(c) => c,
        Err(e) => return lost(e.to_string(), false),
    };
    let request = pb::WatchRequest {
        since_revision: *since,
        view: pb::View::Full as i32,
        ..Default::default()
    };
    let mut stream = match wire::watch(
        channel.clone(),
        token.as_ref(),
        request,
        wire::event_limit(limits.max_graph_bytes),
    )
    .await
    {
        Ok(s) => s,
        Err(status) => return lost(describe(&status, &limits), false),
    };
    upstream.set_connection(Some((channel, token)));
    tracing::info!(upstream = %upstream.name(), since = *since, "following upstream");
    let mut session = Session::new(*since, limits);
    loop {
        let next = match session.deadline() {
            Some(deadline) => {
                match tokio::time::timeout_at(deadline.into(), stream.message()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let timeout = limits.snapshot_timeout;
                        return lost(Breach::SnapshotTimeout { timeout }.to_string(), false);
                    }
                }
            }
            None => stream.message().await,
        };
        let first = match next {
            Ok(Some(event)) => event,
            Ok(None) => {
                return lost(
                    "the upstream ended the Watch stream".to_owned(),
                    session.synced,
                );
            }
            Err(status) => return lost(describe(&status, &limits), session.synced),
        };
        // What else has arrived already joins this batch (up to a bound in events and
        // bytes: a batch is held in memory until applied).
        let mut bytes = first.workload.as_ref().map_or(0, bytes::Bytes::len);
        let mut batch = vec![first];
        let mut end = None;
        while batch.len() < BATCH && bytes < BATCH_BYTES {
            match stream.message().now_or_never() {
                Some(Ok(Some(event))) => {
                    bytes += event.workload.as_ref().map_or(0, bytes::Bytes::len);
                    batch.push(event);
                }
                Some(Ok(None)) => {
                    end = Some("the upstream ended the Watch stream".to_owned());
                    break;
                }
                Some(Err(status)) => {
                    end = Some(describe(&status, &limits));
                    break;
                }
                None => break,
            }
        }
        let applied = session.events(aggregator, upstream, batch);
        *since = session.since;
        if let Err(reason) = applied {
            tracing::debug!(upstream = %upstream.name(), %reason, "upstream isolated: it broke a bound");
            return lost(reason.to_string(), false);
        }
        if let Some(reason) = end {
            return lost(reason, session.synced);
        }
    }
}
