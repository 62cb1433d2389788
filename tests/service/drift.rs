//! Live schema drift: the Kubernetes source watches the fake API server's CRDs, checks every
//! definition in effect on start and on every CRD change, and reports it in
//! `ListDefinitions` warnings and `kartograf_definition_drift`; paths that find nothing at run
//! time are counted in `kartograf_definition_path_empty_total`.

use crate::fake_apiserver::FakeApiServer;
use crate::serve_index;
use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::Index;
use kartograf::metrics::Metrics;
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::definitions_client::DefinitionsClient;
use kartograf::source::definitions::{Layers, Publisher};
use kartograf::source::kube as source;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOBSET: &str = "jobset-x-k8s-io-jobset-v1alpha2";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const SPEC_PATH: &str =
    "spec.structureDefinition.childComponents[0].specDefinition.podTemplateSpecPath";

/// The upstream JobSet CRD of tests/crds/, with the uid and generation the fake keys on.
fn jobset_crd() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/crds/jobset.json"
    ))
    .unwrap();
    let mut crd: Value = serde_json::from_str(&text).unwrap();
    crd["metadata"]["uid"] = json!("5e000000-0000-4000-8000-00000000c4d1");
    crd["metadata"]["generation"] = json!(1);
    crd
}

/// The same CRD with `replicatedJobs[].replicas` renamed to `count` (a new release).
fn drifted(mut crd: Value) -> Value {
    let item = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicatedJobs"]["items"]["properties"];
    let replicas = item.as_object_mut().unwrap().remove("replicas").unwrap();
    item["count"] = replicas;
    crd["metadata"]["generation"] = json!(2);
    crd
}

/// A JobSet whose replicated job has no template: its pod spec path finds nothing.
fn broken_jobset(label: &str) -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "broken", "namespace": "ml", "uid": "5e000000-0000-4000-8000-0000000000b1",
                     "labels": {"rev": label}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2}]},
        "status": {"conditions": []}})
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(8);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn metric_line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix))
}

