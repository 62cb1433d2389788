//! The in-memory index: every cached object and pod, their controller links, the root
//! workloads and their current graphs, a server-wide revision counter and a bounded change
//! history for `Watch`.
//!
//! Sources (manifest files, Kubernetes watchers) feed it through [`Index::apply`],
//! [`Index::delete`] and [`Index::reset`]; each call marks the affected root workloads dirty and
//! re-resolves only those. Every object is converted to a jq value once per change. A root's
//! evaluation ([`resolve::Prepared`]) is memoized per root version and catalog generation, so
//! a pod change re-resolves without re-evaluating the root.

mod batch;
mod feed;
mod listing;
mod names;
mod objects;
mod offline;
mod query;
mod settle;
mod unowned;
mod write;

#[cfg(test)]
mod tests;

pub use batch::Batch;
pub use feed::{Feed, Update};
pub use offline::OnDemand;
pub use write::{Incoming, Write};

use crate::board::{Board, DEFAULT_HISTORY, Key, SourceProblem};
use crate::model::{Skip, SkipCounts, Skipped};

use crate::definition::Catalog;
use crate::expr::Limits;
use crate::model::{Cached, Pod};
use crate::resolve::{self, Prepared};
use arc_swap::ArcSwap;
use listing::OpenList;
use objects::{Entry, Objects};
use parking_lot::{Mutex, MutexGuard};
use serde_json::Value as Json;
use settle::{PreparedKey, cut_short};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// Two versions of a pod agree on everything accounting and the graph read besides the
/// definition's questions.
fn same_accounting(a: &Pod, b: &Pod) -> bool {
    a.node == b.node
        && a.phase == b.phase
        && a.ready == b.ready
        && a.reason == b.reason
        && *a.request == *b.request
        && a.bad_quantities == b.bad_quantities
        && a.resource_claims == b.resource_claims
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

    /// Counts an object of `source` skipped for `skip`.
    pub fn count_skip(&self, source: &str, skip: &Skip) {
        self.count_skips(source, |c| c.add(skip));
    }

    /// Adds to the skip counts of `source` (sources bounded: each is a source name, and
    /// one source's counts are a fixed table).
    pub fn count_skips(&self, source: &str, add: impl FnOnce(&mut SkipCounts)) {
        let mut skips = self.skips.lock();
        match skips.get_mut(source) {
            Some(counts) => add(counts),
            None => add(skips.entry(Arc::from(source)).or_default()),
        }
    }

    /// Objects skipped so far, by source.
    pub fn skipped(&self) -> Vec<(String, SkipCounts)> {
        let skips = self.skips.lock();
        skips.iter().map(|(s, c)| (s.to_string(), *c)).collect()
    }

    /// Replaces the problems `source` reports.
    pub fn set_source_problems(&self, source: &str, problems: Vec<SourceProblem>) {
        let mut all = self.problems.lock();
        if problems.is_empty() {
            all.remove(source);
        } else {
            all.insert(source.to_owned(), problems);
        }
    }

    /// Every source (those the index was created with, and those that reported problems)
    /// with its reported problems, by source name.
    pub fn source_problems(&self) -> Vec<(String, Vec<SourceProblem>)> {
        let problems = self.problems.lock();
        let mut out: std::collections::BTreeMap<String, Vec<SourceProblem>> = self
            .sources
            .iter()
            .map(|s| (s.clone(), Vec::new()))
            .collect();
        for (s, p) in problems.iter() {
            out.insert(s.clone(), p.clone());
        }
        out.into_iter().collect()
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

    /// Current revision.
    pub fn revision(&self) -> u64 {
        self.board.revision()
    }

    /// A receiver that sees every new revision (for Watch).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.board.subscribe()
    }

    /// Receivers currently subscribed (open Watch streams and internal listeners).
    pub fn subscribers(&self) -> usize {
        self.board.subscribers()
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

    /// Marks a source's first full sync done.
    pub fn mark_synced(&self, source: &str) {
        let mut pending = self.pending_sources.lock();
        pending.remove(source);
        if pending.is_empty() {
            self.synced.store(true, Ordering::Release);
        }
    }

    /// Adds or replaces one object (any kind; pods are recognised by kind) from `source`.
    /// Returns the object's identity, or why it was skipped.
    pub fn apply(&self, json: &Json, source: &str) -> Result<String, Skip> {
        // Converted here, from the borrowed document (a pod keeps its value for its first
        // resolution, as from the writer thread).
        let converted = Cached::from_json_keeping_value(json, self.limits);
        self.batch().apply(Incoming::Converted(converted), source)
    }

    /// Converts a document for [`Index::reset_converted`], within the index's limits.
    pub fn convert(&self, json: &Json) -> Result<Cached, Skip> {
        Cached::from_json(json, self.limits)
    }

    /// Removes one object by uid (or identity).
    pub fn delete(&self, uid: &str) {
        self.batch().delete(uid);
    }

    /// Replaces everything `source` holds with `docs` (a full list or relist): objects not in
    /// it are deleted, the rest applied. Returns the documents skipped, with reasons.
    pub fn reset(&self, source: &str, docs: &[Json]) -> Skipped {
        self.reset_converted(source, docs.iter().map(|d| self.convert(d)).collect())
    }

    /// [`Index::reset`] with documents already converted (a source converts a list while it
    /// arrives, so it never holds the whole list as JSON). Conversion failures are the
    /// skipped documents' reasons.
    pub fn reset_converted(&self, source: &str, items: Vec<Result<Cached, Skip>>) -> Skipped {
        self.batch().reset_converted(source, items)
    }

    /// Publishes a new catalog and re-resolves the workloads whose definitions it changed.
    pub fn set_catalog(&self, catalog: Catalog) {
        self.batch().set_catalog(catalog);
    }

    /// Whether a pod update can keep the cached copy (`Some(true)`: identical, skip it),
    /// replace it without re-resolving (`Some(false)`), or must be inserted (`None`).
    fn pod_unchanged(&self, uid: &str, cached: &Cached, source: &str) -> Option<bool> {
        let Cached::Pod(after) = cached else {
            return None;
        };
        let (before, root) = {
            let objects = self.objects();
            let old = objects.get(uid)?;
            let Cached::Pod(before) = &old.cached else {
                return None;
            };
            if old.source.as_ref() != source
                || before.meta != after.meta
                || before.problem != after.problem
            {
                return None;
            }
            if before.packed == after.packed {
                return Some(true);
            }
            // A pod that is its own workload is read whole (its status is the workload's).
            let root = old.root.as_ref().filter(|r| r.as_ref() != uid)?;
            let root = objects.get(root)?.cached.meta().clone();
            (before.clone(), root)
        };
        if !same_accounting(&before, after) {
            return None;
        }
        // A resolution the deadline or a budget cut short asked some pods only part of
        // their questions.
        let whole = self
            .board
            .get(&root.uid)
            .is_some_and(|w| !cut_short(&w.graph));
        if !whole {
            return None;
        }
        let catalog = self.catalog.load();
        let lookup = catalog.lookup(&root.api_version, &root.kind)?;
        // Evaluates the definition's pod questions on the new version: outside every lock
        // readers take.
        resolve::same_answers(
            &lookup.definition,
            lookup.definition.generation(),
            &before,
            after,
            Some(Instant::now() + self.resolve_timeout),
        )
        .then_some(false)
    }

    /// Inserts a converted object; returns its identity.
    fn insert(&self, w: &mut Writer, mut cached: Cached, source: &str) -> String {
        let uid = cached.meta().identity();
        if let Some(ns) = &self.namespace
            && &cached.meta().namespace != ns
        {
            // Another shard's object: not kept (and a copy kept before is removed).
            self.count_skip(source, &Skip::OtherNamespace(uid.clone()));
            self.remove(w, &uid);
            return uid;
        }
        // A pod update that changes nothing the graph reads (a kubelet heartbeat, a restart
        // count, a status write with the same content) skips re-resolving: the same
        // projection keeps the cached copy and what it remembers; otherwise the same
        // accounting facts and the same answers to the definition's questions keep the new
        // copy (see `resolve::same_answers`).
        match self.pod_unchanged(&uid, &cached, source) {
            Some(true) => return uid,
            Some(false) => {
                let mut objects = self.objects_mut();
                if let Some(key) = objects.get_key_value(uid.as_str()).map(|(k, _)| k) {
                    cached.share_uid(&key.clone());
                }
                if let Some(old) = objects.get_mut(uid.as_str()) {
                    old.cached = cached;
                }
                return uid;
            }
            None => {}
        }
        let source = w.source(source);
        let catalog = self.catalog.load();
        let mut objects = self.objects_mut();
        // One copy of the uid: the map's key, else the object's own.
        let shared = objects.uid_or(&uid, &cached.meta().uid);
        cached.share_uid(&shared);
        w.version_counter += 1;
        let entry = Entry {
            cached,
            version: w.version_counter,
            source,
            root: None,
        };
        objects
            .put(shared, entry, &catalog, &self.board)
            .mark(&mut w.dirty);
        self.writes.fetch_add(1, Ordering::Release);
        uid
    }

    fn remove(&self, w: &mut Writer, uid: &str) {
        let catalog = self.catalog.load();
        // A root (or a published workload) it was is marked before it goes.
        self.objects_mut()
            .take(uid, &catalog, &self.board)
            .mark(&mut w.dirty);
        self.writes.fetch_add(1, Ordering::Release);
    }
}
