//! The web view's read-only JSON API (`/ui/api/…`), built from what the gRPC handlers read:
//! the board (List, Totals), the store's lookups (Resolve) and the Definitions service.
//!
//! - `overview`: totals by cluster, namespace and kind, workloads by status, GPUs held by
//!   workloads that are not running, GPUs held by pods of no workload, sources and
//!   definitions health.
//! - `workloads?cluster=&namespace=&kind=&status=&selector=&q=&sort=&desc=&offset=&limit=`:
//!   one page of workload rows (at most [`MAX_PAGE`]), filtered and sorted, with the total
//!   and the values each filter can take.
//! - `workload?uid=&cluster=`: one workload's full graph (proto3 JSON) and its definition.
//! - `definitions`: `ListDefinitions` and `ListSources`, as the gRPC API answers them.
//!
//! Every string that comes from an object is cut to a bounded excerpt where a list carries
//! it (labels in rows); a workload's own graph is sent as resolved (its size is bounded by
//! the index's limits).

use super::{Body, Query, error, json};
use crate::board::{Filter, Published};
use crate::excerpt::excerpt;
use crate::proto::v1 as pb;
use crate::server::{DefinitionsService, Shared};
use hyper::{Response, StatusCode};
use pb::definitions_server::Definitions;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Default rows of a workloads page.
pub const DEFAULT_PAGE: usize = 100;
/// Most rows of a workloads page.
pub const MAX_PAGE: usize = 500;
/// Bytes of one label key or value in a row.
pub const LABEL_BYTES: usize = 256;
/// Labels of one row.
pub const ROW_LABELS: usize = 16;
/// Most entries of each list of the overview (unowned GPU pods, problems).
pub const OVERVIEW_LIST: usize = 50;
/// Most values a filter's choices list.
pub const MAX_CHOICES: usize = 1000;

/// Answers one API request (`endpoint` is the path after `/ui/api/`).
/// `kept` holds the listener's last overview sums.
pub async fn answer(
    shared: &Shared,
    kept: &Arc<KeptSums>,
    endpoint: &str,
    query: Option<&str>,
) -> Response<Body> {
    let query = query.map(str::to_owned);
    let shared = shared.clone();
    let result: Result<Vec<u8>, (StatusCode, String)> = match endpoint {
        "overview" => {
            let kept = kept.clone();
            blocking(move || overview(&shared, &kept)).await
        }
        "workloads" => blocking(move || workloads(&shared, query.as_deref())).await,
        "workload" => blocking(move || workload(&shared, query.as_deref())).await,
        "definitions" => definitions(&shared).await,
        _ => Err((StatusCode::NOT_FOUND, format!("no API {endpoint:?}"))),
    };
    match result {
        Ok(body) => json(StatusCode::OK, body),
        Err((status, message)) => error(status, &message),
    }
}

type Answer = Result<Vec<u8>, (StatusCode, String)>;

/// Runs `work` on a blocking thread (lists and totals scan every workload).
async fn blocking(work: impl FnOnce() -> Answer + Send + 'static) -> Answer {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|_| Err((StatusCode::INTERNAL_SERVER_ERROR, "failed".to_owned())))
}

fn encode(value: &impl Serialize) -> Answer {
    serde_json::to_vec(value).map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// The HTTP status of a gRPC status.
fn http_status(status: &tonic::Status) -> (StatusCode, String) {
    let code = match status.code() {
        tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition => StatusCode::BAD_REQUEST,
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        tonic::Code::PermissionDenied => StatusCode::FORBIDDEN,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, status.message().to_owned())
}

/// The phase the web view shows: its short name ([`crate::proto::phase_name`]), `Unknown`
/// for none.
pub fn shown_phase(w: &pb::Workload) -> &'static str {
    match crate::proto::phase_name(w.status.as_ref().map_or(0, |s| s.phase)) {
        "Unspecified" => "Unknown",
        name => name,
    }
}

/// True for phases in which held GPUs are doing the workload's work.
fn working(phase: &str) -> bool {
    matches!(phase, "Running" | "Degraded" | "Initializing" | "Resuming")
}

