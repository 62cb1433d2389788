//! End to end: the real `kartograf` binary as a process, measured from the OS (`/proc`) and
//! from a gRPC client, against
//!
//! - (a) a manifest directory written by the synthetic generator (`benches/synth`), and
//! - (b) the fake Kubernetes API server (`tests/service/fake_apiserver.rs`) serving the same
//!   cluster from a separate process (this bench binary re-executed with
//!   `KARTOGRAF_E2E_FAKE_APISERVER` set), reached through a kubeconfig (`KUBECONFIG`).
//!
//! Per source and size: time from process start to health `SERVING`; RSS 30 s after that,
//! minus the RSS of the same binary serving an empty source, per pod; idle CPU (utime+stime,
//! % of one core) and wakeups (context switches) over the idle window; CPU and RSS under
//! 2,000 pod status changes per second (Ready flips: through the fake's watch in (b),
//! through rewritten manifest files in (a)); `Resolve` latency at 200 calls/s of random
//! workloads during a catalog reload (a `--definitions` file overriding the JobSet
//! definition, then a comment-only edit of it) and, in (b), during a full relist of every
//! pod (`410 Gone` on the pod watch) and while `/metrics` is scraped back to back; and
//! (issue #11) health `Check`, admin `/livez` and
//! `Resolve` of an unaffected workload while 2 × cores hostile `ValidateDefinition` calls
//! run, against the same probes without them; and (issue #32) the web view's requests
//! (`/ui/api/…`: overview, workload pages filtered, sorted and paged, one workload's graph,
//! definitions) one after the other, p99 per request kind.
//!
//! Run: `cargo bench --bench e2e` (options: `-- --pods 10000,100000 --settle 30 --idle 60
//! --events 2000 --event-secs 10 --window 5 --rate 200 --hostile-secs 10 --ui-rounds 200 --sources
//! manifests,kube --phases idle,ui,events,reload,scrape,relist,hostile`). Progress goes to stderr, the results table to stdout. Without
//! `--bench` (as `cargo test --benches` runs it) it does a short smoke run on 1,000 pods
//! that fails on any error but judges no goal. `KARTOGRAF_E2E_WRITE_MANIFESTS=PODS:DIR` only writes the manifest directory
//! of that size (for profiling by hand). `KARTOGRAF_E2E_PERF=DIR` records every
//! kartograf process with `perf record` into DIR (profiling only: perf's own cost then
//! shows in the figures).

#[path = "common/args.rs"]
#[allow(dead_code)]
mod args;

#[path = "synth/mod.rs"]
mod synth;

#[path = "../tests/service/fake_apiserver.rs"]
#[allow(dead_code)]
mod fake_apiserver;

#[path = "../tests/common/bombs.rs"]
mod bombs;

#[path = "../tests/common/process.rs"]
mod process;

use kartograf::proto::v1 as pb;
use kartograf::proto::v1::definitions_client::DefinitionsClient;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use serde_json::Value as Json;
use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

/// Set (to a pod count) in the environment of the re-executed bench binary that serves
/// the fake API server.
const FAKE_ENV: &str = "KARTOGRAF_E2E_FAKE_APISERVER";
/// Set (to `PODS:DIR`) to write the manifest directory of that size into DIR and exit (for
/// profiling `serve --manifests` by hand).
const WRITE_ENV: &str = "KARTOGRAF_E2E_WRITE_MANIFESTS";
/// The catalog definition the reload phase overrides.
const RELOADED: &str = "jobset-x-k8s-io-jobset-v1alpha2";
/// Events kept by the fake API server for watch resumption (the rest is compacted away).
const FAKE_HISTORY: usize = 5000;

// ---------------------------------------------------------------------------------------
// Options

#[derive(Clone, Debug)]
struct Options {
    /// A real run (`--bench`): goals are judged; otherwise a smoke run.
    bench: bool,
    sizes: Vec<usize>,
    settle: Duration,
    idle: Duration,
    events: f64,
    event_secs: Duration,
    window: Duration,
    rate: f64,
    hostile: Duration,
    manifests: bool,
    kube: bool,
    /// Phases to run after start-up and the steady RSS: idle, events, reload, scrape, relist,
    /// hostile.
    phases: String,
    /// Rounds of web view requests (each round: one request of every kind).
    ui_rounds: usize,
}

impl Options {
    fn phase(&self, name: &str) -> bool {
        self.phases.split(',').any(|p| p.trim() == name)
    }
}

fn options() -> Options {
    let args = args::Args::new();
    let bench = args.bench();
    let value = |name: &str| args.text(name);
    let secs = |name: &str, bench_default: f64, smoke_default: f64| {
        Duration::from_secs_f64(
            value(name)
                .and_then(|v| v.parse().ok())
                .unwrap_or(if bench { bench_default } else { smoke_default }),
        )
    };
    let sizes = value("--pods")
        .map(|v| {
            v.split(',')
                .filter_map(|s| s.trim().replace('_', "").parse().ok())
                .collect::<Vec<usize>>()
        })
        .unwrap_or_else(|| vec![if bench { 10_000 } else { 1_000 }]);
    let sources = value("--sources").unwrap_or_else(|| "manifests,kube".to_owned());
    Options {
        bench,
        sizes,
        settle: secs("--settle", 30.0, 2.0),
        idle: secs("--idle", 30.0, 2.0),
        events: value("--events")
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000.0),
        event_secs: secs("--event-secs", 10.0, 1.0),
        window: secs("--window", 5.0, 1.0),
        rate: value("--rate")
            .and_then(|v| v.parse().ok())
            .unwrap_or(200.0),
        hostile: secs("--hostile-secs", 10.0, 1.5),
        manifests: sources.contains("manifests"),
        kube: sources.contains("kube"),
        phases: value("--phases")
            .unwrap_or_else(|| "idle,ui,events,reload,scrape,relist,hostile".to_owned()),
        ui_rounds: value("--ui-rounds")
            .and_then(|v| v.parse().ok())
            .unwrap_or(if bench { 200 } else { 3 }),
    }
}

// ---------------------------------------------------------------------------------------
// Progress and results

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// A progress line on stderr, stamped with the seconds since the bench started.
macro_rules! progress {
    ($($arg:tt)*) => {{
        let t = START.get_or_init(Instant::now).elapsed().as_secs_f64();
        eprintln!("[e2e {t:7.1}s] {}", format!($($arg)*));
    }};
}

/// One line of the results table.
struct Row {
    case: String,
    metric: String,
    value: String,
    /// The goal and whether it is met (None: informational).
    goal: Option<(String, bool)>,
}

#[derive(Default)]
struct Table(Vec<Row>);

impl Table {
    fn info(&mut self, case: &str, metric: &str, value: String) {
        progress!("{case}: {metric}: {value}");
        self.0.push(Row {
            case: case.to_owned(),
            metric: metric.to_owned(),
            value,
            goal: None,
        });
    }

    fn goal(&mut self, case: &str, metric: &str, value: String, goal: &str, met: bool) {
        progress!(
            "{case}: {metric}: {value} (goal {goal}: {})",
            if met { "met" } else { "NOT met" }
        );
        self.0.push(Row {
            case: case.to_owned(),
            metric: metric.to_owned(),
            value,
            goal: Some((goal.to_owned(), met)),
        });
    }

