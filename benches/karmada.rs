//! Karmada's resource interpreter webhook, end to end: the real `kartograf serve
//! --manifests EMPTY --webhook-listen` as a process, an external client (this bench) on
//! loopback with keep-alive connections, as Karmada's webhook client connects.
//!
//! 1. Latency at a fixed rate (open loop: each request is sent at its scheduled time; its
//!    latency counts from then when the previous answer on its connection was late, so a
//!    stall is not hidden, else from the send, since tokio's timer wakes the client up to
//!    1 ms late): `InterpretReplica` and
//!    `InterpretComponent` of a RayCluster (head + two worker groups) at `--rate`
//!    requests/s (1,000) for `--secs` (10) over 16 connections. Goal: p99 ≤ 1 ms.
//! 2. Throughput per core: closed loop from 8 connections, requests per CPU-second of the
//!    server process (utime+stime from `/proc`), beside the health `Check` RPC measured the
//!    same way on the same server.
//!
//! 3. Policies at admission (issue 38): `POST /mutate/pods` for a pod of the demo JobSet
//!    (`examples/cluster`, which the server serves) as the Job controller creates it (only
//!    `generateName`), labelled with its workload, component and instance from the cache, at
//!    the same rate over 16 connections. Goal: p99 ≤ 1 ms at 1,000 req/s.
//!
//! Run: `cargo bench --bench karmada` (options: `-- --rate 1000 --secs 10`). Without
//! `--bench` (as `cargo test --benches` runs it) a short smoke run that fails on any error.

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;

use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "../tests/common/ports.rs"]
mod ports;
use ports::free_port;

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

struct Server {
    child: Child,
    grpc: SocketAddr,
    webhook: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    // The demo cluster: the pod route labels its JobSet's pods (the Karmada routes read no
    // cache).
    let cluster = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let grpc = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let webhook = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let child = Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .arg("serve")
        .arg("--manifests")
        .arg(&cluster)
        .args(["--listen", &grpc.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .args(["--webhook-listen", &webhook.to_string()])
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start kartograf serve");
    Server {
        child,
        grpc,
        webhook,
    }
}

fn raycluster() -> Json {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "ml", "uid": "0d1f-rc"},
        "spec": {
            "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": {"spec": {"containers": [{"name": "ray-head",
                "image": "rayproject/ray:2.46.0", "ports": [{"containerPort": 6379}, {"containerPort": 8265}],
                "resources": {"limits": {"cpu": "4", "memory": "16Gi"}, "requests": {"cpu": "4", "memory": "16Gi"}}}]}}},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 4, "minReplicas": 1, "maxReplicas": 8, "template": {"spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": "H100"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "w", "image": "rayproject/ray:2.46.0-gpu",
                        "resources": {"limits": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "8"}}}]}}},
                {"groupName": "cpu", "replicas": 2, "template": {"spec": {"containers": [{"name": "w",
                    "image": "rayproject/ray:2.46.0", "resources": {"requests": {"cpu": "8", "memory": "32Gi"}}}]}}}
            ]
        },
        "status": {"state": "ready", "conditions": [{"type": "RayClusterProvisioned", "status": "True"}, {"type": "HeadPodReady", "status": "True"}]}
    })
}

fn body(operation: &str) -> Vec<u8> {
    let object = raycluster();
    serde_json::to_vec(&json!({
        "apiVersion": "config.karmada.io/v1alpha1",
        "kind": "ResourceInterpreterContext",
        "request": {"uid": "5b8a-bench", "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
            "name": "rc", "namespace": "ml", "operation": operation, "object": object, "replicas": 0}
    }))
    .expect("json")
}

