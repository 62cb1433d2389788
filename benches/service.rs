//! Service benchmarks, side by side in one run on one server (loopback, release build):
//!
//! 1. `Resolve` RPC throughput and latency against the no-op health `Check` RPC.
//! 2. One change delivered to the last of N `Watch` subscribers (N = 1,000 by default).
//!
//! Run: `cargo bench --bench service` (add `-- --subscribers 5000 --seconds 10` to change the
//! size). Without `--bench` (as `cargo test --benches` runs it) it does a tiny smoke run.

use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::Index;
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
    subscribers: usize,
    changes: usize,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<f64>().ok())
    };
    if bench {
        Options {
            seconds: value("--seconds").unwrap_or(5.0),
            concurrency: value("--concurrency").map_or(32, |v| v as usize),
            subscribers: value("--subscribers").map_or(1000, |v| v as usize),
            changes: value("--changes").map_or(30, |v| v as usize),
        }
    } else {
        Options {
            seconds: 0.2,
            concurrency: 4,
            subscribers: 20,
            changes: 3,
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
    let (docs, _, _) = kartograf::source::manifests::read_all(&dir);
    index.reset("bench", &docs);
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
    };
    let resolve = move || {
        let mut c = resolver.clone();
        let r = request.clone();
        async move { c.resolve(r).await.is_ok() }
    };
    // Warm up both, then measure alternately so both see the same machine state.
    load(o.concurrency, o.seconds / 5.0, check.clone()).await;
    load(o.concurrency, o.seconds / 5.0, resolve.clone()).await;
    let (c_rps, c50, c99) = load(o.concurrency, o.seconds, check).await;
    let (r_rps, r50, r99) = load(o.concurrency, o.seconds, resolve).await;
    println!(
        "rpc/health_check      {c_rps:>9.0} calls/s   p50 {c50:>9.2?}   p99 {c99:>9.2?}   ({} tasks, one channel)",
        o.concurrency
    );
    println!("rpc/resolve_jobset    {r_rps:>9.0} calls/s   p50 {r50:>9.2?}   p99 {r99:>9.2?}");
    println!(
        "rpc/ratio             {:.2} of the no-op RPC's throughput (goal >= 0.5)",
        r_rps / c_rps
    );
}

async fn watch_fanout(index: Arc<Index>, addr: std::net::SocketAddr, o: &Options) {
    // Several connections, each carrying up to 100 streams.
    let mut channels = Vec::new();
    for _ in 0..o.subscribers.div_ceil(100) {
        channels.push(channel(addr).await);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let mut ready = Vec::new();
    for i in 0..o.subscribers {
        let mut client = WorkloadResolverClient::new(channels[i / 100].clone());
        let tx = tx.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
        ready.push(ready_rx);
        tokio::spawn(async move {
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
        });
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
        deployment["spec"]["replicas"] = serde_json::json!(10 + change);
        let t0 = Instant::now();
        index.apply(&deployment, "bench").expect("apply");
        let mut got = 0;
        let mut last = Duration::ZERO;
        while got < o.subscribers {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some((_, at))) => {
                    got += 1;
                    let d = at.saturating_duration_since(t0);
                    all.push(d);
                    last = last.max(d);
                }
                _ => panic!(
                    "only {got} of {} subscribers got change {change}",
                    o.subscribers
                ),
            }
        }
        last_arrivals.push(last);
    }
    last_arrivals.sort();
    all.sort();
    println!(
        "watch/{}_subscribers   last subscriber: p50 {:>9.2?}  p99 {:>9.2?}  max {:>9.2?} over {} changes (goal p99 <= 50ms at 1,000)",
        o.subscribers,
        percentile(&last_arrivals, 0.5),
        percentile(&last_arrivals, 0.99),
        last_arrivals.last().copied().unwrap_or_default(),
        o.changes
    );
    println!(
        "watch/all_deliveries  p50 {:>9.2?}  p99 {:>9.2?}",
        percentile(&all, 0.5),
        percentile(&all, 0.99)
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
        rpc_throughput(addr, &o).await;
        watch_fanout(index, addr, &o).await;
    });
}
