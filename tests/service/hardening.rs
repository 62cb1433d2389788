//! Hardening, security and abuse: TLS and mTLS, bearer tokens, load shedding, tiny deadlines,
//! oversize messages, cancelled streams, idle connections, an HTTP/2 reset flood, and a
//! graceful shutdown with 1,000 open Watch streams.

use kartograf::definition::{Catalog, LoadReport};
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::definitions_client::DefinitionsClient;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use kartograf::server::{self, Settings, Shared, TlsFiles, Tokens};
use kartograf::source::manifests;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

/// An index holding the demo cluster, synced.
pub(crate) fn demo_index() -> Arc<Index> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let (docs, errors) = manifests::read_once(&dir);
    assert!(errors.is_empty(), "{errors:?}");
    let index = Index::new(Catalog::embedded().expect("catalog"), &[manifests::SOURCE]);
    index.batch().write(Write::Reset {
        source: manifests::SOURCE.into(),
        items: docs.into_iter().map(Ok).collect(),
    });
    index.batch().mark_synced(manifests::SOURCE);
    Arc::new(index)
}

struct Server {
    addr: SocketAddr,
    index: Arc<Index>,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), Box<dyn std::error::Error + Send + Sync>>>,
}

async fn serve(settings: Settings) -> Server {
    let index = demo_index();
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = Shared::new(index.clone(), Arc::new(LoadReport::default()), rx);
    let task = tokio::spawn(server::serve(
        listener,
        shared,
        Settings {
            listen: addr,
            ..settings
        },
    ));
    Server {
        addr,
        index,
        shutdown,
        task,
    }
}

fn plain(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

fn known_workload() -> pb::ResolveRequest {
    pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Workload(pb::ObjectRef {
            kind: "JobSet".into(),
            namespace: "ml".into(),
            name: "llama-train-b".into(),
            ..Default::default()
        })),
        view: 0,
        cluster: String::new(),
    }
}

/// An inline request whose object is about `bytes` long (a big annotation).
fn inline_of_size(bytes: usize) -> pb::ResolveRequest {
    let object = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "big", "namespace": "x", "uid": "u-big",
                     "annotations": {"filler": "x".repeat(bytes)}},
        "spec": {"parallelism": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}
    });
    pb::ResolveRequest {
        target: Some(pb::resolve_request::Target::Inline(pb::InlineWorkload {
            object_json: object.to_string(),
            pods_json: vec![],
        })),
        view: 0,
        cluster: String::new(),
    }
}

async fn health_status(channel: Channel, service: &str) -> Result<i32, tonic::Status> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|r| r.into_inner().status)
}

/// Asserts the server still answers a normal Resolve on a fresh connection.
async fn still_serving(addr: SocketAddr) {
    let mut client = WorkloadResolverClient::new(plain(addr));
    let r = tokio::time::timeout(Duration::from_secs(10), client.resolve(known_workload()))
        .await
        .expect("answer within 10 s");
    r.expect("Resolve still works");
}

fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "kartograf-hard-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files.
pub(crate) struct Pki {
    pub(crate) dir: PathBuf,
    ca: String,
    pub(crate) client_cert: String,
    pub(crate) client_key: String,
}

pub(crate) fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let dir = temp_dir("pki");
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
    let (client_cert, client_key) = leaf(vec!["scheduler.example".into()]);
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), &server_cert).unwrap();
    std::fs::write(dir.join("server.key"), &server_key).unwrap();
    Pki {
        dir,
        ca: ca.pem(),
        client_cert,
        client_key,
    }
}

impl Pki {
    pub(crate) fn server(&self, mutual: bool) -> TlsFiles {
        TlsFiles {
            cert: self.dir.join("server.pem"),
            key: self.dir.join("server.key"),
            client_ca: mutual.then(|| self.dir.join("ca.pem")),
        }
    }

