//! The in-memory index: every cached object and pod, their controller links, the root
//! workloads and their current graphs, a server-wide revision counter and a bounded change
//! history for `Watch`.
//!
//! Sources (manifest files, Kubernetes watchers) feed it through [`Index::apply`],
//! [`Index::delete`] and [`Index::reset`]; each call marks the affected root workloads dirty and
//! re-resolves only those. Every object is converted to a jq value once per change. A root's
//! evaluation ([`resolve::Prepared`]) is memoized per root version and catalog generation, so
//! a pod change re-resolves without re-evaluating the root.

mod names;
mod placements;
mod published;
mod query;

pub use published::Published;
pub use query::{AttributedPod, Filter, Sizes, TotalsKey};

use crate::definition::Catalog;
use crate::expr::Limits;
use crate::object::{Cached, Object, ObjectMeta, Pod};
use crate::proto::v1 as pb;
use crate::resolve::ownership::{self, OwnerGraph, Root};
use crate::resolve::{self, Prepared};
use arc_swap::ArcSwap;
use names::{Name, NameIndex};
use placements::Placements;
use serde_json::Value as Json;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many changes the history keeps for `Watch` resume.
pub const DEFAULT_HISTORY: usize = 10_000;

/// A root object's labels (what label selectors read), shared between the current entry and
/// the history.
pub type Labels = Arc<[(String, String)]>;

/// One change of one workload.
#[derive(Debug, Clone)]
pub struct Change {
    /// Revision at which it happened.
    pub revision: u64,
    /// ADDED, MODIFIED or DELETED.
    pub kind: pb::EventType,
    /// The graph (the last one, for DELETED), with its shared wire encodings.
    pub workload: Arc<Published>,
    /// The root's labels after the change (the last ones, for DELETED).
    pub labels: Labels,
    /// The root's labels before the change (empty for ADDED): with `labels`, this tells a
    /// label-filtered subscriber whether the workload enters or leaves its view.
    pub previous: Labels,
}

/// An object's identity (its uid), allocated once and shared by every map that refers to it.
type Uid = Arc<str>;

struct Entry {
    cached: Cached,
    /// Bumped on every change of this object.
    version: u64,
    /// The source it came from (shared by all of that source's objects).
    source: Arc<str>,
    /// For a pod: the root it was last resolved under.
    root: Option<Uid>,
}

/// A root workload with its current graph.
struct WorkloadEntry {
    graph: Arc<Published>,
    placements: Placements,
    labels: Labels,
}

#[derive(Default)]
struct State {
    revision: u64,
    entries: HashMap<Uid, Entry>,
    /// (apiVersion-less kind, namespace, name) -> uid.
    by_name: NameIndex,
    /// owner uid -> uids of objects whose controller it is.
    children: HashMap<Uid, BTreeSet<Uid>>,
    workloads: HashMap<Uid, WorkloadEntry>,
    history: VecDeque<Change>,
    dirty: BTreeSet<Uid>,
    pending_sources: HashSet<String>,
    /// Every source name seen, so entries share one copy.
    sources: Vec<Arc<str>>,
    version_counter: u64,
}

impl State {
    /// The shared copy of `uid` when some map already holds one, else a new one.
    fn uid(&self, uid: &str) -> Uid {
        self.entries
            .get_key_value(uid)
            .map(|(k, _)| k)
            .or_else(|| self.children.get_key_value(uid).map(|(k, _)| k))
            .or_else(|| self.workloads.get_key_value(uid).map(|(k, _)| k))
            .map_or_else(|| Arc::from(uid), Arc::clone)
    }

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

struct Graph<'a>(&'a HashMap<Uid, Entry>);

impl OwnerGraph for Graph<'_> {
    fn meta(&self, uid: &str) -> Option<&ObjectMeta> {
        self.0.get(uid).map(|e| e.cached.meta())
    }
}

type PreparedKey = (Uid, u64, u64);

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

/// A resolved root: its graph, where each pod sits, and the root's labels.
type Resolved = (
    pb::Workload,
    HashMap<String, pb::PodPlacement>,
    Vec<(String, String)>,
);

