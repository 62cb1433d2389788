//! The readers' side: what every reader (Resolve, List, Watch, Totals, metrics, health, the
//! aggregator's clients) is served from. The live index and the aggregator publish to it;
//! nothing here resolves or converts.
//!
//! The board: what readers are served from. Published graphs by key, a revision counter that
//! starts at a random per-process epoch, and a bounded change history for `Watch` resume.
//!
//! One writer publishes at a time, in short critical sections (graphs are resolved or
//! received, and encoded, before the lock is taken); readers copy `Arc`s out under a short
//! read lock and filter, sort and coalesce after it is released. The live index keys its
//! workloads by uid; an aggregator keys the graphs it relays by upstream and uid, so the
//! same uid from two clusters stays two workloads.

mod filter;
mod observed;
mod placements;
pub mod pod_labels;
mod published;
pub mod selector;

pub use filter::{Filter, TotalsKey};
pub use observed::{
    AttributedPod, MAX_FETCHED_OWNERS, NewPod, OwnerLookup, PodMiss, Sizes, SourceProblem,
    UnownedGpuPod,
};
pub use placements::Placements;
pub use published::Published;

use crate::gangs::live::GangStatuses;
use crate::proto::v1 as pb;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

/// How many changes the history keeps for `Watch` resume.
pub const DEFAULT_HISTORY: usize = 10_000;

/// A workload's key on the board (the index: the root's uid).
pub type Key = Arc<str>;

/// A root object's labels (what label selectors read), shared between the current entry and
/// the history.
pub type Labels = Arc<[(String, String)]>;

/// One change of one workload.
#[derive(Debug, Clone)]
pub struct Change {
    /// The workload's key on the board (changes of one key coalesce).
    pub key: Key,
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

/// A published workload. Immutable once published: readers hold it by `Arc` after the
/// board's lock is released.
pub struct WorkloadEntry {
    /// Its key on the board.
    pub key: Key,
    /// The current graph.
    pub graph: Arc<Published>,
    /// The root's labels.
    pub labels: Labels,
    /// Where its pods sit (the live index only).
    pub(super) placements: Placements,
    /// The verdicts on its gang objects (the live index only; `crate::gangs::live`).
    pub gangs: GangStatuses,
}

/// A new version of a workload, ready to publish.
pub struct Publication {
    key: Key,
    graph: Arc<Published>,
    labels: Labels,
    placements: Placements,
    gangs: GangStatuses,
}

impl Publication {
    /// A graph to publish under `key` (at the board's next revision, whatever its own), with
    /// the root's labels.
    pub fn new(key: Key, graph: Arc<Published>, labels: Labels) -> Publication {
        Publication {
            key,
            graph,
            labels,
            placements: Placements::default(),
            gangs: Arc::from([]),
        }
    }

    /// With where its pods sit.
    pub(super) fn placed(mut self, placements: Placements) -> Publication {
        self.placements = placements;
        self
    }

