//! What metrics read of an aggregator: its graphs, its upstreams as sources, and the pod
//! join read from the relayed full graphs at scrape time.

use super::{Aggregator, Upstream, rfc3339};
use crate::board::{AttributedPod, Board, Sizes, SourceProblem, UnownedGpuPod};
use crate::definition::Catalog;
use crate::metrics::{Observed, UpstreamHealth};
use crate::proto::v1 as pb;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Every pod a full graph lists, with the component that lists it (the deepest one when
/// several do), and those none claims (component "").
fn pods_of(graph: &pb::Workload) -> Vec<AttributedPod> {
    fn walk(
        components: &[pb::Component],
        namespace: &str,
        out: &mut BTreeMap<String, AttributedPod>,
    ) {
        for c in components {
            for i in &c.instances {
                for p in &i.pod_list {
                    out.insert(
                        p.uid.clone(),
                        AttributedPod {
                            namespace: namespace.to_owned(),
                            name: p.name.clone(),
                            uid: p.uid.clone(),
                            component: c.name.clone(),
                        },
                    );
                }
                walk(&i.children, namespace, out);
            }
        }
    }
    let namespace = graph
        .r#ref
        .as_ref()
        .map(|r| r.namespace.clone())
        .unwrap_or_default();
    let mut placed = BTreeMap::new();
    walk(&graph.components, &namespace, &mut placed);
    let mut pods: Vec<AttributedPod> = placed.into_values().collect();
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    pods.extend(graph.unattributed_pods.iter().map(|p| AttributedPod {
        namespace: namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
        component: String::new(),
    }));
    pods
}

impl Observed for Aggregator {
    fn board(&self) -> &Board {
        &self.board
    }

    fn catalog(&self) -> Arc<Catalog> {
        self.catalog.clone()
    }

    fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    fn sizes(&self) -> Sizes {
        Sizes {
            objects: 0,
            pods: 0,
            workloads: self.board.len(),
        }
    }

    fn cluster_label(&self) -> bool {
        true
    }

    fn workload_pods(&self) -> Vec<(Arc<pb::Workload>, Vec<AttributedPod>)> {
        // Read from the full graphs at scrape time: nothing per pod is kept.
        self.board
            .find(|_, _| true)
            .into_iter()
            .map(|w| (w.graph.summary.clone(), pods_of(&w.graph.graph())))
            .collect()
    }

    fn unowned_gpu_pods(&self) -> Vec<UnownedGpuPod> {
        // Pods outside every workload are each upstream's to report.
        Vec::new()
    }

    fn source_problems(&self) -> Vec<(String, Vec<SourceProblem>)> {
        // Each upstream is a source: a stale one reports why.
        let upstreams: Vec<Arc<Upstream>> = self.upstreams.read().values().cloned().collect();
        upstreams
            .iter()
            .map(|up| {
                let state = up.state();
                let stale = state.stale.as_ref().map(|s| SourceProblem {
                    path: up.config.url.clone(),
                    message: format!("stale since {}: {}", rfc3339(s.at), s.reason),
                });
                let refused = state.refusal.as_ref().map(|why| SourceProblem {
                    path: up.config.url.clone(),
                    message: format!("{} graphs refused; the last: {why}", state.refused),
                });
                let problems = stale.into_iter().chain(refused).collect();
                (format!("upstream {}", up.name()), problems)
            })
            .collect()
    }

    fn upstreams(&self) -> Vec<UpstreamHealth> {
        let upstreams: Vec<Arc<Upstream>> = self.upstreams.read().values().cloned().collect();
        upstreams
            .iter()
            .map(|up| {
                let state = up.state();
                UpstreamHealth {
                    name: up.name().to_owned(),
                    stale: state.stale.is_some(),
                    synced: state.synced,
                    workloads: state.workloads,
                    bytes: state.bytes,
                    refused: state.refused,
                }
            })
            .collect()
    }
}
