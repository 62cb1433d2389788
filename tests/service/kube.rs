//! The Kubernetes source against the scripted fake API server, with the real kube-rs client
//! and watcher, in-process (`tower::service_fn`) and over loopback HTTP (hyper 1). There is
//! no real API server on these machines: the protocol is the fake's rendition of it.

use crate::fake_apiserver::FakeApiServer;
use kartograf::definition::Catalog;
use kartograf::index::Index;
use kartograf::proto::v1 as pb;
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
struct Running(tokio::task::JoinHandle<()>);
impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn start(client: ::kube::Client, rediscover: Duration) -> (Arc<Index>, Running) {
    let index = Arc::new(Index::new(Catalog::embedded().unwrap(), &[source::SOURCE]));
    let task = tokio::spawn(source::run(client, index.clone(), rediscover));
    (index, Running(task))
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(6);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn jobset(index: &Index) -> Option<Arc<pb::Workload>> {
    index.workload(&pb::ObjectRef {
        kind: "JobSet".into(),
        namespace: "ml".into(),
        name: "llama-train".into(),
        ..Default::default()
    })
}

fn current_pods(index: &Index) -> u32 {
    jobset(index)
        .and_then(|w| w.pods)
        .map_or(u32::MAX, |p| p.current)
}

/// The latest change of the JobSet after `since`.
fn jobset_change(index: &Index, since: u64) -> Option<(pb::EventType, u32)> {
    let (changes, _) = index.changes_since(since, &Default::default())?;
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
    let (all, _, _) = index.list(&Default::default(), 0, 1000);
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
fn kube_objects_are_sanitized_before_caching() {
    let mut pod = seed().into_iter().find(|d| d["kind"] == "Pod").unwrap();
    pod["metadata"]["managedFields"] = json!([{"manager": "kubelet"}]);
    pod["spec"]["initContainers"] =
        json!([{"name": "i", "args": [SECRET], "envFrom": [{"secretRef": {"name": "s"}}]}]);
    source::sanitize(&mut pod);
    let text = pod.to_string();
    assert!(!text.contains(SECRET), "{text}");
    assert!(
        !text.contains("managedFields") && !text.contains("envFrom"),
        "{text}"
    );
    assert!(
        pod["spec"]["containers"][0]["resources"].is_object(),
        "resources kept"
    );

    let mut js = seed().into_iter().find(|d| d["kind"] == "JobSet").unwrap();
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "T", "value": SECRET}]);
    source::sanitize(&mut js);
    assert!(!js.to_string().contains(SECRET));
}

async fn watch_events(http: bool) {
    let fake = cluster(true);
    let (index, _running) = synced_seed(http, &fake).await;
    eventually("the pod watch", || fake.open_watches(PODS) == 1).await;

    // DELETED pod → the JobSet is MODIFIED with 2 pods.
    let rev = index.revision();
    fake.delete(WORKER_POD, false);
    eventually("the pod deletion", || {
        jobset_change(&index, rev) == Some((pb::EventType::Modified, 2))
    })
    .await;

    // BOOKMARK is harmless: nothing changes, no relist.
    let rev = index.revision();
    fake.bookmark();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(index.revision(), rev);
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
    let rev = index.revision();
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
    assert!(
        index
            .object_api_version("Pod", "ml", "llama-train-leader-0-0-q9wzt")
            .is_some()
    );
    assert!(
        index
            .object_api_version("Job", "ml", "llama-train-leader-0")
            .is_some()
    );
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
