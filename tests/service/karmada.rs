//! Karmada's resource interpreter webhook (issue 29): requests built as Karmada's
//! `CreateV1alpha1ResourceInterpreterContext` builds them, answers checked as Karmada's
//! `VerifyResourceInterpreterContext` checks them, over a real loopback listener; the
//! process (`serve --manifests EMPTY --webhook-listen`) with TLS and certificate rotation;
//! hostile bodies; Karmada's own test data replayed ([`replay`]); the deploy configuration.

mod replay;

use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::Index;
use kartograf::server::Shared;
use kartograf::webhook::{self, karmada};
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A webhook listener over the embedded catalog on a loopback port, and its shutdown switch.
pub async fn serve_webhook(
    settings: webhook::Settings,
) -> (SocketAddr, Shared, tokio::sync::watch::Sender<bool>) {
    serve_webhook_on(settings, None).await
}

/// [`serve_webhook`] with an evaluation pool of its own.
pub async fn serve_webhook_on(
    settings: webhook::Settings,
    pool: Option<Arc<kartograf::server::evaluations::Evaluations>>,
) -> (SocketAddr, Shared, tokio::sync::watch::Sender<bool>) {
    let catalog = Catalog::embedded().expect("embedded catalog");
    let index: Arc<Index> = Arc::new(Index::new(catalog, &[]));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut shared = Shared::new(index, Arc::new(LoadReport::default()), rx);
    if let Some(pool) = pool {
        shared = shared.with_evaluations(pool);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(webhook::serve(listener, shared.clone(), settings));
    (addr, shared, tx)
}

/// One HTTP/1.1 exchange on `io`: (status, body). A refused body may be cut off
/// mid-write: the answer still comes.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let (status, _, body) = exchange_with_head(io, method, path, body).await;
    (status, body)
}

/// One HTTP/1.1 exchange on `io`: (status, head, body).
pub async fn exchange_with_head<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    method: &str,
    path: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: kartograf\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    io.write_all(head.as_bytes()).await.unwrap();
    let _ = io.write_all(body).await;
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), io.read_to_end(&mut raw)).await;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (
        status,
        head,
        raw.get(split + 4..).unwrap_or_default().to_vec(),
    )
}

/// POSTs `body` to the interpreter route over plain HTTP.
pub async fn post(addr: SocketAddr, body: &[u8]) -> (u16, Vec<u8>) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    exchange(stream, "POST", karmada::PATH, body).await
}

/// The request body Karmada's webhook client sends (`CreateV1alpha1ResourceInterpreterContext`:
/// the kind from the object, `replicas` always set, `aggregatedStatus` and `observedObject`
/// only when present), encoded with its type meta as the REST client encodes it.
pub fn context(uid: &str, operation: &str, object: &Json, replicas: i32, extra: Json) -> Vec<u8> {
    let api = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api.rsplit_once('/').unwrap_or(("", api));
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": object["kind"]},
        "name": object["metadata"]["name"],
        "operation": operation,
        "object": object,
        "replicas": replicas,
    });
    if let Some(ns) = object["metadata"]["namespace"].as_str() {
        request["namespace"] = json!(ns);
    }
    if let (Some(r), Some(e)) = (request.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    serde_json::to_vec(&json!({
        "apiVersion": "config.karmada.io/v1alpha1",
        "kind": "ResourceInterpreterContext",
        "request": request,
    }))
    .unwrap()
}

