//! Every request field answered strictly: one table over every request message of the API,
//! each field with empty, boundary, oversize, unknown-enum and contradictory values, each
//! answered with an exact gRPC code and a status message of bounded length; page tokens
//! bound to their query and stable while the index changes; `/metrics` behind tokens.

use kartograf::definition::LoadReport;
use kartograf::excerpt::{STATUS_BYTES, TEXT_BYTES};
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::definitions_client::DefinitionsClient;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::{self, Settings, Shared, Tokens};
use prost::Message;
use std::path::PathBuf;
use std::sync::Arc;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

const WEB_UID: &str = "3f1c2a9e-0004-4000-8000-000000000001";
const WEB_RS_UID: &str = "3f1c2a9e-0004-4000-8000-000000000002";
const WEB_POD: &str = "web-7d9f8b6c5d-bq4zx";
const WEB_POD_UID: &str = "3f1c2a9e-0004-4000-8000-000000000003";
const MIB: usize = 1 << 20;

use super::hardening::demo_index;

/// Serves `index`; returns a channel and the shutdown switch (and the `Shared` state).
async fn serve(index: Arc<Index>) -> (Channel, tokio::sync::watch::Sender<bool>, Shared) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = Shared::new(index, Arc::new(LoadReport::default()), rx);
    tokio::spawn(server::serve(
        listener,
        shared.clone(),
        Settings {
            listen: addr,
            ..Settings::default()
        },
    ));
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    (channel, tx, shared)
}

enum Call {
    Resolve(pb::ResolveRequest),
    List(pb::ListRequest),
    Watch(pb::WatchRequest),
    Totals(pb::TotalsRequest),
    ListDefinitions(pb::ListDefinitionsRequest),
    Validate(pb::ValidateDefinitionRequest),
}

/// One row: a request, the code it must get and a word its error message must hold (the
/// field it names).
struct Case {
    name: String,
    call: Call,
    code: Code,
    mentions: &'static str,
}

fn case(name: impl Into<String>, call: Call, code: Code, mentions: &'static str) -> Case {
    Case {
        name: name.into(),
        call,
        code,
        mentions,
    }
}

/// What an answer came to: its code, message and encoded size.
struct Answer {
    code: Code,
    message: String,
    bytes: usize,
}

fn answer<T: Message>(r: Result<tonic::Response<T>, tonic::Status>) -> Answer {
    match r {
        Ok(r) => Answer {
            code: Code::Ok,
            message: String::new(),
            bytes: r.get_ref().encoded_len(),
        },
        Err(s) => Answer {
            code: s.code(),
            message: s.message().to_owned(),
            bytes: 0,
        },
    }
}

async fn call(channel: &Channel, c: Call) -> Answer {
    let mut resolver = WorkloadResolverClient::new(channel.clone())
        .max_decoding_message_size(64 * MIB)
        .max_encoding_message_size(64 * MIB);
    let mut defs = DefinitionsClient::new(channel.clone())
        .max_decoding_message_size(64 * MIB)
        .max_encoding_message_size(64 * MIB);
    match c {
        Call::Resolve(r) => answer(resolver.resolve(r).await),
        Call::List(r) => answer(resolver.list(r).await),
        Call::Totals(r) => answer(resolver.totals(r).await),
        Call::ListDefinitions(r) => answer(defs.list_definitions(r).await),
        Call::Validate(r) => answer(defs.validate_definition(r).await),
        Call::Watch(r) => match resolver.watch(r).await {
            Ok(_stream) => Answer {
                code: Code::Ok,
                message: String::new(),
                bytes: 0,
            },
            Err(s) => Answer {
                code: s.code(),
                message: s.message().to_owned(),
                bytes: 0,
            },
        },
    }
}

fn web() -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "serving".into(),
        name: "web".into(),
        uid: String::new(),
    }
}

fn workload(edit: impl FnOnce(&mut pb::ObjectRef)) -> Call {
    let mut r = web();
    edit(&mut r);
    Call::Resolve(pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(r)),
        view: 0,
        cluster: String::new(),
    })
}

fn pod(edit: impl FnOnce(&mut pb::ObjectRef)) -> Call {
    let mut r = pb::ObjectRef {
        namespace: "serving".into(),
        name: WEB_POD.into(),
        ..Default::default()
    };
    edit(&mut r);
    Call::Resolve(pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Pod(r)),
        view: 0,
        cluster: String::new(),
    })
}

