//! The in-memory index: every cached object and pod, their controller links, the root
//! workloads and their current graphs, a server-wide revision counter and a bounded change
//! history for `Watch`.
//!
//! Sources (manifest files, Kubernetes watchers) and tests feed it through one write
//! protocol ([`Write`], on the async [`Feed`] or the sync [`Batch`]); each write marks the
//! affected root workloads dirty and a batch re-resolves only those. Every object is
//! converted to a jq value once per change. A root's evaluation ([`resolve::Prepared`]) is
//! memoized per root version and catalog generation, so a pod change re-resolves without
//! re-evaluating the root.

mod admit;
mod batch;
mod feed;
mod listing;
mod names;
mod objects;
mod offline;
mod query;
mod reports;
mod settle;
mod unowned;
mod upsert;
mod write;

#[cfg(test)]
mod tests;

pub use admit::Unlabelled;
pub use batch::Batch;
pub use feed::{Feed, Update};
pub use offline::OnDemand;
pub use write::{Incoming, Write};

use crate::board::{Board, DEFAULT_HISTORY, Key, SourceProblem};
use crate::model::SkipCounts;

use crate::definition::Catalog;
use crate::expr::Limits;
use crate::resolve::Prepared;
use arc_swap::ArcSwap;
use listing::OpenList;
use objects::Objects;
use parking_lot::{Mutex, MutexGuard};
use settle::PreparedKey;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// An object's identity (its uid), allocated once and shared by every map that refers to it
/// (and the workload's key on the board).
type Uid = Key;

/// The writer's own state: mutations are serialized by the mutex that holds it, and
/// resolution runs while holding it, but no reader ever takes it.
#[derive(Default)]
struct Writer {
    dirty: BTreeSet<Uid>,
    /// Every source name seen, so entries share one copy.
    sources: Vec<Arc<str>>,
    version_counter: u64,
    /// Lists being received in parts, per source (see [`Batch::stage`]).
    listings: HashMap<Arc<str>, OpenList>,
}

impl Writer {
    /// The shared copy of a source name.
    fn source(&mut self, source: &str) -> Arc<str> {
        if let Some(s) = self.sources.iter().find(|s| s.as_ref() == source) {
            return s.clone();
        }
        let s: Arc<str> = Arc::from(source);
        self.sources.push(s.clone());
        s
    }
}

/// The index. Cheap to share (`Arc<Index>`); all methods take `&self`.
///
/// Locking: one writer at a time (sources' `apply`/`delete`/`reset`, `set_catalog`) holds
/// the writer mutex while it converts, evaluates and resolves; readers (Resolve, List, Watch,
/// Totals, metrics, health) never take it. They read two read-write locks that the writer
/// takes only to insert what it already computed (microseconds per object or workload):
/// the objects (for lookups by name and pod) and the [`Board`] (published graphs, revision,
/// history).
pub struct Index {
    writer: Mutex<Writer>,
    objects: parking_lot::RwLock<Objects>,
    board: Board,
    catalog: ArcSwap<Catalog>,
    limits: Limits,
    resolve_timeout: Duration,
    prepared: moka::sync::Cache<PreparedKey, (u64, Arc<Prepared>)>,
    /// The cluster every graph names (`Workload.cluster`; empty: none).
    cluster: Arc<str>,
    /// Whether metrics label per-workload series with the cluster.
    cluster_label: bool,
    /// Only objects of this namespace are kept (namespace sharding); `None`: all.
    namespace: Option<String>,
    pending_sources: Mutex<HashSet<String>>,
    /// Mirrors `pending_sources.is_empty()` so health and readiness never wait for a lock.
    synced: AtomicBool,
    /// Workload resolutions run so far.
    resolutions: AtomicU64,
    /// The writer thread, started by the first [`Index::feed`].
    feed: std::sync::OnceLock<Feed>,
    /// Problems each source reports (files that did not parse, a missing directory).
    problems: Mutex<std::collections::BTreeMap<String, Vec<SourceProblem>>>,
    /// The sources the index was created with.
    sources: Vec<String>,
    /// Definition paths that began to find nothing, counted per graph change.
    empty_paths: crate::drift::EmptyPaths,
    /// Objects skipped, by source and reason (`kartograf_objects_skipped_total`).
    skips: Mutex<std::collections::BTreeMap<Arc<str>, SkipCounts>>,
    /// Object writes and removals so far (see [`Index::object_writes`]).
    writes: AtomicU64,
}

