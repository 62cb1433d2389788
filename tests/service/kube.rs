//! The Kubernetes source against the scripted fake API server, with the real kube-rs client
//! and watcher, in-process (`tower::service_fn`) and over loopback HTTP (hyper 1): initial
//! lists, watch events, 410 relists, reconnects, CRDs appearing later, metadata-only watches
//! of intermediate kinds, Karta objects as definitions, and API faults (403, 429, 500) with
//! backoff and readiness. There is no real API server on these machines: the protocol is
//! the fake's rendition of it.

use crate::fake_apiserver::FakeApiServer;
use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::Index;
use kartograf::proto::v1 as pb;
use kartograf::source::definitions::{Layers, Publisher, Reloader};
use kartograf::source::kube as source;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PODS: &str = "/api/v1/pods";
const JOBSETS: &str = "/apis/jobset.x-k8s.io/v1alpha2/jobsets";
const SECRET: &str = "hunter2-not-cached";
const LEADER_POD: &str = "3f1c2a9e-0001-4000-8000-000000000003";
const WORKER_POD: &str = "3f1c2a9e-0001-4000-8000-000000000005";
const JOBSET_UID: &str = "3f1c2a9e-0001-4000-8000-000000000001";

/// The jobset-seed fixture, with a secret env var and volume added to every pod container.
fn seed() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/engine/jobset-seed.yaml"
    ))
    .unwrap();
    let mut docs = kartograf::manifest::parse_documents(&text).unwrap();
    for d in docs.iter_mut().filter(|d| d["kind"] == "Pod") {
        for c in d["spec"]["containers"].as_array_mut().unwrap() {
            c["env"] = json!([{"name": "API_TOKEN", "value": SECRET}]);
            c["command"] = json!(["sh", "-c", format!("echo {SECRET}")]);
        }
        d["spec"]["volumes"] = json!([{"name": "creds", "secret": {"secretName": SECRET}}]);
    }
    docs
}

/// A fake cluster serving pods, jobs and (if `jobsets`) JobSets, holding the seed.
fn cluster(jobsets: bool) -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.register("v1", "Pod", "pods", true);
    fake.register("batch/v1", "Job", "jobs", true);
    fake.register("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", jobsets);
    for d in seed() {
        fake.upsert(d);
    }
    fake
}

async fn client(fake: &FakeApiServer, http: bool) -> ::kube::Client {
    if http {
        fake.http_client().await
    } else {
        fake.client()
    }
}

/// Runs the source; aborted when the returned guard drops.
pub(crate) struct Running(tokio::task::JoinHandle<()>);
impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Fast settings for tests: short rediscovery and backoff, no jitter.
pub(crate) fn settings(rediscover: Duration) -> source::Settings {
    source::Settings {
        rediscover,
        backoff: source::Backoff {
            initial: Duration::from_millis(20),
            factor: 2.0,
            max: Duration::from_millis(500),
            jitter: false,
        },
        startup_attempts: 3,
        counters: Default::default(),
        namespace: None,
    }
}

fn start(client: ::kube::Client, rediscover: Duration) -> (Arc<Index>, Running) {
    let (index, _, running) = start_with(client, settings(rediscover));
    (index, running)
}

