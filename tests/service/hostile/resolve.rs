//! Objects whose numbers make resolution do native work (replica counts) or make sums
//! overflow (quantities, pod counts): the served process stays up, within a memory bound,
//! with partial graphs and diagnostics, and Totals rows that saturate instead of wrapping.

use super::{Served, scratch};
use crate::workloads::lws;
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use std::time::Duration;

async fn client(served: &Served) -> WorkloadResolverClient<tonic::transport::Channel> {
    // A graph cut at the slot limit is several MiB in the full view.
    WorkloadResolverClient::connect(served.grpc.clone())
        .await
        .expect("connects")
        .max_decoding_message_size(64 << 20)
}

/// Two LeaderWorkerSets of 2^31-1 groups in a manifest: the server starts (no crash loop),
/// each graph is cut at the slot limit and says so, and the namespace's Totals row holds
/// the pod count's maximum and says it saturated (the true sum is 8,589,934,588).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn int32_replicas_in_a_manifest_neither_crash_the_server_nor_wrap_its_totals() {
    let dir = scratch("replicas");
    std::fs::write(dir.join("a.yaml"), lws("huge-a", "2147483647")).unwrap();
    std::fs::write(dir.join("b.yaml"), lws("huge-b", "2147483647")).unwrap();
    let mut served = Served::start(&["--manifests", dir.to_str().unwrap()]);
    served.wait_ready(Duration::from_secs(60));
    let mut c = client(&served).await;
    let w = c
        .resolve(pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
                kind: "LeaderWorkerSet".into(),
                namespace: "inference".into(),
                name: "huge-a".into(),
                ..Default::default()
            })),
            view: pb::View::Summary as i32,
            ..Default::default()
        })
        .await
        .expect("resolves")
        .into_inner()
        .workload
        .expect("a workload");
    assert!(
        w.diagnostics.iter().any(|d| d.code == "limit_exceeded"),
        "{:?}",
        w.diagnostics
    );
    assert_eq!(w.pods.unwrap_or_default().desired, 4_294_967_294);
    let rows = c
        .totals(pb::TotalsRequest {
            group_by: pb::GroupBy::Namespace as i32,
            namespace: "inference".into(),
            ..Default::default()
        })
        .await
        .expect("totals")
        .into_inner()
        .rows;
    let row = rows.iter().find(|r| r.key == "inference").expect("a row");
    assert_eq!(row.pods.unwrap_or_default().desired, u32::MAX);
    assert!(row.saturated, "{row:?}");
    served.assert_up_within(1 << 30);
}

/// The same object sent inline: the answer comes (partial, within the resolve deadline) and
/// the process stays up and small; a second, honest request is answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn int32_replicas_inline_are_answered_partially() {
    let dir = scratch("inline");
    let mut served = Served::start(&["--manifests", dir.to_str().unwrap()]);
    served.wait_ready(Duration::from_secs(30));
    let mut c = client(&served).await;
    for _ in 0..3 {
        let w = inline(&mut c, &lws("inline", "2147483647")).await;
        assert!(
            w.diagnostics.iter().any(|d| d.code == "limit_exceeded"),
            "{:?}",
            w.diagnostics
        );
    }
    let w = inline(&mut c, &lws("small", "3")).await;
    assert_eq!(w.pods.unwrap_or_default().desired, 6);
    served.assert_up_within(1 << 30);
}

/// Resolves the YAML object `yaml` inline (sent as JSON, the full view).
async fn inline(
    c: &mut WorkloadResolverClient<tonic::transport::Channel>,
    yaml: &str,
) -> pb::Workload {
    let value: serde_json::Value = serde_saphyr::from_str(yaml).expect("valid YAML");
    c.resolve(pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
            object_json: value.to_string(),
            pods_json: Vec::new(),
        })),
        view: pb::View::Full as i32,
        ..Default::default()
    })
    .await
    .expect("answered")
    .into_inner()
    .workload
    .expect("a workload")
}
