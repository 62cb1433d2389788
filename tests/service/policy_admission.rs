//! Policies at admission (issue 38): AdmissionReview v1 requests as the API server sends them,
//! over a real loopback listener, to `POST /mutate/workloads` and `POST /mutate/pods`. The
//! workload's patch is applied with an independent RFC 6902 implementation (`json-patch`) and
//! planned again (nothing left to write); pods get their workload's labels as the index
//! places them.

use crate::karmada::exchange;
use kartograf::definition::{Catalog, LoadReport, catalog::load_embedded};
use kartograf::index::{Index, Write};
use kartograf::patch::Intents;
use kartograf::policy::{Live, PolicySet};
use kartograf::server::Shared;
use kartograf::webhook::{self, mutate};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

const POLICIES: &str = r#"
policies:
  - name: ml-to-kai
    namespaces: [ml]
    set:
      schedulerName: kai-scheduler
      labels: {kai.scheduler/queue: team-ml}
"#;

fn cluster_docs() -> Vec<Json> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster/jobset.yaml"),
    )
    .unwrap();
    kartograf::manifest::parse_documents(&text).unwrap()
}

/// The embedded catalog (compiled once per test binary).
pub(crate) fn catalog() -> Catalog {
    static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    CATALOG
        .get_or_init(|| {
            let (embedded, errors) = load_embedded();
            assert!(errors.is_empty());
            Catalog::from_layers(1, [embedded, Vec::new(), Vec::new()])
        })
        .clone()
}

/// Serves the webhook routes over `shared` on a loopback port: the address and the task.
pub(crate) async fn listen(
    shared: Shared,
) -> (
    SocketAddr,
    tokio::task::JoinHandle<Result<(), webhook::tls::TlsError>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(webhook::serve(
        listener,
        shared,
        webhook::Settings::default(),
    ));
    (addr, server)
}

/// A webhook listener over an index holding the demo JobSet, with [`POLICIES`].
async fn serve() -> (SocketAddr, Arc<Index>, tokio::sync::watch::Sender<bool>) {
    let index: Arc<Index> = Arc::new(Index::new(catalog(), &[]));
    assert!(
        index
            .batch()
            .write(Write::reset("demo", &cluster_docs()))
            .is_empty()
    );
    let dir = std::env::temp_dir().join(format!("kartograf-policies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("policies.yaml");
    std::fs::write(&file, POLICIES).unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx)
        .with_policies(Live::load(&file).unwrap());
    let (addr, _server) = listen(shared).await;
    (addr, index, tx)
}

/// The review the API server sends for a CREATE of `object`.
pub(crate) fn review(
    uid: &str,
    gvk: (&str, &str, &str),
    namespace: &str,
    object: &Json,
) -> Vec<u8> {
    let (group, version, kind) = gvk;
    let resource = format!("{}s", kind.to_lowercase());
    let request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": object["metadata"]["name"],
        "namespace": namespace,
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
        "object": object,
        "oldObject": null,
        "dryRun": false,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    });
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
        .unwrap()
}

/// The response, checked as the API server's webhook client reads it; the decoded patch.
pub(crate) async fn ask(
    addr: SocketAddr,
    path: &str,
    uid: &str,
    body: &[u8],
) -> (Json, Option<Json>) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, answer) = exchange(stream, "POST", path, body).await;
    crate::admission::read_answer(uid, code, &answer)
}

pub(crate) fn apply(doc: &Json, ops: &Json) -> Json {
    let p: json_patch::Patch = serde_json::from_value(ops.clone()).expect("RFC 6902");
    let mut out = doc.clone();
    json_patch::patch(&mut out, &p).expect("the patch applies");
    out
}

