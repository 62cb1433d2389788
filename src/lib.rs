//! kartograf: resolves Kubernetes AI workloads of any framework into normalized workload
//! graphs — components, instances, pods, normalized status, GPU totals and gangs — driven by
//! declarative Workload Map ("Karta", `run.ai/v1alpha1`) definitions.
//!
//! The live flow (`kartograf serve`):
//!
//! ```text
//! Kubernetes watches ─┐   source::kube (informer → Sink)        definitions: embedded <
//! manifest directory ─┼─▶ source::manifests (changed files)      --definitions DIR < Karta
//!                     │        │                                 objects ─▶ definition::layers
//!                     │        ▼                                  ─▶ Catalog (arc-swap)
//!                     │   index::Feed ── writer thread ──────────────────────┐
//!                     │        │ convert (model::Cached, the one strip rule) │
//!                     │        ▼                                             ▼
//!                     │   index: objects ─ ownership ─▶ dirty roots ─▶ resolve(definition,
//!                     │        root, pods) with metered jq (expr) ─▶ pb::Workload, encoded
//!                     │        once ─▶ Board (graphs, revision, history)
//!                     │                       │ read locks held for microseconds
//!                     ▼                       ▼
//! aggregate (upstream Watch streams) ─▶ Board ─▶ server (Store trait): Resolve, List, Watch,
//!                                                Totals; admin: /metrics, /livez, /readyz
//! ```
//!
//! The offline flow (`kartograf resolve -f`): files ─▶ [`source::offline::Snapshot`] ─▶ the
//! same [`index::Index`] (objects stored, nothing published) ─▶ resolution on demand ─▶ the
//! same `pb::Workload`, printed as JSON, YAML or a tree.
//!
//! Layers, lowest first: [`expr`] (jq with budgets), [`definition`] (the Karta model,
//! validation, the compiled plan, layering), [`model`] (cached objects, resources, memo,
//! ownership), [`resolve`] (pure: definition + root + pods ─▶ graph), [`index`] (objects,
//! resolution, the published board), [`source`] and [`aggregate`] (feeders), [`server`]
//! (tonic, behind the [`server::Store`] trait), [`cli`] (wiring); [`parallel`] (std-only work
//! sharing) serves any of them. `definition`, `expr`, `model`
//! and `resolve` know nothing of kube, tonic or tokio; `index` knows no tonic; `server` knows no
//! kube. The engine's product is the wire type ([`proto::v1::Workload`]) on purpose: a graph
//! is encoded once when published and its bytes are shared by every Resolve answer and Watch
//! subscriber (see `board::published`), so no layer converts between a domain graph and the
//! wire.

#![forbid(unsafe_code)]

pub mod admin;
pub mod aggregate;
pub mod backoff;
pub mod board;
pub mod cli;
pub mod definition;
pub mod drift;
pub mod excerpt;
pub mod expr;
pub mod folder;
pub mod gangs;
pub mod index;
pub mod karta;
pub mod manifest;
pub mod metrics;
pub mod model;
pub mod parallel;
pub mod patch;
pub mod policy;
pub mod proto;
pub mod random;
pub mod resolve;
pub mod server;
pub mod source;
pub mod telemetry;
pub mod ui;
pub mod webhook;
