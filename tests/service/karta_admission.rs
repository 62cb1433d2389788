//! Admission of Karta objects (issue 30): AdmissionReview v1 requests as the API server
//! sends them, over a real loopback listener, answered by `POST /karta/validate` and
//! `POST /karta/mutate`; the denials are `kartograf check`'s errors; hostile objects get a
//! bounded denial carrying the request's uid.

use crate::karmada::exchange;
use kartograf::definition::{Catalog, LoadReport, catalog::load_embedded};
use kartograf::index::Index;
use kartograf::karta;
use kartograf::server::Shared;
use kartograf::webhook::{self, admission};
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The embedded Job definition as a cluster object named `name`.
pub fn job_karta(name: &str) -> Json {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog/batch-job-v1.yaml"),
    )
    .unwrap();
    let mut doc = kartograf::manifest::parse_documents(&text)
        .unwrap()
        .remove(0);
    doc["metadata"] = json!({"name": name, "uid": format!("uid-{name}"), "generation": 1});
    doc
}

/// A webhook listener whose catalog holds the embedded definitions and `cluster` (Karta
/// objects already admitted).
async fn serve(cluster: &[Json]) -> (SocketAddr, tokio::sync::watch::Sender<bool>) {
    let (embedded, errors) = load_embedded();
    assert!(errors.is_empty());
    let cluster: Vec<_> = cluster
        .iter()
        .map(|o| karta::validate(o, o["metadata"]["name"].as_str().unwrap()).unwrap())
        .collect();
    let catalog = Catalog::from_layers(1, [embedded, Vec::new(), cluster]);
    let index: Arc<Index> = Arc::new(Index::new(catalog, &[]));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index, Arc::new(LoadReport::default()), rx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(webhook::serve(
        listener,
        shared,
        webhook::Settings::default(),
    ));
    (addr, tx)
}

/// The review the API server sends for `operation` on `object` (and `old`).
fn review(uid: &str, operation: &str, object: &Json, old: Option<&Json>) -> Vec<u8> {
    let mut request = json!({
        "uid": uid,
        "kind": {"group": "run.ai", "version": "v1alpha1", "kind": "Karta"},
        "resource": {"group": "run.ai", "version": "v1alpha1", "resource": "kartas"},
        "requestKind": {"group": "run.ai", "version": "v1alpha1", "kind": "Karta"},
        "requestResource": {"group": "run.ai", "version": "v1alpha1", "resource": "kartas"},
        "name": object["metadata"]["name"],
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": object,
        "oldObject": null,
        "dryRun": false,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
        .unwrap()
}

/// POSTs `body` to `path`; checks the answer as the API server's webhook client does
/// (apiVersion, kind, response.uid) and returns the response.
async fn ask(addr: SocketAddr, path: &str, uid: &str, body: &[u8]) -> Json {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, answer) = exchange(stream, "POST", path, body).await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&answer));
    assert!(answer.len() < 8 * 1024, "answer of {} bytes", answer.len());
    let v: Json = serde_json::from_slice(&answer).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    assert_eq!(v["response"]["uid"], uid);
    v["response"].clone()
}

/// The answer to an AdmissionReview of `object` (and `old`) sent to `path`.
async fn answer(
    addr: SocketAddr,
    path: &str,
    uid: &str,
    operation: &str,
    object: &Json,
    old: Option<&Json>,
) -> Json {
    ask(addr, path, uid, &review(uid, operation, object, old)).await
}