fn gpus(w: &pb::Workload) -> (f64, f64) {
    let t = w.totals.as_ref();
    (
        t.and_then(|t| t.desired.as_ref()).map_or(0.0, |r| r.gpus),
        t.and_then(|t| t.current.as_ref()).map_or(0.0, |r| r.gpus),
    )
}

// === overview ===

#[derive(Serialize)]
struct Overview<'a> {
    revision: u64,
    synced: bool,
    pending: Vec<String>,
    workloads: usize,
    by_cluster: &'a [Group],
    by_namespace: &'a [Group],
    by_kind: &'a [Group],
    by_status: BTreeMap<&'static str, usize>,
    gpus: GpuSummary,
    not_working: &'a [Row],
    unowned: &'a [Unowned],
    unowned_total: usize,
    sources: Vec<SourceHealth>,
    definitions: DefinitionHealth,
}

#[derive(Serialize, Default, Clone, Copy)]
struct GpuSummary {
    desired: f64,
    held: f64,
    /// Held by workloads not running (completed, failed, suspended, unknown).
    held_not_working: f64,
    /// Held by pods of no workload.
    unowned: f64,
}

#[derive(Serialize)]
struct Unowned {
    namespace: String,
    name: String,
    owner_kind: String,
    owner_name: String,
    gpus: f64,
}

#[derive(Serialize)]
struct SourceHealth {
    name: String,
    synced: bool,
    problems: usize,
    first_problem: String,
}

#[derive(Serialize, Default)]
struct DefinitionHealth {
    generation: u64,
    active: usize,
    with_warnings: usize,
    quarantined: usize,
    failed_files: usize,
}

/// One row of the overview's sums: what the Totals RPC sums, limited to what the page shows
/// (GPUs, pods, workloads), in one pass over the workloads (the Totals RPC also sums every
/// raw quantity, which costs ten times more at 10,000 workloads).
#[derive(Serialize, Default)]
struct Group {
    key: String,
    workloads: u64,
    pods_desired: u64,
    pods_current: u64,
    pods_ready: u64,
    gpus_desired: f64,
    gpus_held: f64,
}

impl Group {
    fn add(&mut self, w: &Published) {
        let pods = w.pods.unwrap_or_default();
        let (desired, held) = gpus_of(w);
        self.workloads += 1;
        self.pods_desired += u64::from(pods.desired);
        self.pods_current += u64::from(pods.current);
        self.pods_ready += u64::from(pods.ready);
        self.gpus_desired += desired;
        self.gpus_held += held;
    }
}

/// Sums by cluster, namespace and kind (`group/Kind`, as Totals names kinds).
fn groups(all: &[Arc<Published>]) -> [Vec<Group>; 3] {
    let mut maps: [BTreeMap<String, Group>; 3] = Default::default();
    for w in all {
        let r = w.r#ref.as_ref();
        let namespace = r.map_or("", |r| r.namespace.as_str());
        let kind = r.map_or(String::new(), |r| match r.api_version.rsplit_once('/') {
            Some((group, _)) => format!("{group}/{}", r.kind),
            None => r.kind.clone(),
        });
        for (map, key) in maps
            .iter_mut()
            .zip([w.cluster.as_str(), namespace, kind.as_str()])
        {
            match map.get_mut(key) {
                Some(g) => g.add(w),
                None => {
                    let mut g = Group {
                        key: excerpt(key, LABEL_BYTES).into_owned(),
                        ..Group::default()
                    };
                    g.add(w);
                    map.insert(key.to_owned(), g);
                }
            }
        }
    }
    maps.map(|m| m.into_values().collect())
}

/// The part of the overview that reads every workload and every GPU pod, kept for as long as
/// nothing it reads changed (the board's revision and the store's object writes), so a page
/// opened by many people, or reloaded, costs one scan per change, not one per request.
#[derive(Clone)]
struct Sums {
    workloads: usize,
    by_cluster: Arc<Vec<Group>>,
    by_namespace: Arc<Vec<Group>>,
    by_kind: Arc<Vec<Group>>,
    by_status: BTreeMap<&'static str, usize>,
    gpus: GpuSummary,
    not_working: Arc<Vec<Row>>,
    unowned: Arc<Vec<Unowned>>,
    unowned_total: usize,
}

