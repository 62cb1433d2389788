//! The web view on the admin port (`/ui/`, issue #32) in process: its JSON API answers from
//! the index, bounded; the live feed sends changes, resumes and starts over; writes are
//! refused; tokens guard the data. (The browser side is tests/python/test_ui.py.)

use super::{start, temp_dir};
use kartograf::definition::LoadReport;
use kartograf::server::{Shared, Tokens};
use serde_json::Value as Json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const LLAMA_TRAIN_UID: &str = "3f1c2a9e-0001-4000-8000-000000000001";

/// Serves the admin port (with the view) over `index`; `tokens` guard the view's data.
async fn admin(index: Arc<kartograf::index::Index>, tokens: Option<Arc<Tokens>>) -> SocketAddr {
    let (tx, rx) = tokio::sync::watch::channel(false);
    // The sender lives as long as the test process: the feed ends on shutdown only.
    std::mem::forget(tx);
    let shared = Shared::new(index, Arc::new(LoadReport::default()), rx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(kartograf::admin::serve_with_ui(
        listener,
        shared,
        None,
        tokens,
        kartograf::admin::Limits::default(),
    ));
    addr
}

/// One HTTP/1.1 request: (status, head, body).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("Content-Length: 0\r\n\r\n");
    stream.write_all(text.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

async fn api(addr: SocketAddr, path: &str) -> Json {
    let (status, _, body) = request(addr, "GET", path, &[]).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The live feed on one connection: events as (name, id, data).
struct Feed {
    lines: tokio::io::Lines<BufReader<tokio::net::TcpStream>>,
}

impl Feed {
    async fn open(addr: SocketAddr, last_event_id: Option<u64>) -> Feed {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let resume = last_event_id
            .map(|id| format!("Last-Event-ID: {id}\r\n"))
            .unwrap_or_default();
        let text = format!("GET /ui/api/events HTTP/1.1\r\nHost: {addr}\r\n{resume}\r\n");
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(stream).lines();
        // The head, up to the blank line.
        let status = lines.next_line().await.unwrap().unwrap();
        assert!(status.contains(" 200 "), "{status}");
        let mut event_stream = false;
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.is_empty() {
                break;
            }
            event_stream |= line.eq_ignore_ascii_case("content-type: text/event-stream");
        }
        assert!(event_stream);
        Feed { lines }
    }

    /// The next event within `secs` (chunk-size lines of the chunked body are skipped).
    async fn next(&mut self, secs: u64) -> (String, Option<u64>, Json) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let (mut name, mut id) = (String::new(), None);
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .expect("an event in time")
                .unwrap()
                .expect("the feed goes on");
            if let Some(v) = line.strip_prefix("event: ") {
                name = v.to_owned();
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("data: ") {
                return (name, id, serde_json::from_str(v).unwrap());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_from_the_index_and_the_feed_follows_it() {
    let h = start(1000).await;
    let addr = admin(h.index.clone(), None).await;
    let page = api(addr, "/ui/api/workloads?namespace=ml&kind=JobSet&sort=name").await;
    let names: Vec<&str> = page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"llama-train"), "{names:?}");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    let detail = api(addr, &format!("/ui/api/workload?uid={LLAMA_TRAIN_UID}")).await;
    assert_eq!(detail["workload"]["ref"]["name"], "llama-train");
    assert_eq!(detail["status"], "Running");
    assert!(
        detail["definition"]["text"]
            .as_str()
            .unwrap()
            .contains("jobset")
    );
    let overview = api(addr, "/ui/api/overview").await;
    assert_eq!(
        overview["workloads"].as_u64().unwrap() as usize,
        h.index.board().len()
    );

    // The overview's sums are kept between requests, but follow object writes that change
    // no graph: a GPU pod of a Job that is not cached holds GPUs no workload owns.
    let before = overview["unowned_total"].as_u64().unwrap();
    assert_eq!(api(addr, "/ui/api/overview").await["unowned_total"], before);
    let orphan = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan-gpu", "namespace": "ml",
            "uid": "0a0a0a0a-0000-4000-8000-00000000000a",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "gone",
                "uid": "0b0b0b0b-0000-4000-8000-00000000000b", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x",
            "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"}
    });
    std::fs::write(h.dir.join("orphan.yaml"), orphan.to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = api(addr, "/ui/api/overview").await;
        if now["unowned_total"].as_u64() == Some(before + 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the orphan GPU pod never showed: {now}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_file(h.dir.join("orphan.yaml")).unwrap();

    // The feed: hello, then the edit.
    let mut feed = Feed::open(addr, None).await;
    let (name, id, hello) = feed.next(5).await;
    assert_eq!(name, "hello");
    assert_eq!(hello["resumed"], false);
    let start_revision = id.unwrap();
    let path = h.dir.join("jobset.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replacen(
        "    team: foundation-models\n  name: llama-train\n",
        "    team: foundation-models\n    edited: yes\n  name: llama-train\n",
        1,
    );
    assert_ne!(edited, text);
    let t0 = Instant::now();
    std::fs::write(&path, edited).unwrap();
    loop {
        let (name, _, data) = feed.next(10).await;
        if name == "changes"
            && data["changes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["uid"] == LLAMA_TRAIN_UID && c["type"] == "modified")
        {
            break;
        }
    }
    eprintln!("file edit -> feed event: {:?}", t0.elapsed());
    // Resumed: the change again, then hello (resumed).
    let mut again = Feed::open(addr, Some(start_revision)).await;
    let (name, _, data) = again.next(5).await;
    assert_eq!(name, "changes");
    assert!(data["changes"].to_string().contains(LLAMA_TRAIN_UID));
    let (name, _, hello) = again.next(5).await;
    assert_eq!(name, "hello");
    assert_eq!(hello["resumed"], true);
    // A revision this process never had: reset, then hello.
    let mut over = Feed::open(addr, Some(1)).await;
    let (name, _, data) = over.next(5).await;
    assert_eq!(name, "reset");
    assert_eq!(data["since"], 1);
    assert_eq!(over.next(5).await.0, "hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_is_read_only_bounded_and_guarded() {
    let h = start(1000).await;
    // A hostile pod: a 1 MB label value, markup in its name.
    let big = "A".repeat(1 << 20);
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "<script>x</script>", "namespace": "hostile",
            "uid": "0bad0bad-0000-4000-8000-000000000001", "labels": {"big": big}},
        "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running"}
    });
    std::fs::write(h.dir.join("hostile.yaml"), pod.to_string()).unwrap();
    let addr = admin(h.index.clone(), None).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let page = api(addr, "/ui/api/workloads?q=script").await;
        if let Some(row) = page["rows"].as_array().unwrap().first() {
            break row.clone();
        }
        assert!(Instant::now() < deadline, "the hostile pod was not indexed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(row["name"], "<script>x</script>");
    let label = row["labels"][0][1].as_str().unwrap();
    assert!(label.len() < 400, "a row carries a cut label, not 1 MB");
    assert!(
        label.ends_with("(1048576 bytes)"),
        "{}",
        &label[label.len() - 40..]
    );

    // Pages are capped; bad parameters are 400 with the reason.
    let page = api(addr, "/ui/api/workloads?limit=100000").await;
    assert!(page["rows"].as_array().unwrap().len() <= 500);
    for bad in [
        "/ui/api/workloads?sort=evil",
        "/ui/api/workloads?offset=-1",
        "/ui/api/workloads?selector=a%20in%20(",
        "/ui/api/workloads?namespace=Not_A_Namespace",
    ] {
        let (status, head, body) = request(addr, "GET", bad, &[]).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(head.contains("content-type: application/json"), "{head}");
        assert!(serde_json::from_str::<Json>(&body).unwrap()["error"].is_string());
    }
    assert_eq!(
        request(addr, "GET", "/ui/api/workload?uid=nope", &[])
            .await
            .0,
        404
    );

    // Read-only, with the policy on every answer.
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let (status, head, _) = request(addr, method, "/ui/api/overview", &[]).await;
        assert_eq!(status, 405, "{method}");
        assert!(head.contains("allow: get, head"));
    }
    for path in ["/ui/", "/ui/app.js", "/ui/api/overview", "/ui/missing"] {
        let (_, head, _) = request(addr, "GET", path, &[]).await;
        assert!(
            head.contains("content-security-policy: default-src 'none'; script-src 'self';"),
            "{path}: {head}"
        );
        assert!(head.contains("x-content-type-options: nosniff"), "{path}");
    }

    // Tokens: the data needs the read scope; the assets do not.
    let dir = temp_dir("ui-tokens");
    let file = dir.join("tokens");
    std::fs::write(
        &file,
        "reader-token-0123456789 reader resolver\nprom-token-0123456789 prom metrics\n",
    )
    .unwrap();
    let tokens = Arc::new(Tokens::load(&file).unwrap());
    let guarded = admin(h.index.clone(), Some(tokens)).await;
    assert_eq!(request(guarded, "GET", "/ui/", &[]).await.0, 200);
    assert_eq!(request(guarded, "GET", "/livez", &[]).await.0, 200);
    let bearer = |t: &'static str| [("Authorization", t)];
    for (headers, want) in [
        (&[][..], 401),
        (&bearer("Bearer nope-nope-nope-nope")[..], 401),
        (&bearer("Bearer prom-token-0123456789")[..], 403),
        (&bearer("Bearer reader-token-0123456789")[..], 200),
    ] {
        assert_eq!(
            request(guarded, "GET", "/ui/api/overview", headers).await.0,
            want,
            "{headers:?}"
        );
    }
    assert_eq!(
        request(
            guarded,
            "GET",
            "/ui/api/definitions",
            &bearer("Bearer reader-token-0123456789")
        )
        .await
        .0,
        403,
        "the definitions page needs the definitions scope"
    );
}
