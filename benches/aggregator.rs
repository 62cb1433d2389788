//! Aggregator benchmarks, release build, everything in one process over loopback: three
//! upstream kartografs (each an index over a synthetic cluster from `benches/synth`, served
//! by the real server) behind one aggregator (the real `aggregate::Aggregator`, served by the
//! same server code).
//!
//! 1. Sync: from `set_upstreams` until every upstream's snapshot is reconciled (3 × N pods).
//! 2. Memory: the aggregator's heap (a counting allocator around mimalloc) per workload it
//!    holds, against the bytes of the graphs' encodings it relays (the payload).
//! 3. Fan-out through the extra hop: one change in an upstream (a root's label) until the last
//!    of S subscribers of the aggregator has it, side by side with the same S subscribers
//!    on the upstream directly (the baseline, no hop). Goal: p99 ≤ 100 ms through the
//!    aggregator at 1,000 subscribers (DESIGN §9).
//!
//! Run: `cargo bench --bench aggregator` (options: `-- --pods 10000 --subscribers 1000
//! --changes 30`). Without `--bench` (as `cargo test --benches` runs it) it does a tiny smoke
//! run.

// A counting allocator around mimalloc measures heap per pod: the one use of unsafe code.
#![allow(unsafe_code)]

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;

#[path = "synth/mod.rs"]
mod synth;

use kartograf::aggregate::{self, Aggregator, UpstreamConfig};
use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::{Index, Write};
use kartograf::metrics::Observed;
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::{self, Settings, Shared};
use serde_json::Value as Json;
use std::alloc::{GlobalAlloc, Layout};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// mimalloc (as the service binary uses) with a live-bytes counter.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to mimalloc.
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to mimalloc.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged to mimalloc.
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

struct Options {
    pods: usize,
    subscribers: usize,
    changes: usize,
}

