//! Numbers an object controls never make resolution do unbounded native work nor make a sum
//! wrap (issue 27): replica slots are limited and the cut is reported; quantities that are
//! negative or out of range are not counted and are reported; sums saturate, never wrap.

use crate::common::*;
use crate::workloads;
use kartograf::expr::Limits;
use kartograf::proto::v1 as pb;
use kartograf::resolve::{MAX_SLOTS, Resolution};
use kartograf::source::offline::Snapshot;
use std::time::{Duration, Instant};

/// Resolves the only root workload of `text` with the embedded catalog.
fn resolve_text(text: &str) -> Resolution {
    let path = temp_file("workload.yaml", text);
    let snapshot = Snapshot::load(&[path], Limits::default()).expect("loads");
    let root = snapshot.select(catalog(), None, None).expect("a root");
    snapshot
        .resolve(
            catalog(),
            &root,
            Some(Instant::now() + Duration::from_secs(30)),
        )
        .expect("resolves")
}

/// The demo LeaderWorkerSet with `replicas` instead of 2.
fn lws(replicas: &str) -> String {
    workloads::lws("vllm-70b", replicas)
}

fn count_instances(c: &pb::Component) -> usize {
    c.instances
        .iter()
        .map(|i| 1 + i.children.iter().map(count_instances).sum::<usize>())
        .sum()
}

fn gang_groups(g: &pb::GangGroup) -> usize {
    1 + g.subgroups.iter().map(gang_groups).sum::<usize>()
}

fn diagnostic<'a>(w: &'a pb::Workload, code: &str) -> Option<&'a pb::Diagnostic> {
    w.diagnostics.iter().find(|d| d.code == code)
}

#[test]
fn a_replica_count_of_int32_max_resolves_partially_within_the_slot_limit() {
    let w = resolve_text(&lws("2147483647")).workload;
    let d = diagnostic(&w, "limit_exceeded").expect("the cut is reported");
    assert_eq!(d.severity, "error");
    assert!(d.message.contains("slots"), "{}", d.message);
    let instances: usize = w.components.iter().map(count_instances).sum();
    assert!(
        (MAX_SLOTS / 2..=MAX_SLOTS).contains(&instances),
        "{instances} instances"
    );
    let groups: usize = w
        .gang
        .as_ref()
        .map_or(0, |g| g.groups.iter().map(gang_groups).sum());
    assert!(groups <= MAX_SLOTS + 1, "{groups} gang groups");
    // What the spec asks for is still counted whole: 2^31-1 groups of two pods, 8 GPUs each.
    let pods = w.pods.unwrap_or_default();
    assert_eq!(pods.desired, 2 * 2_147_483_647);
    let desired = w.totals.clone().and_then(|t| t.desired).unwrap_or_default();
    assert_eq!(desired.gpus, 16.0 * 2_147_483_647.0);
}

#[test]
fn a_replica_count_under_the_limit_is_not_cut() {
    let w = resolve_text(&lws("1000")).workload;
    assert!(
        diagnostic(&w, "limit_exceeded").is_none(),
        "{:?}",
        w.diagnostics
    );
    assert_eq!(w.pods.unwrap_or_default().desired, 2000);
}

#[test]
fn a_cut_workload_resolves_offline_within_bounded_memory() {
    let path = temp_file("lws.yaml", &lws("1000000"));
    let path = path.to_str().expect("utf-8 path");
    let out = kartograf(&["resolve", "-f", path, "-o", "json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let codes: Vec<&str> = v["workload"]["diagnostics"]
        .as_array()
        .map(|d| d.iter().filter_map(|d| d["code"].as_str()).collect())
        .unwrap_or_default();
    assert!(codes.contains(&"limit_exceeded"), "{codes:?}");
}

/// A Job whose one container requests `gpus` GPUs and `cpu` CPU, with `pods` running pods.
fn job(gpus: &str, cpu: &str, parallelism: u64) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: j, namespace: ml, uid: job-1}}\n\
         spec:\n  parallelism: {parallelism}\n  completions: {parallelism}\n  template:\n    \
         spec:\n      containers:\n      - name: c\n        image: x\n        resources:\n          \
         requests: {{nvidia.com/gpu: '{gpus}', cpu: '{cpu}'}}\n"
    )
}

