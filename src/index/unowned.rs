//! Pods that hold GPUs but belong to no workload: their controller chain names a root kind
//! that has a definition, but that root is not cached (deleted while its pods terminate, a kind
//! kartograf cannot list), or the chain runs into an owner cycle. (A pod whose chain has no kind
//! with a definition is its own workload through the bare-Pod definition.) These are the GPUs a
//! cost report would otherwise file under "unallocated".

use super::Index;
use super::objects::Graph;
use crate::model::Cached;
use crate::model::ownership;

/// A cached pod that holds GPUs and that no workload's resolution includes.
#[derive(Debug, Clone, PartialEq)]
pub struct UnownedGpuPod {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Kind of its topmost controller (empty when it has none).
    pub owner_kind: String,
    /// Name of its topmost controller (empty when it has none).
    pub owner_name: String,
    /// GPUs (GPU equivalents) the pod holds: it is bound to a node and not terminated.
    pub gpus: f64,
}

impl Index {
    /// Every cached pod that holds GPUs but belongs to no workload, in (namespace, name) order.
    pub fn unowned_gpu_pods(&self) -> Vec<UnownedGpuPod> {
        // Candidates are taken under the objects' read lock; which of them a workload holds is
        // checked against the board afterwards.
        let candidates: Vec<(super::Uid, Option<super::Uid>, UnownedGpuPod)> = {
            let objects = self.objects();
            let graph = Graph(&objects.entries);
            objects
                .entries
                .iter()
                .filter_map(|(uid, entry)| {
                    let Cached::Pod(pod) = &entry.cached else {
                        return None;
                    };
                    let gpus = pod.request.proto.gpus;
                    if !pod.holds_resources() || gpus <= 0.0 {
                        return None;
                    }
                    let chain = ownership::controller_chain(&pod.meta, &graph);
                    let top = chain.last();
                    Some((
                        uid.clone(),
                        entry.root.clone(),
                        UnownedGpuPod {
                            namespace: pod.meta.namespace.clone(),
                            name: pod.meta.name.clone(),
                            uid: pod.meta.uid.clone(),
                            owner_kind: top.map(|o| o.kind.clone()).unwrap_or_default(),
                            owner_name: top.map(|o| o.name.clone()).unwrap_or_default(),
                            gpus,
                        },
                    ))
                })
                .collect()
        };
        let board = self.board.read();
        let mut out: Vec<UnownedGpuPod> = candidates
            .into_iter()
            .filter(|(uid, root, _)| {
                root.as_ref()
                    .and_then(|root| board.workloads.get(root))
                    .is_none_or(|w| w.placements.get(uid).is_none())
            })
            .map(|(_, _, p)| p)
            .collect();
        drop(board);
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }
}
