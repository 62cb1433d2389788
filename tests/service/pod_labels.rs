//! Pods labelled with their workload (issue 38), over every catalog kind and against a
//! cluster:
//!
//! - every pod of every realistic snapshot (`tests/catalog/<framework>/`, `examples/cluster/`)
//!   is sent to `POST /mutate/pods` as the API server sends its CREATE, over a server whose
//!   cache holds the snapshot without that pod (as at admission); the labels must name the
//!   workload, component path, instance and replica that resolution of the whole snapshot
//!   gives the pod (read from the published graph's component tree);
//! - a race against the fake API server: owners and pods created back to back, the webhook
//!   reading owners the cache has not seen and the labelling pass catching the rest, finds
//!   every pod labelled within a bounded time.

use crate::policy_admission::{apply, ask, catalog, listen, review};
use kartograf::board::pod_labels::label_value;
use kartograf::definition::LoadReport;
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use kartograf::server::Shared;
use kartograf::webhook::mutate;
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Every snapshot file: (path relative to the crate, its documents).
fn snapshots() -> Vec<(String, Vec<Json>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let files = crate::workloads::snapshot_files();
    files
        .into_iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(&f).ok()?;
            let docs = kartograf::manifest::parse_documents(&text).ok()?;
            let name = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
            Some((name, docs))
        })
        .collect()
}

fn is_pod(d: &Json) -> bool {
    d["apiVersion"] == "v1" && d["kind"] == "Pod"
}

/// The labels each pod of `graph` should get (by pod uid): the workload, and the component
/// path below the root component (`.` between levels) read from its component tree; the
/// instance and replica are the pod's placement ([`placed`]).
fn expected(graph: &pb::Workload, out: &mut BTreeMap<String, BTreeMap<String, String>>) {
    let r = graph.r#ref.clone().unwrap_or_default();
    let base = BTreeMap::from([
        (
            "kartograf.io/workload-kind".to_owned(),
            label_value(&r.kind),
        ),
        (
            "kartograf.io/workload-name".to_owned(),
            label_value(&r.name),
        ),
    ]);
    fn walk(
        comps: &[pb::Component],
        path: &[String],
        root: bool,
        base: &BTreeMap<String, String>,
        out: &mut BTreeMap<String, BTreeMap<String, String>>,
    ) {
        for c in comps {
            let mut here = path.to_vec();
            if !root {
                here.push(c.name.clone());
            }
            let component = if here.is_empty() {
                c.name.clone()
            } else {
                here.join(".")
            };
            for i in &c.instances {
                for p in &i.pod_list {
                    let mut l = base.clone();
                    l.insert("kartograf.io/component".into(), label_value(&component));
                    out.insert(p.uid.clone(), l);
                }
                walk(&i.children, &here, false, base, out);
            }
        }
    }
    walk(&graph.components, &[], true, &base, out);
    for p in &graph.unattributed_pods {
        out.insert(p.uid.clone(), base.clone());
    }
}

/// Adds the instance and replica of `placement` to `labels`.
fn placed(labels: &mut BTreeMap<String, String>, placement: &pb::PodPlacement) {
    for (key, value) in [
        ("kartograf.io/instance", &placement.instance),
        ("kartograf.io/replica", &placement.replica),
    ] {
        let v = label_value(value);
        if !v.is_empty() {
            labels.insert(key.into(), v);
        }
    }
}