    async fn client(&self, addr: SocketAddr, with_cert: bool) -> Result<Channel, String> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .domain_name("localhost");
        if with_cert {
            tls = tls.identity(Identity::from_pem(&self.client_cert, &self.client_key));
        }
        Endpoint::from_shared(format!("https://localhost:{}", addr.port()))
            .unwrap()
            .tls_config(tls)
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("{e:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_encrypted_and_refuses_plaintext() {
    let pki = pki();
    let s = serve(Settings {
        tls: Some(pki.server(false)),
        ..Settings::default()
    })
    .await;
    let channel = pki.client(s.addr, false).await.expect("TLS handshake");
    let mut client = WorkloadResolverClient::new(channel);
    let w = client.resolve(known_workload()).await.expect("over TLS");
    assert!(w.into_inner().workload.is_some());
    WorkloadResolverClient::new(plain(s.addr))
        .resolve(known_workload())
        .await
        .expect_err("plaintext refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_requires_a_client_certificate_from_the_ca() {
    let pki = pki();
    let s = serve(Settings {
        tls: Some(pki.server(true)),
        ..Settings::default()
    })
    .await;
    let with = pki.client(s.addr, true).await.expect("mTLS handshake");
    WorkloadResolverClient::new(with)
        .resolve(known_workload())
        .await
        .expect("client with certificate served");
    // Without a certificate the handshake (or the first call on it) fails.
    let refused = match pki.client(s.addr, false).await {
        Err(_) => true,
        Ok(channel) => WorkloadResolverClient::new(channel)
            .resolve(known_workload())
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate must be refused");
}

fn with_token(
    channel: Channel,
    token: &str,
) -> tonic::service::interceptor::InterceptedService<
    Channel,
    impl tonic::service::Interceptor + Clone,
> {
    let value: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
    tonic::service::interceptor::InterceptedService::new(
        channel,
        move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", value.clone());
            Ok(r)
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_authenticate_authorize_and_reload() {
    let dir = temp_dir("tokens");
    let file = dir.join("tokens");
    let sched = "sched-0123456789abcdef";
    let admin = "admin-0123456789abcdef";
    std::fs::write(
        &file,
        format!("{sched} scheduler resolver\n{admin} platform *\n"),
    )
    .unwrap();
    let tokens = Arc::new(Tokens::load(&file).expect("token file"));
    let s = serve(Settings {
        tokens: Some(tokens.clone()),
        ..Settings::default()
    })
    .await;
    let channel = plain(s.addr);

    let missing = WorkloadResolverClient::new(channel.clone())
        .resolve(known_workload())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::Unauthenticated);
    assert!(
        missing.message().contains("Bearer"),
        "{}",
        missing.message()
    );
    let wrong = WorkloadResolverClient::new(with_token(channel.clone(), "nope-0123456789abcdef"))
        .resolve(known_workload())
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Unauthenticated);

    WorkloadResolverClient::new(with_token(channel.clone(), sched))
        .resolve(known_workload())
        .await
        .expect("scheduler token may resolve");
    let denied = DefinitionsClient::new(with_token(channel.clone(), sched))
        .list_definitions(pb::ListDefinitionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("scheduler") && !denied.message().contains(sched));
    DefinitionsClient::new(with_token(channel.clone(), admin))
        .list_definitions(pb::ListDefinitionsRequest::default())
        .await
        .expect("platform token may list definitions");
    // Probes need no token.
    assert_eq!(
        health_status(channel.clone(), "")
            .await
            .expect("health open"),
        ServingStatus::Serving as i32
    );

    // Revoke the scheduler token, add another: the reload takes effect on the next call.
    let fresh = "fresh-0123456789abcdef";
    std::fs::write(
        &file,
        format!("{fresh} scheduler resolver\n{admin} platform *\n"),
    )
    .unwrap();
    assert!(tokens.reload());
    let revoked = WorkloadResolverClient::new(with_token(channel.clone(), sched))
        .resolve(known_workload())
        .await
        .unwrap_err();
    assert_eq!(revoked.code(), Code::Unauthenticated);
    WorkloadResolverClient::new(with_token(channel.clone(), fresh))
        .resolve(known_workload())
        .await
        .expect("new token accepted after reload");
    // A broken file keeps the last good tokens.
    std::fs::write(&file, "short x\n").unwrap();
    assert!(!tokens.reload());
    WorkloadResolverClient::new(with_token(channel, fresh))
        .resolve(known_workload())
        .await
        .expect("last good tokens kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_shed_with_resource_exhausted_and_health_keeps_answering() {
    let s = serve(Settings {
        concurrency_limit: 1,
        ..Settings::default()
    })
    .await;
    let heavy = inline_of_size(3 << 20);
    let mut shed = 0;
    for _round in 0..5 {
        let mut calls = Vec::new();
        for _ in 0..48 {
            // Several connections so requests really arrive together.
            let channel = plain(s.addr);
            let request = heavy.clone();
            calls.push(tokio::spawn(async move {
                WorkloadResolverClient::new(channel)
                    .max_encoding_message_size(8 << 20)
                    .resolve(request)
                    .await
            }));
        }
        let check = health_status(plain(s.addr), "").await;
        assert_eq!(check.expect("health answers under load"), 1);
        for c in calls {
            match c.await.unwrap() {
                Ok(_) => {}
                Err(e) if e.code() == Code::ResourceExhausted => {
                    assert!(e.message().contains("concurrent requests"), "{e:?}");
                    shed += 1;
                }
                Err(e) => panic!("unexpected status under overload: {e:?}"),
            }
        }
        if shed > 0 {
            break;
        }
    }
    assert!(
        shed > 0,
        "48 concurrent 3 MiB requests against a limit of 1 shed nothing"
    );
    still_serving(s.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_deadlines_and_oversize_messages_fail_cleanly() {
    let s = serve(Settings::default()).await;
    let channel = plain(s.addr);
    let mut client =
        WorkloadResolverClient::new(channel.clone()).max_encoding_message_size(16 << 20);
    // 1 ms to parse and resolve a 3 MiB object.
    let mut request = tonic::Request::new(inline_of_size(3 << 20));
    request.set_timeout(Duration::from_millis(1));
    let err = client.resolve(request).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{err:?}"
    );
    // 5 MiB is over the 4 MiB default (tonic answers OUT_OF_RANGE for an oversize message).
    let err = client.resolve(inline_of_size(5 << 20)).await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    assert!(
        err.message().contains("message length too large"),
        "{err:?}"
    );
    still_serving(s.addr).await;
    // A configured smaller limit applies to every request.
    let small = serve(Settings {
        max_message_bytes: 64 * 1024,
        ..Settings::default()
    })
    .await;
    let err = WorkloadResolverClient::new(plain(small.addr))
        .resolve(inline_of_size(100 * 1024))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_watch_releases_its_subscriber() {
    let s = serve(Settings::default()).await;
    let before = s.index.board().subscribers();
    let mut client = WorkloadResolverClient::new(plain(s.addr));
    let mut streams = Vec::new();
    for _ in 0..20 {
        let mut stream = client
            .watch(pb::WatchRequest::default())
            .await
            .unwrap()
            .into_inner();
        stream.message().await.unwrap().expect("first event");
        streams.push(stream);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.index.board().subscribers() < before + 20 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.index.board().subscribers(), before + 20);
    // Cancel mid-stream (the snapshot is still being sent).
    drop(streams);
    while s.index.board().subscribers() > before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        s.index.board().subscribers(),
        before,
        "cancelled streams leak subscribers"
    );
    still_serving(s.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_do_not_starve_real_clients() {
    use tokio::io::AsyncWriteExt;
    let s = serve(Settings::default()).await;
    let mut idle = Vec::new();
    for i in 0..2000 {
        let mut c = tokio::net::TcpStream::connect(s.addr)
            .await
            .expect("connect");
        if i % 2 == 0 {
            // Half send the HTTP/2 preface and then nothing.
            let _ = c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
        }
        idle.push(c);
    }
    still_serving(s.addr).await;
    drop(idle);
    still_serving(s.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_rapid_reset_flood_does_not_stop_the_server() {
    let s = serve(Settings::default()).await;
    let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let (mut h2, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let conn = tokio::spawn(connection);
    let mut sent = 0u32;
    let mut refused = false;
    for _ in 0..20_000 {
        let request = tonic::codegen::http::Request::builder()
            .method("POST")
            .uri(format!(
                "http://{}/kartograf.v1.WorkloadResolver/Resolve",
                s.addr
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let ready = match tokio::time::timeout(Duration::from_secs(5), h2.clone().ready()).await {
            Ok(Ok(r)) => r,
            _ => {
                refused = true;
                break;
            }
        };
        h2 = ready;
        match h2.send_request(request, false) {
            Ok((_response, mut body)) => {
                body.send_reset(h2::Reason::CANCEL);
                sent += 1;
            }
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    // The server cuts the flooding connection off (h2's reset-stream limits) and keeps
    // serving everyone else.
    assert!(
        refused,
        "the server absorbed {sent} reset streams without closing the connection"
    );
    still_serving(s.addr).await;
    conn.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_thousand_watch_streams_ends_them_and_exits_within_10s() {
    let s = serve(Settings::default()).await;
    let mut streams = Vec::new();
    let channels: Vec<Channel> = (0..4).map(|_| plain(s.addr)).collect();
    for i in 0..1000 {
        let mut client = WorkloadResolverClient::new(channels[i % 4].clone());
        let mut stream = client
            .watch(pb::WatchRequest {
                view: pb::View::Summary as i32,
                ..Default::default()
            })
            .await
            .expect("watch")
            .into_inner();
        stream.message().await.unwrap().expect("first event");
        streams.push(stream);
    }
    let health = plain(s.addr);
    assert_eq!(health_status(health.clone(), "").await.unwrap(), 1);
    let started = Instant::now();
    s.shutdown.send(true).unwrap();
    // Health flips at once (well before the streams are closed).
    let mut not_serving = false;
    for _ in 0..50 {
        match health_status(health.clone(), "").await {
            Ok(status) if status == ServingStatus::NotServing as i32 => {
                not_serving = true;
                break;
            }
            Err(_) => break,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    assert!(
        not_serving,
        "health did not report NOT_SERVING after shutdown"
    );
    // Every stream ends with UNAVAILABLE (after draining what was already sent).
    let ends = streams.into_iter().map(|mut stream| async move {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return Code::Ok,
                Err(e) => return e.code(),
            }
        }
    });
    let codes = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(ends))
        .await
        .expect("streams end within 10 s");
    assert!(codes.iter().all(|c| *c == Code::Unavailable), "{codes:?}");
    tokio::time::timeout(Duration::from_secs(10), s.task)
        .await
        .expect("server exits within 10 s")
        .unwrap()
        .expect("clean exit");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Runs the CLI and returns (exit code, stdout + stderr).
fn cli(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args(args)
        .env_remove("KARTOGRAF_TOKEN")
        .output()
        .expect("run kartograf");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_serves_and_calls_with_tls_and_a_token() {
    let pki = pki();
    let tokens = pki.dir.join("tokens");
    std::fs::write(&tokens, "cli-token-0123456789 operator resolver\n").unwrap();
    let port = crate::ports::free_port();
    let listen = format!("127.0.0.1:{port}");
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let path = |p: &PathBuf| p.to_string_lossy().to_string();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args(["serve", "--manifests", &path(&demo), "--listen", &listen])
        .args(["--tls-cert", &path(&pki.dir.join("server.pem"))])
        .args(["--tls-key", &path(&pki.dir.join("server.key"))])
        .args(["--auth-tokens", &path(&tokens)])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start serve");
    let server = format!("https://localhost:{port}");
    let ca = path(&pki.dir.join("ca.pem"));
    let mut last = (0, String::new());
    for _ in 0..100 {
        last = cli(&[
            "get",
            "--server",
            &server,
            "--ca-cert",
            &ca,
            "--token",
            "cli-token-0123456789",
        ]);
        if last.0 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last.0, 0, "{}", last.1);
    assert!(last.1.contains("llama-train-b"), "{}", last.1);
    let (code, text) = cli(&["get", "--server", &server, "--ca-cert", &ca]);
    assert_ne!(code, 0);
    assert!(text.contains("authorization"), "{text}");
    let _ = child.kill();
    let _ = child.wait();
}
