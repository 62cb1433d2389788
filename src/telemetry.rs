//! Logging and tracing setup: `tracing` to stderr as text or JSON lines, filtered by
//! `--log-level` (else `RUST_LOG`, else a per-command default); and, when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans exported over OTLP/gRPC (batched, service name
//! `kartograf`).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The environment variable naming the OTLP/gRPC collector (e.g. `http://otel:4317`).
pub const OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Logging settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct Logging {
    /// Filter directives (`info`, `kartograf=debug`); `None`: `RUST_LOG`, else the default.
    pub level: Option<String>,
    /// Line format.
    pub format: LogFormat,
}

/// The installed telemetry; [`Telemetry::shutdown`] flushes exported spans.
#[derive(Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still batched and stops the exporter (blocks; call it outside async
    /// tasks, with the runtime that built the exporter still alive).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "flushing OTLP spans failed");
        }
    }
}

/// Installs the global subscriber. `default_filter` applies when neither `--log-level` nor
/// `RUST_LOG` is set. With `otlp`, spans are also exported when `OTEL_EXPORTER_OTLP_ENDPOINT`
/// is set; that needs a Tokio runtime entered (the exporter's connection lives on it).
pub fn init(logging: &Logging, default_filter: &str, otlp: bool) -> Telemetry {
    let filter = match &logging.level {
        Some(level) => EnvFilter::try_new(level).unwrap_or_else(|e| {
            eprintln!("warning: invalid --log-level {level:?} ({e}); using {default_filter}");
            EnvFilter::new(default_filter)
        }),
        None => {
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter))
        }
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match logging.format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => fmt.json().with_current_span(true).boxed(),
    };
    let endpoint = std::env::var(OTLP_ENDPOINT)
        .ok()
        .filter(|e| otlp && !e.trim().is_empty());
    let (provider, otlp_error) = match endpoint.as_deref().map(provider) {
        Some(Ok(p)) => (Some(p), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let layer = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("kartograf"))
            .with_tracked_inactivity(false)
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(layer)
        .try_init();
    if let Some(e) = otlp_error {
        tracing::warn!(error = %e, "OTLP export disabled: cannot build the exporter");
    } else if let Some(endpoint) = endpoint {
        tracing::info!(%endpoint, "exporting spans over OTLP");
    }
    Telemetry { provider }
}

/// A batching OTLP/gRPC tracer provider for `endpoint`.
fn provider(endpoint: &str) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("kartograf")
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}
