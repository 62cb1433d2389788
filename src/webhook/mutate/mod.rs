//! Mutating admission for any kind with a definition (`admission.k8s.io/v1` AdmissionReview):
//!
//! - `POST /mutate/workloads`: a workload a policy covers (`serve --policies`) gets the write
//!   path's JSON Patch of the policies' intents ([`workloads`]).
//! - `POST /mutate/pods`: a pod being created gets labels naming its workload, component and
//!   replica ([`pods`]).
//!
//! Both always admit: a policy never blocks a workload and a label never blocks a pod. What
//! could not be done is logged, counted and returned as a warning in the response. A body
//! that is no AdmissionReview at all is answered 400 (a misconfigured caller, not a
//! workload). The review is read and answered on the evaluation threads.

pub mod pods;
pub mod workloads;

use super::admission::answers::{allow, allow_patch, allow_warning};
use super::admission::wire::{Head, Objects, Response};
use super::admission::{bad_request, encode, envelope};
use crate::model::{Object, OwnerRef};
use crate::server::Shared;
use bytes::Bytes;
use hyper::StatusCode;
use serde_json::Value as Json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The workloads route.
pub const WORKLOADS: &str = "/mutate/workloads";
/// The pods route.
pub const PODS: &str = "/mutate/pods";

/// Which route a path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// [`WORKLOADS`].
    Workloads,
    /// [`PODS`].
    Pods,
}

/// The route a path names.
pub fn route_of(path: &str) -> Option<Route> {
    match path {
        WORKLOADS => Some(Route::Workloads),
        PODS => Some(Route::Pods),
        _ => None,
    }
}

/// Answers one request body: 200 with an allowing response (with a patch or warnings), 400
/// when the body is no `admission.k8s.io/v1` AdmissionReview with a request, 429 when no
/// evaluation thread was free within the queue wait (the API server then applies the
/// webhook's failure policy: `Ignore` in `deploy/webhook/`).
pub async fn handle(
    shared: &Shared,
    route: Route,
    body: crate::server::http::BodyBytes,
    timeout: Duration,
) -> (StatusCode, Bytes) {
    let deadline = tokio::time::Instant::now() + timeout;
    let ran = match tokio::time::timeout_at(deadline, answer(shared, route, body, deadline)).await {
        Ok(r) => r,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "the review took longer than {timeout:?}"
        ))),
    };
    match ran {
        Ok(Ok(r)) => (StatusCode::OK, encode(r)),
        Ok(Err(message)) => bad_request(message),
        Err(status) if status.code() == tonic::Code::ResourceExhausted => {
            (StatusCode::TOO_MANY_REQUESTS, encode(Response::default()))
        }
        // Out of time: admitted unchanged (the uid is not known here; the API server
        // treats a missing uid as an error and applies the failure policy, `Ignore`).
        Err(status) => (
            StatusCode::OK,
            encode(Response {
                allowed: true,
                warnings: vec![format!("kartograf: {}", status.message())],
                ..Response::default()
            }),
        ),
    }
}

/// Longest the direct reads of one review (a pod's owners, a namespace's labels) may take
/// together (the pod webhook's timeout in `deploy/policies/` is 2 s; a pod is never held
/// longer than this for its labels).
pub const OWNER_LOOKUP_BUDGET: Duration = Duration::from_millis(500);

