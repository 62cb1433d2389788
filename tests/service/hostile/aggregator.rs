//! Hostile upstreams beside an honest one, against the real aggregator process: one sends
//! 32 MiB graphs, one a snapshot that never reaches SYNCED, one graphs that claim the honest
//! cluster's name (copies of its workloads, changed, and one planted). The aggregator stays
//! up within a memory bound, isolates the first two (stale, with the bound they broke),
//! refuses the third's claims, and serves the honest cluster's workloads as its own server
//! does.

use super::{Served, tail};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::definitions_client::DefinitionsClient;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::proto::v1::workload_resolver_server::{WorkloadResolver, WorkloadResolverServer};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

/// What a fake upstream sends on every `Watch`.
#[derive(Clone)]
enum Behaviour {
    /// ADDED events of a graph of this many bytes, for as long as the stream is read.
    Huge(usize),
    /// ADDED events of new small workloads, 1,000 every 100 ms, never SYNCED.
    EndlessSnapshot,
    /// These graphs (ADDED), then SYNCED, then nothing.
    Graphs(Vec<pb::Workload>),
}

/// A fake upstream: a gRPC server whose `Watch` follows a [`Behaviour`] (its other RPCs
/// are UNIMPLEMENTED, and it serves no Definitions service).
struct Fake {
    behaviour: Behaviour,
    /// Watch calls so far (reconnections).
    watches: Arc<AtomicUsize>,
}

type Events = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

fn added(revision: u64, workload: pb::Workload) -> Result<pb::WatchEvent, Status> {
    Ok(pb::WatchEvent {
        r#type: pb::EventType::Added as i32,
        revision,
        workload: Some(workload),
    })
}