/// The `kartograf.io/` labels of a labelled pod.
fn ours(labelled: &Json) -> BTreeMap<String, String> {
    labelled["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("kartograf.io/"))
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_every_catalog_kind_get_their_workload_component_and_replica_labels() {
    let mut failures = Vec::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut checked = 0;
    for (file, docs) in snapshots() {
        // Resolution of the whole snapshot: what each pod should be labelled.
        let whole = Index::new(catalog(), &[]);
        let _ = whole.batch().write(Write::reset("snapshot", &docs));
        let mut want = BTreeMap::new();
        let (entries, _) = whole.board().entries();
        for e in &entries {
            expected(&e.graph.graph(), &mut want);
        }
        // The server at admission: the snapshot without the pod being created (other pods
        // may own it: a LeaderWorkerSet's leader, a Spark driver).
        let index = Arc::new(Index::new(catalog(), &[]));
        let _ = index.batch().write(Write::reset("snapshot", &docs));
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx);
        let (addr, server) = listen(shared).await;
        for (n, pod) in docs.iter().filter(|d| is_pod(d)).enumerate() {
            let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
            let Some(mut want) = want.get(uid).cloned() else {
                continue;
            };
            let r = pb::ObjectRef {
                uid: uid.to_owned(),
                ..Default::default()
            };
            if let Ok((_, placement)) = whole.published_of_pod(&r)
                && want.contains_key("kartograf.io/component")
            {
                placed(&mut want, &placement);
            }
            let _ = index.batch().write(Write::delete(uid));
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
            let rid = format!("r{n}");
            let (_, patch) = ask(
                addr,
                mutate::PODS,
                &rid,
                &review(&rid, ("", "v1", "Pod"), ns, pod),
            )
            .await;
            let got = patch.map(|p| ours(&apply(pod, &p))).unwrap_or_default();
            let name = pod["metadata"]["name"].as_str().unwrap_or("?");
            if got != want {
                failures.push(format!("{file}: pod {name}: got {got:?}, want {want:?}"));
            }
            let _ = index.batch().write(Write::apply("snapshot", pod.clone()));
            checked += 1;
            *kinds
                .entry(want["kartograf.io/workload-kind"].clone())
                .or_default() += 1;
        }
        server.abort();
    }
    assert!(
        failures.is_empty(),
        "{} wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        checked > 100 && kinds.len() > 25,
        "only {checked} pods of {} kinds: {kinds:?}",
        kinds.len()
    );
    eprintln!(
        "{checked} pods of {} kinds labelled as resolution places them: {kinds:?}",
        kinds.len()
    );
}

const NS: &str = "ml";

fn race_jobset(k: usize) -> Json {
    serde_json::json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": format!("race-{k}"), "namespace": NS, "uid": format!("race-{k}-uid")},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": 2, "completions": 2,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}}]}
    })
}

fn race_job(k: usize) -> Json {
    serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": format!("race-{k}-workers-0"), "namespace": NS, "uid": format!("race-{k}-job-uid"),
            "labels": {"jobset.sigs.k8s.io/jobset-name": format!("race-{k}"),
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/job-index": "0"},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "name": format!("race-{k}"), "uid": format!("race-{k}-uid"), "controller": true,
                "blockOwnerDeletion": true}]},
        "spec": {"parallelism": 2, "completions": 2,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]}}}
    })
}