impl Index {
    /// An empty index over `catalog`. `sources` names the sources whose first full sync must
    /// finish before the index reports itself synced.
    pub fn new(catalog: Catalog, sources: &[&str]) -> Index {
        Index {
            writer: Mutex::new(Writer::default()),
            objects: parking_lot::RwLock::new(Objects::default()),
            board: Board::new(DEFAULT_HISTORY),
            catalog: ArcSwap::from_pointee(catalog),
            limits: Limits::default(),
            resolve_timeout: Duration::from_secs(2),
            prepared: moka::sync::Cache::builder().max_capacity(100_000).build(),
            cluster: Arc::from(""),
            cluster_label: false,
            namespace: None,
            pending_sources: Mutex::new(sources.iter().map(|s| (*s).to_owned()).collect()),
            synced: AtomicBool::new(sources.is_empty()),
            resolutions: AtomicU64::new(0),
            feed: std::sync::OnceLock::new(),
            problems: Mutex::default(),
            sources: sources.iter().map(|s| (*s).to_owned()).collect(),
            empty_paths: crate::drift::EmptyPaths::default(),
            skips: Mutex::default(),
            writes: AtomicU64::new(0),
        }
    }

    /// Per definition and field: how often a path that should find something began to find
    /// nothing in a workload's graph (see [`crate::drift::EmptyPaths`]).
    pub fn empty_paths(&self) -> &crate::drift::EmptyPaths {
        &self.empty_paths
    }

    /// A count that moves whenever a cached object is stored or removed (for readers that
    /// keep what they derived from every object, e.g. the web view's overview).
    pub fn object_writes(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    /// The handle through which sources on the async runtime change the index: a writer
    /// thread of its own applies the changes (see [`Feed`]).
    pub fn feed(self: &Arc<Self>) -> Feed {
        self.feed.get_or_init(|| Feed::start(self)).clone()
    }

    /// A batch of changes applied under one hold of the writer lock; the affected workloads
    /// are resolved and published once, when the batch is dropped.
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            index: self,
            writer: self.write(),
            keep: Vec::new(),
            handed: Vec::new(),
            synced: Vec::new(),
        }
    }

    /// Publishes `catalog` for lookups and new resolutions, without re-resolving anything.
    pub(crate) fn store_catalog(&self, catalog: Catalog) {
        self.catalog.store(Arc::new(catalog));
    }

    /// Sets how many changes are kept for `Watch` resume.
    pub fn with_history(mut self, cap: usize) -> Index {
        self.board.set_history_cap(cap);
        self
    }

    /// Names the cluster in every graph (`Workload.cluster`); with `label`, metrics label
    /// per-workload series with it too.
    pub fn with_cluster(mut self, name: &str, label: bool) -> Index {
        self.cluster = Arc::from(name);
        self.cluster_label = label && !name.is_empty();
        self
    }

    /// Keeps only objects of `namespace` (namespace sharding: whatever a source sends, the
    /// objects of other namespaces and cluster-scoped ones are skipped, as a Kubernetes
    /// watch with a `metadata.namespace` field selector would).
    pub fn with_namespace(mut self, namespace: Option<String>) -> Index {
        self.namespace = namespace.filter(|n| !n.is_empty());
        self
    }

    /// The cluster this index's graphs name (empty: none).
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Whether metrics label per-workload series with the cluster.
    pub fn cluster_label(&self) -> bool {
        self.cluster_label
    }

    /// The published graphs, revisions and change history.
    pub fn board(&self) -> &Board {
        &self.board
    }

    /// Sets the per-resolve evaluation deadline.
    pub fn with_resolve_timeout(mut self, timeout: Duration) -> Index {
        self.resolve_timeout = timeout;
        self
    }

    fn write(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock()
    }

    fn objects(&self) -> parking_lot::RwLockReadGuard<'_, Objects> {
        self.objects.read()
    }

    fn objects_mut(&self) -> parking_lot::RwLockWriteGuard<'_, Objects> {
        self.objects.write()
    }

    /// The catalog in effect.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// How many workload resolutions the index has run (each change re-resolves the
    /// workloads it touches; changes that cannot alter a graph run none).
    pub fn resolutions(&self) -> u64 {
        self.resolutions.load(Ordering::Relaxed)
    }

    /// True once every source finished its first full sync.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Marks a source's first full sync done (see [`Batch::mark_synced`]).
    pub(super) fn mark_synced(&self, source: &str) {
        let mut pending = self.pending_sources.lock();
        pending.remove(source);
        if pending.is_empty() {
            self.synced.store(true, Ordering::Release);
        }
    }
}
