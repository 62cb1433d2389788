//! Gang findings under load: the real `kartograf` binary as a process, watching the fake
//! Kubernetes API server (`tests/service/fake_apiserver.rs`, in this process, over loopback
//! HTTP through a kubeconfig), which serves RayClusters (1 head + 3 workers) each with
//! KubeRay's coscheduling PodGroup. While pods' Ready conditions flip at `--events` per
//! second, changes that cause findings are made one at a time — a PodGroup's `minMember`
//! set wrong (then right again), a worker pod deleted after placement (then replaced) — and
//! the time from each change to the `Watch` event whose graph carries (or no longer
//! carries) the finding is measured: p50 / p99 / max.
//!
//! Before the load, every workload's right PodGroup must give zero findings.
//!
//! Run: `cargo bench --bench gangs` (options: `-- --clusters 250 --events 2000 --changes
//! 100`). Without `--bench` (as `cargo test --benches` runs it) a short smoke run on a few
//! clusters that fails on any error but judges no goal.

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;

#[path = "../tests/service/fake_apiserver.rs"]
#[allow(dead_code)]
mod fake_apiserver;

use fake_apiserver::FakeApiServer;
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use serde_json::{Value, json};
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

const NS: &str = "bench";
const WORKERS: usize = 3;
/// Events the fake keeps for watch resumption.
const HISTORY: usize = 5000;

struct Options {
    bench: bool,
    clusters: usize,
    events: f64,
    changes: usize,
}

fn options() -> Options {
    let args = args::Args::new();
    let bench = args.bench();
    let value = |name: &str| args.value::<f64>(name);
    Options {
        bench,
        clusters: value("--clusters").map_or(if bench { 250 } else { 10 }, |v| v as usize),
        events: value("--events").unwrap_or(if bench { 2000.0 } else { 200.0 }),
        changes: value("--changes").map_or(if bench { 100 } else { 8 }, |v| v as usize),
    }
}

fn ray_uid(i: usize) -> String {
    format!("ba000000-0000-4000-8000-{i:012}")
}

fn owner(i: usize) -> Value {
    json!([{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": format!("ray-{i}"),
            "uid": ray_uid(i), "controller": true}])
}

fn raycluster(i: usize) -> Value {
    let template = json!({"spec": {"containers": [{"name": "ray",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}});
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": format!("ray-{i}"), "namespace": NS, "uid": ray_uid(i)},
        "spec": {"headGroupSpec": {"template": template},
                 "workerGroupSpecs": [{"groupName": "workers", "replicas": WORKERS,
                                       "minReplicas": 0, "maxReplicas": 8, "template": template}]},
        "status": {"state": "ready"}
    })
}

fn pod(i: usize, name: &str, node_type: &str, group: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("ray-{i}-{name}"), "namespace": NS,
            "uid": format!("{}-{name}", ray_uid(i)),
            "labels": {"ray.io/node-type": node_type, "ray.io/group": group,
                       "scheduling.x-k8s.io/pod-group": format!("ray-{i}")},
            "ownerReferences": owner(i)},
        "spec": {"nodeName": format!("node-{}", i % 64), "containers": [{"name": "ray",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn pod_group(i: usize, min: usize) -> Value {
    json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": format!("ray-{i}"), "namespace": NS,
                     "uid": format!("{}-pg", ray_uid(i)), "ownerReferences": owner(i)},
        "spec": {"minMember": min}
    })
}

fn pods_of(i: usize) -> Vec<Value> {
    let mut out = vec![pod(i, "head", "head", "headgroup")];
    out.extend((0..WORKERS).map(|w| pod(i, &format!("worker-{w}"), "worker", "workers")));
    out
}

/// kartograf as a process; killed on drop.
struct Kartograf {
    child: Child,
    grpc: SocketAddr,
}

