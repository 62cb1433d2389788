//! The Kubernetes source: kube-rs watchers for every catalog root kind the cluster serves,
//! every child/intermediate kind and pods, feeding the index.
//!
//! Kinds are resolved with per-group discovery (`pinned_kind`); kinds not served are retried
//! every `rediscover`, so a CRD installed later (or a kind added by a definition reload) is
//! picked up. Each served kind gets one watcher task with its own index source name
//! (`kubernetes:{group}/{version}/{kind}`), so a relist of one kind only replaces that kind's
//! objects. [`SOURCE`] is marked synced once every kind served at startup delivered its first
//! full list. Secret-bearing fields are stripped before caching (see [`sanitize`]).

use crate::definition::catalog::version_priority;
use crate::definition::{Catalog, GroupVersionKind};
use crate::index::Index;
use ::kube::api::{Api, ApiResource, DynamicObject};
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher::{self, Event};
use futures::StreamExt;
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::{AbortHandle, JoinSet};

/// Name of the Kubernetes source in the index's readiness set.
pub const SOURCE: &str = "kubernetes";

/// How many times the startup discovery retries kinds whose discovery failed for a reason
/// other than "not served" before readiness stops waiting for them.
const STARTUP_ATTEMPTS: usize = 3;

/// `(group, kind)`: a watched kind regardless of version.
type GroupKind = (String, String);