    /// With the verdicts on its gang objects.
    pub(super) fn with_gangs(mut self, gangs: GangStatuses) -> Publication {
        self.gangs = gangs;
        self
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) revision: u64,
    pub(super) workloads: HashMap<Key, Arc<WorkloadEntry>>,
    history: VecDeque<Change>,
    /// Encoded bytes of the history's graphs (shared ones counted too).
    history_bytes: usize,
}

/// Published graphs, revisions and the change history (see the module docs).
pub struct Board {
    state: RwLock<State>,
    history_cap: usize,
    /// Bytes of graphs the history keeps at most (the last change is always kept).
    history_bytes_cap: usize,
    revision_tx: tokio::sync::watch::Sender<u64>,
}

/// Where a process's revisions start: a random multiple of 2^32, so a `since_revision`
/// from another replica or an earlier run is (almost surely) outside this board's history
/// and gets RESET instead of a wrong resume.
fn revision_epoch() -> u64 {
    ((crate::random::next_u64() % (1 << 20)) + 1) << 32
}

/// The list order: (namespace, kind, name), ties broken by uid and then cluster so that the
/// order is total.
fn sort_key(w: &pb::Workload) -> (String, String, String, String, String) {
    let r = w.r#ref.clone().unwrap_or_default();
    (r.namespace, r.kind, r.name, r.uid, w.cluster.clone())
}

fn sorted(mut all: Vec<Arc<WorkloadEntry>>) -> Vec<Arc<WorkloadEntry>> {
    all.sort_by_cached_key(|w| sort_key(&w.graph));
    all
}

/// Adds `r` to `into`, saturating every field at its range (never wrapping); true when a
/// field saturated.
fn add_resources(into: &mut pb::Resources, r: &pb::Resources) -> bool {
    use crate::model::resources::{clamp_quantity, format_quantity, parse_quantity};
    let mut saturated = false;
    into.gpus += r.gpus;
    for (to, add) in [
        (&mut into.cpu_millis, r.cpu_millis),
        (&mut into.memory_bytes, r.memory_bytes),
    ] {
        *to = to.checked_add(add).unwrap_or_else(|| {
            saturated = true;
            if add < 0 { i64::MIN } else { i64::MAX }
        });
    }
    for (k, v) in &r.raw {
        let sum = parse_quantity(v)
            .unwrap_or(0)
            .saturating_add(into.raw.get(k).and_then(|x| parse_quantity(x)).unwrap_or(0));
        let kept = clamp_quantity(sum);
        saturated |= kept != sum;
        into.raw.insert(k.clone(), format_quantity(k, kept));
    }
    saturated
}

/// Adds `n` to a count, saturating at its maximum; true when it saturated.
fn add_count(to: &mut u32, n: u32) -> bool {
    match to.checked_add(n) {
        Some(sum) => {
            *to = sum;
            false
        }
        None => {
            *to = u32::MAX;
            true
        }
    }
}

impl Board {
    /// An empty board keeping `history_cap` changes.
    pub fn new(history_cap: usize) -> Board {
        let epoch = revision_epoch();
        let (revision_tx, _) = tokio::sync::watch::channel(epoch);
        Board {
            state: RwLock::new(State {
                revision: epoch,
                ..State::default()
            }),
            history_cap: history_cap.max(1),
            history_bytes_cap: usize::MAX,
            revision_tx,
        }
    }

    /// The same board, its history also bounded by the bytes of its graphs (an
    /// aggregator's: what upstreams send is not trusted to be small).
    pub fn with_history_bytes(mut self, cap: usize) -> Board {
        self.history_bytes_cap = cap;
        self
    }

    pub(super) fn set_history_cap(&mut self, cap: usize) {
        self.history_cap = cap.max(1);
    }

    pub(super) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read()
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write()
    }

    /// Current revision.
    pub fn revision(&self) -> u64 {
        self.read().revision
    }

