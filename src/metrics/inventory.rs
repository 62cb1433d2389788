//! Series computed from the index at every scrape: index sizes, definition load errors,
//! evaluation diagnostics, per-workload GPUs, pods and phase, and the pod-to-workload join.

use crate::definition::LoadReport;
use crate::index::Index;
use crate::proto::v1 as pb;
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

        drift(e, &self.index, &self.report)?;

        let workloads = self.index.attributed_pods();
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
            "1 for every pod attributed to a workload: joins (namespace, pod, uid) to its root workload and component",
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
                            ("component", p.component.as_str()),
                        ],
                        1i64,
                    )
                })
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
