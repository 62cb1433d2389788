//! Service benchmarks, side by side in one run on one server (loopback, release build):
//!
//! 1. `Resolve` RPC throughput and latency against the no-op health `Check` RPC, for a
//!    32-pod JobSet of the demo cluster and for a generated 1,000-pod Job.
//! 2. One change delivered to the last of N `Watch` subscribers (N = 1,000 and 5,000).
//! 3. An event burst: 10,000 pod updates across a handful of workloads, coalesced per
//!    workload for `Watch` subscribers.
//! 4. Definition reload (`Index::set_catalog`, 10 per second) under sustained `Resolve` load:
//!    failed RPCs are counted (the goal is zero).
//!
//! Run: `cargo bench --bench service` (add `-- --subscribers 1000,5000 --seconds 10` to change
//! the size). Without `--bench` (as `cargo test --benches` runs it) it does a tiny smoke run.

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;

use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::{self, Settings, Shared};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Options {
    seconds: f64,
    concurrency: usize,
    subscribers: Vec<usize>,
    changes: usize,
    burst: usize,
    big_pods: usize,
}

fn options() -> Options {
    let args = args::Args::new();
    let bench = args.bench();
    let value = |name: &str| args.value::<f64>(name);
    let list = |name: &str| {
        args.text(name)
            .map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect())
    };
    if bench {
        Options {
            seconds: value("--seconds").unwrap_or(5.0),
            concurrency: value("--concurrency").map_or(32, |v| v as usize),
            subscribers: list("--subscribers").unwrap_or_else(|| vec![1000, 5000]),
            changes: value("--changes").map_or(30, |v| v as usize),
            burst: value("--burst").map_or(10_000, |v| v as usize),
            big_pods: value("--big-pods").map_or(1000, |v| v as usize),
        }
    } else {
        Options {
            seconds: 0.2,
            concurrency: 4,
            subscribers: vec![20],
            changes: 3,
            burst: 200,
            big_pods: 50,
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn start() -> (
    Arc<Index>,
    std::net::SocketAddr,
    tokio::sync::watch::Sender<bool>,
) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let index = Arc::new(Index::new(Catalog::embedded().expect("catalog"), &[]));
    let (docs, _) = kartograf::source::manifests::read_once(&dir);
    index.batch().write(Write::Reset {
        source: "bench".into(),
        items: docs.into_iter().map(Ok).collect(),
    });
    let (tx, rx) = tokio::sync::watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx);
    let settings = Settings {
        listen: addr,
        concurrency_limit: 100_000,
        ..Settings::default()
    };
    tokio::spawn(server::serve(listener, shared, settings));
    (index, addr, tx)
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    for _ in 0..100 {
        if let Ok(c) = Channel::from_shared(format!("http://{addr}"))
            .expect("uri")
            .connect()
            .await
        {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("server did not come up");
}

/// Runs `call` from `concurrency` tasks for `seconds`; returns (calls/s, p50, p99).
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

async fn rpc_throughput(addr: std::net::SocketAddr, o: &Options) {
    let ch = channel(addr).await;
    let health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    let resolver = WorkloadResolverClient::new(ch.clone());
    let check = move || {
        let mut c = health.clone();
        async move {
            c.check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .is_ok()
        }
    };
    let request = pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            kind: "JobSet".into(),
            namespace: "ml".into(),
            name: "llama-train".into(),
            ..Default::default()
        })),
        view: 0,
        cluster: String::new(),
    };
    let big_request = pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            kind: "Job".into(),
            namespace: "big".into(),
            name: "big".into(),
            ..Default::default()
        })),
        view: 0,
        cluster: String::new(),
    };
    let resolve = {
        let resolver = resolver.clone();
        move || {
            let mut c = resolver.clone();
            let r = request.clone();
            async move { c.resolve(r).await.is_ok() }
        }
    };
    let resolve_big = move || {
        let mut c = resolver.clone();
        let r = big_request.clone();
        async move {
            c.resolve(r)
                .await
                .is_ok_and(|w| w.into_inner().workload.is_some())
        }
    };
    // Warm up both, then measure alternately so both see the same machine state.
    load(o.concurrency, o.seconds / 5.0, check.clone()).await;
    load(o.concurrency, o.seconds / 5.0, resolve.clone()).await;
    let (c_rps, c50, c99) = load(o.concurrency, o.seconds, check).await;
    let (r_rps, r50, r99) = load(o.concurrency, o.seconds, resolve).await;
    let (b_rps, b50, b99) = load(o.concurrency, o.seconds, resolve_big).await;
    println!(
        "rpc/health_check      {c_rps:>9.0} calls/s   p50 {c50:>9.2?}   p99 {c99:>9.2?}   ({} tasks, one channel)",
        o.concurrency
    );
    println!("rpc/resolve_jobset    {r_rps:>9.0} calls/s   p50 {r50:>9.2?}   p99 {r99:>9.2?}");
    println!(
        "rpc/ratio             {:.2} of the no-op RPC's throughput (goal >= 0.5, stretch 0.8)",
        r_rps / c_rps
    );
    println!(
        "rpc/resolve_job_{}pods {b_rps:>9.0} calls/s   p50 {b50:>9.2?}   p99 {b99:>9.2?}   ({:.2} of the no-op RPC)",
        o.big_pods,
        b_rps / c_rps
    );
}

