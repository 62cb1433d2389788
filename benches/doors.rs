//! Issue 42's doors, measured on the real `kartograf serve --manifests EMPTY --webhook-listen`
//! as a process (loopback only; every attack bounded in count and time; the attacks are
//! `tests/common/attacks.rs`):
//!
//! 1. AggregateStatus of 1,024 members × 250 status keys (each member's keys its own):
//!    answer time; then, with two of them in flight, InterpretReplica, Karta admission and
//!    inline `Resolve` from another client, 10 each: answered (result or 429 /
//!    RESOURCE_EXHAUSTED) within 1 s.
//! 2. 1,024 connections each sending an unfinished 8 MiB body to the webhook: RSS during and
//!    10 s after (from `/proc`), gRPC health `Check` and `/livez` p99 during.
//! 3. 1,100 slow request heads (a header line every 0.5 s, reopened when closed) on the admin
//!    port and on the webhook port: `/livez`, `/readyz` and a webhook request from the same
//!    host, 10 each, answered within 1 s.
//!
//! Run: `cargo bench --bench doors`. Without `--bench` (as `cargo test --benches` runs it) a
//! short smoke run at a small scale that fails on any error.

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;
#[path = "../tests/common/attacks.rs"]
mod attacks;

use attacks::{SlowHeads, percentile};
use kartograf::proto::v1 as pb;
use serde_json::Value as Json;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/common/ports.rs"]
mod ports;
use ports::free_port;

fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

