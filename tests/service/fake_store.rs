//! The gRPC services over a fake [`Store`]: what the server does with what a store answers
//! (health following `synced`, List reading the board, a store's status passed to the
//! client unchanged), with no index, no sources and no resolution behind it.

use kartograf::board::{
    AttributedPod, Board, Publication, Published, Sizes, SourceProblem, UnownedGpuPod,
};
use kartograf::definition::Catalog;
use kartograf::metrics::Observed;
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::{LoadReport, ResolveFrame, Store};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tonic::Status;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// A store that serves what the test publishes on its board and answers every pod lookup
/// with one scripted status.
struct FakeStore {
    board: Board,
    synced: AtomicBool,
    pod_answer: Status,
}

impl Observed for FakeStore {
    fn board(&self) -> &Board {
        &self.board
    }
    fn catalog(&self) -> Arc<Catalog> {
        Arc::new(Catalog::default())
    }
    fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }
    fn sizes(&self) -> Sizes {
        Sizes::default()
    }
    fn cluster_label(&self) -> bool {
        false
    }
    fn workload_pods(&self) -> Vec<(Arc<pb::Workload>, Vec<AttributedPod>)> {
        Vec::new()
    }
    fn unowned_gpu_pods(&self) -> Vec<UnownedGpuPod> {
        Vec::new()
    }
    fn source_problems(&self) -> Vec<(String, Vec<SourceProblem>)> {
        Vec::new()
    }
}

#[tonic::async_trait]
impl Store for FakeStore {
    fn pending(&self) -> Vec<String> {
        if self.synced() {
            Vec::new()
        } else {
            vec!["fake".to_owned()]
        }
    }

    fn workload(&self, r: &pb::ObjectRef, _cluster: &str) -> Result<Arc<Published>, Status> {
        self.board
            .get(&format!("uid-{}", r.name))
            .map(|e| e.graph.clone())
            .ok_or_else(|| Status::not_found(format!("fake: no {}", r.name)))
    }

    async fn pod(
        &self,
        _r: pb::ObjectRef,
        _cluster: String,
        _view: i32,
    ) -> Result<ResolveFrame, Status> {
        Err(self.pod_answer.clone())
    }
}

fn workload(name: &str) -> pb::Workload {
    pb::Workload {
        r#ref: Some(pb::ObjectRef {
            api_version: "example.com/v1".into(),
            kind: "Fake".into(),
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }),
        ..Default::default()
    }
}

async fn health(channel: &Channel) -> i32 {
    let mut health = HealthClient::new(channel.clone());
    match health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
    {
        Ok(r) => r.into_inner().status,
        Err(_) => -1,
    }
}

#[tokio::test]
async fn the_services_serve_what_a_fake_store_answers() {
    let store = Arc::new(FakeStore {
        board: Board::new(100),
        synced: AtomicBool::new(false),
        pod_answer: Status::unavailable("fake: the upstream of this pod is gone"),
    });
    let (channel, _shutdown) =
        crate::serve_index(store.clone(), Arc::new(LoadReport::default())).await;

    // Health follows the store: NOT_SERVING (2) until it says it synced, then SERVING (1).
    let mut status = -1;
    for _ in 0..100 {
        status = health(&channel).await;
        if status != -1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 2, "not synced yet");
    store.synced.store(true, Ordering::SeqCst);
    for _ in 0..100 {
        status = health(&channel).await;
        if status == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 1, "SERVING once the store synced");

    // List and Resolve read what the store published.
    let published = Arc::new(Published::new(workload("alpha")));
    store.board.publish(
        vec![Publication::new(
            Arc::from("uid-alpha"),
            published,
            Arc::from(Vec::new()),
        )],
        Vec::new(),
    );
    let mut client = WorkloadResolverClient::new(channel.clone());
    let list = client
        .list(pb::ListRequest::default())
        .await
        .expect("list")
        .into_inner();
    let names: Vec<String> = list
        .workloads
        .iter()
        .filter_map(|w| w.r#ref.as_ref().map(|r| r.name.clone()))
        .collect();
    assert_eq!(names, ["alpha"]);
    let target = |name: &str| pb::ObjectRef {
        kind: "Fake".into(),
        namespace: "default".into(),
        name: name.into(),
        ..Default::default()
    };
    let resolved = client
        .resolve(pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Workload(target("alpha"))),
            ..Default::default()
        })
        .await
        .expect("resolve")
        .into_inner();
    assert_eq!(
        resolved.workload.and_then(|w| w.r#ref).map(|r| r.name),
        Some("alpha".to_owned())
    );

    // The store's own statuses reach the client unchanged.
    let missing = client
        .resolve(pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Workload(target("beta"))),
            ..Default::default()
        })
        .await
        .expect_err("not published");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(missing.message().contains("fake: no beta"), "{missing:?}");
    let pod = client
        .resolve(pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Pod(pb::ObjectRef {
                namespace: "default".into(),
                name: "p".into(),
                ..Default::default()
            })),
            ..Default::default()
        })
        .await
        .expect_err("scripted");
    assert_eq!(pod.code(), tonic::Code::Unavailable);
    assert!(
        pod.message().contains("upstream of this pod is gone"),
        "{pod:?}"
    );
}
