//! `Patch` fed what a caller controls: objects whose paths yield more locations, patches
//! larger, and inline objects larger than the bounds; label keys Kubernetes refuses; a
//! reading token. Each is refused with the bound (or rule) named, the real `kartograf`
//! process stays up and within a memory bound, and an honest request is answered after.

use super::{Served, scratch};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tonic::Code;

const MAX_RSS: u64 = 512 << 20;

/// A JobSet with `jobs` replicated jobs, each template carrying `annotation` bytes.
fn jobset(jobs: usize, annotation: usize) -> Value {
    let job = |n: usize| {
        json!({"name": format!("j{n}"), "replicas": 1, "template": {"spec": {"template": {
            "metadata": {"annotations": {"pad": "x".repeat(annotation)}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}})
    };
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "big", "namespace": "ml", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"replicatedJobs": (0..jobs).map(job).collect::<Vec<_>>()}
    })
}

fn request(object: &Value, intents: pb::PatchIntents) -> pb::PatchRequest {
    pb::PatchRequest {
        target: Some(pb::patch_request::Target::Inline(pb::InlineWorkload {
            object_json: object.to_string(),
            pods_json: Vec::new(),
        })),
        intents: Some(intents),
        ..Default::default()
    }
}

fn scheduler() -> pb::PatchIntents {
    pb::PatchIntents {
        scheduler_name: "kai-scheduler".into(),
        ..Default::default()
    }
}

async fn client(
    grpc: String,
    token: Option<&str>,
) -> WorkloadResolverClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        impl Fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone,
    >,
> {
    let channel = tonic::transport::Channel::from_shared(grpc)
        .unwrap()
        .connect()
        .await
        .expect("connects");
    let bearer = token.map(|t| format!("Bearer {t}"));
    WorkloadResolverClient::with_interceptor(channel, move |mut r: tonic::Request<()>| {
        if let Some(b) = &bearer {
            r.metadata_mut().insert("authorization", b.parse().unwrap());
        }
        Ok(r)
    })
    .max_encoding_message_size(8 << 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_patches_objects_and_location_counts_are_refused_with_the_bound_named() {
    let dir = scratch("patch");
    let mut served = Served::start(&["--manifests", dir.to_str().unwrap()]);
    served.wait_ready(Duration::from_secs(30));
    let mut c = client(served.grpc.clone(), None).await;

    // An inline object over the bound.
    let big = jobset(1, 3 * 1024 * 1024 + 1);
    let e = c.patch(request(&big, scheduler())).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(
        e.message().contains("exceed the bound of 3145728"),
        "{}",
        e.message()
    );

    // More outputs than one expression may yield (1,000): refused, nothing half written.
    let e = c
        .patch(request(&jobset(1500, 0), scheduler()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(e.message().contains("bound of 1000"), "{}", e.message());

    // 900 templates × 65 writes: more operations than a patch may hold.
    let labels: BTreeMap<String, String> =
        (0..64).map(|n| (format!("k{n}"), "v".to_owned())).collect();
    let many = pb::PatchIntents {
        labels,
        ..scheduler()
    };
    let e = c.patch(request(&jobset(900, 0), many)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(
        e.message()
            .contains("patch operations exceed the bound of 4096"),
        "{}",
        e.message()
    );

    // 300 templates × 4 annotations of 60 KiB: more bytes than a patch may hold.
    let fat = pb::PatchIntents {
        annotations: (0..4)
            .map(|n| (format!("a{n}"), "y".repeat(60 * 1024)))
            .collect(),
        ..Default::default()
    };
    let e = c.patch(request(&jobset(300, 0), fat)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(
        e.message()
            .contains("patch bytes exceed the bound of 1048576"),
        "{}",
        e.message()
    );

    // Kubernetes' rules: a label value of 1 MiB is refused, quoted only as an excerpt.
    let bad = pb::PatchIntents {
        labels: BTreeMap::from([("team".into(), "z".repeat(1 << 20))]),
        ..Default::default()
    };
    let e = c.patch(request(&jobset(1, 0), bad)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().len() < 4096, "{} bytes", e.message().len());

    // An honest request is still answered.
    let ok = c
        .patch(request(&jobset(3, 0), scheduler()))
        .await
        .expect("an honest patch")
        .into_inner();
    assert_eq!(ok.changes, 3);
    served.assert_up_within(MAX_RSS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_token_cannot_patch_and_a_patch_token_can() {
    let dir = scratch("patch-tokens");
    let manifests = scratch("patch-tokens-manifests");
    let tokens = dir.join("tokens");
    let (reader, planner) = ("reader-token-0123456789", "planner-token-0123456789");
    std::fs::write(
        &tokens,
        format!("{reader} sched resolver\n{planner} planner patch\n"),
    )
    .unwrap();
    let mut served = Served::start(&[
        "--manifests",
        manifests.to_str().unwrap(),
        "--auth-tokens",
        tokens.to_str().unwrap(),
    ]);
    served.wait_ready(Duration::from_secs(30));
    let object = jobset(2, 0);
    let e = client(served.grpc.clone(), Some(reader))
        .await
        .patch(request(&object, scheduler()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{}", e.message());
    assert!(e.message().contains("\"patch\""), "{}", e.message());
    let ok = client(served.grpc.clone(), Some(planner))
        .await
        .patch(request(&object, scheduler()))
        .await
        .expect("the patch scope may patch")
        .into_inner();
    assert_eq!(ok.changes, 2);
    let e = client(served.grpc.clone(), Some(planner))
        .await
        .list(pb::ListRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    served.assert_up_within(MAX_RSS);
}