/// A pod of job `k` as the Job controller creates it: `generateName`, no name yet.
fn race_pod(k: usize, i: usize) -> Json {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("race-{k}-workers-0-{i}-"), "namespace": NS,
            "labels": {"jobset.sigs.k8s.io/jobset-name": format!("race-{k}"),
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": i.to_string()},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                "name": format!("race-{k}-workers-0"), "uid": format!("race-{k}-job-uid"),
                "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [{"name": "trainer", "image": "trainer:1",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    })
}

/// The pod as the API server stores it: named, with a uid.
fn stored(mut pod: Json, name: &str) -> Json {
    pod["metadata"]["name"] = json!(name);
    pod["metadata"]["uid"] = json!(format!("{name}-uid"));
    pod
}

fn race_cluster() -> crate::fake_apiserver::FakeApiServer {
    let fake = crate::fake_apiserver::FakeApiServer::new();
    fake.register("v1", "Pod", "pods", true);
    fake.register("batch/v1", "Job", "jobs", true);
    fake.register("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", true);
    fake
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_not_cached_is_read_from_the_cluster_and_the_pod_labelled() {
    let fake = race_cluster();
    fake.upsert(race_jobset(0));
    fake.upsert(race_job(0));
    // The cache has seen neither the JobSet nor its Job.
    let index = Arc::new(Index::new(catalog(), &[]));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx).with_owner_lookup(
        Arc::new(kartograf::source::kube::owner_lookup::ClusterLookup::new(
            fake.client(),
        )),
    );
    let policies = shared.policies.clone();
    let (addr, _server) = listen(shared).await;
    let pod = race_pod(0, 1);
    let (_, patch) = ask(
        addr,
        mutate::PODS,
        "a1",
        &review("a1", ("", "v1", "Pod"), NS, &pod),
    )
    .await;
    let labels = ours(&apply(
        &pod,
        &patch.expect("labels from the owners read directly"),
    ));
    assert_eq!(labels["kartograf.io/workload-kind"], "JobSet", "{labels:?}");
    assert_eq!(labels["kartograf.io/workload-name"], "race-0");
    assert_eq!(labels["kartograf.io/component"], "replicatedjob");
    assert_eq!(labels["kartograf.io/instance"], "workers");
    let c = &policies.counters;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    // Two hops: the Job, then its JobSet.
    assert_eq!(n(&c.owner_lookups_found), 2);
    // An owner the cluster does not have either: admitted unlabelled, counted.
    let mut orphan = race_pod(9, 0);
    orphan["metadata"]["ownerReferences"][0]["name"] = json!("never-created");
    let (_, patch) = ask(
        addr,
        mutate::PODS,
        "a2",
        &review("a2", ("", "v1", "Pod"), NS, &orphan),
    )
    .await;
    assert!(patch.is_none());
    assert_eq!(n(&c.owner_lookups_missing), 1);
    assert_eq!(n(&c.pods_owner_not_cached), 1);
    // A Job read directly that names another namespace's JobSet is not believed.
    let mut foreign = race_job(1);
    foreign["metadata"]["namespace"] = json!("web");
    fake.upsert(foreign);
    let (_, patch) = ask(
        addr,
        mutate::PODS,
        "a3",
        &review("a3", ("", "v1", "Pod"), NS, &race_pod(1, 0)),
    )
    .await;
    assert!(
        patch.is_none(),
        "a pod cannot claim another namespace's owner: {patch:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_and_pods_created_back_to_back_all_end_up_labelled() {
    const WORKLOADS: usize = 30;
    let fake = race_cluster();
    let client = fake.client();
    let (index, _report, _source) = crate::kube::start_with(
        client.clone(),
        crate::kube::settings(Duration::from_secs(60)),
    );
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx.clone())
        .with_owner_lookup(Arc::new(
            kartograf::source::kube::owner_lookup::ClusterLookup::new(client.clone()),
        ));
    let policies = shared.policies.clone();
    let pass = tokio::spawn(kartograf::source::kube::pod_labels::run(
        client.clone(),
        index.clone(),
        policies.clone(),
        kartograf::source::kube::pod_labels::Settings {
            skip_namespaces: vec!["kube-system".into()],
            resync: Duration::from_secs(2),
        },
        rx,
    ));
    let (addr, _server) = listen(shared).await;
    let started = std::time::Instant::now();
    let mut at_admission = 0;
    for k in 0..WORKLOADS {
        // The JobSet, its Job and the Job's pods, back to back, as the controllers do.
        fake.upsert(race_jobset(k));
        fake.upsert(race_job(k));
        for i in 0..2 {
            let pod = race_pod(k, i);
            let name = format!("race-{k}-workers-0-{i}-x{k}");
            // Every third pod skips the webhook (its call timed out; failurePolicy Ignore).
            let created = if (k + i) % 3 == 0 {
                pod
            } else {
                let uid = format!("race-{k}-{i}");
                let (_, patch) = ask(
                    addr,
                    mutate::PODS,
                    &uid,
                    &review(&uid, ("", "v1", "Pod"), NS, &pod),
                )
                .await;
                match patch {
                    Some(p) => {
                        at_admission += 1;
                        apply(&pod, &p)
                    }
                    None => pod,
                }
            };
            fake.upsert(stored(created, &name));
        }
    }
    // Every pod is labelled with its JobSet within a bounded time.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let unlabelled = || {
        (0..WORKLOADS)
            .flat_map(|k| (0..2).map(move |i| (k, i)))
            .filter(|(k, i)| {
                let pod = fake.get("/api/v1/pods", &format!("{NS}/race-{k}-workers-0-{i}-x{k}"));
                let labels = pod.as_ref().map(ours).unwrap_or_default();
                labels.get("kartograf.io/workload-name").map(String::as_str)
                    != Some(format!("race-{k}").as_str())
                    || labels.get("kartograf.io/workload-kind").map(String::as_str)
                        != Some("JobSet")
                    || labels.get("kartograf.io/component").map(String::as_str)
                        != Some("replicatedjob")
            })
            .count()
    };
    while unlabelled() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} pods still unlabelled after 15 s",
            unlabelled(),
            2 * WORKLOADS
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let later = n(&policies.counters.pass_labelled);
    // The pods that skipped the webhook were labelled by the pass.
    assert!(
        later >= (2 * WORKLOADS / 3) as u64,
        "the pass labelled {later}"
    );
    assert_eq!(n(&policies.counters.pass_failed), 0);
    // Most webhook pods were labelled at admission (cached owners, or owners read directly;
    // a read that ran out of time under load leaves the pod to the pass).
    assert!(at_admission >= WORKLOADS / 2, "{at_admission} at admission");
    eprintln!(
        "{} pods labelled in {took:?}: {at_admission} at admission ({} owners read directly), {later} by the pass",
        2 * WORKLOADS,
        n(&policies.counters.owner_lookups_found)
    );
    pass.abort();
}

