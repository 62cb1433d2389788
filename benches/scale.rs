//! Scale benchmarks on a synthetic cluster (`benches/synth`), release build:
//!
//! 1. Memory: heap (counting allocator around mimalloc) and RSS per cached pod after loading
//!    N pods and their workloads into an `Index`, against the heap the same documents take as
//!    `serde_json::Value` (the baseline); peak heap during a full relist (the list buffered as
//!    JSON, as the Kubernetes source does, then `Index::reset`) against the steady state.
//! 2. Ingest: pod update events per second through `Index::apply` (including re-resolving the
//!    pod's workload) on one thread, against parsing the same pods from JSON text.
//! 3. Cold start: 10k pods + 1k workloads until `Index::synced()`, through a manifest
//!    directory (`source::manifests::run`) and through the fake API server over loopback HTTP
//!    (`source::kube::run`, the real kube-rs watcher).
//!
//! Run: `cargo bench --bench scale` (options: `-- --pods 10000,100000 --events 20000`).
//! Without `--bench` (as `cargo test --benches` runs it) it does a tiny smoke run.

// A counting allocator around mimalloc measures heap per pod: the one use of unsafe code.
#![allow(unsafe_code)]

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;

#[path = "synth/mod.rs"]
mod synth;

#[path = "../tests/service/fake_apiserver.rs"]
#[allow(dead_code)]
mod fake_apiserver;