/// The last sums of one listener's store, with what they were computed from (revision,
/// object writes). Owned by the listener's [`View`](super::View): one store per listener.
#[derive(Default)]
pub struct KeptSums(parking_lot::Mutex<Option<((u64, u64), Sums)>>);

fn sums(shared: &Shared, kept: &KeptSums) -> (Sums, u64) {
    let store = &shared.store;
    // Read before the scan: a change during it makes the next request scan again.
    let stamp = (store.board().revision(), store.object_writes());
    if let Some((_, sums)) = kept.0.lock().as_ref().filter(|(s, _)| *s == stamp) {
        return (sums.clone(), stamp.0);
    }
    let (all, revision) = store.board().snapshot(&Filter::default());
    let mut by_status = BTreeMap::new();
    let mut gpus = GpuSummary::default();
    let mut not_working: Vec<&Arc<Published>> = Vec::new();
    for w in &all {
        let phase = shown_phase(w);
        *by_status.entry(phase).or_insert(0) += 1;
        let (desired, held) = gpus_of(w);
        gpus.desired += desired;
        gpus.held += held;
        if !working(phase) && held > 0.0 {
            gpus.held_not_working += held;
            not_working.push(w);
        }
    }
    not_working.sort_by(|a, b| gpus_of(b).1.total_cmp(&gpus_of(a).1));
    let unowned_all = store.unowned_gpu_pods();
    // `+ 0.0`: an empty f64 sum is -0.0, which JSON shows as such.
    gpus.unowned = unowned_all.iter().map(|p| p.gpus).sum::<f64>() + 0.0;
    let unowned_total = unowned_all.len();
    let unowned = unowned_all
        .into_iter()
        .take(OVERVIEW_LIST)
        .map(|p| Unowned {
            namespace: p.namespace,
            name: p.name,
            owner_kind: p.owner_kind,
            owner_name: p.owner_name,
            gpus: p.gpus,
        })
        .collect();
    let [by_cluster, by_namespace, by_kind] = groups(&all);
    let sums = Sums {
        workloads: all.len(),
        by_cluster: Arc::new(by_cluster),
        by_namespace: Arc::new(by_namespace),
        by_kind: Arc::new(by_kind),
        by_status,
        gpus,
        not_working: Arc::new(
            not_working
                .into_iter()
                .take(OVERVIEW_LIST)
                .map(|w| row(w))
                .collect(),
        ),
        unowned: Arc::new(unowned),
        unowned_total,
    };
    *kept.0.lock() = Some((stamp, sums.clone()));
    (sums, revision)
}