/// The AdmissionReview the API server sends for a new worker pod of the demo JobSet.
fn pod_review() -> Vec<u8> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster/jobset.yaml"),
    )
    .expect("the demo JobSet");
    let mut pod = kartograf::manifest::parse_documents(&text)
        .expect("parses")
        .into_iter()
        .find(|d| {
            d["kind"] == "Pod"
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.contains("workers"))
        })
        .expect("a worker pod");
    let meta = pod["metadata"].as_object_mut().expect("metadata");
    let name = meta
        .remove("name")
        .and_then(|n| n.as_str().map(str::to_owned))
        .unwrap_or_default();
    meta.remove("uid");
    meta.remove("resourceVersion");
    meta.insert(
        "generateName".into(),
        json!(format!(
            "{}-",
            name.rsplit_once('-').map_or(name.as_str(), |(a, _)| a)
        )),
    );
    if let Some(o) = pod.as_object_mut() {
        o.remove("status");
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "7c1e-bench", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod, "oldObject": null, "dryRun": false}
    }))
    .expect("json")
}

/// A keep-alive HTTP/1.1 connection to the webhook.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let _ = stream.set_nodelay(true);
        Conn {
            stream,
            buf: Vec::with_capacity(8192),
        }
    }

    /// One request; true when the answer is HTTP 200 with `"successful":true`.
    async fn post(&mut self, body: &[u8]) -> bool {
        self.post_to("/karmada/interpret", body, br#""successful":true"#)
            .await
    }

    /// One request to `path`; true when the answer is HTTP 200 and holds `expect`.
    async fn post_to(&mut self, path: &str, body: &[u8], expect: &[u8]) -> bool {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: kartograf\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        if self.stream.write_all(&request).await.is_err() {
            return false;
        }
        self.buf.clear();
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while self.buf.len() < end + 4 + length {
                    match self.stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let answer = &self.buf[end + 4..end + 4 + length];
                return head.starts_with("http/1.1 200") && memfind(answer, expect);
            }
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

fn memfind(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Open loop: `rate` requests/s for `secs` over `conns` connections; latencies from each
/// request's scheduled time, and the failures.
async fn at_rate(
    addr: SocketAddr,
    body: Vec<u8>,
    rate: f64,
    secs: f64,
    conns: usize,
) -> (Vec<Duration>, usize) {
    at_rate_to(
        addr,
        "/karmada/interpret",
        br#""successful":true"#,
        body,
        rate,
        secs,
        conns,
    )
    .await
}

/// [`at_rate`] to `path`, a request succeeding when its answer holds `expect`.
async fn at_rate_to(
    addr: SocketAddr,
    path: &'static str,
    expect: &'static [u8],
    body: Vec<u8>,
    rate: f64,
    secs: f64,
    conns: usize,
) -> (Vec<Duration>, usize) {
    let start = Instant::now() + Duration::from_millis(50);
    let per_conn = rate / conns as f64;
    let count = (per_conn * secs).round() as usize;
    let mut tasks = Vec::new();
    for c in 0..conns {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(addr).await;
            let mut lat = Vec::with_capacity(count);
            let mut failed = 0;
            let offset = Duration::from_secs_f64(c as f64 / rate);
            let mut previous_done = start;
            for i in 0..count {
                let due = start + offset + Duration::from_secs_f64(i as f64 / per_conn);
                tokio::time::sleep_until(due.into()).await;
                // Counted from the scheduled time when the previous answer on this
                // connection came after it (the server held the request up: no coordinated
                // omission), else from the send (the client's timer wakes up to 1 ms late).
                let from = if previous_done > due {
                    due
                } else {
                    Instant::now()
                };
                if !conn.post_to(path, &body, expect).await {
                    failed += 1;
                    conn = Conn::open(addr).await;
                }
                previous_done = Instant::now();
                lat.push(previous_done - from);
            }
            (lat, failed)
        }));
    }
    let mut all = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (l, f) = t.await.expect("task");
        all.extend(l);
        failed += f;
    }
    all.sort();
    (all, failed)
}

/// Closed loop for `secs`: (requests, server CPU seconds).
async fn closed<F, Fut>(pid: u32, conns: usize, secs: f64, make: F) -> (usize, f64)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = usize> + Send + 'static,
{
    let ticks = cpu_ticks(pid);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        tasks.push(tokio::spawn(make()));
    }
    let mut n = 0;
    for t in tasks {
        n += t.await.expect("task");
    }
    let _ = secs;
    (n, (cpu_ticks(pid) - ticks) as f64 / clock_ticks())
}