/// A batch Job running `pods` pods (one GPU each); the Job and its pods, as the API serves them.
fn job_with_pods(namespace: &str, name: &str, pods: usize, ready: bool) -> Vec<serde_json::Value> {
    let uid = format!("{namespace}-{name}-uid");
    let mut docs = vec![serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": {"team": "bench"}},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {"containers": [
            {"name": "worker", "image": "trainer:1", "resources": {
                "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                "limits": {"nvidia.com/gpu": "1"}}}]}}},
        "status": {"active": pods, "ready": pods, "startTime": "2025-01-01T00:00:00Z"}
    })];
    for i in 0..pods {
        docs.push(pod(namespace, name, &uid, i, ready));
    }
    docs
}

fn pod(namespace: &str, job: &str, job_uid: &str, i: usize, ready: bool) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{job}-{i}"), "namespace": namespace,
            "uid": format!("{job_uid}-pod-{i}"), "labels": {"job-name": job},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                "uid": job_uid, "controller": true}]},
        "spec": {"nodeName": format!("gpu-node-{}", i / 8), "containers": [
            {"name": "worker", "image": "trainer:1", "resources": {
                "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                "limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    })
}

async fn watch_fanout(index: &Index, addr: std::net::SocketAddr, o: &Options, subscribers: usize) {
    // Several connections, each carrying up to 100 streams.
    let mut channels = Vec::new();
    for _ in 0..subscribers.div_ceil(100) {
        channels.push(channel(addr).await);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut ready = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..subscribers {
        let mut client = WorkloadResolverClient::new(channels[i / 100].clone());
        let tx = tx.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
        ready.push(ready_rx);
        tasks.push(tokio::spawn(async move {
            let req = pb::WatchRequest {
                namespace: "serving".into(),
                view: pb::View::Summary as i32,
                ..Default::default()
            };
            let mut stream = client.watch(req).await.expect("watch").into_inner();
            let mut ready_tx = Some(ready_tx);
            while let Ok(Some(e)) = stream.message().await {
                if e.r#type == pb::EventType::Synced as i32 {
                    if let Some(r) = ready_tx.take() {
                        let _ = r.send(());
                    }
                } else if e.r#type == pb::EventType::Modified as i32
                    && tx.send((i, Instant::now())).is_err()
                {
                    return;
                }
            }
        }));
    }
    for r in ready {
        let _ = r.await;
    }
    let text = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("examples/cluster/deployment.yaml"),
    )
    .expect("file");
    let docs = kartograf::manifest::parse_documents(&text).expect("docs");
    let mut deployment = docs
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("deployment");
    let mut last_arrivals = Vec::new();
    let mut all = Vec::new();
    for change in 0..o.changes {
        deployment["spec"]["replicas"] = serde_json::json!(10 + change + subscribers);
        let t0 = Instant::now();
        assert!(
            index
                .batch()
                .write(Write::apply("bench", deployment.clone()))
                .is_empty()
        );
        let mut got = 0;
        let mut last = Duration::ZERO;
        while got < subscribers {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some((_, at))) => {
                    got += 1;
                    let d = at.saturating_duration_since(t0);
                    all.push(d);
                    last = last.max(d);
                }
                _ => panic!("only {got} of {subscribers} subscribers got change {change}"),
            }
        }
        last_arrivals.push(last);
    }
    last_arrivals.sort();
    all.sort();
    println!(
        "watch/{subscribers}_subscribers   last subscriber: p50 {:>9.2?}  p99 {:>9.2?}  max {:>9.2?} over {} changes (goal p99 <= 50ms at 1,000)",
        percentile(&last_arrivals, 0.5),
        percentile(&last_arrivals, 0.99),
        last_arrivals.last().copied().unwrap_or_default(),
        o.changes
    );
    println!(
        "watch/{subscribers}_all_deliveries  p50 {:>9.2?}  p99 {:>9.2?}",
        percentile(&all, 0.5),
        percentile(&all, 0.99)
    );
    for t in tasks {
        t.abort();
    }
}