impl Drop for Kartograf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(port: u16, dir: &std::path::Path) -> Kartograf {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: \
             http://127.0.0.1:{port}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    \
             user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  \
             user: {{}}\n"
        ),
    )
    .expect("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .arg("serve")
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("RUST_LOG")
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--log-level", "info", "--log-format", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn kartograf");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent
                && let Ok(v) = serde_json::from_str::<Value>(&line)
                && v["fields"]["message"] == "kartograf serving"
                && let Some(grpc) = v["fields"]["grpc"].as_str().and_then(|a| a.parse().ok())
            {
                let _ = tx.send(grpc);
                sent = true;
            }
        }
    });
    let grpc: SocketAddr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("kartograf's startup line");
    Kartograf { child, grpc }
}

/// Ready flips at `rate` per second over every pod, until `stop`.
fn flip_ready(
    fake: FakeApiServer,
    uids: Vec<String>,
    rate: f64,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
) {
    let started = Instant::now();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let due = (rate * started.elapsed().as_secs_f64()) as usize;
        while n < due {
            let uid = &uids[n % uids.len()];
            let ready = (n / uids.len()) % 2 == 1;
            if let Some(mut p) = fake.object(uid)
                && let Some(cs) = p["status"]["conditions"].as_array_mut()
            {
                for c in cs.iter_mut().filter(|c| c["type"] == "Ready") {
                    c["status"] = json!(if ready { "True" } else { "False" });
                }
                fake.upsert(p);
            }
            n += 1;
        }
        sent.store(n, Ordering::Relaxed);
        fake.compact(HISTORY);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// (time received, workload name, its gang codes) of every Watch event.
type Seen = tokio::sync::mpsc::UnboundedReceiver<(Instant, String, Vec<String>)>;

async fn watch_all(channel: Channel) -> Seen {
    let mut client = WorkloadResolverClient::new(channel).max_decoding_message_size(256 << 20);
    let mut stream = client
        .watch(pb::WatchRequest::default())
        .await
        .expect("Watch")
        .into_inner();
    while let Some(e) = stream.message().await.expect("snapshot") {
        if e.r#type == pb::EventType::Synced as i32 {
            break;
        }
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(e)) = stream.message().await {
            if let Some(w) = e.workload {
                let name = w.r#ref.map(|r| r.name).unwrap_or_default();
                let codes = w
                    .diagnostics
                    .into_iter()
                    .filter(|d| d.code.starts_with("gang_"))
                    .map(|d| d.code)
                    .collect();
                let _ = tx.send((Instant::now(), name, codes));
            }
        }
    });
    rx
}

/// Drops the events received so far (before a change is made).
fn drain(seen: &mut Seen) {
    while seen.try_recv().is_ok() {}
}

