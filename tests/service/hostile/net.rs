//! Connections that hold the ports without talking, and Watch subscribers that never read.

use super::{Served, scratch, write_atomically};
use kartograf::proto::v1 as pb;
use pb::workload_resolver_client::WorkloadResolverClient;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

const MIB: u64 = 1 << 20;

/// A copy of `examples/cluster` to serve (and edit).
fn cluster() -> PathBuf {
    let dir = scratch("net-cluster");
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    for e in std::fs::read_dir(from).expect("examples/cluster").flatten() {
        std::fs::copy(e.path(), dir.join(e.file_name())).expect("copy");
    }
    dir
}

fn grpc_addr(served: &Served) -> SocketAddr {
    served
        .grpc
        .trim_start_matches("http://")
        .parse()
        .expect("gRPC address")
}

/// Rewrites the Deployment `web` with a new label value every 20 ms until dropped: a steady
/// stream of changes for Watch.
struct Editor {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Editor {
    fn start(dir: &Path) -> Editor {
        let dir = dir.to_owned();
        let original = std::fs::read_to_string(dir.join("deployment.yaml")).expect("deployment");
        assert!(original.contains("\n    app: web\n"), "the label to edit");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            while !flag.load(Ordering::Relaxed) {
                n += 1;
                let text = original.replacen(
                    "\n    app: web\n",
                    &format!("\n    app: web\n    tick: \"{n}\"\n"),
                    1,
                );
                write_atomically(&dir, "deployment.yaml", text.as_bytes());
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Editor {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Editor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn channel(served: &Served) -> Channel {
    Endpoint::from_shared(served.grpc.clone())
        .expect("endpoint")
        .connect()
        .await
        .expect("connect")
}

fn watch_all() -> pb::WatchRequest {
    pb::WatchRequest {
        view: pb::View::Full as i32,
        ..Default::default()
    }
}

/// `n` Watch subscribers that never read, spread over connections of 500 streams each.
async fn non_readers(
    served: &Served,
    n: usize,
) -> (Vec<Channel>, Vec<tonic::Streaming<pb::WatchEvent>>) {
    let mut channels = Vec::new();
    let mut streams = Vec::new();
    for i in 0..n {
        if i % 500 == 0 {
            channels.push(channel(served).await);
        }
        let mut client = WorkloadResolverClient::new(channels.last().expect("a channel").clone());
        let stream = client.watch(watch_all()).await.expect("watch").into_inner();
        streams.push(stream);
    }
    (channels, streams)
}

/// A subscriber that reads everything, counting the events it got.
fn reader(
    channel: Channel,
) -> (
    Arc<AtomicU64>,
    tokio::task::JoinHandle<Option<tonic::Status>>,
) {
    let events = Arc::new(AtomicU64::new(0));
    let count = events.clone();
    let task = tokio::spawn(async move {
        let mut client = WorkloadResolverClient::new(channel);
        let mut stream = client.watch(watch_all()).await.ok()?.into_inner();
        loop {
            match stream.message().await {
                Ok(Some(_)) => {
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    });
    (events, task)
}

/// The value of `kartograf_watch_subscribers` on `/metrics`.
fn subscribers(served: &Served) -> Option<u64> {
    let (_, body) = served.get("/metrics");
    body.lines()
        .find(|l| l.starts_with("kartograf_watch_subscribers "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

/// RSS with `n` non-reading subscribers while changes flow, and after they leave: prints
/// the numbers (the figures of the issue: 10,000 subscribers cost 1.3 GB before the fix).
async fn measure(n: usize, args: &[&str]) -> (u64, u64, u64) {
    let dir = cluster();
    let mut all = vec!["--manifests", dir.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    let mut served = Served::start(&all);
    served.wait_ready(Duration::from_secs(60));
    let editor = Editor::start(&dir);
    // A reader first, so that the baseline includes the history and one subscriber.
    let (events, task) = reader(channel(&served).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = served.rss();
    let (mut with, mut after) = (0, 0);
    // Twice: memory kept after the first round is reused by the second, not added to.
    for round in 1..=2 {
        let (channels, streams) = non_readers(&served, n).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        with = served.rss();
        let before = events.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            events.load(Ordering::Relaxed) > before,
            "the reading subscriber still gets events"
        );
        drop(streams);
        drop(channels);
        tokio::time::sleep(Duration::from_secs(5)).await;
        after = served.rss();
        eprintln!(
            "round {round}: with them {} MiB, after they left {} MiB",
            with / MIB,
            after / MIB
        );
    }
    drop(editor);
    task.abort();
    served.assert_up_within(4096 * MIB);
    eprintln!(
        "{n} non-reading subscribers: RSS baseline {} MiB, with them {} MiB, after they left {} MiB, peak {} MiB",
        baseline / MIB,
        with / MIB,
        after / MIB,
        served.peak_rss() / MIB
    );
    (baseline, with, after)
}

/// The figure: 10,000 subscribers that never read (minutes on 2 cores: run by hand,
/// `cargo test --release --test service hostile::net::ten_thousand -- --ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn ten_thousand_non_reading_subscribers() {
    let n = std::env::var("NON_READERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    measure(n, &[]).await;
}

/// Reads until the peer closes (or fails); `false` when it is still open after `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let until = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// The HTTP/2 client preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_open_connections_are_closed_on_both_ports() {
    let dir = cluster();
    let mut served = Served::start(&[
        "--manifests",
        dir.to_str().expect("utf-8 path"),
        "--idle-timeout",
        "1s",
        "--handshake-timeout",
        "1s",
    ]);
    served.wait_ready(Duration::from_secs(60));
    let grpc = grpc_addr(&served);
    // A quiet Watch stream (nothing changes) is not idle: it outlives the idle timeout.
    let mut client = WorkloadResolverClient::new(channel(&served).await);
    let mut quiet = client
        .watch(pb::WatchRequest {
            namespace: "serving".into(),
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    while let Some(e) = quiet.message().await.expect("snapshot") {
        if e.r#type == pb::EventType::Synced as i32 {
            break;
        }
    }
    let connect =
        |addr| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    let cases: Vec<(&str, TcpStream)> = vec![
        ("gRPC, nothing sent", connect(grpc)),
        ("gRPC, preface and no request", {
            let mut s = connect(grpc);
            s.write_all(PREFACE).expect("preface");
            s
        }),
        ("gRPC, half a preface", {
            let mut s = connect(grpc);
            s.write_all(&PREFACE[..10]).expect("preface");
            s
        }),
        ("admin, nothing sent", connect(served.admin)),
        ("admin, half a request", {
            let mut s = connect(served.admin);
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\n")
                .expect("request");
            s
        }),
    ];
    let start = Instant::now();
    for (what, mut s) in cases {
        assert!(
            closed_within(&mut s, Duration::from_secs(6)),
            "{what}: still open"
        );
    }
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "closed by the timeout, not at once"
    );
    // Well past the idle timeout, the quiet Watch still gets the next change.
    let text = std::fs::read_to_string(dir.join("deployment.yaml")).expect("deployment");
    write_atomically(
        &dir,
        "deployment.yaml",
        text.replacen("\n    app: web\n", "\n    app: web\n    tick: \"1\"\n", 1)
            .as_bytes(),
    );
    let event = tokio::time::timeout(Duration::from_secs(10), quiet.message())
        .await
        .expect("an event within 10 s")
        .expect("the quiet Watch is still open")
        .expect("an event");
    assert_eq!(event.r#type, pb::EventType::Modified as i32);
    served.assert_up_within(512 * MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_closed_at_once() {
    let dir = cluster();
    let mut served = Served::start(&[
        "--manifests",
        dir.to_str().expect("utf-8 path"),
        "--max-connections",
        "8",
    ]);
    served.wait_ready(Duration::from_secs(60));
    let grpc = grpc_addr(&served);
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(grpc).expect("connect");
        s.write_all(PREFACE).expect("preface");
        held.push(s);
    }
    // Accepted in order: the ninth is over the limit.
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = TcpStream::connect(grpc).expect("connect");
    assert!(
        closed_within(&mut extra, Duration::from_secs(3)),
        "the ninth connection is closed"
    );
    for s in &mut held {
        assert!(
            !closed_within(s, Duration::from_millis(50)),
            "held ones stay"
        );
    }
    drop(held);
    // Their places are free again.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let mut client = WorkloadResolverClient::new(channel(&served).await);
        let listed = client
            .list(pb::ListRequest::default())
            .await
            .map(|r| r.into_inner().workloads.len());
        if listed.as_ref().is_ok_and(|n| *n > 0) {
            break;
        }
        assert!(Instant::now() < until, "no place freed: {listed:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    served.assert_up_within(512 * MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_subscribers_that_do_not_read_are_cut_off_and_their_memory_returns() {
    const N: usize = 400;
    let dir = cluster();
    let mut served = Served::start(&[
        "--manifests",
        dir.to_str().expect("utf-8 path"),
        "--watch-stall-timeout",
        "1s",
    ]);
    served.wait_ready(Duration::from_secs(60));
    let editor = Editor::start(&dir);
    let (events, task) = reader(channel(&served).await);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let baseline = served.rss();
    let (channels, mut streams) = non_readers(&served, N).await;
    assert!(subscribers(&served).is_some_and(|n| n > N as u64));
    // Cut within twice the stall timeout and a scan: only the reader is left.
    let until = Instant::now() + Duration::from_secs(20);
    while subscribers(&served) != Some(1) {
        assert!(
            Instant::now() < until,
            "non-readers still subscribed: {:?}",
            subscribers(&served)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A cut subscriber finds an error after what had reached it.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match streams[0].message().await {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .expect("the stream ends");
    assert!(ended.is_some(), "ended with an error, not as complete");
    let before = events.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        events.load(Ordering::Relaxed) > before,
        "the reading subscriber still gets events"
    );
    assert!(!task.is_finished(), "the reader was not cut");
    drop(streams);
    drop(channels);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = served.rss();
    drop(editor);
    task.abort();
    eprintln!(
        "{N} non-readers: RSS baseline {} MiB, after {} MiB, peak {} MiB",
        baseline / MIB,
        after / MIB,
        served.peak_rss() / MIB
    );
    assert!(
        after <= baseline + 32 * MIB,
        "RSS {} MiB after the subscribers left, baseline {} MiB",
        after / MIB,
        baseline / MIB
    );
    served.assert_up_within(baseline + 256 * MIB);
}
