//! `POST /mutate/pods`: a pod being created gets [`super::labels`] naming its workload,
//! component and replica, found through its controller chain in the server's cache
//! ([`crate::server::Store::place_new_pod`]). Placing runs on an evaluation thread; an owner
//! the cache has not seen yet is read from the cluster between two placements
//! ([`super::handle`]), a bounded number of hops within a short budget.

use super::{allow, allow_patch, allow_warning, gvk, object};
use crate::board::NewPod;
use crate::board::pod_labels::for_pod;
use crate::model::{Object, OwnerRef, Pod};
use crate::policy::Live;
use crate::server::Store;
use crate::webhook::admission::answers::label_ops;
use crate::webhook::admission::wire::{Head, Response};
use serde_json::Value as Json;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A review whose pod's owner is not cached yet: what is needed to place it again once
/// the owner was read from the cluster.
pub struct Pending {
    uid: String,
    /// The pod came with `generateName` only (its name here is a placeholder).
    unnamed: bool,
    pod: Json,
    model: Pod,
    /// The namespace of the pod (and of every owner it may claim).
    pub namespace: String,
}

/// What one look at a review gave.
pub enum Step {
    /// The answer.
    Done(Response),
    /// The owner is not cached: read it (the object read must have the reference's uid),
    /// then [`place`] again.
    Fetch(Box<Pending>, OwnerRef),
}

/// Reads one review and places its pod among the cached objects (always allowing).
/// `lookup`: owners may be read from the cluster, so an owner not cached asks for that.
pub fn answer(head: &Head, body: &[u8], store: &dyn Store, policies: &Live, lookup: bool) -> Step {
    let uid = head.uid.as_str();
    let unlabelled = || {
        policies
            .counters
            .pods_unlabelled
            .fetch_add(1, Ordering::Relaxed)
    };
    if head.operation != "CREATE" {
        return Step::Done(allow(uid));
    }
    if gvk(head) != Some(("", "v1", "Pod")) {
        unlabelled();
        return Step::Done(allow_warning(
            uid,
            "this route labels core v1 Pods only".to_owned(),
        ));
    }
    let mut pod = match object(body) {
        Ok(o) => o,
        Err(why) => {
            unlabelled();
            return Step::Done(allow_warning(uid, why));
        }
    };
    // On a create the namespace is the request's; the object may not carry it yet.
    let namespace = head.namespace.clone().unwrap_or_default();
    // Created by a controller, a pod has only `generateName` yet: named for the model (not
    // in the patch) so that it can be read like any cached pod.
    let mut placeholder = false;
    if let Some(meta) = pod.get_mut("metadata").and_then(Json::as_object_mut) {
        meta.insert("namespace".into(), Json::String(namespace.clone()));
        let unnamed = meta
            .get("name")
            .and_then(Json::as_str)
            .is_none_or(str::is_empty);
        if unnamed {
            let generated = meta
                .get("generateName")
                .and_then(Json::as_str)
                .filter(|g| !g.is_empty())
                .map_or_else(
                    || "pod-at-admission".to_owned(),
                    |g| format!("{g}at-admission"),
                );
            meta.insert("name".into(), Json::String(generated));
            placeholder = true;
        }
    }
    let model = match Pod::from_json(&pod, crate::expr::Limits::default()) {
        Ok(p) => p,
        Err(why) => {
            unlabelled();
            return Step::Done(allow_warning(
                uid,
                format!("the pod could not be read: {why}"),
            ));
        }
    };
    let pending = Pending {
        uid: uid.to_owned(),
        unnamed: placeholder,
        pod,
        model,
        namespace,
    };
    place(Box::new(pending), store, &[], policies, lookup)
}

/// Places a read review's pod, with `fetched` owners read from the cluster (`lookup`: more
/// may still be read).
pub fn place(
    pending: Box<Pending>,
    store: &dyn Store,
    fetched: &[Arc<Object>],
    policies: &Live,
    lookup: bool,
) -> Step {
    let counters = &policies.counters;
    let mut place = store.place_new_pod(&pending.model, fetched);
    // A pod that is its own workload, created with only `generateName`: its name is not
    // known yet, so it cannot be named.
    if let NewPod::Placed { name, .. } = &place
        && pending.unnamed
        && *name == pending.model.meta.name
    {
        place = NewPod::None;
    }
    match &place {
        NewPod::Placed { .. } => {
            counters.pods_labelled.fetch_add(1, Ordering::Relaxed);
        }
        NewPod::OwnerNotCached(owner) => {
            if lookup {
                return Step::Fetch(pending, owner.clone());
            }
            counters
                .pods_owner_not_cached
                .fetch_add(1, Ordering::Relaxed);
        }
        NewPod::None => {
            counters.pods_unlabelled.fetch_add(1, Ordering::Relaxed);
        }
    };
    let labels = for_pod(&place);
    let ops = label_ops(&pending.pod, &labels);
    Step::Done(if ops.is_empty() {
        allow(&pending.uid)
    } else {
        allow_patch(&pending.uid, &Json::Array(ops))
    })
}

/// The answer for a pending review whose owner could not be read: admitted unlabelled (the
/// labelling pass labels it once its owner is cached).
pub fn give_up(pending: &Pending, policies: &Live) -> Response {
    policies
        .counters
        .pods_owner_not_cached
        .fetch_add(1, Ordering::Relaxed);
    allow(&pending.uid)
}