    fn print(&self, judged: bool) {
        println!("| case | figure | value | goal | met? |");
        println!("| --- | --- | --- | --- | --- |");
        for r in &self.0 {
            let (goal, met) = match &r.goal {
                Some((g, _)) if !judged => (g.as_str(), "(smoke run)"),
                Some((g, true)) => (g.as_str(), "yes"),
                Some((g, false)) => (g.as_str(), "**no**"),
                None => ("", ""),
            };
            println!(
                "| {} | {} | {} | {goal} | {met} |",
                r.case, r.metric, r.value
            );
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

// ---------------------------------------------------------------------------------------
// /proc

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// utime + stime (clock ticks) from a `stat` file's text.
fn stat_ticks(stat: &str) -> u64 {
    // Fields after the command name (which may hold spaces): state is field 3, utime 14,
    // stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

fn rss_kib(pid: u32) -> u64 {
    process::status_kib(&pid.to_string(), "VmRSS:")
}

/// One thread: name, CPU ticks, context switches (voluntary + involuntary).
#[derive(Clone, Debug)]
struct ThreadUsage {
    tid: String,
    name: String,
    ticks: u64,
    switches: u64,
}

/// CPU and wakeups of a process at one moment.
#[derive(Clone, Debug)]
struct Usage {
    at: Instant,
    ticks: u64,
    threads: Vec<ThreadUsage>,
}

fn usage(pid: u32) -> Usage {
    let at = Instant::now();
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| stat_ticks(&s))
        .unwrap_or(0);
    let mut threads = Vec::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in dir.flatten() {
            let path = t.path();
            let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
            let field = |name: &str| {
                status
                    .lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let name = status
                .lines()
                .find_map(|l| l.strip_prefix("Name:"))
                .unwrap_or("")
                .trim()
                .to_owned();
            threads.push(ThreadUsage {
                tid: t.file_name().to_string_lossy().into_owned(),
                name,
                ticks: std::fs::read_to_string(path.join("stat"))
                    .map(|s| stat_ticks(&s))
                    .unwrap_or(0),
                switches: field("voluntary_ctxt_switches:") + field("nonvoluntary_ctxt_switches:"),
            });
        }
    }
    Usage { at, ticks, threads }
}

/// What a process did between two [`usage`] samples.
struct Activity {
    /// CPU time as % of one core.
    cpu: f64,
    /// Context switches per second, all threads (each is a wakeup or a preemption).
    wakeups: f64,
    /// Threads that were busy, by name: (name, threads, CPU %, switches/s), busiest first.
    threads: Vec<(String, usize, f64, f64)>,
}

fn activity(a: &Usage, b: &Usage) -> Activity {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let hz = clock_ticks();
    let mut by_name: std::collections::BTreeMap<String, (usize, u64, u64)> = Default::default();
    let mut switches = 0;
    for t in &b.threads {
        let before = a.threads.iter().find(|x| x.tid == t.tid);
        let (ticks, sw) = match before {
            Some(x) => (
                t.ticks.saturating_sub(x.ticks),
                t.switches.saturating_sub(x.switches),
            ),
            None => (t.ticks, t.switches),
        };
        switches += sw;
        let e = by_name.entry(t.name.clone()).or_default();
        e.0 += 1;
        e.1 += ticks;
        e.2 += sw;
    }
    let mut threads: Vec<(String, usize, f64, f64)> = by_name
        .into_iter()
        .filter(|(_, (_, ticks, sw))| *ticks > 0 || *sw > 0)
        .map(|(name, (n, ticks, sw))| (name, n, ticks as f64 / hz / secs * 100.0, sw as f64 / secs))
        .collect();
    threads.sort_by(|x, y| (y.3 + y.2 * 100.0).total_cmp(&(x.3 + x.2 * 100.0)));
    Activity {
        cpu: b.ticks.saturating_sub(a.ticks) as f64 / hz / secs * 100.0,
        wakeups: switches as f64 / secs,
        threads,
    }
}

fn describe_threads(a: &Activity) -> String {
    a.threads
        .iter()
        .take(6)
        .map(|(name, n, cpu, sw)| format!("{name}×{n} {cpu:.2}% {sw:.1}/s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The 1-minute load average.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Samples RSS every 100 ms until stopped; returns the largest seen (KiB).
struct RssPeak {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl RssPeak {
    fn start(pid: u32) -> RssPeak {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(100));
            }
            peak.max(rss_kib(pid))
        });
        RssPeak { stop, thread }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------
// The synthetic cluster

fn cluster(pods: usize) -> synth::Cluster {
    let templates = synth::load_templates(&synth::template_dir()).expect("templates");
    synth::generate(
        &templates,
        synth::Spec {
            workloads: (pods / 10).max(1),
            pods,
            seed: 1,
        },
    )
}

fn object_ref(doc: &Json) -> pb::ObjectRef {
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    pb::ObjectRef {
        api_version: s(&doc["apiVersion"]),
        kind: s(&doc["kind"]),
        namespace: s(&doc["metadata"]["namespace"]),
        name: s(&doc["metadata"]["name"]),
        uid: String::new(),
    }
}

/// Sets the Ready condition of a pod document; false when it has none.
fn set_ready(pod: &mut Json, ready: bool) -> bool {
    let mut found = false;
    if let Some(conditions) = pod["status"]["conditions"].as_array_mut() {
        for c in conditions.iter_mut().filter(|c| c["type"] == "Ready") {
            c["status"] = Json::from(if ready { "True" } else { "False" });
            found = true;
        }
    }
    found
}

// ---------------------------------------------------------------------------------------
// The fake API server process

/// Entry point of the re-executed binary: serves `pods` synthetic pods (0: the same kinds,
/// no objects) over loopback HTTP, prints `READY <port> <objects>`, then follows commands
/// on stdin: `events <rate> <seconds>` (Ready flips, answered `DONE <n>`), `delete-silently`
/// (one pod removed without a DELETED event, `OK`), `expire <path>` (410 Gone on open
/// watches of `path`, `OK`), `quit`.
fn fake_apiserver_main(pods: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = fake_apiserver::FakeApiServer::new();
    let mut pod_uids = Vec::new();
    let mut objects = 0;
    if pods == 0 {
        // The kinds a loaded cluster has, served empty.
        let kinds = cluster(250);
        for doc in kinds.all() {
            let s = |k: &str| doc[k].as_str().unwrap_or_default().to_owned();
            let (api_version, kind) = (s("apiVersion"), s("kind"));
            fake.register(
                &api_version,
                &kind,
                &format!("{}s", kind.to_lowercase()),
                true,
            );
        }
    } else {
        let c = cluster(pods);
        pod_uids = c
            .pods
            .iter()
            .map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
            .collect();
        let mut batch = Vec::new();
        for doc in c.roots.into_iter().chain(c.intermediates).chain(c.pods) {
            batch.push(doc);
            objects += 1;
            if batch.len() == 5000 {
                fake.serve_documents(std::mem::take(&mut batch));
                fake.compact(0);
            }
        }
        fake.serve_documents(batch);
        fake.compact(0);
    }
    let addr = rt.block_on(fake.listen());
    let mut out = std::io::stdout().lock();
    writeln!(out, "READY {} {objects}", addr.port()).expect("stdout");
    out.flush().expect("stdout");
    let mut flips = 0usize;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["events", rate, secs] => {
                let rate: f64 = rate.parse().unwrap_or(0.0);
                let secs: f64 = secs.parse().unwrap_or(0.0);
                let started = Instant::now();
                let mut sent = 0usize;
                while started.elapsed().as_secs_f64() < secs && !pod_uids.is_empty() {
                    let due = (rate * started.elapsed().as_secs_f64()) as usize;
                    while sent < due {
                        let n = pod_uids.len();
                        let uid = &pod_uids[flips % n];
                        // False on odd passes over the pods, True on even ones.
                        let ready = (flips / n) % 2 == 1;
                        if let Some(mut pod) = fake.object(uid)
                            && set_ready(&mut pod, ready)
                        {
                            fake.upsert(pod);
                        }
                        flips += 1;
                        sent += 1;
                    }
                    fake.compact(FAKE_HISTORY);
                    std::thread::sleep(Duration::from_millis(2));
                }
                writeln!(out, "DONE {sent}").expect("stdout");
            }
            ["delete-silently"] => {
                if let Some(uid) = pod_uids.pop() {
                    fake.delete(&uid, true);
                }
                writeln!(out, "OK").expect("stdout");
            }
            ["expire", path] => {
                fake.expire(path);
                writeln!(out, "OK").expect("stdout");
            }
            ["quit"] => break,
            _ => writeln!(out, "ERROR unknown command {line:?}").expect("stdout"),
        }
        out.flush().expect("stdout");
    }
    drop(rt);
}

/// The fake API server child process, driven over its stdin/stdout.
struct FakeProcess {
    child: Child,
    port: u16,
    objects: usize,
    replies: std::io::BufReader<std::process::ChildStdout>,
}

impl FakeProcess {
    fn start(pods: usize) -> FakeProcess {
        let exe = std::env::current_exe().expect("the bench binary");
        let mut child = Command::new(exe)
            .env(FAKE_ENV, pods.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the fake API server");
        let mut replies = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        replies.read_line(&mut line).expect("READY line");
        let words: Vec<&str> = line.split_whitespace().collect();
        let (port, objects) = match words.as_slice() {
            ["READY", port, objects] => (
                port.parse().expect("port"),
                objects.parse().expect("objects"),
            ),
            _ => panic!("fake API server: unexpected first line {line:?}"),
        };
        FakeProcess {
            child,
            port,
            objects,
            replies,
        }
    }

    /// Sends one command and returns its reply line.
    fn command(&mut self, command: &str) -> String {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{command}").expect("write a command");
        stdin.flush().expect("flush");
        let mut line = String::new();
        self.replies.read_line(&mut line).expect("reply");
        assert!(
            !line.starts_with("ERROR") && !line.is_empty(),
            "fake API server: {command:?} -> {line:?}"
        );
        line.trim().to_owned()
    }

    /// A kubeconfig pointing at this server (plain HTTP on loopback, no credentials).
    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    \
                 server: http://127.0.0.1:{}\ncontexts:\n- name: fake\n  context:\n    \
                 cluster: fake\n    user: fake\n    namespace: default\n\
                 current-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
                self.port
            ),
        )
        .expect("write the kubeconfig");
        path
    }
}

impl Drop for FakeProcess {
    fn drop(&mut self) {
        // The child exits at end of input; killed (by its pid) if it does not.
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// The kartograf process

/// What `kartograf serve` reads.
#[derive(Clone, Debug)]
enum Source {
    Manifests(PathBuf),
    Kube { kubeconfig: PathBuf },
}

struct Kartograf {
    child: Child,
    pid: u32,
    grpc: SocketAddr,
    admin: SocketAddr,
    started: Instant,
    log: Arc<Mutex<VecDeque<String>>>,
    /// `perf record` attached to the process (with `KARTOGRAF_E2E_PERF`).
    perf: Option<Child>,
}

impl Kartograf {
    fn spawn(source: &Source, definitions: &Path) -> Kartograf {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kartograf"));
        command.arg("serve");
        match source {
            Source::Manifests(dir) => {
                command.arg("--manifests").arg(dir);
            }
            Source::Kube { kubeconfig } => {
                command
                    .env("KUBECONFIG", kubeconfig)
                    .env_remove("KUBERNETES_SERVICE_HOST")
                    .env_remove("KUBERNETES_SERVICE_PORT");
            }
        }
        command
            .arg("--definitions")
            .arg(definitions)
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(["--log-level", "info", "--log-format", "json"])
            .env_remove("RUST_LOG")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = command.spawn().expect("spawn kartograf");
        let pid = child.id();
        let perf = perf_attach(pid);
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            // Drains stderr so the server never blocks on a full pipe; keeps the last lines.
            std::thread::spawn(move || {
                let mut sent = false;
                for line in std::io::BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if !sent && let Some(addrs) = startup_addresses(&line) {
                        let _ = tx.send(addrs);
                        sent = true;
                    }
                    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                    log.push_back(line);
                    if log.len() > 40 {
                        log.pop_front();
                    }
                }
            });
        }
        let Ok((grpc, admin)) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("kartograf printed no startup line: {:?}", log.lock());
        };
        Kartograf {
            child,
            pid,
            grpc,
            admin,
            started,
            log,
            perf,
        }
    }

    fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "kartograf exited ({status}); last log lines: {:?}",
                self.log
            );
        }
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.grpc))
            .expect("uri")
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("connect to kartograf")
    }

    /// Polls health `Check` until SERVING; returns the time since the process started.
    async fn wait_serving(&mut self, channel: &Channel, limit: Duration) -> Duration {
        let mut health = HealthClient::new(channel.clone());
        loop {
            let r = health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                })
                .await;
            if r.is_ok_and(|r| {
                r.into_inner().status
                    == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
            }) {
                return self.started.elapsed();
            }
            self.assert_alive();
            assert!(
                self.started.elapsed() < limit,
                "not SERVING after {limit:?}; last log lines: {:?}",
                self.log
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn metrics(&self) -> String {
        let (status, body) = http_get(self.admin, "/metrics").await;
        assert_eq!(status, 200, "/metrics: {body}");
        body
    }
}

impl Drop for Kartograf {
    fn drop(&mut self) {
        if let Some(mut perf) = self.perf.take() {
            // perf writes its file on SIGINT.
            let _ = Command::new("kill")
                .args(["-INT", &perf.id().to_string()])
                .status();
            let _ = perf.wait();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With `KARTOGRAF_E2E_PERF=DIR`, records the process with `perf` (call graphs) into
/// `DIR/kartograf-<pid>.data` until it is stopped: a profiling aid, not a figure.
fn perf_attach(pid: u32) -> Option<Child> {
    let dir = std::env::var_os("KARTOGRAF_E2E_PERF")?;
    let out = PathBuf::from(dir).join(format!("kartograf-{pid}.data"));
    progress!("perf recording pid {pid} into {}", out.display());
    Command::new("perf")
        .args([
            "record",
            "-F",
            "99",
            "-g",
            "--call-graph",
            "dwarf,8192",
            "-p",
        ])
        .arg(pid.to_string())
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// The gRPC and admin addresses from the `kartograf serving` log line (JSON format).
fn startup_addresses(line: &str) -> Option<(SocketAddr, SocketAddr)> {
    let json: Json = serde_json::from_str(line).ok()?;
    let fields = json.get("fields")?;
    if fields.get("message")?.as_str()? != "kartograf serving" {
        return None;
    }
    Some((
        fields.get("grpc")?.as_str()?.parse().ok()?,
        fields.get("admin")?.as_str()?.parse().ok()?,
    ))
}

/// Sends an HTTP/1.1 GET of `path` on a new connection (closed after the answer).
async fn send_get(addr: SocketAddr, path: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    stream
}

/// A minimal HTTP/1.1 GET on a new connection: (status, body).
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = send_get(addr, path).await;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

/// Scrapes `/metrics` as a Prometheus server would read it (streamed, nothing kept; this
/// process's own work must not stall the `Resolve` client beside it): the response's size.
async fn scrape_size(addr: SocketAddr) -> usize {
    let mut stream = send_get(addr, "/metrics").await;
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0;
    loop {
        match stream.read(&mut buf).await.expect("read") {
            0 => break,
            n => {
                if total == 0 {
                    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "scrape refused");
                }
                total += n;
            }
        }
    }
    total
}

/// Sum of the samples of metric `name` whose labels contain every `labels` fragment.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.iter().all(|f| l.contains(f)))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

// ---------------------------------------------------------------------------------------
// Resolve load

/// One call: when it was due, how long it took from then, whether it answered a workload.
#[derive(Clone, Copy)]
struct Sample {
    due: Instant,
    latency: Duration,
    ok: bool,
}

/// `rate` Resolve calls per second of random workloads, open loop (each call is sent when
/// due, whatever the earlier ones do; latency counts from when it was due).
struct ResolveLoad {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ResolveLoad {
    fn start(channel: Channel, targets: Arc<Vec<pb::ObjectRef>>, rate: f64) -> ResolveLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let (stop, samples) = (stop.clone(), samples.clone());
            tokio::spawn(async move {
                let mut rng = synth::Rng::new(7);
                let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut calls = tokio::task::JoinSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let due = tick.tick().await.into_std();
                    let target = targets[rng.below(targets.len() as u64) as usize].clone();
                    let mut client = WorkloadResolverClient::new(channel.clone())
                        .max_decoding_message_size(64 << 20);
                    let samples = samples.clone();
                    calls.spawn(async move {
                        let r = tokio::time::timeout(
                            Duration::from_secs(10),
                            client.resolve(pb::ResolveRequest {
                                target: Some(pb::resolve_request::Target::Workload(target)),
                                view: 0,
                                cluster: String::new(),
                            }),
                        )
                        .await;
                        let ok = matches!(&r, Ok(Ok(w)) if w.get_ref().workload.is_some());
                        samples
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Sample {
                                due,
                                latency: due.elapsed(),
                                ok,
                            });
                    });
                    while calls.try_join_next().is_some() {}
                }
                while calls.join_next().await.is_some() {}
            })
        };
        ResolveLoad {
            stop,
            samples,
            task,
        }
    }

