//! kartograf's reading of one recorded workload object: resolved offline (no pods, as
//! upstream's replay reads the CR alone) with a given catalog.

use kartograf::definition::Catalog;
use kartograf::expr::Limits;
use kartograf::proto::phase_name;
use kartograf::proto::v1 as pb;
use kartograf::source::offline::Snapshot;
use serde_json::Value;
use std::time::{Duration, Instant};

/// What kartograf reads from one object.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Matched statuses, in upstream order (`Undefined` when none).
    pub matched: Vec<String>,
    /// The primary phase.
    pub phase: String,
    /// Every component instance of the graph, depth first.
    pub instances: Vec<InstanceReading>,
}

/// One component instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceReading {
    /// Component name.
    pub component: String,
    /// Instance id (empty for single-instance components).
    pub id: String,
    /// Replica key (empty unless the component has a replica selector).
    pub replica: String,
    /// `replicas`, `minReplicas`, `maxReplicas`.
    pub scale: (Option<i32>, Option<i32>, Option<i32>),
    /// Per-pod CPU request (millicores) and memory request (bytes), when a pod spec exists.
    pub per_pod: Option<(i64, i64)>,
}

/// Resolves `cr` (the only object) with `catalog`.
pub fn read(catalog: &Catalog, cr: &Value) -> Result<Reading, String> {
    let mut snapshot = Snapshot::default();
    snapshot.add(cr, Limits::default(), "recording");
    if !snapshot.warnings.is_empty() {
        return Err(snapshot.warnings.join("; "));
    }
    let root = snapshot
        .select(catalog, None, None)
        .map_err(|e| e.to_string())?;
    let resolution = snapshot
        .resolve(
            catalog,
            &root,
            Some(Instant::now() + Duration::from_secs(10)),
        )
        .map_err(|e| e.to_string())?;
    let w = resolution.workload;
    let status = w.status.unwrap_or_default();
    let mut instances = Vec::new();
    collect(&w.components, &mut instances);
    Ok(Reading {
        matched: status
            .matched
            .iter()
            .map(|p| phase_name(*p).to_owned())
            .collect(),
        phase: phase_name(status.phase).to_owned(),
        instances,
    })
}

fn collect(components: &[pb::Component], out: &mut Vec<InstanceReading>) {
    for c in components {
        for i in &c.instances {
            let scale = i.scale.unwrap_or_default();
            out.push(InstanceReading {
                component: c.name.clone(),
                id: i.id.clone(),
                replica: i.replica.clone(),
                scale: (scale.replicas, scale.min_replicas, scale.max_replicas),
                per_pod: i.per_pod.as_ref().map(|r| (r.cpu_millis, r.memory_bytes)),
            });
            collect(&i.children, out);
        }
    }
}
