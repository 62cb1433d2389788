//! Live verification: each time the index resolves a root that owns gang objects (watched
//! when the cluster serves their kinds), the objects are checked against the new graph
//! ([`super::verify`]); the findings join the graph's diagnostics and each object's verdict
//! is published with the graph on the board, where the metrics read it
//! (`kartograf_gang_intact`, `kartograf_gang_stale`).
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
use std::sync::Arc;

/// Most gang objects checked for one workload (more are reported once, not checked).
pub const MAX_OBJECTS_PER_WORKLOAD: usize = 64;

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

/// The verdicts of one workload's gang objects, carried on the board with its published
/// graph (`crate::board::WorkloadEntry::gangs`): the metrics read them from there.
pub type GangStatuses = Arc<[GangStatus]>;

/// Checks the gang objects `objects` (below the root in its owner chain) against the
/// freshly resolved `workload`, appends the findings to its diagnostics and returns the
/// verdicts to publish with it (none when there are no objects). `previous` are the
/// verdicts published with the root's last graph: objects that could not be read are
/// logged when the verdicts change.
pub fn annotate(
    workload: &mut pb::Workload,
    objects: &[Arc<Object>],
    pods: &[&Pod],
    previous: &[GangStatus],
) -> GangStatuses {
    if objects.is_empty() {
        if !previous.is_empty() {
            tracing::debug!(
                workload = ?workload.r#ref.as_ref().map(|r| (&r.kind, &r.name)),
                "gangs: no gang objects any more"
            );
        }
        return Arc::from([]);
    }
    let verdicts = check(workload, objects, pods);
    let statuses = statuses_of(workload, &verdicts);
    if statuses.as_ref() != previous {
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
    statuses
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

/// The verdicts as the metrics show them.
fn statuses_of(workload: &pb::Workload, verdicts: &[Verdict]) -> GangStatuses {
    let r = workload.r#ref.clone().unwrap_or_default();
    verdicts
        .iter()
        .map(|v| GangStatus {
            namespace: r.namespace.clone(),
            kind: v.family.label(),
            name: v.name.clone(),
            workload: format!("{}/{}", r.kind, r.name),
            intact: v.intact,
            stale: v.stale,
        })
        .collect()
}

/// Every verdict of `published` (each workload's, as carried on the board), in the order
/// the metrics list them: by namespace, kind and name.
pub fn sorted<'a>(published: impl IntoIterator<Item = &'a [GangStatus]>) -> Vec<GangStatus> {
    let mut out: Vec<GangStatus> = published
        .into_iter()
        .flat_map(|s| s.iter().cloned())
        .collect();
    out.sort_by(|a, b| (&a.namespace, a.kind, &a.name).cmp(&(&b.namespace, b.kind, &b.name)));
    out
}