/// The kinds to watch: catalog root kinds, child kinds and core v1 Pod, by group+kind, each
/// with its candidate versions, highest priority first.
pub fn wanted_kinds(catalog: &Catalog) -> BTreeMap<GroupKind, Vec<GroupVersionKind>> {
    let mut all: BTreeMap<GroupKind, Vec<GroupVersionKind>> = BTreeMap::new();
    let pod = GroupVersionKind::new("", "v1", "Pod");
    let kinds = catalog
        .definitions()
        .flat_map(|d| std::iter::once(&d.root_kind).chain(d.child_kinds()))
        .chain(std::iter::once(&pod));
    for gvk in kinds {
        if gvk.kind.is_empty() || gvk.version.is_empty() {
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

/// Index source name of one watched kind.
fn source_name(ar: &ApiResource) -> String {
    format!("{SOURCE}:{}/{}/{}", ar.group, ar.version, ar.kind)
}

/// Readiness of [`SOURCE`]: which kinds delivered their first list, and (once the startup
/// discovery is done) which startup kinds are still outstanding.
struct Gate {
    index: Arc<Index>,
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    finished: HashSet<String>,
    pending: Option<HashSet<String>>,
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the kinds readiness waits for (once, after the startup discovery).
    fn arm(&self, kinds: HashSet<String>) {
        let mut st = self.lock();
        let pending: HashSet<String> = kinds.difference(&st.finished).cloned().collect();
        if pending.is_empty() {
            tracing::info!("kubernetes: every initial list is in; synced");
            self.index.mark_synced(SOURCE);
        }
        st.pending = Some(pending);
    }

    /// A kind's first full list arrived.
    fn done(&self, kind: &str) {
        let mut st = self.lock();
        st.finished.insert(kind.to_owned());
        if let Some(pending) = st.pending.as_mut()
            && pending.remove(kind)
            && pending.is_empty()
        {
            tracing::info!("kubernetes: every initial list is in; synced");
            self.index.mark_synced(SOURCE);
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

/// Watches every wanted kind the cluster serves and feeds `index`; marks [`SOURCE`] synced
/// when every initial list is in. Runs until dropped (dropping it stops every watcher).
pub async fn run(client: ::kube::Client, index: Arc<Index>, rediscover: Duration) {
    let gate = Arc::new(Gate {
        index: index.clone(),
        state: Mutex::default(),
    });
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut running: HashMap<GroupKind, AbortHandle> = HashMap::new();
    let mut startup: Option<HashSet<String>> = Some(HashSet::new());
    let mut attempt = 0usize;
    loop {
        while tasks.try_join_next().is_some() {}
        running.retain(|gk, h| {
            if h.is_finished() {
                tracing::warn!(group = %gk.0, kind = %gk.1, "kubernetes: watcher ended; restarting");
            }
            !h.is_finished()
        });
        let mut failed = 0usize;
        for (gk, versions) in wanted_kinds(&index.catalog()) {
            if running.contains_key(&gk) {
                continue;
            }
            match discover(&client, &versions).await {
                Discovered::Served(ar) => {
                    let name = source_name(&ar);
                    tracing::info!(source = %name, plural = %ar.plural, "kubernetes: watching");
                    if let Some(s) = startup.as_mut() {
                        s.insert(name.clone());
                    }
                    let handle =
                        tasks.spawn(watch_kind(client.clone(), ar, index.clone(), gate.clone()));
                    running.insert(gk, handle);
                }
                Discovered::NotServed => {
                    tracing::debug!(group = %gk.0, kind = %gk.1, "kubernetes: kind not served");
                }
                Discovered::Failed(e) => {
                    failed += 1;
                    tracing::warn!("kubernetes: discovery failed: {e}");
                }
            }
        }
        attempt += 1;
        if startup.is_some() && (failed == 0 || attempt >= STARTUP_ATTEMPTS) {
            gate.arm(startup.take().unwrap_or_default());
        }
        tokio::time::sleep(rediscover).await;
    }
}

/// One kind's watcher: buffers the initial list and replaces the kind's objects at once;
/// applies and deletes events as they come. Errors are logged and retried with backoff.
async fn watch_kind(client: ::kube::Client, ar: ApiResource, index: Arc<Index>, gate: Arc<Gate>) {
    let source = source_name(&ar);
    let api = Api::<DynamicObject>::all_with(client, &ar);
    let mut stream =
        std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut buffer: Vec<Json> = Vec::new();
    let mut first = true;
    while let Some(item) = stream.next().await {
        match item {
            Err(e) => tracing::warn!(source = %source, "kubernetes: watch error (retrying): {e}"),
            Ok(Event::Init) => buffer.clear(),
            Ok(Event::InitApply(obj)) => {
                if let Some(json) = to_json(&obj, &ar) {
                    buffer.push(json);
                }
            }
            Ok(Event::InitDone) => {
                let docs = std::mem::take(&mut buffer);
                let skipped = index.reset(&source, &docs);
                tracing::info!(
                    source = %source,
                    objects = docs.len(),
                    skipped = skipped.len(),
                    "kubernetes: list replaced"
                );
                for s in skipped {
                    tracing::warn!(source = %source, "kubernetes: object skipped: {s}");
                }
                if first {
                    first = false;
                    gate.done(&source);
                }
            }
            Ok(Event::Apply(obj)) => {
                if let Some(json) = to_json(&obj, &ar)
                    && let Err(e) = index.apply(&json, &source)
                {
                    tracing::warn!(source = %source, "kubernetes: object skipped: {e}");
                }
            }
            Ok(Event::Delete(obj)) => {
                if let Some(json) = to_json(&obj, &ar) {
                    index.delete(&identity(&json));
                }
            }
        }
    }
    tracing::warn!(source = %source, "kubernetes: watch stream ended");
}

/// The index identity of an object: its uid, or the stand-in the index derives without one.
fn identity(json: &Json) -> String {
    let s = |p: &str| json.pointer(p).and_then(Json::as_str).unwrap_or_default();
    let uid = s("/metadata/uid");
    if !uid.is_empty() {
        return uid.to_owned();
    }
    let (ns, name) = (s("/metadata/namespace"), s("/metadata/name"));
    let key = if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    };
    format!("{}:{}:{key}", s("/apiVersion"), s("/kind"))
}

/// Converts a watched object to JSON with `apiVersion`/`kind` set, sanitized.
fn to_json(obj: &DynamicObject, ar: &ApiResource) -> Option<Json> {
    let mut json = match serde_json::to_value(obj) {
        Ok(j) => j,
        Err(e) => {
            tracing::warn!(kind = %ar.kind, "kubernetes: cannot convert object: {e}");
            return None;
        }
    };
    let map = json.as_object_mut()?;
    for (key, value) in [("apiVersion", &ar.api_version), ("kind", &ar.kind)] {
        if map
            .get(key)
            .and_then(Json::as_str)
            .is_none_or(str::is_empty)
        {
            map.insert(key.to_owned(), Json::String(value.clone()));
        }
    }
    sanitize(&mut json);
    Some(json)
}

/// Strips what is never cached: `metadata.managedFields`; for pods every container's
/// `env`, `envFrom`, `command` and `args` and `spec.volumes`; for any other object the
/// `env`/`envFrom` of containers in embedded pod templates.
pub fn sanitize(json: &mut Json) {
    if let Some(meta) = json.get_mut("metadata").and_then(Json::as_object_mut) {
        meta.remove("managedFields");
    }
    let is_pod = json.get("kind").and_then(Json::as_str) == Some("Pod")
        && json.get("apiVersion").and_then(Json::as_str) == Some("v1");
    if is_pod {
        if let Some(spec) = json.get_mut("spec").and_then(Json::as_object_mut) {
            spec.remove("volumes");
            for list in ["containers", "initContainers", "ephemeralContainers"] {
                for c in spec
                    .get_mut(list)
                    .and_then(Json::as_array_mut)
                    .into_iter()
                    .flatten()
                    .filter_map(Json::as_object_mut)
                {
                    for field in ["env", "envFrom", "command", "args"] {
                        c.remove(field);
                    }
                }
            }
        }
    } else if let Some(spec) = json.get_mut("spec") {
        strip_template_env(spec, 0);
    }
}

/// Removes `env`/`envFrom` from every container list below `value` (bounded depth).
fn strip_template_env(value: &mut Json, depth: usize) {
    if depth > 32 {
        return;
    }
    match value {
        Json::Object(map) => {
            for (key, v) in map.iter_mut() {
                if matches!(key.as_str(), "containers" | "initContainers")
                    && let Json::Array(items) = v
                {
                    for c in items.iter_mut().filter_map(Json::as_object_mut) {
                        c.remove("env");
                        c.remove("envFrom");
                    }
                } else {
                    strip_template_env(v, depth + 1);
                }
            }
        }
        Json::Array(items) => {
            for v in items {
                strip_template_env(v, depth + 1);
            }
        }
        _ => {}
    }
}