/// Checks an answer as Karmada's `VerifyResourceInterpreterContext` does and returns the
/// response; panics with Karmada's error where Karmada would refuse it.
pub fn verify(uid: &str, operation: &str, body: &[u8]) -> Json {
    let answer: Json = serde_json::from_slice(body).expect("the answer is JSON");
    assert_eq!(answer["apiVersion"], "config.karmada.io/v1alpha1");
    assert_eq!(answer["kind"], "ResourceInterpreterContext");
    let r = answer["response"].clone();
    assert!(r.is_object(), "webhook response was absent");
    assert_eq!(r["uid"], uid, "response.uid");
    let successful = r["successful"].as_bool().expect("successful is a boolean");
    if !successful {
        assert!(
            r["status"].is_object(),
            "webhook require response.status when response.successful is false"
        );
        return r;
    }
    match operation {
        "InterpretReplica" => assert!(
            r["replicas"].is_i64(),
            "webhook returned nil response.replicas"
        ),
        "InterpretComponent" => {
            for c in r["components"].as_array().into_iter().flatten() {
                let name = c["name"].as_str().expect("component name");
                assert!(
                    !name.is_empty() && name.len() <= 32,
                    "component name {name:?}"
                );
                assert!(c["replicas"].is_i64());
            }
        }
        "InterpretDependency" => {
            for d in r["dependencies"].as_array().into_iter().flatten() {
                assert!(d["apiVersion"].is_string() && d["kind"].is_string());
                assert!(d["name"].is_string() || d["labelSelector"].is_object());
            }
        }
        "Prune" | "ReviseReplica" | "Retain" | "AggregateStatus" => {
            match (r.get("patch"), r.get("patchType")) {
                (None, None) => {}
                (Some(_), None) => panic!("webhook returned nil response.patchType"),
                (None, Some(_)) => panic!("webhook returned empty response.patch"),
                (Some(p), Some(t)) => {
                    assert_eq!(t, "JSONPatch", "invalid response.patchType");
                    let ops = decode_patch(p.as_str().expect("patch is base64 text"));
                    assert!(!ops.as_array().expect("a JSONPatch array").is_empty());
                }
            }
        }
        "InterpretStatus" => assert!(
            r.get("rawStatus").is_some(),
            "webhook returned nill response.rawStatus"
        ),
        "InterpretHealth" => assert!(
            r["healthy"].is_boolean(),
            "webhook returned nil response.healthy"
        ),
        other => panic!("input wrong operation type: {other}"),
    }
    r
}

/// The JSONPatch of a response (base64 as Go encodes `[]byte`).
pub fn decode_patch(b64: &str) -> Json {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in b64.bytes().filter(|c| *c != b'=') {
        let v = alphabet
            .iter()
            .position(|a| *a == c)
            .expect("base64 alphabet") as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    serde_json::from_slice(&out).expect("the patch is JSON")
}

/// Applies a JSONPatch of `add`/`replace` operations (all this webhook writes).
pub fn apply_patch(doc: &mut Json, ops: &Json) {
    for op in ops.as_array().unwrap() {
        assert!(matches!(op["op"].as_str(), Some("add" | "replace")), "{op}");
        let path = op["path"].as_str().unwrap();
        let (parent, last) = path.rsplit_once('/').unwrap();
        let last = last.replace("~1", "/").replace("~0", "~");
        let target = doc.pointer_mut(parent).expect("the parent exists");
        match target {
            Json::Object(m) => {
                if op["op"] == "replace" {
                    assert!(m.contains_key(&last), "replace of a missing member {path}");
                }
                m.insert(last, op["value"].clone());
            }
            Json::Array(a) => {
                let i: usize = last.parse().unwrap();
                a[i] = op["value"].clone();
            }
            _ => panic!("{path} runs through a scalar"),
        }
    }
}

/// Posts one operation and verifies the answer.
pub async fn ask(
    addr: SocketAddr,
    operation: &str,
    object: &Json,
    replicas: i32,
    extra: Json,
) -> Json {
    let uid = format!(
        "uid-{operation}-{}",
        object["metadata"]["name"].as_str().unwrap_or("")
    );
    let (status, body) = post(addr, &context(&uid, operation, object, replicas, extra)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    verify(&uid, operation, &body)
}

fn deployment() -> Json {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "generation": 4},
        "spec": {"replicas": 3, "template": {"spec": {
            "serviceAccountName": "web-sa",
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "high",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "web-config"}}],
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}}}],
            "volumes": [{"persistentVolumeClaim": {"claimName": "data"}}, {"secret": {"secretName": "tls"}}]
        }}}
    })
}