/// Reads the review on an evaluation thread and, for a pod whose owner is not cached, reads
/// the owner from the cluster (one GET per hop, at most [`crate::board::MAX_FETCHED_OWNERS`]
/// hops, within [`OWNER_LOOKUP_BUDGET`]) and places the pod again.
async fn answer(
    shared: &Shared,
    route: Route,
    body: crate::server::http::BodyBytes,
    deadline: tokio::time::Instant,
) -> Result<Result<Response, String>, tonic::Status> {
    let store = shared.store.clone();
    let policies = shared.policies.clone();
    let lookup = shared.owner_lookup.clone();
    let can_fetch = lookup.is_some();
    let budget = (tokio::time::Instant::now() + OWNER_LOOKUP_BUDGET).min(deadline);
    // Policies with a namespaceSelector on labels other than the name: the namespace's
    // labels are read first (the review's head is read on an evaluation thread).
    let mut body = body;
    let mut namespace_labels = None;
    // The head, when it was read for the namespace (not read twice).
    let mut read_head: Option<Head> = None;
    if let Some(lookup) = &lookup
        && route == Route::Workloads
        && policies.current().needs_namespace_labels()
    {
        let (head, back) = shared
            .evaluations
            .run(move || (envelope(&body.bytes), body))
            .await?;
        body = back;
        let head = match head {
            Ok(head) => head,
            Err(message) => return Ok(Err(message)),
        };
        let namespace = head.namespace.clone().unwrap_or_default();
        read_head = Some(head);
        if !namespace.is_empty() {
            match tokio::time::timeout_at(budget, lookup.namespace_labels(&namespace)).await {
                Ok(Ok(labels)) => namespace_labels = labels,
                Ok(Err(why)) => {
                    tracing::debug!(namespace, error = %why, "a namespace's labels could not be read");
                }
                Err(_) => {
                    tracing::debug!(namespace, "reading a namespace's labels ran out of time");
                }
            }
        }
    }
    let first = shared
        .evaluations
        .run(move || {
            let head = read_head.map_or_else(|| envelope(&body.bytes), Ok);
            let answered = head.map(|head| match route {
                Route::Workloads => {
                    let catalog = store.catalog();
                    pods::Step::Done(workloads::answer(
                        &head,
                        &body.bytes,
                        &catalog,
                        &policies,
                        namespace_labels.as_ref(),
                    ))
                }
                Route::Pods => {
                    pods::answer(&head, &body.bytes, store.as_ref(), &policies, can_fetch)
                }
            });
            drop(body);
            answered
        })
        .await?;
    let mut step = match first {
        Ok(step) => step,
        Err(message) => return Ok(Err(message)),
    };
    let Some(lookup) = lookup else {
        return Ok(Ok(match step {
            pods::Step::Done(r) => r,
            pods::Step::Fetch(pending, _) => pods::give_up(&pending, &shared.policies),
        }));
    };
    let mut fetched: Vec<Arc<Object>> = Vec::new();
    loop {
        let (pending, owner) = match step {
            pods::Step::Done(r) => return Ok(Ok(r)),
            pods::Step::Fetch(pending, owner) => (pending, owner),
        };
        let counters = &shared.policies.counters;
        let OwnerRef {
            api_version,
            kind,
            name,
            uid,
            ..
        } = &owner;
        let got = tokio::time::timeout_at(
            budget,
            lookup.get(api_version, kind, &pending.namespace, name),
        )
        .await;
        let object = match got {
            Ok(Ok(Some(json))) => Object::from_json(&json, crate::expr::Limits::default()).ok(),
            Ok(Ok(None)) => {
                counters
                    .owner_lookups_missing
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
            Ok(Err(why)) => {
                counters
                    .owner_lookups_failed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(owner = %format!("{kind}/{name}"), error = %why, "an owner could not be read");
                None
            }
            Err(_) => {
                counters
                    .owner_lookups_failed
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
        };
        // The object read must be the one the reference names (a lookup answers by name: an
        // object deleted and created again under it has another uid).
        let object = object.filter(|o| {
            o.meta.kind == *kind
                && o.meta.name == *name
                && o.meta.namespace == pending.namespace
                && *o.meta.uid == **uid
        });
        let Some(object) = object else {
            return Ok(Ok(pods::give_up(&pending, &shared.policies)));
        };
        counters.owner_lookups_found.fetch_add(1, Ordering::Relaxed);
        fetched.push(Arc::new(object));
        let more = fetched.len() < crate::board::MAX_FETCHED_OWNERS;
        let store = shared.store.clone();
        let policies = shared.policies.clone();
        let now = fetched.clone();
        step = shared
            .evaluations
            .run(move || pods::place(pending, store.as_ref(), &now, &policies, more))
            .await?;
    }
}

/// The review's object (`request.object`), or why there is none.
pub(crate) fn object(body: &[u8]) -> Result<Json, String> {
    let objects: Objects = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the object could not be read: {}",
            crate::excerpt::printable(&e.to_string(), crate::excerpt::PARSE_ERROR_BYTES)
        )
    })?;
    match objects.request.object {
        Some(o @ Json::Object(_)) => Ok(o),
        Some(_) => Err("request.object is not a JSON object".to_owned()),
        None => Err("request.object is missing".to_owned()),
    }
}

/// The review's group, version and kind.
pub(crate) fn gvk(head: &Head) -> Option<(&str, &str, &str)> {
    head.kind
        .as_ref()
        .map(|k| (k.group.as_str(), k.version.as_str(), k.kind.as_str()))
}
