//! The Kubernetes source: kube-rs watchers feeding the index, and Karta objects feeding the
//! definition layers.
//!
//! Layout: this module plans what to watch (discovery, modes, readiness, the task per kind);
//! [`informer`] drives one kind's watcher into a sink (the index or the definitions), lists
//! converted beside their download and handed over in parts; [`document`] parses fully
//! watched objects straight into what the index keeps of them; [`convert`] turns watched
//! objects into JSON documents; [`karta`] is the Karta controller (status conditions from
//! the Lease-elected replica).
//!
//! What is watched, per group+kind (see [`wanted_kinds`] and [`Mode`]):
//! - root kinds of the catalog and core v1 Pod: full objects (what is never cached is left
//!   out at conversion: `object::OBJECT_RULE` and `POD_PROJECTION`);
//! - kinds that are only child/intermediate kinds: metadata only (`PartialObjectMetadata`
//!   list/watch), enough for owner chains and labels;
//! - `run.ai/v1alpha1` Karta objects (cluster-scoped): each is validated and compiled into
//!   the cluster layer of the catalog through the [`Publisher`].
//! - gang objects (KAI, Workload API and coscheduling PodGroups, Workloads,
//!   CompositePodGroups; `crate::gangs::live::watched_kinds`), when served: metadata and spec
//!   into the index ([`Mode::Gangs`]), checked against the graph of the root that owns them.
//!
//! Kinds are resolved with per-group discovery (`pinned_kind`); kinds not served are retried
//! every `rediscover` and whenever a new catalog is published, so a CRD installed later or a
//! root kind added by a definition is picked up (and a kind that becomes a root switches to a
//! full watch). Each served kind gets one watcher task with its own index source name
//! (`kubernetes:{group}/{version}/{kind}`), so a relist of one kind only replaces that kind's
//! objects.
//!
//! Events, restarts and errors are counted per kind in [`Counters`], which the metrics read
//! at scrape time. Errors back off per kind ([`Backoff`]: exponential with jitter, reset by any successful
//! event, at least the server's `retryAfterSeconds`). Readiness ([`SOURCE`]) waits until every
//! kind served at startup delivered its first full list; a kind whose list keeps failing keeps
//! readiness false, except when it is forbidden (403): after `startup_attempts` forbidden
//! attempts readiness stops waiting for it, and it keeps retrying with backoff.

mod convert;
pub mod counters;
pub mod crds;
mod document;
mod informer;
pub mod karta;
pub mod owner_lookup;
pub mod pod_labels;

pub use crate::backoff::Backoff;
pub use counters::Counters;

pub use informer::forbidden_message;
use informer::watch_kind;

use crate::definition::catalog::version_priority;
use crate::definition::{Catalog, GroupVersionKind, model};
use crate::index::{Feed, Index};
use crate::source::definitions::Publisher;
use ::kube::api::ApiResource;
use ::kube::runtime::watcher;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{AbortHandle, JoinSet};

/// Name of the Kubernetes source in the index's readiness set.
pub const SOURCE: &str = "kubernetes";

/// `(group, kind)`: a watched kind regardless of version.
type GroupKind = (String, String);

/// Settings of the Kubernetes source.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How often kinds not served (or whose discovery failed) are looked up again.
    pub rediscover: Duration,
    /// Retry delays after list/watch errors.
    pub backoff: Backoff,
    /// Discovery passes, and forbidden list attempts per kind, before readiness stops
    /// waiting for what still fails.
    pub startup_attempts: u32,
    /// Where informer events, restarts and errors are counted (the metrics read them).
    pub counters: Arc<Counters>,
    /// Only objects and pods of this namespace (namespace sharding); Karta objects, being
    /// cluster-scoped, are always all read.
    pub namespace: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            rediscover: Duration::from_secs(30),
            backoff: Backoff::default(),
            startup_attempts: 3,
            counters: Arc::default(),
            namespace: None,
        }
    }
}

/// How a kind is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Full objects into the index (root kinds and pods).
    Full,
    /// Metadata only into the index (kinds that are only children/intermediates).
    Metadata,
    /// Karta objects into the cluster definition layer.
    Definitions,
    /// Gang objects (metadata and spec) into the index, checked against their workloads'
    /// graphs (`crate::gangs::live`).
    Gangs,
}