#[test]
fn negative_quantities_are_not_counted_and_are_reported() {
    let w = resolve_text(&job("-1000", "-5", 2)).workload;
    let d = diagnostic(&w, "negative_quantity").expect("reported");
    assert!(d.message.contains("nvidia.com/gpu=-1000"), "{}", d.message);
    assert!(d.message.contains("cpu=-5"), "{}", d.message);
    let desired = w.totals.clone().and_then(|t| t.desired).unwrap_or_default();
    assert_eq!(desired.gpus, 0.0);
    assert_eq!(desired.cpu_millis, 0);
    assert!(desired.raw.is_empty(), "{:?}", desired.raw);
}

#[test]
fn quantities_beyond_int64_units_are_not_counted_and_are_reported() {
    for huge in ["1e40", "99999999999999999999", "9Ei0", "1e400"] {
        let w = resolve_text(&job(huge, "1", 1)).workload;
        let desired = w.totals.clone().and_then(|t| t.desired).unwrap_or_default();
        if huge == "9Ei0" {
            // Not a quantity at all.
            assert!(diagnostic(&w, "bad_quantity").is_some(), "{huge}");
        } else {
            let d = diagnostic(&w, "quantity_out_of_range").expect("reported");
            assert!(
                d.message.contains("nvidia.com/gpu="),
                "{huge}: {}",
                d.message
            );
        }
        assert_eq!(desired.gpus, 0.0, "{huge}");
        assert_eq!(desired.cpu_millis, 1000, "{huge}");
    }
}

#[test]
fn sums_beyond_a_field_saturate_with_a_diagnostic() {
    // 9e15 CPUs is a valid quantity (under 2^63-1 units), but 9e18 milli-CPUs times 4 pods
    // exceeds int64: the field holds its maximum and the graph says so.
    let w = resolve_text(&job("1", "9e15", 4)).workload;
    let desired = w.totals.clone().and_then(|t| t.desired).unwrap_or_default();
    assert_eq!(desired.cpu_millis, i64::MAX);
    assert_eq!(desired.gpus, 4.0);
    assert!(
        diagnostic(&w, "quantity_out_of_range").is_some(),
        "{:?}",
        w.diagnostics
    );
    // Within range, nothing is said.
    let w = resolve_text(&job("1", "9e12", 4)).workload;
    let desired = w.totals.clone().and_then(|t| t.desired).unwrap_or_default();
    assert_eq!(desired.cpu_millis, 36_000_000_000_000_000);
    assert!(diagnostic(&w, "quantity_out_of_range").is_none());
}

/// A LeaderWorkerSet of `groups` groups of one pod each, with every leader pod present (each
/// group's key is its own): pods are grouped by key in one pass, the slot limit cuts the
/// tree, and the pods past it are unattributed with a bounded number of diagnostics.
#[test]
fn twenty_thousand_distinct_replica_keys_are_cut_and_reported_in_bounded_diagnostics() {
    let groups = 20_000;
    let lws_text = lws(&groups.to_string()).replace("size: 2", "size: 1");
    let root: serde_json::Value = serde_saphyr::from_str(&lws_text).expect("yaml");
    let uid = root["metadata"]["uid"].as_str().expect("uid").to_owned();
    let mut items = vec![root];
    for g in 0..groups {
        items.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("vllm-70b-{g}"), "namespace": "inference", "uid": format!("pod-{g}"),
                "labels": {
                    "leaderworkerset.sigs.k8s.io/group-index": g.to_string(),
                    "leaderworkerset.sigs.k8s.io/worker-index": "0",
                },
                "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet", "name": "vllm-70b", "uid": uid, "controller": true}],
            },
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }));
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    let w = resolve_text(&list.to_string()).workload;
    assert!(
        diagnostic(&w, "limit_exceeded").is_some(),
        "{:?}",
        w.diagnostics
    );
    let instances: usize = w.components.iter().map(count_instances).sum();
    assert!(instances <= MAX_SLOTS, "{instances}");
    let pods = w.pods.unwrap_or_default();
    assert_eq!((pods.current, pods.desired), (groups, groups));
    // Every pod holds its GPU, placed or not.
    let current = w.totals.clone().and_then(|t| t.current).unwrap_or_default();
    assert_eq!(current.gpus, f64::from(groups));
    let unattributed = w
        .diagnostics
        .iter()
        .filter(|d| d.code == "unattributed_pod")
        .count();
    assert!(
        (1..=33).contains(&unattributed),
        "{unattributed} unattributed_pod diagnostics"
    );
    assert!(w.unattributed_pods.len() as u32 + 4096 >= groups);
}
