//! Series computed at every scrape from what the server serves ([`Observed`]: the live
//! index, or an aggregator): index sizes, definition load errors, evaluation diagnostics,
//! per-workload GPUs, pods and phase, the pod-to-workload join, the GPU-holding pods outside
//! every workload and, for an aggregator, the state of each upstream.

use crate::board::{AttributedPod, Board, Sizes, SourceProblem, UnownedGpuPod};
use crate::definition::{Catalog, LoadReport};
use crate::index::Index;
use crate::model::SkipCounts;
use crate::proto::v1 as pb;
use crate::resolve::diagnostics::code::UNATTRIBUTED_POD;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use std::collections::BTreeMap;
use std::fmt::Error;
use std::sync::Arc;

/// What the scrape-time series read: implemented by the live [`Index`] and by an
/// aggregator.
pub trait Observed: Send + Sync {
    /// The published graphs and the revision.
    fn board(&self) -> &Board;
    /// The definitions in effect.
    fn catalog(&self) -> Arc<Catalog>;
    /// True once every source (or upstream) finished its first full sync.
    fn synced(&self) -> bool;
    /// Cached objects, pods and workloads.
    fn sizes(&self) -> Sizes;
    /// Whether per-workload series carry a `cluster` label.
    fn cluster_label(&self) -> bool;
    /// Every workload's summary in (namespace, kind, name) order, with every pod it counts:
    /// those placed in a component, and those none claims (component "").
    fn workload_pods(&self) -> Vec<(Arc<pb::Workload>, Vec<AttributedPod>)>;
    /// Pods that hold GPUs but belong to no workload.
    fn unowned_gpu_pods(&self) -> Vec<UnownedGpuPod>;
    /// A count that moves whenever a cached object is written or removed (readers keep what
    /// they derived from every object until it moves; an aggregator: its board's revision
    /// says it all, 0).
    fn object_writes(&self) -> u64 {
        0
    }
    /// Every source's current problems (an aggregator: each stale upstream), by source name.
    fn source_problems(&self) -> Vec<(String, Vec<SourceProblem>)>;
    /// How often each (definition, path) that should find something began to find nothing
    /// (none for an aggregator: its graphs are resolved upstream).
    fn empty_paths(&self) -> Vec<((String, String), u64)> {
        Vec::new()
    }
    /// Objects each source skipped so far, by reason (none for an aggregator: its
    /// upstreams count their own).
    fn skipped(&self) -> Vec<(String, SkipCounts)> {
        Vec::new()
    }
    /// The upstreams of an aggregator (none for a server of its own cluster).
    fn upstreams(&self) -> Vec<UpstreamHealth> {
        Vec::new()
    }
}

/// The state of one upstream of an aggregator, as metrics show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamHealth {
    /// The upstream's name (`--upstream NAME=URL`).
    pub name: String,
    /// True while its workloads are served as last seen (it is unreachable or resyncing).
    pub stale: bool,
    /// True once it completed a first full sync.
    pub synced: bool,
    /// Workloads the aggregator holds from it.
    pub workloads: usize,
    /// Bytes the aggregator holds for its graphs (encodings plus decoded summaries).
    pub bytes: usize,
    /// Graphs it sent that were refused (naming a cluster it may not speak for, or not
    /// decoding).
    pub refused: u64,
}

impl Observed for Index {
    fn board(&self) -> &Board {
        Index::board(self)
    }

    fn catalog(&self) -> Arc<Catalog> {
        Index::catalog(self)
    }

    fn synced(&self) -> bool {
        Index::synced(self)
    }

    fn sizes(&self) -> Sizes {
        Index::sizes(self)
    }

    fn cluster_label(&self) -> bool {
        Index::cluster_label(self)
    }

    fn workload_pods(&self) -> Vec<(Arc<pb::Workload>, Vec<AttributedPod>)> {
        self.attributed_pods()
            .into_iter()
            .map(|(w, mut pods)| {
                pods.extend(unattributed(self, &w));
                (w, pods)
            })
            .collect()
    }

