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
mod board;
mod feed;
mod names;
mod objects;
mod offline;
mod placements;
mod published;
mod query;
pub mod selector;
mod unowned;

#[cfg(test)]
mod tests;

pub use batch::Batch;
pub use board::{Board, Change, Key, Labels, Publication, WorkloadEntry};
pub use feed::{Feed, Update};
pub use offline::OnDemand;
pub use published::Published;
pub use query::{AttributedPod, Filter, PodMiss, Sizes, TotalsKey};
pub use unowned::UnownedGpuPod;

use crate::definition::Catalog;
use crate::expr::Limits;
use crate::model::ownership::{self, Root};
use crate::model::{Cached, Object, Pod};
use crate::proto::v1 as pb;
use crate::resolve::{self, Prepared};
use arc_swap::ArcSwap;
use names::Name;
use objects::{Entry, Graph, Objects, mark_affected, unlink};
use parking_lot::{Mutex, MutexGuard};
use placements::Placements;
use serde_json::Value as Json;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How many changes the history keeps for `Watch` resume.
pub const DEFAULT_HISTORY: usize = 10_000;

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

/// A list received in parts: what it held so far, the roots its objects affect (resolved
/// once, when it ends, or before: see [`Batch::stage`]) and the objects it skipped.
#[derive(Default)]
struct OpenList {
    seen: foldhash::HashSet<String>,
    dirty: BTreeSet<Uid>,
    skipped: Vec<String>,
    /// Parts staged so far.
    parts: u64,
    /// Roots of `dirty` the list's own objects affected, with the last part that did.
    touched: foldhash::HashMap<Uid, u64>,
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

/// A root and the definition evaluating it; the value holds the root version it was
/// prepared for (one entry per root: a new version replaces the old one).
type PreparedKey = (Uid, u64);

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

/// Diagnostics that mean a resolution did not ask every question (a pod update cannot be
/// judged unchanged against it).
fn cut_short(graph: &pb::Workload) -> bool {
    use resolve::diagnostics::code;
    graph.diagnostics.iter().any(|d| {
        d.code == code::DEADLINE
            || d.code == code::BUDGET_EXCEEDED
            || d.code == code::QUARANTINED
            || d.code == code::LIMIT_EXCEEDED
    })
}

/// What a dirty uid needs: nothing more (it is no root), or a resolution of these inputs.
enum Gathered {
    NotRoot,
    Root {
        root: Arc<Object>,
        version: u64,
        pods: Vec<(Uid, Arc<Pod>)>,
        notes: Vec<Arc<str>>,
        /// Gang objects below the root (checked against its graph: `crate::gangs::live`).
        gangs: Vec<Arc<Object>>,
    },
}

/// A resolved root, ready to publish.
struct Resolved {
    uid: Uid,
    graph: Published,
    placements: Placements,
    labels: Labels,
    pods: Vec<Uid>,
}

/// Dirty roots resolved between two publications (bounds how long readers wait for a large
/// re-resolution, e.g. after a catalog change, to show progress).
const PUBLISH_EVERY: usize = 256;
/// Dirty roots from which a flush resolves on more than one thread.
const PARALLEL_FROM: usize = 64;
/// Most threads a flush resolves on.
const RESOLVE_THREADS: usize = 4;

/// What settling one dirty root gave.
enum Settled {
    /// A new graph for it.
    Resolved(Box<Resolved>),
    /// It is no root (any more): its graph goes.
    Gone(Uid),
    /// No definition resolves it now.
    Unresolved,
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
}

/// A problem a source reports: a file that did not parse (its last good documents stay
/// active), a missing directory, objects defined twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProblem {
    /// The file or directory.
    pub path: String,
    /// What is wrong.
    pub message: String,
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
        }
    }

    /// Per definition and field: how often a path that should find something began to find
    /// nothing in a workload's graph (see [`crate::drift::EmptyPaths`]).
    pub fn empty_paths(&self) -> &crate::drift::EmptyPaths {
        &self.empty_paths
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
    pub fn apply(&self, json: &Json, source: &str) -> Result<String, String> {
        self.batch().apply(json, source)
    }

    /// Converts a document for [`Index::reset_converted`], within the index's limits.
    pub fn convert(&self, json: &Json) -> Result<Cached, String> {
        Cached::from_json(json, self.limits)
    }

    /// Removes one object by uid (or identity).
    pub fn delete(&self, uid: &str) {
        self.batch().delete(uid);
    }

    /// Replaces everything `source` holds with `docs` (a full list or relist): objects not in
    /// it are deleted, the rest applied. Returns the documents skipped, with reasons.
    pub fn reset(&self, source: &str, docs: &[Json]) -> Vec<String> {
        self.reset_converted(source, docs.iter().map(|d| self.convert(d)).collect())
    }

    /// [`Index::reset`] with documents already converted (a source converts a list while it
    /// arrives, so it never holds the whole list as JSON). Conversion failures are the
    /// skipped documents' reasons.
    pub fn reset_converted(&self, source: &str, items: Vec<Result<Cached, String>>) -> Vec<String> {
        self.batch().reset_converted(source, items)
    }

    /// Publishes a new catalog and re-resolves the workloads whose definitions it changed.
    pub fn set_catalog(&self, catalog: Catalog) {
        let previous = self.catalog();
        self.store_catalog(catalog);
        self.batch().reresolve_since(&previous);
    }

    /// Whether a pod update can keep the cached copy (`Some(true)`: identical, skip it),
    /// replace it without re-resolving (`Some(false)`), or must be inserted (`None`).
    fn pod_unchanged(&self, uid: &str, cached: &Cached, source: &str) -> Option<bool> {
        let Cached::Pod(after) = cached else {
            return None;
        };
        let (before, root) = {
            let objects = self.objects();
            let old = objects.entries.get(uid)?;
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
            let root = objects.entries.get(root)?.cached.meta().clone();
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
                if let Some(key) = objects.entries.get_key_value(uid.as_str()).map(|(k, _)| k) {
                    cached.share_uid(&key.clone());
                }
                if let Some(old) = objects.entries.get_mut(uid.as_str()) {
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
        let mut root = None;
        if let Some(old) = objects.entries.get(uid.as_str()) {
            root = old.root.clone();
            let old_meta = old.cached.meta().clone();
            unlink(&mut objects, &uid, &old_meta);
        }
        mark_affected(&objects, &catalog, &self.board, &mut w.dirty, &uid);
        w.version_counter += 1;
        let version = w.version_counter;
        if let Some(owner) = cached.meta().controller() {
            let owner = objects.uid(&owner.uid);
            objects
                .children
                .entry(owner)
                .or_default()
                .insert(shared.clone());
        }
        let is_pod = matches!(cached, Cached::Pod(_));
        let meta = cached.clone();
        let replaced = objects.entries.insert(
            shared.clone(),
            Entry {
                cached,
                version,
                source,
                root,
            },
        );
        if is_pod
            && replaced
                .as_ref()
                .is_none_or(|e| !matches!(e.cached, Cached::Pod(_)))
        {
            objects.pods += 1;
        }
        if !is_pod
            && replaced
                .as_ref()
                .is_some_and(|e| matches!(e.cached, Cached::Pod(_)))
        {
            objects.pods -= 1;
        }
        let objects = &mut *objects;
        objects
            .by_name
            .insert(&Graph(&objects.entries), Name::of(meta.meta()), shared);
        mark_affected(objects, &catalog, &self.board, &mut w.dirty, &uid);
        uid
    }

    fn remove(&self, w: &mut Writer, uid: &str) {
        let catalog = self.catalog.load();
        let mut objects = self.objects_mut();
        let Some(entry) = objects.entries.get(uid) else {
            return;
        };
        let meta = entry.cached.meta().clone();
        mark_affected(&objects, &catalog, &self.board, &mut w.dirty, uid);
        unlink(&mut objects, uid, &meta);
        // A root (or a published workload) it was is already marked.
        if let Some(old) = objects.entries.remove(uid) {
            if matches!(old.cached, Cached::Pod(_)) {
                objects.pods -= 1;
            }
            objects.notes.remove(uid);
        }
    }

    /// Re-resolves every dirty root and publishes the changes, [`PUBLISH_EVERY`] roots at
    /// a time.
    fn flush(&self, w: &mut Writer) {
        if w.dirty.is_empty() {
            return;
        }
        let catalog = self.catalog.load_full();
        let dirty: Vec<Uid> = std::mem::take(&mut w.dirty).into_iter().collect();
        let mut changed = false;
        for chunk in dirty.chunks(PUBLISH_EVERY) {
            let mut resolved = Vec::new();
            let mut gone = Vec::new();
            for outcome in self.settle_all(chunk, &catalog) {
                match outcome {
                    Settled::Resolved(r) => resolved.push(*r),
                    Settled::Gone(uid) => {
                        crate::gangs::live::forget(&uid);
                        gone.push(uid);
                    }
                    Settled::Unresolved => {}
                }
            }
            changed |= self.publish(resolved, gone);
        }
        if changed {
            self.board.notify();
        }
    }

    /// Settles every root of `chunk`: on this thread for a few, else on this thread and up
    /// to [`RESOLVE_THREADS`]` - 1` scoped threads (a cold start or a catalog change resolves
    /// thousands of roots at once; each resolution reads the objects under short read locks
    /// and shares nothing else). Each thread takes the next root when it finishes one:
    /// roots differ widely in cost (a JobSet with a thousand pods beside a Deployment with
    /// two), so fixed shares would leave threads idle. Results come in `chunk`'s order.
    fn settle_all(&self, chunk: &[Uid], catalog: &Catalog) -> Vec<Settled> {
        let threads = if chunk.len() < PARALLEL_FROM {
            1
        } else {
            crate::parallel::cores().min(RESOLVE_THREADS)
        };
        crate::parallel::map_in_order(
            chunk,
            threads,
            "kartograf-resolve",
            feed::WRITER_STACK,
            |uid| self.settle(uid, catalog),
        )
    }

    /// Resolves root `uid`, or finds that it is no root (any more).
    fn settle(&self, uid: &Uid, catalog: &Catalog) -> Settled {
        match self.gather(uid, catalog) {
            Gathered::NotRoot => Settled::Gone(uid.clone()),
            Gathered::Root {
                root,
                version,
                pods,
                notes,
                gangs,
            } => match self.resolve_root(uid, &root, version, pods, notes, gangs, catalog) {
                Some(r) => Settled::Resolved(Box::new(r)),
                None => Settled::Unresolved,
            },
        }
    }

    /// The inputs of root `uid` (or that it is no root), read under the objects lock.
    fn gather(&self, uid: &Uid, catalog: &Catalog) -> Gathered {
        self.gather_as(uid, catalog, true)
    }

    /// [`Index::gather`]; with `only_roots` false, any cached object is gathered as if it
    /// were a root (offline resolution of an object another workload owns).
    fn gather_as(&self, uid: &Uid, catalog: &Catalog, only_roots: bool) -> Gathered {
        let objects = self.objects();
        let Some(entry) = objects.entries.get(uid) else {
            return Gathered::NotRoot;
        };
        let graph = Graph(&objects.entries);
        if only_roots && ownership::root_of(entry.cached.meta(), &graph, catalog) != Root::Itself {
            return Gathered::NotRoot;
        }
        let root: Arc<Object> = match &entry.cached {
            Cached::Object(o) => o.clone(),
            Cached::Pod(p) => Arc::new(p.to_object()),
        };
        // Pods below the root, through any cached intermediates.
        let mut pods: Vec<(Uid, Arc<Pod>)> = Vec::new();
        if let Cached::Pod(p) = &entry.cached {
            pods.push((uid.clone(), p.clone()));
        }
        let mut gangs: Vec<Arc<Object>> = Vec::new();
        let mut stack = vec![(uid.clone(), 0usize)];
        let mut seen = foldhash::HashSet::default();
        while let Some((at, depth)) = stack.pop() {
            if !seen.insert(at.clone()) || depth > ownership::MAX_HOPS {
                continue;
            }
            for child in objects.children.get(&at).into_iter().flatten() {
                match objects.entries.get(child).map(|e| &e.cached) {
                    // Pods can own further objects (a leader pod owning its workers'
                    // StatefulSet, a driver pod owning its executors).
                    Some(Cached::Pod(p)) => {
                        pods.push((child.clone(), p.clone()));
                        stack.push((child.clone(), depth + 1));
                    }
                    Some(Cached::Object(o)) => {
                        if crate::gangs::live::is_gang_object(&o.meta.api_version, &o.meta.kind) {
                            gangs.push(o.clone());
                        }
                        stack.push((child.clone(), depth + 1));
                    }
                    None => {}
                }
            }
        }
        // Source notes of the root, the intermediates and the pods (all walked above).
        let mut notes: Vec<Arc<str>> = seen
            .iter()
            .filter_map(|u| objects.notes.get(u).cloned())
            .collect();
        notes.sort();
        Gathered::Root {
            root,
            version: entry.version,
            pods,
            notes,
            gangs,
        }
    }

    /// What `definition` evaluates on root `uid` at `version` alone (memoized per root
    /// version and definition; a partial one, cut short by the deadline, is not kept).
    fn prepared_for(
        &self,
        uid: &Uid,
        root: &Object,
        version: u64,
        definition: &Arc<crate::definition::Definition>,
    ) -> Arc<Prepared> {
        let key = (uid.clone(), definition.id());
        if let Some((v, p)) = self.prepared.get(&key)
            && v == version
        {
            return p;
        }
        let p = Arc::new(resolve::prepare(
            definition,
            root,
            Some(Instant::now() + self.resolve_timeout),
        ));
        if p.is_partial() {
            self.prepared.invalidate(&key);
        } else {
            self.prepared.insert(key, (version, p.clone()));
        }
        p
    }

    /// Evaluates ahead what the definitions read of roots `uids` alone ([`Prepared`]), so
    /// that their resolution, held until their pods are in (see [`Batch::finish_list`]),
    /// finds it done: at a cold start the pod list downloads for seconds while the roots'
    /// own evaluations (about 40% of resolving them) wait. Reads the objects under short
    /// read locks; a root changed meanwhile is prepared again when resolved.
    pub(crate) fn prepare_ahead(&self, uids: &[Uid]) {
        let catalog = self.catalog.load_full();
        for uid in uids {
            let found = {
                let objects = self.objects();
                objects
                    .entries
                    .get(uid)
                    .and_then(|entry| match &entry.cached {
                        Cached::Object(o)
                            if ownership::root_of(&o.meta, &Graph(&objects.entries), &catalog)
                                == Root::Itself =>
                        {
                            Some((o.clone(), entry.version))
                        }
                        _ => None,
                    })
            };
            let Some((root, version)) = found else {
                continue;
            };
            if let Some(lookup) = catalog.lookup(&root.meta.api_version, &root.meta.kind) {
                self.prepared_for(uid, &root, version, &lookup.definition);
            }
        }
    }

    /// Resolves root `uid` with its pods; no lock readers take is held.
    #[allow(clippy::too_many_arguments)] // the gathered inputs, one by one
    fn resolve_root(
        &self,
        uid: &Uid,
        root: &Object,
        version: u64,
        mut pods: Vec<(Uid, Arc<Pod>)>,
        notes: Vec<Arc<str>>,
        gangs: Vec<Arc<Object>>,
        catalog: &Catalog,
    ) -> Option<Resolved> {
        let lookup = catalog.lookup(&root.meta.api_version, &root.meta.kind)?;
        let _span = tracing::debug_span!(
            "resolve",
            kind = %root.meta.kind,
            namespace = %root.meta.namespace,
            name = %root.meta.name
        )
        .entered();
        let prepared = self.prepared_for(uid, root, version, &lookup.definition);
        pods.sort_by(|(_, a), (_, b)| a.meta.name.cmp(&b.meta.name));
        let refs: Vec<&Pod> = pods.iter().map(|(_, p)| p.as_ref()).collect();
        let input = resolve::Input {
            definition: &lookup.definition,
            generation: lookup.definition.generation(),
            root,
            pods: &refs,
            fallback_from: lookup.fallback_from.as_deref(),
            deadline: Some(Instant::now() + self.resolve_timeout),
            prepared: Some(&prepared),
        };
        self.resolutions.fetch_add(1, Ordering::Relaxed);
        let mut resolution = resolve::resolve(&input);
        let labels: Labels = root.labels().into();
        resolution.workload.cluster = self.cluster.to_string();
        resolution.workload.labels = labels.iter().cloned().collect();
        for note in notes {
            resolution.workload.diagnostics.push(pb::Diagnostic {
                severity: resolve::diagnostics::WARNING.to_owned(),
                code: resolve::diagnostics::code::SOURCE_NOTE.to_owned(),
                message: note.to_string(),
                component: String::new(),
                expression: String::new(),
                path: String::new(),
            });
        }
        crate::gangs::live::annotate(uid, &mut resolution.workload, &gangs, &refs);
        let by_identity: HashMap<String, Uid> = pods
            .iter()
            .map(|(u, p)| (p.meta.identity(), u.clone()))
            .collect();
        let placements = Placements::pack(resolution.placements, |pod| {
            by_identity
                .get(pod)
                .cloned()
                .unwrap_or_else(|| Arc::from(pod))
        });
        Some(Resolved {
            uid: uid.clone(),
            graph: Published::new(resolution.workload),
            placements,
            labels,
            pods: pods.into_iter().map(|(u, _)| u).collect(),
        })
    }

    /// Records where pods were resolved, then publishes new graphs and removals; true when
    /// anything was published.
    fn publish(&self, resolved: Vec<Resolved>, gone: Vec<Uid>) -> bool {
        if resolved.is_empty() && gone.is_empty() {
            return false;
        }
        {
            let mut objects = self.objects_mut();
            for r in &resolved {
                for pod in &r.pods {
                    if let Some(e) = objects.entries.get_mut(pod) {
                        e.root = Some(r.uid.clone());
                    }
                }
            }
        }
        // Paths that found nothing are counted on graphs that changed (an unchanged one is
        // not published again).
        for r in &resolved {
            let previous = self.board.get(&r.uid);
            let unchanged = previous.as_ref().is_some_and(|w| {
                w.graph.same_graph(&r.graph) && w.labels.as_ref() == r.labels.as_ref()
            });
            if !unchanged {
                self.empty_paths
                    .observe(previous.as_ref().map(|w| &**w.graph), &r.graph);
            }
        }
        let updates = resolved
            .into_iter()
            .map(|r| {
                board::Publication::new(r.uid, Arc::new(r.graph), r.labels).placed(r.placements)
            })
            .collect();
        self.board.publish(updates, gone)
    }
}
