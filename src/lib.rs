//! kartograf: resolves Kubernetes AI workloads of any framework into normalized workload
//! graphs — components, instances, pods, normalized status, GPU totals and gangs — driven by
//! declarative Workload Map ("Karta", `run.ai/v1alpha1`) definitions.
//!
//! ```text
//! manifest files / (later) Kubernetes watch ─▶ object / snapshot ─▶ ownership: root + its pods
//! definitions (embedded catalog, --definitions DIR) ─▶ definition: validate + compile (expr)
//! resolve(definition, root, pods) ─▶ proto::v1::Workload ─▶ CLI (json | yaml | tree)
//! ```
//!
//! Layers: [`definition`], [`expr`] and [`resolve`] are pure (no Kubernetes client, no async
//! runtime, no gRPC server); [`snapshot`] resolves against a static set of objects; [`cli`]
//! wires them to the command line.

pub mod admin;
pub mod aggregate;
pub mod cli;
pub mod definition;
pub mod drift;
pub mod excerpt;
pub mod expr;
pub mod index;
pub mod manifest;
pub mod metrics;
pub mod object;
pub mod resolve;
pub mod server;
pub mod snapshot;
pub mod source;
pub mod telemetry;

/// Generated API types (`proto/kartograf/v1`), with proto3-JSON serde impls.
pub mod proto {
    /// `kartograf.v1`.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kartograf.v1");
        include!(concat!(env!("OUT_DIR"), "/kartograf.v1.serde.rs"));
        /// The encoded descriptor set, for server reflection.
        pub const FILE_DESCRIPTOR_SET: &[u8] =
            tonic::include_file_descriptor_set!("kartograf_descriptor");
    }
}
