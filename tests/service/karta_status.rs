//! Karta objects as cluster citizens (issue 30): status conditions and index labels written
//! through the fake API server's write routes by the reconciler, in-process and as two
//! `kartograf serve` processes electing a writer with a Lease.

use crate::fake_apiserver::FakeApiServer;
use crate::karta_admission::job_karta;
use kartograf::definition::LoadReport;
use kartograf::source::kube::karta::status::{self, Settings};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KARTAS: &str = "/apis/run.ai/v1alpha1/kartas";
const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";

fn cluster() -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.register("run.ai/v1alpha1", "Karta", "kartas", true);
    fake.register("batch/v1", "Job", "jobs", true);
    fake.register("coordination.k8s.io/v1", "Lease", "leases", true);
    fake
}

/// A valid Karta for a kind the cluster does not serve.
fn widget_karta(name: &str) -> Value {
    let mut k = job_karta(name);
    k["spec"]["structureDefinition"]["rootComponent"]["kind"] =
        json!({"group": "example.com", "version": "v1", "kind": "Widget"});
    k
}

fn broken_karta(name: &str) -> Value {
    let mut k = job_karta(name);
    let mut kind = k["spec"]["structureDefinition"]["rootComponent"]["kind"].clone();
    kind["version"] = json!("v9");
    k["spec"]["structureDefinition"]["rootComponent"]["kind"] = kind;
    k["spec"]["structureDefinition"]["rootComponent"]["scaleDefinition"]["replicasPath"] =
        json!(".spec | ((");
    k
}

fn condition<'a>(obj: &'a Value, type_: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

fn status_writes(fake: &FakeApiServer, name: &str, code: u16) -> usize {
    fake.writes(&format!("{KARTAS}/{name}/status"))
        .iter()
        .filter(|w| w.method == "PATCH" && w.code == code)
        .count()
}

async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_are_written_once_per_change_conflicts_retried_labels_re_asserted() {
    let fake = cluster();
    for k in [
        job_karta("jobs"),
        widget_karta("widgets"),
        broken_karta("broken"),
    ] {
        fake.upsert(k);
    }
    let report = Arc::new(LoadReport::default());
    report.set_drift([("jobs".to_owned(), Vec::new())].into_iter().collect());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (published, definitions) = tokio::sync::watch::channel(0u64);
    let settings = Settings {
        lease: None,
        resync: Duration::from_secs(3600),
    };
    tokio::spawn(status::run(
        fake.client(),
        report.clone(),
        settings,
        Some(definitions),
        stopped,
    ));

    let limit = Duration::from_secs(10);
    until("every Karta has its conditions", limit, || {
        ["jobs", "widgets", "broken"]
            .iter()
            .all(|n| condition(&fake.get(KARTAS, n).unwrap_or_default(), "Ready").is_object())
    })
    .await;
    let jobs = fake.get(KARTAS, "jobs").unwrap();
    for t in ["KartaValidated", "CRDExists", "Ready", "SchemaInSync"] {
        assert_eq!(condition(&jobs, t)["status"], "True", "{t}: {jobs}");
        assert_eq!(condition(&jobs, t)["observedGeneration"], 1);
    }
    assert_eq!(condition(&jobs, "Ready")["reason"], "Ready");
    assert_eq!(jobs["metadata"]["labels"]["run.ai/karta-kind"], "Job");
    assert_eq!(jobs["metadata"]["labels"]["run.ai/karta-group"], "batch");
    assert_eq!(jobs["metadata"]["labels"]["run.ai/karta-version"], "v1");

    let widgets = fake.get(KARTAS, "widgets").unwrap();
    assert_eq!(condition(&widgets, "KartaValidated")["status"], "True");
    assert_eq!(condition(&widgets, "CRDExists")["reason"], "CRDNotFound");
    assert_eq!(
        condition(&widgets, "CRDExists")["message"],
        "CRD for example.com/Widget not found or does not serve version v1"
    );
    assert_eq!(condition(&widgets, "Ready")["status"], "False");
    assert_eq!(condition(&widgets, "SchemaInSync")["status"], "Unknown");

    let broken = fake.get(KARTAS, "broken").unwrap();
    let validated = condition(&broken, "KartaValidated");
    assert_eq!(validated["reason"], "ValidationFailed");
    let message = validated["message"].as_str().unwrap();
    assert!(
        message.contains("spec.structureDefinition.rootComponent.scaleDefinition.replicasPath")
            && message.contains("expression: `.spec | ((`"),
        "{message}"
    );
    assert!(message.len() <= kartograf::karta::MESSAGE_BYTES);
    // The root kind's version is not served either.
    assert_eq!(condition(&broken, "CRDExists")["status"], "False");

    // Once per change: the reconciler's own writes come back as events and write nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for n in ["jobs", "widgets", "broken"] {
        assert_eq!(
            status_writes(&fake, n, 200),
            1,
            "{n}: {:?}",
            fake.writes(KARTAS)
        );
    }
    let transition =
        condition(&fake.get(KARTAS, "jobs").unwrap(), "Ready")["lastTransitionTime"].clone();

    // Labels removed by hand come back; the status is not written again.
    fake.edit(KARTAS, "jobs", |o| {
        o["metadata"].as_object_mut().unwrap().remove("labels");
    });
    until("the labels are re-asserted", limit, || {
        fake.get(KARTAS, "jobs").unwrap()["metadata"]["labels"]["run.ai/karta-kind"] == "Job"
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status_writes(&fake, "jobs", 200), 1);

    // A new generation is written once, through two conflicts, keeping the transition time.
    fake.conflict_next(&format!("{KARTAS}/jobs/status"), 2);
    fake.edit(KARTAS, "jobs", |o| {
        o["metadata"]["generation"] = json!(2);
        o["spec"]["structureDefinition"]["rootComponent"]["scaleDefinition"]["replicasPath"] =
            json!(".spec.parallelism // 1");
    });
    until("observedGeneration 2", limit, || {
        condition(&fake.get(KARTAS, "jobs").unwrap(), "Ready")["observedGeneration"] == 2
    })
    .await;
    // The two scripted conflicts, and any from events older than the last write (each is
    // answered by a fresh read, not a second write).
    assert!(status_writes(&fake, "jobs", 409) >= 2);
    assert_eq!(status_writes(&fake, "jobs", 200), 2);
    let jobs = fake.get(KARTAS, "jobs").unwrap();
    assert_eq!(condition(&jobs, "Ready")["lastTransitionTime"], transition);
    // Status writes are merge patches carrying the resourceVersion they were computed from.
    let last = fake.writes(&format!("{KARTAS}/jobs/status")).pop().unwrap();
    assert_eq!(last.content_type, "application/merge-patch+json");
    assert!(
        last.body["metadata"]["resourceVersion"].is_string(),
        "{:?}",
        last.body
    );

    // Schema drift found at a republication is a condition of its own; Ready stays.
    let finding = "`.spec.parallelism`: batch/v1 Job (cluster) has no field `parallelism`";
    report.set_drift(
        [("jobs".to_owned(), vec![finding.to_owned()])]
            .into_iter()
            .collect(),
    );
    published.send_replace(1);
    until("SchemaInSync turns False", limit, || {
        condition(&fake.get(KARTAS, "jobs").unwrap(), "SchemaInSync")["reason"] == "SchemaDrift"
    })
    .await;
    let jobs = fake.get(KARTAS, "jobs").unwrap();
    assert_eq!(condition(&jobs, "SchemaInSync")["message"], finding);
    assert_eq!(condition(&jobs, "Ready")["status"], "True");

    // Fixing the broken definition flips its conditions.
    fake.edit(KARTAS, "broken", |o| {
        *o = job_karta("broken");
        o["metadata"]["generation"] = json!(2);
        o["spec"]["structureDefinition"]["rootComponent"]["kind"]["version"] = json!("v1");
    });
    until("the fixed Karta is Ready", limit, || {
        condition(&fake.get(KARTAS, "broken").unwrap(), "Ready")["status"] == "True"
    })
    .await;
    let _ = stop.send(true);
}

