//! Logging setup: `tracing` to stderr, filtered by `--log` / `RUST_LOG`.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG` wins over `default_filter` when set.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
