//! Observability: the admin port (`/livez`, `/readyz`, `/metrics`) of a real `kartograf serve`
//! process, `/readyz` before the first sync, and spans exported to an in-process OTLP
//! collector.

use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::Shared;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

/// A `kartograf serve` process; killed when dropped.
pub(crate) struct Process {
    pub child: Child,
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gRPC and admin addresses from the startup line, in text or JSON format.
fn startup_addresses(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
        let fields = json.get("fields")?;
        if fields.get("message")?.as_str()? != "kartograf serving" {
            return None;
        }
        let grpc = fields.get("grpc")?.as_str()?.parse().ok()?;
        let admin = fields.get("admin")?.as_str()?.parse().ok()?;
        return Some((grpc, admin));
    }
    if !line.contains("kartograf serving") {
        return None;
    }
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|t| t.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    Some((field("grpc=")?, field("admin=")?))
}

/// Starts the binary over the demo cluster on ephemeral ports and waits for its startup line.
fn spawn(log_format: &str, env: &[(&str, String)]) -> Process {
    let cluster = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    spawn_serving(&cluster, &[], log_format, env)
}

/// Starts `kartograf serve --manifests cluster ARGS…` on ephemeral ports and waits for its
/// startup line.
pub(crate) fn spawn_serving(
    cluster: &std::path::Path,
    args: &[&std::ffi::OsStr],
    log_format: &str,
    env: &[(&str, String)],
) -> Process {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kartograf"));
    command
        .args(["serve", "--manifests"])
        .arg(cluster)
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--log-level", "info", "--log-format", log_format])
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("spawn kartograf");
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    // Keeps draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sent = false;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent && let Some(addrs) = startup_addresses(&line) {
                let _ = tx.send(addrs);
                sent = true;
            }
        }
    });
    let (grpc, admin) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("startup line with the bound addresses");
    Process { child, grpc, admin }
}

/// A minimal HTTP/1.1 GET: (status, content type, body).
pub(crate) async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

/// Every sample of `name`: its labels and value.
fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = if let Some(rest) = rest.strip_prefix('{') {
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            (labels, value)
        } else if let Some(value) = rest.strip_prefix(' ') {
            ("", value)
        } else {
            continue;
        };
        let mut map = BTreeMap::new();
        // Label values here hold no `",` sequence.
        for pair in labels.split("\",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once("=\"").expect("label k=\"v\"");
            map.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
        }
        out.push((map, value.trim().parse().expect("numeric sample")));
    }
    out
}

