//! Engine speed: resolving a cached 32-pod JobSet (objects already converted to jq values),
//! side by side with the baseline of `serde_json` parsing the same root object once.
//!
//! Run: `cargo bench --bench resolve`. Numbers and method: BENCHMARKS.md.

use criterion::{Criterion, criterion_group, criterion_main};
use kartograf::definition::Catalog;
use kartograf::expr::Limits;
use kartograf::model::{Object, Pod};
use kartograf::resolve::{self, Input};
use serde_json::{Value, json};
use std::hint::black_box;

// The same allocator as the `kartograf` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const WORKERS: usize = 31;

fn template() -> Value {
    json!({
        "metadata": {"labels": {"app": "llama"}, "annotations": {"team": "research"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["torchrun", "--nnodes=32", "train.py"],
                "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"},
                              "limits": {"nvidia.com/gpu": "4"}}
            }]
        }
    })
}

fn jobset() -> Value {
    let rj = |name: &str, replicas: usize| {
        json!({
            "name": name, "replicas": replicas,
            "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template()}}
        })
    };
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "llama", "namespace": "ml", "uid": "js", "generation": 1,
                     "labels": {"team": "research"}, "annotations": {"note": "bench"}},
        "spec": {"replicatedJobs": [rj("leader", 1), rj("workers", WORKERS)],
                 "successPolicy": {"operator": "All"}, "failurePolicy": {"maxRestarts": 3}},
        "status": {"replicatedJobsStatus": [
            {"name": "leader", "active": 1, "ready": 1, "failed": 0, "succeeded": 0, "suspended": 0},
            {"name": "workers", "active": WORKERS, "ready": WORKERS, "failed": 0, "succeeded": 0, "suspended": 0}]}
    })
}

fn pod(rj: &str, index: usize) -> Value {
    let mut p = template();
    let job = format!("llama-{rj}-{index}");
    p["apiVersion"] = json!("v1");
    p["kind"] = json!("Pod");
    p["metadata"] = json!({
        "name": format!("{job}-0-abcde"), "namespace": "ml", "uid": format!("pod-{rj}-{index}"),
        "labels": {"jobset.sigs.k8s.io/jobset-name": "llama", "jobset.sigs.k8s.io/replicatedjob-name": rj,
                   "jobset.sigs.k8s.io/job-index": index.to_string(), "batch.kubernetes.io/job-name": job},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": format!("job-{rj}-{index}"), "controller": true}]
    });
    p["spec"]["nodeName"] = json!(format!("gpu-node-{index}"));
    p["status"] = json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]});
    p
}

fn bench(c: &mut Criterion) {
    let catalog = Catalog::embedded().expect("catalog");
    let root_json = jobset();
    let root_bytes = serde_json::to_vec(&root_json).expect("encode");
    let root = Object::from_json(&root_json, Limits::default()).expect("root");
    let pods: Vec<Pod> = std::iter::once(pod("leader", 0))
        .chain((0..WORKERS).map(|i| pod("workers", i)))
        .map(|p| Pod::from_json(&p, Limits::default()).expect("pod"))
        .collect();
    let pod_refs: Vec<&Pod> = pods.iter().collect();
    let lookup = catalog
        .lookup("jobset.x-k8s.io/v1alpha2", "JobSet")
        .expect("definition");
    let input = Input {
        definition: &lookup.definition,
        generation: 1,
        root: &root,
        pods: &pod_refs,
        fallback_from: None,
        deadline: None,
        prepared: None,
    };
    let prepared = resolve::prepare(&lookup.definition, &root, None);
    let cached = Input {
        prepared: Some(&prepared),
        ..input
    };
    let check = resolve::resolve(&input).workload;
    assert_eq!(check.pods.expect("pods").desired, 32);
    assert!(check.diagnostics.is_empty(), "{:?}", check.diagnostics);

    let mut group = c.benchmark_group("jobset_32_pods");
    group.bench_function("baseline_serde_json_parse_root", |b| {
        b.iter(|| {
            black_box(serde_json::from_slice::<Value>(black_box(&root_bytes)).expect("parse"))
        })
    });
    // Root changed: status and instances are evaluated from the root object, then pods.
    group.bench_function("resolve_root_changed", |b| {
        b.iter(|| black_box(resolve::resolve(black_box(&input))))
    });
    // Pod changed: the root's evaluation is cached (as the index does per root version) and
    // every pod's answers are remembered (after the first iteration).
    group.bench_function("resolve_pods_changed", |b| {
        b.iter(|| black_box(resolve::resolve(black_box(&cached))))
    });
    // One pod is a new version (nothing remembered on it), as after one pod event.
    group.bench_function("resolve_one_pod_new", |b| {
        b.iter_batched(
            || pods[WORKERS / 2].clone(),
            |fresh| {
                let mut refs = pod_refs.clone();
                refs[WORKERS / 2] = &fresh;
                let input = Input {
                    pods: &refs,
                    ..cached
                };
                black_box(resolve::resolve(black_box(&input)))
            },
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