    async fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        s.clone()
    }
}

/// Counts the events a `Watch` subscriber of every workload receives (after its snapshot).
struct WatchCounter {
    events: Arc<Mutex<Vec<(Instant, i32)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WatchCounter {
    async fn start(channel: Channel) -> WatchCounter {
        let mut client = WorkloadResolverClient::new(channel).max_decoding_message_size(256 << 20);
        let mut stream = client
            .watch(pb::WatchRequest::default())
            .await
            .expect("Watch")
            .into_inner();
        // The snapshot first, up to SYNCED.
        while let Some(e) = stream.message().await.expect("Watch snapshot") {
            if e.r#type == pb::EventType::Synced as i32 {
                break;
            }
        }
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(e)) = stream.message().await {
                sink.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((Instant::now(), e.r#type));
            }
        });
        WatchCounter { events, task }
    }

    /// When the last event arrived, if any arrived after `since`.
    fn last_after(&self, since: Instant) -> Option<Instant> {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.last().map(|(at, _)| *at).filter(|at| *at >= since)
    }

    /// Waits until no event arrived for `quiet` (and, with `first`, until one arrived after
    /// `since` at all); returns when the last one arrived (`since` if none).
    async fn settled(
        &self,
        since: Instant,
        quiet: Duration,
        first: bool,
        limit: Duration,
    ) -> Instant {
        loop {
            let last = self.last_after(since);
            let from = last.unwrap_or(since);
            if (last.is_some() || !first) && from.elapsed() >= quiet {
                return from;
            }
            assert!(
                since.elapsed() < limit,
                "no Watch event {:?} after the change",
                limit
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn finish(self) -> WatchEvents {
        self.task.abort();
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        WatchEvents(events.clone())
    }
}

struct WatchEvents(Vec<(Instant, i32)>);

impl WatchEvents {
    /// "N events (M modified, …)" received in `[from, to)`.
    fn between(&self, from: Instant, to: Instant) -> String {
        let of = |t: pb::EventType| {
            self.0
                .iter()
                .filter(|(at, ty)| *at >= from && *at < to && *ty == t as i32)
                .count()
        };
        let (m, a, d, r) = (
            of(pb::EventType::Modified),
            of(pb::EventType::Added),
            of(pb::EventType::Deleted),
            of(pb::EventType::Reset),
        );
        format!(
            "{} events ({m} modified, {a} added, {d} deleted, {r} reset)",
            m + a + d + r
        )
    }
}

/// Latency figures of the calls due in `[from, to)`.
struct Window {
    calls: usize,
    failed: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

fn window(samples: &[Sample], from: Instant, to: Instant) -> Window {
    let mut lat: Vec<Duration> = samples
        .iter()
        .filter(|s| s.due >= from && s.due < to)
        .map(|s| s.latency)
        .collect();
    lat.sort();
    let failed = samples
        .iter()
        .filter(|s| s.due >= from && s.due < to && !s.ok)
        .count();
    Window {
        calls: lat.len(),
        failed,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        max: lat.last().copied().unwrap_or_default(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn describe(w: &Window) -> String {
    format!(
        "p99 {} (p50 {}, max {}; {} calls, {} failed)",
        ms(w.p99),
        ms(w.p50),
        ms(w.max),
        w.calls,
        w.failed
    )
}

// ---------------------------------------------------------------------------------------
// Phases

/// Temporary directories of one run, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kartograf-e2e-{}-{what}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn dir(&self, name: &str) -> PathBuf {
        let d = self.0.join(name);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` to `path` atomically (through a hidden temporary file and a rename).
fn write_atomically(path: &Path, text: &str) {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The embedded JobSet definition with its child component renamed (every JobSet graph
/// changes).
fn changed_definition() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("catalog/{RELOADED}.yaml"));
    let text = std::fs::read_to_string(&path).expect("the catalog's JobSet definition");
    let changed = text
        .replace("- name: replicatedjob\n", "- name: replicated-job\n")
        .replace(
            "componentName: replicatedjob\n",
            "componentName: replicated-job\n",
        );
    assert!(
        changed.matches("replicated-job").count() >= 2,
        "{}: the component the bench renames is gone; update changed_definition()",
        path.display()
    );
    changed
}

/// The components of the definition `name` as served, with its origin.
async fn definition_components(channel: &Channel, name: &str) -> (u64, String, Vec<String>) {
    let list = DefinitionsClient::new(channel.clone())
        .list_definitions(pb::ListDefinitionsRequest {})
        .await
        .expect("ListDefinitions")
        .into_inner();
    let d = list.definitions.into_iter().find(|d| d.name == name);
    (
        list.generation,
        d.as_ref().map(|d| d.origin.clone()).unwrap_or_default(),
        d.map(|d| d.components).unwrap_or_default(),
    )
}

/// A case's fixed inputs.
struct Case<'a> {
    name: String,
    pods: usize,
    targets: Arc<Vec<pb::ObjectRef>>,
    /// Workload files of the manifest directory (for file-edit events).
    files: Vec<PathBuf>,
    definitions: PathBuf,
    baseline_rss: u64,
    o: &'a Options,
}

/// Start, steady RSS, idle CPU. Returns the connected channel.
async fn startup_and_idle(k: &mut Kartograf, case: &Case<'_>, table: &mut Table) -> Channel {
    let o = case.o;
    let channel = k.channel().await;
    let serving = k.wait_serving(&channel, Duration::from_secs(600)).await;
    let rss_serving = rss_kib(k.pid);
    let hwm = process::status_kib(&k.pid.to_string(), "VmHWM:");
    // Everything the process did so far is start-up work.
    let startup = activity(
        &Usage {
            at: k.started,
            ticks: 0,
            threads: Vec::new(),
        },
        &usage(k.pid),
    );
    table.goal(
        &case.name,
        "time to SERVING from process start",
        format!(
            "{:.2} s (RSS then {}, peak {})",
            serving.as_secs_f64(),
            mib(rss_serving),
            mib(hwm)
        ),
        "≤ 5 s at 100k pods",
        case.pods < 100_000 || serving <= Duration::from_secs(5),
    );
    table.info(
        &case.name,
        "start-up CPU by thread (name×count CPU% of the time to SERVING)",
        format!("{:.0}% in all: {}", startup.cpu, describe_threads(&startup)),
    );
    progress!("{}: settling {:?}", case.name, o.settle);
    tokio::time::sleep(o.settle).await;
    k.assert_alive();
    let rss = rss_kib(k.pid);
    let per_pod = (rss.saturating_sub(case.baseline_rss) * 1024) as f64 / case.pods as f64;
    table.goal(
        &case.name,
        &format!(
            "RSS {:.0} s after SERVING, minus the empty process, per pod",
            o.settle.as_secs_f64()
        ),
        format!(
            "{per_pod:.0} B/pod ({} − {} empty)",
            mib(rss),
            mib(case.baseline_rss)
        ),
        "≤ 4 KB/pod at 100k",
        case.pods < 100_000 || per_pod <= 4096.0,
    );
    if !o.phase("idle") {
        return channel;
    }
    progress!("{}: idle for {:?}", case.name, o.idle);
    let a = usage(k.pid);
    tokio::time::sleep(o.idle).await;
    let b = usage(k.pid);
    let idle = activity(&a, &b);
    table.goal(
        &case.name,
        &format!("idle CPU over {:.0} s", o.idle.as_secs_f64()),
        format!(
            "{:.2}% of a core, {:.1} wakeups/s (RSS {})",
            idle.cpu,
            idle.wakeups,
            mib(rss_kib(k.pid))
        ),
        "≤ 1% of a core",
        idle.cpu <= 1.0,
    );
    table.info(
        &case.name,
        "idle threads (name×count CPU% switches/s)",
        describe_threads(&idle),
    );
    // What a Prometheus scrape costs at this size (each scrape on a new connection).
    let a = usage(k.pid);
    let mut took = Vec::new();
    let mut bytes = 0;
    for _ in 0..3 {
        let t = Instant::now();
        bytes = k.metrics().await.len();
        took.push(t.elapsed());
    }
    let b = usage(k.pid);
    took.sort();
    table.info(
        &case.name,
        "/metrics scrape (median of 3)",
        format!(
            "{} for {:.1} MB; {:.0} ms of CPU each",
            ms(took[1]),
            bytes as f64 / 1e6,
            b.ticks.saturating_sub(a.ticks) as f64 / clock_ticks() * 1e3 / 3.0
        ),
    );
    channel
}

/// CPU and RSS while `events` runs (it returns how many pod changes it made).
async fn under_events<F>(
    k: &mut Kartograf,
    case: &Case<'_>,
    how: &str,
    table: &mut Table,
    events: F,
) where
    F: FnOnce() -> usize + Send + 'static,
{
    let before_metrics = k.metrics().await;
    let rss_before = rss_kib(k.pid);
    let peak = RssPeak::start(k.pid);
    let a = usage(k.pid);
    let sent = tokio::task::spawn_blocking(events)
        .await
        .expect("event task");
    let b = usage(k.pid);
    // Let the last events drain before reading the counters.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = peak.finish();
    k.assert_alive();
    let after_metrics = k.metrics().await;
    let secs = b.at.duration_since(a.at).as_secs_f64();
    let act = activity(&a, &b);
    let published = metric(&after_metrics, "kartograf_index_revision", &[])
        - metric(&before_metrics, "kartograf_index_revision", &[]);
    let seen = metric(
        &after_metrics,
        "kartograf_informer_events_total",
        &["type=\"apply\""],
    ) - metric(
        &before_metrics,
        "kartograf_informer_events_total",
        &["type=\"apply\""],
    );
    table.info(
        &case.name,
        &format!("under {:.0} pod changes/s ({how})", case.o.events),
        format!(
            "{:.1}% of a core, RSS {} → peak {} ({} changes in {secs:.1} s = {:.0}/s; {seen:.0} watch events seen, {published:.0} revisions published)",
            act.cpu,
            mib(rss_before),
            mib(peak),
            sent,
            sent as f64 / secs
        ),
    );
    table.info(&case.name, "threads under events", describe_threads(&act));
}

/// Pod Ready flips by rewriting manifest files: each rewrite flips every pod of one workload
/// file, paced to `rate` pod changes per second.
fn file_events(files: Vec<PathBuf>, rate: f64, secs: Duration) -> usize {
    let started = Instant::now();
    let (mut sent, mut next) = (0usize, 0usize);
    let (on, off) = (
        "\"status\":\"True\",\"type\":\"Ready\"",
        "\"status\":\"False\",\"type\":\"Ready\"",
    );
    while started.elapsed() < secs && !files.is_empty() {
        let due = (rate * started.elapsed().as_secs_f64()) as usize;
        while sent < due {
            let path = &files[next % files.len()];
            next += 1;
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            let (from, to) = if text.contains(on) {
                (on, off)
            } else {
                (off, on)
            };
            let n = text.matches(from).count();
            write_atomically(path, &text.replace(from, to));
            sent += n.max(1);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    sent
}

/// Resolve load through a definitions reload (changed, then comment only) and, with a fake
/// API server, a full relist of the pods.
async fn disruptions(
    k: &mut Kartograf,
    channel: &Channel,
    case: &Case<'_>,
    fake: Option<&mut FakeProcess>,
    table: &mut Table,
) {
    let o = case.o;
    let relist = fake.is_some() && o.phase("relist");
    if !o.phase("reload") && !o.phase("scrape") && !relist {
        return;
    }
    let watch = WatchCounter::start(channel.clone()).await;
    let load = ResolveLoad::start(channel.clone(), case.targets.clone(), o.rate);
    let quiet_start = Instant::now();
    tokio::time::sleep(o.window).await;
    let quiet_end = Instant::now();
    let mut windows: Vec<(String, Instant, Instant, String)> = Vec::new();

    if o.phase("reload") {
        // 1. A definition file overriding the embedded JobSet definition (a renamed component).
        let file = case.definitions.join(format!("{RELOADED}.yaml"));
        let changed = changed_definition();
        progress!(
            "{}: pid {}: overriding the JobSet definition",
            case.name,
            k.pid
        );
        let t = Instant::now();
        write_atomically(&file, &changed);
        let published = loop {
            let (_, origin, components) = definition_components(channel, RELOADED).await;
            if origin.starts_with("directory") && components.iter().any(|c| c == "replicated-job") {
                break t.elapsed();
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the changed definition was never published"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The JobSets' new graphs reach a Watch subscriber.
        let settled = watch
            .settled(
                t,
                Duration::from_millis(500),
                true,
                Duration::from_secs(120),
            )
            .await;
        let end = (t + o.window).max(settled + Duration::from_secs(1));
        tokio::time::sleep_until(end.into()).await;
        windows.push((
            "Resolve during a catalog reload (JobSet definition overridden)".into(),
            t,
            end,
            format!(
                "definition listed after {}, last changed graph sent after {:.2} s",
                ms(published),
                settled.duration_since(t).as_secs_f64()
            ),
        ));
        tokio::time::sleep(o.window / 2).await;

        // 2. The same file with a comment added: nothing changes.
        let (generation0, _, _) = definition_components(channel, RELOADED).await;
        let t = Instant::now();
        write_atomically(&file, &format!("{changed}\n# a comment changes nothing\n"));
        let end = t + o.window;
        tokio::time::sleep_until(end.into()).await;
        let (generation1, _, _) = definition_components(channel, RELOADED).await;
        windows.push((
            "Resolve during a comment-only definitions reload".into(),
            t,
            end,
            format!("catalog generation {generation0} → {generation1}"),
        ));
    }

    // 3. A /metrics scraper asking back to back (as several Prometheus servers, or one with a
    // short interval, might).
    // Alone, then 200 pod changes per second alone, then both (as in any live cluster).
    let mut fake = fake;
    let combinations = [(true, false), (false, true), (true, true)];
    for (scraping, changing) in combinations.into_iter().filter(|_| o.phase("scrape")) {
        tokio::time::sleep(o.window / 2).await;
        progress!(
            "{}: pid {}: scraping {scraping}, pods changing {changing}",
            case.name,
            k.pid
        );
        let t = Instant::now();
        let end = t + o.window;
        let admin = k.admin;
        let scraper = tokio::spawn(async move {
            let (mut took, mut bytes) = (Vec::new(), 0);
            while scraping && Instant::now() < end {
                let s = Instant::now();
                bytes = scrape_size(admin).await;
                took.push(s.elapsed());
            }
            (took, bytes)
        });
        if changing {
            let (rate, secs) = (200.0, o.window);
            match fake.as_deref_mut() {
                Some(f) => {
                    let reply = tokio::task::block_in_place(|| {
                        f.command(&format!("events {rate} {}", secs.as_secs_f64()))
                    });
                    assert!(reply.starts_with("DONE"), "{reply}");
                }
                None => {
                    let files = case.files.clone();
                    tokio::task::spawn_blocking(move || file_events(files, rate, secs))
                        .await
                        .expect("file events");
                }
            }
        }
        let (mut took, bytes) = scraper.await.expect("scraper");
        took.sort();
        let what = match (scraping, changing) {
            (true, false) => "Resolve while /metrics is scraped back to back",
            (false, _) => "Resolve while 200 pods/s change (no scrape)",
            (true, true) => "Resolve while /metrics is scraped back to back and 200 pods/s change",
        };
        let note = if scraping {
            format!(
                "{} scrapes of {:.1} MB, median {}, max {}",
                took.len(),
                bytes as f64 / 1e6,
                ms(percentile(&took, 0.5)),
                ms(took.last().copied().unwrap_or_default())
            )
        } else {
            "no scrape".to_owned()
        };
        tokio::time::sleep_until(end.into()).await;
        windows.push((what.into(), t, end, note));
    }

    // 4. A full relist: 410 Gone on the pod watch.
    if let Some(fake) = fake.filter(|_| o.phase("relist")) {
        tokio::time::sleep(o.window / 2).await;
        // One pod vanishes without a DELETED event: only the relist can tell, and the
        // workload's changed graph reaching the Watch subscriber marks the relist done.
        let reply = tokio::task::block_in_place(|| fake.command("delete-silently"));
        assert_eq!(reply, "OK");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            watch
                .last_after(Instant::now() - Duration::from_secs(1))
                .is_none(),
            "a silent delete was seen before the relist"
        );
        let peak = RssPeak::start(k.pid);
        let rss0 = rss_kib(k.pid);
        progress!("{}: pid {}: expiring the pod watch", case.name, k.pid);
        let t = Instant::now();
        let reply = tokio::task::block_in_place(|| fake.command("expire /api/v1/pods"));
        assert_eq!(reply, "OK");
        let relisted = watch
            .settled(t, Duration::ZERO, true, Duration::from_secs(300))
            .await
            .duration_since(t);
        k.assert_alive();
        let end = (t + o.window).max(t + relisted + Duration::from_secs(1));
        tokio::time::sleep_until(end.into()).await;
        let peak = peak.finish();
        windows.push((
            "Resolve during a full relist of the pods (410 Gone)".into(),
            t,
            end,
            format!(
                "relist done after {:.2} s; RSS {} → peak {}",
                relisted.as_secs_f64(),
                mib(rss0),
                mib(peak)
            ),
        ));
    }
    let samples = load.finish().await;
    k.assert_alive();
    let quiet = window(&samples, quiet_start, quiet_end);
    table.info(
        &case.name,
        &format!("Resolve at {:.0}/s, no disruption (baseline)", o.rate),
        describe(&quiet),
    );
    assert!(quiet.calls > 0, "no Resolve call was made");
    let watched = watch.finish();
    for (what, from, to, note) in windows {
        let w = window(&samples, from, to);
        let note = format!(
            "{note}; a Watch subscriber got {}",
            watched.between(from, to)
        );
        assert!(w.calls > 0, "{what}: no calls in its window");
        if !o.bench {
            assert_eq!(w.failed, 0, "{what}: failed Resolve calls");
        }
        table.goal(
            &case.name,
            &what,
            format!("{}; {note}", describe(&w)),
            "p99 ≤ 20 ms, none failed",
            w.p99 <= Duration::from_millis(20) && w.failed == 0,
        );
    }
}

/// The web view's requests (issue #32), one after the other on new connections, `rounds`
/// times each: p50/p99/max per kind, with the answer's size.
async fn web_view(k: &mut Kartograf, case: &Case<'_>, table: &mut Table) {
    let rounds = case.o.ui_rounds;
    let mut rng = synth::Rng::new(32);
    let targets = case.targets.clone();
    let pick = |rng: &mut synth::Rng| {
        let n = targets.len().max(1);
        targets[(rng.next_u64() as usize) % n].clone()
    };
    // kind -> (latencies, bytes of the last answer)
    let kinds = [
        "overview",
        "workloads: first page",
        "workloads: sorted by GPUs held",
        "workloads: namespace and status",
        "workloads: name contains",
        "workloads: a late page by name",
        "workload: one graph",
        "definitions",
    ];
    let mut samples: Vec<(Vec<Duration>, usize)> = vec![(Vec::new(), 0); kinds.len()];
    progress!("{}: web view requests, {rounds} rounds", case.name);
    for _ in 0..rounds {
        let t = pick(&mut rng);
        let part: String = t.name.chars().take(6).collect();
        let late = (targets.len() * 3 / 4).to_string();
        let paths = [
            "/ui/api/overview".to_owned(),
            "/ui/api/workloads?limit=100".to_owned(),
            "/ui/api/workloads?sort=gpus&desc=1&limit=100".to_owned(),
            format!(
                "/ui/api/workloads?namespace={}&status=Running&limit=100",
                t.namespace
            ),
            format!("/ui/api/workloads?q={part}&limit=100"),
            format!("/ui/api/workloads?sort=name&offset={late}&limit=100"),
            format!(
                "/ui/api/workload?kind={}&namespace={}&name={}",
                t.kind, t.namespace, t.name
            ),
            "/ui/api/definitions".to_owned(),
        ];
        for (i, path) in paths.iter().enumerate() {
            let started = Instant::now();
            let (status, body) = http_get(k.admin, path).await;
            let took = started.elapsed();
            assert_eq!(status, 200, "{path}: {}", &body[..body.len().min(300)]);
            samples[i].0.push(took);
            samples[i].1 = body.len();
        }
    }
    k.assert_alive();
    for (kind, (mut lat, bytes)) in kinds.iter().zip(samples) {
        lat.sort();
        let p99 = percentile(&lat, 0.99);
        table.goal(
            &case.name,
            &format!("web view request: {kind}"),
            format!(
                "p99 {} (p50 {}, max {}; {} calls; {} KiB)",
                ms(p99),
                ms(percentile(&lat, 0.5)),
                ms(lat.last().copied().unwrap_or_default()),
                lat.len(),
                bytes / 1024
            ),
            "p99 ≤ 50 ms at 100k pods",
            case.pods < 100_000 || p99 <= Duration::from_millis(50),
        );
    }
}

/// Health `Check`, `/livez` and `Resolve` of an unaffected workload, probed one after the
/// other every 20 ms for `secs`: (check, livez, resolve) latencies.
async fn probe(
    channel: &Channel,
    admin: SocketAddr,
    target: &pb::ObjectRef,
    secs: Duration,
) -> [Vec<Duration>; 3] {
    let mut health = HealthClient::new(channel.clone());
    let mut resolver = WorkloadResolverClient::new(channel.clone());
    let mut out: [Vec<Duration>; 3] = Default::default();
    let stop = Instant::now() + secs;
    let limit = Duration::from_secs(5);
    while Instant::now() < stop {
        let t = Instant::now();
        let r = tokio::time::timeout(
            limit,
            health.check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            }),
        )
        .await;
        out[0].push(if matches!(r, Ok(Ok(_))) {
            t.elapsed()
        } else {
            Duration::MAX
        });
        let t = Instant::now();
        let r = tokio::time::timeout(limit, http_get(admin, "/livez")).await;
        out[1].push(if matches!(r, Ok((200, _))) {
            t.elapsed()
        } else {
            Duration::MAX
        });
        let t = Instant::now();
        let r = tokio::time::timeout(
            limit,
            resolver.resolve(pb::ResolveRequest {
                target: Some(pb::resolve_request::Target::Workload(target.clone())),
                view: 0,
                cluster: String::new(),
            }),
        )
        .await;
        out[2].push(
            if matches!(&r, Ok(Ok(w)) if w.get_ref().workload.is_some()) {
                t.elapsed()
            } else {
                Duration::MAX
            },
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

/// Issue #11: the probes without and with 2 × cores hostile `ValidateDefinition` callers.
async fn hostile(k: &mut Kartograf, channel: &Channel, case: &Case<'_>, table: &mut Table) {
    let o = case.o;
    let target = case.targets[0].clone();
    progress!(
        "{}: probes without hostile load for {:?}",
        case.name,
        o.hostile
    );
    let calm = probe(channel, k.admin, &target, o.hostile).await;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let sample = Arc::new(bombs::sample_object().to_string());
    let stop = Arc::new(AtomicBool::new(false));
    let slow = [
        "[.spec.items[] as $a | .spec.items[] as $b | .spec.items[] | 1] | length",
        "reduce ((.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)) as $x (0; .)",
    ];
    let mut attackers = Vec::new();
    for i in 0..2 * cores {
        // Each attacker is its own client (connection).
        let ch = k.channel().await;
        let (sample, stop) = (sample.clone(), stop.clone());
        let definition = bombs::definition(slow[i % slow.len()]);
        attackers.push(tokio::spawn(async move {
            let mut client = DefinitionsClient::new(ch)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20);
            let (mut done, mut shed, mut failed) = (0u32, 0u32, 0u32);
            while !stop.load(Ordering::Relaxed) {
                let r = client
                    .validate_definition(pb::ValidateDefinitionRequest {
                        definition: definition.clone(),
                        sample: Some(pb::InlineWorkload {
                            object_json: sample.to_string(),
                            pods_json: Vec::new(),
                        }),
                    })
                    .await;
                match r {
                    Ok(_) => done += 1,
                    Err(e) if e.code() == tonic::Code::ResourceExhausted => shed += 1,
                    Err(_) => failed += 1,
                }
            }
            (done, shed, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    progress!(
        "{}: probes under {} hostile callers for {:?}",
        case.name,
        2 * cores,
        o.hostile
    );
    let a = usage(k.pid);
    let rss0 = rss_kib(k.pid);
    let peak = RssPeak::start(k.pid);
    let attacked = probe(channel, k.admin, &target, o.hostile).await;
    let act = activity(&a, &usage(k.pid));
    let peak = peak.finish();
    stop.store(true, Ordering::Relaxed);
    let (mut done, mut shed, mut failed) = (0, 0, 0);
    for a in attackers {
        let (d, s, f) = a.await.expect("attacker");
        (done, shed, failed) = (done + d, shed + s, failed + f);
    }
    k.assert_alive();
    let stats = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        let lost = v.iter().filter(|d| **d == Duration::MAX).count();
        (percentile(&v, 0.99), v.len(), lost)
    };
    for (i, what) in [
        "health Check",
        "admin /livez",
        "Resolve of an unaffected workload",
    ]
    .iter()
    .enumerate()
    {
        let (p99_calm, n_calm, lost_calm) = stats(&calm[i]);
        let (p99, n, lost) = stats(&attacked[i]);
        let shown = |d: Duration| {
            if d == Duration::MAX {
                "timeout".to_owned()
            } else {
                ms(d)
            }
        };
        let value = format!(
            "p99 {} ({n} calls, {lost} failed); without hostile load p99 {} ({n_calm} calls, {lost_calm} failed)",
            shown(p99),
            shown(p99_calm)
        );
        if !o.bench {
            assert_eq!(lost, 0, "{what} failed under hostile load");
        }
        if i < 2 {
            table.goal(
                &case.name,
                &format!(
                    "{what} under {} hostile ValidateDefinition callers",
                    2 * cores
                ),
                value,
                "p99 ≤ 50 ms",
                p99 <= Duration::from_millis(50) && lost == 0,
            );
        } else {
            table.info(
                &case.name,
                &format!(
                    "{what} under {} hostile ValidateDefinition callers",
                    2 * cores
                ),
                value,
            );
        }
    }
    table.info(
        &case.name,
        "hostile calls",
        format!(
            "{done} answered, {shed} shed (RESOURCE_EXHAUSTED), {failed} other errors; server {:.0}% of a core, RSS {} → peak {}",
            act.cpu,
            mib(rss0),
            mib(peak)
        ),
    );
}

/// RSS and idle activity of the binary serving nothing: an empty directory and an API
/// server that serves the same kinds without objects. Both run at once.
async fn baselines(o: &Options, scratch: &Scratch, table: &mut Table) -> (u64, u64) {
    progress!(
        "baseline: empty sources, settling {:?} then idle {:?}",
        o.settle,
        o.idle
    );
    let defs = scratch.dir("baseline-definitions");
    let empty = scratch.dir("empty");
    let mut procs = Vec::new();
    let mut fake = None;
    if o.manifests {
        procs.push((
            "manifests (empty dir)",
            Kartograf::spawn(&Source::Manifests(empty), &defs),
        ));
    }
    if o.kube {
        let f = FakeProcess::start(0);
        let kubeconfig = f.kubeconfig(&scratch.dir("baseline-kube"));
        procs.push((
            "fake API server (no objects)",
            Kartograf::spawn(&Source::Kube { kubeconfig }, &defs),
        ));
        fake = Some(f);
    }
    let mut serving = Vec::new();
    for (_, k) in &mut procs {
        let ch = k.channel().await;
        serving.push(k.wait_serving(&ch, Duration::from_secs(60)).await);
    }
    tokio::time::sleep(o.settle).await;
    let a: Vec<Usage> = procs.iter().map(|(_, k)| usage(k.pid)).collect();
    tokio::time::sleep(o.idle).await;
    let mut rss = (0, 0);
    for (((what, k), a), serving) in procs.iter_mut().zip(a).zip(serving) {
        k.assert_alive();
        let act = activity(&a, &usage(k.pid));
        let r = rss_kib(k.pid);
        if what.starts_with("manifests") {
            rss.0 = r;
        } else {
            rss.1 = r;
        }
        let case = format!("empty: {what}");
        table.info(
            &case,
            "time to SERVING from process start",
            format!("{:.2} s", serving.as_secs_f64()),
        );
        table.info(&case, "RSS (the per-pod baseline)", mib(r));
        table.goal(
            &case,
            &format!("idle CPU over {:.0} s", o.idle.as_secs_f64()),
            format!("{:.2}% of a core, {:.1} wakeups/s", act.cpu, act.wakeups),
            "≤ 1% of a core",
            act.cpu <= 1.0,
        );
        table.info(
            &case,
            "idle threads (name×count CPU% switches/s)",
            describe_threads(&act),
        );
    }
    drop(procs);
    drop(fake);
    rss
}

async fn run(o: Options) -> Table {
    let mut table = Table::default();
    let scratch = Scratch::new("run");
    progress!(
        "options: {o:?}; {} cores, load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    let (empty_dir_rss, empty_kube_rss) = baselines(&o, &scratch, &mut table).await;
    for &pods in &o.sizes {
        progress!("generating {pods} pods");
        let c = cluster(pods);
        let targets: Arc<Vec<pb::ObjectRef>> = Arc::new(c.roots.iter().map(object_ref).collect());
        let workloads = targets.len();
        if o.manifests {
            let dir = scratch.dir(&format!("cluster-{pods}"));
            c.write_dir(&dir).expect("write the manifest directory");
            drop(c);
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .expect("read dir")
                .flatten()
                .map(|e| e.path())
                .collect();
            files.sort();
            let case = Case {
                name: format!("manifests, {pods} pods / {workloads} workloads"),
                pods,
                targets: targets.clone(),
                files,
                definitions: scratch.dir(&format!("definitions-manifests-{pods}")),
                baseline_rss: empty_dir_rss,
                o: &o,
            };
            progress!("{}: starting (load average {})", case.name, load_average());
            let mut k = Kartograf::spawn(&Source::Manifests(dir.clone()), &case.definitions);
            let channel = startup_and_idle(&mut k, &case, &mut table).await;
            if o.phase("ui") {
                web_view(&mut k, &case, &mut table).await;
            }
            if o.phase("events") {
                let (files, rate, secs) = (case.files.clone(), o.events, o.event_secs);
                under_events(
                    &mut k,
                    &case,
                    "workload files rewritten, each flipping Ready of all its pods",
                    &mut table,
                    move || file_events(files, rate, secs),
                )
                .await;
            }
            disruptions(&mut k, &channel, &case, None, &mut table).await;
            if o.phase("hostile") {
                hostile(&mut k, &channel, &case, &mut table).await;
            }
            table.info(&case.name, "load average at the end", load_average());
            drop(k);
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            drop(c);
        }
        if o.kube {
            progress!("fake API server: generating and loading {pods} pods");
            let t = Instant::now();
            let fake = FakeProcess::start(pods);
            progress!(
                "fake API server: {} objects on port {} after {:.1} s",
                fake.objects,
                fake.port,
                t.elapsed().as_secs_f64()
            );
            let case = Case {
                name: format!("fake API server, {pods} pods / {workloads} workloads"),
                pods,
                targets: targets.clone(),
                files: Vec::new(),
                definitions: scratch.dir(&format!("definitions-kube-{pods}")),
                baseline_rss: empty_kube_rss,
                o: &o,
            };
            let kubeconfig = fake.kubeconfig(&scratch.dir(&format!("kube-{pods}")));
            progress!("{}: starting (load average {})", case.name, load_average());
            let mut k = Kartograf::spawn(&Source::Kube { kubeconfig }, &case.definitions);
            let channel = startup_and_idle(&mut k, &case, &mut table).await;
            let (rate, secs) = (o.events, o.event_secs.as_secs_f64());
            // The fake's stdin/stdout are used from the blocking event task, then given back.
            let shared = Arc::new(Mutex::new(fake));
            let driver = shared.clone();
            let events = under_events(
                &mut k,
                &case,
                "Ready flips through the fake API server's pod watch",
                &mut table,
                move || {
                    let mut f = driver.lock().unwrap_or_else(|e| e.into_inner());
                    let reply = f.command(&format!("events {rate} {secs}"));
                    reply
                        .strip_prefix("DONE ")
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0)
                },
            );
            if o.phase("events") {
                events.await;
            } else {
                drop(events);
            }
            let mut fake = Arc::try_unwrap(shared)
                .ok()
                .expect("the event task ended")
                .into_inner()
                .unwrap_or_else(|e| e.into_inner());
            disruptions(&mut k, &channel, &case, Some(&mut fake), &mut table).await;
            table.info(&case.name, "load average at the end", load_average());
            drop(k);
            drop(fake);
        }
    }
    table
}

fn main() {
    if let Some(pods) = std::env::var_os(FAKE_ENV) {
        let pods = pods.to_str().and_then(|p| p.parse().ok()).unwrap_or(0);
        fake_apiserver_main(pods);
        return;
    }
    if let Some(spec) = std::env::var_os(WRITE_ENV) {
        let spec = spec.to_string_lossy().into_owned();
        let (pods, dir) = spec
            .split_once(':')
            .and_then(|(p, d)| Some((p.parse::<usize>().ok()?, PathBuf::from(d))))
            .unwrap_or_else(|| panic!("{WRITE_ENV} must be PODS:DIR, not {spec:?}"));
        cluster(pods)
            .write_dir(&dir)
            .expect("write the manifest directory");
        return;
    }
    START.get_or_init(Instant::now);
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let judged = o.bench;
    let table = rt.block_on(run(o));
    table.print(judged);
}