/// The kinds to watch: catalog root kinds, child kinds and core v1 Pod, by group+kind, each
/// with its candidate versions, highest priority first.
pub fn wanted_kinds(catalog: &Catalog) -> BTreeMap<GroupKind, Vec<GroupVersionKind>> {
    let mut all: BTreeMap<GroupKind, Vec<GroupVersionKind>> = BTreeMap::new();
    let pod = GroupVersionKind::new("", "v1", "Pod");
    let kinds = catalog
        .definitions()
        .flat_map(|d| std::iter::once(&d.root_kind).chain(d.child_kinds()))
        .chain(std::iter::once(&pod));
    let gangs = crate::gangs::live::watched_kinds();
    for gvk in kinds.chain(gangs.iter()) {
        if gvk.kind.is_empty() || gvk.version.is_empty() || never_watched(gvk) {
            continue;
        }
        let versions = all
            .entry((gvk.group.clone(), gvk.kind.clone()))
            .or_default();
        if !versions.iter().any(|v| v.version == gvk.version) {
            versions.push(gvk.clone());
        }
    }
    for versions in all.values_mut() {
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.version)));
    }
    all
}

/// Kinds that carry secrets: never watched, whatever a definition names.
fn never_watched(gvk: &GroupVersionKind) -> bool {
    gvk.group.is_empty() && matches!(gvk.kind.as_str(), "Secret" | "ConfigMap")
}

/// How a wanted kind is watched: full for root kinds and pods, metadata only otherwise.
pub fn mode_of(catalog: &Catalog, group: &str, kind: &str) -> Mode {
    if crate::gangs::live::watched_kinds()
        .iter()
        .any(|g| g.group == group && g.kind == kind)
        && !catalog.covers(group, kind)
    {
        Mode::Gangs
    } else if catalog.covers(group, kind) || (group.is_empty() && kind == "Pod") {
        Mode::Full
    } else {
        Mode::Metadata
    }
}

/// The Karta kind, watched for definitions.
fn karta_kind() -> GroupVersionKind {
    GroupVersionKind::from_api_version(model::API_VERSION, model::KIND)
}

/// Index source name of one watched kind.
fn source_name(ar: &ApiResource) -> String {
    format!("{SOURCE}:{}/{}/{}", ar.group, ar.version, ar.kind)
}

/// Readiness of [`SOURCE`]: which kinds delivered their first list (or were released), and
/// (once the startup discovery is done) which startup kinds are still outstanding.
struct Gate {
    feed: Feed,
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    finished: HashSet<String>,
    pending: Option<HashSet<String>>,
}

impl Gate {
    fn lock(&self) -> parking_lot::MutexGuard<'_, GateState> {
        self.state.lock()
    }

    /// Sets the kinds readiness waits for (once, after the startup discovery).
    fn arm(&self, kinds: HashSet<String>) {
        let mut st = self.lock();
        let pending: HashSet<String> = kinds.difference(&st.finished).cloned().collect();
        if pending.is_empty() {
            tracing::info!("kubernetes: every initial list is in; synced");
            self.feed.mark_synced(SOURCE);
        }
        st.pending = Some(pending);
    }

    /// A kind's first full list arrived, or readiness stops waiting for it.
    fn done(&self, kind: &str) {
        let mut st = self.lock();
        st.finished.insert(kind.to_owned());
        if let Some(pending) = st.pending.as_mut()
            && pending.remove(kind)
            && pending.is_empty()
        {
            tracing::info!("kubernetes: every initial list is in; synced");
            self.feed.mark_synced(SOURCE);
        }
    }
}

enum Discovered {
    Served(ApiResource),
    NotServed,
    Failed(String),
}

async fn discover(client: &::kube::Client, versions: &[GroupVersionKind]) -> Discovered {
    let mut failure = None;
    for gvk in versions {
        let kgvk = ::kube::api::GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        match ::kube::discovery::pinned_kind(client, &kgvk).await {
            Ok((ar, _caps)) => return Discovered::Served(ar),
            Err(::kube::Error::Api(status)) if status.code == 404 => {}
            Err(::kube::Error::Discovery(_)) => {}
            Err(e) => failure = Some(format!("{}/{}/{}: {e}", gvk.group, gvk.version, gvk.kind)),
        }
    }
    match failure {
        Some(f) => Discovered::Failed(f),
        None => Discovered::NotServed,
    }
}

/// What every watcher task shares.
struct Ctx {
    client: ::kube::Client,
    index: Arc<Index>,
    feed: Feed,
    gate: Gate,
    publisher: Option<Arc<Publisher>>,
    settings: Settings,
}

/// Event hooks: one place per informer event, error and restart (metrics go here).
impl Ctx {
    /// An event of a watched kind: `event` is `list` (a full list or relist replaced the
    /// kind's objects), `apply` or `delete`.
    fn on_event(&self, source: &str, event: &'static str) {
        tracing::trace!(source = %source, event, "kubernetes: event");
        self.settings.counters.event(kind_label(source), event);
    }

    /// A watcher (re)started listing a kind: `relist` is false for the first list of a
    /// watcher task, true for a relist (410 Gone, watch error) or a restarted task.
    fn on_restart(&self, source: &str, relist: bool) {
        if relist {
            tracing::info!(source = %source, "kubernetes: relisting");
            self.settings.counters.restart(kind_label(source));
        }
    }

