//! Service tests: the real gRPC server over loopback with the generated client, fed by a
//! watched manifest directory and a hot-reloaded definitions directory.

#[path = "../common/admission.rs"]
mod admission;
mod aggregator;
#[path = "../common/attacks.rs"]
mod attacks;
#[path = "../common/ports.rs"]
mod ports;
#[path = "../common/process.rs"]
mod process;
#[path = "../common/workloads.rs"]
mod workloads;

mod budget;
mod drift;
mod fake_apiserver;
mod gangs;
mod hardening;
mod hostile;
mod ingest;
mod karmada;
mod karta_admission;
mod karta_status;
mod kube;
mod observability;
mod patch;
mod pod_labels;
mod policy_admission;
mod sources;
mod strict;
mod synth_cluster;
mod ui;

use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::Index;
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::{self, Settings, Shared};
use kartograf::source::{definitions, manifests};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;

/// A running server on a temp copy of the demo cluster.
struct Harness {
    dir: PathBuf,
    defs: PathBuf,
    client: WorkloadResolverClient<Channel>,
    channel: Channel,
    index: Arc<Index>,
    _shutdown: tokio::sync::watch::Sender<bool>,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "kartograf-svc-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Serves `store` (an index, or a fake) on a loopback port; returns a lazy channel to it and
/// the shutdown switch.
async fn serve_index(
    store: Arc<dyn kartograf::server::Store>,
    report: Arc<LoadReport>,
) -> (Channel, tokio::sync::watch::Sender<bool>) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = Shared::new(store, report, rx);
    tokio::spawn(server::serve(
        listener,
        shared,
        Settings {
            listen: addr,
            ..Settings::default()
        },
    ));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    (channel, tx)
}

async fn start(history: usize) -> Harness {
    let dir = temp_dir("cluster");
    copy_dir(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster"),
        &dir,
    );
    let defs = temp_dir("defs");
    let report = Arc::new(LoadReport::default());
    let index =
        Arc::new(Index::new(Catalog::default(), &[manifests::SOURCE]).with_history(history));
    let layers = definitions::Layers::default();
    let publisher = definitions::Publisher::new(layers, index.clone(), report.clone());
    let mut reloader = definitions::Reloader::new(&defs, Default::default());
    reloader.publish(&publisher);
    tokio::spawn(manifests::run(index.clone(), dir.clone()));
    tokio::spawn(definitions::run(reloader, publisher));
    let (channel, tx) = serve_index(index.clone(), report).await;
    let client = WorkloadResolverClient::new(channel.clone());
    let h = Harness {
        dir,
        defs,
        client,
        channel,
        index,
        _shutdown: tx,
    };
    for _ in 0..200 {
        if h.index.synced() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h
}

fn by_name(kind: &str, ns: &str, name: &str) -> pb::ResolveRequest {
    pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        })),
        view: 0,
        cluster: String::new(),
    }
}

async fn next_event(stream: &mut tonic::Streaming<pb::WatchEvent>, secs: u64) -> pb::WatchEvent {
    tokio::time::timeout(Duration::from_secs(secs), stream.message())
        .await
        .expect("event within time")
        .expect("stream ok")
        .expect("stream open")
}

