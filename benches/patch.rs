//! The write path's speed, side by side in one run:
//!
//! 1. In-process: `patch::plan` (scheduler name + one pod label) on every realistic object
//!    of the catalog snapshots (`tests/catalog/`, `examples/cluster/`), each planned many
//!    times; p50/p99 per workload over all of them, and the slowest kind (goal: p99 ≤
//!    100 µs per workload).
//! 2. The real `kartograf serve --manifests examples/cluster` as a process: `Patch` of the
//!    demo JobSet by reference (the server reads its cache, plans, guards with `test`
//!    operations) against the no-op health `Check`, alternately, from one client with
//!    concurrent calls (goal: `Patch` ≥ 0.5 of `Check`'s throughput): the same request again
//!    (as a reconcile loop asks; the server remembers answers per object version), and a new
//!    label value on every call (planned every time).
//!
//! Run: `cargo bench --bench patch` (`-- --seconds 5 --concurrency 32 --rounds 200`, and
//! `--kind K` to plan only one kind's objects in-process).
//! Without `--bench` (as `cargo test --benches` runs it) it does a tiny smoke run.

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;

use kartograf::definition::Catalog;
use kartograf::patch::{self, Intents};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn intents() -> Intents {
    Intents {
        scheduler_name: Some("kai-scheduler".into()),
        labels: BTreeMap::from([("kai.scheduler/queue".into(), "team-a".into())]),
        ..Intents::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Every object of a defined kind in the snapshots.
fn objects(
    catalog: &Catalog,
) -> Vec<(
    String,
    std::sync::Arc<kartograf::definition::Definition>,
    Value,
)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["tests/catalog", "examples/cluster"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("readable").flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let name = p.to_string_lossy();
                if !name.ends_with(".yaml") || name.ends_with(".expect.yaml") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).expect("readable");
                for doc in kartograf::manifest::parse_documents(&text).unwrap_or_default() {
                    let (Some(a), Some(k)) = (doc["apiVersion"].as_str(), doc["kind"].as_str())
                    else {
                        continue;
                    };
                    if k == "Pod" {
                        continue;
                    }
                    if let Some(l) = catalog.lookup(a, k).filter(|l| l.fallback_from.is_none()) {
                        out.push((k.to_owned(), l.definition, doc));
                    }
                }
            }
        }
    }
    out
}

fn in_process(rounds: usize, only: Option<&str>, top: usize) {
    let catalog = Catalog::embedded().expect("catalog");
    let intents = intents();
    let mut all = Vec::new();
    let mut by_kind: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    let mut planned = 0;
    for (kind, def, doc) in objects(&catalog) {
        if only.is_some_and(|k| k != kind) {
            continue;
        }
        // Warm: the definition's write plan is prepared once.
        if patch::plan(&def, &doc, &intents).is_err() {
            continue;
        }
        planned += 1;
        for _ in 0..rounds {
            let t = Instant::now();
            let p = patch::plan(&def, &doc, &intents).expect("plans");
            let d = t.elapsed();
            std::hint::black_box(p);
            all.push(d);
            by_kind.entry(kind.clone()).or_default().push(d);
        }
    }
    all.sort();
    let (p50, p99) = (percentile(&all, 0.5), percentile(&all, 0.99));
    println!(
        "plan/all          {planned} objects × {rounds}: p50 {p50:.2?}  p99 {p99:.2?}  (goal p99 ≤ 100 µs: {})",
        if p99 <= Duration::from_micros(100) {
            "met"
        } else {
            "NOT met"
        }
    );
    let mut worst: Vec<(Duration, String)> = by_kind
        .into_iter()
        .map(|(k, mut v)| {
            v.sort();
            (percentile(&v, 0.99), k)
        })
        .collect();
    worst.sort();
    for (d, k) in worst.iter().rev().take(top) {
        println!("plan/slowest      {k}: p99 {d:.2?}");
    }
}

#[path = "../tests/common/ports.rs"]
mod ports;
use ports::free_port;

async fn load<F, Fut>(concurrency: usize, seconds: f64, call: F) -> (f64, Duration, Duration)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                assert!(call().await, "call failed");
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    all.sort();
    (
        all.len() as f64 / seconds,
        percentile(&all, 0.5),
        percentile(&all, 0.99),
    )
}