/// A kubeconfig for `url`.
fn kubeconfig(url: &str) -> std::path::PathBuf {
    crate::fake_apiserver::write_kubeconfig(&crate::temp_dir("karta-lease"), url)
}

const LEASE_DURATION: Duration = Duration::from_secs(2);

fn replica(kubeconfig: &std::path::Path, identity: &str) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args([
            "--leader-elect-namespace",
            "kartograf",
            "--leader-elect-identity",
            identity,
        ])
        .args([
            "--leader-elect-lease-duration",
            "2s",
            "--leader-elect-renew-deadline",
            "1500ms",
        ])
        .args([
            "--leader-elect-retry-period",
            "200ms",
            "--log-level",
            "warn",
        ])
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("POD_NAMESPACE")
        .env_remove("POD_NAME")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn kartograf")
}

fn holder(fake: &FakeApiServer) -> String {
    fake.get(LEASES, "kartograf/kartograf-karta-status")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_elect_one_writer_and_the_other_takes_over_when_it_dies() {
    let fake = cluster();
    fake.upsert(job_karta("jobs"));
    let config = kubeconfig(&fake.serve_http().await);
    let mut a = replica(&config, "replica-a");
    let mut b = replica(&config, "replica-b");
    let limit = Duration::from_secs(30);
    until("a leader holds the Lease", limit, || {
        !holder(&fake).is_empty()
    })
    .await;
    until("the conditions are written", limit, || {
        condition(&fake.get(KARTAS, "jobs").unwrap_or_default(), "Ready").is_object()
    })
    .await;
    // Both replicas run for a few lease periods: only the leader writes, once.
    tokio::time::sleep(2 * LEASE_DURATION).await;
    assert_eq!(
        status_writes(&fake, "jobs", 200),
        1,
        "{:?}",
        fake.writes(KARTAS)
    );
    let leader = holder(&fake);
    let (dead, survivor, other) = if leader == "replica-a" {
        (&mut a, "replica-b", &mut b)
    } else {
        (&mut b, "replica-a", &mut a)
    };
    dead.kill().expect("kill the leader");
    let _ = dead.wait();
    let killed = Instant::now();
    fake.edit(KARTAS, "jobs", |o| {
        o["metadata"]["generation"] = json!(2);
        o["spec"]["structureDefinition"]["rootComponent"]["scaleDefinition"]["replicasPath"] =
            json!(".spec.parallelism // 1");
    });
    until("the survivor writes the new generation", limit, || {
        condition(&fake.get(KARTAS, "jobs").unwrap(), "Ready")["observedGeneration"] == 2
    })
    .await;
    let took = killed.elapsed();
    assert_eq!(holder(&fake), survivor);
    assert_eq!(status_writes(&fake, "jobs", 200), 2);
    // Taken over after the lease ran out, as the survivor saw it (its last observation of
    // a renewal plus the lease duration, plus one retry period).
    assert!(
        took <= LEASE_DURATION + Duration::from_millis(1500),
        "the survivor wrote {took:?} after the leader died"
    );
    println!(
        "takeover: the survivor wrote {took:?} after the leader was killed (lease 2s, retry 200ms)"
    );
    let _ = other.kill();
    let _ = other.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_candidates_race_one_wins_and_a_release_hands_over_at_once() {
    use kartograf::source::kube::karta::lease::{Candidate, Settings as LeaseSettings};
    let fake = cluster();
    let settings = |id: &str| {
        let mut s = LeaseSettings::new("kartograf", "race", id);
        s.lease_duration = Duration::from_secs(30);
        s
    };
    let mut a = Candidate::new(fake.client(), settings("a"));
    let mut b = Candidate::new(fake.client(), settings("b"));
    // Both try at once: exactly one holds the Lease.
    let (ra, rb) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra != rb, "exactly one holds the Lease: a {ra}, b {rb}");
    let (holder, mut other) = if ra { ("a", b) } else { ("b", a) };
    let lease = fake.get(LEASES, "kartograf/race").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], holder);
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 30);
    // The other keeps following while the record is fresh.
    assert!(!other.try_acquire_or_renew().await.unwrap());
    // However the two interleaved, one create succeeded (a second one gets 409).
    let created = fake
        .writes("/apis/coordination.k8s.io/v1/namespaces/kartograf/leases")
        .iter()
        .filter(|w| w.method == "POST" && w.code == 201)
        .count();
    assert_eq!(created, 1);
    // The holder releases: the other takes over at its next attempt, not 30 s later.
    let mut holder_candidate = Candidate::new(fake.client(), settings(holder));
    holder_candidate.release().await;
    let lease = fake.get(LEASES, "kartograf/race").unwrap();
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
    let started = Instant::now();
    assert!(other.try_acquire_or_renew().await.unwrap());
    assert!(started.elapsed() < Duration::from_secs(5));
    let lease = fake.get(LEASES, "kartograf/race").unwrap();
    assert_ne!(lease["spec"]["holderIdentity"], holder);
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
}