    fn unowned_gpu_pods(&self) -> Vec<UnownedGpuPod> {
        Index::unowned_gpu_pods(self)
    }

    fn object_writes(&self) -> u64 {
        Index::object_writes(self)
    }

    fn source_problems(&self) -> Vec<(String, Vec<SourceProblem>)> {
        Index::source_problems(self)
    }

    fn empty_paths(&self) -> Vec<((String, String), u64)> {
        Index::empty_paths(self).snapshot()
    }

    fn skipped(&self) -> Vec<(String, SkipCounts)> {
        Index::skipped(self)
    }
}

/// The scrape-time collector.
pub(super) struct Inventory {
    pub(super) source: Arc<dyn Observed>,
    pub(super) report: Arc<LoadReport>,
    /// The Kubernetes source's counters, once it runs.
    pub(super) informers: Arc<std::sync::OnceLock<Arc<crate::source::kube::Counters>>>,
    /// The admission policies, once a server sets them.
    pub(super) policies: Arc<std::sync::OnceLock<Arc<crate::policy::Live>>>,
}

/// The admission policies in force, whether the file on disk was refused, and what the
/// mutating webhook routes did.
fn policies(e: &mut DescriptorEncoder, live: &crate::policy::Live) -> Result<(), Error> {
    use crate::policy::Live;
    use prometheus_client::encoding::NoLabelSet;
    let none: [(&str, &str); 0] = [];
    gauges(
        e,
        "kartograf_policies",
        "Admission policies in force (serve --policies)",
        [(none, live.current().len() as i64)],
    )?;
    gauges(
        e,
        "kartograf_policy_file_refused",
        "1 while the policy file on disk fails its checks (the last good policies stay in force)",
        [(none, i64::from(live.problem().is_some()))],
    )?;
    let c = &live.counters;
    let mut metric = e.encode_descriptor(
        "kartograf_admission_mutations",
        "Mutating webhook answers, by route and outcome (workloads: patched, unchanged, failed; pods: labelled, owner_not_cached, unlabelled)",
        None,
        MetricType::Counter,
    )?;
    for (route, outcome, n) in [
        ("workloads", "patched", &c.workloads_patched),
        ("workloads", "unchanged", &c.workloads_unchanged),
        ("workloads", "failed", &c.workloads_failed),
        ("pods", "labelled", &c.pods_labelled),
        ("pods", "owner_not_cached", &c.pods_owner_not_cached),
        ("pods", "unlabelled", &c.pods_unlabelled),
    ] {
        metric
            .encode_family(&[("route", route), ("outcome", outcome)])?
            .encode_counter::<NoLabelSet, _, u64>(&Live::count(n), None)?;
    }
    let mut metric = e.encode_descriptor(
        "kartograf_owner_lookups",
        "Owners of a pod being admitted that were not cached, read directly from the cluster, by outcome (found, missing, failed)",
        None,
        MetricType::Counter,
    )?;
    for (outcome, n) in [
        ("found", &c.owner_lookups_found),
        ("missing", &c.owner_lookups_missing),
        ("failed", &c.owner_lookups_failed),
    ] {
        metric
            .encode_family(&[("outcome", outcome)])?
            .encode_counter::<NoLabelSet, _, u64>(&Live::count(n), None)?;
    }
    let mut metric = e.encode_descriptor(
        "kartograf_pod_label_pass",
        "Label patches of the labelling pass (serve --label-pods), by outcome (labelled, failed)",
        None,
        MetricType::Counter,
    )?;
    for (outcome, n) in [("labelled", &c.pass_labelled), ("failed", &c.pass_failed)] {
        metric
            .encode_family(&[("outcome", outcome)])?
            .encode_counter::<NoLabelSet, _, u64>(&Live::count(n), None)?;
    }
    Ok(())
}