fn set(obj: &mut Json, pointer: &str, value: Json) {
    *obj.pointer_mut(pointer).unwrap() = value;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_karta_is_admitted_and_an_invalid_one_denied_with_check_s_errors() {
    let (addr, _stop) = serve(&[]).await;
    let valid = job_karta("jobs");
    let r = answer(addr, admission::VALIDATE, "u1", "CREATE", &valid, None).await;
    assert_eq!(r["allowed"], true, "{r}");

    // A jq syntax error.
    let mut broken = job_karta("jobs");
    set(
        &mut broken,
        "/spec/structureDefinition/rootComponent/scaleDefinition/replicasPath",
        json!(".spec | (("),
    );
    let r = answer(addr, admission::VALIDATE, "u2", "CREATE", &broken, None).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert_eq!(r["status"]["code"], 403);
    let message = r["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.structureDefinition.rootComponent.scaleDefinition.replicasPath")
            && message.contains("expression: `.spec | ((`"),
        "{message}"
    );

    // `kartograf check` gives the same error offline.
    let dir = crate::temp_dir("karta-check");
    let file = dir.join("broken.json");
    std::fs::write(&file, serde_json::to_vec(&broken).unwrap()).unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
            .args(["check", "-o", "json"])
            .arg(&file)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let checked: Json = serde_json::from_slice(&out.stdout).unwrap();
    let errors = checked["errors"].as_array().unwrap();
    assert!(!errors.is_empty());
    for e in errors {
        let line = karta::describe(&kartograf::definition::DefinitionError::new(
            "",
            e["path"].as_str().unwrap_or_default(),
            e["expression"].as_str(),
            e["message"].as_str().unwrap_or_default(),
        ));
        assert!(
            message.contains(&line),
            "check says {line:?}; the webhook: {message}"
        );
    }

    // An expression the safety gate refuses (unbounded recursion).
    let mut unsafe_ = job_karta("jobs");
    set(
        &mut unsafe_,
        "/spec/structureDefinition/rootComponent/scaleDefinition/replicasPath",
        json!("def f: f; f"),
    );
    let r = answer(addr, admission::VALIDATE, "u3", "CREATE", &unsafe_, None).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("def f: f; f"),
        "{r}"
    );

    // The phase precedence setting: a known value is admitted, another one denied.
    let mut compat = job_karta("jobs");
    compat["metadata"]["annotations"] = json!({"kartograf.io/phase-precedence": "workload-map"});
    let r = answer(addr, admission::VALIDATE, "u5", "CREATE", &compat, None).await;
    assert_eq!(r["allowed"], true, "{r}");
    compat["metadata"]["annotations"] = json!({"kartograf.io/phase-precedence": "karta"});
    let r = answer(addr, admission::VALIDATE, "u6", "CREATE", &compat, None).await;
    assert_eq!(r["allowed"], false, "{r}");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("metadata.annotations[\"kartograf.io/phase-precedence\"]: must be `kartograf` or `workload-map`, found `karta`"),
        "{r}"
    );

    // Deleting is never denied.
    let r = answer(addr, admission::VALIDATE, "u4", "DELETE", &broken, None).await;
    assert_eq!(r["allowed"], true, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_karta_for_a_claimed_kind_and_a_root_kind_change_are_denied() {
    let existing = job_karta("jobs");
    let (addr, _stop) = serve(std::slice::from_ref(&existing)).await;
    let second = job_karta("more-jobs");
    let r = answer(addr, admission::VALIDATE, "d1", "CREATE", &second, None).await;
    assert_eq!(r["allowed"], false, "{r}");
    let message = r["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("batch/v1/Job is already claimed by Karta `jobs`"),
        "{message}"
    );

    // The owner itself may be updated.
    let r = answer(
        addr,
        admission::VALIDATE,
        "d2",
        "UPDATE",
        &existing,
        Some(&existing),
    )
    .await;
    assert_eq!(r["allowed"], true, "{r}");

    // Another version of the group/kind is another GVK (as upstream: allowed).
    let mut v2 = job_karta("jobs-v2");
    set(
        &mut v2,
        "/spec/structureDefinition/rootComponent/kind/version",
        json!("v2"),
    );
    let r = answer(addr, admission::VALIDATE, "d3", "CREATE", &v2, None).await;
    assert_eq!(r["allowed"], true, "{r}");

    // Changing the root kind of a Karta.
    let r = answer(
        addr,
        admission::VALIDATE,
        "d4",
        "UPDATE",
        &v2,
        Some(&existing),
    )
    .await;
    assert_eq!(r["allowed"], false, "{r}");
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("immutable"),
        "{r}"
    );
}