    /// A list or watch request of a kind failed; `delay` is the backoff before the retry.
    fn on_error(&self, source: &str, error: &watcher::Error, delay: Duration) {
        tracing::warn!(source = %source, retry_in = ?delay, "kubernetes: watch error (retrying): {error}");
        self.settings.counters.error(kind_label(source));
    }
}

/// The `group/version/kind` part of a source name, as the metrics' `kind` label.
fn kind_label(source: &str) -> &str {
    source
        .strip_prefix(SOURCE)
        .and_then(|s| s.strip_prefix(':'))
        .unwrap_or(source)
}

/// Watches every wanted kind the cluster serves and feeds `index` (and, with a
/// `publisher`, Karta objects into the cluster definition layer); marks [`SOURCE`] synced
/// when every initial list is in. Runs until dropped (dropping it stops every watcher).
pub async fn run(
    client: ::kube::Client,
    index: Arc<Index>,
    settings: Settings,
    publisher: Option<Arc<Publisher>>,
) {
    let mut catalog_changes = publisher.as_ref().map(|p| p.subscribe());
    let feed = index.feed();
    let ctx = Arc::new(Ctx {
        client,
        gate: Gate {
            feed: feed.clone(),
            state: Mutex::default(),
        },
        feed,
        index,
        publisher,
        settings,
    });
    let mut tasks: JoinSet<()> = JoinSet::new();
    spawn_drift_check(&mut tasks, &ctx);
    // Per group+kind: the watcher task, its mode and its index source name.
    let mut running: HashMap<GroupKind, (AbortHandle, Mode, String)> = HashMap::new();
    let mut startup: Option<HashSet<String>> = Some(HashSet::new());
    let mut attempt = 0u32;
    loop {
        while tasks.try_join_next().is_some() {}
        running.retain(|_, (h, _, name)| {
            if h.is_finished() {
                tracing::warn!(source = %name, "kubernetes: watcher ended; restarting");
                ctx.on_restart(name, true);
            }
            !h.is_finished()
        });
        let catalog = ctx.index.catalog();
        let mut wanted: Vec<(GroupKind, Vec<GroupVersionKind>, Mode)> = wanted_kinds(&catalog)
            .into_iter()
            .map(|(gk, versions)| {
                let mode = mode_of(&catalog, &gk.0, &gk.1);
                (gk, versions, mode)
            })
            .collect();
        if ctx.publisher.is_some() {
            let karta = karta_kind();
            wanted.push((
                (karta.group.clone(), karta.kind.clone()),
                vec![karta],
                Mode::Definitions,
            ));
        }
        let mut failed = 0usize;
        for (gk, versions, mode) in wanted {
            match running.get(&gk) {
                Some((_, m, _)) if *m == mode => continue,
                Some((handle, m, _)) => {
                    tracing::info!(group = %gk.0, kind = %gk.1, from = ?m, to = ?mode, "kubernetes: switching watch mode");
                    handle.abort();
                }
                None => {}
            }
            match discover(&ctx.client, &versions).await {
                Discovered::Served(ar) => {
                    let name = source_name(&ar);
                    tracing::info!(source = %name, plural = %ar.plural, mode = ?mode, "kubernetes: watching");
                    if let Some(s) = startup.as_mut() {
                        s.insert(name.clone());
                    }
                    let handle = tasks.spawn(watch_kind(ctx.clone(), ar, mode));

                    running.insert(gk, (handle, mode, name));
                }
                Discovered::NotServed => {
                    running.remove(&gk);
                    tracing::debug!(group = %gk.0, kind = %gk.1, "kubernetes: kind not served");
                }
                Discovered::Failed(e) => {
                    running.remove(&gk);
                    failed += 1;
                    tracing::warn!("kubernetes: discovery failed: {e}");
                }
            }
        }
        attempt += 1;
        if startup.is_some() && (failed == 0 || attempt >= ctx.settings.startup_attempts) {
            ctx.gate.arm(startup.take().unwrap_or_default());
        }
        let sleep = tokio::time::sleep(ctx.settings.rediscover);
        match catalog_changes.as_mut() {
            Some(rx) => tokio::select! {
                () = sleep => {}
                changed = rx.changed() => if changed.is_err() { catalog_changes = None },
            },
            None => sleep.await,
        }
    }
}

/// With a definition publisher, the CRD watch that keeps schema drift current
/// ([`super::crds`]).
fn spawn_drift_check(tasks: &mut JoinSet<()>, ctx: &Ctx) {
    if let Some(p) = &ctx.publisher {
        tasks.spawn(crds::run(
            ctx.client.clone(),
            ctx.index.clone(),
            p.report(),
            p.subscribe(),
            ctx.settings.backoff,
        ));
    }
}