/// The value of the one sample of `name` whose labels include `want` (0 when none).
fn value(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    let hits: Vec<f64> = samples(text, name)
        .into_iter()
        .filter(|(l, _)| {
            want.iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .collect();
    assert!(
        hits.len() <= 1,
        "{name} {want:?} matches {} samples",
        hits.len()
    );
    hits.first().copied().unwrap_or(0.0)
}

async fn wait_ready(admin: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _, body) = get(admin, "/readyz").await;
        if status == 200 {
            return;
        }
        assert_eq!(status, 503, "/readyz: {body}");
        assert!(Instant::now() < deadline, "not ready after 30s: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn client(grpc: SocketAddr) -> WorkloadResolverClient<tonic::transport::Channel> {
    WorkloadResolverClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect gRPC")
}

fn by_name(kind: &str, ns: &str, name: &str) -> pb::ResolveRequest {
    super::by_name(kind, ns, name)
}

fn pod_names(components: &[pb::Component], out: &mut Vec<String>) {
    for c in components {
        for i in &c.instances {
            out.extend(i.pod_list.iter().map(|p| p.name.clone()));
            pod_names(&i.children, out);
        }
    }
}

const RESOLVE: &str = "/kartograf.v1.WorkloadResolver/Resolve";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_port_serves_health_and_metrics_that_agree_with_resolve() {
    let p = spawn("text", &[]);
    wait_ready(p.admin).await;
    let mut c = client(p.grpc).await;

    assert_eq!(get(p.admin, "/livez").await.0, 200);
    assert_eq!(get(p.admin, "/nope").await.0, 404);

    let w = c
        .resolve(by_name("JobSet", "ml", "llama-train"))
        .await
        .expect("resolve")
        .into_inner()
        .workload
        .expect("workload");
    let r = w.r#ref.clone().expect("ref");
    let totals = w.totals.clone().expect("totals");
    let mut pods = Vec::new();
    pod_names(&w.components, &mut pods);
    assert!(!pods.is_empty(), "the demo JobSet has pods");

    let (status, content_type, text) = get(p.admin, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(text.ends_with("# EOF\n"), "OpenMetrics end marker");

    // GPUs, pods and phase equal what Resolve says.
    let id = [
        ("namespace", r.namespace.as_str()),
        ("kind", r.kind.as_str()),
        ("name", r.name.as_str()),
    ];
    let with = |k: &'static str, v: &'static str| {
        let mut l = id.to_vec();
        l.push((k, v));
        l
    };
    let desired = totals.desired.expect("desired").gpus;
    assert!(desired > 0.0);
    assert_eq!(
        value(&text, "kartograf_workload_gpus", &with("state", "desired")),
        desired
    );
    assert_eq!(
        value(&text, "kartograf_workload_gpus", &with("state", "held")),
        totals.current.expect("current").gpus
    );
    let counts = w.pods.expect("pods");
    assert_eq!(
        value(&text, "kartograf_workload_pods", &with("state", "ready")),
        f64::from(counts.ready)
    );
    let phase = pb::Phase::try_from(w.status.expect("status").phase).expect("phase");
    let phase_series: Vec<_> = samples(&text, "kartograf_workload_phase")
        .into_iter()
        .filter(|(l, _)| {
            id.iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(phase_series.len(), 1, "one phase series per workload");
    assert_eq!(
        phase_series[0].0["phase"].to_uppercase(),
        phase.as_str_name().trim_start_matches("PHASE_")
    );

    // Every pod of the workload is joined to it, in the component a pod Resolve names.
    for pod in &pods {
        let by_pod = pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Pod(pb::ObjectRef {
                namespace: r.namespace.clone(),
                name: pod.clone(),
                ..Default::default()
            })),
            view: pb::View::Summary as i32,
            cluster: String::new(),
        };
        let answer = c.resolve(by_pod).await.expect("resolve pod").into_inner();
        let owner = answer.workload.and_then(|w| w.r#ref).expect("owner");
        let component = answer.pod.expect("placement").component;
        let joined: Vec<_> = samples(&text, "kartograf_pod_workload_info")
            .into_iter()
            .filter(|(l, _)| l["namespace"] == r.namespace && &l["pod"] == pod)
            .collect();
        assert_eq!(joined.len(), 1, "one join series for {pod}");
        let (labels, v) = &joined[0];
        assert_eq!(*v, 1.0);
        assert_eq!(labels["workload_kind"], owner.kind);
        assert_eq!(labels["workload_name"], owner.name);
        assert_eq!(labels["workload_uid"], owner.uid);
        assert_eq!(labels["component"], component);
        assert!(!labels["uid"].is_empty());
    }

    let sizes = value(&text, "kartograf_index_workloads", &[]);
    assert!(sizes > 1.0, "the demo cluster holds many workloads");
    assert!(value(&text, "kartograf_index_pods", &[]) >= pods.len() as f64);

    // RPC counters: one more OK Resolve, one more NOT_FOUND.
    let (_, _, text) = get(p.admin, "/metrics").await;
    let ok_before = value(
        &text,
        "kartograf_rpc_requests_total",
        &[("method", RESOLVE), ("code", "OK")],
    );
    let nf_before = value(
        &text,
        "kartograf_rpc_requests_total",
        &[("method", RESOLVE), ("code", "NOT_FOUND")],
    );
    c.resolve(by_name("JobSet", "ml", "llama-train"))
        .await
        .expect("resolve");
    let err = c
        .resolve(by_name("JobSet", "ml", "absent"))
        .await
        .expect_err("absent");
    assert_eq!(err.code(), Code::NotFound);
    let (_, _, text) = get(p.admin, "/metrics").await;
    let ok_after = value(
        &text,
        "kartograf_rpc_requests_total",
        &[("method", RESOLVE), ("code", "OK")],
    );
    let nf_after = value(
        &text,
        "kartograf_rpc_requests_total",
        &[("method", RESOLVE), ("code", "NOT_FOUND")],
    );
    assert_eq!(ok_after - ok_before, 1.0);
    assert_eq!(nf_after - nf_before, 1.0);
    assert_eq!(
        value(
            &text,
            "kartograf_rpc_duration_seconds_count",
            &[("method", RESOLVE)]
        ),
        ok_after + nf_after,
        "one latency observation per Resolve"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_first_sync_and_shutdown() {
    let index = Arc::new(Index::new(
        Catalog::embedded().expect("catalog"),
        &["never-synced"],
    ));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let admin = tokio::spawn(kartograf::admin::serve(listener, shared));

    let (status, _, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("never-synced"), "{body}");
    assert_eq!(get(addr, "/livez").await.0, 200);
    let (_, _, metrics) = get(addr, "/metrics").await;
    assert_eq!(value(&metrics, "kartograf_index_synced", &[]), 0.0);

    index.batch().mark_synced("never-synced");
    assert_eq!(get(addr, "/readyz").await.0, 200);
    let (_, _, metrics) = get(addr, "/metrics").await;
    assert_eq!(value(&metrics, "kartograf_index_synced", &[]), 1.0);

    tx.send(true).expect("shutdown");
    let (status, _, body) = get(addr, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("shutting down"), "{body}");
    admin.abort();
}

/// Deleted workloads leave no series behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_series_follow_the_index() {
    let index = Arc::new(Index::new(Catalog::embedded().expect("catalog"), &[]));
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let (docs, _) = kartograf::source::manifests::read_once(&dir);
    index.batch().write(Write::Reset {
        source: "test".into(),
        items: docs.into_iter().map(Ok).collect(),
    });
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx);
    let text = shared.metrics.encode();
    let named = |text: &str| {
        samples(text, "kartograf_pod_workload_info")
            .into_iter()
            .filter(|(l, _)| l["workload_name"] == "llama-train")
            .count()
    };
    assert!(named(&text) > 0);
    let uid = index
        .published(&pb::ObjectRef {
            kind: "JobSet".into(),
            namespace: "ml".into(),
            name: "llama-train".into(),
            ..Default::default()
        })
        .map(|p| p.graph())
        .and_then(|w| w.r#ref.clone())
        .expect("the demo JobSet")
        .uid;
    index.batch().write(Write::delete(&uid));
    let text = shared.metrics.encode();
    assert_eq!(named(&text), 0);
    assert!(
        !samples(&text, "kartograf_workload_gpus")
            .iter()
            .any(|(l, _)| l["name"] == "llama-train" && l["kind"] == "JobSet")
    );
}

/// GPU pods outside a component or outside every workload stay visible: a pod no component
/// claims joins its workload with `component=""`, a pod in no workload is exported with its GPUs
/// and topmost controller until a workload takes it in (tests/python/strays.yaml).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_pods_outside_workloads_are_exported() {
    let index = Arc::new(Index::new(Catalog::embedded().expect("catalog"), &[]));
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut docs = Vec::new();
    let files = kartograf::folder::walk(
        &root.join("examples/cluster"),
        kartograf::folder::is_manifest,
    );
    let paths = files.files.into_iter().map(|(p, _)| p);
    for file in paths.chain([root.join("tests/python/strays.yaml")]) {
        let text = std::fs::read_to_string(file).expect("read");
        docs.extend(kartograf::manifest::parse_documents(&text).expect("parse"));
    }
    index.batch().write(Write::reset("test", &docs));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx);
    let joined = |text: &str, pod: &str| {
        let found: Vec<_> = samples(text, "kartograf_pod_workload_info")
            .into_iter()
            .filter(|(l, _)| l["pod"] == pod)
            .map(|(l, _)| l)
            .collect();
        assert!(found.len() <= 1, "{pod} joined once: {found:?}");
        found.into_iter().next()
    };

    let text = shared.metrics.encode();
    // Every join line names its workload's API version.
    assert!(
        samples(&text, "kartograf_pod_workload_info")
            .iter()
            .all(|(l, _)| !l["workload_api_version"].is_empty())
    );
    // Claimed by no component: still joined to JobSet ml/llama-train, whose held GPUs count it.
    let debug = joined(&text, "llama-train-debug-7kq2d").expect("the unclaimed pod is joined");
    assert_eq!(debug["workload_kind"], "JobSet");
    assert_eq!(debug["workload_name"], "llama-train");
    assert_eq!(debug["workload_api_version"], "jobset.x-k8s.io/v1alpha2");
    assert_eq!(debug["component"], "");
    let held = [
        ("namespace", "ml"),
        ("kind", "JobSet"),
        ("name", "llama-train"),
        ("state", "held"),
    ];
    assert_eq!(value(&text, "kartograf_workload_gpus", &held), 16.0);
    assert_eq!(
        value(
            &text,
            "kartograf_evaluation_diagnostics",
            &[("code", "unattributed_pod")]
        ),
        1.0
    );
    // A controller kind without a definition (Flyte): the pod is its own Pod workload.
    let flyte = joined(&text, "embed-corpus-n1-0").expect("the Flyte pod is joined");
    assert_eq!(flyte["workload_kind"], "Pod");
    assert_eq!(flyte["workload_api_version"], "v1");
    // Its Job is gone: in no workload, exported with its GPUs and controller, and only it.
    assert!(joined(&text, "llama-eval-workers-0-0-h7t2q").is_none());
    let unowned = samples(&text, "kartograf_unowned_pod_gpus");
    assert_eq!(unowned.len(), 1, "{unowned:?}");
    let (labels, gpus) = &unowned[0];
    assert_eq!(*gpus, 4.0);
    assert_eq!(labels["namespace"], "ml");
    assert_eq!(labels["pod"], "llama-eval-workers-0-0-h7t2q");
    assert_eq!(labels["uid"], "3f1c2a9e-0041-4000-8000-000000000003");
    assert_eq!(labels["owner_kind"], "Job");
    assert_eq!(labels["owner_name"], "llama-eval-workers-0");

    // The Job shows up (as a root of its own: its JobSet is still gone) and takes the pod in.
    let job = serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "llama-eval-workers-0",
            "namespace": "ml",
            "uid": "3f1c2a9e-0041-4000-8000-000000000002",
        },
        "spec": {"parallelism": 1, "completions": 1, "template": {"spec": {"containers": []}}},
    });
    assert!(
        index
            .batch()
            .write(Write::apply("test", job.clone()))
            .is_empty()
    );
    let text = shared.metrics.encode();
    assert!(samples(&text, "kartograf_unowned_pod_gpus").is_empty());
    let eval = joined(&text, "llama-eval-workers-0-0-h7t2q").expect("joined to its Job");
    assert_eq!(eval["workload_kind"], "Job");
    assert_eq!(eval["workload_name"], "llama-eval-workers-0");

    // A pod in no workload that holds no GPU (terminated) is not exported.
    index
        .batch()
        .write(Write::delete("3f1c2a9e-0041-4000-8000-000000000002"));
    let text = shared.metrics.encode();
    assert_eq!(samples(&text, "kartograf_unowned_pod_gpus").len(), 1);
    let mut finished = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "llama-eval-workers-0-0-h7t2q")
        .cloned()
        .expect("the orphan pod");
    finished["status"]["phase"] = "Succeeded".into();
    assert!(
        index
            .batch()
            .write(Write::apply("test", finished.clone()))
            .is_empty()
    );
    let text = shared.metrics.encode();
    assert!(samples(&text, "kartograf_unowned_pod_gpus").is_empty());
}

