//! Answers by reference, pod and inline: from the aggregator's own graphs, or forwarded to
//! the upstream that serves the cluster.

use super::wire::{self, WorkloadRef};
use super::{Aggregator, Upstream};
use crate::board::{Published, WorkloadEntry};
use crate::excerpt::echo;
use crate::metrics::Observed;
use crate::proto::v1 as pb;
use crate::server::{ResolveFrame, Store, validate};
use std::collections::BTreeSet;
use std::sync::Arc;
use tonic::Status;

/// A status from an upstream, naming it.
fn from_upstream(upstream: &Upstream, status: Status) -> Status {
    Status::new(
        status.code(),
        format!("upstream {}: {}", upstream.name(), status.message()),
    )
}

/// `kind/namespace/name` or `uid U` of a reference, for messages.
fn what(r: &pb::ObjectRef) -> String {
    if r.uid.is_empty() {
        format!("{}/{}/{}", echo(&r.kind), echo(&r.namespace), echo(&r.name))
    } else {
        format!("uid {}", echo(&r.uid))
    }
}

/// " in cluster C" or " in any cluster".
fn scope(cluster: &str) -> String {
    if cluster.is_empty() {
        " in any cluster".to_owned()
    } else {
        format!(" in cluster {:?}", echo(cluster))
    }
}

/// INVALID_ARGUMENT for a reference that matches in several clusters.
fn ambiguous(what: &str, clusters: &BTreeSet<String>) -> Status {
    let names: Vec<String> = clusters.iter().map(|c| format!("{:?}", echo(c))).collect();
    Status::invalid_argument(format!(
        "{what} exists in clusters {}: set `cluster` to choose one",
        names.join(", ")
    ))
}

impl Aggregator {
    /// The configured upstreams that may hold `cluster` (all for an empty one).
    fn upstreams_for(&self, cluster: &str) -> Vec<Arc<Upstream>> {
        self.upstreams
            .read()
            .values()
            .filter(|u| cluster.is_empty() || u.serves(cluster))
            .cloned()
            .collect()
    }

    /// Forwards `request` to `up` (with the cluster only for an upstream that serves several).
    async fn forward(
        &self,
        up: &Upstream,
        mut request: pb::ResolveRequest,
    ) -> Result<wire::RawResolveResponse, Status> {
        let Some((channel, token)) = up.connection() else {
            let why = up
                .state()
                .stale
                .as_ref()
                .map_or_else(|| "not connected yet".to_owned(), |s| s.reason.clone());
            return Err(Status::unavailable(format!(
                "upstream {} is not reachable: {why}",
                up.name()
            )));
        };
        if !up.several_clusters() {
            request.cluster.clear();
        }
        match tokio::time::timeout(
            self.settings.forward_timeout,
            wire::resolve(
                channel,
                token.as_ref(),
                request,
                wire::event_limit(self.settings.limits.max_graph_bytes),
            ),
        )
        .await
        {
            Ok(answer) => answer.map_err(|s| from_upstream(up, s)),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "upstream {} did not answer within {:?}",
                up.name(),
                self.settings.forward_timeout
            ))),
        }
    }

    /// A forwarded answer as this aggregator sends it: the aggregator's own version of the
    /// graph when it holds it (its revision, its stale mark), else the upstream's bytes.
    /// A graph that would decode to more than the limits allow is refused (UNAVAILABLE).
    fn answer(
        &self,
        up: &Upstream,
        raw: wire::RawResolveResponse,
        view: i32,
    ) -> Result<ResolveFrame, Status> {
        let bytes = raw.workload.unwrap_or_default();
        let room = self
            .settings
            .limits
            .max_graph_bytes
            .saturating_mul(super::cost::DECODED_PER_ENCODED);
        if super::cost::decoded(&bytes).is_some_and(|size| size > room) {
            return Err(Status::unavailable(format!(
                "upstream {} answered a graph that would take more than {room} bytes decoded ({}x --upstream-max-graph-bytes)",
                up.name(),
                super::cost::DECODED_PER_ENCODED
            )));
        }
        let held = prost::Message::decode(bytes.clone())
            .ok()
            .and_then(|w: WorkloadRef| w.r#ref)
            .and_then(|r| self.board.get(&up.key(&r.uid)));
        let workload = match held {
            Some(w) => w.graph.encoded(view),
            None => {
                Published::from_wire(bytes.clone(), up.name()).map_or(bytes, |p| p.encoded(view))
            }
        };
        Ok(ResolveFrame {
            workload,
            pod: raw.pod,
        })
    }

    /// The cluster of a forwarded answer's graph (the upstream's name when it names none).
    fn cluster_of(up: &Upstream, raw: &wire::RawResolveResponse) -> String {
        raw.workload
            .clone()
            .and_then(|b| prost::Message::decode(b).ok())
            .map(|w: WorkloadRef| w.cluster)
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| up.name().to_owned())
    }
}

