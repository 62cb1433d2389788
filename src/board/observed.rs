//! What a store reports about itself besides its graphs (sizes, pods per workload, GPU pods no
//! workload owns, source problems): the types the metrics and the services read, the same for
//! the live index and an aggregator.

/// Why a pod has no workload to answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodMiss {
    /// No such pod is cached.
    NotCached,
    /// The pod is cached but belongs to no workload.
    InNoWorkload,
}

/// How much the index holds (for metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Cached objects other than pods (roots and intermediate owners).
    pub objects: usize,
    /// Cached pods.
    pub pods: usize,
    /// Resolved root workloads.
    pub workloads: usize,
}

/// A pod placed in a component of its workload (for the pod-to-workload metrics join).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributedPod {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid (empty when the pod has none).
    pub uid: String,
    /// The component the pod was placed in.
    pub component: String,
}

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

/// A problem a source reports: a file that did not parse (its last good documents stay
/// active), a missing directory, objects defined twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProblem {
    /// The file or directory.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Where a new pod belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewPod {
    /// In a workload: its root's kind and name, and the pod's component path (names from
    /// the root component down, `.` between levels) and replica when resolution places it.
    Placed {
        /// The root's kind.
        kind: String,
        /// The root's name.
        name: String,
        /// The component path; `None` when no component claims the pod.
        component: Option<String>,
        /// The component instance (empty: a component without instances).
        instance: String,
        /// The replica key in a replicated component (empty: none).
        replica: String,
    },
    /// Its controller chain leads to a kind with a definition whose object is not cached
    /// (created moments ago): that owner reference (an object read for it must have its uid).
    OwnerNotCached(crate::model::OwnerRef),
    /// No workload: no kind in its chain has a definition, or the chain is not believable
    /// (an owner in another namespace, an owner reference whose uid names another object).
    None,
}

/// Most owners of one pod read directly from the cluster at admission (one per hop).
pub const MAX_FETCHED_OWNERS: usize = crate::model::ownership::MAX_HOPS;

/// Reads objects straight from the cluster: at admission, the owners of a pod that the cache
/// has not seen yet (created moments before the pod), and a namespace's labels for policies
/// with a `namespaceSelector`.
pub trait OwnerLookup: Send + Sync {
    /// The labels of namespace `name`; `Ok(None)` when there is no such namespace.
    fn namespace_labels<'a>(
        &'a self,
        name: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<std::collections::BTreeMap<String, String>>, String>,
    >;

    /// The object `api_version` `kind` `namespace`/`name` as JSON; `Ok(None)` when the
    /// cluster has no such object or does not serve the kind.
    fn get<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<serde_json::Value>, String>>;
}
