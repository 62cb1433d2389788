//! The synthetic cluster generator (`benches/synth`) produces workloads that resolve cleanly:
//! fed through the index, through a manifest directory and through the fake API server with
//! the real Kubernetes source, every root resolves with a matched status, every pod is
//! attributed and the desired pod count covers the current one.

#[path = "../../benches/synth/mod.rs"]
mod synth;

use crate::fake_apiserver::FakeApiServer;
use kartograf::definition::Catalog;
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SPEC: synth::Spec = synth::Spec {
    workloads: 60,
    pods: 400,
    seed: 7,
};

fn cluster() -> synth::Cluster {
    let templates = synth::load_templates(&synth::template_dir()).unwrap();
    synth::generate(&templates, SPEC)
}

/// Every generated workload resolved cleanly, and together they hold every pod.
fn assert_clean(index: &Index, cluster: &synth::Cluster) {
    let (all, more, _) = index.board().list(&Default::default(), 0, 10_000);
    assert!(!more);
    assert_eq!(all.len(), cluster.roots.len(), "one workload per root");
    let mut pods = 0;
    for w in &all {
        let name = w.r#ref.as_ref().map(|r| r.name.clone()).unwrap_or_default();
        let phase = w.status.as_ref().map_or(0, |s| s.phase);
        assert_eq!(phase, pb::Phase::Running as i32, "{name}: {:?}", w.status);
        assert!(w.unattributed_pods.is_empty(), "{name}: {w:?}");
        let errors: Vec<_> = w
            .diagnostics
            .iter()
            .filter(|d| d.severity != "info")
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let counts = w.pods.unwrap_or_default();
        assert!(counts.current >= 2, "{name}: {counts:?}");
        assert_eq!(counts.desired, counts.current, "{name}: {counts:?}");
        assert_eq!(counts.ready, counts.current, "{name}: {counts:?}");
        pods += counts.current as usize;
    }
    assert_eq!(pods, cluster.pods.len());
}

#[test]
fn synth_is_deterministic_and_sized_as_asked() {
    let a = cluster();
    let b = cluster();
    assert_eq!(a.all(), b.all(), "same seed, same cluster");
    assert_eq!(a.roots.len(), SPEC.workloads);
    assert_eq!(a.pods.len(), SPEC.pods);
    assert!(!a.intermediates.is_empty());
    let templates = synth::load_templates(&synth::template_dir()).unwrap();
    // The round-robin spread gives every template's framework at least two workloads.
    for t in &templates {
        let prefix = format!("{}-", t.framework);
        let roots = a
            .roots
            .iter()
            .filter(|r| {
                r["metadata"]["name"]
                    .as_str()
                    .and_then(|n| n.strip_prefix(&prefix))
                    .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
            })
            .count();
        assert!(roots >= 2, "{}: {roots} workloads", t.framework);
    }
    let other = synth::generate(&templates, synth::Spec { seed: 8, ..SPEC });
    assert_ne!(a.all(), other.all(), "another seed, another cluster");
    // Every pod has a controller owner that exists in the cluster (a Spark executor's owner is
    // its driver pod).
    let uids: std::collections::HashSet<&str> = a
        .roots
        .iter()
        .chain(&a.intermediates)
        .chain(&a.pods)
        .filter_map(|d| d["metadata"]["uid"].as_str())
        .collect();
    for pod in &a.pods {
        let owner = &pod["metadata"]["ownerReferences"][0];
        assert_eq!(owner["controller"], true);
        assert_ne!(owner["uid"], pod["metadata"]["uid"], "{pod}");
        assert!(uids.contains(owner["uid"].as_str().unwrap()), "{pod}");
    }
}

#[test]
fn synth_cluster_resolves_cleanly_through_the_index() {
    let cluster = cluster();
    let index = Index::new(Catalog::embedded().unwrap(), &[]);
    let skipped = index.batch().write(Write::reset("synth", &cluster.all()));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_clean(&index, &cluster);
}

/// Every template resolves cleanly at the smallest scale (2 pods per workload) and at a large one.
#[test]
fn synth_cluster_resolves_cleanly_at_the_smallest_and_a_large_scale() {
    let templates = synth::load_templates(&synth::template_dir()).unwrap();
    let n = templates.len() * 2;
    for pods in [2 * n, 40 * n] {
        let cluster = synth::generate(
            &templates,
            synth::Spec {
                workloads: n,
                pods,
                seed: 3,
            },
        );
        assert_eq!(cluster.pods.len(), pods);
        let index = Index::new(Catalog::embedded().unwrap(), &[]);
        assert!(
            index
                .batch()
                .write(Write::reset("synth", &cluster.all()))
                .is_empty()
        );
        assert_clean(&index, &cluster);
    }
}

#[test]
fn synth_cluster_resolves_cleanly_from_a_manifest_directory() {
    let cluster = cluster();
    let dir = crate::temp_dir("synth");
    cluster.write_dir(&dir).unwrap();
    let (docs, problems) = kartograf::source::manifests::read_once(&dir);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(docs.len(), cluster.len());
    let index = Index::new(Catalog::embedded().unwrap(), &[]);
    assert!(
        index
            .batch()
            .write(Write::Reset {
                source: "manifests".into(),
                items: docs.into_iter().map(Ok).collect()
            })
            .is_empty()
    );
    assert_clean(&index, &cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synth_cluster_resolves_cleanly_through_the_fake_api_server() {
    let cluster = cluster();
    let fake = FakeApiServer::new();
    // Every kind the templates produce.
    fake.serve_documents(cluster.all());
    let client = fake.http_client().await;
    let index = Arc::new(Index::new(
        Catalog::embedded().unwrap(),
        &[kartograf::source::kube::SOURCE],
    ));
    let task = tokio::spawn(kartograf::source::kube::run(
        client,
        index.clone(),
        kartograf::source::kube::Settings {
            rediscover: Duration::from_millis(200),
            ..Default::default()
        },
        None,
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !index.synced() {
        assert!(
            Instant::now() < deadline,
            "synced in time: {} workloads, lists {:?}",
            index.board().list(&Default::default(), 0, 10_000).0.len(),
            fake.requests("/api/v1/pods", false)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_clean(&index, &cluster);
    task.abort();
}

/// A pod update that changes only `resourceVersion` publishes nothing; one that changes what
/// the graph shows (the pod's phase) publishes a change.
#[test]
fn resource_version_only_pod_updates_publish_nothing() {
    let cluster = cluster();
    let index = Index::new(Catalog::embedded().unwrap(), &[]);
    index.batch().write(Write::reset("synth", &cluster.all()));
    let before = index.board().revision();
    let mut pod = cluster.pods[0].clone();
    pod["metadata"]["resourceVersion"] = serde_json::Value::String("987654321".to_owned());
    assert!(
        index
            .batch()
            .write(Write::apply("synth", pod.clone()))
            .is_empty()
    );
    assert_eq!(
        index.board().revision(),
        before,
        "resourceVersion alone changes no graph"
    );
    pod["status"]["phase"] = serde_json::Value::String("Failed".to_owned());
    assert!(
        index
            .batch()
            .write(Write::apply("synth", pod.clone()))
            .is_empty()
    );
    assert!(
        index.board().revision() > before,
        "a phase change is published"
    );
}
