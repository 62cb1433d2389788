//! Series computed from the index at every scrape: index sizes, definition load errors,
//! evaluation diagnostics, per-workload GPUs, pods and phase, the pod-to-workload join and
//! the GPU-holding pods outside every workload.

use crate::definition::LoadReport;
use crate::index::{AttributedPod, Index};
use crate::proto::v1 as pb;
use crate::resolve::diagnostics::code::UNATTRIBUTED_POD;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use std::collections::BTreeMap;
use std::fmt::Error;
use std::sync::Arc;

/// The scrape-time collector.
pub(super) struct Inventory {
    pub(super) index: Arc<Index>,
    pub(super) report: Arc<LoadReport>,
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
fn drift(encoder: &mut DescriptorEncoder, index: &Index, report: &LoadReport) -> Result<(), Error> {
    let findings = report.drift();
    gauges(
        encoder,
        "kartograf_definition_drift",
        "Schema drift findings of a definition against the cluster's CRDs (0: it fits; absent: no schema known)",
        findings
            .iter()
            .map(|(d, lines)| ([("definition", d.as_str())], lines.len() as i64)),
    )?;
    let empty = index.empty_paths().snapshot();
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

/// `Running` for `PHASE_RUNNING`.
fn phase_name(phase: i32) -> String {
    let name = pb::Phase::try_from(phase).unwrap_or(pb::Phase::Unspecified);
    let word = name.as_str_name().trim_start_matches("PHASE_");
    let mut out = String::with_capacity(word.len());
    for (i, c) in word.chars().enumerate() {
        if i == 0 {
            out.push(c);
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
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
        .workload(&by_uid)
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
        let sizes = self.index.sizes();
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
            [(none, self.index.revision() as i64)],
        )?;
        gauges(
            e,
            "kartograf_index_synced",
            "1 once every source finished its first full sync",
            [(none, i64::from(self.index.synced()))],
        )?;

        // Definition load errors, by the definition a file held (the file name when none of
        // its definitions loaded) and file.
        let catalog = self.index.catalog();
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

        let problems = self.index.source_problems();
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
            let mut metric = e.encode_descriptor(
                "kartograf_source_file_reads",
                "Files read by the directory sources (manifests and definitions); at rest nothing is read.",
                None,
                MetricType::Counter,
            )?;
            metric.encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                &crate::source::files::reads(),
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
            for (definition, budget, n) in crate::definition::breaker::exceeded_totals() {
                metric
                    .encode_family(&[("definition", definition.as_str()), ("budget", budget)])?
                    .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&n, None)?;
            }
        }

        drift(e, &self.index, &self.report)?;

        // Every pod of every workload: those placed in a component, then those none claims
        // (component ""), so that a join on the pod never loses a pod the workload counts.
        let workloads: Vec<(Arc<pb::Workload>, Vec<AttributedPod>)> = self
            .index
            .attributed_pods()
            .into_iter()
            .map(|(w, mut pods)| {
                pods.extend(unattributed(&self.index, &w));
                (w, pods)
            })
            .collect();
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

        let refs: Vec<pb::ObjectRef> = workloads
            .iter()
            .map(|(w, _)| w.r#ref.clone().unwrap_or_default())
            .collect();
        // `api_version` keeps same-named kinds of different API groups apart.
        let id = |r: &pb::ObjectRef| {
            [
                ("namespace", r.namespace.clone()),
                ("kind", r.kind.clone()),
                ("name", r.name.clone()),
                ("api_version", r.api_version.clone()),
            ]
        };
        let with = |r: &pb::ObjectRef, k: &'static str, v: String| {
            let [a, b, c, d] = id(r);
            [a, b, c, d, (k, v)]
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
                (with(r, "phase", phase_name(phase)), 1i64)
            }),
        )?;
        gauges(
            e,
            "kartograf_pod_workload_info",
            "1 for every pod of a workload: joins (namespace, pod, uid) to its root workload and component (empty when no component claims the pod)",
            workloads.iter().zip(&refs).flat_map(|((_, pods), r)| {
                pods.iter().map(move |p| {
                    (
                        [
                            ("namespace", p.namespace.as_str()),
                            ("pod", p.name.as_str()),
                            ("uid", p.uid.as_str()),
                            ("workload_kind", r.kind.as_str()),
                            ("workload_name", r.name.as_str()),
                            ("workload_uid", r.uid.as_str()),
                            ("workload_api_version", r.api_version.as_str()),
                            ("component", p.component.as_str()),
                        ],
                        1i64,
                    )
                })
            }),
        )?;
        let unowned = self.index.unowned_gpu_pods();
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::phase_name;
    use crate::proto::v1 as pb;

    #[test]
    fn phase_names_are_title_case() {
        assert_eq!(phase_name(pb::Phase::Running as i32), "Running");
        assert_eq!(phase_name(pb::Phase::Initializing as i32), "Initializing");
        assert_eq!(phase_name(999), "Unspecified");
    }
}
