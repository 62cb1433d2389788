//! The doors of issue 42, on the real binary (scaled down for CI; the full figures are in
//! BENCHMARKS.md, from `cargo bench --bench doors`): AggregateStatus bounded and linear,
//! every wait for an evaluation bounded, request bodies bounded in total, and probes that
//! get in however many slow request heads hold the admin and webhook ports.

use super::{Served, free_port, scratch};
use crate::attacks::{self, SlowHeads};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use serde_json::Value as Json;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// `serve --manifests EMPTY --webhook-listen` with `args`; the webhook's address.
fn serve_webhook(args: &[&str]) -> (Served, SocketAddr) {
    let dir = scratch("doors");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut all = vec![
        "--manifests",
        dir.to_str().expect("utf-8"),
        "--webhook-listen",
        &listen,
    ];
    all.extend_from_slice(args);
    let mut served = Served::start(&all);
    served.wait_ready(Duration::from_secs(60));
    (served, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn post(addr: SocketAddr, path: &str, body: &[u8], timeout: Duration) -> (u16, Duration, Json) {
    let (status, took, body) = attacks::request(addr, "POST", path, body, timeout);
    (
        status,
        took,
        serde_json::from_slice(&body).unwrap_or(Json::Null),
    )
}

/// Member statuses with keys of their own are merged within the deadline (answered, success
/// or a deadline refusal), and more keys than the bound are refused with the bound named.
#[test]
fn aggregate_status_answers_within_the_deadline_and_refuses_beyond_its_key_bound() {
    let (mut served, webhook) = serve_webhook(&["--resolve-timeout", "2s"]);
    let (status, took, answer) = post(
        webhook,
        "/karmada/interpret",
        &attacks::aggregate_status(256, 250),
        Duration::from_secs(10),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(took < Duration::from_secs(4), "answered after {took:?}");
    let r = &answer["response"];
    assert!(
        r["successful"] == true
            || r["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("deadline")),
        "{r}"
    );
    let (status, took, answer) = post(
        webhook,
        "/karmada/interpret",
        &attacks::aggregate_status(1024, 260),
        Duration::from_secs(10),
    );
    assert_eq!(status, 200);
    assert!(took < Duration::from_secs(4), "refused after {took:?}");
    let r = &answer["response"];
    assert_eq!(r["successful"], false, "{r}");
    assert_eq!(r["status"]["code"], 400, "{r}");
    let message = r["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("262144"), "{message}");
    served.assert_up_within(1024 * MIB);
}

/// With the one evaluation thread taken by slow AggregateStatus requests, InterpretReplica,
/// admission and inline Resolve from another client are answered within a second: a result,
/// or a refusal (HTTP 429 with Retry-After; RESOURCE_EXHAUSTED).
#[test]
fn requests_behind_busy_evaluation_threads_are_answered_or_refused_within_a_second() {
    let (mut served, webhook) = serve_webhook(&[
        "--eval-threads",
        "1",
        "--eval-queue-wait",
        "200ms",
        "--resolve-timeout",
        "3s",
    ]);
    let heavy: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                post(
                    webhook,
                    "/karmada/interpret",
                    &attacks::aggregate_status(1024, 250),
                    Duration::from_secs(20),
                )
                .0
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let grpc = served.grpc.clone();
    let mut client = runtime.block_on(async {
        WorkloadResolverClient::connect(grpc)
            .await
            .expect("connects")
    });
    let replica =
        attacks::interpreter_context("InterpretReplica", &attacks::deployment(), Json::Null);
    let review = attacks::admission_review();
    for _ in 0..3 {
        let (status, took, _) = post(
            webhook,
            "/karmada/interpret",
            &replica,
            Duration::from_secs(5),
        );
        assert!(matches!(status, 200 | 429), "InterpretReplica: {status}");
        assert!(
            took < Duration::from_secs(1),
            "InterpretReplica after {took:?}"
        );
        let (status, took, _) = post(webhook, "/karta/validate", &review, Duration::from_secs(5));
        assert!(matches!(status, 200 | 429), "admission: {status}");
        assert!(took < Duration::from_secs(1), "admission after {took:?}");
        let started = Instant::now();
        let answer = runtime.block_on(client.resolve(pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
                object_json: attacks::deployment().to_string(),
                pods_json: Vec::new(),
            })),
            ..Default::default()
        }));
        let took = started.elapsed();
        match answer {
            Ok(_) => {}
            Err(s) => assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}"),
        }
        assert!(
            took < Duration::from_secs(1),
            "inline Resolve after {took:?}"
        );
    }
    for h in heavy {
        let status = h.join().expect("joins");
        assert!(matches!(status, 200 | 429), "AggregateStatus: {status}");
    }
    served.assert_up_within(1024 * MIB);
}