async fn process(seconds: f64, concurrency: usize) {
    let (grpc, admin) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args(["serve", "--manifests"])
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster"))
        .args(["--listen", &format!("127.0.0.1:{grpc}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kartograf serve starts");
    let url = format!("http://127.0.0.1:{grpc}");
    let until = Instant::now() + Duration::from_secs(60);
    let channel = loop {
        if let Ok(endpoint) = tonic::transport::Channel::from_shared(url.clone())
            && let Ok(ch) = endpoint.connect().await
        {
            let mut h = tonic_health::pb::health_client::HealthClient::new(ch.clone());
            let serving = h
                .check(tonic_health::pb::HealthCheckRequest::default())
                .await
                .is_ok_and(|r| r.into_inner().status == 1);
            if serving {
                break ch;
            }
        }
        assert!(Instant::now() < until, "kartograf serve did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let resolver = WorkloadResolverClient::new(channel.clone());
    let check = move || {
        let mut c = health.clone();
        async move {
            c.check(tonic_health::pb::HealthCheckRequest::default())
                .await
                .is_ok()
        }
    };
    let request = pb::PatchRequest {
        target: Some(pb::patch_request::Target::Workload(pb::ObjectRef {
            kind: "JobSet".into(),
            namespace: "ml".into(),
            name: "llama-train".into(),
            ..Default::default()
        })),
        intents: Some(pb::PatchIntents {
            scheduler_name: "kai-scheduler".into(),
            labels: BTreeMap::from([("kai.scheduler/queue".into(), "team-a".into())]),
            ..Default::default()
        }),
        ..Default::default()
    };
    // The same request again (a reconcile loop): answered from the server's memo after the
    // first call.
    let resolver_fresh = resolver.clone();
    let request_fresh = request.clone();
    let patch = move || {
        let mut c = resolver.clone();
        let r = request.clone();
        async move { c.patch(r).await.is_ok_and(|r| r.into_inner().changes > 0) }
    };
    // A new label value on every call: never remembered, planned every time.
    let fresh = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let planned = move || {
        let mut c = resolver_fresh.clone();
        let mut r = request_fresh.clone();
        let n = fresh.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(i) = r.intents.as_mut() {
            i.labels
                .insert("kai.scheduler/queue".into(), format!("team-{n}"));
        }
        async move { c.patch(r).await.is_ok_and(|r| r.into_inner().changes > 0) }
    };
    load(concurrency, seconds / 5.0, check.clone()).await;
    load(concurrency, seconds / 5.0, patch.clone()).await;
    let (c_rps, c50, c99) = load(concurrency, seconds, check.clone()).await;
    let (p_rps, p50, p99) = load(concurrency, seconds, patch.clone()).await;
    let (f_rps, f50, f99) = load(concurrency, seconds, planned.clone()).await;
    let (c2_rps, _, _) = load(concurrency, seconds, check).await;
    let (p2_rps, _, _) = load(concurrency, seconds, patch).await;
    let (f2_rps, _, _) = load(concurrency, seconds, planned).await;
    let (c_rps, p_rps) = ((c_rps + c2_rps) / 2.0, (p_rps + p2_rps) / 2.0);
    let f_rps = (f_rps + f2_rps) / 2.0;
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "process/health_check {c_rps:>9.0} calls/s  p50 {c50:.2?}  p99 {c99:.2?}  ({concurrency} tasks, one channel)"
    );
    println!(
        "process/patch_jobset {p_rps:>9.0} calls/s  p50 {p50:.2?}  p99 {p99:.2?}  (the same request: remembered)"
    );
    println!(
        "process/patch_fresh  {f_rps:>9.0} calls/s  p50 {f50:.2?}  p99 {f99:.2?}  (a new label value per call: planned every time)"
    );
    let ratio = p_rps / c_rps;
    println!(
        "process/ratio        {ratio:.2} of the health Check's throughput (goal ≥ 0.5: {}); planned every time: {:.2}",
        if ratio >= 0.5 { "met" } else { "NOT met" },
        f_rps / c_rps
    );
}

fn main() {
    let args = args::Args::new();
    let bench = args.bench();
    let rounds = args
        .value::<usize>("--rounds")
        .unwrap_or(if bench { 200 } else { 2 });
    let seconds = args
        .value::<f64>("--seconds")
        .unwrap_or(if bench { 5.0 } else { 0.2 });
    let concurrency = args
        .value::<usize>("--concurrency")
        .unwrap_or(if bench { 32 } else { 2 });
    // `--kind K`: only that kind's objects in the in-process part (for profiles).
    let only = args.value::<String>("--kind");
    // `--top N`: how many of the slowest kinds to list.
    let top = args.value::<usize>("--top").unwrap_or(3);
    in_process(rounds, only.as_deref(), top);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(process(seconds, concurrency));
}