fn new_jobset() -> Json {
    let mut js = cluster_docs()
        .into_iter()
        .find(|d| d["kind"] == "JobSet")
        .unwrap();
    js["metadata"] = json!({"name": "new-train", "namespace": "ml"});
    js.as_object_mut().unwrap().remove("status");
    js
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_covered_workload_gets_the_policy_on_every_pod_template_and_others_pass_unchanged() {
    let (addr, _index, _stop) = serve().await;
    let js = new_jobset();
    let gvk = ("jobset.x-k8s.io", "v1alpha2", "JobSet");
    let (_, patch) = ask(addr, mutate::WORKLOADS, "w1", &review("w1", gvk, "ml", &js)).await;
    let patched = apply(&js, &patch.expect("a patch"));
    for rj in patched["spec"]["replicatedJobs"].as_array().unwrap() {
        let t = &rj["template"]["spec"]["template"];
        assert_eq!(t["spec"]["schedulerName"], "kai-scheduler", "{t}");
        assert_eq!(t["metadata"]["labels"]["kai.scheduler/queue"], "team-ml");
    }
    // Planned again on the patched object, nothing is left to write.
    let def = catalog()
        .lookup("jobset.x-k8s.io/v1alpha2", "JobSet")
        .unwrap()
        .definition;
    let intents = Intents {
        scheduler_name: Some("kai-scheduler".into()),
        labels: BTreeMap::from([("kai.scheduler/queue".into(), "team-ml".into())]),
        ..Intents::default()
    };
    assert!(
        kartograf::patch::plan(&def, &patched, &intents)
            .unwrap()
            .is_empty()
    );
    // Already carrying the intents: admitted without a patch.
    let (_, again) = ask(
        addr,
        mutate::WORKLOADS,
        "w2",
        &review("w2", gvk, "ml", &patched),
    )
    .await;
    assert!(again.is_none());
    // Another namespace, a kind without a definition, a DELETE: no patch.
    let (_, other) = ask(
        addr,
        mutate::WORKLOADS,
        "w3",
        &review("w3", gvk, "web", &js),
    )
    .await;
    assert!(other.is_none());
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let (_, none) = ask(
        addr,
        mutate::WORKLOADS,
        "w4",
        &review("w4", ("", "v1", "ConfigMap"), "ml", &cm),
    )
    .await;
    assert!(none.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_reviews_are_admitted_unchanged_with_a_warning_never_a_crash() {
    let (addr, _index, _stop) = serve().await;
    let gvk = ("jobset.x-k8s.io", "v1alpha2", "JobSet");
    // Nested past the parser's depth limit.
    let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    let body = String::from_utf8(review("h1", gvk, "ml", &json!({"metadata": {"name": "x"}})))
        .unwrap()
        .replace(
            "{\"metadata\":{\"name\":\"x\"}}",
            &format!("{{\"metadata\":{{\"name\":\"x\"}},\"spec\":{deep}}}"),
        );
    let (r, patch) = ask(addr, mutate::WORKLOADS, "h1", body.as_bytes()).await;
    assert!(patch.is_none());
    assert!(
        r["warnings"][0]
            .as_str()
            .unwrap_or_default()
            .contains("ml-to-kai"),
        "{r}"
    );
    // A spec of the wrong shape: the write path refuses, the workload is admitted.
    let odd = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "odd"}, "spec": {"replicatedJobs": "not a list"}});
    let (r, patch) = ask(
        addr,
        mutate::WORKLOADS,
        "h2",
        &review("h2", gvk, "ml", &odd),
    )
    .await;
    assert!(patch.is_none(), "{r}");
    // No AdmissionReview at all: 400, the caller's configuration is wrong.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, _) = exchange(stream, "POST", mutate::PODS, b"{\"kind\":\"Pod\"}").await;
    assert_eq!(code, 400);
}

/// A pod of the demo JobSet as its Job controller creates it (generateName, no uid).
fn new_pod(worker: bool) -> Json {
    let docs = cluster_docs();
    let mut pod = docs
        .into_iter()
        .filter(|d| d["kind"] == "Pod")
        .find(|d| (d["metadata"]["name"].as_str().unwrap().contains("workers")) == worker)
        .unwrap();
    let meta = pod["metadata"].as_object_mut().unwrap();
    meta.remove("uid");
    meta.remove("namespace");
    let name = meta.remove("name").unwrap();
    let generate = name
        .as_str()
        .unwrap()
        .rsplit_once('-')
        .unwrap()
        .0
        .to_owned()
        + "-";
    meta.insert("generateName".into(), json!(generate));
    pod.as_object_mut().unwrap().remove("status");
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_pod_gets_its_workload_component_and_instance_labels() {
    let (addr, _index, _stop) = serve().await;
    let gvk = ("", "v1", "Pod");
    for (worker, instance) in [(false, "leader"), (true, "workers")] {
        let pod = new_pod(worker);
        let (_, patch) = ask(addr, mutate::PODS, "p1", &review("p1", gvk, "ml", &pod)).await;
        let labelled = apply(&pod, &patch.expect("labels"));
        let labels = &labelled["metadata"]["labels"];
        assert_eq!(labels["kartograf.io/workload-kind"], "JobSet", "{labels}");
        assert_eq!(labels["kartograf.io/workload-name"], "llama-train");
        assert_eq!(labels["kartograf.io/component"], "replicatedjob");
        assert_eq!(labels["kartograf.io/instance"], instance);
        // The pod's own labels stay.
        assert_eq!(labels["jobset.sigs.k8s.io/jobset-name"], "llama-train");
    }
    // The same pod claimed from another namespace: no labels.
    let pod = new_pod(true);
    let (_, patch) = ask(addr, mutate::PODS, "p2", &review("p2", gvk, "web", &pod)).await;
    assert!(patch.is_none());
    // An owner reference whose uid names another object: no labels.
    let mut spoof = new_pod(true);
    spoof["metadata"]["ownerReferences"][0]["name"] = json!("someone-else");
    let (_, patch) = ask(addr, mutate::PODS, "p3", &review("p3", gvk, "ml", &spoof)).await;
    assert!(patch.is_none());
    // Owned by an object not cached yet (its own owner unknown): admitted unlabelled.
    let mut early = new_pod(true);
    early["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1",
        "kind": "Job", "name": "brand-new", "uid": "not-cached-yet", "controller": true}]);
    let (_, patch) = ask(addr, mutate::PODS, "p4", &review("p4", gvk, "ml", &early)).await;
    assert!(patch.is_none());
}

