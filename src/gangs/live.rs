//! Live verification: each time the index resolves a root that owns gang objects (watched
//! when the cluster serves their kinds), the objects are checked against the new graph
//! ([`super::verify`]); the findings join the graph's diagnostics and each object's verdict
//! is kept for the metrics (`kartograf_gang_intact`, `kartograf_gang_stale`).
//!
//! A gang object enters a root's resolution when it is below the root in the owner chain
//! (KAI's pod-grouper, KubeRay and the Workload API controllers set the workload as owner);
//! a change of the object, of the root or of a pod re-resolves the root, so a finding follows
//! the change that causes it within one resolution.

use super::verify::{self, GangObject, PodLinks, Verdict};
use crate::definition::GroupVersionKind;
use crate::expr::value::Keep;
use crate::model::{Object, Pod};
use crate::proto::v1 as pb;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Most gang objects checked for one workload (more are reported once, not checked).
pub const MAX_OBJECTS_PER_WORKLOAD: usize = 64;
/// Most workloads whose verdicts are kept for the metrics.
pub const MAX_WORKLOADS: usize = 100_000;

/// What is kept of a watched gang object: its type, identity, owners and labels, and its
/// spec (never its status: the verdicts come from the pods).
pub const GANG_PROJECTION: Keep = Keep::Fields(&[
    ("apiVersion", Keep::All),
    ("kind", Keep::All),
    (
        "metadata",
        Keep::Fields(&[
            ("name", Keep::All),
            ("namespace", Keep::All),
            ("uid", Keep::All),
            ("labels", Keep::All),
            ("ownerReferences", Keep::All),
            ("creationTimestamp", Keep::All),
        ]),
    ),
    ("spec", Keep::All),
]);

/// The gang object kinds watched when the cluster serves them, at the versions
/// [`GANG_KINDS`](crate::model::object::GANG_KINDS) names: KAI's PodGroup, the Workload
/// API's Workload, PodGroup and CompositePodGroup, and coscheduling's PodGroup. The Workload
/// is watched for owner chains (a PodGroup may be owned by its Workload, which the
/// workload's root owns).
pub fn watched_kinds() -> Vec<GroupVersionKind> {
    crate::model::object::GANG_KINDS
        .iter()
        .map(|(group, version, kind)| GroupVersionKind::new(group, version, kind))
        .collect()
}

/// The verdict on one gang object, as the metrics show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangStatus {
    /// The object's namespace.
    pub namespace: String,
    /// The object's kind label ([`verify::Family::label`]).
    pub kind: &'static str,
    /// The object's name.
    pub name: String,
    /// The workload, `Kind/name`.
    pub workload: String,
    /// Members running ≥ minimum (or none placed yet).
    pub intact: bool,
    /// It disagrees with the workload.
    pub stale: bool,
}

/// Verdicts by root uid.
fn registry() -> &'static Mutex<HashMap<String, Vec<GangStatus>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Vec<GangStatus>>>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

/// Checks the gang objects `objects` (below the root in its owner chain) against the
/// freshly resolved `workload`, appends the findings to its diagnostics and records the
/// verdicts. `root_uid` keys the record; no objects clears it.
pub fn annotate(
    root_uid: &str,
    workload: &mut pb::Workload,
    objects: &[Arc<Object>],
    pods: &[&Pod],
) {
    if objects.is_empty() {
        if registry().lock().remove(root_uid).is_some() {
            tracing::debug!(root = root_uid, "gangs: no gang objects any more");
        }
        return;
    }
    let verdicts = check(workload, objects, pods);
    if record(root_uid, workload, &verdicts) {
        for o in objects.iter().take(MAX_OBJECTS_PER_WORKLOAD) {
            if let Some(problem) = &o.problem {
                tracing::warn!(
                    kind = %o.meta.kind,
                    namespace = %o.meta.namespace,
                    name = %o.meta.name,
                    %problem,
                    "gangs: a gang object could not be read; it is reported invalid, not checked"
                );
            }
        }
    }
}

/// [`annotate`] without recording (offline resolution): the verdicts.
pub fn check(workload: &mut pb::Workload, objects: &[Arc<Object>], pods: &[&Pod]) -> Vec<Verdict> {
    if objects.is_empty() {
        return Vec::new();
    }
    let gang_objects: Vec<GangObject> = objects
        .iter()
        .take(MAX_OBJECTS_PER_WORKLOAD)
        .filter_map(|o| GangObject::of_object(o))
        .collect();
    let links: Vec<PodLinks> = pods.iter().map(|p| PodLinks::of(p)).collect();
    let verdicts = verify::check_workload(workload, &gang_objects, &links);
    workload.diagnostics.extend(verify::diagnostics(&verdicts));
    if objects.len() > MAX_OBJECTS_PER_WORKLOAD {
        workload.diagnostics.push(pb::Diagnostic {
            severity: crate::resolve::diagnostics::WARNING.into(),
            code: verify::code::INVALID.into(),
            message: format!(
                "{} gang objects are owned by this workload; the first {MAX_OBJECTS_PER_WORKLOAD} are checked",
                objects.len()
            ),
            ..Default::default()
        });
    }
    verdicts
}

/// Records the verdicts; true when they differ from those recorded before.
fn record(root_uid: &str, workload: &pb::Workload, verdicts: &[Verdict]) -> bool {
    let r = workload.r#ref.clone().unwrap_or_default();
    let statuses: Vec<GangStatus> = verdicts
        .iter()
        .map(|v| GangStatus {
            namespace: r.namespace.clone(),
            kind: v.family.label(),
            name: v.name.clone(),
            workload: format!("{}/{}", r.kind, r.name),
            intact: v.intact,
            stale: v.stale,
        })
        .collect();
    let mut reg = registry().lock();
    let changed = reg.get(root_uid) != Some(&statuses);
    if statuses.is_empty() {
        reg.remove(root_uid);
    } else if reg.len() < MAX_WORKLOADS || reg.contains_key(root_uid) {
        reg.insert(root_uid.to_owned(), statuses);
    }
    changed
}

/// Forgets the verdicts of a root that is gone.
pub fn forget(root_uid: &str) {
    registry().lock().remove(root_uid);
}

/// Every recorded verdict of the roots `present` says are published (a registry shared by
/// the process's indexes: each reads its own roots).
pub fn statuses(present: impl Fn(&str) -> bool) -> Vec<GangStatus> {
    let reg = registry().lock();
    let mut out: Vec<GangStatus> = reg
        .iter()
        .filter(|(uid, _)| present(uid))
        .flat_map(|(_, s)| s.iter().cloned())
        .collect();
    out.sort_by(|a, b| (&a.namespace, a.kind, &a.name).cmp(&(&b.namespace, b.kind, &b.name)));
    out
}