/// 10,000 pod updates (readiness flips) across 5 Jobs of 4 pods, applied as fast as the index
/// takes them, while 100 subscribers watch the namespace; each subscriber's events are
/// counted until it holds every Job's final graph.
async fn event_burst(index: Arc<Index>, addr: std::net::SocketAddr, o: &Options) {
    const JOBS: usize = 5;
    const PODS: usize = 4;
    const SUBSCRIBERS: usize = 100;
    let mut docs = Vec::new();
    for j in 0..JOBS {
        docs.extend(job_with_pods("burst", &format!("job-{j}"), PODS, true));
    }
    index.batch().write(Write::reset("burst", &docs));
    let ch = channel(addr).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String, u64)>();
    let mut ready = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..SUBSCRIBERS {
        let mut client = WorkloadResolverClient::new(ch.clone());
        let tx = tx.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
        ready.push(ready_rx);
        tasks.push(tokio::spawn(async move {
            let req = pb::WatchRequest {
                namespace: "burst".into(),
                ..Default::default()
            };
            let mut stream = client.watch(req).await.expect("watch").into_inner();
            let mut ready_tx = Some(ready_tx);
            while let Ok(Some(e)) = stream.message().await {
                if e.r#type == pb::EventType::Synced as i32 {
                    if let Some(r) = ready_tx.take() {
                        let _ = r.send(());
                    }
                } else if ready_tx.is_none() {
                    let name = e.workload.and_then(|w| w.r#ref).map(|r| r.name);
                    if tx.send((i, name.unwrap_or_default(), e.revision)).is_err() {
                        return;
                    }
                }
            }
        }));
    }
    for r in ready {
        let _ = r.await;
    }
    let updates = o.burst;
    let t0 = Instant::now();
    let ingest = {
        let index = index.clone();
        tokio::task::spawn_blocking(move || {
            for n in 0..updates {
                let (j, p) = (n % JOBS, (n / JOBS) % PODS);
                let job = format!("job-{j}");
                let uid = format!("burst-{job}-uid");
                // Every update flips the pod's readiness, so every one changes the graph.
                let doc = pod("burst", &job, &uid, p, (n / (JOBS * PODS)) % 2 == 1);
                assert!(index.batch().write(Write::apply("burst", doc)).is_empty());
            }
            t0.elapsed()
        })
    };
    let ingest_time = ingest.await.expect("ingest");
    let finals: std::collections::HashMap<String, u64> = (0..JOBS)
        .filter_map(|j| {
            let w = index
                .published(&pb::ObjectRef {
                    kind: "Job".into(),
                    namespace: "burst".into(),
                    name: format!("job-{j}"),
                    ..Default::default()
                })
                .map(|p| p.graph())?;
            Some((format!("job-{j}"), w.revision))
        })
        .collect();
    let mut events = vec![0usize; SUBSCRIBERS];
    let mut current = vec![0usize; SUBSCRIBERS];
    let mut done = 0;
    while done < SUBSCRIBERS {
        let Ok(Some((i, name, revision))) =
            tokio::time::timeout(Duration::from_secs(30), rx.recv()).await
        else {
            panic!("only {done} of {SUBSCRIBERS} subscribers caught up after the burst");
        };
        events[i] += 1;
        if finals.get(&name) == Some(&revision) {
            current[i] += 1;
            if current[i] == JOBS {
                done += 1;
            }
        }
    }
    let end_to_end = t0.elapsed();
    events.sort();
    println!(
        "watch/burst           {updates} pod updates over {JOBS} workloads applied in {ingest_time:>9.2?} ({:.0}/s); \
         all {SUBSCRIBERS} subscribers current after {end_to_end:>9.2?}; events per subscriber min {} median {} max {} (of {updates} updates)",
        updates as f64 / ingest_time.as_secs_f64(),
        events[0],
        events[SUBSCRIBERS / 2],
        events[SUBSCRIBERS - 1],
    );
    for t in tasks {
        t.abort();
    }
}