fn overview(shared: &Shared, kept: &KeptSums) -> Answer {
    let store = &shared.store;
    let (sums, revision) = sums(shared, kept);
    let pending = store.pending();
    let mut sources: Vec<SourceHealth> = store
        .source_problems()
        .into_iter()
        .map(|(name, problems)| SourceHealth {
            synced: !pending.contains(&name),
            problems: problems.len(),
            first_problem: problems
                .first()
                .map(|p| excerpt(&format!("{}: {}", p.path, p.message), LABEL_BYTES).into_owned())
                .unwrap_or_default(),
            name,
        })
        .collect();
    for name in &pending {
        if !sources.iter().any(|s| &s.name == name) {
            sources.push(SourceHealth {
                name: name.clone(),
                synced: false,
                problems: 0,
                first_problem: String::new(),
            });
        }
    }
    sources.sort_by(|a, b| a.name.cmp(&b.name));
    let catalog = store.catalog();
    let report = shared.report.get();
    let active_sources: Vec<&str> = catalog.definitions().map(|d| d.source.as_str()).collect();
    let failed_files = report
        .iter()
        .filter(|e| !active_sources.contains(&e.source.as_str()))
        .map(|e| e.source.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let definitions = DefinitionHealth {
        generation: catalog.generation(),
        active: catalog.definitions().count(),
        with_warnings: catalog
            .definitions()
            .filter(|d| !d.warnings.is_empty() || !shared.report.drift_of(&d.name).is_empty())
            .count(),
        quarantined: catalog
            .definitions()
            .filter(|d| d.breaker().quarantined().is_some())
            .count(),
        failed_files,
    };
    encode(&Overview {
        revision,
        synced: store.synced(),
        pending,
        workloads: sums.workloads,
        by_cluster: &sums.by_cluster,
        by_namespace: &sums.by_namespace,
        by_kind: &sums.by_kind,
        by_status: sums.by_status,
        gpus: sums.gpus,
        not_working: &sums.not_working,
        unowned: &sums.unowned,
        unowned_total: sums.unowned_total,
        sources,
        definitions,
    })
}

fn gpus_of(w: &Published) -> (f64, f64) {
    gpus(&w.summary)
}

// === workloads ===

/// One workload in a list.
#[derive(Serialize)]
struct Row {
    cluster: String,
    namespace: String,
    kind: String,
    api_version: String,
    name: String,
    uid: String,
    status: &'static str,
    raw_phase: String,
    pods_desired: u32,
    pods_current: u32,
    pods_ready: u32,
    gpus_desired: f64,
    gpus_held: f64,
    created: String,
    definition: String,
    diagnostics: usize,
    warnings: usize,
    gang: bool,
    labels: Vec<(String, String)>,
    labels_total: usize,
}

fn row(w: &Published) -> Row {
    let r = w.r#ref.clone().unwrap_or_default();
    let pods = w.pods.unwrap_or_default();
    let (gpus_desired, gpus_held) = gpus_of(w);
    let cut = |s: &str| excerpt(s, LABEL_BYTES).into_owned();
    Row {
        cluster: cut(&w.cluster),
        namespace: cut(&r.namespace),
        kind: cut(&r.kind),
        api_version: cut(&r.api_version),
        name: cut(&r.name),
        uid: cut(&r.uid),
        status: shown_phase(w),
        raw_phase: cut(w.status.as_ref().map_or("", |s| s.raw_phase.as_str())),
        pods_desired: pods.desired,
        pods_current: pods.current,
        pods_ready: pods.ready,
        gpus_desired,
        gpus_held,
        created: cut(&w.created),
        definition: cut(w.definition.as_ref().map_or("", |d| d.name.as_str())),
        diagnostics: w.diagnostics.len(),
        warnings: w
            .diagnostics
            .iter()
            .filter(|d| d.severity != "info")
            .count(),
        gang: w.gang.as_ref().is_some_and(|g| !g.groups.is_empty()),
        labels: w
            .labels
            .iter()
            .take(ROW_LABELS)
            .map(|(k, v)| (cut(k), cut(v)))
            .collect(),
        labels_total: w.labels.len(),
    }
}

#[derive(Serialize)]
struct Page {
    revision: u64,
    synced: bool,
    /// Workloads matching the filters.
    total: usize,
    /// Workloads in all.
    all: usize,
    offset: usize,
    rows: Vec<Row>,
    choices: Choices,
}

/// The values each filter can take (over every workload, each list at most
/// [`MAX_CHOICES`]).
#[derive(Serialize, Default)]
struct Choices {
    clusters: Vec<String>,
    namespaces: Vec<String>,
    kinds: Vec<String>,
    statuses: Vec<&'static str>,
}

/// Sort columns of the workloads list.
fn sort_key(column: &str) -> Option<fn(&Published, &Published) -> std::cmp::Ordering> {
    fn name_of(w: &Published) -> (&str, &str, &str, &str) {
        let r = w.r#ref.as_ref();
        (
            r.map_or("", |r| r.namespace.as_str()),
            r.map_or("", |r| r.kind.as_str()),
            r.map_or("", |r| r.name.as_str()),
            w.cluster.as_str(),
        )
    }
    Some(match column {
        "" | "namespace" => |a, b| name_of(a).cmp(&name_of(b)),
        "name" => |a, b| (name_of(a).2, name_of(a)).cmp(&(name_of(b).2, name_of(b))),
        "kind" => |a, b| (name_of(a).1, name_of(a)).cmp(&(name_of(b).1, name_of(b))),
        "cluster" => |a, b| (name_of(a).3, name_of(a)).cmp(&(name_of(b).3, name_of(b))),
        "status" => |a, b| (shown_phase(a), name_of(a)).cmp(&(shown_phase(b), name_of(b))),
        "pods" => |a, b| {
            let p = |w: &Published| w.pods.unwrap_or_default();
            (p(a).current, p(a).desired)
                .cmp(&(p(b).current, p(b).desired))
                .then_with(|| name_of(a).cmp(&name_of(b)))
        },
        "gpus" => |a, b| {
            gpus_of(a)
                .1
                .total_cmp(&gpus_of(b).1)
                .then_with(|| gpus_of(a).0.total_cmp(&gpus_of(b).0))
                .then_with(|| name_of(a).cmp(&name_of(b)))
        },
        "created" => |a, b| (a.created.as_str(), name_of(a)).cmp(&(b.created.as_str(), name_of(b))),
        "diagnostics" => {
            |a, b| (a.diagnostics.len(), name_of(a)).cmp(&(b.diagnostics.len(), name_of(b)))
        }
        _ => return None,
    })
}

fn bad(message: String) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, message)
}

