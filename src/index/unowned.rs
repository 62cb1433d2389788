//! Pods that hold GPUs but belong to no workload: their controller chain names a root kind
//! that has a definition, but that root is not cached (deleted while its pods terminate, a kind
//! kartograf cannot list), or the chain runs into an owner cycle. (A pod whose chain has no kind
//! with a definition is its own workload through the bare-Pod definition.) These are the GPUs a
//! cost report would otherwise file under "unallocated".

use super::Index;
use crate::board::UnownedGpuPod;
use crate::model::Cached;
use crate::model::ownership;

impl Index {
    /// Every cached pod that holds GPUs but belongs to no workload, in (namespace, name) order.
    pub fn unowned_gpu_pods(&self) -> Vec<UnownedGpuPod> {
        // Three short steps, so a scrape never holds a lock the writer (and, behind a waiting
        // writer, every reader) needs for long: GPU pods with the root they were last resolved
        // in (shared uids only), then which of them that root does not place (the board), then
        // the details of those few.
        let gpu_pods: Vec<(super::Uid, Option<super::Uid>)> = {
            let objects = self.objects();
            objects
                .iter()
                .filter(|(_, entry)| match &entry.cached {
                    Cached::Pod(pod) => pod.holds_resources() && pod.request.proto.gpus > 0.0,
                    Cached::Object(_) => false,
                })
                .map(|(uid, entry)| (uid.clone(), entry.root.clone()))
                .collect()
        };
        let unplaced: Vec<super::Uid> = {
            let board = self.board.read();
            gpu_pods
                .into_iter()
                .filter(|(uid, root)| {
                    root.as_ref()
                        .and_then(|root| board.workloads.get(root))
                        .is_none_or(|w| !w.placements.contains(uid))
                })
                .map(|(uid, _)| uid)
                .collect()
        };
        let mut out: Vec<UnownedGpuPod> = {
            let objects = self.objects();
            let graph = objects.graph();
            unplaced
                .iter()
                .filter_map(|uid| match &objects.get(uid)?.cached {
                    Cached::Pod(pod) => {
                        let chain = ownership::controller_chain(&pod.meta, &graph);
                        let top = chain.last();
                        Some(UnownedGpuPod {
                            namespace: pod.meta.namespace.clone(),
                            name: pod.meta.name.clone(),
                            uid: pod.meta.uid.to_string(),
                            owner_kind: top.map(|o| o.kind.clone()).unwrap_or_default(),
                            owner_name: top.map(|o| o.name.clone()).unwrap_or_default(),
                            gpus: pod.request.proto.gpus,
                        })
                    }
                    Cached::Object(_) => None,
                })
                .collect()
        };
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }
}