/// Runs the source with a definition publisher (embedded layer + cluster Karta objects).
pub(crate) fn start_with(
    client: ::kube::Client,
    settings: source::Settings,
) -> (Arc<Index>, Arc<LoadReport>, Running) {
    let index = Arc::new(Index::new(Catalog::default(), &[source::SOURCE]));
    let report = Arc::new(LoadReport::default());
    let publisher = Publisher::new(Layers::default(), index.clone(), report.clone());
    publisher.update(|_| {});
    let task = tokio::spawn(source::run(
        client,
        index.clone(),
        settings,
        Some(publisher),
    ));
    (index, report, Running(task))
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(6);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `apiVersion` of the cached object of this kind/namespace/name, if one is cached.
fn cached_api_version(index: &Index, kind: &str, namespace: &str, name: &str) -> Option<String> {
    index
        .objects_where(|m| m.kind == kind && m.namespace == namespace && m.name == name)
        .pop()
        .map(|m| m.api_version)
}

fn jobset(index: &Index) -> Option<Arc<pb::Workload>> {
    index
        .published(&pb::ObjectRef {
            kind: "JobSet".into(),
            namespace: "ml".into(),
            name: "llama-train".into(),
            ..Default::default()
        })
        .map(|p| Arc::new(p.graph()))
}

fn current_pods(index: &Index) -> u32 {
    jobset(index)
        .and_then(|w| w.pods)
        .map_or(u32::MAX, |p| p.current)
}

/// The latest change of the JobSet after `since`.
fn jobset_change(index: &Index, since: u64) -> Option<(pb::EventType, u32)> {
    let (changes, _, _) = index
        .board()
        .changes_since_counted(since, &Default::default())?;
    changes
        .iter()
        .rev()
        .find(|c| {
            c.workload
                .r#ref
                .as_ref()
                .is_some_and(|r| r.uid == JOBSET_UID)
        })
        .map(|c| (c.kind, c.workload.pods.map_or(0, |p| p.current)))
}

async fn synced_seed(http: bool, fake: &FakeApiServer) -> (Arc<Index>, Running) {
    let (index, running) = start(client(fake, http).await, Duration::from_millis(200));
    eventually("the initial lists", || index.synced()).await;
    eventually("the JobSet with its pods", || current_pods(&index) == 3).await;
    (index, running)
}

async fn initial_list(http: bool) {
    let fake = cluster(true);
    let (index, _running) = synced_seed(http, &fake).await;
    let w = jobset(&index).unwrap();
    assert_eq!(w.pods.unwrap().desired, 3);
    assert_eq!(w.totals.clone().unwrap().desired.unwrap().gpus, 12.0);
    let (all, _, _) = index.board().list(&Default::default(), 0, 1000);
    assert_eq!(all.len(), 1, "one workload: {all:?}");
    assert!(
        !format!("{all:?}").contains(SECRET),
        "nothing secret in a graph"
    );
    // One list and a watch per served kind; the JobSet kind not re-listed.
    assert_eq!(fake.requests(JOBSETS, false), 1);
    eventually("the pod watch", || fake.open_watches(PODS) == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_initial_list_in_process() {
    initial_list(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_initial_list_over_http() {
    initial_list(true).await;
}

#[test]
fn what_is_never_cached_is_left_out_at_conversion() {
    // One rule for every source: the pod projection, and for other objects the object rule
    // (managed fields, last-applied configuration, container environments of templates).
    let cached_text = |doc: &serde_json::Value| {
        let c = kartograf::model::Cached::from_json(doc, kartograf::expr::Limits::default())
            .expect("converts");
        let val = match c {
            kartograf::model::Cached::Pod(p) => p.value(),
            kartograf::model::Cached::Object(o) => o.value(),
        };
        kartograf::expr::value::to_json(&val).to_string()
    };
    let mut pod = seed().into_iter().find(|d| d["kind"] == "Pod").unwrap();
    pod["metadata"]["managedFields"] = json!([{"manager": "kubelet"}]);
    pod["spec"]["initContainers"] =
        json!([{"name": "i", "args": [SECRET], "envFrom": [{"secretRef": {"name": "s"}}]}]);
    let text = cached_text(&pod);
    assert!(!text.contains(SECRET), "{text}");
    assert!(
        !text.contains("managedFields") && !text.contains("envFrom"),
        "{text}"
    );
    assert!(text.contains("\"resources\""), "resources kept: {text}");

    let mut js = seed().into_iter().find(|d| d["kind"] == "JobSet").unwrap();
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "T", "value": SECRET}]);
    js["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(format!("{{\"env\":[{{\"value\":\"{SECRET}\"}}]}}"));
    js["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
    let text = cached_text(&js);
    assert!(!text.contains(SECRET), "{text}");
    assert!(!text.contains("managedFields"), "{text}");
    assert!(
        text.contains("replicatedJobs") && text.contains("\"containers\""),
        "{text}"
    );
}

async fn watch_events(http: bool) {
    let fake = cluster(true);
    let (index, _running) = synced_seed(http, &fake).await;
    eventually("the pod watch", || fake.open_watches(PODS) == 1).await;

    // DELETED pod → the JobSet is MODIFIED with 2 pods.
    let rev = index.board().revision();
    fake.delete(WORKER_POD, false);
    eventually("the pod deletion", || {
        jobset_change(&index, rev) == Some((pb::EventType::Modified, 2))
    })
    .await;

    // BOOKMARK is harmless: nothing changes, no relist.
    let rev = index.board().revision();
    fake.bookmark();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(index.board().revision(), rev);
    assert_eq!(current_pods(&index), 2);

    // ADDED: the pod comes back.
    let pod = seed()
        .into_iter()
        .find(|d| d["metadata"]["uid"] == WORKER_POD)
        .unwrap();
    fake.upsert(pod.clone());
    eventually("the pod re-added", || current_pods(&index) == 3).await;

    // MODIFIED: the leader pod stops being ready.
    let mut leader = seed()
        .into_iter()
        .find(|d| d["metadata"]["uid"] == LEADER_POD)
        .unwrap();
    leader["status"]["phase"] = json!("Pending");
    leader["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
    fake.upsert(leader);
    eventually("the pod modification", || {
        jobset(&index)
            .and_then(|w| w.pods)
            .is_some_and(|p| p.ready == 2)
    })
    .await;
    assert_eq!(fake.requests(PODS, false), 1, "no relist of pods");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watch_events_in_process() {
    watch_events(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watch_events_over_http() {
    watch_events(true).await;
}

async fn gone_relists(http: bool) {
    let fake = cluster(true);
    let (index, _running) = synced_seed(http, &fake).await;
    eventually("the JobSet watch", || fake.open_watches(JOBSETS) == 1).await;
    let rev = index.board().revision();
    // The JobSet vanishes without an event, then the watch expires (410 as an ERROR event).
    fake.delete(JOBSET_UID, true);
    fake.expire(JOBSETS);
    eventually("the relist dropping the JobSet", || {
        jobset_change(&index, rev).is_some_and(|(k, _)| k == pb::EventType::Deleted)
    })
    .await;
    assert!(jobset(&index).is_none());
    assert!(fake.requests(JOBSETS, false) >= 2, "relisted");
    // Pods were not re-listed, and the relist of one kind left the others' objects alone.
    assert_eq!(fake.requests(PODS, false), 1);
    assert!(cached_api_version(&index, "Pod", "ml", "llama-train-leader-0-0-q9wzt").is_some());
    assert!(cached_api_version(&index, "Job", "ml", "llama-train-leader-0").is_some());
    assert!(index.synced());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_gone_relists_in_process() {
    gone_relists(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_gone_relists_over_http() {
    gone_relists(true).await;
}

async fn reconnects(http: bool) {
    let fake = cluster(true);
    let (index, _running) = synced_seed(http, &fake).await;
    eventually("the pod watch", || fake.open_watches(PODS) == 1).await;
    let watches = fake.requests(PODS, true);
    fake.drop_watches(PODS);
    // An event while disconnected is replayed from the last resourceVersion.
    fake.delete(WORKER_POD, false);
    eventually("the reconnect", || fake.requests(PODS, true) > watches).await;
    eventually("the replayed deletion", || current_pods(&index) == 2).await;
    // And later events flow on the new connection.
    eventually("the new pod watch", || fake.open_watches(PODS) == 1).await;
    fake.delete(LEADER_POD, false);
    eventually("a later deletion", || current_pods(&index) == 1).await;
    assert_eq!(
        fake.requests(PODS, false),
        1,
        "reconnected without a relist"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_reconnects_in_process() {
    reconnects(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_reconnects_over_http() {
    reconnects(true).await;
}

async fn crd_appears_later(http: bool) {
    let fake = cluster(false);
    let (index, _running) = start(client(&fake, http).await, Duration::from_millis(200));
    eventually("sync without the JobSet kind", || index.synced()).await;
    assert!(jobset(&index).is_none());
    assert_eq!(fake.requests(JOBSETS, false), 0, "not served: not listed");
    fake.set_served("jobset.x-k8s.io/v1alpha2", true);
    eventually("the JobSet after rediscovery", || current_pods(&index) == 3).await;
    assert_eq!(
        jobset(&index)
            .unwrap()
            .totals
            .clone()
            .unwrap()
            .desired
            .unwrap()
            .gpus,
        12.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_crd_appears_later_in_process() {
    crd_appears_later(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_crd_appears_later_over_http() {
    crd_appears_later(true).await;
}

const KARTAS: &str = "/apis/run.ai/v1alpha1/kartas";
const WIDGETS: &str = "/apis/example.com/v1/widgets";
const PARTS: &str = "/apis/example.com/v1/widgetparts";
const KARTA_UID: &str = "7a7a0000-0000-4000-8000-000000000001";

/// A Karta for `example.com/v1` Widget (pod-bearing root, scale `.spec.replicas`) whose pods
/// are owned by a WidgetPart child, named `name`, with `replicas` as the scale expression.
fn widget_karta(name: &str, uid: &str, replicas: &str) -> Value {
    json!({
        "apiVersion": "run.ai/v1alpha1", "kind": "Karta",
        "metadata": {"name": name, "uid": uid, "managedFields": [{"manager": "kubectl"}]},
        "spec": {"structureDefinition": {
            "rootComponent": {
                "name": "widget",
                "kind": {"group": "example.com", "version": "v1", "kind": "Widget"},
                "specDefinition": {"podTemplateSpecPath": ".spec.template"},
                "scaleDefinition": {"replicasPath": replicas},
                "statusDefinition": {"statusMappings": {"running": [
                    {"byExpression": {"expression": ".status.ready == true", "expectedResult": "true"}}
                ]}}
            },
            "childComponents": [{
                "name": "part",
                "kind": {"group": "example.com", "version": "v1", "kind": "WidgetPart"},
                "ownerRef": "widget"
            }]
        }},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// A cluster with Kartas, Widgets, WidgetParts and pods: one Widget owning one WidgetPart
/// owning two pods.
fn widget_cluster() -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.register("v1", "Pod", "pods", true);
    fake.register("run.ai/v1alpha1", "Karta", "kartas", true);
    fake.register("example.com/v1", "Widget", "widgets", true);
    fake.register("example.com/v1", "WidgetPart", "widgetparts", true);
    let owner = |kind: &str, name: &str, uid: &str| {
        json!([{"apiVersion": "example.com/v1", "kind": kind, "name": name, "uid": uid,
                "controller": true}])
    };
    fake.upsert(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ml", "uid": "w-1"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}},
        "status": {"ready": true}
    }));
    fake.upsert(json!({
        "apiVersion": "example.com/v1", "kind": "WidgetPart",
        "metadata": {"name": "w-part", "namespace": "ml", "uid": "wp-1",
                     "labels": {"part": "yes"}, "ownerReferences": owner("Widget", "w", "w-1")},
        "spec": {"secret": SECRET}
    }));
    for i in 0..2 {
        fake.upsert(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("w-{i}"), "namespace": "ml", "uid": format!("wpod-{i}"),
                         "ownerReferences": owner("WidgetPart", "w-part", "wp-1")},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}
        }));
    }
    fake
}

fn widget(index: &Index) -> Option<Arc<pb::Workload>> {
    index
        .published(&pb::ObjectRef {
            kind: "Widget".into(),
            namespace: "ml".into(),
            name: "w".into(),
            ..Default::default()
        })
        .map(|p| Arc::new(p.graph()))
}

fn widget_pods(index: &Index) -> Option<(u32, u32)> {
    widget(index)
        .and_then(|w| w.pods)
        .map(|p| (p.desired, p.current))
}

async fn karta_objects(http: bool) {
    let fake = widget_cluster();
    let (index, report, _running) =
        start_with(client(&fake, http).await, settings(Duration::from_secs(60)));
    eventually("the initial lists", || index.synced()).await;
    // No Karta for Widget yet: widgets are not watched, nothing is a workload.
    assert!(widget(&index).is_none());
    assert_eq!(fake.requests(WIDGETS, false), 0);

    // A Karta object adds the Widget root kind: the source watches widgets (full) and
    // widget parts (metadata only) without waiting for the 60 s rediscovery.
    fake.upsert(widget_karta("widgets", KARTA_UID, ".spec.replicas"));
    eventually("the Widget workload", || {
        widget_pods(&index) == Some((2, 2))
    })
    .await;
    let w = widget(&index).unwrap();
    let def = w.definition.clone().unwrap();
    assert_eq!(
        (def.name.as_str(), def.origin.as_str()),
        ("widgets", "cluster:widgets")
    );
    assert!(report.get().is_empty(), "{:?}", report.get());
    assert!(fake.seen(WIDGETS).iter().all(|r| !r.metadata));
    assert!(fake.seen(KARTAS).iter().all(|r| !r.metadata));
    let parts = fake.seen(PARTS);
    assert!(
        !parts.is_empty() && parts.iter().all(|r| r.metadata),
        "{parts:?}"
    );
    assert_eq!(
        cached_api_version(&index, "WidgetPart", "ml", "w-part").as_deref(),
        Some("example.com/v1")
    );

    // An invalid edit keeps the last good version; its errors are reported with the origin,
    // the field path and the expression.
    fake.upsert(widget_karta("widgets", KARTA_UID, ".spec.replicas | ]"));
    eventually("the error in the report", || !report.get().is_empty()).await;
    let errors = report.get();
    let e = &errors[0];
    assert_eq!(e.source, "cluster:widgets", "{e:?}");
    assert!(e.path.contains("replicasPath"), "{e:?}");
    assert_eq!(e.expression.as_deref(), Some(".spec.replicas | ]"));
    assert_eq!(
        widget_pods(&index),
        Some((2, 2)),
        "last good definition stays"
    );

    // A good edit applies (desired pods now 5) and clears the error.
    fake.upsert(widget_karta("widgets", KARTA_UID, "5"));
    eventually("the edit applied", || widget_pods(&index) == Some((5, 2))).await;
    assert!(report.get().is_empty(), "{:?}", report.get());

    // A DELETED event on the metadata-only watch: the pods lose their owner chain.
    fake.delete("wp-1", false);
    eventually("the WidgetPart deletion", || {
        widget_pods(&index) == Some((5, 0))
    })
    .await;

    // Deleting the Karta removes its definitions: the Widget is no workload any more.
    fake.delete(KARTA_UID, false);
    eventually("the Widget gone", || widget(&index).is_none()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_karta_objects_define_workloads_in_process() {
    karta_objects(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_karta_objects_define_workloads_over_http() {
    karta_objects(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_cluster_karta_replaces_the_embedded_definition() {
    let fake = cluster(true);
    fake.register("run.ai/v1alpha1", "Karta", "kartas", true);
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/catalog/jobset-x-k8s-io-jobset-v1alpha2.yaml"
    ))
    .unwrap();
    let mut karta = kartograf::manifest::parse_documents(&text)
        .unwrap()
        .remove(0);
    karta["metadata"] = json!({"name": "site-jobset", "uid": KARTA_UID});
    let (index, _report, _running) =
        start_with(fake.client(), settings(Duration::from_millis(200)));
    eventually("the JobSet", || current_pods(&index) == 3).await;
    let origin = |index: &Index| {
        jobset(index)
            .and_then(|w| w.definition.clone())
            .map(|d| d.origin)
    };
    assert_eq!(origin(&index).as_deref(), Some("embedded"));
    fake.upsert(karta);
    eventually("the cluster definition in effect", || {
        origin(&index).as_deref() == Some("cluster:site-jobset")
    })
    .await;
    fake.delete(KARTA_UID, false);
    eventually("the embedded definition back", || {
        origin(&index).as_deref() == Some("embedded")
    })
    .await;
}

#[test]
fn directory_and_cluster_layers_compose() {
    let dir = std::env::temp_dir().join(format!("kartograf-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut gadget = widget_karta("gadgets", "", ".spec.replicas");
    gadget["spec"]["structureDefinition"]["rootComponent"]["kind"]["kind"] = json!("Gadget");
    gadget["spec"]["structureDefinition"]["childComponents"][0]["kind"]["kind"] =
        json!("GadgetPart");
    std::fs::write(dir.join("gadget.json"), gadget.to_string()).unwrap();
    let index = Arc::new(Index::new(Catalog::default(), &[]));
    let report = Arc::new(LoadReport::default());
    let publisher = Publisher::new(Layers::default(), index.clone(), report.clone());
    let mut reloader = Reloader::new(&dir, Default::default());
    reloader.publish(&publisher);
    let covers = |kind: &str| index.catalog().covers("example.com", kind);
    assert!(covers("Gadget") && !covers("Widget"));
    let karta = widget_karta("widgets", KARTA_UID, ".spec.replicas");
    publisher.update(|l| l.apply_cluster(KARTA_UID, "cluster:widgets", &karta));
    assert!(covers("Gadget") && covers("Widget"));
    // A directory reload keeps the cluster layer, and the cluster layer the directory's.
    std::fs::remove_file(dir.join("gadget.json")).unwrap();
    reloader.publish(&publisher);
    assert!(!covers("Gadget") && covers("Widget"));
    std::fs::write(dir.join("gadget.json"), gadget.to_string()).unwrap();
    reloader.publish(&publisher);
    publisher.update(|l| l.delete_cluster(KARTA_UID));
    assert!(covers("Gadget") && !covers("Widget"));
    assert!(
        covers("Gadget") && index.catalog().covers("batch", "Job"),
        "embedded stays"
    );
    // Two cluster objects for one root kind: the first by origin wins, the other is reported.
    publisher.update(|l| {
        l.apply_cluster("a", "cluster:a", &karta);
        l.apply_cluster("b", "cluster:b", &karta);
    });
    let errors = report.get();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].source, "cluster:b");
    let _ = std::fs::remove_dir_all(&dir);
}

const JOBS_LEADER: &str = "llama-train-leader-0";

/// Gaps between consecutive list requests of `path`.
fn list_gaps(fake: &FakeApiServer, path: &str) -> Vec<(u16, Duration)> {
    let lists: Vec<_> = fake.seen(path).into_iter().filter(|r| !r.watch).collect();
    lists
        .windows(2)
        .map(|w| (w[0].code, w[1].at.duration_since(w[0].at)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_500_backoff_grows_resets_and_gates_readiness() {
    let fake = cluster(true);
    fake.fail_lists(JOBSETS, 500, 0, 4);
    let mut s = settings(Duration::from_secs(60));
    s.backoff = source::Backoff {
        initial: Duration::from_millis(100),
        factor: 2.0,
        max: Duration::from_secs(5),
        jitter: false,
    };
    let report = Arc::new(kartograf::definition::LoadReport::default());
    let metrics =
        kartograf::metrics::Metrics::new(Arc::new(Index::new(Default::default(), &[])), report);
    metrics.count_informers(s.counters.clone());
    let (index, _report, _running) = start_with(fake.client(), s);
    eventually("three failed JobSet lists", || {
        fake.seen(JOBSETS).iter().filter(|r| r.code == 500).count() >= 3
    })
    .await;
    assert!(
        !index.synced(),
        "readiness waits for the failing first list"
    );
    eventually("the first successful list", || index.synced()).await;
    assert_eq!(current_pods(&index), 3);
    let text = metrics.encode();
    let errors = text
        .lines()
        .find(|l| l.starts_with("kartograf_informer_errors_total") && l.contains("JobSet"))
        .unwrap_or_else(|| panic!("no JobSet informer errors in:\n{text}"));
    assert!(errors.ends_with(" 4"), "{errors}");
    let gaps = list_gaps(&fake, JOBSETS);
    assert_eq!(gaps.len(), 4, "{gaps:?}");
    for (i, (code, gap)) in gaps.iter().enumerate() {
        let expected = Duration::from_millis(100 << i);
        assert_eq!(*code, 500);
        assert!(
            *gap >= expected.mul_f64(0.9),
            "gap {i}: {gap:?} < {expected:?}: {gaps:?}"
        );
    }
    // A success resets the backoff: after a 410 relist that fails twice, the gaps start
    // again from the initial delay instead of continuing at 1.6 s.
    eventually("the JobSet watch", || fake.open_watches(JOBSETS) == 1).await;
    fake.fail_lists(JOBSETS, 500, 0, 2);
    fake.expire(JOBSETS);
    eventually("the relist after two failures", || {
        fake.seen(JOBSETS).iter().filter(|r| !r.watch).count() == 8
    })
    .await;
    let gaps = list_gaps(&fake, JOBSETS);
    let after = &gaps[5..];
    assert_eq!(after.iter().map(|g| g.0).collect::<Vec<_>>(), [500, 500]);
    assert!(after[0].1 >= Duration::from_millis(180), "{after:?}");
    assert!(after[0].1 < Duration::from_millis(1000), "reset: {after:?}");
    assert!(
        after[1].1 >= Duration::from_millis(360),
        "grows again: {after:?}"
    );
    assert!(index.synced());
}

async fn too_many_requests(http: bool) {
    let fake = cluster(true);
    fake.fail_lists(PODS, 429, 1, 1);
    let (index, _report, _running) =
        start_with(client(&fake, http).await, settings(Duration::from_secs(60)));
    eventually("the pods after the 429", || current_pods(&index) == 3).await;
    let lists: Vec<_> = fake.seen(PODS).into_iter().filter(|r| !r.watch).collect();
    assert_eq!(lists.iter().map(|r| r.code).collect::<Vec<_>>(), [429, 200]);
    let waited = lists[1].at.duration_since(lists[0].at);
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After honoured: {waited:?}"
    );
    // The pods are in the index a moment before the source reports its list complete.
    eventually("synced", || index.synced()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_429_waits_for_retry_after_in_process() {
    too_many_requests(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_429_waits_for_retry_after_over_http() {
    too_many_requests(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_403_stops_gating_readiness_and_keeps_retrying() {
    let fake = cluster(true);
    fake.fail_lists(JOBSETS, 403, 0, usize::MAX);
    let (index, _report, _running) = start_with(fake.client(), settings(Duration::from_secs(60)));
    eventually("readiness despite the forbidden kind", || index.synced()).await;
    let forbidden = fake.seen(JOBSETS);
    assert!(
        forbidden.len() >= 3 && forbidden.iter().all(|r| r.code == 403),
        "{forbidden:?}"
    );
    assert!(jobset(&index).is_none());
    assert!(
        cached_api_version(&index, "Job", "ml", JOBS_LEADER).is_some(),
        "other kinds are served"
    );
    // Still retrying: once RBAC is fixed the JobSet arrives.
    fake.heal(JOBSETS);
    eventually("the JobSet after the grant", || current_pods(&index) == 3).await;

    let ar = ::kube::api::ApiResource::from_gvk_with_plural(
        &::kube::api::GroupVersionKind::gvk("jobset.x-k8s.io", "v1alpha2", "JobSet"),
        "jobsets",
    );
    let message = source::forbidden_message(&ar, "list");
    for part in [
        "JobSet",
        "`list`",
        "\"jobsets\"",
        "\"jobset.x-k8s.io\"",
        "ClusterRole",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_intermediate_kinds_are_metadata_only() {
    // With the embedded catalog Job is itself a root kind (watched in full); a catalog
    // where it is only a child makes it metadata-only.
    let catalog = Catalog::embedded().unwrap();
    assert_eq!(
        source::mode_of(&catalog, "batch", "Job"),
        source::Mode::Full
    );
    assert_eq!(source::mode_of(&catalog, "", "Pod"), source::Mode::Full);
    let only_child = source::wanted_kinds(&catalog)
        .into_keys()
        .find(|(g, k)| source::mode_of(&catalog, g, k) == source::Mode::Metadata);
    assert!(
        only_child.is_some(),
        "the embedded catalog has intermediate-only kinds"
    );
}

#[test]
fn secrets_and_config_maps_are_never_watched_even_if_a_definition_names_them() {
    use kartograf::definition::{Catalog, catalog, load};
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog/apps-deployment-v1.yaml"),
    )
    .unwrap()
    .replace(
        "kind: {group: apps, version: v1, kind: ReplicaSet}",
        "kind: {group: \"\", version: v1, kind: Secret}",
    );
    let (parsed, errors) = load::parse_text(&text, "secret-child.yaml");
    assert!(errors.is_empty(), "{errors:?}");
    let (defs, errors) = catalog::compile_all(parsed, "test", Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        defs.iter()
            .flat_map(|d| d.child_kinds())
            .any(|k| k.kind == "Secret"),
        "the definition must name Secret for this test to mean anything"
    );
    let wanted = kartograf::source::kube::wanted_kinds(&Catalog::from_layers(1, [defs]));
    assert!(wanted.contains_key(&("apps".to_owned(), "Deployment".to_owned())));
    assert!(
        !wanted
            .keys()
            .any(|(g, k)| g.is_empty() && (k == "Secret" || k == "ConfigMap"))
    );
}

fn batch_job(namespace: &str, name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}")},
        "spec": {"parallelism": 1, "completions": 1,
                 "template": {"spec": {"containers": [{"name": "c"}]}}},
        "status": {}
    })
}

fn job(index: &Index, namespace: &str, name: &str) -> Option<Arc<pb::Workload>> {
    index
        .published(&pb::ObjectRef {
            kind: "Job".into(),
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        })
        .map(|p| Arc::new(p.graph()))
}

#[tokio::test]
async fn kube_namespace_sharding_reads_only_its_namespace() {
    for http in [false, true] {
        let fake = cluster(true);
        fake.upsert(batch_job("other", "elsewhere"));
        let mut s = settings(Duration::from_secs(60));
        s.namespace = Some("ml".to_owned());
        let (index, _report, _running) = start_with(client(&fake, http).await, s);
        eventually("the first sync", || index.synced()).await;
        assert_eq!(current_pods(&index), 3, "the ml JobSet is served");
        assert!(
            job(&index, "other", "elsewhere").is_none(),
            "listed from another namespace"
        );
        // Watch events: another namespace is ignored, the shard's own arrive.
        fake.upsert(batch_job("other", "later"));
        fake.upsert(batch_job("ml", "mine"));
        eventually("the ml Job", || job(&index, "ml", "mine").is_some()).await;
        assert!(
            job(&index, "other", "later").is_none(),
            "watched from another namespace"
        );
    }
}

#[test]
fn karta_events_that_change_no_spec_publish_nothing() {
    let index = Arc::new(Index::new(Catalog::default(), &[]));
    let report = Arc::new(LoadReport::default());
    let publisher = Publisher::new(Layers::default(), index.clone(), report);
    publisher.update(|_| {});
    let mut karta = widget_karta("widgets", KARTA_UID, ".spec.replicas");
    publisher.update(|l| l.apply_cluster(KARTA_UID, "cluster:widgets", &karta));
    let generation = index.catalog().generation();
    // The same object again (a relist), then only its status and labels changed.
    publisher.update(|l| l.apply_cluster(KARTA_UID, "cluster:widgets", &karta));
    karta["status"] = json!({"observedGeneration": 7});
    karta["metadata"]["labels"] = json!({"team": "ml"});
    publisher.update(|l| l.apply_cluster(KARTA_UID, "cluster:widgets", &karta));
    publisher.update(|l| {
        l.reset_cluster(&[(
            KARTA_UID.to_owned(),
            "cluster:widgets".to_owned(),
            karta.clone(),
        )])
    });
    assert_eq!(
        index.catalog().generation(),
        generation,
        "nothing was republished"
    );
    // A spec change is compiled and published.
    let edited = widget_karta("widgets", KARTA_UID, ".spec.replicas // 2");
    publisher.update(|l| l.apply_cluster(KARTA_UID, "cluster:widgets", &edited));
    assert!(index.catalog().generation() > generation);
}