/// The informer counters of a Kubernetes source, as three counter families by kind.
fn informers(
    e: &mut DescriptorEncoder,
    counters: &crate::source::kube::Counters,
) -> Result<(), Error> {
    use prometheus_client::encoding::NoLabelSet;
    let kinds = counters.snapshot();
    {
        let mut metric = e.encode_descriptor(
            "kartograf_informer_events",
            "Events received from cluster watches, by kind and event type",
            None,
            MetricType::Counter,
        )?;
        for (kind, k) in &kinds {
            for (event, n) in &k.events {
                metric
                    .encode_family(&[("kind", kind.as_str()), ("type", *event)])?
                    .encode_counter::<NoLabelSet, _, u64>(n, None)?;
            }
        }
    }
    for (name, help, value) in [
        (
            "kartograf_informer_restarts",
            "Cluster watches restarted with a full relist, by kind",
            (|k: &crate::source::kube::counters::Kind| k.restarts) as fn(&_) -> u64,
        ),
        (
            "kartograf_informer_errors",
            "Cluster watch errors, by kind",
            |k: &crate::source::kube::counters::Kind| k.errors,
        ),
    ] {
        let mut metric = e.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (kind, k) in kinds.iter().filter(|(_, k)| value(k) > 0) {
            metric
                .encode_family(&[("kind", kind.as_str())])?
                .encode_counter::<NoLabelSet, _, u64>(&value(k), None)?;
        }
    }
    Ok(())
}

impl std::fmt::Debug for Inventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inventory").finish_non_exhaustive()
    }
}