fn workloads(shared: &Shared, query: Option<&str>) -> Answer {
    let params = Query::parse(query).map_err(bad)?;
    let param = |k: &str| params.get(k);
    let kinds: Vec<String> = param("kind")
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    let (filter, _) = crate::server::validate::filter(
        param("namespace"),
        kinds,
        param("selector"),
        param("cluster"),
    )
    .map_err(|s| http_status(&s))?;
    let status = param("status");
    let needle = param("q").to_lowercase();
    if needle.len() > LABEL_BYTES {
        return Err(bad(format!("q is longer than {LABEL_BYTES} bytes")));
    }
    let compare = sort_key(&param("sort")).ok_or_else(|| {
        bad("sort must be one of namespace, name, kind, cluster, status, pods, gpus, created, diagnostics".to_owned())
    })?;
    let desc = matches!(param("desc").as_str(), "1" | "true");
    let number = |k: &str, default: usize| -> Result<usize, (StatusCode, String)> {
        let v = param(k);
        if v.is_empty() {
            Ok(default)
        } else {
            v.parse()
                .map_err(|_| bad(format!("{k} must be a non-negative integer")))
        }
    };
    let offset = number("offset", 0)?;
    let limit = number("limit", DEFAULT_PAGE)?.clamp(1, MAX_PAGE);
    let board = shared.store.board();
    let (all, revision) = board.snapshot(&Filter::default());
    let choices = choices(&all);
    let total_all = all.len();
    let (mut matching, _) = if filter_is_empty(&filter) {
        (all, revision)
    } else {
        board.snapshot(&filter)
    };
    if !status.is_empty() {
        matching.retain(|w| shown_phase(w).eq_ignore_ascii_case(&status));
    }
    if !needle.is_empty() {
        matching.retain(|w| {
            w.r#ref
                .as_ref()
                .is_some_and(|r| r.name.to_lowercase().contains(&needle))
        });
    }
    // The board lists in (namespace, kind, name) order already.
    let sort = param("sort");
    if !sort.is_empty() && sort != "namespace" {
        matching.sort_by(|a, b| compare(a, b));
    }
    if desc {
        matching.reverse();
    }
    let total = matching.len();
    let rows = matching
        .iter()
        .skip(offset)
        .take(limit)
        .map(|w| row(w))
        .collect();
    encode(&Page {
        revision,
        synced: shared.store.synced(),
        total,
        all: total_all,
        offset,
        rows,
        choices,
    })
}

fn filter_is_empty(f: &Filter) -> bool {
    f.namespace.is_empty()
        && f.kinds.is_empty()
        && f.label_selector.is_empty()
        && f.cluster.is_empty()
}