/// The index. Cheap to share (`Arc<Index>`); all methods take `&self`.
pub struct Index {
    state: Mutex<State>,
    catalog: ArcSwap<Catalog>,
    limits: Limits,
    history_cap: usize,
    resolve_timeout: Duration,
    prepared: moka::sync::Cache<PreparedKey, Arc<Prepared>>,
    revision_tx: tokio::sync::watch::Sender<u64>,
    /// Mirrors `pending_sources.is_empty()` so health and readiness never wait for the lock.
    synced: AtomicBool,
    /// Workload resolutions run so far.
    resolutions: AtomicU64,
    /// Definition paths that began to find nothing, counted per graph change.
    empty_paths: crate::drift::EmptyPaths,
}

/// Where this process's revisions start: a random multiple of 2^32, so a `since_revision`
/// from another replica or an earlier run is (almost surely) outside this index's history
/// and gets RESET instead of a wrong resume.
fn revision_epoch() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    ((random % (1 << 20)) + 1) << 32
}

impl Index {
    /// An empty index over `catalog`. `sources` names the sources whose first full sync must
    /// finish before the index reports itself synced.
    pub fn new(catalog: Catalog, sources: &[&str]) -> Index {
        let epoch = revision_epoch();
        let (revision_tx, _) = tokio::sync::watch::channel(epoch);
        let state = State {
            revision: epoch,
            pending_sources: sources.iter().map(|s| (*s).to_owned()).collect(),
            ..State::default()
        };
        Index {
            state: Mutex::new(state),
            catalog: ArcSwap::from_pointee(catalog),
            limits: Limits::default(),
            history_cap: DEFAULT_HISTORY,
            resolve_timeout: Duration::from_secs(2),
            prepared: moka::sync::Cache::builder().max_capacity(100_000).build(),
            revision_tx,
            synced: AtomicBool::new(sources.is_empty()),
            resolutions: AtomicU64::new(0),
            empty_paths: crate::drift::EmptyPaths::default(),
        }
    }

    /// Per definition and field: how often a path that should find something began to find
    /// nothing in a workload's graph (see [`crate::drift::EmptyPaths`]).
    pub fn empty_paths(&self) -> &crate::drift::EmptyPaths {
        &self.empty_paths
    }

    /// Counts the definition paths a new graph version shows finding nothing.
    fn observe_empty_paths(&self, before: Option<&pb::Workload>, after: &Published) {
        self.empty_paths.observe(before, after);
    }

    /// Sets how many changes are kept for `Watch` resume.
    pub fn with_history(mut self, cap: usize) -> Index {
        self.history_cap = cap.max(1);
        self
    }

    /// Sets the per-resolve evaluation deadline.
    pub fn with_resolve_timeout(mut self, timeout: Duration) -> Index {
        self.resolve_timeout = timeout;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug; the state stays usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The catalog in effect.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Current revision.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// A receiver that sees every new revision (for Watch).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.revision_tx.subscribe()
    }

    /// Receivers currently subscribed (open Watch streams and internal listeners).
    pub fn subscribers(&self) -> usize {
        self.revision_tx.receiver_count()
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
        let mut st = self.lock();
        st.pending_sources.remove(source);
        if st.pending_sources.is_empty() {
            self.synced.store(true, Ordering::Release);
        }
    }

    /// Adds or replaces one object (any kind; pods are recognised by kind) from `source`.
    /// Returns the object's identity, or why it was skipped.
    pub fn apply(&self, json: &Json, source: &str) -> Result<String, String> {
        // Converted before the lock is taken: readers do not wait for it. A pod keeps its
        // unpacked value for the resolution below, then drops what it did not use.
        let cached = Cached::from_json_keeping_value(json, self.limits)?;
        let pod = match &cached {
            Cached::Pod(p) => Some(p.clone()),
            Cached::Object(_) => None,
        };
        let mut st = self.lock();
        let uid = self.insert_locked(&mut st, cached, source);
        self.flush(&mut st);
        drop(st);
        if let Some(p) = pod {
            p.memo.drop_value();
        }
        Ok(uid)
    }