fn job_json(name: &str, namespace: &str) -> String {
    serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": "inline-1"},
        "spec": {"parallelism": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}
    })
    .to_string()
}

fn pod_json(kind: &str, namespace: &str) -> String {
    serde_json::json!({
        "apiVersion": if kind == "Pod" { "v1" } else { "apps/v1" }, "kind": kind,
        "metadata": {"name": "p", "namespace": namespace, "uid": "inline-p"},
        "spec": {"containers": [{"name": "c"}]}
    })
    .to_string()
}

fn inline(object_json: String, pods_json: Vec<String>) -> Call {
    Call::Resolve(pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
            object_json,
            pods_json,
        })),
        view: 0,
        cluster: String::new(),
    })
}

fn list(edit: impl FnOnce(&mut pb::ListRequest)) -> Call {
    let mut r = pb::ListRequest::default();
    edit(&mut r);
    Call::List(r)
}

fn watch(edit: impl FnOnce(&mut pb::WatchRequest)) -> Call {
    let mut r = pb::WatchRequest::default();
    edit(&mut r);
    Call::Watch(r)
}

/// A Resolve call of `call` (a workload or pod target) for `cluster`.
fn in_cluster(call: Call, cluster: &str) -> Call {
    match call {
        Call::Resolve(mut r) => {
            r.cluster = cluster.into();
            Call::Resolve(r)
        }
        other => other,
    }
}

fn totals_in(cluster: &str) -> Call {
    Call::Totals(pb::TotalsRequest {
        group_by: 0,
        namespace: String::new(),
        cluster: cluster.into(),
    })
}

fn totals(group_by: i32, namespace: &str) -> Call {
    Call::Totals(pb::TotalsRequest {
        group_by,
        namespace: namespace.into(),
        cluster: String::new(),
    })
}

fn validate(definition: &str, sample: Option<pb::InlineWorkload>) -> Call {
    Call::Validate(pb::ValidateDefinitionRequest {
        definition: definition.into(),
        sample,
    })
}

/// The embedded batch Job definition, as text.
fn job_definition() -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("catalog/batch-job-v1.yaml"),
    )
    .expect("catalog file")
}

/// A valid selector of exactly `len` bytes: `a in (v0,v1,…)` padded with one long value.
fn selector_of_len(len: usize) -> String {
    let mut values: Vec<String> = Vec::new();
    let mut s = String::new();
    for i in 0.. {
        values.push(format!("v{i}"));
        let next = format!("a in ({})", values.join(","));
        if next.len() + 10 > len {
            break;
        }
        s = next;
    }
    // Pad the last value (values are at most 63 characters; there is room for 10 more).
    let missing = len - s.len();
    let padded = format!("{}{})", &s[..s.len() - 1], "x".repeat(missing));
    assert_eq!(padded.len(), len);
    padded
}

