//! The labelling pass (`serve --label-pods`): cached pods of a workload whose
//! `kartograf.io/workload-*` labels are missing or stale get the labels `POST /mutate/pods`
//! gives at admission ([`crate::board::pod_labels`]), by a JSON merge patch of their labels.
//! It catches what admission could not label: a pod created before its owner reached the
//! cache (and before the owner could be read), and pods created before the webhook was
//! registered.
//!
//! A pass runs shortly after the board changes (only the workloads published since the last
//! pass are looked at) and every `resync` (every workload, so a failed patch is retried). A
//! pass looks at [`MAX_PER_PASS`] pods at most and patches [`WORKERS`] at a time. The patch
//! carries the pod's uid, so a pod deleted and created again under the same name is not
//! labelled with the old one's workload. Every replica runs the pass: the patch is
//! idempotent, so a second replica's write changes nothing.

use crate::board::pod_labels::for_pod;
use crate::index::{Index, Unlabelled};
use crate::policy::Live;
use ::kube::api::{Api, Patch, PatchParams};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as KubePod;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

/// Most pods one pass looks at (more wait for the next pass).
pub const MAX_PER_PASS: usize = 2_000;

/// Label patches in flight at once.
pub const WORKERS: usize = 8;

/// How long the pass waits after a board change for more changes to fold in.
const SETTLE: Duration = Duration::from_millis(200);

/// Longest one label patch may take.
const PATCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of the pass.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Namespaces whose pods are never labelled.
    pub skip_namespaces: Vec<String>,
    /// Full pass period.
    pub resync: Duration,
}

/// Runs the pass until `shutdown` flips; counts into `policies`' counters.
pub async fn run(
    client: ::kube::Client,
    index: Arc<Index>,
    policies: Arc<Live>,
    settings: Settings,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut changes = index.board().subscribe();
    let mut resync = tokio::time::interval(settings.resync.max(Duration::from_secs(1)));
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let skip = Arc::new(settings.skip_namespaces);
    // 0: every workload (the first pass, and each resync).
    let mut since = 0u64;
    loop {
        let full = tokio::select! {
            _ = resync.tick() => true,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                tokio::time::sleep(SETTLE).await;
                false
            }
            _ = shutdown.changed() => return,
        };
        if *shutdown.borrow() {
            return;
        }
        let from = if full { 0 } else { since };
        let (index2, skip2) = (index.clone(), skip.clone());
        let found = tokio::task::spawn_blocking(move || {
            let (pods, revision) =
                index2.unlabelled_pods(from, MAX_PER_PASS, |ns| !skip2.iter().any(|s| s == ns));
            // Placed as admission would place them, off the runtime's workers.
            let placed: Vec<(Unlabelled, serde_json::Value)> = pods
                .into_iter()
                .filter_map(|p| {
                    let labels = for_pod(&index2.place_cached_pod(&p.uid));
                    (!labels.is_empty()).then(|| {
                        let patch = json!({"metadata": {"uid": p.uid, "labels": labels}});
                        (p, patch)
                    })
                })
                .collect();
            (placed, revision)
        })
        .await;
        let Ok((placed, revision)) = found else {
            continue;
        };
        // A pass cut at MAX_PER_PASS leaves the rest for the next full pass.
        since = revision;
        let counters = &policies.counters;
        let results = futures::stream::iter(placed)
            .map(|(pod, patch)| {
                let api: Api<KubePod> = Api::namespaced(client.clone(), &pod.namespace);
                async move {
                    let sent = tokio::time::timeout(
                        PATCH_TIMEOUT,
                        api.patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch)),
                    )
                    .await;
                    (pod, sent)
                }
            })
            .buffer_unordered(WORKERS);
        futures::pin_mut!(results);
        while let Some((pod, sent)) = results.next().await {
            match sent {
                Ok(Ok(_)) => {
                    counters.pass_labelled.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(namespace = %pod.namespace, pod = %pod.name, "pod labelled with its workload");
                }
                Ok(Err(e)) => {
                    counters.pass_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(namespace = %pod.namespace, pod = %pod.name, error = %e, "a pod's workload labels could not be written");
                }
                Err(_) => {
                    counters.pass_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(namespace = %pod.namespace, pod = %pod.name, "a pod's workload labels: the patch took over {PATCH_TIMEOUT:?}");
                }
            }
        }
    }
}