/// Issue 42: 200 Kartas created at once are all labelled and their status written within
/// 5 s (one pass for what arrives together, objects reconciled concurrently, discovery once
/// per pass), each status written once and without a stale-resourceVersion conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_kartas_created_at_once_are_reconciled_within_five_seconds() {
    let fake = cluster();
    let report = Arc::new(LoadReport::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let settings = Settings {
        lease: None,
        resync: Duration::from_secs(3600),
    };
    tokio::spawn(status::run(
        fake.client(),
        report.clone(),
        settings,
        None,
        stopped,
    ));
    // The reconciler is watching (an empty list) before the objects come.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let names: Vec<String> = (0..200).map(|i| format!("k{i:03}")).collect();
    for (i, n) in names.iter().enumerate() {
        fake.upsert(if i % 2 == 0 {
            job_karta(n)
        } else {
            widget_karta(n)
        });
    }
    let took = until(
        "200 Kartas labelled and written",
        Duration::from_secs(5),
        || {
            names.iter().all(|n| {
                let o = fake.get(KARTAS, n).unwrap_or_default();
                o["metadata"]["labels"]["run.ai/karta-kind"].is_string()
                    && condition(&o, "Ready").is_object()
            })
        },
    )
    .await;
    eprintln!("200 Kartas reconciled in {took:?}");
    // The writes' own events come back: nothing more is written, nothing conflicts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for n in &names {
        assert_eq!(status_writes(&fake, n, 200), 1, "{n}");
        assert_eq!(status_writes(&fake, n, 409), 0, "{n}");
    }
    // An edit costs one write and no conflict.
    fake.edit(KARTAS, "k000", |o| {
        o["metadata"]["generation"] = json!(2);
    });
    until("observedGeneration 2", Duration::from_secs(5), || {
        condition(&fake.get(KARTAS, "k000").unwrap(), "Ready")["observedGeneration"] == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(status_writes(&fake, "k000", 200), 2);
    assert_eq!(status_writes(&fake, "k000", 409), 0);
    let _ = stop.send(true);
}