/// Reads events until one for `name` of type `kind` arrives.
async fn wait_for(
    stream: &mut tonic::Streaming<pb::WatchEvent>,
    kind: pb::EventType,
    name: &str,
) -> pb::WatchEvent {
    loop {
        let e = next_event(stream, 15).await;
        let n = e
            .workload
            .as_ref()
            .and_then(|w| w.r#ref.as_ref())
            .map(|r| r.name.clone())
            .unwrap_or_default();
        if e.r#type == kind as i32 && n == name {
            return e;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_by_workload_pod_and_inline_with_error_codes() {
    let mut h = start(1000).await;
    let w = h
        .client
        .resolve(by_name("JobSet", "ml", "llama-train"))
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    assert_eq!(w.pods.unwrap().desired, 3);
    assert_eq!(w.totals.unwrap().desired.unwrap().gpus, 12.0);
    assert!(w.revision > 0);

    let pod = pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Pod(pb::ObjectRef {
            namespace: "ml".into(),
            name: "llama-train-workers-1-0-x7k2p".into(),
            ..Default::default()
        })),
        view: pb::View::Summary as i32,
        cluster: String::new(),
    };
    let r = h.client.resolve(pod).await.unwrap().into_inner();
    let placement = r.pod.unwrap();
    assert_eq!(
        (
            placement.component.as_str(),
            placement.instance.as_str(),
            placement.gang_group.as_str()
        ),
        ("replicatedjob", "workers", "jobset")
    );
    assert!(r.workload.unwrap().components.is_empty(), "summary view");

    let job = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "x", "uid": "j1"},
        "spec": {"parallelism": 2, "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    let inline = pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
            object_json: job.to_string(),
            pods_json: vec![],
        })),
        view: 0,
        cluster: String::new(),
    };
    let w = h
        .client
        .resolve(inline)
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    assert_eq!(w.totals.unwrap().desired.unwrap().gpus, 2.0);

    let code =
        |r: Result<tonic::Response<pb::ResolveResponse>, tonic::Status>| r.unwrap_err().code();
    assert_eq!(
        code(h.client.resolve(by_name("JobSet", "ml", "absent")).await),
        Code::NotFound
    );
    assert_eq!(
        code(h.client.resolve(by_name("Mystery", "ml", "x")).await),
        Code::FailedPrecondition
    );
    let bad = pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
            object_json: "{nope".into(),
            pods_json: vec![],
        })),
        view: 0,
        cluster: String::new(),
    };
    assert_eq!(code(h.client.resolve(bad).await), Code::InvalidArgument);
    assert_eq!(
        code(h.client.resolve(pb::ResolveRequest::default()).await),
        Code::InvalidArgument
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_before_the_first_sync() {
    let index = Arc::new(Index::new(Catalog::embedded().unwrap(), &["never-synced"]));
    let (channel, _tx) = serve_index(index, Arc::new(LoadReport::default())).await;
    let mut client = WorkloadResolverClient::new(channel.clone());
    let err = client
        .resolve(by_name("JobSet", "ml", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_filters_and_totals() {
    let mut h = start(1000).await;
    let all = h
        .client
        .list(pb::ListRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let total = all.workloads.len();
    assert!(total > 20, "the demo cluster has every framework");
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = h
            .client
            .list(pb::ListRequest {
                page_size: 7,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.workloads.len() <= 7);
        seen.extend(page.workloads.iter().map(|w| w.r#ref.clone().unwrap().uid));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen.len(), total);
    let ml = h
        .client
        .list(pb::ListRequest {
            namespace: "ml".into(),
            kinds: vec!["jobset".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        ml.workloads
            .iter()
            .all(|w| w.r#ref.as_ref().unwrap().kind == "JobSet"
                && w.r#ref.as_ref().unwrap().namespace == "ml")
    );
    assert!(ml.workloads.len() >= 2);
    let bad = h
        .client
        .list(pb::ListRequest {
            label_selector: "a=b=c".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);

    let totals = h
        .client
        .totals(pb::TotalsRequest {
            group_by: pb::GroupBy::Namespace as i32,
            namespace: String::new(),
            cluster: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let sum: f64 = totals
        .rows
        .iter()
        .map(|r| r.totals.clone().unwrap().desired.unwrap().gpus)
        .sum();
    let direct: f64 = all
        .workloads
        .iter()
        .map(|w| w.totals.clone().unwrap().desired.unwrap().gpus)
        .sum();
    assert!((sum - direct).abs() < 1e-6);
    let by_kind = h
        .client
        .totals(pb::TotalsRequest {
            group_by: pb::GroupBy::Kind as i32,
            namespace: "ml".into(),
            cluster: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        by_kind
            .rows
            .iter()
            .any(|r| r.key == "jobset.x-k8s.io/JobSet" && r.workloads >= 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_snapshot_edits_deletes_resume_and_reset() {
    let mut h = start(1000).await;
    let mut stream = h
        .client
        .watch(pb::WatchRequest {
            namespace: "serving".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (added, synced_at) = read_snapshot(&mut stream).await;
    assert!(
        added.len() >= 2,
        "serving holds the web and chat-api Deployments"
    );

    // Scale the web Deployment to 5 in the file.
    let path = h.dir.join("deployment.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("replicas: 3", "replicas: 5", 1)).unwrap();
    let e = wait_for(&mut stream, pb::EventType::Modified, "web").await;
    assert_eq!(e.workload.unwrap().pods.unwrap().desired, 5);
    let after_edit = e.revision;

    // Delete it.
    std::fs::remove_file(&path).unwrap();
    let e = wait_for(&mut stream, pb::EventType::Deleted, "web").await;
    assert!(e.revision > after_edit);

    // Resume from the snapshot revision: only what changed since, coalesced (one DELETED).
    let mut resumed = h
        .client
        .watch(pb::WatchRequest {
            namespace: "serving".into(),
            since_revision: synced_at,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = next_event(&mut resumed, 10).await;
    assert_eq!(e.r#type, pb::EventType::Deleted as i32);
    assert_eq!(e.workload.unwrap().r#ref.unwrap().name, "web");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_outside_the_history_resets() {
    let mut h = start(2).await;
    let rev = h.index.board().revision();
    assert!(rev > 5, "loading the demo cluster made many changes");
    let mut s = h
        .client
        .watch(pb::WatchRequest {
            since_revision: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = next_event(&mut s, 10).await;
    assert_eq!(e.r#type, pb::EventType::Reset as i32);
    let mut n = 0;
    loop {
        let e = next_event(&mut s, 10).await;
        if e.r#type == pb::EventType::Synced as i32 {
            break;
        }
        n += 1;
    }
    assert!(n > 20, "a fresh snapshot follows RESET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscriber_blocks_nobody() {
    let mut h = start(10).await;
    // This one never reads.
    let _stalled = h
        .client
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut live = h
        .client
        .watch(pb::WatchRequest {
            namespace: "serving".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        if next_event(&mut live, 10).await.r#type == pb::EventType::Synced as i32 {
            break;
        }
    }
    let path = h.dir.join("deployment.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    for replicas in [4, 6, 8] {
        std::fs::write(
            &path,
            text.replacen("replicas: 3", &format!("replicas: {replicas}"), 1),
        )
        .unwrap();
        let e = wait_for(&mut live, pb::EventType::Modified, "web").await;
        assert_eq!(e.workload.unwrap().pods.unwrap().desired, replicas);
    }
    // Memory stays bounded: the history keeps at most 10 changes whatever the stalled one does.
    assert!(
        h.index
            .board()
            .changes_since_counted(0, &Default::default())
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definition_reload_keeps_the_last_good_and_applies_good_edits() {
    let mut h = start(1000).await;
    let mut stream = h
        .client
        .watch(pb::WatchRequest {
            namespace: "serving".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        if next_event(&mut stream, 10).await.r#type == pb::EventType::Synced as i32 {
            break;
        }
    }
    let embedded =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("catalog/apps-deployment-v1.yaml");
    let good = std::fs::read_to_string(&embedded)
        .unwrap()
        .replace("name: apps-deployment-v1", "name: custom-deployment");
    std::fs::write(h.defs.join("deployment.yaml"), &good).unwrap();
    let e = wait_for(&mut stream, pb::EventType::Modified, "web").await;
    assert_eq!(
        e.workload.unwrap().definition.unwrap().name,
        "custom-deployment"
    );

    // A broken edit is rejected; the last good version keeps serving.
    std::fs::write(
        h.defs.join("deployment.yaml"),
        good.replace(
            "replicasPath: .spec.replicas // 1",
            "replicasPath: 'repeat(.)'",
        ),
    )
    .unwrap();
    let mut defs =
        kartograf::proto::v1::definitions_client::DefinitionsClient::new(h.channel.clone());
    let mut last_error = String::new();
    for _ in 0..100 {
        let list = defs
            .list_definitions(pb::ListDefinitionsRequest {})
            .await
            .unwrap()
            .into_inner();
        let custom = list
            .definitions
            .iter()
            .find(|d| d.name == "custom-deployment")
            .expect("still active");
        last_error = custom.last_error.clone();
        if !last_error.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        last_error.contains("repeat"),
        "the rejection is visible: {last_error:?}"
    );
    let w = h
        .client
        .resolve(by_name("Deployment", "serving", "web"))
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    assert_eq!(
        w.definition.unwrap().name,
        "custom-deployment",
        "the last good version keeps serving"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_agrees_with_offline_resolution_on_every_demo_workload() {
    let mut h = start(1000).await;
    let catalog = Catalog::embedded().unwrap();
    let snapshot = kartograf::source::offline::Snapshot::load(
        &[h.dir.clone()],
        kartograf::expr::Limits::default(),
    )
    .unwrap();
    let roots = snapshot.roots(&catalog);
    let listed = h
        .client
        .list(pb::ListRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .workloads;
    assert_eq!(listed.len(), roots.len());
    for root in roots {
        let offline = snapshot.resolve(&catalog, &root, None).unwrap().workload;
        let served = listed
            .iter()
            .find(|w| w.r#ref.as_ref().unwrap().uid == *root.uid)
            .expect("served");
        let name = format!("{}/{}", root.kind, root.key());
        assert_eq!(served.pods, offline.pods, "{name}");
        assert_eq!(served.totals, offline.totals, "{name}");
        assert_eq!(served.gang, offline.gang, "{name}");
        assert_eq!(served.status, offline.status, "{name}");
    }
}

/// Reads up to SYNCED; returns the names of the ADDED workloads and SYNCED's revision.
async fn read_snapshot(stream: &mut tonic::Streaming<pb::WatchEvent>) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    loop {
        let e = next_event(stream, 10).await;
        if e.r#type == pb::EventType::Synced as i32 {
            return (names, e.revision);
        }
        assert_eq!(e.r#type, pb::EventType::Added as i32);
        names.push(e.workload.unwrap().r#ref.unwrap().name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_label_change_moves_a_workload_out_of_and_into_a_filtered_watch() {
    let mut h = start(1000).await;
    let selected = pb::WatchRequest {
        namespace: "serving".into(),
        label_selector: "app=web".into(),
        ..Default::default()
    };
    let mut filtered = h.client.watch(selected.clone()).await.unwrap().into_inner();
    let mut all = h
        .client
        .watch(pb::WatchRequest {
            namespace: "serving".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (names, synced_at) = read_snapshot(&mut filtered).await;
    assert_eq!(names, ["web"], "only the Deployment labelled app=web");
    read_snapshot(&mut all).await;

    // Relabel the Deployment (its metadata labels come first in the file, before the
    // selector's matchLabels).
    let path = h.dir.join("deployment.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let relabelled = text.replacen("    app: web\n", "    app: retired\n", 1);
    assert_ne!(relabelled, text);
    std::fs::write(&path, &relabelled).unwrap();
    let e = next_event(&mut filtered, 15).await;
    assert_eq!(
        e.r#type,
        pb::EventType::Deleted as i32,
        "left the view: {e:?}"
    );
    assert_eq!(e.workload.unwrap().r#ref.unwrap().name, "web");
    // An unfiltered subscriber still has it: for it this is a modification.
    let e = wait_for(&mut all, pb::EventType::Modified, "web").await;
    let left_at = e.revision;

    // Resuming from before the relabel also learns that it left.
    let mut resumed = h
        .client
        .watch(pb::WatchRequest {
            since_revision: synced_at,
            ..selected.clone()
        })
        .await
        .unwrap()
        .into_inner();
    let e = next_event(&mut resumed, 10).await;
    assert_eq!(e.r#type, pb::EventType::Deleted as i32);
    assert_eq!(e.revision, left_at);

    // Labelled back: it enters the view again as ADDED.
    std::fs::write(&path, &text).unwrap();
    let e = next_event(&mut filtered, 15).await;
    assert_eq!(
        e.r#type,
        pb::EventType::Added as i32,
        "entered the view: {e:?}"
    );
    assert_eq!(e.workload.unwrap().r#ref.unwrap().name, "web");

    // Resuming from after it left: it comes back as ADDED, not as a modification.
    let mut late = h
        .client
        .watch(pb::WatchRequest {
            since_revision: left_at,
            ..selected
        })
        .await
        .unwrap()
        .into_inner();
    let e = next_event(&mut late, 10).await;
    assert_eq!(e.r#type, pb::EventType::Added as i32);
}
mod consistency;
mod fake_store;