fn options() -> Options {
    let args = args::Args::new();
    let bench = args.bench();
    let value = |name: &str| args.value::<usize>(name);
    if bench {
        Options {
            pods: value("--pods").unwrap_or(10_000),
            subscribers: value("--subscribers").unwrap_or(1000),
            changes: value("--changes").unwrap_or(30),
        }
    } else {
        Options {
            pods: 200,
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

fn mb(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// One upstream: an index over a synthetic cluster, served on loopback.
struct Upstream {
    index: Arc<Index>,
    addr: SocketAddr,
    docs: Vec<Json>,
    _shutdown: tokio::sync::watch::Sender<bool>,
}

async fn serve(shared: Shared) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let settings = Settings {
        listen: addr,
        concurrency_limit: 100_000,
        ..Settings::default()
    };
    tokio::spawn(server::serve(listener, shared, settings));
    addr
}

async fn upstream(name: &str, pods: usize, seed: u64) -> Upstream {
    let templates = synth::load_templates(&synth::template_dir()).expect("templates");
    let cluster = synth::generate(
        &templates,
        synth::Spec {
            workloads: (pods / 10).max(1),
            pods,
            seed,
        },
    );
    let docs = cluster.all();
    let index =
        Arc::new(Index::new(Catalog::embedded().expect("catalog"), &[]).with_cluster(name, true));
    let skipped = index.batch().write(Write::reset("synth", &docs));
    assert!(skipped.is_empty(), "{skipped:?}");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let addr = serve(Shared::new(
        index.clone(),
        Arc::new(LoadReport::default()),
        rx,
    ))
    .await;
    Upstream {
        index,
        addr,
        docs,
        _shutdown: tx,
    }
}

async fn channel(addr: SocketAddr) -> Channel {
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

/// `subscribers` Watch streams on `addr` (100 per connection) on `namespace`; returns a
/// receiver of (subscriber, arrival) for every MODIFIED of workload `name`, once all are
/// past SYNCED.
async fn subscribe(
    addr: SocketAddr,
    subscribers: usize,
    namespace: &str,
    name: &str,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<(usize, Instant)>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let mut channels = Vec::new();
    for _ in 0..subscribers.div_ceil(100) {
        channels.push(channel(addr).await);
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut ready = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..subscribers {
        let mut client = WorkloadResolverClient::new(channels[i / 100].clone());
        let tx = tx.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
        ready.push(ready_rx);
        let request = pb::WatchRequest {
            namespace: namespace.to_owned(),
            view: pb::View::Summary as i32,
            ..Default::default()
        };
        let name = name.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut stream = client.watch(request).await.expect("watch").into_inner();
            let mut ready_tx = Some(ready_tx);
            while let Ok(Some(e)) = stream.message().await {
                if e.r#type == pb::EventType::Synced as i32 {
                    if let Some(r) = ready_tx.take() {
                        let _ = r.send(());
                    }
                } else if e.r#type == pb::EventType::Modified as i32
                    && e.workload
                        .as_ref()
                        .and_then(|w| w.r#ref.as_ref())
                        .is_some_and(|r| r.name == name)
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
    (rx, tasks)
}

/// Changes `root`'s labels `changes` times in `index`; returns when each reached the last of
/// `subscribers`, from the change.
async fn fanout(
    index: &Index,
    root: &Json,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, Instant)>,
    subscribers: usize,
    changes: usize,
    tag: &str,
) -> Vec<Duration> {
    let mut last = Vec::new();
    for change in 0..changes {
        let mut doc = root.clone();
        doc["metadata"]["labels"]["bench-change"] = Json::from(format!("{tag}-{change}"));
        let t0 = Instant::now();
        assert!(index.batch().write(Write::apply("synth", doc)).is_empty());
        let mut got = 0;
        let mut slowest = Duration::ZERO;
        while got < subscribers {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Some((_, at))) => {
                    got += 1;
                    slowest = slowest.max(at.saturating_duration_since(t0));
                }
                _ => panic!("{tag}: only {got} of {subscribers} subscribers got change {change}"),
            }
        }
        last.push(slowest);
    }
    last.sort();
    last
}

fn main() {
    let o = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let t = Instant::now();
        let mut upstreams = Vec::new();
        for (i, name) in ["east", "west", "north"].iter().enumerate() {
            upstreams.push(upstream(name, o.pods, i as u64 + 1).await);
        }
        let workloads: usize = upstreams.iter().map(|u| u.index.board().len()).sum();
        println!(
            "upstreams: 3 x {} pods, {workloads} workloads, loaded in {:.2?}",
            o.pods,
            t.elapsed()
        );

        // 1 + 2: sync and memory.
        // The aggregator's own catalog (for ListDefinitions and inline requests) is the same
        // whatever it aggregates: built before the count starts.
        let catalog = Catalog::embedded().expect("catalog");
        let before = live();
        let aggregator = Aggregator::new(catalog, aggregate::Settings::default());
        let t = Instant::now();
        aggregator.set_upstreams(
            ["east", "west", "north"]
                .iter()
                .zip(&upstreams)
                .map(|(name, u)| UpstreamConfig::new(name, &format!("http://{}", u.addr)))
                .collect(),
        );
        while !aggregator.synced() || aggregator.board().len() < workloads {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let synced = t.elapsed();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let heap = live().saturating_sub(before);
        let (entries, _) = aggregator.board().entries();
        let payload: usize = entries.iter().map(|w| w.graph.encoded_len()).sum();
        drop(entries);
        println!(
            "aggregator/sync           {workloads} workloads ({} pods) from 3 upstreams in {synced:.2?}",
            3 * o.pods
        );
        println!(
            "aggregator/memory         heap {:.1} MiB = {:.0} B per workload ({:.0} B per pod); graph encodings {:.0} B per workload ({:.2}x)",
            mb(heap),
            heap as f64 / workloads as f64,
            heap as f64 / (3 * o.pods) as f64,
            payload as f64 / workloads as f64,
            heap as f64 / payload.max(1) as f64
        );

        // 3: fan-out through the hop, against the upstream directly.
        let (aggregator_addr, _shutdown) = {
            let (tx, rx) = tokio::sync::watch::channel(false);
            let addr = serve(Shared::new(aggregator.clone(), Arc::new(LoadReport::default()), rx)).await;
            (addr, tx)
        };
        let east = &upstreams[0];
        let root = east.docs[0].clone();
        let namespace = root["metadata"]["namespace"].as_str().expect("namespace").to_owned();
        let name = root["metadata"]["name"].as_str().expect("name").to_owned();
        let (mut direct_rx, direct_tasks) = subscribe(east.addr, o.subscribers, &namespace, &name).await;
        let direct = fanout(&east.index, &root, &mut direct_rx, o.subscribers, o.changes, "direct").await;
        for t in direct_tasks {
            t.abort();
        }
        let (mut hop_rx, hop_tasks) = subscribe(aggregator_addr, o.subscribers, &namespace, &name).await;
        let hop = fanout(&east.index, &root, &mut hop_rx, o.subscribers, o.changes, "hop").await;
        for t in hop_tasks {
            t.abort();
        }
        println!(
            "watch/{}_subscribers direct      last subscriber: p50 {:>9.2?}  p99 {:>9.2?}  max {:>9.2?} over {} changes",
            o.subscribers,
            percentile(&direct, 0.5),
            percentile(&direct, 0.99),
            direct.last().copied().unwrap_or_default(),
            o.changes
        );
        println!(
            "watch/{}_subscribers via_aggregator last subscriber: p50 {:>9.2?}  p99 {:>9.2?}  max {:>9.2?} over {} changes (goal p99 <= 100ms at 1,000; {:.2}x the direct p99)",
            o.subscribers,
            percentile(&hop, 0.5),
            percentile(&hop, 0.99),
            hop.last().copied().unwrap_or_default(),
            o.changes,
            percentile(&hop, 0.99).as_secs_f64() / percentile(&direct, 0.99).as_secs_f64().max(1e-9)
        );
    });
}
