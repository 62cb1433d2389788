//! The aggregator: one kartograf serving the union of other kartografs (one per cluster, or
//! the namespace shards of one cluster) through the same API.
//!
//! ```text
//! upstream A ─Watch─▶ task A ─┐
//! upstream B ─Watch─▶ task B ─┼─▶ Aggregator: Board (its own revisions and history) ─▶ server
//! upstream C ─Watch─▶ task C ─┘     + names ─▶ Resolve by reference; pod/inline ─▶ upstream
//! ```
//!
//! Each upstream's graphs arrive as the bytes it encoded and are published as those bytes
//! (only the revision field is replaced by the aggregator's own), keyed by upstream and uid:
//! the same uid in two clusters is two workloads. Faults are explicit: an upstream that is
//! lost (or RESETs) has its workloads marked with an `upstream_stale` diagnostic, kept for
//! [`Settings::grace`], then deleted; when it comes back the aggregator resumes its Watch
//! (or reconciles a fresh snapshot), publishing only what changed.
//!
//! What one upstream may cost is bounded ([`Limits`]): an upstream that sends a graph too
//! large, too many workloads or bytes, or a snapshot that does not end in time is isolated
//! (its connection dropped, marked stale with the reason, reconnected with backoff), and the
//! others are untouched. An upstream speaks only for its own cluster name (and the
//! `clusters` it is configured with): graphs naming another cluster are refused.

mod breach;
pub mod config;
mod cost;
mod lookup;
mod observed;
mod session;
mod upstream;
pub mod wire;

pub use crate::backoff::Backoff;
pub use config::UpstreamConfig;
pub use upstream::Upstream;

use crate::board::{Board, Key, Labels, Publication, Published, WorkloadEntry};
use crate::definition::Catalog;
use crate::proto::v1 as pb;
use parking_lot::{Mutex, RwLock};
use session::Incoming;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};
use upstream::Stale;

/// The diagnostic code on the graphs of an upstream that is stale.
pub const UPSTREAM_STALE: &str = "upstream_stale";

/// How an aggregator behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a lost upstream's workloads stay (marked stale) before they are deleted.
    pub grace: Duration,
    /// Ready at once, instead of once every upstream synced.
    pub serve_partial: bool,
    /// Changes kept for Watch resume.
    pub history: usize,
    /// Reconnection delays.
    pub backoff: Backoff,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// How long a forwarded Resolve may take.
    pub forward_timeout: Duration,
    /// What one upstream may cost.
    pub limits: Limits,
    /// Bytes of graphs the change history (for Watch resume) keeps at most, besides
    /// `history` changes: an upstream that rewrites large graphs cannot grow it past this.
    pub history_bytes: usize,
}

/// What one upstream may cost the aggregator; an upstream that exceeds a bound is isolated
/// (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest graph (encoded) accepted; larger messages are refused by the Watch client
    /// before they are buffered. A graph may decode to at most
    /// `DECODED_PER_ENCODED` (16) times this, estimated before decoding.
    pub max_graph_bytes: usize,
    /// Workloads held from one upstream (and in one snapshot being collected).
    pub max_workloads: usize,
    /// Bytes held for one upstream's graphs, encodings plus decoded summaries (and in one
    /// snapshot being collected).
    pub max_bytes: usize,
    /// How long a snapshot (a first subscription, or after RESET) may take to reach SYNCED.
    pub snapshot_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_graph_bytes: 16 << 20,
            max_workloads: 100_000,
            max_bytes: 2 << 30,
            snapshot_timeout: Duration::from_secs(300),
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            grace: Duration::from_secs(60),
            serve_partial: false,
            history: crate::board::DEFAULT_HISTORY,
            // 250 ms doubling to 10 s, with jitter: upstreams come back quickly.
            backoff: Backoff {
                initial: Duration::from_millis(250),
                factor: 2.0,
                max: Duration::from_secs(10),
                jitter: true,
            },
            connect_timeout: Duration::from_secs(5),
            forward_timeout: Duration::from_secs(10),
            limits: Limits::default(),
            history_bytes: 1 << 30,
        }
    }
}