/// Applies an RFC 6902 patch of `add` operations (what the mutating webhook sends).
fn apply_adds(obj: &mut Json, patch: &Json) {
    for op in patch.as_array().unwrap() {
        assert_eq!(op["op"], "add");
        let path = op["path"].as_str().unwrap();
        let (parent, key) = path.rsplit_once('/').unwrap();
        let key = key.replace("~1", "/").replace("~0", "~");
        obj.pointer_mut(parent).unwrap()[key] = op["value"].clone();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutating_webhook_stamps_the_index_labels() {
    let (addr, _stop) = serve(&[]).await;
    for labels in [
        None,
        Some(json!({"team": "a", "run.ai/karta-kind": "Wrong"})),
    ] {
        let mut obj = job_karta("jobs");
        if let Some(l) = &labels {
            obj["metadata"]["labels"] = l.clone();
        }
        let r = answer(addr, admission::MUTATE, "m1", "CREATE", &obj, None).await;
        assert_eq!(r["allowed"], true, "{r}");
        assert_eq!(r["patchType"], "JSONPatch");
        let patch = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            r["patch"].as_str().unwrap(),
        )
        .unwrap();
        apply_adds(&mut obj, &serde_json::from_slice(&patch).unwrap());
        let l = &obj["metadata"]["labels"];
        assert_eq!(l["run.ai/karta-group"], "batch");
        assert_eq!(l["run.ai/karta-version"], "v1");
        assert_eq!(l["run.ai/karta-kind"], "Job");
        if labels.is_some() {
            assert_eq!(l["team"], "a");
        }
        // Once stamped, nothing more to patch.
        let r = answer(addr, admission::MUTATE, "m2", "UPDATE", &obj, Some(&obj)).await;
        assert_eq!(r["allowed"], true);
        assert!(r.get("patch").is_none(), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_objects_get_a_bounded_denial_never_a_crash_or_a_stall() {
    let (addr, _stop) = serve(&[]).await;
    // 3 MB: a label of 3 MB.
    let mut big = job_karta("big");
    big["metadata"]["annotations"] = json!({"x": "a".repeat(3 * 1024 * 1024)});
    // 10,000 levels deep.
    let deep_text = format!(
        "{{\"apiVersion\":\"run.ai/v1alpha1\",\"kind\":\"Karta\",\"metadata\":{{\"name\":\"deep\"}},\"spec\":{}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let deep_review = format!(
        "{{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{{\"uid\":\"h2\",\"kind\":{{\"group\":\"run.ai\",\"version\":\"v1alpha1\",\"kind\":\"Karta\"}},\"name\":\"deep\",\"operation\":\"CREATE\",\"object\":{deep_text}}}}}"
    );
    // Many components with long names: the validator's errors are many and long.
    let mut many = job_karta("many");
    many["spec"]["structureDefinition"]["childComponents"] = Json::Array(
        (0..5_000)
            .map(|i| json!({"name": format!("{}{i}", "c".repeat(200)), "ownerRef": "nobody", "kind": {"group": "", "version": "v1", "kind": "Pod"}}))
            .collect(),
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("h1", review("h1", "CREATE", &big, None)),
        ("h2", deep_review.into_bytes()),
        ("h3", review("h3", "CREATE", &many, None)),
    ];
    for path in [admission::VALIDATE, admission::MUTATE] {
        for (uid, body) in &cases {
            let started = Instant::now();
            let r = ask(addr, path, uid, body).await;
            let took = started.elapsed();
            println!(
                "hostile {uid} ({} bytes) on {path}: answered in {took:?}",
                body.len()
            );
            assert!(
                took < Duration::from_secs(10),
                "{uid} on {path} took {took:?}"
            );
            if path == admission::VALIDATE || *uid == "h2" {
                assert_eq!(r["allowed"], false, "{uid} on {path}: {r}");
                let message = r["status"]["message"].as_str().unwrap();
                assert!(
                    message.len() <= karta::MESSAGE_BYTES + 64,
                    "{}",
                    message.len()
                );
            }
        }
    }
    // The listener still answers.
    let valid = job_karta("jobs");
    let r = answer(addr, admission::VALIDATE, "after", "CREATE", &valid, None).await;
    assert_eq!(r["allowed"], true, "{r}");
    // Not a review: 400.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (code, _) = exchange(stream, "POST", admission::VALIDATE, b"{\"kind\":\"Nope\"}").await;
    assert_eq!(code, 400);
}

/// The documents of `deploy/webhook/FILE`.
fn webhook_deploy(file: &str) -> Vec<Json> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/webhook")
        .join(file);
    kartograf::manifest::parse_documents(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn the_webhook_overlay_routes_to_the_listener_and_grants_what_the_writer_writes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/webhook");
    let k = webhook_deploy("kustomization.yaml").remove(0);
    let listed: std::collections::BTreeSet<String> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str().filter(|r| *r != "../").map(str::to_owned))
        .collect();
    let present: std::collections::BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present);

    // The base Deployment's 5th argument is the one the overlay flips.
    let base = kartograf::manifest::parse_documents(
        &std::fs::read_to_string(dir.join("../deployment.yaml")).unwrap(),
    )
    .unwrap()
    .remove(0);
    assert_eq!(
        base["spec"]["template"]["spec"]["containers"][0]["args"][4],
        "--karta-status=false"
    );
    let patch = kartograf::manifest::parse_documents(k["patches"][0]["patch"].as_str().unwrap())
        .unwrap()
        .remove(0);
    let added: Vec<String> = patch
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["path"].as_str().unwrap().contains("/args/"))
        .filter_map(|op| op["value"].as_str().map(str::to_owned))
        .collect();
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for arg in &added {
        let flag = arg.split('=').next().unwrap();
        assert!(help.contains(flag), "{flag} is not a serve flag");
    }
    let listen = added
        .iter()
        .find_map(|a| a.strip_prefix("--webhook-listen=0.0.0.0:"))
        .unwrap();

    // Both configurations call the routes through the Service onto the listener's port.
    let service = webhook_deploy("service.yaml").remove(0);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
    let port = patch
        .as_array()
        .unwrap()
        .iter()
        .find(|op| op["path"] == "/spec/template/spec/containers/0/ports/-")
        .unwrap()["value"]
        .clone();
    assert_eq!(
        (port["name"].as_str(), port["containerPort"].to_string()),
        (Some("webhook"), listen.to_owned())
    );
    for (file, path, policy) in [
        (
            "validatingwebhookconfiguration.yaml",
            admission::VALIDATE,
            "Fail",
        ),
        (
            "mutatingwebhookconfiguration.yaml",
            admission::MUTATE,
            "Ignore",
        ),
    ] {
        let config = webhook_deploy(file).remove(0);
        let hook = &config["webhooks"][0];
        let svc = &hook["clientConfig"]["service"];
        assert_eq!(svc["path"], path);
        assert_eq!(svc["name"], service["metadata"]["name"]);
        assert_eq!(svc["port"], service["spec"]["ports"][0]["port"]);
        assert_eq!(hook["failurePolicy"], policy);
        assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
        assert_eq!(hook["rules"][0]["resources"], json!(["kartas"]));
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "kartograf/kartograf-webhook"
        );
    }
    let certificate = webhook_deploy("certificate.yaml")
        .into_iter()
        .find(|d| d["metadata"]["name"] == "kartograf-webhook")
        .unwrap();
    assert!(
        certificate["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .contains(&json!("kartograf-webhook.kartograf.svc"))
    );

    // The writer's grants: labels and status on kartas, the Lease.
    let writer = webhook_deploy("clusterrole-karta-writer.yaml").remove(0);
    let grants: Vec<(String, String)> = writer["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let verbs: Vec<String> = r["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(move |res| {
                    let res = res.as_str().unwrap().to_owned();
                    verbs.clone().into_iter().map(move |v| (res.clone(), v))
                })
        })
        .collect();
    for need in [
        ("kartas", "patch"),
        ("kartas/status", "patch"),
        ("kartas", "get"),
    ] {
        assert!(
            grants.contains(&(need.0.to_owned(), need.1.to_owned())),
            "{need:?}"
        );
    }
    let lease = webhook_deploy("role-leader-election.yaml").remove(0);
    assert_eq!(lease["rules"][0]["resources"], json!(["leases"]));
    assert_eq!(
        lease["rules"][0]["verbs"],
        json!(["get", "create", "update"])
    );
}