/// Every request message with empty, boundary, oversize, unknown-enum and contradictory
/// values. The same table runs on one server; each answer is checked for its exact code
/// and a status message of bounded length that names the offending field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_field_is_answered_strictly() {
    let (channel, _shutdown, _) = serve(demo_index()).await;
    let huge = "x".repeat(MIB);
    let name_253 = "n".repeat(253);
    let ns_63 = "n".repeat(63);
    let selector_4096 = selector_of_len(4096);
    let token_of = |namespace: &str| {
        let channel = channel.clone();
        let namespace = namespace.to_owned();
        async move {
            WorkloadResolverClient::new(channel)
                .list(pb::ListRequest {
                    namespace,
                    page_size: 1,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .next_page_token
        }
    };
    let all_token = token_of("").await;
    assert!(!all_token.is_empty());
    let inline_sample = |object_json: String| {
        Some(pb::InlineWorkload {
            object_json,
            pods_json: vec![],
        })
    };

    use Code::{FailedPrecondition, InvalidArgument, NotFound, Ok};
    let cases = vec![
        // ResolveRequest: target and view.
        case(
            "resolve: no target",
            Call::Resolve(pb::ResolveRequest::default()),
            InvalidArgument,
            "target",
        ),
        case("resolve: view FULL", workload(|_| ()), Ok, ""),
        case(
            "resolve: view SUMMARY",
            Call::Resolve(pb::ResolveRequest {
                view: 2,
                target: Some(pb::resolve_request::Target::Workload(web())),
                cluster: String::new(),
            }),
            Ok,
            "",
        ),
        case(
            "resolve: view 3",
            Call::Resolve(pb::ResolveRequest {
                view: 3,
                target: Some(pb::resolve_request::Target::Workload(web())),
                cluster: String::new(),
            }),
            InvalidArgument,
            "view",
        ),
        case(
            "resolve: view 99 (was FULL)",
            Call::Resolve(pb::ResolveRequest {
                view: 99,
                target: Some(pb::resolve_request::Target::Workload(web())),
                cluster: String::new(),
            }),
            InvalidArgument,
            "VIEW_SUMMARY",
        ),
        case(
            "resolve: view -1",
            Call::Resolve(pb::ResolveRequest {
                view: -1,
                target: Some(pb::resolve_request::Target::Workload(web())),
                cluster: String::new(),
            }),
            InvalidArgument,
            "view",
        ),
        // ResolveRequest.workload, field by field.
        case(
            "workload: empty",
            workload(|r| *r = pb::ObjectRef::default()),
            InvalidArgument,
            "uid",
        ),
        case(
            "workload: name only",
            workload(|r| {
                r.kind.clear();
                r.api_version.clear();
            }),
            Ok,
            "",
        ),
        case(
            "workload: name 253",
            workload(|r| r.name = name_253.clone()),
            NotFound,
            "no workload",
        ),
        case(
            "workload: name 254",
            workload(|r| r.name = "n".repeat(254)),
            InvalidArgument,
            "workload.name",
        ),
        case(
            "workload: name 1 MiB",
            workload(|r| r.name = huge.clone()),
            InvalidArgument,
            "workload.name",
        ),
        case(
            "workload: name with /",
            workload(|r| r.name = "a/b".into()),
            InvalidArgument,
            "workload.name",
        ),
        case(
            "workload: namespace 63",
            workload(|r| r.namespace = ns_63.clone()),
            NotFound,
            "no workload",
        ),
        case(
            "workload: namespace 64",
            workload(|r| r.namespace = "n".repeat(64)),
            InvalidArgument,
            "workload.namespace",
        ),
        case(
            "workload: namespace upper case",
            workload(|r| r.namespace = "Serving".into()),
            InvalidArgument,
            "workload.namespace",
        ),
        case(
            "workload: namespace 1 MiB",
            workload(|r| r.namespace = huge.clone()),
            InvalidArgument,
            "workload.namespace",
        ),
        case(
            "workload: kind any case",
            workload(|r| r.kind = "deployment".into()),
            Ok,
            "",
        ),
        case(
            "workload: kind without definition",
            workload(|r| r.kind = "Mystery".into()),
            FailedPrecondition,
            "Mystery",
        ),
        case(
            "workload: kind malformed",
            workload(|r| r.kind = "Dep loyment".into()),
            InvalidArgument,
            "workload.kind",
        ),
        case(
            "workload: kind 1 MiB",
            workload(|r| r.kind = huge.clone()),
            InvalidArgument,
            "workload.kind",
        ),
        case(
            "workload: api_version other version",
            workload(|r| r.api_version = "apps/v2".into()),
            NotFound,
            "no workload",
        ),
        case(
            "workload: api_version malformed",
            workload(|r| r.api_version = "a/b/c".into()),
            InvalidArgument,
            "workload.api_version",
        ),
        case(
            "workload: api_version 1 MiB",
            workload(|r| r.api_version = huge.clone()),
            InvalidArgument,
            "workload.api_version",
        ),
        case(
            "workload: uid only",
            workload(|r| {
                *r = pb::ObjectRef {
                    uid: WEB_UID.into(),
                    ..Default::default()
                }
            }),
            Ok,
            "",
        ),
        case(
            "workload: uid and agreeing fields",
            workload(|r| r.uid = WEB_UID.into()),
            Ok,
            "",
        ),
        case(
            "workload: uid unknown",
            workload(|r| {
                *r = pb::ObjectRef {
                    uid: "no-such-uid".into(),
                    ..Default::default()
                }
            }),
            NotFound,
            "no-such-uid",
        ),
        case(
            "workload: uid 254",
            workload(|r| r.uid = "u".repeat(254)),
            InvalidArgument,
            "workload.uid",
        ),
        case(
            "workload: uid 1 MiB",
            workload(|r| r.uid = huge.clone()),
            InvalidArgument,
            "workload.uid",
        ),
        case(
            "workload: uid vs name",
            workload(|r| {
                r.uid = WEB_UID.into();
                r.name = "chat-api".into();
            }),
            InvalidArgument,
            "workload.name",
        ),
        case(
            "workload: uid vs namespace",
            workload(|r| {
                r.uid = WEB_UID.into();
                r.namespace = "ml".into();
            }),
            InvalidArgument,
            "workload.namespace",
        ),
        case(
            "workload: uid vs kind",
            workload(|r| {
                r.uid = WEB_UID.into();
                r.kind = "StatefulSet".into();
            }),
            InvalidArgument,
            "workload.kind",
        ),
        case(
            "workload: uid vs api_version",
            workload(|r| {
                r.uid = WEB_UID.into();
                r.api_version = "apps/v1beta1".into();
            }),
            InvalidArgument,
            "workload.api_version",
        ),
        // ResolveRequest.pod.
        case("pod: by name", pod(|_| ()), Ok, ""),
        case(
            "pod: by uid",
            pod(|r| {
                *r = pb::ObjectRef {
                    uid: WEB_POD_UID.into(),
                    ..Default::default()
                }
            }),
            Ok,
            "",
        ),
        case(
            "pod: uid and agreeing fields",
            pod(|r| {
                r.uid = WEB_POD_UID.into();
                r.kind = "Pod".into();
                r.api_version = "v1".into();
            }),
            Ok,
            "",
        ),
        case(
            "pod: empty",
            pod(|r| *r = pb::ObjectRef::default()),
            InvalidArgument,
            "pod",
        ),
        case(
            "pod: unknown",
            pod(|r| r.name = "nope".into()),
            NotFound,
            "nope",
        ),
        case(
            "pod: name 1 MiB",
            pod(|r| r.name = huge.clone()),
            InvalidArgument,
            "pod.name",
        ),
        case(
            "pod: kind not Pod",
            pod(|r| r.kind = "Deployment".into()),
            InvalidArgument,
            "pod.kind",
        ),
        case(
            "pod: api_version not v1",
            pod(|r| r.api_version = "apps/v1".into()),
            InvalidArgument,
            "pod.api_version",
        ),
        case(
            "pod: uid vs name",
            pod(|r| {
                r.uid = WEB_POD_UID.into();
                r.name = "web-7d9f8b6c5d-h2m8t".into();
            }),
            InvalidArgument,
            "pod.name",
        ),
        case(
            "pod: uid vs namespace",
            pod(|r| {
                r.uid = WEB_POD_UID.into();
                r.namespace = "ml".into();
            }),
            InvalidArgument,
            "pod.namespace",
        ),
        case(
            "pod: uid of a ReplicaSet",
            pod(|r| {
                *r = pb::ObjectRef {
                    uid: WEB_RS_UID.into(),
                    ..Default::default()
                }
            }),
            InvalidArgument,
            "not a pod",
        ),
        // ResolveRequest.inline.
        case("inline: a Job", inline(job_json("j", "x"), vec![]), Ok, ""),
        case(
            "inline: with its pod",
            inline(job_json("j", "x"), vec![pod_json("Pod", "x")]),
            Ok,
            "",
        ),
        case(
            "inline: empty object",
            inline(String::new(), vec![]),
            InvalidArgument,
            "inline.object_json",
        ),
        case(
            "inline: not JSON",
            inline("{nope".into(), vec![]),
            InvalidArgument,
            "inline.object_json",
        ),
        case(
            "inline: 1 MiB of not JSON",
            inline(format!("{{{huge}"), vec![]),
            InvalidArgument,
            "inline.object_json",
        ),
        case(
            "inline: no kind",
            inline(r#"{"metadata":{"name":"a"}}"#.into(), vec![]),
            InvalidArgument,
            "inline.object_json",
        ),
        case(
            "inline: name 1 MiB",
            inline(job_json(&huge, "x"), vec![]),
            InvalidArgument,
            "metadata.name",
        ),
        case(
            "inline: name 253",
            inline(job_json(&name_253, "x"), vec![]),
            Ok,
            "",
        ),
        case(
            "inline: namespace malformed",
            inline(job_json("j", "X_Y"), vec![]),
            InvalidArgument,
            "metadata.namespace",
        ),
        case(
            "inline: kind without definition",
            inline(
                r#"{"apiVersion":"example.com/v1","kind":"Mystery","metadata":{"name":"a"}}"#
                    .into(),
                vec![],
            ),
            FailedPrecondition,
            "Mystery",
        ),
        case(
            "inline: a pod that is not a Pod",
            inline(job_json("j", "x"), vec![pod_json("Deployment", "x")]),
            InvalidArgument,
            "pods_json[0]",
        ),
        case(
            "inline: a pod in another namespace",
            inline(job_json("j", "x"), vec![pod_json("Pod", "y")]),
            InvalidArgument,
            "pods_json[0]",
        ),
        case(
            "inline: a pod that is not JSON",
            inline(job_json("j", "x"), vec!["[".into()]),
            InvalidArgument,
            "pods_json[0]",
        ),
        // ResolveRequest.cluster: this server's graphs name no cluster.
        case(
            "resolve: another cluster",
            in_cluster(workload(|_| ()), "other"),
            NotFound,
            "cluster",
        ),
        case(
            "resolve: pod of another cluster",
            in_cluster(pod(|_| ()), "other"),
            NotFound,
            "cluster",
        ),
        case(
            "resolve: cluster with a space",
            in_cluster(workload(|_| ()), "a b"),
            InvalidArgument,
            "cluster",
        ),
        case(
            "resolve: cluster 254 bytes",
            in_cluster(workload(|_| ()), &"c".repeat(254)),
            InvalidArgument,
            "cluster",
        ),
        case(
            "resolve: cluster 1 MiB",
            in_cluster(workload(|_| ()), &huge),
            InvalidArgument,
            "cluster",
        ),
        // ListRequest.
        case("list: everything", list(|_| ()), Ok, ""),
        case(
            "list: a cluster it does not serve (nothing)",
            list(|r| r.cluster = "arn:aws:eks:us-east-1:1:cluster/prod".into()),
            Ok,
            "",
        ),
        case(
            "list: cluster with a control character",
            list(|r| r.cluster = "a\u{7}".into()),
            InvalidArgument,
            "cluster",
        ),
        case(
            "list: cluster 1 MiB",
            list(|r| r.cluster = huge.clone()),
            InvalidArgument,
            "cluster",
        ),
        case(
            "list: namespace 63",
            list(|r| r.namespace = ns_63.clone()),
            Ok,
            "",
        ),
        case(
            "list: namespace 64",
            list(|r| r.namespace = "n".repeat(64)),
            InvalidArgument,
            "namespace",
        ),
        case(
            "list: namespace 1 MiB",
            list(|r| r.namespace = huge.clone()),
            InvalidArgument,
            "namespace",
        ),
        case(
            "list: kinds",
            list(|r| r.kinds = vec!["jobset".into(), "apps/Deployment".into(), "jobsets".into()]),
            Ok,
            "",
        ),
        case(
            "list: kinds empty entry",
            list(|r| r.kinds = vec![String::new()]),
            InvalidArgument,
            "kinds[0]",
        ),
        case(
            "list: kinds dotted group",
            list(|r| r.kinds = vec!["jobset".into(), "jobset.jobset.x-k8s.io".into()]),
            InvalidArgument,
            "kinds[1]",
        ),
        case(
            "list: kinds 64 entries",
            list(|r| r.kinds = vec!["Job".into(); 64]),
            Ok,
            "",
        ),
        case(
            "list: kinds 65 entries",
            list(|r| r.kinds = vec!["Job".into(); 65]),
            InvalidArgument,
            "kinds",
        ),
        case(
            "list: kinds 1 MiB entry",
            list(|r| r.kinds = vec![huge.clone()]),
            InvalidArgument,
            "kinds[0]",
        ),
        case(
            "list: selector set-based",
            list(|r| r.label_selector = "app in (web,chat),!missing,tier notin (x)".into()),
            Ok,
            "",
        ),
        case(
            "list: selector 4096 bytes",
            list(|r| r.label_selector = selector_4096.clone()),
            Ok,
            "",
        ),
        case(
            "list: selector 4097 bytes",
            list(|r| r.label_selector = format!("{selector_4096} ")),
            InvalidArgument,
            "label_selector",
        ),
        case(
            "list: selector 1 MiB",
            list(|r| r.label_selector = huge.clone()),
            InvalidArgument,
            "label_selector",
        ),
        case(
            "list: selector !",
            list(|r| r.label_selector = "!".into()),
            InvalidArgument,
            "label_selector",
        ),
        case(
            "list: selector =",
            list(|r| r.label_selector = "=".into()),
            InvalidArgument,
            "label_selector",
        ),
        case(
            "list: selector a=b=c",
            list(|r| r.label_selector = "a=b=c".into()),
            InvalidArgument,
            "label_selector",
        ),
        case(
            "list: selector bad key",
            list(|r| r.label_selector = "-a=b".into()),
            InvalidArgument,
            "label key",
        ),
        case(
            "list: view 3",
            list(|r| r.view = 3),
            InvalidArgument,
            "view",
        ),
        case("list: page_size 1", list(|r| r.page_size = 1), Ok, ""),
        case(
            "list: page_size max",
            list(|r| r.page_size = u32::MAX),
            Ok,
            "",
        ),
        case(
            "list: page token",
            list(|r| r.page_token = all_token.clone()),
            Ok,
            "",
        ),
        case(
            "list: page token, other view and size",
            list(|r| {
                r.page_token = all_token.clone();
                r.view = 2;
                r.page_size = 5;
            }),
            Ok,
            "",
        ),
        case(
            "list: page token of another filter",
            list(|r| {
                r.page_token = all_token.clone();
                r.namespace = "ml".into();
            }),
            InvalidArgument,
            "different query",
        ),
        case(
            "list: page token of another selector",
            list(|r| {
                r.page_token = all_token.clone();
                r.label_selector = "app".into();
            }),
            InvalidArgument,
            "different query",
        ),
        case(
            "list: numeric page token",
            list(|r| r.page_token = "5".into()),
            InvalidArgument,
            "page_token",
        ),
        case(
            "list: page token u64::MAX",
            list(|r| r.page_token = u64::MAX.to_string()),
            InvalidArgument,
            "page_token",
        ),
        case(
            "list: page token 1 MiB",
            list(|r| r.page_token = huge.clone()),
            InvalidArgument,
            "page_token",
        ),
        // WatchRequest.
        case("watch: everything", watch(|_| ()), Ok, ""),
        case(
            "watch: resume from the future (RESET)",
            watch(|r| r.since_revision = u64::MAX),
            Ok,
            "",
        ),
        case(
            "watch: namespace malformed",
            watch(|r| r.namespace = "Bad".into()),
            InvalidArgument,
            "namespace",
        ),
        case(
            "watch: kinds empty entry",
            watch(|r| r.kinds = vec![String::new()]),
            InvalidArgument,
            "kinds[0]",
        ),
        case(
            "watch: selector !",
            watch(|r| r.label_selector = "!".into()),
            InvalidArgument,
            "label_selector",
        ),
        case(
            "watch: selector 1 MiB",
            watch(|r| r.label_selector = huge.clone()),
            InvalidArgument,
            "label_selector",
        ),
        case(
            "watch: view 99",
            watch(|r| r.view = 99),
            InvalidArgument,
            "view",
        ),
        case("watch: cluster", watch(|r| r.cluster = "eu".into()), Ok, ""),
        case(
            "watch: cluster with a newline",
            watch(|r| r.cluster = "e\nu".into()),
            InvalidArgument,
            "cluster",
        ),
        // TotalsRequest.
        case("totals: unspecified", totals(0, ""), Ok, ""),
        case("totals: by workload", totals(3, "ml"), Ok, ""),
        case("totals: by cluster", totals(4, ""), Ok, ""),
        case(
            "totals: group_by 5",
            totals(5, ""),
            InvalidArgument,
            "group_by",
        ),
        case("totals: cluster", totals_in("eu"), Ok, ""),
        case(
            "totals: cluster 254 bytes",
            totals_in(&"c".repeat(254)),
            InvalidArgument,
            "cluster",
        ),
        case(
            "totals: group_by 99",
            totals(99, ""),
            InvalidArgument,
            "group_by",
        ),
        case(
            "totals: group_by -1",
            totals(-1, ""),
            InvalidArgument,
            "group_by",
        ),
        case(
            "totals: namespace malformed",
            totals(1, "ML"),
            InvalidArgument,
            "namespace",
        ),
        case(
            "totals: namespace 1 MiB",
            totals(1, &huge),
            InvalidArgument,
            "namespace",
        ),
        // ListDefinitionsRequest has no fields.
        case(
            "list definitions",
            Call::ListDefinitions(pb::ListDefinitionsRequest {}),
            Ok,
            "",
        ),
        // ValidateDefinitionRequest.
        case("validate: empty (valid=false)", validate("", None), Ok, ""),
        case(
            "validate: blank (valid=false)",
            validate(" \n ", None),
            Ok,
            "",
        ),
        case(
            "validate: a catalog definition",
            validate(&job_definition(), None),
            Ok,
            "",
        ),
        case(
            "validate: not YAML (valid=false)",
            validate("kind: [", None),
            Ok,
            "",
        ),
        case(
            "validate: 1 MiB of junk (valid=false)",
            validate(&format!("kind: [{huge}"), None),
            Ok,
            "",
        ),
        case(
            "validate: with a sample",
            validate(&job_definition(), inline_sample(job_json("j", "x"))),
            Ok,
            "",
        ),
        case(
            "validate: sample of another kind",
            validate(&job_definition(), inline_sample(pod_json("Pod", "x"))),
            InvalidArgument,
            "sample.object_json",
        ),
        case(
            "validate: sample empty",
            validate(&job_definition(), inline_sample(String::new())),
            InvalidArgument,
            "sample.object_json",
        ),
        case(
            "validate: sample name 1 MiB",
            validate(&job_definition(), inline_sample(job_json(&huge, "x"))),
            InvalidArgument,
            "sample.object_json",
        ),
    ];
    let mut failures = Vec::new();
    for c in cases {
        let a = call(&channel, c.call).await;
        let mut problems = Vec::new();
        if a.code != c.code {
            problems.push(format!("code {:?}, want {:?}", a.code, c.code));
        }
        if a.message.len() > STATUS_BYTES + 32 {
            problems.push(format!("message of {} bytes", a.message.len()));
        }
        if c.code != Code::Ok && !a.message.contains(c.mentions) {
            problems.push(format!("message does not name {:?}", c.mentions));
        }
        // No answer grows with a hostile value: the 1 MiB inputs get small answers.
        if c.name.contains("1 MiB") && a.bytes > 64 * 1024 {
            problems.push(format!("answer of {} bytes", a.bytes));
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{}: {} ({:.300})",
                c.name,
                problems.join("; "),
                a.message
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Text that holds no valid definition is an answer, not an RPC error.
    let mut defs = DefinitionsClient::new(channel.clone()).max_encoding_message_size(64 * MIB);
    for text in [
        String::new(),
        " \n ".to_owned(),
        "kind: [".to_owned(),
        format!("kind: [{huge}"),
    ] {
        let reply = defs
            .validate_definition(pb::ValidateDefinitionRequest {
                definition: text.clone(),
                sample: None,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!reply.valid, "{text:.20}");
        assert!(!reply.errors.is_empty() && reply.errors.len() <= 101);
    }
}

/// The issue's case: before, `offset + limit` wrapped and a client paging to the end looped
/// forever. Keyset tokens cannot wrap, and paging with one stays exact while workloads are
/// added and removed on both sides of the position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_tokens_survive_changes_and_never_loop() {
    let index = demo_index();
    let (channel, _shutdown, _) = serve(index.clone()).await;
    let mut client = WorkloadResolverClient::new(channel);
    let names = |page: &pb::ListResponse| -> Vec<(String, String)> {
        page.workloads
            .iter()
            .map(|w| {
                let r = w.r#ref.clone().unwrap();
                (r.namespace, r.name)
            })
            .collect()
    };
    let all = client
        .list(pb::ListRequest {
            page_size: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let before = names(&all);
    assert!(before.len() > 20);
    // A first page of 5, then changes: one workload added that sorts before the position,
    // one after it, and one not yet sent deleted.
    let first = client
        .list(pb::ListRequest {
            page_size: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let job = |ns: &str, name: &str, uid: &str| {
        serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}})
    };
    assert!(
        index
            .batch()
            .write(Write::apply("test", job("aaa-first", "early", "u-early")))
            .is_empty()
    );
    assert!(
        index
            .batch()
            .write(Write::apply("test", job("zzz-last", "late", "u-late")))
            .is_empty()
    );
    let deleted = before[10].clone();
    let deleted_uid = all.workloads[10].r#ref.clone().unwrap().uid;
    index.batch().write(Write::delete(&deleted_uid));
    let mut seen = names(&first);
    let mut token = first.next_page_token;
    let mut pages = 1;
    while !token.is_empty() {
        let page = client
            .list(pb::ListRequest {
                page_size: 5,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        seen.extend(names(&page));
        token = page.next_page_token;
        pages += 1;
        assert!(pages < 100, "paging ends");
    }
    let mut want: Vec<(String, String)> =
        before.iter().filter(|w| **w != deleted).cloned().collect();
    want.push(("zzz-last".into(), "late".into()));
    assert_eq!(
        seen, want,
        "every workload present throughout, once, in order; the later one too"
    );
    assert!(
        !seen.contains(&("aaa-first".into(), "early".into())),
        "it sorts before the position"
    );
}

/// `--metrics-auth`: `/metrics` answers only a token with the `metrics` scope (or `*`);
/// `/livez` and `/readyz` stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_token_with_the_metrics_scope() {
    let dir = std::env::temp_dir().join(format!("kartograf-strict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(
        &file,
        "promtokenpromtoken prometheus metrics\nschedtokenschedtoken scheduler resolver\nadmintokenadmintoken admin *\n",
    )
    .unwrap();
    let tokens = Arc::new(Tokens::load(&file).unwrap());
    let (_channel, _shutdown, shared) = serve(demo_index()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(kartograf::admin::serve_guarded(
        listener,
        shared,
        Some(tokens),
    ));
    let get = |path: &'static str, token: Option<&'static str>| async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    let status = |r: &str| r.split(' ').nth(1).unwrap_or_default().to_owned();
    let r = get("/metrics", None).await;
    assert_eq!(status(&r), "401", "{r}");
    assert!(
        r.to_ascii_lowercase().contains("www-authenticate: bearer"),
        "{r}"
    );
    assert!(
        !r.contains("kartograf_workload"),
        "no series without a token"
    );
    assert_eq!(
        status(&get("/metrics", Some("wrongwrongwrongwrong")).await),
        "401"
    );
    let r = get("/metrics", Some("schedtokenschedtoken")).await;
    assert_eq!(status(&r), "403", "{r}");
    assert!(
        r.contains("scheduler") && !r.contains("schedtokenschedtoken"),
        "{r}"
    );
    for token in ["promtokenpromtoken", "admintokenadmintoken"] {
        let r = get("/metrics", Some(token)).await;
        assert_eq!(status(&r), "200", "{r:.300}");
        assert!(r.contains("kartograf_workload_gpus"));
    }
    assert_eq!(status(&get("/livez", None).await), "200");
    assert_eq!(status(&get("/readyz", None).await), "200");
}

/// ValidateDefinition on a sample whose value a path reads is 3 MiB: the `bad_value`
/// diagnostic quotes a bounded part of it, so the answer stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_bad_value_makes_a_small_answer() {
    let (channel, _shutdown, _) = serve(demo_index()).await;
    // A Job definition whose replica count reads a 3 MiB string.
    let definition = "apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: big-values}
spec:
  structureDefinition:
    rootComponent:
      name: job
      kind: {group: batch, version: v1, kind: Job}
      specDefinition:
        podTemplateSpecPath: .spec.template
      scaleDefinition:
        replicasPath: .metadata.annotations.big
      statusDefinition:
        statusMappings:
          running:
            - byExpression: {expression: 'true', expectedResult: 'true'}
"
    .to_owned();
    let object = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "x", "uid": "u",
                     "annotations": {"big": "b".repeat(3 * MIB)}},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}
    });
    let answer = DefinitionsClient::new(channel)
        .max_encoding_message_size(64 * MIB)
        .max_decoding_message_size(64 * MIB)
        .validate_definition(pb::ValidateDefinitionRequest {
            definition,
            sample: Some(pb::InlineWorkload {
                object_json: object.to_string(),
                pods_json: vec![],
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(answer.valid, "{:?}", answer.errors);
    let preview = answer.preview.expect("a preview");
    let bad: Vec<&pb::Diagnostic> = preview
        .diagnostics
        .iter()
        .filter(|d| d.code == "bad_value")
        .collect();
    assert!(!bad.is_empty(), "{:?}", preview.diagnostics);
    for d in &bad {
        assert!(d.message.len() <= TEXT_BYTES + 32, "{}", d.message.len());
        assert!(
            d.message.contains(" bytes)"),
            "the full length is shown: {:.200}",
            d.message
        );
    }
    let size = pb::ValidateDefinitionResponse {
        valid: answer.valid,
        errors: answer.errors,
        preview: Some(preview),
        warnings: answer.warnings,
    }
    .encoded_len();
    assert!(size < 64 * 1024, "answer of {size} bytes");
}
