//! Attacks on the HTTP/1 ports (issue 42), shared by the hostile tests and `benches/doors.rs`:
//! loopback only, bounded in count and time. Plain blocking sockets on threads of their own.

#![allow(dead_code)]

use serde_json::{Value as Json, json};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Keeps `n` connections to `addr` sending an unfinished request head (one header line every
/// half second), reopening each one the server closes, until dropped or `limit` passed.
pub struct SlowHeads {
    stop: Arc<AtomicBool>,
    /// Connections (re)opened so far.
    pub opened: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SlowHeads {
    /// Starts the attack; returns once the first `n` connections are open.
    pub fn start(addr: SocketAddr, n: usize, limit: Duration) -> SlowHeads {
        assert!(addr.ip().is_loopback(), "loopback only");
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(AtomicU64::new(0));
        let (flag, count) = (stop.clone(), opened.clone());
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let until = Instant::now() + limit;
            let open = || -> Option<TcpStream> {
                let s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
                s.set_write_timeout(Some(Duration::from_millis(50))).ok()?;
                s.set_nonblocking(false).ok()?;
                let mut s = s;
                s.write_all(b"POST /karmada/interpret HTTP/1.1\r\nHost: x\r\n")
                    .ok()?;
                count.fetch_add(1, Ordering::Relaxed);
                Some(s)
            };
            let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| open()).collect();
            let _ = ready_tx.send(());
            let mut line = 0u64;
            while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(500));
                line += 1;
                for slot in conns.iter_mut() {
                    let alive = slot.as_mut().is_some_and(|s| {
                        s.write_all(format!("X-Slow-{line}: 1\r\n").as_bytes())
                            .is_ok()
                    });
                    if !alive {
                        *slot = open();
                    }
                }
            }
        });
        let _ = ready.recv_timeout(Duration::from_secs(60));
        SlowHeads {
            stop,
            opened,
            thread: Some(thread),
        }
    }
}

impl Drop for SlowHeads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Opens `n` connections to `addr` that each send a request head declaring a `declared`-byte
/// body to `path` and then `sent` bytes of it, and hold. Returns the open connections.
pub fn unfinished_bodies(
    addr: SocketAddr,
    path: &str,
    n: usize,
    declared: usize,
    sent: usize,
) -> Vec<TcpStream> {
    assert!(addr.ip().is_loopback(), "loopback only");
    let chunk = vec![b' '; 64 * 1024];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            continue;
        };
        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
        );
        if s.write_all(head.as_bytes()).is_err() {
            continue;
        }
        let mut left = sent;
        while left > 0 {
            let k = left.min(chunk.len());
            if s.write_all(&chunk[..k]).is_err() {
                break;
            }
            left -= k;
        }
        out.push(s);
    }
    out
}

/// How many of `conns` got an answer starting with `HTTP/1.1 429` within `within` each.
pub fn refused_with_429(conns: &mut [TcpStream], within: Duration) -> usize {
    let mut n = 0;
    for s in conns.iter_mut() {
        let _ = s.set_read_timeout(Some(within));
        let mut buf = [0u8; 12];
        if s.read_exact(&mut buf).is_ok() && &buf == b"HTTP/1.1 429" {
            n += 1;
        }
    }
    n
}

/// One HTTP/1.1 request: (status, latency, body); status 0 when it failed or took longer
/// than `timeout`.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> (u16, Duration, Vec<u8>) {
    let started = Instant::now();
    let fail = |started: Instant| (0, started.elapsed(), Vec::new());
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return fail(started);
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).is_err() || s.write_all(body).is_err() {
        return fail(started);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let took = started.elapsed();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let status = std::str::from_utf8(&raw[..split])
        .ok()
        .and_then(|h| h.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw.get(split + 4..).unwrap_or_default().to_vec();
    if took > timeout {
        return (0, took, body);
    }
    (status, took, body)
}

/// A Deployment as Karmada sends it.
pub fn deployment() -> Json {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "generation": 4},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
        ]}}},
    })
}

/// A `ResourceInterpreterContext` asking `operation` about `object`, with `extra` request
/// fields.
pub fn interpreter_context(operation: &str, object: &Json, extra: Json) -> Vec<u8> {
    let mut request = json!({
        "uid": format!("uid-{operation}"),
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "name": "web", "namespace": "shop",
        "operation": operation,
        "object": object,
    });
    if let (Some(r), Some(e)) = (request.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    serde_json::to_vec(&json!({
        "apiVersion": "config.karmada.io/v1alpha1",
        "kind": "ResourceInterpreterContext",
        "request": request,
    }))
    .expect("encodes")
}

/// An AggregateStatus request of a Deployment with `members` member statuses of `keys`
/// status keys each, every member's keys its own (the quadratic case of issue 42).
pub fn aggregate_status(members: usize, keys: usize) -> Vec<u8> {
    let items: Vec<Json> = (0..members)
        .map(|m| {
            let mut status = serde_json::Map::new();
            status.insert("replicas".to_owned(), json!(1));
            status.insert("readyReplicas".to_owned(), json!(1));
            for k in 2..keys {
                status.insert(format!("m{m}k{k}"), json!(k));
            }
            json!({"clusterName": format!("member-{m}"), "status": status, "applied": true})
        })
        .collect();
    interpreter_context(
        "AggregateStatus",
        &deployment(),
        json!({"aggregatedStatus": items}),
    )
}

/// A Karta admission review (validate) of a small valid-looking object.
pub fn admission_review() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "review-1",
            "kind": {"group": "run.ai", "version": "v1alpha1", "kind": "Karta"},
            "name": "k", "operation": "CREATE",
            "object": {"apiVersion": "run.ai/v1alpha1", "kind": "Karta",
                       "metadata": {"name": "k"}, "spec": {}},
        },
    }))
    .expect("encodes")
}

/// The `p`-th percentile (0..=100) of `samples` (sorted here).
pub fn percentile(samples: &mut [Duration], p: usize) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    let i = (samples.len() * p / 100).min(samples.len() - 1);
    samples[i]
}