    /// A receiver that sees every new revision (for Watch).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.revision_tx.subscribe()
    }

    /// Receivers currently subscribed (open Watch streams and internal listeners).
    pub fn subscribers(&self) -> usize {
        self.revision_tx.receiver_count()
    }

    /// Tells subscribers about the current revision (after one or more publications).
    pub fn notify(&self) {
        let _ = self.revision_tx.send(self.revision());
    }

    /// How many workloads are published.
    pub fn len(&self) -> usize {
        self.read().workloads.len()
    }

    /// True when nothing is published.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The workload with this key.
    pub fn get(&self, key: &str) -> Option<Arc<WorkloadEntry>> {
        self.read().workloads.get(key).cloned()
    }

    /// Every published workload (copied out under the read lock), with the revision.
    pub fn entries(&self) -> (Vec<Arc<WorkloadEntry>>, u64) {
        let state = self.read();
        (state.workloads.values().cloned().collect(), state.revision)
    }

    /// The published workloads whose key `keep` accepts.
    pub fn entries_where(&self, keep: impl Fn(&str) -> bool) -> Vec<Arc<WorkloadEntry>> {
        self.read()
            .workloads
            .iter()
            .filter(|(k, _)| keep(k))
            .map(|(_, w)| w.clone())
            .collect()
    }

    /// Publishes new graphs and removals (without notifying subscribers: see
    /// [`Board::notify`]); a graph equal to the published one (and with the same labels) is
    /// skipped. Returns true when anything was published.
    pub fn publish(&self, updates: Vec<Publication>, gone: Vec<Key>) -> bool {
        if updates.is_empty() && gone.is_empty() {
            return false;
        }
        let mut state = self.write();
        let mut changed = false;
        for key in gone {
            if let Some(old) = state.workloads.remove(&key) {
                self.record(
                    &mut state,
                    key,
                    pb::EventType::Deleted,
                    old.graph.clone(),
                    old.labels.clone(),
                    old.labels.clone(),
                );
                changed = true;
            }
        }
        for u in updates {
            let previous = state.workloads.get(&u.key).cloned();
            // A label change alone is published too: label-filtered watchers see the
            // workload enter or leave their view.
            if let Some(w) = previous
                .as_ref()
                .filter(|w| w.graph.same_graph(&u.graph) && w.labels.as_ref() == u.labels.as_ref())
            {
                // The placements are the same too: the graph lists every pod (by uid) where
                // it is placed. New gang verdicts replace the old ones without a change.
                if w.gangs != u.gangs {
                    state.workloads.insert(
                        u.key.clone(),
                        Arc::new(WorkloadEntry {
                            key: u.key,
                            graph: w.graph.clone(),
                            labels: w.labels.clone(),
                            placements: u.placements,
                            gangs: u.gangs,
                        }),
                    );
                }
                continue;
            }
            let kind = if previous.is_some() {
                pb::EventType::Modified
            } else {
                pb::EventType::Added
            };
            let graph = Arc::new(u.graph.stamped(state.revision + 1));
            state.workloads.insert(
                u.key.clone(),
                Arc::new(WorkloadEntry {
                    key: u.key.clone(),
                    graph: graph.clone(),
                    placements: u.placements,
                    labels: u.labels.clone(),
                    gangs: u.gangs,
                }),
            );
            let before = previous.map_or_else(|| Arc::from([]), |w| w.labels.clone());
            self.record(&mut state, u.key, kind, graph, u.labels, before);
            changed = true;
        }
        changed
    }

    fn record(
        &self,
        state: &mut State,
        key: Key,
        kind: pb::EventType,
        workload: Arc<Published>,
        labels: Labels,
        previous: Labels,
    ) {
        state.revision += 1;
        let revision = state.revision;
        state.history_bytes = state.history_bytes.saturating_add(workload.encoded_len());
        state.history.push_back(Change {
            key,
            revision,
            kind,
            workload,
            labels,
            previous,
        });
        while state.history.len() > self.history_cap
            || (state.history_bytes > self.history_bytes_cap && state.history.len() > 1)
        {
            if let Some(old) = state.history.pop_front() {
                state.history_bytes = state
                    .history_bytes
                    .saturating_sub(old.workload.encoded_len());
            }
        }
    }

    /// The matching workloads, sorted.
    fn matching(&self, filter: &Filter) -> (Vec<Arc<WorkloadEntry>>, u64) {
        let (all, revision) = self.entries();
        let selector = filter.selector();
        let matching = sorted(
            all.into_iter()
                .filter(|w| filter.matches_scope(&w.graph) && selector.matches(&w.labels))
                .collect(),
        );
        (matching, revision)
    }

    /// Every matching workload now, with the current revision (a Watch snapshot).
    pub fn snapshot(&self, filter: &Filter) -> (Vec<Arc<Published>>, u64) {
        let (matching, revision) = self.matching(filter);
        (
            matching.into_iter().map(|w| w.graph.clone()).collect(),
            revision,
        )
    }

    /// Matching workloads in (namespace, kind, name) order, from `offset`, at most `limit`;
    /// also returns whether more follow, and the revision.
    pub fn list(
        &self,
        filter: &Filter,
        offset: usize,
        limit: usize,
    ) -> (Vec<Arc<pb::Workload>>, bool, u64) {
        let (matching, revision) = self.matching(filter);
        let more = matching.len().saturating_sub(offset) > limit;
        let page = matching
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|w| Arc::new(w.graph.graph()))
            .collect();
        (page, more, revision)
    }

    /// Like [`Board::list`], from the first matching workload that sorts after `after`'s
    /// (namespace, kind, name, uid) and cluster (`None`: after every cluster's workload of
    /// that key) instead of from an offset: a position that keeps its meaning while
    /// workloads come and go (nothing is skipped or repeated because of them).
    pub fn list_after(
        &self,
        filter: &Filter,
        after: Option<(&pb::ObjectRef, Option<&str>)>,
        limit: usize,
    ) -> (Vec<Arc<pb::Workload>>, bool, u64) {
        let (matching, revision) = self.matching(filter);
        let start = after.map_or(0, |(r, cluster)| {
            let key = (&r.namespace, &r.kind, &r.name, &r.uid);
            matching.partition_point(|w| {
                let k = sort_key(&w.graph);
                let at = (&k.0, &k.1, &k.2, &k.3);
                at < key || (at == key && cluster.is_none_or(|c| k.4.as_str() <= c))
            })
        });
        let rest = &matching[start..];
        let page = rest
            .iter()
            .take(limit)
            .map(|w| Arc::new(w.graph.graph()))
            .collect();
        (page, rest.len() > limit, revision)
    }

    /// The published workloads whose reference and cluster `matches` accepts (a scan).
    pub fn find(&self, matches: impl Fn(&pb::ObjectRef, &str) -> bool) -> Vec<Arc<WorkloadEntry>> {
        let (all, _) = self.entries();
        sorted(
            all.into_iter()
                .filter(|w| {
                    w.graph
                        .r#ref
                        .as_ref()
                        .is_some_and(|r| matches(r, &w.graph.cluster))
                })
                .collect(),
        )
    }

    /// Sums of desired and held resources, pods and workload counts, by `key`, over the
    /// workloads in `namespace` and `cluster` (empty: all).
    pub fn totals(
        &self,
        key: TotalsKey,
        namespace: &str,
        cluster: &str,
    ) -> (Vec<pb::TotalsRow>, u64) {
        let (all, revision) = self.entries();
        // In list order, so that the sums (floating point, rounded quantities) do not depend
        // on the map's order: equal sets of workloads give equal totals on every server.
        let all = sorted(all);
        let mut rows: BTreeMap<(String, String), pb::TotalsRow> = BTreeMap::new();
        for w in &all {
            let g = &w.graph;
            let r = g.r#ref.clone().unwrap_or_default();
            if (!namespace.is_empty() && r.namespace != namespace)
                || (!cluster.is_empty() && g.cluster != cluster)
            {
                continue;
            }
            let group = r.api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let (k, row_cluster) = match key {
                TotalsKey::Namespace => (r.namespace.clone(), String::new()),
                TotalsKey::Kind => {
                    if group.is_empty() {
                        (r.kind.clone(), String::new())
                    } else {
                        (format!("{group}/{}", r.kind), String::new())
                    }
                }
                TotalsKey::Workload => (
                    format!("{}/{}/{}", r.namespace, r.kind, r.name),
                    g.cluster.clone(),
                ),
                TotalsKey::Cluster => (g.cluster.clone(), g.cluster.clone()),
            };
            let row = rows
                .entry((k.clone(), row_cluster.clone()))
                .or_insert_with(|| pb::TotalsRow {
                    key: k,
                    totals: Some(pb::Totals {
                        desired: Some(Default::default()),
                        current: Some(Default::default()),
                    }),
                    pods: Some(Default::default()),
                    workloads: 0,
                    cluster: row_cluster,
                    saturated: false,
                });
            let mut saturated = add_count(&mut row.workloads, 1);
            let t = g.totals.clone().unwrap_or_default();
            if let Some(rt) = row.totals.as_mut() {
                if let (Some(d), Some(x)) = (rt.desired.as_mut(), t.desired.as_ref()) {
                    saturated |= add_resources(d, x);
                }
                if let (Some(c), Some(x)) = (rt.current.as_mut(), t.current.as_ref()) {
                    saturated |= add_resources(c, x);
                }
            }
            if let (Some(p), Some(x)) = (row.pods.as_mut(), g.pods.as_ref()) {
                saturated |= add_count(&mut p.desired, x.desired);
                saturated |= add_count(&mut p.current, x.current);
                saturated |= add_count(&mut p.ready, x.ready);
            }
            // A graph that already holds a field's maximum makes its rows lower bounds too.
            let out_of_range = g
                .diagnostics
                .iter()
                .any(|d| d.code == crate::resolve::diagnostics::code::QUANTITY_OUT_OF_RANGE);
            row.saturated |= saturated || out_of_range;
        }
        (rows.into_values().collect(), revision)
    }

    /// What a subscriber filtered by `filter` and current to revision `since` must receive
    /// to be current now, coalesced to the latest graph per workload (in revision order),
    /// with the revision it is then current to and how many matching changes were merged
    /// into a later one; `None` when `since` is older than the kept history (or from another
    /// run). A workload that enters the filter's view (created, or its labels now match)
    /// comes as ADDED, one that leaves it (deleted, or its labels no longer match) as DELETED
    /// with its last graph, so deletions are never lost. Costs O(changes since `since`).
    pub fn changes_since_counted(
        &self,
        since: u64,
        filter: &Filter,
    ) -> Option<(Vec<Change>, u64, usize)> {
        // The changes are copied out (Arc clones) under the read lock; filtering and
        // coalescing run after it is released.
        let (history, revision) = {
            let state = self.read();
            let oldest = state
                .history
                .front()
                .map_or(state.revision + 1, |c| c.revision);
            // Older than the history, or from another replica or run (revisions start at a
            // per-process epoch): RESET.
            if since > state.revision || (since + 1 < oldest && since < state.revision) {
                return None;
            }
            let start = state.history.partition_point(|c| c.revision <= since);
            let history: Vec<Change> = state.history.range(start..).cloned().collect();
            (history, state.revision)
        };
        let selector = filter.selector();
        // key -> (in the view at `since`, latest change, changes merged into it).
        let mut latest: HashMap<&str, (bool, &Change, usize)> = HashMap::new();
        let mut matching = 0usize;
        for c in &history {
            if !filter.matches_scope(&c.workload) {
                continue;
            }
            latest
                .entry(c.key.as_ref())
                .and_modify(|(_, last, n)| {
                    *last = c;
                    *n += 1;
                })
                .or_insert_with(|| {
                    let before = c.kind != pb::EventType::Added && selector.matches(&c.previous);
                    (before, c, 1)
                });
        }
        let mut out: Vec<Change> = latest
            .into_values()
            .filter_map(|(before, c, n)| {
                let after = c.kind != pb::EventType::Deleted && selector.matches(&c.labels);
                if before || after {
                    // Only changes this subscriber could see count as coalesced.
                    matching += n;
                }
                let kind = match (before, after) {
                    (false, false) => return None,
                    (false, true) => pb::EventType::Added,
                    (true, true) => pb::EventType::Modified,
                    (true, false) => pb::EventType::Deleted,
                };
                Some(Change { kind, ..c.clone() })
            })
            .collect();
        out.sort_by_key(|c| c.revision);
        let coalesced = matching.saturating_sub(out.len());
        Some((out, revision, coalesced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(cluster: &str, uid: &str, pods: u32) -> Published {
        Published::new(pb::Workload {
            r#ref: Some(pb::ObjectRef {
                kind: "Job".into(),
                namespace: "ml".into(),
                name: "train".into(),
                uid: uid.into(),
                ..Default::default()
            }),
            cluster: cluster.into(),
            pods: Some(pb::PodCounts {
                desired: pods,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>()
            .into()
    }

    fn update(key: &str, cluster: &str, pods: u32) -> Publication {
        Publication::new(
            Arc::from(key),
            Arc::new(graph(cluster, "u1", pods)),
            labels(&[]),
        )
    }

    #[test]
    fn the_same_uid_under_two_keys_is_two_workloads() {
        let board = Board::new(100);
        let start = board.revision();
        assert!(board.publish(vec![update("a/u1", "a", 1), update("b/u1", "b", 1)], vec![]));
        assert_eq!(board.len(), 2);
        assert_eq!(board.revision(), start + 2);
        // Republishing an equal graph changes nothing.
        assert!(!board.publish(vec![update("a/u1", "a", 1)], vec![]));
        assert!(board.publish(vec![update("b/u1", "b", 2)], vec![]));
        let (changes, now, coalesced) = board
            .changes_since_counted(start, &Filter::default())
            .unwrap();
        assert_eq!(now, start + 3);
        assert_eq!(changes.len(), 2, "one per key, coalesced: {changes:?}");
        assert_eq!(coalesced, 1);
        assert!(changes.iter().all(|c| c.kind == pb::EventType::Added));
        let only_b = Filter {
            cluster: "b".into(),
            ..Filter::default()
        };
        let (changes, _, _) = board.changes_since_counted(start + 2, &only_b).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].kind, pb::EventType::Modified);
        assert_eq!(changes[0].workload.pods.unwrap().desired, 2);
        assert_eq!(board.snapshot(&only_b).0.len(), 1);
        let (rows, _) = board.totals(TotalsKey::Cluster, "", "");
        let keys: Vec<(&str, u32)> = rows.iter().map(|r| (r.key.as_str(), r.workloads)).collect();
        assert_eq!(keys, [("a", 1), ("b", 1)]);
        let (rows, _) = board.totals(TotalsKey::Workload, "", "");
        assert_eq!(
            rows.len(),
            2,
            "one row per cluster for the same workload key"
        );
        assert_eq!(rows[0].cluster, "a");
        let (rows, _) = board.totals(TotalsKey::Namespace, "", "");
        assert_eq!(rows.len(), 1, "namespaces sum over clusters");
        assert_eq!(rows[0].workloads, 2);
        assert!(board.publish(vec![], vec![Arc::from("a/u1")]));
        let (changes, _, _) = board
            .changes_since_counted(start + 3, &Filter::default())
            .unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].kind, pb::EventType::Deleted);
        assert_eq!(changes[0].workload.cluster, "a");
    }

    #[test]
    fn a_page_resumes_after_the_same_key_in_another_cluster() {
        let board = Board::new(100);
        board.publish(
            vec![
                update("a/u1", "a", 1),
                update("b/u1", "b", 1),
                update("c/u1", "c", 1),
            ],
            vec![],
        );
        let filter = Filter::default();
        let (first, more, _) = board.list_after(&filter, None, 1);
        assert!(more);
        assert_eq!(first[0].cluster, "a");
        let r = first[0].r#ref.clone().unwrap();
        let (second, more, _) = board.list_after(&filter, Some((&r, Some("a"))), 1);
        assert!(more);
        assert_eq!(second[0].cluster, "b");
        let (rest, more, _) = board.list_after(&filter, Some((&r, Some("b"))), 5);
        assert!(!more);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].cluster, "c");
        let (none, more, _) = board.list_after(&filter, Some((&r, None)), 5);
        assert!(
            !more && none.is_empty(),
            "no cluster: after all of that key"
        );
    }

    #[test]
    fn the_history_is_capped_by_bytes_too() {
        // The size of one published (stamped) graph.
        let scratch = Board::new(1);
        scratch.publish(vec![update("k", "", 1)], vec![]);
        let one = scratch.get("k").unwrap().graph.encoded_len();
        // Room for three changes' graphs (and at most 100 changes).
        let board = Board::new(100).with_history_bytes(3 * one + one / 2);
        let start = board.revision();
        for pods in 1..=10 {
            board.publish(vec![update("k", "", pods)], vec![]);
        }
        let state = board.read();
        assert_eq!(state.history.len(), 3);
        let bytes: usize = state.history.iter().map(|c| c.workload.encoded_len()).sum();
        assert_eq!(state.history_bytes, bytes);
        drop(state);
        assert!(
            board
                .changes_since_counted(start + 5, &Filter::default())
                .is_none(),
            "a cursor older than the bytes kept resets"
        );
        assert!(
            board
                .changes_since_counted(start + 7, &Filter::default())
                .is_some()
        );
        // One change larger than the cap is still kept (the last one always is).
        let tiny = Board::new(100).with_history_bytes(1);
        let from = tiny.revision();
        tiny.publish(vec![update("k", "", 1)], vec![]);
        assert!(
            tiny.changes_since_counted(from, &Filter::default())
                .is_some()
        );
    }

    #[test]
    fn the_history_is_capped_and_an_old_cursor_resets() {
        let board = Board::new(2);
        let start = board.revision();
        for pods in 1..=5 {
            board.publish(vec![update("k", "", pods)], vec![]);
        }
        assert!(
            board
                .changes_since_counted(start, &Filter::default())
                .is_none()
        );
        let (changes, now, _) = board
            .changes_since_counted(start + 3, &Filter::default())
            .unwrap();
        assert_eq!(now, start + 5);
        assert_eq!(changes.len(), 1);
        assert!(
            board
                .changes_since_counted(now + 1, &Filter::default())
                .is_none(),
            "a cursor from the future resets"
        );
    }
}
