//! Policies at admission over the whole catalog (issue 38): for every realistic object of
//! every kind with a definition, the AdmissionReview the API server sends for its CREATE
//! (built from kube-rs' model of `admission.k8s.io/v1`) goes over a real loopback listener to
//! `POST /mutate/workloads` under a policy that sets a scheduler name and a queue label; the
//! answer is decoded as the API server does (standard base64 JSONPatch), applied with an
//! independent RFC 6902 implementation, and the result read again through the definition:
//! the values sit on every pod the graph shows, and nothing else changed
//! ([`crate::patch::check_patched`]). A kind whose definition has no place for a value is
//! admitted unchanged with a warning naming the definition.

use crate::admission::read_answer;
use crate::patch::{
    LABEL, SCHEDULER, check_patched, has_label_place, has_scheduler_place, realistic,
};
use k8s_openapi::api::authentication::v1::UserInfo;
use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::Index;
use kartograf::policy::Live;
use kartograf::server::Shared;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use kube::core::{DynamicObject, GroupVersionKind, GroupVersionResource, TypeMeta};
use serde_json::{Value as Json, json};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

/// The review the API server sends for a CREATE of `object` in `namespace`.
pub(crate) fn create_review(uid: &str, object: &Json, namespace: &str) -> Vec<u8> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    // The plural is only echoed by the API server; kartograf reads the kind.
    let gvr = GroupVersionResource::gvr(group, version, &format!("{}s", kind.to_lowercase()));
    let mut object = object.clone();
    object["metadata"]["namespace"] = json!(namespace);
    let dynamic: DynamicObject = serde_json::from_value(object).expect("an object");
    let types = TypeMeta {
        api_version: "admission.k8s.io/v1".into(),
        kind: "AdmissionReview".into(),
    };
    let request = AdmissionRequest::<DynamicObject> {
        types: types.clone(),
        uid: uid.to_owned(),
        kind: gvk.clone(),
        resource: gvr.clone(),
        sub_resource: None,
        request_kind: Some(gvk),
        request_resource: Some(gvr),
        request_sub_resource: None,
        name: dynamic.metadata.name.clone().unwrap_or_default(),
        namespace: Some(namespace.to_owned()),
        operation: Operation::Create,
        user_info: UserInfo {
            username: Some("alice@example.com".into()),
            groups: Some(vec!["system:authenticated".into()]),
            ..UserInfo::default()
        },
        object: Some(dynamic),
        old_object: None,
        dry_run: false,
        options: None,
    };
    serde_json::to_vec(&AdmissionReview {
        types,
        request: Some(request),
        response: None,
    })
    .expect("encodes")
}

/// One HTTP/1.1 POST (connection closed after), the status code and body.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(addr).expect("connects");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: kartograf-webhook.kartograf.svc:443\r\nContent-Type: application/json\r\nAccept: application/json, */*\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("writes");
    s.write_all(body).expect("writes");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("reads");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut rest = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        rest = dechunk(&rest);
    }
    (code, rest)
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&raw[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
    out
}

/// A webhook listener (on its own runtime) with `policies` over an empty index.
fn listen(policies: &str) -> (SocketAddr, tokio::runtime::Runtime) {
    let dir = std::env::temp_dir().join(format!(
        "kartograf-admission-catalog-{}-{}",
        std::process::id(),
        policies.len()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("policies.yaml");
    std::fs::write(&file, policies).expect("writes");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let index = Arc::new(Index::new(Catalog::embedded().expect("catalog"), &[]));
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(index, Arc::new(LoadReport::default()), rx)
        .with_policies(Live::load(&file).expect("the policies load"));
    let addr = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            let _keep = _tx;
            kartograf::webhook::serve(listener, shared, kartograf::webhook::Settings::default())
                .await
        });
        addr
    });
    (addr, runtime)
}

#[test]
fn every_kind_gets_its_policy_on_every_pod_template_at_admission() {
    let both = format!(
        "policies:\n  - name: to-kai\n    set:\n      schedulerName: {SCHEDULER}\n      labels: {{{}: {}}}\n",
        LABEL.0, LABEL.1
    );
    let (addr, _runtime) = listen(&both);
    let mut failures = Vec::new();
    let (mut patched, mut warned, mut pods) = (0, 0, 0);
    for (n, (def, what, object)) in realistic().iter().enumerate() {
        let pod_bearing: Vec<&str> = def
            .components
            .iter()
            .filter(|c| c.pod_bearing())
            .map(|c| c.name.as_str())
            .collect();
        if pod_bearing.is_empty() {
            continue;
        }
        let what = format!("{} on {what}", def.name);
        let uid = format!("review-{n}");
        let body = create_review(&uid, object, "team-a");
        // The object exactly as the review carries it (kube-rs' typed metadata).
        let sent: Json =
            serde_json::from_slice::<Json>(&body).expect("JSON")["request"]["object"].clone();
        let (code, answer) = post(addr, kartograf::webhook::mutate::WORKLOADS, &body);
        let (response, patch) = read_answer(&uid, code, &answer);
        let placeable = pod_bearing.iter().all(|c| has_scheduler_place(def, c))
            && pod_bearing.iter().all(|c| has_label_place(def, c));
        if !placeable {
            // The write path refuses whole: admitted unchanged, the warning names the kind's
            // definition.
            let warning = response["warnings"][0].as_str().unwrap_or_default();
            if patch.is_some() || !warning.contains(&def.name) {
                failures.push(format!(
                    "{what}: expected no patch and a warning naming the definition, got {response}"
                ));
            }
            warned += 1;
            continue;
        }
        let Some(ops) = patch else {
            failures.push(format!("{what}: no patch: {response}"));
            continue;
        };
        match check_patched(def, &what, &sent, &ops, true) {
            Ok(n) => {
                pods += n;
                patched += 1;
            }
            Err(e) => failures.push(e),
        }
        // Admitting the patched object again changes nothing.
        let again = crate::patch::apply_ops(&sent, &ops);
        let body = create_review(&uid, &again, "team-a");
        let (code, answer) = post(addr, kartograf::webhook::mutate::WORKLOADS, &body);
        if let (_, Some(p)) = read_answer(&uid, code, &answer) {
            failures.push(format!("{what}: a second admission patched again: {p}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        patched > 40 && pods > 50,
        "only {patched} objects, {pods} pod specs"
    );
    eprintln!(
        "admission patched {pods} pod specs of {patched} objects; {warned} admitted with a warning"
    );
}