/// Waits for an event of `name`, received after `since`, whose codes hold `code` (or,
/// `present` false, do not); its time from `since`.
async fn until(
    seen: &mut Seen,
    since: Instant,
    name: &str,
    code: &str,
    present: bool,
) -> Option<Duration> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let next = tokio::time::timeout_at(deadline, seen.recv())
            .await
            .ok()??;
        if next.0 >= since && next.1 == name && next.2.iter().any(|c| c == code) == present {
            return Some(next.0 - since);
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn report(what: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let p99 = percentile(&samples, 0.99);
    println!(
        "| {what} | {} | {:.0} ms | {:.0} ms | {:.0} ms |",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        samples.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    p99
}

async fn run(o: &Options) {
    let fake = FakeApiServer::new();
    fake.register("v1", "Pod", "pods", true);
    fake.register("ray.io/v1", "RayCluster", "rayclusters", true);
    fake.register(
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
        "podgroups",
        true,
    );
    let mut pod_uids = Vec::new();
    for i in 0..o.clusters {
        fake.upsert(raycluster(i));
        for p in pods_of(i) {
            pod_uids.push(p["metadata"]["uid"].as_str().unwrap_or_default().to_owned());
            fake.upsert(p);
        }
        fake.upsert(pod_group(i, 1 + WORKERS));
    }
    fake.compact(0);
    let addr = fake.listen().await;
    let dir = std::env::temp_dir().join(format!("kartograf-bench-gangs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let k = spawn(addr.port(), &dir);
    let channel = Channel::from_shared(format!("http://{}", k.grpc))
        .expect("address")
        .connect_lazy();
    // Synced, every cluster resolved and verified: zero findings.
    let mut client =
        WorkloadResolverClient::new(channel.clone()).max_decoding_message_size(256 << 20);
    let started = Instant::now();
    let graphs = loop {
        let list = client
            .list(pb::ListRequest {
                namespace: NS.into(),
                page_size: 1000,
                ..Default::default()
            })
            .await;
        if let Ok(l) = list
            && l.get_ref().workloads.len() == o.clusters
            && l.get_ref()
                .workloads
                .iter()
                .all(|w| w.pods.is_some_and(|p| p.current == 4))
        {
            break l.into_inner().workloads;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "kartograf never synced"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let findings: usize = graphs
        .iter()
        .map(|w| {
            w.diagnostics
                .iter()
                .filter(|d| d.code.starts_with("gang_"))
                .count()
        })
        .sum();
    assert_eq!(findings, 0, "right PodGroups gave findings");
    eprintln!(
        "{} clusters synced in {:?}, zero findings",
        o.clusters,
        started.elapsed()
    );
    let mut seen = watch_all(channel).await;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let flipper = {
        let (fake, stop, sent, rate) = (fake.clone(), stop.clone(), sent.clone(), o.events);
        std::thread::spawn(move || flip_ready(fake, pod_uids, rate, stop, sent))
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let load_started = Instant::now();
    let (mut stale, mut fixed, mut broken, mut whole) = (vec![], vec![], vec![], vec![]);
    let mut missed = 0;
    for c in 0..o.changes {
        // Changes are spread over the load (one pair every ~200 ms).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let i = (c * 7919) % o.clusters;
        let name = format!("ray-{i}");
        if c % 2 == 0 {
            drain(&mut seen);
            let t0 = Instant::now();
            fake.upsert(pod_group(i, 9));
            match until(&mut seen, t0, &name, "gang_min_stale", true).await {
                Some(d) => stale.push(d),
                None => missed += 1,
            }
            drain(&mut seen);
            let t0 = Instant::now();
            fake.upsert(pod_group(i, 1 + WORKERS));
            match until(&mut seen, t0, &name, "gang_min_stale", false).await {
                Some(d) => fixed.push(d),
                None => missed += 1,
            }
        } else {
            let victim = pod(i, "worker-0", "worker", "workers");
            let uid = victim["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            drain(&mut seen);
            let t0 = Instant::now();
            fake.delete(&uid, false);
            match until(&mut seen, t0, &name, "gang_broken", true).await {
                Some(d) => broken.push(d),
                None => missed += 1,
            }
            drain(&mut seen);
            let t0 = Instant::now();
            fake.upsert(victim);
            match until(&mut seen, t0, &name, "gang_broken", false).await {
                Some(d) => whole.push(d),
                None => missed += 1,
            }
        }
    }
    let secs = load_started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = flipper.join();
    let rate = sent.load(Ordering::Relaxed) as f64 / (secs + 2.0);
    println!(
        "\n{} RayClusters ({} pods), coscheduling PodGroups; pod Ready flips at {:.0}/s (asked {:.0}/s) for {:.0} s\n",
        o.clusters,
        o.clusters * (1 + WORKERS),
        rate,
        o.events,
        secs
    );
    println!("| change → Watch event with the finding | n | p50 | p99 | max |");
    println!("|---|---|---|---|---|");
    let p99s = [
        report("minMember set wrong → gang_min_stale", stale),
        report("minMember set right → gang_min_stale gone", fixed),
        report("worker deleted after placement → gang_broken", broken),
        report("replacement placed → gang_broken gone", whole),
    ];
    println!("\nmissed (no event within 15 s): {missed}");
    assert_eq!(missed, 0, "findings that never came");
    if o.bench {
        let worst = p99s.iter().max().copied().unwrap_or_default();
        println!(
            "goal p99 ≤ 2 s: {} (worst p99 {:.0} ms)",
            if worst <= Duration::from_secs(2) {
                "met"
            } else {
                "NOT met"
            },
            worst.as_secs_f64() * 1e3
        );
    }
    drop(k);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(&o));
}