    /// Converts a document for [`Index::reset_converted`], within the index's limits.
    pub fn convert(&self, json: &Json) -> Result<Cached, String> {
        Cached::from_json(json, self.limits)
    }

    /// Removes one object by uid (or identity).
    pub fn delete(&self, uid: &str) {
        let mut st = self.lock();
        self.delete_locked(&mut st, uid);
        self.flush(&mut st);
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
        let mut st = self.lock();
        let mut skipped = Vec::new();
        let mut seen = HashSet::new();
        for item in items {
            match item {
                Ok(cached) => {
                    seen.insert(self.insert_locked(&mut st, cached, source));
                }
                Err(e) => skipped.push(e),
            }
        }
        let stale: Vec<Uid> = st
            .entries
            .iter()
            .filter(|(uid, e)| e.source.as_ref() == source && !seen.contains(uid.as_ref()))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in stale {
            self.delete_locked(&mut st, &uid);
        }
        self.flush(&mut st);
        skipped
    }

    /// Publishes a new catalog and re-resolves every workload under it.
    pub fn set_catalog(&self, catalog: Catalog) {
        self.catalog.store(Arc::new(catalog));
        let mut st = self.lock();
        let all: Vec<Uid> = st
            .entries
            .keys()
            .cloned()
            .chain(st.workloads.keys().cloned())
            .collect();
        st.dirty.extend(all);
        self.flush(&mut st);
    }

    /// Inserts a converted object; returns its identity.
    fn insert_locked(&self, st: &mut State, cached: Cached, source: &str) -> String {
        let uid = cached.meta().identity();
        // A pod update that changes nothing the graph reads (a kubelet heartbeat, a restart
        // count, a status write with the same content) skips re-resolving: the same
        // projection keeps the cached copy and what it remembers; otherwise the same
        // accounting facts and the same answers to the definition's questions keep the new
        // copy (see `resolve::same_answers`).
        if let Some(old) = st.entries.get(uid.as_str())
            && old.source.as_ref() == source
            && let (Cached::Pod(before), Cached::Pod(after)) = (&old.cached, &cached)
            && before.meta == after.meta
            && before.problem == after.problem
        {
            if before.packed == after.packed {
                return uid;
            }
            if same_accounting(before, after) && self.same_answers(st, &uid, before, after) {
                if let Some(old) = st.entries.get_mut(uid.as_str()) {
                    old.cached = cached;
                }
                return uid;
            }
        }
        let shared = st.uid(&uid);
        let mut root = None;
        if let Some(old) = st.entries.get(uid.as_str()) {
            root = old.root.clone();
            let old_meta = old.cached.meta().clone();
            self.unlink(st, &uid, &old_meta);
        }
        self.mark_affected(st, &uid);
        st.version_counter += 1;
        let version = st.version_counter;
        if let Some(owner) = cached.meta().controller() {
            let owner = st.uid(&owner.uid);
            st.children.entry(owner).or_default().insert(shared.clone());
        }
        let source = st.source(source);
        let meta = cached.clone();
        st.entries.insert(
            shared.clone(),
            Entry {
                cached,
                version,
                source,
                root,
            },
        );
        st.by_name
            .insert(&Graph(&st.entries), Name::of(meta.meta()), shared);
        self.mark_affected(st, &uid);
        uid
    }

    /// Whether pod `uid`'s new version answers its workload definition's questions as the
    /// cached one did (false when the pod sits under no resolved workload).
    fn same_answers(&self, st: &State, uid: &str, before: &Pod, after: &Pod) -> bool {
        let catalog = self.catalog.load();
        // A pod that is its own workload is read whole (its status is the workload's).
        let Some(root_uid) = st
            .entries
            .get(uid)
            .and_then(|e| e.root.as_ref())
            .filter(|r| r.as_ref() != uid)
        else {
            return false;
        };
        let Some(root) = st.entries.get(root_uid) else {
            return false;
        };
        // A resolution the deadline cut short asked some pods only part of their questions.
        let cut_short = st.workloads.get(root_uid).is_none_or(|w| {
            w.graph
                .diagnostics
                .iter()
                .any(|d| d.code == resolve::diagnostics::code::DEADLINE)
        });
        if cut_short {
            return false;
        }
        let meta = root.cached.meta();
        let Some(lookup) = catalog.lookup(&meta.api_version, &meta.kind) else {
            return false;
        };
        resolve::same_answers(
            &lookup.definition,
            catalog.generation(),
            before,
            after,
            Some(Instant::now() + self.resolve_timeout),
        )
    }

