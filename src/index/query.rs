//! Reading the index: lookups, filtered lists, totals and the change history.

use super::Index;
use super::names::Name;
use crate::board::{AttributedPod, PodMiss, Published, Sizes};
use crate::model::ownership::{Root, root_of};
use crate::proto::v1 as pb;
use std::sync::Arc;

impl Index {
    /// How many objects, pods and workloads are cached.
    pub fn sizes(&self) -> Sizes {
        let (entries, pods) = {
            let objects = self.objects();
            (objects.len(), objects.pods)
        };
        Sizes {
            objects: entries.saturating_sub(pods),
            pods,
            workloads: self.board.len(),
        }
    }

    /// Sources whose first full sync has not finished yet, sorted.
    pub fn pending_sources(&self) -> Vec<String> {
        let mut pending: Vec<String> = self.pending_sources.lock().iter().cloned().collect();
        pending.sort();
        pending
    }

    /// Every workload's summary ([`crate::resolve::summarize`]) in (namespace, kind, name)
    /// order, with the pods its resolution placed in a component (by pod name); unattributed
    /// pods are left out.
    pub fn attributed_pods(&self) -> Vec<(Arc<pb::Workload>, Vec<AttributedPod>)> {
        let all = self.board.find(|_, _| true);
        // Pods are looked up under the objects' read lock, one workload at a time.
        all.into_iter()
            .map(|w| {
                let mut pods: Vec<AttributedPod> = {
                    let objects = self.objects();
                    w.placements
                        .components()
                        .filter(|(_, component)| !component.is_empty())
                        .filter_map(|(uid, component)| {
                            let meta = objects.get(uid)?.cached.meta();
                            Some(AttributedPod {
                                namespace: meta.namespace.clone(),
                                name: meta.name.clone(),
                                uid: meta.uid.to_string(),
                                component: component.to_owned(),
                            })
                        })
                        .collect()
                };
                pods.sort_by(|a, b| a.name.cmp(&b.name));
                (w.graph.summary.clone(), pods)
            })
            .collect()
    }

    /// The published graph of the workload with this uid, or this kind (case-insensitive,
    /// optional) / namespace / name.
    pub fn published(&self, r: &pb::ObjectRef) -> Option<Arc<Published>> {
        if !r.uid.is_empty() {
            return self.board.get(r.uid.as_str()).map(|w| w.graph.clone());
        }
        let matches = |g: &pb::ObjectRef| {
            g.name == r.name
                && g.namespace == r.namespace
                && (r.kind.is_empty() || g.kind.eq_ignore_ascii_case(&r.kind))
                && (r.api_version.is_empty() || g.api_version == r.api_version)
        };
        // By name through the name index; a scan only without a kind or when another
        // group's kind of the same name holds the name.
        if !r.kind.is_empty() {
            let key = Name {
                kind: &r.kind,
                namespace: &r.namespace,
                name: &r.name,
            };
            let uid = {
                let objects = self.objects();
                objects
                    .by_name
                    .get_ignoring_kind_case(&objects.graph(), key)
                    .cloned()
            };
            let found = uid
                .and_then(|uid| self.board.get(&uid))
                .filter(|w| w.graph.r#ref.as_ref().is_some_and(matches));
            if let Some(w) = found {
                return Some(w.graph.clone());
            }
        }
        self.board
            .find(|g, _| matches(g))
            .first()
            .map(|w| w.graph.clone())
    }

    /// A cached object (not a pod) by uid, as JSON and as a jq value (one unpacking for
    /// both; as cached: see `model::OBJECT_RULE`), with its version in the cache, which moves
    /// whenever the object changes.
    pub fn object_json(&self, uid: &str) -> Option<(serde_json::Value, crate::expr::Val, u64)> {
        let (object, version) = {
            let objects = self.objects();
            let entry = objects.get(uid)?;
            match &entry.cached {
                crate::model::Cached::Object(o) if o.problem.is_none() => {
                    (o.clone(), entry.version)
                }
                _ => return None,
            }
        };
        let val = object.packed.to_val();
        Some((crate::expr::value::to_json(&val), val, version))
    }

    /// The version in the cache of the object with this uid (see [`Index::object_json`]).
    pub fn object_version(&self, uid: &str) -> Option<u64> {
        self.objects().get(uid).map(|e| e.version)
    }

    /// The published graph of the workload that owns a cached pod, and where the pod sits.
    pub fn published_of_pod(
        &self,
        r: &pb::ObjectRef,
    ) -> Result<(Arc<Published>, pb::PodPlacement), PodMiss> {
        let (uid, root) = {
            let objects = self.objects();
            let uid: super::Uid = if r.uid.is_empty() {
                let key = Name {
                    kind: "Pod",
                    namespace: &r.namespace,
                    name: &r.name,
                };
                objects
                    .by_name
                    .get(&objects.graph(), key)
                    .cloned()
                    .ok_or(PodMiss::NotCached)?
            } else {
                objects.uid(&r.uid)
            };
            let entry = objects.get(&uid).ok_or(PodMiss::NotCached)?;
            let root = entry.root.clone().ok_or(PodMiss::InNoWorkload)?;
            // The root last resolved with the pod, if the pod's controller chain still
            // leads there (it may have moved to an owner that is not cached).
            let catalog = self.catalog.load();
            let still = match root_of(entry.cached.meta(), &objects.graph(), &catalog) {
                Root::Itself => root == uid,
                Root::Owner(owner) => owner.uid == *root,
                Root::Uncovered(_) => false,
            };
            if !still {
                return Err(PodMiss::InNoWorkload);
            }
            (uid, root)
        };
        let w = self.board.get(&root).ok_or(PodMiss::InNoWorkload)?;
        let placement = w.placements.get(&uid).unwrap_or_default();
        Ok((w.graph.clone(), placement))
    }

    /// The reference (apiVersion, kind, namespace, name, uid) of the cached object or pod
    /// with this uid.
    pub fn object_ref(&self, uid: &str) -> Option<pb::ObjectRef> {
        let objects = self.objects();
        let meta = objects.get(uid)?.cached.meta();
        Some(pb::ObjectRef {
            api_version: meta.api_version.clone(),
            kind: meta.kind.clone(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone(),
            uid: meta.uid.to_string(),
        })
    }
}
