//! Many clusters, one Watch: in-process kartografs over manifest directories (copies of the
//! demo cluster, so their workloads have the same names and uids) behind an aggregator,
//! served over loopback like any kartograf. The aggregator follows each upstream's Watch and
//! serves the union: List, Watch, Totals and Resolve told apart by cluster; an upstream that
//! goes away is stale, then deleted; one that comes back is reconciled without a RESET; a
//! subscriber resuming from the aggregator misses nothing; namespace shards of one cluster
//! put back together equal one unsharded server.

use super::{copy_dir, next_event, temp_dir};
use crate::ports::free_port;
use kartograf::aggregate::{self, Aggregator, Backoff, UpstreamConfig};
use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::Index;
use kartograf::metrics::Observed;
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::{self, Settings, Shared, Store};
use kartograf::source::{definitions, manifests};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tonic::Code;
use tonic::transport::Channel;

type Client = WorkloadResolverClient<Channel>;

/// One cluster's kartograf: a watched manifest directory served on a loopback port that
/// stays the same across restarts.
struct Cluster {
    name: String,
    dir: PathBuf,
    addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    namespace: Option<String>,
    tls: Option<server::TlsFiles>,
    tokens: Option<Arc<server::Tokens>>,
}

impl Cluster {
    /// Serves `dir` as cluster `name` on `port` (0: any).
    async fn start(name: &str, dir: &Path, port: u16) -> Cluster {
        Cluster::start_with(name, dir, port, None, None, None).await
    }