    fn delete_locked(&self, st: &mut State, uid: &str) {
        let Some(entry) = st.entries.get(uid) else {
            return;
        };
        let meta = entry.cached.meta().clone();
        self.mark_affected(st, uid);
        self.unlink(st, uid, &meta);
        if let Some((shared, _)) = st.entries.remove_entry(uid) {
            st.dirty.insert(shared);
        }
    }

    fn unlink(&self, st: &mut State, uid: &str, meta: &ObjectMeta) {
        if let Some(owner) = meta.controller()
            && let Some(set) = st.children.get_mut(owner.uid.as_str())
        {
            set.remove(uid);
            if set.is_empty() {
                st.children.remove(owner.uid.as_str());
            }
        }
        st.by_name
            .remove_if(&Graph(&st.entries), Name::of(meta), uid);
    }

    /// Marks dirty every root that `uid` or anything below it belongs to (now or before).
    fn mark_affected(&self, st: &mut State, uid: &str) {
        let catalog = self.catalog.load();
        let mut stack = vec![(st.uid(uid), 0usize)];
        let mut seen = HashSet::new();
        let mut dirty = Vec::new();
        while let Some((at, depth)) = stack.pop() {
            if !seen.insert(at.clone()) || depth > ownership::MAX_HOPS {
                continue;
            }
            dirty.push(at.clone());
            if let Some(entry) = st.entries.get(&at) {
                if let Some(previous) = &entry.root {
                    dirty.push(previous.clone());
                }
                match ownership::root_of(entry.cached.meta(), &Graph(&st.entries), &catalog) {
                    Root::Owner(owner) => dirty.push(st.uid(&owner.uid)),
                    Root::Itself | Root::Uncovered(_) => {}
                }
            }
            for child in st.children.get(&at).into_iter().flatten() {
                stack.push((child.clone(), depth + 1));
            }
        }
        st.dirty.extend(dirty);
    }

    /// Re-resolves every dirty root and publishes the changes.
    fn flush(&self, st: &mut State) {
        if st.dirty.is_empty() {
            return;
        }
        let catalog = self.catalog.load_full();
        let dirty = std::mem::take(&mut st.dirty);
        let mut changed = false;
        for uid in dirty {
            let uid = st.uid(&uid);
            let is_root = st.entries.get(&uid).is_some_and(|e| {
                ownership::root_of(e.cached.meta(), &Graph(&st.entries), &catalog) == Root::Itself
            });
            if !is_root {
                if let Some(old) = st.workloads.remove(&uid) {
                    let labels = old.labels.clone();
                    self.publish(st, pb::EventType::Deleted, old.graph, labels, old.labels);
                    changed = true;
                }
                continue;
            }
            if let Some((graph, placements, labels)) = self.resolve_root(st, &uid, &catalog) {
                let labels: Labels = labels.into();
                let previous = st.workloads.get(&uid).map(|w| w.labels.clone());
                let kind = if previous.is_some() {
                    pb::EventType::Modified
                } else {
                    pb::EventType::Added
                };
                // A label change alone is published too: label-filtered watchers see the
                // workload enter or leave their view.
                let mut graph = graph;
                graph.revision = st.revision + 1;
                let graph = Published::new(graph);
                let same = st.workloads.get(&uid).is_some_and(|w| {
                    w.graph.same_graph(&graph) && w.labels.as_ref() == labels.as_ref()
                });
                if !same {
                    self.observe_empty_paths(st.workloads.get(&uid).map(|w| &**w.graph), &graph);
                    let placements = Placements::pack(placements, |pod| st.uid(pod));
                    let graph = Arc::new(graph);
                    st.workloads.insert(
                        uid.clone(),
                        WorkloadEntry {
                            graph: graph.clone(),
                            placements,
                            labels: labels.clone(),
                        },
                    );
                    let previous = previous.unwrap_or_else(|| Arc::from([]));
                    self.publish(st, kind, graph, labels, previous);
                    changed = true;
                }
                // Otherwise the placements are the same too: the graph lists every pod (by
                // uid) where it is placed.
            }
        }
        if changed {
            let _ = self.revision_tx.send(st.revision);
        }
    }