#[test]
fn policy_sets_parse_the_documented_example() {
    assert_eq!(PolicySet::parse(POLICIES).unwrap().len(), 1);
}

/// A policy with a `namespaceSelector`: namespaces are read from the cluster (the fake API
/// server), a matching namespace gets the policy, others do not; a selector on the name
/// label needs no read at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_reads_the_namespace_labels_from_the_cluster() {
    let fake = crate::fake_apiserver::FakeApiServer::new();
    fake.register("v1", "Namespace", "namespaces", true);
    for (name, labels) in [
        ("ml", json!({"team": "ml", "gpu": "h100"})),
        ("web", json!({"team": "web"})),
    ] {
        let mut l = labels.clone();
        l["kubernetes.io/metadata.name"] = json!(name);
        fake.upsert(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": format!("ns-{name}"), "labels": l}}));
    }
    let file =
        std::env::temp_dir().join(format!("kartograf-ns-selector-{}.yaml", std::process::id()));
    std::fs::write(
        &file,
        r#"
policies:
  - name: gpu-teams-to-kai
    namespaceSelector:
      matchLabels: {team: ml}
      matchExpressions: [{key: gpu, operator: Exists}]
    set: {schedulerName: kai-scheduler}
  - name: not-in-system
    namespaceSelector:
      matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]
    set: {labels: {kai.scheduler/queue: default}}
"#,
    )
    .unwrap();
    let index = Arc::new(Index::new(catalog(), &[]));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(
        index,
        Arc::new(kartograf::definition::LoadReport::default()),
        rx,
    )
    .with_policies(Live::load(&file).unwrap())
    .with_owner_lookup(Arc::new(
        kartograf::source::kube::owner_lookup::ClusterLookup::new(fake.client()),
    ));
    let (addr, _server) = listen(shared).await;
    let gvk = ("jobset.x-k8s.io", "v1alpha2", "JobSet");
    let scheduler = |p: &Option<Json>, js: &Json| {
        p.as_ref().map(|p| apply(js, p)).map(|o| {
            let t = &o["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
            (
                t["spec"]["schedulerName"].clone(),
                t["metadata"]["labels"]["kai.scheduler/queue"].clone(),
            )
        })
    };
    let mut js = new_jobset();
    let (_, patch) = ask(addr, mutate::WORKLOADS, "n1", &review("n1", gvk, "ml", &js)).await;
    assert_eq!(
        scheduler(&patch, &js),
        Some((json!("kai-scheduler"), json!("default")))
    );
    // `web` has no gpu label: only the name-selector policy.
    js["metadata"]["namespace"] = json!("web");
    let (_, patch) = ask(
        addr,
        mutate::WORKLOADS,
        "n2",
        &review("n2", gvk, "web", &js),
    )
    .await;
    assert_eq!(scheduler(&patch, &js), Some((Json::Null, json!("default"))));
    // A namespace the cluster does not have: its labels are unknown, so only the name
    // counts; kube-system is left out by name.
    let (_, patch) = ask(
        addr,
        mutate::WORKLOADS,
        "n3",
        &review("n3", gvk, "gone", &js),
    )
    .await;
    assert_eq!(scheduler(&patch, &js), Some((Json::Null, json!("default"))));
    let (_, patch) = ask(
        addr,
        mutate::WORKLOADS,
        "n4",
        &review("n4", gvk, "kube-system", &js),
    )
    .await;
    assert!(patch.is_none());
}
