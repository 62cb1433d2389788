//! `POST /mutate/workloads`: the policies covering a workload, merged, written through its
//! definition by the write path ([`crate::patch::plan`]). Synchronous, on an evaluation
//! thread.

use super::{allow, allow_patch, allow_warning, gvk, object};
use crate::definition::Catalog;
use crate::policy::{Live, Namespace, Operation};
use crate::webhook::admission::wire::{Head, Response};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Answers one review (always allowing).
/// `namespace_labels`: the labels of the review's namespace when they were read (policies
/// with a `namespaceSelector` on other labels cover nothing without them).
pub fn answer(
    head: &Head,
    body: &[u8],
    catalog: &Catalog,
    policies: &Live,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Response {
    let uid = head.uid.as_str();
    let Some(operation) = Operation::parse(&head.operation) else {
        return allow(uid);
    };
    let Some((group, version, kind)) = gvk(head) else {
        return allow(uid);
    };
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    // A kind without a definition: nothing to write through.
    let Some(lookup) = catalog.lookup(&api_version, kind) else {
        return allow(uid);
    };
    let namespace = head.namespace.as_deref().unwrap_or_default();
    let set = policies.current();
    let at = Namespace {
        name: namespace,
        labels: namespace_labels,
    };
    let Some((names, intents)) = set.intents_for(at, group, kind, operation) else {
        return allow(uid);
    };
    let failed = |why: String| {
        policies
            .counters
            .workloads_failed
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            kind,
            namespace,
            name = head.name.as_deref().unwrap_or_default(),
            policies = ?names,
            why,
            "a policy could not be applied; the workload is admitted unchanged"
        );
        allow_warning(
            uid,
            format!(
                "policy {} not applied to this {kind}: {why}",
                names.join(", ")
            ),
        )
    };
    if let Some(from) = &lookup.fallback_from {
        return failed(format!(
            "no definition for {from}; kartograf writes only through a definition of the object's own version"
        ));
    }
    let object = match object(body) {
        Ok(o) => o,
        Err(why) => return failed(why),
    };
    match crate::patch::plan(&lookup.definition, &object, &intents) {
        Ok(patch) if patch.is_empty() => {
            policies
                .counters
                .workloads_unchanged
                .fetch_add(1, Ordering::Relaxed);
            allow(uid)
        }
        Ok(patch) => {
            policies
                .counters
                .workloads_patched
                .fetch_add(1, Ordering::Relaxed);
            allow_patch(uid, &patch.json_patch())
        }
        Err(refused) => failed(refused.to_string()),
    }
}