async fn warnings(client: &mut DefinitionsClient<tonic::transport::Channel>) -> Vec<String> {
    let list = client
        .list_definitions(pb::ListDefinitionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    list.definitions
        .into_iter()
        .find(|d| d.name == JOBSET)
        .map(|d| d.warnings)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_changes_show_as_drift_and_empty_paths_are_counted() {
    let fake = FakeApiServer::new();
    fake.register("v1", "Pod", "pods", true);
    fake.register("batch/v1", "Job", "jobs", true);
    fake.register("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", true);
    register_crds(&fake);
    fake.upsert(jobset_crd());

    let settings = source::Settings {
        rediscover: Duration::from_millis(200),
        ..source::Settings::default()
    };
    let (index, report, _abort) = run_source(&fake, settings);
    let (channel, _shutdown) = serve_index(index.clone(), report.clone()).await;
    let mut client = DefinitionsClient::new(channel);
    let metrics = Metrics::new(index.clone(), report.clone());

    // On start: the JobSet definition is checked against the cluster's CRD and fits.
    eventually("the first drift check", || {
        report.drift().contains_key(JOBSET)
    })
    .await;
    assert!(fake.requests(CRDS, false) >= 1, "the CRDs were listed");
    assert!(warnings(&mut client).await.is_empty());
    let text = metrics.encode();
    assert_eq!(
        metric_line(
            &text,
            &format!("kartograf_definition_drift{{definition=\"{JOBSET}\"}}")
        ),
        Some(format!("kartograf_definition_drift{{definition=\"{JOBSET}\"}} 0").as_str()),
        "{text}"
    );
    // Built-in kinds are checked too (against the embedded Kubernetes schema); kinds
    // without a CRD in the cluster are not.
    let drift = report.drift();
    assert!(drift.contains_key("batch-job-v1"), "{drift:?}");
    assert!(
        !drift.contains_key("kubeflow-org-pytorchjob-v1"),
        "{drift:?}"
    );

    // A new release renames a field: the watch sees it, ListDefinitions and the metric say so.
    fake.upsert(drifted(jobset_crd()));
    eventually("drift after the CRD change", || {
        !report.drift_of(JOBSET).is_empty()
    })
    .await;
    let w = warnings(&mut client).await;
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("error: spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath: `.spec.replicatedJobs[].replicas`")
            && w[0].contains("has no field `replicas`"),
        "{w:?}"
    );
    let text = metrics.encode();
    assert!(
        text.contains(&format!(
            "kartograf_definition_drift{{definition=\"{JOBSET}\"}} 1"
        )),
        "{text}"
    );
    // Fixed again: the warning goes.
    fake.upsert(jobset_crd());
    eventually("drift cleared", || report.drift_of(JOBSET).is_empty()).await;
    assert!(warnings(&mut client).await.is_empty());

    // At run time: a JobSet whose replicated job has no template finds no pod spec. Counted
    // once per onset, not per graph change.
    let counter = format!(
        "kartograf_definition_path_empty_total{{definition=\"{JOBSET}\",path=\"{SPEC_PATH}\"}}"
    );
    eventually("synced", || index.synced()).await;
    fake.upsert(broken_jobset("1"));
    eventually("the broken JobSet", || {
        metric_line(&metrics.encode(), &counter).is_some()
    })
    .await;
    assert_eq!(
        metric_line(&metrics.encode(), &counter),
        Some(format!("{counter} 1").as_str())
    );
    let graph = index
        .published(&pb::ObjectRef {
            kind: "JobSet".into(),
            namespace: "ml".into(),
            name: "broken".into(),
            ..Default::default()
        })
        .map(|p| p.graph())
        .unwrap();
    let d = graph
        .diagnostics
        .iter()
        .find(|d| d.code == "spec_missing")
        .unwrap();
    assert_eq!(d.path, SPEC_PATH);
    let revision = index.board().revision();
    fake.upsert(broken_jobset("2"));
    eventually("the relabelled JobSet", || {
        index.board().revision() > revision
    })
    .await;
    assert_eq!(
        metric_line(&metrics.encode(), &counter),
        Some(format!("{counter} 1").as_str()),
        "still missing: not counted again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_cluster_reads_the_crds_of_the_kubeconfig_cluster() {
    let fake = FakeApiServer::new();
    register_crds(&fake);
    fake.upsert(drifted(jobset_crd()));
    let url = fake.serve_http().await;
    let dir = crate::temp_dir("kubeconfig");
    let kubeconfig = crate::fake_apiserver::write_kubeconfig(&dir, &url);
    let run = |args: &'static [&'static str]| {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
                .args(args)
                .env("KUBECONFIG", kubeconfig)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .unwrap()
        })
    };
    let out = run(&["check", "--cluster"]).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines().any(|l| l.starts_with("DRIFT")
            && l.contains("`.spec.replicatedJobs[].replicas`: jobset.x-k8s.io/v1alpha2 JobSet (cluster) has no field `replicas`")),
        "{text}"
    );
    assert!(fake.requests(CRDS, false) >= 1);

    let out = run(&["check", "--cluster", "-o", "json"]).await.unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let jobset = v["drift"]["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == JOBSET)
        .unwrap();
    assert_eq!(jobset["findings"][0]["code"], "unknown_field");
    assert_eq!(
        jobset["findings"][0]["field"],
        ".spec.replicatedJobs[].replicas"
    );
    assert_eq!(v["drift"]["crds"], json!(["cluster"]));
}

/// Aborts the task when dropped.
/// Serves CustomResourceDefinitions (none yet).
fn register_crds(fake: &FakeApiServer) {
    fake.register(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        true,
    );
}

/// The Kubernetes source over `fake` with a definitions publisher (so the CRD watch runs),
/// until the guard is dropped.
fn run_source(
    fake: &FakeApiServer,
    settings: source::Settings,
) -> (Arc<Index>, Arc<LoadReport>, impl Drop) {
    let index = Arc::new(Index::new(Catalog::default(), &[source::SOURCE]));
    let report = Arc::new(LoadReport::default());
    let publisher = Publisher::new(Layers::default(), index.clone(), report.clone());
    publisher.update(|_| {});
    let task = tokio::spawn(source::run(
        fake.client(),
        index.clone(),
        settings,
        Some(publisher),
    ));
    (index, report, scopeguard(task))
}

fn scopeguard(task: tokio::task::JoinHandle<()>) -> impl Drop {
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    Abort(task)
}

/// A cluster that refuses the CRD list is asked again with a growing delay (the watcher's
/// restart after each error is not progress).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_crd_list_is_retried_with_a_growing_delay() {
    let fake = FakeApiServer::new();
    fake.register("v1", "Pod", "pods", true);
    register_crds(&fake);
    fake.fail_lists(CRDS, 403, 0, usize::MAX);
    let settings = source::Settings {
        backoff: source::Backoff {
            initial: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_secs(30),
            jitter: false,
        },
        ..source::Settings::default()
    };
    let _running = run_source(&fake, settings);
    // Asked at about 0, 0.1, 0.3, 0.7 and 1.5 s: five times in 2 s (twenty at a fixed
    // 100 ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = fake.requests(CRDS, false);
    assert!(
        (2..=7).contains(&asked),
        "CRD list asked {asked} times in 2 s"
    );
}