fn main() {
    let args = args::Args::new();
    let full = args.bench();
    let opt = |name: &str, default: f64| args.value(name).unwrap_or(default);
    // The smoke run (a debug build) goes slower: it checks that everything answers.
    let rate = if full { opt("--rate", 1000.0) } else { 100.0 };
    let secs = if full { opt("--secs", 10.0) } else { 0.5 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = start();
    let pid = server.child.id();
    runtime.block_on(async {
        // Up: the health check answers and the webhook answers.
        let mut health = None;
        for _ in 0..200 {
            if let Ok(ch) = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
                .expect("uri")
                .connect()
                .await
            {
                health = Some(tonic_health::pb::health_client::HealthClient::new(ch));
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let health = health.expect("server up");
        let mut up = false;
        for _ in 0..200 {
            if TcpStream::connect(server.webhook).await.is_ok() {
                let mut warm = Conn::open(server.webhook).await;
                up = warm.post(&body("InterpretReplica")).await;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(up, "the webhook answers");
        // Warm-up.
        at_rate(server.webhook, body("InterpretReplica"), rate, secs.min(2.0), 16).await;

        for op in ["InterpretReplica", "InterpretComponent"] {
            let (lat, failed) = at_rate(server.webhook, body(op), rate, secs, 16).await;
            assert_eq!(failed, 0, "{op}: failed requests");
            println!(
                "karmada/{op:<20} {rate:>6.0} req/s for {secs:.0} s: p50 {:>9.2?}  p99 {:>9.2?}  p99.9 {:>9.2?}  max {:>9.2?}  ({} requests, goal p99 <= 1 ms)",
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                percentile(&lat, 0.999),
                lat.last().copied().unwrap_or_default(),
                lat.len()
            );
        }

        // Pod labels at admission: every answer must carry the labels' patch.
        let pods = pod_review();
        let labelled: &'static [u8] = br#""patchType":"JSONPatch""#;
        at_rate_to(server.webhook, "/mutate/pods", labelled, pods.clone(), rate, secs.min(2.0), 16).await;
        let (lat, failed) = at_rate_to(server.webhook, "/mutate/pods", labelled, pods, rate, secs, 16).await;
        assert_eq!(failed, 0, "mutate/pods: requests failed or answered without labels");
        println!(
            "mutate/pods                {rate:>6.0} req/s for {secs:.0} s: p50 {:>9.2?}  p99 {:>9.2?}  p99.9 {:>9.2?}  max {:>9.2?}  ({} requests, goal p99 <= 1 ms)",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 0.999),
            lat.last().copied().unwrap_or_default(),
            lat.len()
        );

        let window = Duration::from_secs_f64(secs);
        for op in ["InterpretReplica", "InterpretComponent"] {
            let addr = server.webhook;
            let b = body(op);
            let (n, cpu) = closed(pid, 8, secs, || {
                let b = b.clone();
                async move {
                    let mut conn = Conn::open(addr).await;
                    let until = Instant::now() + window;
                    let mut n = 0;
                    while Instant::now() < until {
                        assert!(conn.post(&b).await, "request failed");
                        n += 1;
                    }
                    n
                }
            })
            .await;
            println!(
                "karmada/{op:<20} closed loop: {:>8.0} req/s, {:>8.0} req per server CPU-second ({cpu:.2} CPU-s)",
                n as f64 / secs,
                n as f64 / cpu.max(1e-9)
            );
        }
        let (n, cpu) = closed(pid, 8, secs, || {
            let mut c = health.clone();
            async move {
                let until = Instant::now() + window;
                let mut n = 0;
                while Instant::now() < until {
                    assert!(c
                        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
                        .await
                        .is_ok());
                    n += 1;
                }
                n
            }
        })
        .await;
        println!(
            "rpc/health_check                closed loop: {:>8.0} req/s, {:>8.0} req per server CPU-second ({cpu:.2} CPU-s)",
            n as f64 / secs,
            n as f64 / cpu.max(1e-9)
        );
    });
    drop(server);
}