/// An OTLP/gRPC trace collector that hands every export to the test.
struct Collector(tokio::sync::mpsc::UnboundedSender<ExportTraceServiceRequest>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let _ = self.0.send(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

fn string_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| match &a.value {
            Some(v) => match &v.value {
                Some(AnyValue::StringValue(s)) => Some(s.as_str()),
                _ => None,
            },
            None => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_spans_reach_an_otlp_collector() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let mut p = spawn(
        "json",
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))],
    );
    wait_ready(p.admin).await;
    let mut c = client(p.grpc).await;
    c.resolve(by_name("JobSet", "ml", "llama-train"))
        .await
        .expect("resolve");

    // SIGTERM: the server flushes its batched spans before exiting.
    let killed = Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let exit = tokio::task::spawn_blocking(move || {
        let status = p.child.wait();
        (status, p)
    })
    .await
    .expect("join");
    assert!(exit.0.expect("wait").success());

    let mut exports = Vec::new();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
        exports.push(e);
    }
    let mut found = false;
    for resource_spans in exports.iter().flat_map(|e| &e.resource_spans) {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| string_attr(&r.attributes, "service.name"));
        for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
            if span.name == RESOLVE {
                assert_eq!(service, Some("kartograf"));
                assert_eq!(string_attr(&span.attributes, "rpc.method"), Some(RESOLVE));
                assert_eq!(
                    string_attr(&span.attributes, "rpc.grpc.status_code"),
                    Some("OK")
                );
                found = true;
            }
        }
    }
    assert!(found, "no Resolve span among {} exports", exports.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_objects_are_counted_by_source_and_reason() {
    // One nameless document, one identity twice in a file, and (with --namespace ml) one
    // pod of another namespace: each reason counted once, under the manifests source.
    let dir = std::env::temp_dir().join(format!("kartograf-skips-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let pod = |ns: &str, name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}, uid: {ns}-{name}}}\nspec: {{containers: []}}\n"
        )
    };
    let text = [
        pod("ml", "a"),
        pod("ml", "a"),
        "apiVersion: v1\nkind: Pod\nmetadata: {namespace: ml}\n".to_owned(),
        pod("other", "b"),
    ]
    .join("---\n");
    std::fs::write(dir.join("pods.yaml"), text).expect("write");
    let p = spawn_serving(&dir, &["--namespace".as_ref(), "ml".as_ref()], "text", &[]);
    wait_ready(p.admin).await;
    let (_, _, text) = get(p.admin, "/metrics").await;
    let skipped = |reason: &str| {
        value(
            &text,
            "kartograf_objects_skipped_total",
            &[("source", "manifests"), ("reason", reason)],
        )
    };
    assert_eq!(skipped("no_kind_or_name"), 1.0, "{text}");
    assert_eq!(skipped("duplicate"), 1.0);
    assert_eq!(skipped("other_namespace"), 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}