/// Bodies beyond the listener's budget are refused with 429 before they are read, memory
/// stays bounded, probes answer, and the webhook serves once the bodies are gone.
#[test]
fn bodies_beyond_the_budget_in_flight_are_refused_before_they_are_read() {
    let (mut served, webhook) = serve_webhook(&["--max-body-bytes-in-flight", "4194304"]);
    let mut held =
        attacks::unfinished_bodies(webhook, "/karmada/interpret", 40, MIB as usize, 512 * 1024);
    assert_eq!(held.len(), 40);
    let refused = attacks::refused_with_429(&mut held, Duration::from_secs(2));
    assert!(refused >= 36, "only {refused} of 40 refused");
    let (status, took) = {
        let started = Instant::now();
        (served.get("/livez").0, started.elapsed())
    };
    assert_eq!(
        (status, took < Duration::from_secs(1)),
        (200, true),
        "{took:?}"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let replica =
        attacks::interpreter_context("InterpretReplica", &attacks::deployment(), Json::Null);
    let (status, _, answer) = post(
        webhook,
        "/karmada/interpret",
        &replica,
        Duration::from_secs(5),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["response"]["replicas"], 3, "{answer}");
    served.assert_up_within(300 * MIB);
}

/// More slow request heads than the admin port's cap (and the webhook port's per-peer cap):
/// `/livez`, `/readyz` and a webhook request from the same host answer 10 of 10 within a
/// second; the probe listener serves the probes alone.
#[test]
fn slow_heads_do_not_lock_out_probes_or_webhook_requests() {
    let probe_port = free_port();
    let probe_listen = format!("127.0.0.1:{probe_port}");
    let (mut served, webhook) = serve_webhook(&[
        "--max-connections-per-peer",
        "64",
        "--probe-listen",
        &probe_listen,
    ]);
    let probes = SocketAddr::from(([127, 0, 0, 1], probe_port));
    let admin_attack = SlowHeads::start(served.admin, 300, Duration::from_secs(60));
    let webhook_attack = SlowHeads::start(webhook, 150, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    let replica =
        attacks::interpreter_context("InterpretReplica", &attacks::deployment(), Json::Null);
    for _ in 0..10 {
        for path in ["/livez", "/readyz"] {
            let (status, took, _) =
                attacks::request(served.admin, "GET", path, b"", Duration::from_secs(1));
            assert_eq!(status, 200, "{path} after {took:?}\n{}", served.log());
        }
        let (status, took, _) = post(
            webhook,
            "/karmada/interpret",
            &replica,
            Duration::from_secs(1),
        );
        assert_eq!(status, 200, "webhook after {took:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        admin_attack
            .opened
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 300,
        "the attack ran"
    );
    drop(admin_attack);
    drop(webhook_attack);
    assert_eq!(
        attacks::request(probes, "GET", "/livez", b"", Duration::from_secs(2)).0,
        200
    );
    assert_eq!(
        attacks::request(probes, "GET", "/readyz", b"", Duration::from_secs(2)).0,
        200
    );
    assert_eq!(
        attacks::request(probes, "GET", "/metrics", b"", Duration::from_secs(2)).0,
        404
    );
    served.assert_up_within(1024 * MIB);
}

/// A body trickled slower than the minimum rate is cut off with 408 once the grace has
/// passed (not held until the request timeout), and the webhook serves others meanwhile.
#[test]
fn a_trickled_body_is_cut_off_after_the_grace() {
    use std::io::{Read, Write};
    let (mut served, webhook) = serve_webhook(&[]);
    let mut s = std::net::TcpStream::connect(webhook).expect("connects");
    s.write_all(
        b"POST /karmada/interpret HTTP/1.1\r\nHost: kartograf\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
    )
    .expect("head");
    let started = Instant::now();
    let mut answer = Vec::new();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // Ten bytes every 200 ms (50 B/s) until the server answers or 10 s pass.
    while started.elapsed() < Duration::from_secs(10) {
        if s.write_all(b"{{{{{{{{{{").is_err() {
            break;
        }
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
            Err(_) => {}
        }
    }
    let took = started.elapsed();
    let head = String::from_utf8_lossy(&answer).to_string();
    assert!(head.starts_with("HTTP/1.1 408"), "{head:?} after {took:?}");
    assert!(
        took >= kartograf::server::http::BODY_GRACE && took < Duration::from_secs(5),
        "{took:?}"
    );
    let replica =
        attacks::interpreter_context("InterpretReplica", &attacks::deployment(), Json::Null);
    let (status, _, _) = post(
        webhook,
        "/karmada/interpret",
        &replica,
        Duration::from_secs(5),
    );
    assert_eq!(status, 200);
    served.assert_up_within(300 * MIB);
}
