//! `WorkloadResolver.Patch` on a real server over the demo cluster, and `kartograf patch
//! --apply` (the real binary) against the fake API server with the real kube-rs client.

use crate::fake_apiserver::{FakeApiServer, write_kubeconfig};
use kartograf::proto::v1 as pb;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tonic::Code;

fn kai() -> pb::PatchIntents {
    pb::PatchIntents {
        scheduler_name: "kai-scheduler".into(),
        labels: BTreeMap::from([("kai.scheduler/queue".into(), "team-a".into())]),
        ..Default::default()
    }
}

fn by_ref(kind: &str, ns: &str, name: &str, intents: pb::PatchIntents) -> pb::PatchRequest {
    pb::PatchRequest {
        target: Some(pb::patch_request::Target::Workload(pb::ObjectRef {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        })),
        intents: Some(intents),
        ..Default::default()
    }
}

/// The demo cluster's document of a workload, as written in its file.
fn demo(file: &str, kind: &str) -> Value {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/cluster")
            .join(file),
    )
    .unwrap();
    kartograf::manifest::parse_documents(&text)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == kind)
        .unwrap()
}

#[tokio::test]
async fn patch_of_a_cached_workload_is_guarded_and_applies_to_the_object() {
    let mut h = crate::start(16).await;
    let r = h
        .client
        .patch(by_ref("JobSet", "ml", "llama-train", kai()))
        .await
        .expect("patched")
        .into_inner();
    let ops: Value = serde_json::from_str(&r.patch_json).unwrap();
    let object = demo("jobset.yaml", "JobSet");
    assert_eq!(
        ops[0],
        json!({"op": "test", "path": "/metadata/uid", "value": object["metadata"]["uid"]})
    );
    assert_eq!(
        ops[1],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": object["metadata"]["resourceVersion"]})
    );
    assert_eq!(r.changes as usize, ops.as_array().unwrap().len() - 2);
    assert_eq!(r.target.unwrap().name, "llama-train");
    // The file's object (with its env, which the cache drops) takes the patch.
    let p: json_patch::Patch = serde_json::from_value(ops).unwrap();
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &p).expect("applies to the real object");
    for job in patched["spec"]["replicatedJobs"].as_array().unwrap() {
        let t = &job["template"]["spec"]["template"];
        assert_eq!(t["spec"]["schedulerName"], "kai-scheduler");
        assert_eq!(t["metadata"]["labels"]["kai.scheduler/queue"], "team-a");
    }
    // The cached object lacks env: whole objects and array-sending merge patches are refused.
    let mut whole = by_ref("JobSet", "ml", "llama-train", kai());
    whole.output = pb::PatchOutput::Object as i32;
    let e = h.client.patch(whole).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
    // A definition that cannot express an intent: refused whole, naming what is missing.
    let e = h
        .client
        .patch(by_ref("SparkApplication", "analytics", "", kai()))
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::InvalidArgument | Code::NotFound),
        "{e:?}"
    );
    let spark = demo("spark.yaml", "SparkApplication");
    let e = h
        .client
        .patch(by_ref(
            "SparkApplication",
            spark["metadata"]["namespace"].as_str().unwrap(),
            spark["metadata"]["name"].as_str().unwrap(),
            kai(),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message()
            .contains("sparkoperator-k8s-io-sparkapplication-v1beta2")
            && e.message().contains("schedulerNamePath"),
        "{}",
        e.message()
    );
    // Kubernetes' label rules, before anything is computed.
    let mut bad = kai();
    bad.labels.insert("not a key".into(), "x".into());
    let e = h
        .client
        .patch(by_ref("JobSet", "ml", "llama-train", bad))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("label key"), "{}", e.message());
    let e = h
        .client
        .patch(by_ref(
            "JobSet",
            "ml",
            "llama-train",
            pb::PatchIntents::default(),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn inline_patches_answer_every_form_and_a_dry_run_graph() {
    let mut h = crate::start(16).await;
    let object = demo("pytorchjob.yaml", "PyTorchJob");
    let inline = |output: pb::PatchOutput, intents: pb::PatchIntents| pb::PatchRequest {
        target: Some(pb::patch_request::Target::Inline(pb::InlineWorkload {
            object_json: object.to_string(),
            pods_json: Vec::new(),
        })),
        intents: Some(intents),
        output: output as i32,
        dry_run: true,
        cluster: String::new(),
    };
    let r = h
        .client
        .patch(inline(pb::PatchOutput::Object, kai()))
        .await
        .unwrap()
        .into_inner();
    let patched: Value = serde_json::from_str(&r.patch_json).unwrap();
    for role in ["Master", "Worker"] {
        let t = &patched["spec"]["pytorchReplicaSpecs"][role]["template"];
        assert_eq!(t["spec"]["schedulerName"], "kai-scheduler", "{role}");
    }
    let graph = r.graph.expect("a dry-run graph");
    assert_eq!(graph.r#ref.unwrap().name, object["metadata"]["name"]);
    assert!(!graph.components.is_empty());
    let merge = h
        .client
        .patch(inline(pb::PatchOutput::MergePatch, kai()))
        .await
        .unwrap()
        .into_inner();
    let mut merged = object.clone();
    json_patch::merge(
        &mut merged,
        &serde_json::from_str(&merge.patch_json).unwrap(),
    );
    assert_eq!(merged, patched);
    // Suspend through the definition's actions, then nothing more to do.
    let suspend = pb::PatchIntents {
        lifecycle: pb::Lifecycle::Suspend as i32,
        ..Default::default()
    };
    let r = h
        .client
        .patch(inline(pb::PatchOutput::JsonPatch, suspend))
        .await
        .unwrap()
        .into_inner();
    let ops: Value = serde_json::from_str(&r.patch_json).unwrap();
    assert!(
        ops.as_array()
            .unwrap()
            .iter()
            .any(|o| o["path"] == "/spec/runPolicy/suspend" && o["value"] == true),
        "{ops}"
    );
    let e = h
        .client
        .patch(pb::PatchRequest {
            output: 9,
            ..inline(pb::PatchOutput::JsonPatch, kai())
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

/// The fake cluster: one JobSet, served.
fn cluster() -> (FakeApiServer, Value) {
    let fake = FakeApiServer::new();
    fake.register("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", true);
    let jobset = demo("jobset.yaml", "JobSet");
    fake.upsert(jobset.clone());
    (fake, jobset)
}

const PATH: &str = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/llama-train";

async fn run(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    let kubeconfig = kubeconfig.to_owned();
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
            .arg("patch")
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_sends_a_guarded_json_patch_and_reports_a_stale_read_clearly() {
    let (fake, _) = cluster();
    let url = fake.serve_http().await;
    let kubeconfig = write_kubeconfig(&crate::temp_dir("patch-apply"), &url);
    let args = [
        "jobset/llama-train",
        "-n",
        "ml",
        "--apply",
        "--scheduler-name",
        "kai-scheduler",
        "--label",
        "kai.scheduler/queue=team-a",
    ];
    let out = run(&kubeconfig, &args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let writes = fake.writes(PATH);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].content_type, "application/json-patch+json");
    assert_eq!(writes[0].body[0]["op"], "test");
    assert_eq!(writes[0].body[1]["path"], "/metadata/resourceVersion");
    let stored = fake
        .get("/apis/jobset.x-k8s.io/v1alpha2/jobsets", "ml/llama-train")
        .unwrap();
    for job in stored["spec"]["replicatedJobs"].as_array().unwrap() {
        assert_eq!(
            job["template"]["spec"]["template"]["spec"]["schedulerName"],
            "kai-scheduler"
        );
    }
    // Again: nothing to change, nothing written.
    let out = run(&kubeconfig, &args).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to change"));
    assert_eq!(fake.writes(PATH).len(), 1);

    // Someone else changes the object between the read and the patch: the `test` on the
    // resourceVersion fails (422), nothing is written, and the message says so.
    fake.change_after_get(PATH, 1);
    let out = run(
        &kubeconfig,
        &["jobset/llama-train", "-n", "ml", "--apply", "--suspend"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{stderr}");
    assert!(
        stderr.contains("changed since it was read")
            && stderr.contains("422")
            && stderr.contains("nothing was written"),
        "{stderr}"
    );
    let stored = fake
        .get("/apis/jobset.x-k8s.io/v1alpha2/jobsets", "ml/llama-train")
        .unwrap();
    assert_ne!(stored["spec"]["suspend"], true);
    // A 409 from the server is reported the same way.
    fake.conflict_next(PATH, 1);
    let out = run(
        &kubeconfig,
        &["jobset/llama-train", "-n", "ml", "--apply", "--suspend"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{stderr}");
    assert!(stderr.contains("409"), "{stderr}");
    // And then it goes through.
    let out = run(
        &kubeconfig,
        &["jobset/llama-train", "-n", "ml", "--apply", "--suspend"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = fake
        .get("/apis/jobset.x-k8s.io/v1alpha2/jobsets", "ml/llama-train")
        .unwrap();
    assert_eq!(stored["spec"]["suspend"], true);
    // A missing object.
    let out = run(
        &kubeconfig,
        &["jobset/nope", "-n", "ml", "--apply", "--suspend"],
    )
    .await;
    assert_eq!(out.status.code(), Some(3));
}

/// `Patch` answers are remembered per version of the cached object: asking again gives the
/// same answer, and an object changed in the cache is planned anew (never a stale patch).
#[tokio::test]
async fn a_remembered_patch_never_outlives_the_object_it_was_planned_on() {
    let mut h = crate::start(16).await;
    let ask = |h: &mut crate::Harness| {
        let mut c = h.client.clone();
        async move {
            c.patch(by_ref("JobSet", "ml", "llama-train", kai()))
                .await
                .expect("patched")
                .into_inner()
        }
    };
    let first = ask(&mut h).await;
    assert_eq!(ask(&mut h).await, first);
    // The JobSet changes in the cache: a newer resourceVersion, already on KAI's scheduler.
    let mut changed = demo("jobset.yaml", "JobSet");
    changed["metadata"]["resourceVersion"] = json!("999999");
    for job in changed["spec"]["replicatedJobs"].as_array_mut().unwrap() {
        job["template"]["spec"]["template"]["spec"]["schedulerName"] = json!("kai-scheduler");
    }
    let _ = h.index.batch().write(kartograf::index::Write::apply(
        kartograf::source::manifests::SOURCE,
        changed,
    ));
    let again = ask(&mut h).await;
    let ops: Value = serde_json::from_str(&again.patch_json).unwrap();
    assert_eq!(
        ops[1],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "999999"}),
        "planned on the changed object"
    );
    assert!(
        again.changes < first.changes,
        "the scheduler name is there already"
    );
}