/// Writes one gauge family: `name` with one sample per `(labels, value)`.
fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, V)>,
) -> Result<(), Error> {
    // Same help style as registered metrics (which get a final period).
    let help = format!("{help}.");
    let mut metric = encoder.encode_descriptor(name, &help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// Schema drift: findings per definition checked against a schema (a gauge), and how often a
/// definition path began to find nothing in a workload's graph (a counter).
fn drift(
    encoder: &mut DescriptorEncoder,
    source: &dyn Observed,
    report: &LoadReport,
) -> Result<(), Error> {
    let findings = report.drift();
    gauges(
        encoder,
        "kartograf_definition_drift",
        "Schema drift findings of a definition against the cluster's CRDs (0: it fits; absent: no schema known)",
        findings
            .iter()
            .map(|(d, lines)| ([("definition", d.as_str())], lines.len() as i64)),
    )?;
    let empty = source.empty_paths();
    let mut metric = encoder.encode_descriptor(
        "kartograf_definition_path_empty",
        "Times a definition path that should find something (a pod spec, a gang key, a matching status mapping) began to find nothing in a workload's graph.",
        None,
        MetricType::Counter,
    )?;
    for ((definition, path), n) in &empty {
        let labels = [("definition", definition.as_str()), ("path", path.as_str())];
        metric
            .encode_family(&labels)?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(n, None)?;
    }
    Ok(())
}

/// The pods of workload `w` that belong to it but that no component claims (the graph's
/// `unattributed_pod` warnings), read from its full graph only when it has such warnings.
fn unattributed(index: &Index, w: &pb::Workload) -> Vec<AttributedPod> {
    if !w.diagnostics.iter().any(|d| d.code == UNATTRIBUTED_POD) {
        return Vec::new();
    }
    let Some(r) = w.r#ref.as_ref() else {
        return Vec::new();
    };
    let by_uid = pb::ObjectRef {
        uid: r.uid.clone(),
        ..Default::default()
    };
    index
        .published(&by_uid)
        .map(|p| p.graph())
        .map(|full| {
            full.unattributed_pods
                .iter()
                .map(|p| AttributedPod {
                    namespace: r.namespace.clone(),
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    component: String::new(),
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Collector for Inventory {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), Error> {
        let e = &mut encoder;
        if let Some(counters) = self.informers.get() {
            informers(e, counters)?;
        }
        if let Some(live) = self.policies.get() {
            policies(e, live)?;
        }
        let sizes = self.source.sizes();
        let none: [(&str, &str); 0] = [];
        gauges(
            e,
            "kartograf_index_objects",
            "Cached objects other than pods",
            [(none, sizes.objects as i64)],
        )?;
        gauges(
            e,
            "kartograf_index_pods",
            "Cached pods",
            [(none, sizes.pods as i64)],
        )?;
        gauges(
            e,
            "kartograf_index_workloads",
            "Resolved root workloads",
            [(none, sizes.workloads as i64)],
        )?;
        gauges(
            e,
            "kartograf_index_revision",
            "Server-wide change counter",
            [(none, self.source.board().revision() as i64)],
        )?;
        gauges(
            e,
            "kartograf_index_synced",
            "1 once every source finished its first full sync",
            [(none, i64::from(self.source.synced()))],
        )?;

        // Definition load errors, by the definition a file held (the file name when none of
        // its definitions loaded) and file.
        let catalog = self.source.catalog();
        gauges(
            e,
            "kartograf_definitions_loaded",
            "Definitions in effect",
            [(none, catalog.definitions().count() as i64)],
        )?;
        let mut errors: BTreeMap<(String, String), i64> = BTreeMap::new();
        for err in self.report.get() {
            let definition = catalog
                .definitions()
                .find(|d| d.source == err.source)
                .map_or_else(|| err.source.clone(), |d| d.name.clone());
            *errors.entry((definition, err.source)).or_default() += 1;
        }
        gauges(
            e,
            "kartograf_definition_load_errors",
            "Errors of the last load of a definition file (the last good version stays active)",
            errors
                .iter()
                .map(|((d, f), n)| ([("definition", d.as_str()), ("file", f.as_str())], *n)),
        )?;

        let problems = self.source.source_problems();
        gauges(
            e,
            "kartograf_source_problems",
            "1 per problem a source reports: a file that does not parse (its last good objects stay), a missing directory, an object defined in two files",
            problems.iter().flat_map(|(source, ps)| {
                ps.iter().map(move |p| {
                    (
                        [
                            ("source", source.clone()),
                            ("path", crate::excerpt::excerpt(&p.path, 512).into_owned()),
                        ],
                        1i64,
                    )
                })
            }),
        )?;
        {
            let skipped = self.source.skipped();
            let mut metric = e.encode_descriptor(
                "kartograf_objects_skipped",
                "Objects a source skipped, by reason: no_kind_or_name (not an object with a kind and metadata.name), duplicate (the same identity again in one file), other_namespace (outside this shard's namespace).",
                None,
                MetricType::Counter,
            )?;
            for (source, counts) in &skipped {
                for (reason, n) in counts.by_label() {
                    let labels = [("source", source.as_str()), ("reason", reason)];
                    metric
                        .encode_family(&labels)?
                        .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                            &n, None,
                        )?;
                }
            }
        }
        {
            let mut metric = e.encode_descriptor(
                "kartograf_source_file_reads",
                "Files read by the directory sources (manifests and definitions); at rest nothing is read.",
                None,
                MetricType::Counter,
            )?;
            metric.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                &crate::folder::reads(),
                None,
            )?;
        }
        gauges(
            e,
            "kartograf_definition_quarantined",
            "1 while a definition is quarantined (its evaluations kept exceeding their budgets)",
            catalog.definitions().map(|d| {
                let q = i64::from(d.breaker().quarantined().is_some());
                ([("definition", d.name.clone())], q)
            }),
        )?;
        {
            let mut metric = e.encode_descriptor(
                "kartograf_evaluation_budget_exceeded",
                "Evaluations ended by an exhausted budget, by definition and budget (work, memory, depth, time).",
                None,
                MetricType::Counter,
            )?;
            for (definition, budget, n) in catalog.exceeded_totals() {
                metric
                    .encode_family(&[("definition", definition.as_str()), ("budget", budget)])?
                    .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&n, None)?;
            }
        }

        drift(e, self.source.as_ref(), &self.report)?;

        // Every pod of every workload: those placed in a component, then those none claims
        // (component ""), so that a join on the pod never loses a pod the workload counts.
        let workloads: Vec<(Arc<pb::Workload>, Vec<AttributedPod>)> = self.source.workload_pods();
        let mut diagnostics: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for (w, _) in &workloads {
            for d in &w.diagnostics {
                *diagnostics.entry((&d.code, &d.severity)).or_default() += 1;
            }
        }
        gauges(
            e,
            "kartograf_evaluation_diagnostics",
            "Diagnostics on the current workload graphs, by code and severity",
            diagnostics
                .iter()
                .map(|((c, s), n)| ([("code", *c), ("severity", *s)], *n)),
        )?;

        let refs: Vec<(pb::ObjectRef, &str)> = workloads
            .iter()
            .map(|(w, _)| (w.r#ref.clone().unwrap_or_default(), w.cluster.as_str()))
            .collect();
        let cluster_label = self.source.cluster_label();
        // `api_version` keeps same-named kinds of different API groups apart; `cluster`
        // (an aggregator's, or a named server's) same-named workloads of different clusters.
        let with = |(r, cluster): &(pb::ObjectRef, &str), k: &'static str, v: String| {
            let mut labels: Vec<(&'static str, String)> = Vec::with_capacity(6);
            if cluster_label {
                labels.push(("cluster", (*cluster).to_owned()));
            }
            labels.extend([
                ("namespace", r.namespace.clone()),
                ("kind", r.kind.clone()),
                ("name", r.name.clone()),
                ("api_version", r.api_version.clone()),
                (k, v),
            ]);
            labels
        };
        gauges(
            e,
            "kartograf_workload_gpus",
            "GPUs of a workload: desired (requested by its spec) and held (by its current pods)",
            workloads.iter().zip(&refs).flat_map(|((w, _), r)| {
                let t = w.totals.clone().unwrap_or_default();
                let desired = t.desired.map_or(0.0, |x| x.gpus);
                let held = t.current.map_or(0.0, |x| x.gpus);
                [
                    (with(r, "state", "desired".into()), desired),
                    (with(r, "state", "held".into()), held),
                ]
            }),
        )?;
        gauges(
            e,
            "kartograf_workload_pods",
            "Pods of a workload: desired, current (not terminated) and ready",
            workloads.iter().zip(&refs).flat_map(|((w, _), r)| {
                let p = w.pods.unwrap_or_default();
                [
                    (with(r, "state", "desired".into()), i64::from(p.desired)),
                    (with(r, "state", "current".into()), i64::from(p.current)),
                    (with(r, "state", "ready".into()), i64::from(p.ready)),
                ]
            }),
        )?;
        gauges(
            e,
            "kartograf_workload_phase",
            "1 for the normalized phase a workload is in (only the current phase is exported)",
            workloads.iter().zip(&refs).map(|((w, _), r)| {
                let phase = w.status.as_ref().map_or(0, |s| s.phase);
                (
                    with(r, "phase", crate::proto::phase_name(phase).to_owned()),
                    1i64,
                )
            }),
        )?;
        gauges(
            e,
            "kartograf_pod_workload_info",
            "1 for every pod of a workload: joins (namespace, pod, uid) to its root workload and component (empty when no component claims the pod)",
            workloads
                .iter()
                .zip(&refs)
                .flat_map(|((_, pods), (r, cluster))| {
                    pods.iter().map(move |p| {
                        let mut labels: Vec<(&str, &str)> = Vec::with_capacity(9);
                        if cluster_label {
                            labels.push(("cluster", cluster));
                        }
                        labels.extend([
                            ("namespace", p.namespace.as_str()),
                            ("pod", p.name.as_str()),
                            ("uid", p.uid.as_str()),
                            ("workload_kind", r.kind.as_str()),
                            ("workload_name", r.name.as_str()),
                            ("workload_uid", r.uid.as_str()),
                            ("workload_api_version", r.api_version.as_str()),
                            ("component", p.component.as_str()),
                        ]);
                        (labels, 1i64)
                    })
                }),
        )?;
        let unowned = self.source.unowned_gpu_pods();
        gauges(
            e,
            "kartograf_unowned_pod_gpus",
            "GPUs held by a pod that belongs to no workload (its controller chain names a workload that is not cached, e.g. one just deleted or of a kind kartograf cannot list, or runs into an owner cycle), with its topmost controller",
            unowned.iter().map(|p| {
                (
                    [
                        ("namespace", p.namespace.as_str()),
                        ("pod", p.name.as_str()),
                        ("uid", p.uid.as_str()),
                        ("owner_kind", p.owner_kind.as_str()),
                        ("owner_name", p.owner_name.as_str()),
                    ],
                    p.gpus,
                )
            }),
        )?;
        let board = self.source.board();
        let (published, _) = board.entries();
        let gangs = crate::gangs::live::sorted(published.iter().map(|e| e.gangs.as_ref()));
        let gang_labels = |g: &crate::gangs::live::GangStatus| {
            [
                ("namespace", g.namespace.clone()),
                ("kind", g.kind.to_owned()),
                ("name", g.name.clone()),
                ("workload", g.workload.clone()),
            ]
        };
        gauges(
            e,
            "kartograf_gang_intact",
            "1 while a gang object's members running reach its minimum (or none is placed yet), 0 once a placed gang lost members (no scheduler reports this after placement)",
            gangs.iter().map(|g| (gang_labels(g), i64::from(g.intact))),
        )?;
        gauges(
            e,
            "kartograf_gang_stale",
            "1 while a gang object disagrees with its workload's graph (minimum, subgroups, members, or its API's rules; see the graph's gang_* diagnostics)",
            gangs.iter().map(|g| (gang_labels(g), i64::from(g.stale))),
        )?;
        let upstreams = self.source.upstreams();
        if !upstreams.is_empty() {
            gauges(
                e,
                "kartograf_upstream_stale",
                "1 while an upstream's workloads are served as last seen (it is unreachable, or resyncing after a RESET), until they are dropped after --upstream-grace",
                upstreams
                    .iter()
                    .map(|u| ([("cluster", u.name.as_str())], i64::from(u.stale))),
            )?;
            gauges(
                e,
                "kartograf_upstream_synced",
                "1 once an upstream completed a first full sync",
                upstreams
                    .iter()
                    .map(|u| ([("cluster", u.name.as_str())], i64::from(u.synced))),
            )?;
            gauges(
                e,
                "kartograf_upstream_workloads",
                "Workloads the aggregator holds from an upstream",
                upstreams
                    .iter()
                    .map(|u| ([("cluster", u.name.as_str())], u.workloads as i64)),
            )?;
            gauges(
                e,
                "kartograf_upstream_bytes",
                "Bytes the aggregator holds for an upstream's graphs: encodings plus decoded summaries (bounded by --upstream-max-bytes)",
                upstreams.iter().map(|u| {
                    (
                        [("cluster", u.name.as_str())],
                        i64::try_from(u.bytes).unwrap_or(i64::MAX),
                    )
                }),
            )?;
            let mut metric = e.encode_descriptor(
                "kartograf_upstream_refused_graphs",
                "Graphs of an upstream that were not published: naming a cluster it may not speak for, or not decoding.",
                None,
                MetricType::Counter,
            )?;
            for u in &upstreams {
                metric
                    .encode_family(&[("cluster", u.name.as_str())])?
                    .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                    &u.refused, None,
                )?;
            }
        }
        Ok(())
    }
}