/// Owners read from the cluster get the same distrust as cached ones: an owner deleted and
/// created again under the same name (another uid), and an owner cycle, label nothing; a
/// cycle is not followed further than the hop bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_read_directly_that_do_not_add_up_label_nothing() {
    let fake = race_cluster();
    // The Job under the pod's reference was replaced: same name, another uid.
    let mut replaced = race_job(3);
    replaced["metadata"]["uid"] = json!("someone-else-uid");
    fake.upsert(race_jobset(3));
    fake.upsert(replaced);
    // Two Jobs owning each other.
    for (a, b) in [("loop-a", "loop-b"), ("loop-b", "loop-a")] {
        fake.upsert(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": a, "namespace": NS, "uid": format!("{a}-uid"),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": b,
                    "uid": format!("{b}-uid"), "controller": true}]},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}));
    }
    let index = Arc::new(Index::new(catalog(), &[]));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let shared =
        Shared::new(index, Arc::new(LoadReport::default()), rx).with_owner_lookup(Arc::new(
            kartograf::source::kube::owner_lookup::ClusterLookup::new(fake.client()),
        ));
    let policies = shared.policies.clone();
    let (addr, _server) = listen(shared).await;
    let (_, patch) = ask(
        addr,
        mutate::PODS,
        "h1",
        &review("h1", ("", "v1", "Pod"), NS, &race_pod(3, 0)),
    )
    .await;
    assert!(
        patch.is_none(),
        "a replaced owner is not the one referenced: {patch:?}"
    );
    let mut looped = race_pod(4, 0);
    looped["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job",
        "name": "loop-a", "uid": "loop-a-uid", "controller": true}]);
    let started = std::time::Instant::now();
    let (_, patch) = ask(
        addr,
        mutate::PODS,
        "h2",
        &review("h2", ("", "v1", "Pod"), NS, &looped),
    )
    .await;
    assert!(
        patch.is_none(),
        "an owner cycle names no workload: {patch:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    // At most one read per hop: loop-a, loop-b (then the cycle is seen).
    assert!(n(&policies.counters.owner_lookups_found) <= 3);
}
