//! `kartograf serve`: the long-running gRPC service.

use super::DefinitionArgs;
use crate::definition::{Catalog, LoadReport};
use crate::index::Index;
use crate::server::{self, Settings, Shared};
use crate::source::{definitions, kube, manifests};
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
    /// How often kinds the cluster does not serve yet are looked up again.
    #[arg(long, env = "KARTOGRAF_REDISCOVER", default_value = "30s", value_parser = super::resolve::parse_duration)]
    pub rediscover: Duration,
    /// gRPC listen address.
    #[arg(long, env = "KARTOGRAF_LISTEN", default_value = "0.0.0.0:50051")]
    pub listen: SocketAddr,
    /// Admin HTTP listen address (`/livez`, `/readyz`, `/metrics`).
    #[arg(long, env = "KARTOGRAF_ADMIN_LISTEN", default_value = "0.0.0.0:9090")]
    pub admin_listen: SocketAddr,
    /// Changes kept for Watch resume (`since_revision`).
    #[arg(long, env = "KARTOGRAF_HISTORY", default_value_t = crate::index::DEFAULT_HISTORY)]
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
    #[command(flatten)]
    pub definitions: DefinitionArgs,
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
    result
}

async fn serve(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &args.manifests
        && !dir.exists()
    {
        anyhow::bail!("--manifests {}: no such file or directory", dir.display());
    }
    let report = Arc::new(LoadReport::default());
    let mut reloader = args
        .definitions
        .definitions
        .as_deref()
        .map(definitions::Reloader::new);
    let catalog = match reloader.as_mut() {
        Some(r) => {
            let (catalog, errors) = r.reload();
            for e in &errors {
                tracing::warn!(error = %e, "definition rejected");
            }
            report.set(errors);
            catalog
        }
        None => {
            Catalog::embedded().map_err(|e| anyhow::anyhow!("embedded catalog invalid: {e:?}"))?
        }
    };
    let source = if args.manifests.is_some() {
        manifests::SOURCE
    } else {
        kube::SOURCE
    };
    let index = Arc::new(
        Index::new(catalog, &[source])
            .with_history(args.history)
            .with_resolve_timeout(args.resolve_timeout),
    );
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let origin = match &args.manifests {
        Some(dir) => {
            tokio::spawn(manifests::run(index.clone(), dir.clone()));
            format!("manifests: {}", dir.display())
        }
        None => {
            let client = ::kube::Client::try_default()
                .await
                .context("no --manifests given and no usable kubeconfig or in-cluster config")?;
            tokio::spawn(kube::run(client, index.clone(), args.rediscover));
            "the Kubernetes cluster of the current kubeconfig".to_owned()
        }
    };
    if let Some(r) = reloader {
        tokio::spawn(definitions::run(r, index.clone(), report.clone()));
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let local = listener.local_addr()?;
    let admin_listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("binding the admin port {}", args.admin_listen))?;
    let admin_local = admin_listener.local_addr()?;
    tracing::info!(grpc = %local, admin = %admin_local, source = %origin, "kartograf serving");
    let shared = Shared::new(index, report, shutdown_rx);
    let admin = tokio::spawn(crate::admin::serve(admin_listener, shared.clone()));
    let settings = Settings {
        listen: local,
        request_timeout: args.request_timeout,
        concurrency_limit: args.concurrency_limit,
    };
    let server = tokio::spawn(server::serve(listener, shared, settings));
    wait_for_signal().await;
    tracing::info!("kartograf shutting down");
    let _ = shutdown_tx.send(true);
    let outcome = tokio::time::timeout(Duration::from_secs(10), server).await;
    // The admin port answers (`/readyz` 503) while the gRPC connections drain.
    admin.abort();
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