fn raycluster() -> Json {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "ml"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head",
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "template": {"spec": {
                    "nodeSelector": {"accel": "h100"},
                    "containers": [{"name": "w", "resources": {"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}}}]}}},
                {"groupName": "cpu", "replicas": 1, "template": {"spec": {
                    "containers": [{"name": "w", "resources": {"requests": {"cpu": "4", "memory": "8Gi"}}}]}}}
            ]
        },
        "status": {"state": "ready", "conditions": [{"type": "RayClusterProvisioned", "status": "True"}, {"type": "HeadPodReady", "status": "True"}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_every_operation_on_a_deployment_as_karmada_sends_and_verifies_it() {
    let (addr, shared, _stop) = serve_webhook(webhook::Settings::default()).await;
    let d = deployment();

    let r = ask(addr, "InterpretReplica", &d, 0, json!({})).await;
    assert_eq!(r["successful"], true);
    assert_eq!(r["replicas"], 3);
    let req = &r["replicaRequirements"];
    assert_eq!(
        req["resourceRequest"],
        json!({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"})
    );
    assert_eq!(req["priorityClassName"], "high");
    assert_eq!(req["nodeClaim"]["nodeSelector"], json!({"pool": "gpu"}));
    assert_eq!(req["nodeClaim"]["tolerations"][0]["key"], "gpu");
    assert_eq!(
        req["nodeClaim"]["hardNodeAffinity"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        "zone"
    );

    let r = ask(addr, "InterpretComponent", &d, 0, json!({})).await;
    let components = r["components"].as_array().unwrap();
    assert_eq!(components.len(), 1);
    assert_eq!(components[0]["name"], "deployment");
    assert_eq!(components[0]["replicas"], 3);
    assert!(
        components[0]["replicaRequirements"]
            .get("namespace")
            .is_none()
    );

    // The desired count arrives in request.replicas; the patch writes the assignable path.
    let r = ask(addr, "ReviseReplica", &d, 7, json!({})).await;
    let ops = decode_patch(r["patch"].as_str().unwrap_or_else(|| panic!("{r}")));
    assert_eq!(
        ops,
        json!([{"op": "replace", "path": "/spec/replicas", "value": 7}])
    );
    let mut revised = d.clone();
    apply_patch(&mut revised, &ops);
    let r = ask(addr, "InterpretReplica", &revised, 0, json!({})).await;
    assert_eq!(r["replicas"], 7, "the revised object says what was asked");
    // Without the field it is added; the same count needs no patch.
    let mut bare = d.clone();
    bare["spec"].as_object_mut().unwrap().remove("replicas");
    let r = ask(addr, "ReviseReplica", &bare, 2, json!({})).await;
    assert_eq!(
        decode_patch(r["patch"].as_str().unwrap()),
        json!([{"op": "add", "path": "/spec/replicas", "value": 2}])
    );
    let r = ask(addr, "ReviseReplica", &d, 3, json!({})).await;
    assert!(r.get("patch").is_none() && r["successful"] == true);

    let r = ask(addr, "InterpretDependency", &d, 0, json!({})).await;
    let deps: Vec<String> = r["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{} {} {}/{}",
                d["apiVersion"].as_str().unwrap(),
                d["kind"].as_str().unwrap(),
                d["namespace"].as_str().unwrap(),
                d["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        deps,
        [
            "v1 ConfigMap shop/web-config",
            "v1 PersistentVolumeClaim shop/data",
            "v1 Secret shop/tls",
            "v1 ServiceAccount shop/web-sa"
        ]
    );

    let mut observed = d.clone();
    observed["status"] = json!({"replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
        "conditions": [{"type": "Available", "status": "True"}]});
    let r = ask(addr, "InterpretStatus", &observed, 0, json!({})).await;
    assert_eq!(r["rawStatus"], observed["status"]);
    let r = ask(addr, "InterpretHealth", &observed, 0, json!({})).await;
    assert_eq!(r["healthy"], true);
    let mut failing = d.clone();
    failing["status"] = json!({"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]});
    let r = ask(addr, "InterpretHealth", &failing, 0, json!({})).await;
    assert_eq!(r["healthy"], false);
    // No status at all: not healthy (nothing says it runs).
    let r = ask(addr, "InterpretStatus", &d, 0, json!({})).await;
    assert_eq!(r["rawStatus"], json!({}));

    // Two members: the failing one speaks for the workload, counters are summed, and the
    // observed generation is the template's.
    let items = json!({"aggregatedStatus": [
        {"clusterName": "a", "status": {"replicas": 2, "readyReplicas": 2, "observedGeneration": 9,
            "conditions": [{"type": "Available", "status": "True"}]}, "applied": true, "health": "Healthy"},
        {"clusterName": "b", "status": {"replicas": 1, "readyReplicas": 0, "observedGeneration": 9,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}, "applied": true, "health": "Unhealthy"},
        {"clusterName": "c", "applied": false, "appliedMessage": "not yet"}
    ]});
    let r = ask(addr, "AggregateStatus", &d, 0, items).await;
    let mut merged = d.clone();
    apply_patch(&mut merged, &decode_patch(r["patch"].as_str().unwrap()));
    assert_eq!(merged["status"]["replicas"], 3);
    assert_eq!(merged["status"]["readyReplicas"], 2);
    assert_eq!(merged["status"]["observedGeneration"], 4);
    assert_eq!(
        merged["status"]["conditions"][0]["reason"],
        "ProgressDeadlineExceeded"
    );
    // Aggregating again changes nothing: no patch.
    let again = json!({"aggregatedStatus": [{"clusterName": "a", "status": merged["status"]}]});
    let r = ask(addr, "AggregateStatus", &merged, 0, again).await;
    assert!(r.get("patch").is_none(), "{r}");

    for op in ["Retain", "Prune"] {
        let r = ask(addr, op, &d, 0, json!({"observedObject": observed})).await;
        assert_eq!(r["successful"], true);
        assert!(r.get("patch").is_none());
    }
    // Retain keeps the member's replica count when the template asks for it with Karmada's
    // label (a member-side autoscaler owns the count), as Karmada's native rule does.
    let mut labelled = d.clone();
    labelled["metadata"]["labels"] = json!({"resourcetemplate.karmada.io/retain-replicas": "true"});
    let mut member = labelled.clone();
    member["spec"]["replicas"] = json!(7);
    let r = ask(
        addr,
        "Retain",
        &labelled,
        0,
        json!({"observedObject": member}),
    )
    .await;
    assert_eq!(r["successful"], true, "{r}");
    let mut retained = labelled.clone();
    apply_patch(&mut retained, &decode_patch(r["patch"].as_str().unwrap()));
    assert_eq!(retained["spec"]["replicas"], 7);
    // A member without a count keeps the desired one.
    let mut bare = labelled.clone();
    bare["spec"].as_object_mut().unwrap().remove("replicas");
    let r = ask(
        addr,
        "Retain",
        &labelled,
        0,
        json!({"observedObject": bare}),
    )
    .await;
    assert!(r.get("patch").is_none(), "{r}");

    // Every request is counted by operation, kind and result.
    let metrics = shared.metrics.encode();
    assert!(metrics.contains(r#"kartograf_karmada_requests_total{operation="InterpretReplica",kind="Deployment",result="successful"} 2"#), "{metrics}");
    assert!(
        metrics
            .contains(r#"kartograf_karmada_duration_seconds_count{operation="ReviseReplica"} 3"#)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_multi_template_workloads_answer_per_instance() {
    let (addr, _shared, _stop) = serve_webhook(webhook::Settings::default()).await;
    let rc = raycluster();
    // Replicas are pods: head 1 + gpu 2 x 2 hosts + cpu 1; per resource the most one pod needs;
    // the node claim of the first instance that runs pods (the head).
    let r = ask(addr, "InterpretReplica", &rc, 0, json!({})).await;
    assert_eq!(r["replicas"], 6);
    assert_eq!(
        r["replicaRequirements"]["resourceRequest"],
        json!({"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"})
    );
    assert!(r["replicaRequirements"].get("nodeClaim").is_none());

    let r = ask(addr, "InterpretComponent", &rc, 0, json!({})).await;
    let got: Vec<(String, i64)> = r["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["replicas"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ray-head".to_owned(), 1),
            ("gpu".to_owned(), 4),
            ("cpu".to_owned(), 1)
        ]
    );
    assert_eq!(
        r["components"][1]["replicaRequirements"]["nodeClaim"]["nodeSelector"],
        json!({"accel": "h100"})
    );

    // Worker counts are derived (clamped, times hosts): not assignable.
    let r = ask(addr, "ReviseReplica", &rc, 3, json!({})).await;
    assert_eq!(r["successful"], false);
    assert_eq!(r["status"]["code"], 422);
    assert!(
        r["status"]["message"]
            .as_str()
            .unwrap()
            .contains("assignable"),
        "{r}"
    );

    let r = ask(addr, "InterpretHealth", &rc, 0, json!({})).await;
    assert_eq!(r["healthy"], true);
    let mut broken = rc.clone();
    broken["status"]["conditions"][1]["status"] = json!("False");
    let r = ask(addr, "InterpretHealth", &broken, 0, json!({})).await;
    assert_eq!(r["healthy"], false, "degraded is not healthy");

    // A kind without a definition, a bad object, a missing count: unsuccessful with status.
    let unknown =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let r = ask(addr, "InterpretReplica", &unknown, 0, json!({})).await;
    assert_eq!(
        (r["successful"].clone(), r["status"]["code"].clone()),
        (json!(false), json!(404))
    );
    let r = ask(addr, "Frobnicate", &rc, 0, json!({})).await;
    assert_eq!(r["status"]["code"], 400);
    let body = context("u-neg", "ReviseReplica", &deployment(), -1, json!({}));
    let (status, body) = post(addr, &body).await;
    assert_eq!(status, 200);
    let r = verify("u-neg", "ReviseReplica", &body);
    assert_eq!(r["status"]["code"], 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_bodies_that_are_not_contexts_get_400_and_hostile_objects_stay_bounded() {
    let settings = webhook::Settings {
        max_body_bytes: 1 << 20,
        ..webhook::Settings::default()
    };
    let (addr, _shared, _stop) = serve_webhook(settings).await;
    for body in [
        &b"not json"[..],
        b"[]",
        b"{\"kind\":\"AdmissionReview\",\"request\":{}}",
        b"{}",
        b"{\"request\": 5}",
    ] {
        let (status, answer) = post(addr, body).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(body));
        let answer: Json = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["response"]["successful"], false);
        assert_eq!(answer["response"]["status"]["code"], 400);
    }
    // Other routes and methods.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(stream, "GET", karmada::PATH, b"").await.0, 405);
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(stream, "POST", "/elsewhere", b"{}").await.0, 404);
    // Larger than the limit: 413 without reading it.
    let big = vec![b' '; (1 << 20) + 1];
    assert_eq!(post(addr, &big).await.0, 413);

    // Deeper than the JSON parser's bound: not a context (400), answered at once.
    let mut deep = String::new();
    for _ in 0..100_000 {
        deep.push_str("{\"a\":");
    }
    let started = Instant::now();
    let (status, _) = post(addr, deep.as_bytes()).await;
    assert_eq!(status, 400);
    assert!(started.elapsed() < Duration::from_secs(5));
    // As deep as the parser allows: answered (the object limits are the parser's).
    let mut nested = json!("x");
    for _ in 0..115 {
        nested = json!({"a": nested});
    }
    let mut d = deployment();
    d["spec"]["template"]["metadata"] = json!({"annotations": {"x": "y"}, "deep": nested});
    let r = ask(addr, "InterpretReplica", &d, 0, json!({})).await;
    assert_eq!(r["replicas"], 3, "{r}");
    // An object that is not an object: unsuccessful, 400.
    let (_, body) = post(
        addr,
        &serde_json::to_vec(
            &json!({"request": {"uid": "s", "operation": "InterpretReplica", "object": "text"}}),
        )
        .unwrap(),
    )
    .await;
    let r = verify("s", "InterpretReplica", &body);
    assert_eq!(
        (r["successful"].clone(), r["status"]["code"].clone()),
        (json!(false), json!(400))
    );
    let mut d = deployment();
    d["metadata"]["annotations"] = json!({"big": "x".repeat(900_000)});
    let r = ask(addr, "InterpretComponent", &d, 0, json!({})).await;
    assert_eq!(
        r["successful"], true,
        "a large object within the limits is answered"
    );
    // Too many member statuses.
    let items: Vec<Json> = (0..karmada::interpret::MAX_MEMBERS + 1)
        .map(|i| json!({"clusterName": format!("c{i}")}))
        .collect();
    let r = ask(
        addr,
        "AggregateStatus",
        &deployment(),
        0,
        json!({"aggregatedStatus": items}),
    )
    .await;
    assert_eq!(r["status"]["code"], 400);
    // A status message never echoes a huge value whole.
    let mut odd = deployment();
    odd["kind"] = json!("K".repeat(100_000));
    let (_, body) = post(addr, &context("u", "InterpretReplica", &odd, 0, json!({}))).await;
    assert!(body.len() < 4096, "{} bytes", body.len());
}

#[test]
fn karmada_deploy_configuration_is_what_the_catalog_generates() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("deploy/karmada/resourceinterpreterwebhookconfiguration.yaml");
    let catalog = Catalog::embedded().expect("embedded catalog");
    let generated = karmada::config::render(&catalog, karmada::config::DEFAULT_URL, "");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} is stale: regenerate it with `cargo run -- karmada-config > {}`",
        path.display(),
        path.display()
    );
    // Every root kind has a rule of its own; Kubernetes' own kinds only the two questions.
    let doc: Json = serde_saphyr::from_str(&generated).unwrap();
    let rules = doc["webhooks"][0]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), catalog.definitions().count());
    for d in catalog.definitions() {
        let k = &d.root_kind;
        let rule = rules
            .iter()
            .find(|r| {
                r["apiGroups"][0] == k.group.as_str()
                    && r["apiVersions"][0] == k.version.as_str()
                    && r["kinds"][0] == k.kind.as_str()
            })
            .unwrap_or_else(|| panic!("no rule for {k}"));
        let ops = rule["operations"].as_array().unwrap().len();
        let built_in = karmada::config::BUILT_IN_GROUPS.contains(&k.group.as_str());
        assert_eq!(ops, if built_in { 2 } else { 9 }, "{k}");
    }
}

/// A CA and a `localhost` serving certificate signed by it: (CA DER, cert PEM, key PEM).
fn pki() -> (Vec<u8>, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.der().to_vec(), cert.pem(), key.serialize_pem())
}

/// POSTs `body` over TLS, trusting only `ca`; `None` when the handshake fails.
async fn post_tls(addr: SocketAddr, ca: &[u8], body: &[u8]) -> Option<(u16, Vec<u8>)> {
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(ca.to_vec()))
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.ok()?;
    Some(exchange(tls, "POST", karmada::PATH, body).await)
}

fn write_pair(dir: &std::path::Path, cert: &str, key: &str) {
    // As a Secret volume swaps files: written aside, then renamed over.
    for (name, text) in [("tls.crt", cert), ("tls.key", key)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_the_process_serves_https_from_an_empty_directory_and_follows_a_new_certificate() {
    let empty = crate::hostile::scratch("karmada-empty");
    let tls = crate::hostile::scratch("karmada-tls");
    let (ca_a, cert_a, key_a) = pki();
    write_pair(&tls, &cert_a, &key_a);
    let port = crate::hostile::free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (cert, key) = (tls.join("tls.crt"), tls.join("tls.key"));
    let served = crate::hostile::Served::start(&[
        "--manifests",
        empty.to_str().unwrap(),
        "--webhook-listen",
        &addr.to_string(),
        "--webhook-tls-cert",
        cert.to_str().unwrap(),
        "--webhook-tls-key",
        key.to_str().unwrap(),
    ]);
    let body = context("p1", "InterpretReplica", &raycluster(), 0, json!({}));
    let (status, answer) = post_tls(addr, &ca_a, &body)
        .await
        .expect("TLS with the first CA");
    assert_eq!(status, 200, "{}", served.log());
    assert_eq!(verify("p1", "InterpretReplica", &answer)["replicas"], 6);
    // Plain HTTP on the TLS port gets no answer.
    let (status, _) = post(addr, &body).await;
    assert_ne!(status, 200);

    // A renewed certificate from another CA: new connections use it within about a second.
    let (ca_b, cert_b, key_b) = pki();
    write_pair(&tls, &cert_b, &key_b);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some((200, answer)) = post_tls(addr, &ca_b, &body).await {
            assert_eq!(verify("p1", "InterpretReplica", &answer)["replicas"], 6);
            break;
        }
        assert!(
            Instant::now() < until,
            "the new certificate was not served:\n{}",
            served.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        post_tls(addr, &ca_a, &body).await.is_none(),
        "the old certificate is gone"
    );
    // A broken pair keeps the last good one.
    write_pair(&tls, "not a certificate", "not a key");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(post_tls(addr, &ca_b, &body).await.map(|r| r.0), Some(200));

    let (_, metrics) = served.get("/metrics");
    assert!(
        metrics.contains(r#"kartograf_karmada_requests_total{operation="InterpretReplica",kind="RayCluster",result="successful"}"#),
        "{metrics}"
    );
    assert!(metrics.contains("kartograf_karmada_duration_seconds_bucket"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_stalled_clients_and_busy_evaluations_do_not_stall_other_requests() {
    let (addr, _shared, _stop) = serve_webhook(webhook::Settings::default()).await;
    // Fifty clients that never finish their headers or their body.
    let mut idle = Vec::new();
    for i in 0..50 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let partial = if i % 2 == 0 {
            "POST /karmada/interpret HTTP/1.1\r\nHost: x\r\n".to_owned()
        } else {
            format!(
                "POST {} HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{{",
                karmada::PATH
            )
        };
        s.write_all(partial.as_bytes()).await.unwrap();
        idle.push(s);
    }
    // With them all open, a request is answered at once.
    let started = Instant::now();
    let r = ask(addr, "InterpretComponent", &raycluster(), 0, json!({})).await;
    assert_eq!(r["components"].as_array().unwrap().len(), 3);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The evaluation thread busy: a request waits the queue wait, then is answered HTTP 429
    // with Retry-After (and a response of code 429), not queued behind it; once it
    // finishes, requests are answered again.
    let (busy_addr, busy_shared, _busy_stop) = serve_webhook_on(
        webhook::Settings::default(),
        Some(kartograf::server::evaluations::Evaluations::bounded(
            1,
            1,
            Duration::from_millis(200),
        )),
    )
    .await;
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let pool = busy_shared.evaluations.clone();
    let blocker = tokio::spawn(async move {
        pool.run(move || {
            let _ = started_tx.send(());
            let _ = gate.recv_timeout(Duration::from_secs(20));
        })
        .await
    });
    started_rx.await.unwrap();
    let started = Instant::now();
    let uid = "uid-busy";
    let stream = tokio::net::TcpStream::connect(busy_addr).await.unwrap();
    let (status, head, body) = exchange_with_head(
        stream,
        "POST",
        karmada::PATH,
        &context(uid, "InterpretReplica", &raycluster(), 0, json!({})),
    )
    .await;
    let waited = started.elapsed();
    assert_eq!(status, 429, "{}", String::from_utf8_lossy(&body));
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 1"),
        "{head}"
    );
    let r: Json = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (
            r["response"]["successful"].clone(),
            r["response"]["status"]["code"].clone()
        ),
        (json!(false), json!(429))
    );
    assert!(
        r["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("--eval-queue-wait")
    );
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_secs(1), "{waited:?}");
    // The other listener, with its own threads, answers meanwhile.
    let r = ask(addr, "InterpretReplica", &raycluster(), 0, json!({})).await;
    assert_eq!(r["replicas"], 6);
    let _ = release.send(());
    assert!(blocker.await.unwrap().is_ok());
    let r = ask(busy_addr, "InterpretReplica", &raycluster(), 0, json!({})).await;
    assert_eq!(r["replicas"], 6);
    drop(idle);
}

#[test]
fn karmada_extension_errors_are_definition_errors() {
    let text = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("catalog/apps-deployment-v1.yaml"),
    )
    .unwrap();
    let compile = |text: &str| {
        let (parsed, errors) = kartograf::definition::load::parse_text(text, "test");
        assert!(errors.is_empty(), "{errors:?}");
        let p = parsed.into_iter().next().unwrap();
        kartograf::definition::Definition::compile(p.karta, "test", "test", Default::default())
    };
    assert!(compile(&text).is_ok());
    let bad = text.replace(
        "replicasAssignPath: .spec.replicas",
        "replicasAssignPath: '.spec.replicas // 1'\n        componentNamePath: '.['",
    );
    let errors = compile(&bad).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("interpreterDefinition.replicasAssignPath")),
        "{errors:?}"
    );
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("interpreterDefinition.componentNamePath")),
        "{errors:?}"
    );
}

/// The catalog snapshots (`tests/catalog/<kind>/<state>.yaml` with `.expect.yaml`), the
/// kinds Karmada lacks among them: the webhook's replicas and components count the pods
/// and GPUs the graph expects, and its health follows the expected phase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_catalog_snapshots_agree_with_their_graphs() {
    let (addr, _shared, _stop) = serve_webhook(webhook::Settings::default()).await;
    let catalog = Catalog::embedded().unwrap();
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/catalog");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    let mut checked = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for dir in dirs {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for expect_path in files
            .iter()
            .filter(|p| p.to_string_lossy().ends_with(".expect.yaml"))
        {
            let case = expect_path
                .to_string_lossy()
                .replace(".expect.yaml", ".yaml");
            let expect: Json =
                serde_saphyr::from_str(&std::fs::read_to_string(expect_path).unwrap()).unwrap();
            let docs: Vec<Json> =
                serde_saphyr::from_multiple(&std::fs::read_to_string(&case).unwrap()).unwrap();
            let Some(object) = docs.into_iter().find(|d| {
                let (api, kind) = (
                    d["apiVersion"].as_str().unwrap_or(""),
                    d["kind"].as_str().unwrap_or(""),
                );
                d["metadata"].get("ownerReferences").is_none()
                    && catalog.lookup(api, kind).is_some()
                    && kind != "Pod"
            }) else {
                continue;
            };
            let what = case.clone();
            let r = ask(addr, "InterpretReplica", &object, 0, json!({})).await;
            assert_eq!(r["successful"], true, "{what}: {r}");
            let desired = expect["pods"]["desired"].as_i64().unwrap_or(0);
            assert_eq!(
                r["replicas"].as_i64(),
                Some(desired),
                "{what}: replicas are the desired pods"
            );
            let r = ask(addr, "InterpretComponent", &object, 0, json!({})).await;
            let components = r["components"].as_array().cloned().unwrap_or_default();
            let pods: i64 = components
                .iter()
                .map(|c| c["replicas"].as_i64().unwrap())
                .sum();
            assert_eq!(pods, desired, "{what}: components hold the desired pods");
            let gpus: f64 = components
                .iter()
                .map(|c| {
                    let n = c["replicaRequirements"]["resourceRequest"]["nvidia.com/gpu"]
                        .as_str()
                        .and_then(|q| q.parse::<f64>().ok())
                        .unwrap_or(0.0);
                    n * c["replicas"].as_f64().unwrap()
                })
                .sum();
            let expected_gpus = expect["gpus"]["desired"].as_f64().unwrap_or(0.0);
            if expected_gpus.fract() == 0.0 {
                assert_eq!(gpus, expected_gpus, "{what}: GPUs");
            }
            let r = ask(addr, "InterpretHealth", &object, 0, json!({})).await;
            let phase = expect["phase"].as_str().unwrap_or("");
            assert_eq!(
                r["healthy"],
                json!(matches!(phase, "Running" | "Completed")),
                "{what}: phase {phase}"
            );
            let r = ask(addr, "InterpretDependency", &object, 0, json!({})).await;
            assert_eq!(r["successful"], true, "{what}");
            kinds.insert(object["kind"].as_str().unwrap().to_owned());
            checked += 1;
        }
    }
    assert!(checked >= 60, "{checked} snapshots");
    for k in [
        "LeaderWorkerSet",
        "JobSet",
        "InferenceService",
        "Service",
        "DynamoGraphDeployment",
        "PodCliqueSet",
        "NIMService",
        "Milvus",
        "TrainJob",
    ] {
        assert!(kinds.contains(k), "{k} is covered: {kinds:?}");
    }
}

/// Issue 42: a replica count beyond int32 is refused with the field named (never answered
/// with the definition's default), and Retain never copies a count beyond int32 into a patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_counts_beyond_int32_are_refused_with_the_field_named() {
    let (addr, _shared, _stop) = serve_webhook(webhook::Settings::default()).await;
    let mut d = deployment();
    d["spec"]["replicas"] = json!(1u64 << 40);
    for op in ["InterpretReplica", "InterpretComponent"] {
        let uid = format!("uid-{op}-big");
        let (status, body) = post(addr, &context(&uid, op, &d, 0, json!({}))).await;
        let answer: Json = serde_json::from_slice(&body).unwrap();
        let text = answer.to_string();
        assert_eq!(status, 200, "{text}");
        assert_eq!(answer["response"]["successful"], false, "{op}: {text}");
        assert_eq!(answer["response"]["status"]["code"], 422, "{op}: {text}");
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("beyond int32"), "{op}: {message}");
        assert!(message.contains("spec.replicas"), "{op}: {message}");
    }
    let mut labelled = deployment();
    labelled["metadata"]["labels"] = json!({"resourcetemplate.karmada.io/retain-replicas": "true"});
    for count in [json!(u64::MAX), json!(1u64 << 31)] {
        let mut member = labelled.clone();
        member["spec"]["replicas"] = count.clone();
        let uid = "uid-Retain-big";
        let (status, body) = post(
            addr,
            &context(
                uid,
                "Retain",
                &labelled,
                0,
                json!({"observedObject": member}),
            ),
        )
        .await;
        let answer: Json = serde_json::from_slice(&body).unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["response"]["successful"], false, "{count}: {answer}");
        assert!(answer["response"].get("patch").is_none(), "{answer}");
        let message = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(message.contains("/spec/replicas"), "{message}");
    }
    // At int32's maximum it is kept.
    let mut member = labelled.clone();
    member["spec"]["replicas"] = json!(i32::MAX);
    let r = ask(
        addr,
        "Retain",
        &labelled,
        0,
        json!({"observedObject": member}),
    )
    .await;
    assert_eq!(r["successful"], true, "{r}");
}
