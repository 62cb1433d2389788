//! The narrow interface between the gRPC services and what they serve: the live [`Index`]
//! of one cluster, or an aggregator's union of other servers (`crate::aggregate`). Both
//! publish graphs on a [`crate::board::Board`] (List, Watch and Totals read it alike); they
//! differ in how a workload or pod is found by reference and where inline requests are
//! resolved. A fake store for server tests needs a board, these methods and `Observed`'s.

use super::validate;
use super::wire::ResolveFrame;
use crate::board::Published;
use crate::board::{NewPod, PodMiss};
use crate::excerpt::echo;
use crate::index::Index;
use crate::metrics::Observed;
use crate::proto::v1 as pb;
use std::sync::Arc;
use tonic::Status;

/// What the services read. Requests reach it validated; it answers with the status the
/// client gets.
#[tonic::async_trait]
pub trait Store: Observed + Send + Sync + 'static {
    /// What the first full sync still waits for (sources, or upstreams); empty when done.
    fn pending(&self) -> Vec<String>;

    /// A published workload by reference (a uid, or kind/namespace/name), of `cluster`
    /// (empty: any).
    fn workload(&self, r: &pb::ObjectRef, cluster: &str) -> Result<Arc<Published>, Status>;

    /// The workload of a pod and where the pod sits in it, in `view`.
    async fn pod(
        &self,
        r: pb::ObjectRef,
        cluster: String,
        view: i32,
    ) -> Result<ResolveFrame, Status>;

    /// An inline request resolved elsewhere (an aggregator forwards it to the upstream of its
    /// cluster); `None` when it is resolved here, with [`Observed::catalog`].
    async fn inline(&self, _request: &pb::ResolveRequest) -> Option<Result<ResolveFrame, Status>> {
        None
    }

    /// A cached root object by uid, for `Patch`; `None` when this store keeps no objects (an
    /// aggregator keeps only graphs).
    fn root_object(&self, _uid: &str) -> Option<RootObject> {
        None
    }

    /// The version of the cached root object `uid` (see [`RootObject::version`]).
    fn root_version(&self, _uid: &str) -> Option<u64> {
        None
    }

    /// Where a pod being created (at admission, not cached yet) belongs, with `fetched`
    /// owners read directly from the cluster; an aggregator, which keeps no objects, knows
    /// none.
    fn place_new_pod(
        &self,
        _pod: &crate::model::Pod,
        _fetched: &[std::sync::Arc<crate::model::Object>],
    ) -> NewPod {
        NewPod::None
    }
}

/// A cached root object, as `Patch` plans on it.
pub struct RootObject {
    /// As JSON.
    pub json: serde_json::Value,
    /// The same as a jq value (what the write path evaluates paths on).
    pub val: crate::expr::Val,
    /// Its version in the cache: equal versions mean equal objects.
    pub version: u64,
}

/// NOT_FOUND for a cluster other than the index's own (`None` when it is that one, or any).
fn other_cluster(index: &Index, cluster: &str) -> Option<Status> {
    (!cluster.is_empty() && cluster != index.cluster()).then(|| {
        let own = if index.cluster().is_empty() {
            "no cluster name (start it with --cluster-name)".to_owned()
        } else {
            format!("cluster {:?}", index.cluster())
        };
        Status::not_found(format!(
            "this server serves {own}, not cluster {:?}; ask that cluster's server or an aggregator",
            echo(cluster)
        ))
    })
}

#[tonic::async_trait]
impl Store for Index {
    fn pending(&self) -> Vec<String> {
        self.pending_sources()
    }

    fn root_object(&self, uid: &str) -> Option<RootObject> {
        self.object_json(uid)
            .map(|(json, val, version)| RootObject { json, val, version })
    }

    fn root_version(&self, uid: &str) -> Option<u64> {
        self.object_version(uid)
    }

    fn place_new_pod(
        &self,
        pod: &crate::model::Pod,
        fetched: &[std::sync::Arc<crate::model::Object>],
    ) -> NewPod {
        Index::place_new_pod_with(self, pod, fetched)
    }

    fn workload(&self, r: &pb::ObjectRef, cluster: &str) -> Result<Arc<Published>, Status> {
        if let Some(status) = other_cluster(self, cluster) {
            return Err(status);
        }
        if let Some(w) = self.published(r) {
            if !r.uid.is_empty() {
                let found = w.r#ref.clone().unwrap_or_default();
                validate::agrees("workload", r, &found)?;
            }
            return Ok(w);
        }
        let catalog = self.catalog();
        if !r.kind.is_empty() {
            let known = catalog
                .definitions()
                .any(|d| d.root_kind.kind.eq_ignore_ascii_case(&r.kind));
            if !known {
                return Err(Status::failed_precondition(format!(
                    "no definition covers kind `{}`; see ListDefinitions (add one with --definitions or a Karta object)",
                    echo(&r.kind)
                )));
            }
        }
        let what = if r.uid.is_empty() {
            format!("{}/{}/{}", echo(&r.kind), echo(&r.namespace), echo(&r.name))
        } else {
            format!("uid {}", echo(&r.uid))
        };
        Err(Status::not_found(format!(
            "no workload {what} is known (is it part of another workload, or not created yet?)"
        )))
    }

    async fn pod(
        &self,
        r: pb::ObjectRef,
        cluster: String,
        view: i32,
    ) -> Result<ResolveFrame, Status> {
        if let Some(status) = other_cluster(self, &cluster) {
            return Err(status);
        }
        if !r.uid.is_empty()
            && let Some(found) = self.object_ref(&r.uid)
        {
            if found.kind != "Pod" || found.api_version != "v1" {
                return Err(Status::invalid_argument(format!(
                    "pod.uid {:?} is a {} ({}/{}), not a pod; to resolve a workload by uid, set `workload` instead",
                    echo(&r.uid),
                    echo(&found.kind),
                    echo(&found.namespace),
                    echo(&found.name)
                )));
            }
            validate::agrees("pod", &r, &found)?;
        }
        let what = if r.uid.is_empty() {
            format!("{}/{}", echo(&r.namespace), echo(&r.name))
        } else {
            format!("uid {}", echo(&r.uid))
        };
        match self.published_of_pod(&r) {
            Ok((w, placement)) => Ok(ResolveFrame {
                workload: w.encoded(view),
                pod: Some(placement),
            }),
            Err(PodMiss::InNoWorkload) => Err(Status::not_found(format!(
                "pod {what} belongs to no known workload"
            ))),
            Err(PodMiss::NotCached) => Err(Status::not_found(format!("pod {what} is not known"))),
        }
    }
}
