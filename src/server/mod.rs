//! The gRPC services: `WorkloadResolver`, `Definitions`, `grpc.health.v1` and server
//! reflection (v1 and v1alpha), over the [`Index`].

mod definitions;
mod resolver;
mod routes;
mod watch;
mod wire;

pub use definitions::{DefinitionsService, LoadReport};
pub use resolver::ResolverService;
pub use routes::ResolverRoutes;
pub use wire::{Frame, ResolveFrame, WatchFrame};

use crate::index::Index;
use crate::proto::v1 as pb;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch as signal;

/// Everything a running server shares.
#[derive(Clone)]
pub struct Shared {
    /// The index.
    pub index: Arc<Index>,
    /// Definition load errors, for `ListDefinitions`.
    pub report: Arc<LoadReport>,
    /// Flips to `true` when the server is shutting down.
    pub shutdown: signal::Receiver<bool>,
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Per-request timeout (tonic honours a shorter `grpc-timeout`).
    pub request_timeout: Duration,
    /// Concurrent requests across all connections.
    pub concurrency_limit: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: ([0, 0, 0, 0], 50051).into(),
            request_timeout: Duration::from_secs(30),
            concurrency_limit: 1024,
        }
    }
}

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
    let health_task = {
        let index = shared.index.clone();
        let mut shutdown = shared.shutdown.clone();
        tokio::spawn(async move {
            let names = [
                "",
                "kartograf.v1.WorkloadResolver",
                "kartograf.v1.Definitions",
            ];
            let mut serving = false;
            for n in names {
                reporter
                    .set_service_status(n, tonic_health::ServingStatus::NotServing)
                    .await;
            }
            loop {
                let now = index.synced() && !*shutdown.borrow();
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

    let resolver = ResolverRoutes::new(ResolverService::new(shared.clone()));
    let definitions =
        pb::definitions_server::DefinitionsServer::new(DefinitionsService::new(shared.clone()));
    let mut shutdown = shared.shutdown.clone();
    // Responses span several segments: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms.
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |s| {
            s.inspect(|stream| {
                let _ = stream.set_nodelay(true);
            })
        },
    );
    let result = tonic::transport::Server::builder()
        .timeout(settings.request_timeout)
        .concurrency_limit_per_connection(256)
        .layer(
            tower::ServiceBuilder::new()
                .load_shed()
                .concurrency_limit(settings.concurrency_limit)
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
        })
        .await;
    health_task.abort();
    result.map_err(Into::into)
}