/// `Resolve` from `concurrency` tasks while the catalog is swapped 10 times per second;
/// every failed call is counted.
async fn reload_under_load(index: Arc<Index>, addr: std::net::SocketAddr, o: &Options) {
    let ch = channel(addr).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reloader = {
        let index = index.clone();
        let stop = stop.clone();
        tokio::task::spawn_blocking(move || {
            let mut reloads = 0usize;
            let mut slowest = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                index
                    .batch()
                    .set_catalog(Catalog::embedded().expect("catalog"));
                slowest = slowest.max(t.elapsed());
                reloads += 1;
                std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
            }
            (reloads, slowest)
        })
    };
    let deadline = Instant::now() + Duration::from_secs_f64(o.seconds);
    let mut tasks = Vec::new();
    for t in 0..o.concurrency {
        let mut client = WorkloadResolverClient::new(ch.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed, mut lat) = (0usize, 0usize, Vec::new());
            let name = if t % 2 == 0 { "llama-train" } else { "web" };
            let kind = if t % 2 == 0 { "JobSet" } else { "Deployment" };
            let ns = if t % 2 == 0 { "ml" } else { "serving" };
            while Instant::now() < deadline {
                let req = pb::ResolveRequest {
                    target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
                        kind: kind.into(),
                        namespace: ns.into(),
                        name: name.into(),
                        ..Default::default()
                    })),
                    view: 0,
                    cluster: String::new(),
                };
                let at = Instant::now();
                match client.resolve(req).await {
                    Ok(r) if r.get_ref().workload.is_some() => ok += 1,
                    _ => failed += 1,
                }
                lat.push(at.elapsed());
            }
            (ok, failed, lat)
        }));
    }
    let (mut ok, mut failed, mut lat) = (0, 0, Vec::new());
    for t in tasks {
        let (o, f, l) = t.await.expect("task");
        ok += o;
        failed += f;
        lat.extend(l);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reloads, slowest) = reloader.await.expect("reloader");
    lat.sort();
    println!(
        "reload/under_load     {reloads} catalog swaps (slowest {slowest:>9.2?}) during {ok} Resolve calls: {failed} failed (goal 0); p50 {:>9.2?} p99 {:>9.2?}",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );
}

fn main() {
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (index, addr, _shutdown) = start().await;
        index.batch().write(Write::reset(
            "big",
            &job_with_pods("big", "big", o.big_pods, true),
        ));
        rpc_throughput(addr, &o).await;
        for &n in &o.subscribers {
            watch_fanout(&index, addr, &o, n).await;
        }
        event_burst(index.clone(), addr, &o).await;
        reload_under_load(index, addr, &o).await;
    });
}