/// The aggregator's store: what its server serves (see the module docs).
pub struct Aggregator {
    board: Board,
    catalog: Arc<Catalog>,
    settings: Settings,
    /// Serializes publications (upstream tasks, expiry timers, reconfiguration).
    writer: Mutex<()>,
    /// (namespace, name) -> keys of the workloads of that name (Resolve by reference).
    names: RwLock<HashMap<(String, String), Vec<Key>>>,
    upstreams: RwLock<BTreeMap<String, Arc<Upstream>>>,
    /// Upstreams of the first configuration that have not synced yet.
    pending: Mutex<BTreeSet<String>>,
    synced: AtomicBool,
    started: AtomicBool,
}

/// A time as RFC 3339 (UTC, seconds).
fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// The root's labels as the graph carries them.
fn labels_of(graph: &Published) -> Labels {
    graph
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect::<Vec<_>>()
        .into()
}

/// The (namespace, name) of a graph.
fn name_of(graph: &Published) -> (String, String) {
    let r = graph.r#ref.as_ref();
    (
        r.map(|r| r.namespace.clone()).unwrap_or_default(),
        r.map(|r| r.name.clone()).unwrap_or_default(),
    )
}

impl Aggregator {
    /// An aggregator with no upstreams yet; `catalog` serves ListDefinitions and inline
    /// requests that name no cluster.
    pub fn new(catalog: Catalog, settings: Settings) -> Arc<Aggregator> {
        Arc::new(Aggregator {
            board: Board::new(settings.history).with_history_bytes(settings.history_bytes),
            catalog: Arc::new(catalog),
            settings,
            writer: Mutex::default(),
            names: RwLock::default(),
            upstreams: RwLock::default(),
            pending: Mutex::default(),
            synced: AtomicBool::new(false),
            started: AtomicBool::new(false),
        })
    }

    /// Follows exactly these upstreams from now on: new ones are started, removed ones
    /// stopped (their workloads deleted), changed ones restarted (their workloads kept and
    /// reconciled). The first call's upstreams are what readiness waits for. Needs a Tokio
    /// runtime.
    pub fn set_upstreams(self: &Arc<Self>, configs: Vec<UpstreamConfig>) {
        let first = !self.started.swap(true, Ordering::AcqRel);
        if first && !self.settings.serve_partial {
            let mut pending = self.pending.lock();
            pending.extend(configs.iter().map(|c| c.name.clone()));
        }
        if first && (configs.is_empty() || self.settings.serve_partial) {
            self.synced.store(true, Ordering::Release);
        }
        let wanted: HashMap<&str, &UpstreamConfig> =
            configs.iter().map(|c| (c.name.as_str(), c)).collect();
        let current: Vec<Arc<Upstream>> = self.upstreams.read().values().cloned().collect();
        for up in &current {
            match wanted.get(up.name()) {
                None => self.remove_upstream(up),
                Some(c) if **c != up.config => {
                    tracing::info!(upstream = %up.name(), "upstream settings changed; reconnecting");
                    if let Some(task) = up.task.lock().take() {
                        task.abort();
                    }
                    let replacement = Arc::new(Upstream::new((*c).clone()));
                    // It keeps the workloads (same prefix) and their state, and the timer of
                    // a loss in progress.
                    let state = std::mem::take(&mut *up.state());
                    let expiry = state.stale.as_ref().map(|s| (state.epoch, s.since));
                    *replacement.state() = state;
                    self.start(replacement.clone());
                    if let Some((epoch, since)) = expiry {
                        self.arm_expiry(&replacement, epoch, since);
                    }
                }
                Some(_) => {}
            }
        }
        for c in configs {
            if !current.iter().any(|u| u.name() == c.name) {
                tracing::info!(upstream = %c.name, url = %c.url, "following a new upstream");
                self.start(Arc::new(Upstream::new(c)));
            }
        }
    }