    async fn start_with(
        name: &str,
        dir: &Path,
        port: u16,
        namespace: Option<String>,
        tls: Option<server::TlsFiles>,
        tokens: Option<Arc<server::Tokens>>,
    ) -> Cluster {
        let index = Arc::new(
            Index::new(Catalog::default(), &[manifests::SOURCE])
                .with_cluster(name, true)
                .with_namespace(namespace.clone()),
        );
        let report = Arc::new(LoadReport::default());
        let publisher = definitions::Publisher::new(
            definitions::Layers::default(),
            index.clone(),
            report.clone(),
        );
        publisher.update(|_| {});
        let source = tokio::spawn(manifests::run_with(
            index.clone(),
            dir.to_path_buf(),
            Duration::from_secs(30),
        ));
        let listener = bind(port).await;
        let addr = listener.local_addr().unwrap();
        let (shutdown, rx) = tokio::sync::watch::channel(false);
        let served = tokio::spawn({
            let shared = Shared::new(index.clone(), report, rx);
            let settings = Settings {
                listen: addr,
                shutdown_delay: Duration::from_millis(20),
                tls: tls.clone(),
                tokens: tokens.clone(),
                ..Settings::default()
            };
            async move {
                let _ = server::serve(listener, shared, settings).await;
            }
        });
        for _ in 0..500 {
            if index.synced() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(index.synced(), "cluster {name} loaded its manifests");
        Cluster {
            name: name.to_owned(),
            dir: dir.to_path_buf(),
            addr,
            shutdown,
            tasks: vec![source, served],
            namespace,
            tls,
            tokens,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn upstream(&self) -> UpstreamConfig {
        UpstreamConfig::new(&self.name, &self.url())
    }

    /// Stops it: Watch streams end, the port closes.
    async fn kill(&mut self) {
        let _ = self.shutdown.send(true);
        let server = self.tasks.pop().expect("server task");
        if tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .is_err()
        {
            panic!("cluster {} did not stop", self.name);
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }

    /// A fresh process over the same directory and port (a new index: new revisions).
    async fn restart(self) -> Cluster {
        Cluster::start_with(
            &self.name,
            &self.dir,
            self.addr.port(),
            self.namespace.clone(),
            self.tls.clone(),
            self.tokens.clone(),
        )
        .await
    }

    async fn client(&self) -> Client {
        WorkloadResolverClient::new(
            Channel::from_shared(self.url())
                .unwrap()
                .connect()
                .await
                .unwrap(),
        )
    }
}

/// Binds a loopback port, retrying a little while a just-closed listener lets it go.
async fn bind(port: u16) -> tokio::net::TcpListener {
    for _ in 0..100 {
        if let Ok(l) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("port {port} stays taken");
}

/// An aggregator of `upstreams`, served over loopback.
struct Hub {
    aggregator: Arc<Aggregator>,
    shared: Shared,
    client: Client,
    _shutdown: tokio::sync::watch::Sender<bool>,
}

fn fast(grace: Duration) -> aggregate::Settings {
    aggregate::Settings {
        grace,
        backoff: Backoff {
            initial: Duration::from_millis(50),
            factor: 2.0,
            max: Duration::from_millis(200),
            jitter: true,
        },
        connect_timeout: Duration::from_secs(1),
        ..aggregate::Settings::default()
    }
}

async fn hub(upstreams: Vec<UpstreamConfig>, settings: aggregate::Settings) -> Hub {
    let aggregator = Aggregator::new(Catalog::embedded().unwrap(), settings);
    aggregator.set_upstreams(upstreams);
    let listener = bind(0).await;
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let shared = Shared::new(aggregator.clone(), Arc::new(LoadReport::default()), rx);
    tokio::spawn(server::serve(
        listener,
        shared.clone(),
        Settings {
            listen: addr,
            ..Settings::default()
        },
    ));
    for _ in 0..500 {
        if aggregator.synced() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        aggregator.synced(),
        "every upstream synced: {:?}",
        aggregator.pending()
    );
    let client = WorkloadResolverClient::new(
        Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    Hub {
        aggregator,
        shared,
        client,
        _shutdown: tx,
    }
}

/// A copy of the demo cluster.
fn demo_copy(tag: &str) -> PathBuf {
    let dir = temp_dir(tag);
    copy_dir(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster"),
        &dir,
    );
    dir
}

/// Every workload of a List, all pages (`page_size` small, to page across clusters).
async fn list_all(client: &mut Client, request: pb::ListRequest) -> Vec<pb::Workload> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list(pb::ListRequest {
                page_token: token.clone(),
                ..request.clone()
            })
            .await
            .unwrap()
            .into_inner();
        out.extend(page.workloads);
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

/// (cluster, uid) -> graph without its revision (revisions are each server's own).
fn by_identity(workloads: Vec<pb::Workload>) -> BTreeMap<(String, String), pb::Workload> {
    workloads
        .into_iter()
        .map(|mut w| {
            w.revision = 0;
            let uid = w.r#ref.clone().unwrap_or_default().uid;
            ((w.cluster.clone(), uid), w)
        })
        .collect()
}

fn resolve_ref(kind: &str, ns: &str, name: &str, cluster: &str) -> pb::ResolveRequest {
    pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            ..Default::default()
        })),
        view: 0,
        cluster: cluster.into(),
    }
}

fn event_name(e: &pb::WatchEvent) -> (String, String) {
    let w = e.workload.clone().unwrap_or_default();
    (w.cluster, w.r#ref.unwrap_or_default().name)
}

fn stale(w: &pb::Workload) -> bool {
    w.diagnostics
        .iter()
        .any(|d| d.code == aggregate::UPSTREAM_STALE)
}

/// Reads up to SYNCED: the ADDED graphs by (cluster, uid) and SYNCED's revision.
async fn snapshot(
    stream: &mut tonic::Streaming<pb::WatchEvent>,
) -> (BTreeMap<(String, String), pb::Workload>, u64) {
    let mut added = Vec::new();
    loop {
        let e = next_event(stream, 20).await;
        if e.r#type == pb::EventType::Synced as i32 {
            return (by_identity(added), e.revision);
        }
        assert_eq!(e.r#type, pb::EventType::Added as i32, "{e:?}");
        added.push(e.workload.unwrap());
    }
}

/// Applies one event to a subscriber's view.
fn apply(view: &mut BTreeMap<(String, String), pb::Workload>, e: &pb::WatchEvent) {
    let mut w = e.workload.clone().unwrap_or_default();
    w.revision = 0;
    let key = (w.cluster.clone(), w.r#ref.clone().unwrap_or_default().uid);
    match pb::EventType::try_from(e.r#type) {
        Ok(pb::EventType::Added | pb::EventType::Modified) => {
            view.insert(key, w);
        }
        Ok(pb::EventType::Deleted) => {
            view.remove(&key);
        }
        other => panic!("unexpected {other:?} in a change stream"),
    }
}

/// Reads events (applying them to `view`) until `done` holds for the view; returns them.
async fn read_until(
    stream: &mut tonic::Streaming<pb::WatchEvent>,
    view: &mut BTreeMap<(String, String), pb::Workload>,
    what: &str,
    done: impl Fn(&BTreeMap<(String, String), pb::Workload>) -> bool,
) -> Vec<pb::WatchEvent> {
    let mut seen = Vec::new();
    while !done(view) {
        let e = tokio::time::timeout(Duration::from_secs(30), stream.message())
            .await
            .unwrap_or_else(|_| panic!("{what}: no event within 30 s after {} events", seen.len()))
            .expect("stream ok")
            .expect("stream open");
        assert_ne!(
            e.r#type,
            pb::EventType::Reset as i32,
            "{what}: the aggregator never RESETs its subscribers"
        );
        apply(view, &e);
        seen.push(e);
    }
    seen
}

fn of_cluster(view: &BTreeMap<(String, String), pb::Workload>, cluster: &str) -> Vec<pb::Workload> {
    view.iter()
        .filter(|((c, _), _)| c == cluster)
        .map(|(_, w)| w.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_with_the_same_names_and_uids_behind_one_aggregator() {
    let mut a = Cluster::start("a", &demo_copy("agg-a"), 0).await;
    let b = Cluster::start("b", &demo_copy("agg-b"), 0).await;
    // Cluster c lacks one file: its union differs.
    let c_dir = demo_copy("agg-c");
    std::fs::remove_file(c_dir.join("job.yaml")).unwrap();
    let c = Cluster::start("c", &c_dir, 0).await;
    let mut h = hub(
        vec![a.upstream(), b.upstream(), c.upstream()],
        fast(Duration::from_secs(60)),
    )
    .await;

    // List: every cluster's graphs, byte for byte as its own server has them.
    let all = by_identity(
        list_all(
            &mut h.client,
            pb::ListRequest {
                page_size: 7,
                ..Default::default()
            },
        )
        .await,
    );
    let mut expected = BTreeMap::new();
    for cluster in [&a, &b, &c] {
        let own = list_all(&mut cluster.client().await, pb::ListRequest::default()).await;
        assert!(own.iter().all(|w| w.cluster == cluster.name));
        expected.extend(by_identity(own));
    }
    assert_eq!(all.len(), expected.len());
    assert_eq!(all, expected, "the union, told apart by cluster");
    let per_cluster = |c: &str| all.keys().filter(|(k, _)| k == c).count();
    assert_eq!(per_cluster("a"), per_cluster("b"));
    assert_eq!(
        per_cluster("c"),
        per_cluster("a") - 1,
        "c has no Job ml/finetune"
    );
    let uids_a: BTreeSet<&String> = all
        .keys()
        .filter(|(c, _)| c == "a")
        .map(|(_, u)| u)
        .collect();
    let uids_b: BTreeSet<&String> = all
        .keys()
        .filter(|(c, _)| c == "b")
        .map(|(_, u)| u)
        .collect();
    assert_eq!(uids_a, uids_b, "the same uids, kept apart");
    let only_b = list_all(
        &mut h.client,
        pb::ListRequest {
            cluster: "b".into(),
            page_size: 5,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(only_b.len(), per_cluster("b"));
    assert!(only_b.iter().all(|w| w.cluster == "b"));
    let web = list_all(
        &mut h.client,
        pb::ListRequest {
            label_selector: "app=web".into(),
            ..Default::default()
        },
    )
    .await;
    let clusters: Vec<&str> = web.iter().map(|w| w.cluster.as_str()).collect();
    assert_eq!(
        clusters,
        ["a", "b", "c"],
        "label selectors read the relayed labels"
    );

    // Totals over the union, by cluster, and namespaces summed over clusters.
    let by_cluster = h
        .client
        .totals(pb::TotalsRequest {
            group_by: pb::GroupBy::Cluster as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let rows: Vec<(&str, u32)> = by_cluster
        .rows
        .iter()
        .map(|r| (r.key.as_str(), r.workloads))
        .collect();
    let n = |c: &str| u32::try_from(per_cluster(c)).unwrap();
    assert_eq!(rows, [("a", n("a")), ("b", n("b")), ("c", n("c"))]);
    for cluster in [&a, &b] {
        let own = cluster
            .client()
            .await
            .totals(pb::TotalsRequest {
                group_by: pb::GroupBy::Cluster as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let row = by_cluster
            .rows
            .iter()
            .find(|r| r.key == cluster.name)
            .unwrap();
        assert_eq!(row.totals, own.rows[0].totals, "{}", cluster.name);
    }
    let ml = |cluster: &str| pb::TotalsRequest {
        group_by: pb::GroupBy::Namespace as i32,
        namespace: "ml".into(),
        cluster: cluster.into(),
    };
    let fleet = h.client.totals(ml("")).await.unwrap().into_inner().rows;
    let desired = |rows: &[pb::TotalsRow]| {
        let r = &rows[0];
        (r.totals.clone().unwrap().desired.unwrap().gpus, r.workloads)
    };
    let mut sum = (0.0, 0);
    for cluster in [&a, &b, &c] {
        let own = cluster
            .client()
            .await
            .totals(ml(""))
            .await
            .unwrap()
            .into_inner()
            .rows;
        let (gpus, workloads) = desired(&own);
        let relayed = h
            .client
            .totals(ml(&cluster.name))
            .await
            .unwrap()
            .into_inner()
            .rows;
        assert_eq!(desired(&relayed), (gpus, workloads), "{}", cluster.name);
        sum = (sum.0 + gpus, sum.1 + workloads);
    }
    assert!(sum.0 > 0.0);
    let (gpus, workloads) = desired(&fleet);
    assert_eq!(workloads, sum.1);
    assert!((gpus - sum.0).abs() < 1e-6, "namespaces sum over clusters");
    let workloads = h
        .client
        .totals(pb::TotalsRequest {
            group_by: pb::GroupBy::Workload as i32,
            namespace: "ml".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .rows;
    let train: Vec<&str> = workloads
        .iter()
        .filter(|r| r.key == "ml/JobSet/llama-train")
        .map(|r| r.cluster.as_str())
        .collect();
    assert_eq!(train, ["a", "b", "c"], "one row per cluster");

    // Resolve by reference: ambiguous without a cluster, exact with one.
    let err = h
        .client
        .resolve(resolve_ref("JobSet", "ml", "llama-train", ""))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("\"a\", \"b\", \"c\"") && err.message().contains("cluster"),
        "{}",
        err.message()
    );
    let w = h
        .client
        .resolve(resolve_ref("JobSet", "ml", "llama-train", "b"))
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    assert_eq!(w.cluster, "b");
    let uid = w.r#ref.clone().unwrap().uid;
    let by_uid = |cluster: &str| pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            uid: uid.clone(),
            ..Default::default()
        })),
        view: pb::View::Summary as i32,
        cluster: cluster.into(),
    };
    assert_eq!(
        h.client.resolve(by_uid("")).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let summary = h.client.resolve(by_uid("c")).await.unwrap().into_inner();
    assert_eq!(summary.workload.unwrap().cluster, "c");
    let err = h
        .client
        .resolve(resolve_ref("Job", "ml", "finetune", "c"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
    // Only two clusters hold it: still ambiguous without one.
    let err = h
        .client
        .resolve(resolve_ref("Job", "ml", "finetune", ""))
        .await
        .unwrap_err();
    assert!(err.message().contains("\"a\", \"b\""), "{}", err.message());

    // Resolve by pod: forwarded to the upstream that holds it.
    let pod = |cluster: &str| pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Pod(pb::ObjectRef {
            namespace: "ml".into(),
            name: "llama-train-workers-1-0-x7k2p".into(),
            ..Default::default()
        })),
        view: pb::View::Summary as i32,
        cluster: cluster.into(),
    };
    let direct = c
        .client()
        .await
        .resolve(pod(""))
        .await
        .unwrap()
        .into_inner();
    let relayed = h.client.resolve(pod("c")).await.unwrap().into_inner();
    assert_eq!(relayed.pod, direct.pod);
    assert_eq!(relayed.workload.unwrap().cluster, "c");
    assert_eq!(
        h.client.resolve(pod("")).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let err = h.client.resolve(pod("nowhere")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // Inline: forwarded with a cluster, resolved by the aggregator without one.
    let job = serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "x", "uid": "j1"},
        "spec": {"parallelism": 2, "template": {"spec": {"containers": [{"name": "c",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}});
    for cluster in ["a", ""] {
        let inline = pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
                object_json: job.to_string(),
                pods_json: vec![],
            })),
            view: 0,
            cluster: cluster.into(),
        };
        let w = h.client.resolve(inline).await.unwrap().into_inner();
        assert_eq!(
            w.workload.unwrap().totals.unwrap().desired.unwrap().gpus,
            2.0
        );
    }

    // Watch: the union, then an edit in one upstream arrives with its cluster.
    let mut stream = h
        .client
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    let (mut view, _) = snapshot(&mut stream).await;
    assert_eq!(view, all);
    let path = b.dir.join("deployment.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("replicas: 3", "replicas: 5", 1)).unwrap();
    let web_of = |v: &BTreeMap<(String, String), pb::Workload>, cluster: &str| {
        v.values()
            .find(|w| w.cluster == cluster && w.r#ref.as_ref().unwrap().name == "web")
            .and_then(|w| w.pods)
            .unwrap()
            .desired
    };
    assert_eq!(web_of(&view, "b"), 3);
    let events = read_until(&mut stream, &mut view, "edit in b", |v| web_of(v, "b") == 5).await;
    let last = events.last().unwrap();
    assert_eq!(last.r#type, pb::EventType::Modified as i32);
    assert_eq!(event_name(last), ("b".to_owned(), "web".to_owned()));
    assert!(
        events.iter().all(|e| event_name(e).0 == "b"),
        "nothing else changed"
    );
    let web_a = h
        .client
        .resolve(resolve_ref("Deployment", "serving", "web", "a"))
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    assert_eq!(web_a.pods.unwrap().desired, 3, "a's web is untouched");

    // Metrics: per-workload series carry the cluster, upstreams their state.
    let text = h.shared.metrics.encode();
    assert!(
        text.contains("kartograf_workload_gpus{cluster=\"b\",namespace=\"ml\",kind=\"JobSet\",name=\"llama-train\""),
        "{}",
        text.lines().filter(|l| l.contains("llama-train")).take(3).collect::<Vec<_>>().join("\n")
    );
    assert!(text.contains("kartograf_upstream_stale{cluster=\"a\"} 0"));
    assert!(text.contains(&format!(
        "kartograf_upstream_workloads{{cluster=\"c\"}} {}",
        n("c")
    )));
    assert!(
        text.contains("kartograf_pod_workload_info{cluster=\"a\",namespace=\"ml\",pod=\"llama-train-workers-1-0-x7k2p\""),
        "the pod join is read from the relayed graphs"
    );
    a.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_upstream_goes_stale_then_deleted_and_comes_back_without_a_reset() {
    let mut a = Cluster::start("a", &demo_copy("loss-a"), 0).await;
    let mut b = Cluster::start("b", &demo_copy("loss-b"), 0).await;
    // Long enough for a restart under a loaded test machine; b waits it out.
    let grace = Duration::from_secs(10);
    let mut h = hub(vec![a.upstream(), b.upstream()], fast(grace)).await;
    let mut stream = h
        .client
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    let (mut view, start) = snapshot(&mut stream).await;
    let at_start = view.clone();
    let n = of_cluster(&view, "a").len();
    assert!(n > 20);

    // a goes away, is edited while away, and comes back within the grace period.
    a.kill().await;
    read_until(&mut stream, &mut view, "a stale", |v| {
        of_cluster(v, "a").iter().all(stale)
    })
    .await;
    assert_eq!(of_cluster(&view, "a").len(), n, "kept while stale");
    assert!(of_cluster(&view, "b").iter().all(|w| !stale(w)));
    let held = h
        .client
        .resolve(resolve_ref("JobSet", "ml", "llama-train", "a"))
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    let diagnostic = held
        .diagnostics
        .iter()
        .find(|d| d.code == aggregate::UPSTREAM_STALE)
        .expect("a stale graph says so");
    assert!(
        diagnostic.message.contains("upstream a"),
        "{}",
        diagnostic.message
    );
    assert!(
        h.shared
            .metrics
            .encode()
            .contains("kartograf_upstream_stale{cluster=\"a\"} 1")
    );
    let path = a.dir.join("deployment.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("replicas: 3", "replicas: 7", 1)).unwrap();
    let a = a.restart().await;
    let events = read_until(&mut stream, &mut view, "a back", |v| {
        of_cluster(v, "a").iter().all(|w| !stale(w))
    })
    .await;
    let others: Vec<(i32, (String, String))> = events
        .iter()
        .filter(|e| e.r#type != pb::EventType::Modified as i32)
        .map(|e| (e.r#type, event_name(e)))
        .collect();
    assert!(
        others.is_empty(),
        "back within the grace period: modifications only, not {others:?}"
    );
    assert_eq!(of_cluster(&view, "a").len(), n);
    let web = view
        .values()
        .find(|w| w.cluster == "a" && w.r#ref.as_ref().unwrap().name == "web")
        .unwrap();
    assert_eq!(
        web.pods.unwrap().desired,
        7,
        "the edit made while away arrived"
    );
    assert!(
        h.shared
            .metrics
            .encode()
            .contains("kartograf_upstream_stale{cluster=\"a\"} 0")
    );

    // b goes away for longer than the grace period: stale, then deleted.
    b.kill().await;
    read_until(&mut stream, &mut view, "b stale", |v| {
        of_cluster(v, "b").iter().all(stale)
    })
    .await;
    let events = read_until(&mut stream, &mut view, "b deleted", |v| {
        of_cluster(v, "b").is_empty()
    })
    .await;
    assert_eq!(
        events
            .iter()
            .filter(|e| e.r#type == pb::EventType::Deleted as i32)
            .count(),
        n
    );
    assert_eq!(
        h.client
            .resolve(resolve_ref("JobSet", "ml", "llama-train", "b"))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert!(
        h.shared
            .metrics
            .encode()
            .contains("kartograf_upstream_workloads{cluster=\"b\"} 0")
    );
    // It comes back: its workloads return as ADDED (still no RESET).
    let b = b.restart().await;
    let events = read_until(&mut stream, &mut view, "b back", |v| {
        of_cluster(v, "b").len() == n
    })
    .await;
    assert!(
        events
            .iter()
            .all(|e| e.r#type == pb::EventType::Added as i32)
    );
    assert!(of_cluster(&view, "b").iter().all(|w| !stale(w)));

    // The subscriber's view is the aggregator's state, and equals what the upstreams hold.
    let listed = by_identity(list_all(&mut h.client, pb::ListRequest::default()).await);
    assert_eq!(view, listed);
    let mut expected = by_identity(list_all(&mut a.client().await, Default::default()).await);
    expected.extend(by_identity(
        list_all(&mut b.client().await, Default::default()).await,
    ));
    assert_eq!(listed, expected);

    // A subscriber that resumes from the first snapshot's revision misses nothing: the
    // changes since then bring it to the same state, then SYNCED.
    let mut resumed = h
        .client
        .watch(pb::WatchRequest {
            since_revision: start,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut replayed = at_start;
    loop {
        let e = next_event(&mut resumed, 20).await;
        if e.r#type == pb::EventType::Synced as i32 {
            break;
        }
        apply(&mut replayed, &e);
    }
    assert_eq!(replayed, listed);
    // And a resume inside a cluster filter sees only that cluster's changes.
    let mut only_b = h
        .client
        .watch(pb::WatchRequest {
            since_revision: start,
            cluster: "b".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    loop {
        let e = next_event(&mut only_b, 20).await;
        if e.r#type == pb::EventType::Synced as i32 {
            break;
        }
        assert_eq!(event_name(&e).0, "b");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_over_tls_with_tokens_from_a_reloaded_file() {
    let pki = super::hardening::pki();
    let tokens_file = pki.dir.join("tokens");
    std::fs::write(&tokens_file, "upstream-token-0123456789 hub resolver\n").unwrap();
    let tokens = Arc::new(server::Tokens::load(&tokens_file).unwrap());
    let mut a = Cluster::start_with(
        "a",
        &demo_copy("tls-a"),
        0,
        None,
        Some(pki.server(true)),
        Some(tokens),
    )
    .await;
    let b = Cluster::start("b", &demo_copy("tls-b"), 0).await;
    std::fs::write(pki.dir.join("client.pem"), &pki.client_cert).unwrap();
    std::fs::write(pki.dir.join("client.key"), &pki.client_key).unwrap();
    std::fs::write(pki.dir.join("hub.token"), "upstream-token-0123456789\n").unwrap();
    let file = pki.dir.join("upstreams.yaml");
    let entry_a = format!(
        "  - name: a\n    url: https://localhost:{}\n    caFile: {}\n    certFile: {}\n    keyFile: {}\n    tokenFile: {}\n",
        a.addr.port(),
        pki.dir.join("ca.pem").display(),
        pki.dir.join("client.pem").display(),
        pki.dir.join("client.key").display(),
        pki.dir.join("hub.token").display(),
    );
    std::fs::write(&file, format!("upstreams:\n{entry_a}")).unwrap();
    let loaded = aggregate::config::load(&file, &[]).unwrap();
    let h = hub(loaded.upstreams, fast(Duration::from_secs(60))).await;
    tokio::spawn(aggregate::config::reload(
        h.aggregator.clone(),
        file.clone(),
        Vec::new(),
        loaded.bytes,
        Duration::from_millis(100),
    ));
    let count = |cluster: &str| {
        h.aggregator
            .board()
            .entries()
            .0
            .iter()
            .filter(|w| w.graph.cluster == cluster)
            .count()
    };
    let n = count("a");
    assert!(n > 20, "a's workloads came over mutual TLS with a token");
    // b joins through the file, a broken file changes nothing, removing a deletes its
    // workloads.
    std::fs::write(
        &file,
        format!("upstreams:\n{entry_a}  - name: b\n    url: {}\n", b.url()),
    )
    .unwrap();
    wait(|| count("b") == n, "b joined").await;
    // New settings for b (another spelling of its address): reconnected and reconciled, its
    // workloads kept throughout.
    let revision = h.aggregator.board().revision();
    let localhost = b.url().replace("127.0.0.1", "localhost");
    std::fs::write(
        &file,
        format!("upstreams:\n{entry_a}  - name: b\n    url: {localhost}\n"),
    )
    .unwrap();
    wait(
        || {
            h.aggregator
                .upstream("b")
                .is_some_and(|u| u.config.url == localhost)
        },
        "b's new settings",
    )
    .await;
    wait(
        || h.aggregator.upstream("b").is_some_and(|u| u.connected()),
        "b reconnected",
    )
    .await;
    // Its snapshot arrives right after the stream opens.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count("b"), n);
    let (changes, _, _) = h
        .aggregator
        .board()
        .changes_since_counted(revision, &Default::default())
        .unwrap();
    assert!(
        changes.iter().all(|c| c.kind != pb::EventType::Deleted),
        "nothing deleted by a reconnection"
    );
    std::fs::write(&file, "upstreams: [nonsense").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        (count("a"), count("b")),
        (n, n),
        "a broken file keeps the last good"
    );
    std::fs::write(
        &file,
        format!("upstreams:\n  - name: b\n    url: {}\n", b.url()),
    )
    .unwrap();
    wait(|| count("a") == 0, "a removed").await;
    assert_eq!(count("b"), n);
    assert!(h.aggregator.upstream("a").is_none());
    a.kill().await;
}

async fn wait(done: impl Fn() -> bool, what: &str) {
    for _ in 0..300 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within 15 s");
}

/// The demo cluster's objects of two namespaces, as one manifest directory.
fn two_namespaces(namespaces: [&str; 2]) -> PathBuf {
    let dir = temp_dir("shards");
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let mut items = Vec::new();
    for entry in std::fs::read_dir(&demo).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for doc in kartograf::manifest::parse_documents(&text).unwrap() {
            if namespaces.contains(&doc["metadata"]["namespace"].as_str().unwrap_or_default()) {
                items.push(doc);
            }
        }
    }
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(dir.join("cluster.json"), list.to_string()).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespace_shards_behind_an_aggregator_equal_one_unsharded_server() {
    let dir = two_namespaces(["ml", "serving"]);
    let whole = Cluster::start("prod", &dir, 0).await;
    let ml = Cluster::start_with("prod", &dir, 0, Some("ml".into()), None, None).await;
    let serving = Cluster::start_with("prod", &dir, 0, Some("serving".into()), None, None).await;
    // Each shard may speak for cluster prod besides its own name.
    let shard = |c: &Cluster, name: &str| UpstreamConfig {
        clusters: vec!["prod".into()],
        ..UpstreamConfig::new(name, &c.url())
    };
    let mut h = hub(
        vec![shard(&ml, "prod-ml"), shard(&serving, "prod-serving")],
        fast(Duration::from_secs(60)),
    )
    .await;
    let unsharded = by_identity(list_all(&mut whole.client().await, Default::default()).await);
    let namespaces: BTreeSet<String> = unsharded
        .values()
        .map(|w| w.r#ref.clone().unwrap().namespace)
        .collect();
    assert_eq!(namespaces, BTreeSet::from(["ml".into(), "serving".into()]));
    // Each shard holds only its namespace.
    let of_ml = list_all(&mut ml.client().await, Default::default()).await;
    assert!(
        of_ml
            .iter()
            .all(|w| w.r#ref.clone().unwrap().namespace == "ml")
    );
    assert!(!of_ml.is_empty());
    // Put back together: exactly the unsharded server's graphs (full view, every field).
    let merged = by_identity(list_all(&mut h.client, Default::default()).await);
    assert_eq!(merged.len(), unsharded.len());
    assert_eq!(merged, unsharded);
    // Totals agree too, and both shards' graphs name the cluster, not the shard.
    let totals = |key: pb::GroupBy| pb::TotalsRequest {
        group_by: key as i32,
        ..Default::default()
    };
    for key in [
        pb::GroupBy::Namespace,
        pb::GroupBy::Kind,
        pb::GroupBy::Cluster,
    ] {
        let ours = h
            .client
            .totals(totals(key))
            .await
            .unwrap()
            .into_inner()
            .rows;
        let theirs = whole
            .client()
            .await
            .totals(totals(key))
            .await
            .unwrap()
            .into_inner()
            .rows;
        assert_eq!(ours, theirs, "{key:?}");
    }
    // A pod is resolved by the shard that holds it.
    let pod = pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Pod(pb::ObjectRef {
            namespace: "ml".into(),
            name: "llama-train-workers-1-0-x7k2p".into(),
            ..Default::default()
        })),
        view: 0,
        cluster: String::new(),
    };
    let relayed = h.client.resolve(pod.clone()).await.unwrap().into_inner();
    let direct = whole
        .client()
        .await
        .resolve(pod)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(relayed.pod, direct.pod);
    let mut w = relayed.workload.unwrap();
    w.revision = 0;
    let mut d = direct.workload.unwrap();
    d.revision = 0;
    assert_eq!(w, d);
}

/// Runs the CLI against `server`; returns (exit code, stdout).
fn cli(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args(args)
        .env_remove("KARTOGRAF_CLUSTER")
        .env_remove("KARTOGRAF_TOKEN")
        .output()
        .expect("run kartograf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// A `kartograf serve` process, killed when dropped.
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(args: &[&str]) -> (Process, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .arg("serve")
        .args(args)
        .args(["--listen", &listen, "--admin-listen", "127.0.0.1:0"])
        .env_remove("KARTOGRAF_CLUSTER_NAME")
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start serve");
    (Process(child), format!("http://{listen}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_speaks_to_an_aggregator_of_kartograf_processes() {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let demo = demo.to_string_lossy().to_string();
    let (_east, east) = serve(&["--manifests", &demo, "--cluster-name", "east"]);
    let (_west, west) = serve(&["--manifests", &demo, "--cluster-name", "west"]);
    let (_hub, hub) = serve(&[
        "--upstream",
        &format!("east={east}"),
        "--upstream",
        &format!("west={west}"),
        "--upstream-grace",
        "30s",
    ]);
    let mut last = (0, String::new());
    for _ in 0..300 {
        last = cli(&["get", "jobset", "-n", "ml", "--server", &hub]);
        if last.0 == 0 && last.1.contains("west") && last.1.contains("east") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, text) = last;
    assert_eq!(code, 0, "{text}");
    let header = text.lines().next().unwrap_or_default();
    assert!(header.starts_with("CLUSTER"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("llama-train ")).count(),
        2,
        "{text}"
    );
    // One cluster: no CLUSTER column, as against a server of one cluster.
    let (code, text) = cli(&[
        "get",
        "jobset",
        "-n",
        "ml",
        "--server",
        &hub,
        "--cluster",
        "east",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("NAMESPACE"), "{text}");
    let (code, text) = cli(&["get", "jobset", "-n", "ml", "--server", &east]);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("NAMESPACE"), "{text}");
    let (code, text) = cli(&["totals", "--by", "cluster", "--server", &hub]);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("CLUSTER"), "{text}");
    assert!(text.contains("east") && text.contains("west"), "{text}");
    let (code, text) = cli(&["describe", "jobset/llama-train", "--server", &hub]);
    assert_ne!(code, 0, "ambiguous without a cluster: {text}");
    assert!(
        text.contains("--cluster") || text.contains("cluster"),
        "{text}"
    );
    let (code, text) = cli(&[
        "describe",
        "jobset/llama-train",
        "--server",
        &hub,
        "--cluster",
        "west",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.lines()
            .next()
            .unwrap_or_default()
            .contains("cluster: west"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_waits_for_every_upstream_unless_serving_partial() {
    let a = Cluster::start("a", &demo_copy("ready-a"), 0).await;
    // Nothing listens on this port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gone = UpstreamConfig::new("gone", &format!("http://{closed}"));
    let strict = Aggregator::new(Catalog::default(), fast(Duration::from_secs(60)));
    strict.set_upstreams(vec![a.upstream(), gone.clone()]);
    wait(|| strict.board().len() > 20, "a's workloads").await;
    assert!(!strict.synced(), "one upstream never synced");
    assert_eq!(strict.pending(), ["upstream gone"]);
    let shared = Shared::new(
        strict.clone(),
        Arc::new(LoadReport::default()),
        tokio::sync::watch::channel(false).1,
    );
    let ready = kartograf::admin::route(&shared, "/readyz");
    assert_eq!(ready.status(), 503);
    let partial = Aggregator::new(
        Catalog::default(),
        aggregate::Settings {
            serve_partial: true,
            ..fast(Duration::from_secs(60))
        },
    );
    partial.set_upstreams(vec![a.upstream(), gone]);
    assert!(partial.synced(), "--serve-partial: ready at once");
    wait(|| partial.board().len() > 20, "a's workloads").await;
    let text = Shared::new(
        partial.clone(),
        Arc::new(LoadReport::default()),
        tokio::sync::watch::channel(false).1,
    )
    .metrics
    .encode();
    assert!(
        text.contains("kartograf_upstream_stale{cluster=\"gone\"} 1"),
        "{text}"
    );
    assert!(text.contains("kartograf_upstream_synced{cluster=\"gone\"} 0"));
    assert!(text.contains("kartograf_upstream_synced{cluster=\"a\"} 1"));
}