    fn publish(
        &self,
        st: &mut State,
        kind: pb::EventType,
        workload: Arc<Published>,
        labels: Labels,
        previous: Labels,
    ) {
        st.revision += 1;
        let revision = st.revision;
        st.history.push_back(Change {
            revision,
            kind,
            workload,
            labels,
            previous,
        });
        while st.history.len() > self.history_cap {
            st.history.pop_front();
        }
    }

    /// Resolves root `uid` with the pods below it.
    fn resolve_root(&self, st: &mut State, uid: &str, catalog: &Catalog) -> Option<Resolved> {
        let entry = st.entries.get(uid)?;
        let root: Arc<Object> = match &entry.cached {
            Cached::Object(o) => o.clone(),
            Cached::Pod(p) => Arc::new(p.to_object()),
        };
        let lookup = catalog.lookup(&root.meta.api_version, &root.meta.kind)?;
        let _span = tracing::debug_span!(
            "resolve",
            kind = %root.meta.kind,
            namespace = %root.meta.namespace,
            name = %root.meta.name
        )
        .entered();
        let key = (st.uid(uid), entry.version, catalog.generation());
        let prepared = match self.prepared.get(&key) {
            Some(p) => p,
            None => {
                let p = Arc::new(resolve::prepare(
                    &lookup.definition,
                    &root,
                    Some(Instant::now() + self.resolve_timeout),
                ));
                self.prepared.insert(key, p.clone());
                p
            }
        };
        // Pods below the root, through any cached intermediates.
        let root_uid = st.uid(uid);
        let mut pods: Vec<(Uid, Arc<Pod>)> = Vec::new();
        if let Cached::Pod(p) = &entry.cached {
            pods.push((root_uid.clone(), p.clone()));
        }
        let mut stack = vec![(root_uid.clone(), 0usize)];
        let mut seen = HashSet::new();
        while let Some((at, depth)) = stack.pop() {
            if !seen.insert(at.clone()) || depth > ownership::MAX_HOPS {
                continue;
            }
            for child in st.children.get(&at).into_iter().flatten() {
                match st.entries.get(child).map(|e| &e.cached) {
                    // Pods can own further objects (a leader pod owning its workers'
                    // StatefulSet, a driver pod owning its executors).
                    Some(Cached::Pod(p)) => {
                        pods.push((child.clone(), p.clone()));
                        stack.push((child.clone(), depth + 1));
                    }
                    Some(Cached::Object(_)) => stack.push((child.clone(), depth + 1)),
                    None => {}
                }
            }
        }
        pods.sort_by(|(_, a), (_, b)| a.meta.name.cmp(&b.meta.name));
        for (pod, _) in &pods {
            if let Some(e) = st.entries.get_mut(pod) {
                e.root = Some(root_uid.clone());
            }
        }
        let refs: Vec<&Pod> = pods.iter().map(|(_, p)| p.as_ref()).collect();
        let input = resolve::Input {
            definition: &lookup.definition,
            generation: catalog.generation(),
            root: &root,
            pods: &refs,
            fallback_from: lookup.fallback_from.as_deref(),
            deadline: Some(Instant::now() + self.resolve_timeout),
            prepared: Some(&prepared),
        };
        self.resolutions.fetch_add(1, Ordering::Relaxed);
        let resolution = resolve::resolve(&input);
        let labels = root.labels();
        Some((resolution.workload, resolution.placements, labels))
    }
}
