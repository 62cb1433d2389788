//! Why an upstream is isolated: the bound it broke ([`Breach`]), and why it cannot be
//! reached ([`ConnectError`]).

use std::path::PathBuf;
use std::time::Duration;

/// A bound an upstream broke (the connection is dropped and the upstream marked stale).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Breach {
    /// A graph larger than `--upstream-max-graph-bytes`.
    #[error("it sent a graph of {bytes} bytes, more than {max} (--upstream-max-graph-bytes)")]
    GraphBytes {
        /// The graph's encoded size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// A graph that would take too much memory decoded.
    #[error(
        "it sent a graph that would take about {size} bytes decoded, more than {room} ({factor}x --upstream-max-graph-bytes)"
    )]
    DecodedBytes {
        /// Its estimated decoded size.
        size: usize,
        /// The bound on it.
        room: usize,
        /// The bound's factor over `--upstream-max-graph-bytes`.
        factor: usize,
    },
    /// A snapshot of more workloads than `--upstream-max-workloads`.
    #[error("its snapshot holds more than {max} workloads (--upstream-max-workloads)")]
    SnapshotWorkloads {
        /// The bound.
        max: usize,
    },
    /// A snapshot of more bytes than `--upstream-max-bytes`.
    #[error("its snapshot holds more than {max} bytes of graphs (--upstream-max-bytes)")]
    SnapshotBytes {
        /// The bound.
        max: usize,
    },
    /// A snapshot that did not end within `--upstream-snapshot-timeout`.
    #[error("its snapshot did not reach SYNCED within {timeout:?} (--upstream-snapshot-timeout)")]
    SnapshotTimeout {
        /// The bound.
        timeout: Duration,
    },
    /// Live changes that would make it hold more workloads than `--upstream-max-workloads`.
    #[error("it would hold more than {max} workloads (--upstream-max-workloads)")]
    Workloads {
        /// The bound.
        max: usize,
    },
    /// Live changes that would make it hold more bytes than `--upstream-max-bytes`.
    #[error("it would hold more than {max} bytes of graphs (--upstream-max-bytes)")]
    Bytes {
        /// The bound.
        max: usize,
    },
    /// Its workloads were dropped while it resumed (it must send a snapshot again).
    #[error("its workloads were dropped while resuming; resubscribing from a snapshot")]
    DroppedWhileResuming,
}

/// Why an upstream cannot be connected to.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A file of its settings cannot be read.
    #[error("{field} {}: {source}", .path.display())]
    Read {
        /// The setting (`caFile`, `certFile`, `keyFile`, `tokenFile`).
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The url is refused by the transport.
    #[error("url {url}: {source}")]
    Url {
        /// The url.
        url: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// The TLS settings are refused by the transport.
    #[error("TLS settings: {0}")]
    Tls(#[source] tonic::transport::Error),
    /// The token file is not UTF-8.
    #[error("tokenFile {} is not UTF-8", .0.display())]
    TokenNotUtf8(PathBuf),
    /// The token holds characters that gRPC metadata does not allow.
    #[error("tokenFile {} holds characters not allowed in gRPC metadata", .0.display())]
    TokenNotMetadata(PathBuf),
    /// The connection failed.
    #[error("cannot connect to {url}: {}", error_chain(.source))]
    Connect {
        /// The url.
        url: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
}

/// An error with its sources, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let part = s.to_string();
        // Errors often repeat their source's text in their own.
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = s.source();
    }
    text
}