#[tonic::async_trait]
impl Store for Aggregator {
    fn pending(&self) -> Vec<String> {
        if self.synced() {
            return Vec::new();
        }
        self.pending
            .lock()
            .iter()
            .map(|n| format!("upstream {n}"))
            .collect()
    }

    fn workload(&self, r: &pb::ObjectRef, cluster: &str) -> Result<Arc<Published>, Status> {
        let candidates: Vec<Arc<WorkloadEntry>> = if r.uid.is_empty() {
            let keys = self
                .names
                .read()
                .get(&(r.namespace.clone(), r.name.clone()))
                .cloned()
                .unwrap_or_default();
            keys.iter().filter_map(|k| self.board.get(k)).collect()
        } else {
            self.upstreams
                .read()
                .values()
                .filter_map(|u| self.board.get(&u.key(&r.uid)))
                .collect()
        };
        let in_cluster: Vec<Arc<WorkloadEntry>> = candidates
            .into_iter()
            .filter(|w| cluster.is_empty() || w.graph.cluster == cluster)
            .collect();
        let of = |w: &WorkloadEntry| w.graph.r#ref.clone().unwrap_or_default();
        let mut found: Vec<Arc<WorkloadEntry>> = if r.uid.is_empty() {
            in_cluster
                .into_iter()
                .filter(|w| {
                    let g = of(w);
                    (r.kind.is_empty() || g.kind.eq_ignore_ascii_case(&r.kind))
                        && (r.api_version.is_empty() || g.api_version == r.api_version)
                })
                .collect()
        } else {
            // The same uid may name unrelated objects in two clusters: those whose other
            // fields contradict the request are not it.
            let agreeing: Vec<Arc<WorkloadEntry>> = in_cluster
                .iter()
                .filter(|w| validate::agrees("workload", r, &of(w)).is_ok())
                .cloned()
                .collect();
            if agreeing.is_empty()
                && let Some(w) = in_cluster.first()
            {
                validate::agrees("workload", r, &of(w))?;
            }
            agreeing
        };
        let clusters: BTreeSet<String> = found.iter().map(|w| w.graph.cluster.clone()).collect();
        if clusters.len() > 1 {
            return Err(ambiguous(&format!("workload {}", what(r)), &clusters));
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        if found.is_empty()
            && !r.kind.is_empty()
            && !self
                .catalog
                .definitions()
                .any(|d| d.root_kind.kind.eq_ignore_ascii_case(&r.kind))
        {
            // As a server of one cluster answers (by the aggregator's own catalog: an
            // upstream's cluster definitions are not known here).
            return Err(Status::failed_precondition(format!(
                "no definition covers kind `{}` (no workload of that kind is known{})",
                echo(&r.kind),
                scope(cluster)
            )));
        }
        found.into_iter().next().map(|w| w.graph.clone()).ok_or_else(|| {
            Status::not_found(format!(
                "no workload {} is known{} (is it part of another workload, not created yet, or of an upstream that is down?)",
                what(r),
                scope(cluster)
            ))
        })
    }

    async fn pod(
        &self,
        r: pb::ObjectRef,
        cluster: String,
        view: i32,
    ) -> Result<ResolveFrame, Status> {
        let upstreams = self.upstreams_for(&cluster);
        if upstreams.is_empty() {
            return Err(Status::not_found(format!(
                "no upstream serves cluster {:?}",
                echo(&cluster)
            )));
        }
        let request = pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Pod(r.clone())),
            view,
            cluster: cluster.clone(),
        };
        let answers =
            futures::future::join_all(upstreams.iter().map(|up| self.forward(up, request.clone())))
                .await;
        let mut found = Vec::new();
        let mut failed = Vec::new();
        for (up, answer) in upstreams.iter().zip(answers) {
            match answer {
                Ok(raw) => found.push((up, raw)),
                Err(s) if s.code() == tonic::Code::NotFound => {}
                Err(s) => failed.push(s),
            }
        }
        let clusters: BTreeSet<String> = found
            .iter()
            .map(|(up, raw)| Self::cluster_of(up, raw))
            .collect();
        if clusters.len() > 1 {
            return Err(ambiguous(&format!("pod {}", what(&r)), &clusters));
        }
        match found.into_iter().next() {
            Some((up, raw)) => self.answer(up, raw, view),
            None => Err(failed.into_iter().next().unwrap_or_else(|| {
                Status::not_found(format!("pod {} is not known{}", what(&r), scope(&cluster)))
            })),
        }
    }

    async fn inline(&self, request: &pb::ResolveRequest) -> Option<Result<ResolveFrame, Status>> {
        if request.cluster.is_empty() {
            return None;
        }
        let Some(up) = self.upstreams_for(&request.cluster).into_iter().next() else {
            return Some(Err(Status::not_found(format!(
                "no upstream serves cluster {:?}",
                echo(&request.cluster)
            ))));
        };
        Some(
            self.forward(&up, request.clone())
                .await
                .map(|raw| ResolveFrame {
                    workload: raw.workload.unwrap_or_default(),
                    pod: raw.pod,
                }),
        )
    }
}
