//! Settling: dirty roots become graphs. After each batch of writes the writer resolves
//! every root the batch marked dirty, in chunks of [`PUBLISH_EVERY`] (so readers see progress
//! during a large re-resolution), on up to [`RESOLVE_THREADS`] threads, and publishes each
//! chunk on the board at once. A root's evaluation ([`Prepared`]) is memoized per root version
//! and catalog generation, so a pod change re-resolves without evaluating the root again.

use super::{Index, Uid, Writer};
use crate::board::{Labels, Placements, Publication, Published};
use crate::definition::Catalog;
use crate::gangs::live::GangStatuses;
use crate::model::ownership::{self, Root};
use crate::model::{Cached, Object, Pod};
use crate::proto::v1 as pb;
use crate::resolve::{self, Prepared};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A root and the definition evaluating it; the value holds the root version it was
/// prepared for (one entry per root: a new version replaces the old one).
pub(super) type PreparedKey = (Uid, u64);

/// Diagnostics that mean a resolution did not ask every question (a pod update cannot be
/// judged unchanged against it).
pub(super) fn cut_short(graph: &pb::Workload) -> bool {
    graph
        .diagnostics
        .iter()
        .any(|d| resolve::diagnostics::cut_short(&d.code))
}

/// What a dirty uid needs: nothing more (it is no root), or a resolution of these inputs.
pub(super) enum Gathered {
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
    gangs: GangStatuses,
}

/// Dirty roots resolved between two publications (bounds how long readers wait for a large
/// re-resolution, e.g. after a catalog change, to show progress).
const PUBLISH_EVERY: usize = 256;
/// Dirty roots from which a flush resolves on more than one thread.
pub(super) const PARALLEL_FROM: usize = 64;
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

impl Index {
    /// Re-resolves every dirty root and publishes the changes, [`PUBLISH_EVERY`] roots at
    /// a time.
    pub(super) fn flush(&self, w: &mut Writer) {
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
                    Settled::Gone(uid) => gone.push(uid),
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
    /// roots differ widely in cost (a workload of a thousand pods beside one of
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
            super::feed::WRITER_STACK,
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
    pub(super) fn gather_as(&self, uid: &Uid, catalog: &Catalog, only_roots: bool) -> Gathered {
        let objects = self.objects();
        let Some(entry) = objects.get(uid) else {
            return Gathered::NotRoot;
        };
        let graph = objects.graph();
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
                match objects.get(child).map(|e| &e.cached) {
                    // Pods can own further objects (a leader pod owning its workers'
                    // StatefulSet, a driver pod owning its executors).
                    Some(Cached::Pod(p)) => {
                        pods.push((child.clone(), p.clone()));
                        stack.push((child.clone(), depth + 1));
                    }
                    Some(Cached::Object(o)) => {
                        if crate::gangs::verify::Family::of(&o.meta.api_version, &o.meta.kind)
                            .is_some()
                        {
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
    pub(super) fn prepared_for(
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
        let previous = self.board.get(uid).map(|e| e.gangs.clone());
        let gangs = crate::gangs::live::annotate(
            &mut resolution.workload,
            &gangs,
            &refs,
            previous.as_deref().unwrap_or_default(),
        );
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
            gangs,
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
                    if let Some(e) = objects.get_mut(pod) {
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
                Publication::new(r.uid, Arc::new(r.graph), r.labels)
                    .placed(r.placements)
                    .with_gangs(r.gangs)
            })
            .collect();
        self.board.publish(updates, gone)
    }
}