    fn start(self: &Arc<Self>, up: Arc<Upstream>) {
        // Registered before its task runs: what the task applies is for the current upstream.
        self.upstreams
            .write()
            .insert(up.name().to_owned(), up.clone());
        let task = tokio::spawn(upstream::run(self.clone(), up.clone()));
        *up.task.lock() = Some(task);
    }

    fn remove_upstream(&self, up: &Arc<Upstream>) {
        tracing::info!(upstream = %up.name(), "upstream removed from the configuration; its workloads are deleted");
        if let Some(task) = up.task.lock().take() {
            task.abort();
        }
        let _writer = self.writer.lock();
        self.upstreams.write().remove(up.name());
        let gone = self.keys_of(up);
        self.publish(up, Vec::new(), gone);
        self.settle_pending(up.name());
    }

    /// The upstreams now, by name.
    pub fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        self.upstreams.read().get(name).cloned()
    }

    /// True while `up` is the configured upstream of its name (not removed or replaced).
    fn is_current(&self, up: &Arc<Upstream>) -> bool {
        self.upstreams
            .read()
            .get(up.name())
            .is_some_and(|u| Arc::ptr_eq(u, up))
    }

    fn keys_of(&self, up: &Upstream) -> Vec<Key> {
        self.board
            .entries_where(|k| k.starts_with(&up.prefix))
            .into_iter()
            .map(|w| w.key.clone())
            .collect()
    }

    fn entries_of(&self, up: &Upstream) -> Vec<Arc<WorkloadEntry>> {
        self.board.entries_where(|k| k.starts_with(&up.prefix))
    }

    /// Publishes new graphs and removals of `up`'s workloads (each key at most once, in
    /// `updates` or in `gone`), keeping the name index and `up`'s counts in step; the
    /// caller holds the writer lock.
    fn publish(&self, up: &Upstream, updates: Vec<(Key, Arc<Published>)>, gone: Vec<Key>) {
        if updates.is_empty() && gone.is_empty() {
            return;
        }
        let held = |key: &Key| self.board.get(key).map(|w| cost::held(&w.graph));
        let before: Vec<Option<usize>> = gone
            .iter()
            .chain(updates.iter().map(|(k, _)| k))
            .map(held)
            .collect();
        {
            let mut names = self.names.write();
            let mut unname = |key: &Key, name: (String, String)| {
                if let Some(keys) = names.get_mut(&name) {
                    keys.retain(|k| k != key);
                    if keys.is_empty() {
                        names.remove(&name);
                    }
                }
            };
            for key in &gone {
                if let Some(w) = self.board.get(key) {
                    unname(key, name_of(&w.graph));
                }
            }
            // A graph whose name changed (a rename under the same uid) leaves its old name.
            for (key, graph) in &updates {
                if let Some(w) = self.board.get(key) {
                    let old = name_of(&w.graph);
                    if old != name_of(graph) {
                        unname(key, old);
                    }
                }
            }
            let mut state = up.state();
            for (key, graph) in &updates {
                let keys = names.entry(name_of(graph)).or_default();
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
                if !state.clusters.contains(&graph.cluster) {
                    state.clusters.insert(graph.cluster.clone());
                }
            }
        }
        let keys: Vec<Key> = gone
            .iter()
            .cloned()
            .chain(updates.iter().map(|(k, _)| k.clone()))
            .collect();
        let publications = updates
            .into_iter()
            .map(|(key, graph)| {
                let labels = labels_of(&graph);
                Publication::new(key, graph, labels)
            })
            .collect();
        if self.board.publish(publications, gone) {
            self.board.notify();
        }
        let mut state = up.state();
        for (key, before) in keys.iter().zip(before) {
            let after = held(key);
            if let Some(b) = before {
                state.workloads = state.workloads.saturating_sub(1);
                state.bytes = state.bytes.saturating_sub(b);
            }
            if let Some(a) = after {
                state.workloads = state.workloads.saturating_add(1);
                state.bytes = state.bytes.saturating_add(a);
            }
        }
    }

    /// Applies live changes from `up` (the last change of each workload): all of them, or
    /// none when they would make `up` hold more workloads or bytes than its limits allow
    /// (the error says which).
    fn apply(&self, up: &Arc<Upstream>, changes: Vec<Incoming>) -> Result<(), breach::Breach> {
        if changes.is_empty() {
            return Ok(());
        }
        let _writer = self.writer.lock();
        if !self.is_current(up) {
            return Ok(());
        }
        let limits = &self.settings.limits;
        let (mut workloads, mut bytes) = {
            let state = up.state();
            (state.workloads, state.bytes)
        };
        let mut updates = Vec::new();
        let mut gone = Vec::new();
        for (uid, graph) in session::coalesce(changes) {
            let key = Key::from(up.key(&uid));
            let old = self.board.get(&key).map(|w| cost::held(&w.graph));
            if let Some(old) = old {
                workloads = workloads.saturating_sub(1);
                bytes = bytes.saturating_sub(old);
            }
            match graph {
                Some(graph) => {
                    workloads = workloads.saturating_add(1);
                    bytes = bytes.saturating_add(cost::held(&graph));
                    updates.push((key, Arc::new(graph)));
                }
                None if old.is_some() => gone.push(key),
                None => {}
            }
        }
        if workloads > limits.max_workloads {
            return Err(breach::Breach::Workloads {
                max: limits.max_workloads,
            });
        }
        if bytes > limits.max_bytes {
            return Err(breach::Breach::Bytes {
                max: limits.max_bytes,
            });
        }
        self.publish(up, updates, gone);
        Ok(())
    }

    /// True when `up` may publish graphs of `cluster`: its own name, a cluster its
    /// configuration lists, or (when it lists `*`) one that no other upstream names or lists.
    fn may_speak_for(&self, up: &Upstream, cluster: &str) -> bool {
        let lists = |u: &Upstream, c: &str| u.config.clusters.iter().any(|x| x == c);
        if cluster == up.name() || lists(up, cluster) {
            return true;
        }
        if !lists(up, config::ANY_CLUSTER) {
            return false;
        }
        {
            let state = up.state();
            if state.clusters.len() >= config::MAX_CLUSTERS && !state.clusters.contains(cluster) {
                return false;
            }
        }
        !self
            .upstreams
            .read()
            .values()
            .any(|o| o.name() != up.name() && (o.name() == cluster || lists(o, cluster)))
    }

    /// Counts a graph of `up` that is not published; the log says why for the 1st, 2nd,
    /// 4th, 8th… (a bounded number of lines), the last reason stays for ListSources.
    fn refuse(&self, up: &Upstream, reason: String) {
        let mut state = up.state();
        state.refused = state.refused.saturating_add(1);
        if state.refused.is_power_of_two() {
            tracing::warn!(upstream = %up.name(), refused = state.refused, %reason, "refused a graph of an upstream");
        }
        state.refusal = Some(crate::excerpt::excerpt(&reason, 512).into_owned());
    }

    /// Replaces what `up` holds with a full snapshot: only differences are published (a
    /// stale graph equal to its fresh version is published once more, without its mark).
    fn reconcile(&self, up: &Arc<Upstream>, snapshot: HashMap<String, Published>) {
        let _writer = self.writer.lock();
        if !self.is_current(up) {
            return;
        }
        up.state().stale = None;
        let fresh: HashSet<Key> = snapshot.keys().map(|uid| Key::from(up.key(uid))).collect();
        let gone: Vec<Key> = self
            .keys_of(up)
            .into_iter()
            .filter(|k| !fresh.contains(k))
            .collect();
        let updates = snapshot
            .into_iter()
            .map(|(uid, graph)| (Key::from(up.key(&uid)), Arc::new(graph)))
            .collect();
        tracing::info!(upstream = %up.name(), workloads = fresh.len(), removed = gone.len(), "upstream snapshot reconciled");
        self.publish(up, updates, gone);
    }

    /// Marks `up`'s workloads stale (once per loss; graphs that arrived since are marked
    /// too, and the reason is the latest) and arms the timer that deletes them after the
    /// grace period.
    fn mark_stale(self: &Arc<Self>, up: &Arc<Upstream>, reason: &str) {
        let _writer = self.writer.lock();
        if !self.is_current(up) {
            return;
        }
        let (stale, armed) = {
            let mut state = up.state();
            let reason = crate::excerpt::excerpt(reason, 512).into_owned();
            let armed = match state.stale.as_mut() {
                None => {
                    state.stale = Some(Stale {
                        since: Instant::now(),
                        at: SystemTime::now(),
                        reason,
                    });
                    state.epoch += 1;
                    Some(state.epoch)
                }
                // The loss goes on (its time and timer stay); ListSources says why now.
                Some(stale) => {
                    stale.reason = reason;
                    None
                }
            };
            (state.stale.clone(), armed)
        };
        let Some(stale) = stale else { return };
        let grace = self.settings.grace;
        let diagnostic = pb::Diagnostic {
            severity: crate::resolve::diagnostics::WARNING.to_owned(),
            code: UPSTREAM_STALE.to_owned(),
            message: format!(
                "upstream {} has sent nothing since {} ({}); this is its last known graph, deleted {}s after that unless the upstream comes back",
                up.name(),
                rfc3339(stale.at),
                stale.reason,
                grace.as_secs()
            ),
            ..Default::default()
        };
        let updates = self
            .entries_of(up)
            .into_iter()
            .filter(|w| w.graph.appended() == 0)
            .map(|w| {
                (
                    w.key.clone(),
                    Arc::new(w.graph.with_diagnostic(diagnostic.clone())),
                )
            })
            .collect();
        self.publish(up, updates, Vec::new());
        if let Some(epoch) = armed {
            self.arm_expiry(up, epoch, stale.since);
        }
    }

    /// Deletes `up`'s workloads at the end of the grace period of loss `epoch` (that began
    /// at `since`), unless it is over by then.
    fn arm_expiry(self: &Arc<Self>, up: &Arc<Upstream>, epoch: u64, since: Instant) {
        let aggregator = self.clone();
        let up = up.clone();
        let deadline = since + self.settings.grace;
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline.into()).await;
            aggregator.expire(&up, epoch);
        });
    }

    /// `up` is current again (a resumed Watch caught up): its graphs lose their stale mark.
    /// False when its workloads were dropped meanwhile (the grace period ended): the caller
    /// must subscribe again from a snapshot.
    fn clear_stale(&self, up: &Arc<Upstream>) -> bool {
        let _writer = self.writer.lock();
        if !self.is_current(up) {
            return true;
        }
        {
            let mut state = up.state();
            if state.expired {
                return false;
            }
            state.stale = None;
        }
        let updates = self
            .entries_of(up)
            .into_iter()
            .filter(|w| w.graph.appended() > 0)
            .map(|w| (w.key.clone(), w.graph.without_appended()))
            .collect();
        self.publish(up, updates, Vec::new());
        true
    }

    /// The grace period of loss `epoch` ended: if `up` is still stale since then, its
    /// workloads are deleted (its next subscription starts from a snapshot).
    fn expire(&self, up: &Arc<Upstream>, epoch: u64) {
        let _writer = self.writer.lock();
        {
            let mut state = up.state();
            if state.stale.is_none() || state.epoch != epoch {
                return;
            }
            state.expired = true;
        }
        let gone = self.keys_of(up);
        if !gone.is_empty() {
            tracing::warn!(upstream = %up.name(), workloads = gone.len(), "upstream stale past the grace period; its workloads are deleted");
        }
        self.publish(up, Vec::new(), gone);
    }

    /// `up` completed a full sync.
    fn mark_synced(&self, up: &Arc<Upstream>) {
        if !self.is_current(up) {
            return;
        }
        up.state().synced = true;
        self.settle_pending(up.name());
    }

    fn settle_pending(&self, name: &str) {
        let mut pending = self.pending.lock();
        pending.remove(name);
        if pending.is_empty() {
            self.synced.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_996_800 + 3_723);
        assert_eq!(rfc3339(t), "2026-11-30T01:02:03Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}