fn choices(all: &[Arc<Published>]) -> Choices {
    use std::collections::BTreeSet;
    let mut clusters = BTreeSet::new();
    let mut namespaces = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    let mut statuses = BTreeSet::new();
    for w in all {
        if let Some(r) = &w.r#ref {
            if namespaces.len() < MAX_CHOICES {
                namespaces.insert(r.namespace.as_str());
            }
            if kinds.len() < MAX_CHOICES {
                kinds.insert(r.kind.as_str());
            }
        }
        if clusters.len() < MAX_CHOICES {
            clusters.insert(w.cluster.as_str());
        }
        statuses.insert(shown_phase(w));
    }
    let own = |s: BTreeSet<&str>| {
        s.into_iter()
            .map(|v| excerpt(v, LABEL_BYTES).into_owned())
            .collect()
    };
    Choices {
        clusters: own(clusters),
        namespaces: own(namespaces),
        kinds: own(kinds),
        statuses: statuses.into_iter().collect(),
    }
}

// === one workload ===

#[derive(Serialize)]
struct Detail {
    revision: u64,
    status: &'static str,
    /// The full graph, in the API's proto3 JSON mapping.
    workload: pb::Workload,
    definition: Option<DefinitionView>,
}

#[derive(Serialize)]
struct DefinitionView {
    name: String,
    origin: String,
    source: String,
    generation: u64,
    root_kind: String,
    quarantined: String,
    warnings: Vec<String>,
    /// The definition as written, as YAML.
    text: String,
}

fn workload(shared: &Shared, query: Option<&str>) -> Answer {
    let params = Query::parse(query).map_err(bad)?;
    let param = |k: &str| params.get(k);
    let reference = pb::ObjectRef {
        uid: param("uid"),
        kind: param("kind"),
        namespace: param("namespace"),
        name: param("name"),
        ..Default::default()
    };
    let cluster = param("cluster");
    crate::server::validate::workload_ref(&reference).map_err(|s| http_status(&s))?;
    crate::server::validate::cluster("cluster", &cluster).map_err(|s| http_status(&s))?;
    let published = shared
        .store
        .workload(&reference, &cluster)
        .map_err(|s| http_status(&s))?;
    let graph = published.graph();
    let catalog = shared.store.catalog();
    let definition = graph.definition.as_ref().and_then(|d| {
        catalog
            .definitions()
            .find(|c| c.name == d.name)
            .map(|c| DefinitionView {
                name: c.name.clone(),
                origin: c.origin.clone(),
                source: c.source.clone(),
                generation: c.generation(),
                root_kind: c.root_kind.to_string(),
                quarantined: c
                    .breaker()
                    .quarantined()
                    .map(|q| excerpt(&q.reason, crate::excerpt::TEXT_BYTES).into_owned())
                    .unwrap_or_default(),
                warnings: c
                    .warnings
                    .iter()
                    .map(|w| excerpt(&w.to_string(), crate::excerpt::TEXT_BYTES).into_owned())
                    .chain(shared.report.drift_of(&c.name))
                    .take(crate::server::validate::MAX_KINDS)
                    .collect(),
                text: serde_saphyr::to_string(&c.karta).unwrap_or_default(),
            })
    });
    encode(&Detail {
        revision: published.revision,
        status: shown_phase(&published),
        workload: graph,
        definition,
    })
}

// === definitions ===

#[derive(Serialize)]
struct DefinitionsPage {
    definitions: pb::ListDefinitionsResponse,
    sources: pb::ListSourcesResponse,
}

async fn definitions(shared: &Shared) -> Answer {
    let service = DefinitionsService::new(shared.clone());
    let definitions = service
        .list_definitions(tonic::Request::new(pb::ListDefinitionsRequest::default()))
        .await
        .map_err(|s| http_status(&s))?
        .into_inner();
    let sources = service
        .list_sources(tonic::Request::new(pb::ListSourcesRequest::default()))
        .await
        .map_err(|s| http_status(&s))?
        .into_inner();
    encode(&DefinitionsPage {
        definitions,
        sources,
    })
}
