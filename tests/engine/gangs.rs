//! Gang minimums: per-group gangs from replica slots (no multiplicative over-count),
//! alpha per-instance scoping, and the `minMemberPath` extension.

use crate::common::*;
use kartograf::definition::catalog::{Catalog, load_path};
use kartograf::expr::Limits;
use kartograf::proto::v1 as pb;
use kartograf::source::offline::Snapshot;
use serde_json::{Value, json};
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/engine/data/definitions")
        .join(name)
}

fn catalog_with(file: &str) -> Catalog {
    let (embedded, errors) = kartograf::definition::catalog::load_embedded();
    assert!(errors.is_empty());
    let (extra, errors) = load_path(&data(file), Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    Catalog::from_layers(1, [embedded, extra])
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true}])
}

fn gpu_pod(
    name: &str,
    uid: &str,
    owners: Value,
    labels: Value,
    annotations: Value,
    node: &str,
) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "labels": labels,
                     "annotations": annotations, "ownerReferences": owners},
        "spec": {"nodeName": node, "containers": [{"name": "main",
                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// The Workload Map README's LeaderWorkerSet: replicas 2, size 2, 8 GPUs per pod. The
/// controller makes a leader StatefulSet owning leader pods; each leader pod owns a worker
/// StatefulSet owning that group's workers.
fn lws_snapshot() -> Snapshot {
    let template = json!({"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}});
    let mut docs = vec![
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
               "metadata": {"name": "vllm", "namespace": "ml", "uid": "lws"},
               "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "leaderTemplate": template, "workerTemplate": template}},
               "status": {"conditions": [{"type": "Available", "status": "True"}]}}),
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "vllm", "namespace": "ml", "uid": "sts-leader",
                            "ownerReferences": owner("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "vllm", "lws")}}),
    ];
    for g in 0..2 {
        let leader = format!("vllm-{g}");
        let common = json!({"leaderworkerset.sigs.k8s.io/name": "vllm", "leaderworkerset.sigs.k8s.io/group-index": g.to_string()});
        let mut leader_labels = common.clone();
        leader_labels["leaderworkerset.sigs.k8s.io/worker-index"] = json!("0");
        docs.push(gpu_pod(
            &leader,
            &format!("leader-{g}"),
            owner("apps/v1", "StatefulSet", "vllm", "sts-leader"),
            leader_labels,
            json!({"leaderworkerset.sigs.k8s.io/size": "2"}),
            "n1",
        ));
        docs.push(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": leader, "namespace": "ml", "uid": format!("sts-workers-{g}"),
                            "ownerReferences": owner("v1", "Pod", &leader, &format!("leader-{g}"))}}));
        let mut worker_labels = common.clone();
        worker_labels["leaderworkerset.sigs.k8s.io/worker-index"] = json!("1");
        docs.push(gpu_pod(
            &format!("vllm-{g}-1"),
            &format!("worker-{g}"),
            owner("apps/v1", "StatefulSet", &leader, &format!("sts-workers-{g}")),
            worker_labels,
            json!({"leaderworkerset.sigs.k8s.io/size": "2", "leaderworkerset.sigs.k8s.io/leader-name": leader}),
            "n2",
        ));
    }
    let mut snapshot = Snapshot::default();
    for d in &docs {
        snapshot.add(d, Limits::default(), "lws");
    }
    snapshot
}

#[test]
fn leaderworkerset_readme_one_gang_per_group_of_size() {
    let catalog = catalog_with("lws-upstream-style.yaml");
    let snapshot = lws_snapshot();
    let roots = snapshot.roots(&catalog);
    assert_eq!(
        roots.len(),
        1,
        "leader pods and StatefulSets are not workloads of their own: {roots:?}"
    );
    let root = snapshot.select(&catalog, None, None).unwrap();
    let w = snapshot.resolve(&catalog, &root, None).unwrap().workload;
    assert_eq!(
        pods(&w),
        pb::PodCounts {
            desired: 4,
            current: 4,
            ready: 4
        }
    );
    assert_eq!(gpus(&w), (32.0, 32.0));
    let groups = &w.gang.as_ref().unwrap().groups;
    let summary: Vec<(&str, u32, usize)> = groups
        .iter()
        .map(|g| (g.name.as_str(), g.min_member, g.pods.len()))
        .collect();
    assert_eq!(
        summary,
        [("group-vllm-0", 2, 2), ("group-vllm-1", 2, 2)],
        "upstream's multiplicative rule would say 8"
    );
    for replica in ["0", "1"] {
        let slot = instance(&w, "group", "", replica);
        assert_eq!(
            slot.pods.unwrap(),
            pb::PodCounts {
                desired: 2,
                current: 2,
                ready: 2
            }
        );
        assert_eq!(slot.children.len(), 2, "leader and worker under each group");
    }
    assert_eq!(phase(&w), pb::Phase::Running);
    assert!(w.diagnostics.is_empty(), "{:?}", w.diagnostics);
}

#[test]
fn leaderworkerset_group_without_pods_still_counts_from_the_spec() {
    let catalog = catalog_with("lws-upstream-style.yaml");
    let mut snapshot = Snapshot::default();
    let full = lws_snapshot();
    // Keep only the LWS object: nothing created yet.
    let lws = full.roots(&catalog)[0].clone();
    snapshot.add(
        &json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": {"name": lws.name, "namespace": "ml", "uid": "lws"},
                "spec": {"replicas": 3, "leaderWorkerTemplate": {"size": 4,
                         "workerTemplate": {"spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}}),
        Limits::default(),
        "lws",
    );
    let root = snapshot.select(&catalog, None, None).unwrap();
    let w = snapshot.resolve(&catalog, &root, None).unwrap().workload;
    assert_eq!(pods(&w).desired, 12);
    assert_eq!(gpus(&w), (12.0, 0.0));
    assert_eq!(
        component(&w, "group").instances.len(),
        3,
        "one slot per desired group"
    );
    assert_eq!(
        phase(&w),
        pb::Phase::Undefined,
        "no status written yet and this test definition has no rule for it"
    );
}

#[test]
fn alpha_gang_keyed_per_instance_is_scoped_to_that_instance() {
    // An upstream-style JobSet definition keys one gang per replicatedJob.
    let catalog = catalog_with("jobset-per-replicatedjob.yaml");
    let w = resolve_with(&catalog, "jobset-seed.yaml", None).workload;
    let groups: Vec<(&str, u32, usize)> = w
        .gang
        .as_ref()
        .unwrap()
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.min_member, g.pods.len()))
        .collect();
    assert_eq!(groups, [("rj-leader", 1, 1), ("rj-workers", 2, 2)]);
}

#[test]
fn min_member_path_overrides_with_keys_and_pod() {
    let text = std::fs::read_to_string(data("jobset-per-replicatedjob.yaml"))
        .unwrap()
        .replace(
            "      podGroups:\n        - name: rj\n",
            "      podGroups:\n        - name: rj\n          minMemberPath: '($pod.metadata.labels[\"jobset.sigs.k8s.io/replicatedjob-replicas\"] | tonumber) + 10 * ($keys | length)'\n",
        );
    assert!(text.contains("minMemberPath"));
    let path = temp_file("minmember.yaml", &text);
    let (embedded, _) = kartograf::definition::catalog::load_embedded();
    let (extra, errors) = load_path(&path, Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    let catalog = Catalog::from_layers(1, [embedded, extra]);
    let w = resolve_with(&catalog, "jobset-seed.yaml", None).workload;
    let groups: Vec<(&str, u32)> = w
        .gang
        .as_ref()
        .unwrap()
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.min_member))
        .collect();
    assert_eq!(groups, [("rj-leader", 11), ("rj-workers", 12)]);
}