struct Server {
    child: Child,
    grpc: SocketAddr,
    admin: SocketAddr,
    webhook: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &[&str]) -> Server {
    let empty = std::env::temp_dir().join(format!("kartograf-doors-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&empty);
    let (g, a, w) = (free_port(), free_port(), free_port());
    let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let child = Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .arg("serve")
        .arg("--manifests")
        .arg(&empty)
        .args(["--listen", &addr(g).to_string()])
        .args(["--admin-listen", &addr(a).to_string()])
        .args(["--webhook-listen", &addr(w).to_string()])
        .args(extra)
        .env_remove("KARTOGRAF_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts kartograf serve");
    let server = Server {
        child,
        grpc: addr(g),
        admin: addr(a),
        webhook: addr(w),
    };
    let until = Instant::now() + Duration::from_secs(30);
    while attacks::request(server.admin, "GET", "/readyz", b"", Duration::from_secs(1)).0 != 200 {
        assert!(Instant::now() < until, "not ready within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

fn post(addr: SocketAddr, path: &str, body: &[u8], timeout: Duration) -> (u16, Duration) {
    let (status, took, _) = attacks::request(addr, "POST", path, body, timeout);
    (status, took)
}

/// (answered within 1 s, of, worst) for `n` tries of `ask`.
fn tally(n: usize, mut ask: impl FnMut() -> (bool, Duration)) -> (usize, usize, Duration) {
    let mut ok = 0;
    let mut worst = Duration::ZERO;
    for _ in 0..n {
        let (answered, took) = ask();
        worst = worst.max(took);
        if answered && took <= Duration::from_secs(1) {
            ok += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (ok, n, worst)
}

fn aggregate(runtime: &tokio::runtime::Runtime, members: usize, tries: usize) -> bool {
    let server = start(&[]);
    let body = attacks::aggregate_status(members, 250);
    let mut pass = true;
    for _ in 0..2 {
        let (status, took) = post(
            server.webhook,
            "/karmada/interpret",
            &body,
            Duration::from_secs(30),
        );
        println!(
            "AggregateStatus {members} members x 250 keys ({:.2} MB): HTTP {status} in {:.0} ms",
            body.len() as f64 / 1e6,
            took.as_secs_f64() * 1e3
        );
        pass &= status == 200 && took <= Duration::from_millis(2500);
    }
    let heavy: Vec<_> = (0..2)
        .map(|_| {
            let (addr, body) = (server.webhook, body.clone());
            std::thread::spawn(move || {
                post(addr, "/karmada/interpret", &body, Duration::from_secs(30))
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let replica =
        attacks::interpreter_context("InterpretReplica", &attacks::deployment(), Json::Null);
    let review = attacks::admission_review();
    let (r_ok, r_n, r_worst) = tally(tries, || {
        let (s, t) = post(
            server.webhook,
            "/karmada/interpret",
            &replica,
            Duration::from_secs(5),
        );
        (matches!(s, 200 | 429), t)
    });
    let (a_ok, a_n, a_worst) = tally(tries, || {
        let (s, t) = post(
            server.webhook,
            "/karta/validate",
            &review,
            Duration::from_secs(5),
        );
        (matches!(s, 200 | 429), t)
    });
    let mut client = runtime.block_on(async {
        pb::workload_resolver_client::WorkloadResolverClient::connect(format!(
            "http://{}",
            server.grpc
        ))
        .await
        .expect("connects")
    });
    let (i_ok, i_n, i_worst) = tally(tries, || {
        let started = Instant::now();
        let answer = runtime.block_on(client.resolve(pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
                object_json: attacks::deployment().to_string(),
                pods_json: Vec::new(),
            })),
            ..Default::default()
        }));
        let answered = match answer {
            Ok(_) => true,
            Err(s) => s.code() == tonic::Code::ResourceExhausted,
        };
        (answered, started.elapsed())
    });
    for h in heavy {
        let (status, took) = h.join().expect("joins");
        println!(
            "  in flight: AggregateStatus HTTP {status} in {:.0} ms",
            took.as_secs_f64() * 1e3
        );
    }
    for (what, ok, n, worst) in [
        ("InterpretReplica", r_ok, r_n, r_worst),
        ("Karta admission", a_ok, a_n, a_worst),
        ("inline Resolve", i_ok, i_n, i_worst),
    ] {
        println!(
            "  beside two in flight: {what} answered within 1 s {ok} of {n} (worst {:.0} ms)",
            worst.as_secs_f64() * 1e3
        );
        pass &= ok == n;
    }
    pass
}

fn bodies(runtime: &tokio::runtime::Runtime, n: usize, samples: usize) -> bool {
    let server = start(&[]);
    let pid = server.child.id();
    let before = rss_mib(pid);
    let declared = 8 << 20;
    let started = Instant::now();
    let mut held = attacks::unfinished_bodies(
        server.webhook,
        "/karmada/interpret",
        n,
        declared,
        declared - 1,
    );
    let opened = held.len();
    let refused = attacks::refused_with_429(&mut held, Duration::from_millis(500));
    let mut peak = rss_mib(pid);
    let channel = runtime.block_on(async {
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
            .expect("endpoint")
            .connect()
            .await
            .expect("connects")
    });
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let (mut h, mut l) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let t = Instant::now();
        let ok = runtime
            .block_on(health.check(tonic_health::pb::HealthCheckRequest::default()))
            .is_ok();
        h.push(if ok {
            t.elapsed()
        } else {
            Duration::from_secs(60)
        });
        let (status, took, _) =
            attacks::request(server.admin, "GET", "/livez", b"", Duration::from_secs(5));
        l.push(if status == 200 {
            took
        } else {
            Duration::from_secs(60)
        });
        peak = peak.max(rss_mib(pid));
        std::thread::sleep(Duration::from_millis(10));
    }
    let during = rss_mib(pid);
    drop(held);
    std::thread::sleep(Duration::from_secs(10));
    let after = rss_mib(pid);
    let (hp, lp) = (percentile(&mut h, 99), percentile(&mut l, 99));
    println!(
        "{opened} connections with unfinished {} MiB bodies ({refused} refused with 429 before reading; set up in {:.1} s): RSS before {before} MiB, during {during} MiB (peak {peak}), 10 s after {after} MiB; during: gRPC health p99 {:.1} ms, /livez p99 {:.1} ms ({samples} each)",
        declared >> 20,
        started.elapsed().as_secs_f64(),
        hp.as_secs_f64() * 1e3,
        lp.as_secs_f64() * 1e3
    );
    peak <= 300
        && after <= 150
        && hp <= Duration::from_millis(50)
        && lp <= Duration::from_millis(50)
}

fn slow_heads(n: usize) -> bool {
    let server = start(&[]);
    let mut pass = true;
    let replica =
        attacks::interpreter_context("InterpretReplica", &attacks::deployment(), Json::Null);
    for (port, addr) in [("admin", server.admin), ("webhook", server.webhook)] {
        let attack = SlowHeads::start(addr, n, Duration::from_secs(120));
        std::thread::sleep(Duration::from_secs(2));
        let mut line = Vec::new();
        for path in ["/livez", "/readyz"] {
            let (ok, of, worst) = tally(10, || {
                let (s, t, _) =
                    attacks::request(server.admin, "GET", path, b"", Duration::from_secs(1));
                (s == 200, t)
            });
            pass &= ok == of;
            line.push(format!(
                "{path} {ok}/{of} (worst {:.1} ms)",
                worst.as_secs_f64() * 1e3
            ));
        }
        let (ok, of, worst) = tally(10, || {
            let (s, t) = post(
                server.webhook,
                "/karmada/interpret",
                &replica,
                Duration::from_secs(1),
            );
            (s == 200, t)
        });
        pass &= ok == of;
        line.push(format!(
            "webhook InterpretReplica {ok}/{of} (worst {:.1} ms)",
            worst.as_secs_f64() * 1e3
        ));
        let opened = attack.opened.load(std::sync::atomic::Ordering::Relaxed);
        drop(attack);
        println!(
            "{n} slow heads on the {port} port ({opened} connections opened): within 1 s {}",
            line.join(", ")
        );
    }
    pass
}

fn main() {
    let args = args::Args::new();
    let full = args.bench();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (members, conns, heads) = if full {
        (1024, 1024, 1100)
    } else {
        (64, 32, 300)
    };
    let mut pass = aggregate(&runtime, members, if full { 10 } else { 3 });
    pass &= bodies(&runtime, conns, if full { 200 } else { 20 });
    pass &= slow_heads(heads);
    // The goals are about the release binary: a smoke run (debug, shared cores) reports them.
    println!("goals {}", if pass { "met" } else { "NOT met" });
}