use kartograf::definition::Catalog;
use kartograf::expr::Limits;
use kartograf::index::{Index, Write};
use kartograf::model::{Cached, Object, Pod};
use serde_json::Value as Json;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// mimalloc (as the service binary uses) with live and peak byte counters.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Counting is switched off for the timed phases, which then run on plain mimalloc as the
/// service does (LIVE and PEAK mean nothing after that).
static COUNTING: AtomicBool = AtomicBool::new(true);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to mimalloc.
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to mimalloc.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged to mimalloc.
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            if new_size >= layout.size() {
                let now = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size
                    - layout.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Restarts peak tracking from the current live size.
fn reset_peak() {
    PEAK.store(live(), Ordering::Relaxed);
}

fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

unsafe extern "C" {
    /// mimalloc's collection: with `force`, freed memory goes back to the OS.
    fn mi_collect(force: bool);
}

/// VmRSS in bytes (0 where /proc is not available), after returning freed memory to the
/// OS, so that memory freed by earlier phases does not hide growth.
fn rss() -> usize {
    // SAFETY: mimalloc's documented API, callable at any time.
    unsafe { mi_collect(true) };
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

struct Options {
    sizes: Vec<usize>,
    events: usize,
    cold_pods: usize,
}

fn options() -> Options {
    let args = args::Args::new();
    let bench = args.bench();
    let value = |name: &str| args.text(name);
    let sizes = value("--pods").map(|v| {
        v.split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect::<Vec<usize>>()
    });
    if bench {
        Options {
            sizes: sizes.unwrap_or_else(|| vec![10_000, 100_000]),
            events: value("--events")
                .and_then(|v| v.parse().ok())
                .unwrap_or(20_000),
            cold_pods: 10_000,
        }
    } else {
        Options {
            sizes: sizes.unwrap_or_else(|| vec![200]),
            events: 50,
            cold_pods: 200,
        }
    }
}

/// A cluster of `pods` pods in `pods / 10` workloads.
fn cluster(pods: usize) -> synth::Cluster {
    let templates = synth::load_templates(&synth::template_dir()).expect("templates");
    synth::generate(
        &templates,
        synth::Spec {
            workloads: (pods / 10).max(1),
            pods,
            seed: 1,
        },
    )
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn memory(pods: usize) {
    let cluster = cluster(pods);
    let n_pods = cluster.pods.len();
    let objects = cluster.len();
    // The documents as the apiserver sends them (compact JSON text).
    let wire: Vec<String> = cluster.all().iter().map(Json::to_string).collect();
    drop(cluster);
    let wire_bytes: usize = wire.iter().map(String::len).sum();

    // Baseline: the same documents as serde_json DOMs.
    let before = live();
    let docs: Vec<Json> = wire
        .iter()
        .map(|s| serde_json::from_str(s).expect("json"))
        .collect();
    let dom = live() - before;
    // Breakdown: the cached `Pod`s alone, without the index maps and resolved graphs.
    let before = live();
    let cached: Vec<Pod> = docs
        .iter()
        .filter(|d| d["kind"] == "Pod")
        .map(|d| Pod::from_json(d, Limits::default()).expect("pod"))
        .collect();
    let pods_alone = live() - before;
    drop(cached);
    // Breakdown: every converted object (pods and the rest), as the index caches them; the
    // index heap minus this is its own bookkeeping plus the resolved graphs.
    let before = live();
    let mut converted: (Vec<Arc<Pod>>, Vec<Arc<Object>>) = (Vec::new(), Vec::new());
    for d in &docs {
        if d["kind"] == "Pod" && d["apiVersion"] == "v1" {
            let pod = Pod::from_json(d, Limits::default()).expect("pod");
            converted.0.push(Arc::new(pod));
        } else {
            let object = Object::from_json(d, Limits::default()).expect("object");
            converted.1.push(Arc::new(object));
        }
    }
    let converted_alone = live() - before;
    drop(converted);
    drop(docs);

    let catalog = Catalog::embedded().expect("catalog");
    let (heap0, rss0) = (live(), rss());
    let index = Index::new(catalog, &[]);
    {
        let docs: Vec<Json> = wire
            .iter()
            .map(|s| serde_json::from_str(s).expect("json"))
            .collect();
        let skipped = index.batch().write(Write::reset("synth", &docs));
        assert!(skipped.is_empty(), "{skipped:?}");
    }
    let steady = live() - heap0;
    let rss_delta = rss().saturating_sub(rss0);

    // Full relist as the Kubernetes source does it: each item is converted as it arrives
    // and the converted list replaces the source's objects at once.
    reset_peak();
    {
        let items: Vec<_> = wire
            .iter()
            .map(|s| Cached::from_json(&serde_json::from_str(s).expect("json"), Limits::default()))
            .collect();
        index.batch().write(Write::Reset {
            source: "synth".into(),
            items,
        });
    }
    let relist_peak = peak() - heap0;
    let after_relist = live() - heap0;
    // For comparison: the whole list buffered as serde_json values first (sources did this
    // before converting items on arrival).
    reset_peak();
    {
        let docs: Vec<Json> = wire
            .iter()
            .map(|s| serde_json::from_str(s).expect("json"))
            .collect();
        index.batch().write(Write::reset("synth", &docs));
    }
    let json_buffered_peak = peak() - heap0;
    reset_peak();
    // Relist peak of the index alone (documents already parsed and held elsewhere).
    let docs_held: Vec<Json> = wire
        .iter()
        .map(|s| serde_json::from_str(s).expect("json"))
        .collect();
    let held = live() - heap0;
    reset_peak();
    index.batch().write(Write::reset("synth", &docs_held));
    let index_peak = peak() - heap0 - (held - after_relist);
    drop(docs_held);

    let per = |b: usize| b as f64 / n_pods as f64;
    println!(
        "memory  {n_pods} pods ({objects} objects, {:.1} MB JSON): index heap {:.1} MB = {:.0} B/pod \
         (serde_json DOM baseline {:.0} B/pod, ratio {:.2}); RSS delta {:.1} MB = {:.0} B/pod",
        mb(wire_bytes),
        mb(steady),
        per(steady),
        per(dom),
        steady as f64 / dom as f64,
        mb(rss_delta),
        per(rss_delta),
    );
    println!(
        "        of which the cached Pod values alone: {:.0} B/pod",
        per(pods_alone)
    );
    println!(
        "        all converted objects alone: {:.0} B/pod; published graphs and index \
         bookkeeping (heap - objects): {:.0} B/pod",
        per(converted_alone),
        (steady as f64 - converted_alone as f64) / n_pods as f64,
    );
    println!(
        "relist  {n_pods} pods: peak {:.1} MB = {:.2}x steady, items converted as they arrive; \
         {:.2}x with the list buffered as JSON first; {:.2}x for the index alone; \
         after relist {:.1} MB",
        mb(relist_peak),
        relist_peak as f64 / steady as f64,
        json_buffered_peak as f64 / steady as f64,
        index_peak as f64 / steady as f64,
        mb(after_relist),
    );
    drop(index);
}

fn ingest(events: usize) {
    let cluster = cluster(10_000.min(events.max(200)));
    let index = Index::new(Catalog::embedded().expect("catalog"), &[]);
    index.batch().write(Write::reset("synth", &cluster.all()));
    let n = cluster.pods.len();
    let version = |pod: &mut Json, i: usize| {
        pod["metadata"]["resourceVersion"] = Json::String(format!("{}", 10_000_000 + i));
    };
    // Kubelet status updates that change nothing a graph shows (a container restart count).
    let heartbeats: Vec<Json> = (0..events)
        .map(|i| {
            let mut pod = cluster.pods[i % n].clone();
            version(&mut pod, i);
            pod["status"]["containerStatuses"][0]["restartCount"] = Json::from(i / n + 1);
            pod
        })
        .collect();
    // Updates that change the graph: the Ready condition flips (False on the first pass over
    // the pods, True on the next), so every event re-resolves its workload and publishes.
    let flips: Vec<Json> = (0..events)
        .map(|i| {
            let mut pod = cluster.pods[i % n].clone();
            version(&mut pod, events + i);
            let status = if (i / n).is_multiple_of(2) {
                "False"
            } else {
                "True"
            };
            if let Some(conditions) = pod["status"]["conditions"].as_array_mut() {
                for c in conditions.iter_mut().filter(|c| c["type"] == "Ready") {
                    c["status"] = Json::from(status);
                }
            }
            pod
        })
        .collect();
    let texts: Vec<String> = flips.iter().map(Json::to_string).collect();

    // Baseline: parsing the event's pod from JSON text.
    let t = Instant::now();
    for s in &texts {
        std::hint::black_box(serde_json::from_str::<Json>(s).expect("json"));
    }
    let parse = t.elapsed();

    let run = |updates: Vec<Json>| {
        let resolutions = index.resolutions();
        let revision = index.board().revision();
        let t = Instant::now();
        for pod in updates {
            assert!(index.batch().write(Write::apply("synth", pod)).is_empty());
        }
        (
            t.elapsed(),
            index.resolutions() - resolutions,
            index.board().revision() - revision,
        )
    };
    // Status updates first: each is the cached pod plus a restart count (the flips, made
    // from the same pods, then change both).
    for (what, updates) in [
        (
            "status updates the graph does not show (restart counts)",
            heartbeats,
        ),
        ("graph-changing updates (Ready flips)", flips),
    ] {
        let (took, resolutions, published) = run(updates);
        println!(
            "ingest  {events} {what} on 1 thread over {n} pods: {:.0} events/s ({:.1} us each), \
             {resolutions} re-resolutions, {published} changes published; parse baseline \
             {:.1} us each, ratio {:.1}x",
            events as f64 / took.as_secs_f64(),
            took.as_secs_f64() * 1e6 / events as f64,
            parse.as_secs_f64() * 1e6 / events as f64,
            took.as_secs_f64() / parse.as_secs_f64(),
        );
    }
}

async fn wait_synced(index: &Index, what: &str) -> Duration {
    let t = Instant::now();
    while !index.synced() {
        assert!(t.elapsed() < Duration::from_secs(600), "{what}: not synced");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    t.elapsed()
}

async fn cold_start(pods: usize) {
    let workloads = (pods / 10).max(1);
    let cluster = cluster(pods);

    // Manifest directory.
    let dir = std::env::temp_dir().join(format!("kartograf-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    cluster.write_dir(&dir).expect("write");
    let index = Arc::new(Index::new(
        Catalog::embedded().expect("catalog"),
        &[kartograf::source::manifests::SOURCE],
    ));
    let t = Instant::now();
    let task = tokio::spawn(kartograf::source::manifests::run(
        index.clone(),
        dir.clone(),
    ));
    wait_synced(&index, "manifests").await;
    let manifests = t.elapsed();
    task.abort();
    let served = index
        .board()
        .list(&Default::default(), 0, usize::MAX)
        .0
        .len();
    assert_eq!(served, workloads);
    let _ = std::fs::remove_dir_all(&dir);

    // Fake API server over loopback HTTP, the real kube-rs watchers.
    let fake = fake_apiserver::FakeApiServer::new();
    // Every kind the templates produce.
    fake.serve_documents(cluster.all());
    let client = fake.http_client().await;
    let index = Arc::new(Index::new(
        Catalog::embedded().expect("catalog"),
        &[kartograf::source::kube::SOURCE],
    ));
    let t = Instant::now();
    let task = tokio::spawn(kartograf::source::kube::run(
        client,
        index.clone(),
        kartograf::source::kube::Settings {
            rediscover: Duration::from_millis(200),
            ..Default::default()
        },
        None,
    ));
    wait_synced(&index, "kube").await;
    let kube = t.elapsed();
    task.abort();
    let served = index
        .board()
        .list(&Default::default(), 0, usize::MAX)
        .0
        .len();
    assert_eq!(served, workloads);
    println!(
        "cold    {pods} pods + {workloads} workloads to synced: manifests dir {:.2} s; \
         fake API server over HTTP {:.2} s (includes the fake server's own work)",
        manifests.as_secs_f64(),
        kube.as_secs_f64()
    );
}

fn main() {
    let o = options();
    for &pods in &o.sizes {
        memory(pods);
    }
    COUNTING.store(false, Ordering::Relaxed);
    ingest(o.events);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(cold_start(o.cold_pods));
}