fn small(uid: String, cluster: &str) -> pb::Workload {
    pb::Workload {
        r#ref: Some(pb::ObjectRef {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            namespace: "flood".into(),
            name: format!("job-{uid}"),
            uid,
        }),
        cluster: cluster.into(),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl WorkloadResolver for Fake {
    async fn resolve(
        &self,
        _: Request<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn list(
        &self,
        _: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn gangs(
        &self,
        _: Request<pb::GangsRequest>,
    ) -> Result<Response<pb::GangsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn patch(
        &self,
        _: Request<pb::PatchRequest>,
    ) -> Result<Response<pb::PatchResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    type WatchStream = Events;

    async fn watch(
        &self,
        _: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.watches.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let behaviour = self.behaviour.clone();
        tokio::spawn(async move {
            let mut revision = 1u64;
            match behaviour {
                Behaviour::Huge(bytes) => {
                    let mut graph = small("huge".into(), "evil-big");
                    graph.created = "x".repeat(bytes);
                    while tx.send(added(revision, graph.clone())).await.is_ok() {
                        revision += 1;
                    }
                }
                Behaviour::EndlessSnapshot => loop {
                    for _ in 0..1000 {
                        let w = small(format!("u{revision}"), "evil-slow");
                        if tx.send(added(revision, w)).await.is_err() {
                            return;
                        }
                        revision += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                },
                Behaviour::Graphs(graphs) => {
                    for w in graphs {
                        if tx.send(added(revision, w)).await.is_err() {
                            return;
                        }
                        revision += 1;
                    }
                    let synced = pb::WatchEvent {
                        r#type: pb::EventType::Synced as i32,
                        revision,
                        workload: None,
                    };
                    let _ = tx.send(Ok(synced)).await;
                    tx.closed().await;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn totals(
        &self,
        _: Request<pb::TotalsRequest>,
    ) -> Result<Response<pb::TotalsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// Serves a fake upstream on loopback: (its URL, its Watch call count).
async fn fake(behaviour: Behaviour) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let watches = Arc::new(AtomicUsize::new(0));
    let service = WorkloadResolverServer::new(Fake {
        behaviour,
        watches: watches.clone(),
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (format!("http://{addr}"), watches)
}

async fn client(url: &str) -> WorkloadResolverClient<tonic::transport::Channel> {
    WorkloadResolverClient::connect(url.to_owned())
        .await
        .unwrap()
        .max_decoding_message_size(64 << 20)
}

/// Every workload of a List (of one cluster), all pages.
async fn list(url: &str, cluster: &str) -> Vec<pb::Workload> {
    let mut c = client(url).await;
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = c
            .list(pb::ListRequest {
                cluster: cluster.into(),
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        all.extend(page.workloads);
        if page.next_page_token.is_empty() {
            return all;
        }
        page_token = page.next_page_token;
    }
}

/// The problems ListSources reports for `upstream NAME`.
async fn problems(url: &str, name: &str) -> Vec<String> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let sources = DefinitionsClient::new(channel)
        .list_sources(pb::ListSourcesRequest::default())
        .await
        .unwrap()
        .into_inner()
        .sources;
    sources
        .into_iter()
        .filter(|s| s.name == format!("upstream {name}"))
        .flat_map(|s| s.problems)
        .map(|p| p.message)
        .collect()
}

fn identity(w: &pb::Workload) -> (String, String, String) {
    let r = w.r#ref.clone().unwrap_or_default();
    (w.cluster.clone(), r.namespace, r.uid)
}

#[test]
fn hostile_upstreams_beside_an_honest_one() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let demo = demo.to_str().unwrap();
    let mut honest = Served::start(&["--manifests", demo, "--cluster-name", "honest"]);
    honest.wait_ready(Duration::from_secs(60));
    let own = runtime.block_on(list(&honest.grpc, ""));
    assert!(!own.is_empty());
    // Copies of the honest cluster's workloads, changed (a label), and one planted workload,
    // all naming the honest cluster; one of the fake's own, naming its own.
    let mut claims: Vec<pb::Workload> = own
        .iter()
        .cloned()
        .map(|mut w| {
            w.labels.insert("shadow".into(), "yes".into());
            w
        })
        .collect();
    let mut planted = small("planted".into(), "honest");
    planted.r#ref.as_mut().unwrap().name = "planted".into();
    claims.push(planted);
    claims.push(small("mine".into(), "evil-claim"));
    let claimed = claims.len() - 1;

    let (big, big_watches) = runtime.block_on(fake(Behaviour::Huge(32 << 20)));
    let (slow, _) = runtime.block_on(fake(Behaviour::EndlessSnapshot));
    let (claim, _) = runtime.block_on(fake(Behaviour::Graphs(claims)));
    let upstream = |name: &str, url: &str| format!("{name}={url}");
    let mut hub = Served::start(&[
        "--upstream",
        &upstream("honest", &honest.grpc),
        "--upstream",
        &upstream("evil-big", &big),
        "--upstream",
        &upstream("evil-slow", &slow),
        "--upstream",
        &upstream("evil-claim", &claim),
        "--serve-partial",
        "--upstream-snapshot-timeout",
        "3s",
    ]);
    let metric = |hub: &Served, line: &str| hub.get("/metrics").1.lines().any(|l| l == line);
    let until = Instant::now() + Duration::from_secs(30);
    let reasons = |name: &str| runtime.block_on(problems(&hub.grpc, name)).join("\n");
    loop {
        let big_reason = reasons("evil-big");
        let slow_reason = reasons("evil-slow");
        let synced = metric(&hub, "kartograf_upstream_synced{cluster=\"honest\"} 1")
            && metric(&hub, "kartograf_upstream_synced{cluster=\"evil-claim\"} 1");
        if big_reason.contains("--upstream-max-graph-bytes")
            && slow_reason.contains("--upstream-snapshot-timeout")
            && synced
        {
            break;
        }
        assert!(
            Instant::now() < until,
            "not isolated within 30 s: evil-big: {big_reason:?}; evil-slow: {slow_reason:?}; synced: {synced}\n{}",
            tail(&hub.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The attacks go on for a while (reconnections with backoff included).
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        big_watches.load(Ordering::Relaxed) >= 2,
        "the isolated upstream is retried"
    );
    assert!(metric(
        &hub,
        "kartograf_upstream_stale{cluster=\"evil-big\"} 1"
    ));
    assert!(metric(
        &hub,
        "kartograf_upstream_stale{cluster=\"evil-slow\"} 1"
    ));
    assert!(metric(
        &hub,
        "kartograf_upstream_workloads{cluster=\"evil-slow\"} 0"
    ));
    assert!(metric(
        &hub,
        "kartograf_upstream_stale{cluster=\"honest\"} 0"
    ));
    assert!(
        metric(
            &hub,
            &format!("kartograf_upstream_refused_graphs_total{{cluster=\"evil-claim\"}} {claimed}")
        ),
        "every claim refused and counted"
    );
    assert!(reasons("evil-claim").contains("which this upstream may not speak for"));

    // The honest cluster's workloads, as its own server has them (revisions aside), and
    // nothing else in its name.
    let strip = |mut all: Vec<pb::Workload>| {
        all.iter_mut().for_each(|w| w.revision = 0);
        all.sort_by_key(identity);
        all
    };
    let relayed = strip(runtime.block_on(list(&hub.grpc, "honest")));
    assert_eq!(relayed, strip(own.clone()));
    let mine = runtime.block_on(list(&hub.grpc, "evil-claim"));
    assert_eq!(
        mine.len(),
        1,
        "the claiming upstream's own workload is served"
    );
    // By name: the honest graph (not the claim's copy), and no planted workload.
    let mut c = runtime.block_on(client(&hub.grpc));
    let by_name = |namespace: &str, name: &str| pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            namespace: namespace.into(),
            name: name.into(),
            ..Default::default()
        })),
        view: 0,
        cluster: "honest".into(),
    };
    let first = own[0].r#ref.clone().unwrap();
    let answer = runtime
        .block_on(c.resolve(by_name(&first.namespace, &first.name)))
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    assert_eq!(answer.r#ref.unwrap().uid, first.uid);
    assert!(!answer.labels.contains_key("shadow"));
    let planted = runtime
        .block_on(c.resolve(by_name("flood", "planted")))
        .unwrap_err();
    assert_eq!(planted.code(), tonic::Code::NotFound);

    hub.assert_up_within(400 << 20);
    eprintln!("aggregator peak RSS: {} MiB", hub.peak_rss() >> 20);
}
