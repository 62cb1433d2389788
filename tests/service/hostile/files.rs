//! Files an attacker controls: FIFOs, device and `/proc` links and link loops in the folders
//! every command reads, and a token file rewritten in place.

use super::{Served, run_cli, scratch, tail};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::definitions_client::DefinitionsClient;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Peak memory a CLI command or the server may reach in these cases.
const MAX_RSS: u64 = 256 << 20;

/// A command that hangs or reads forever is killed at this limit (and the case fails).
const LIMIT: Duration = Duration::from_secs(20);

fn karta(name: &str, kind: &str) -> String {
    format!(
        "apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {{name: {name}}}\nspec:\n  structureDefinition:\n    rootComponent:\n      name: root\n      kind: {{group: example.com, version: v1, kind: {kind}}}\n      statusDefinition:\n        statusMappings:\n          running: [{{byExpression: {{expression: 'true', expectedResult: 'true'}}}}]\n"
    )
}

/// Adds to `dir`: a FIFO, a link to `/dev/zero`, and two links to `dir` itself, all with
/// manifest names.
fn poison(dir: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("fifo.yaml"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    symlink("/dev/zero", dir.join("zero.yaml")).unwrap();
    symlink(".", dir.join("self-a")).unwrap();
    symlink(".", dir.join("self-b")).unwrap();
}

/// Adds to `dir` files that hold what must never be quoted: links to `/proc/self/environ`
/// and `/proc/self/pagemap` (both say they are empty) and a binary file holding `secret`.
fn secrets(dir: &Path, secret: &str) {
    symlink("/proc/self/pagemap", dir.join("pagemap.json")).unwrap();
    symlink("/proc/self/environ", dir.join("environ.yaml")).unwrap();
    std::fs::write(dir.join("binary.yaml"), format!("a: {secret}\0\0")).unwrap();
}

fn definitions_dir() -> PathBuf {
    let dir = scratch("defs");
    std::fs::write(dir.join("widget.yaml"), karta("widget", "Widget")).unwrap();
    poison(&dir);
    secrets(&dir, "secret-4711");
    dir
}

/// Runs a command and asserts it ended by itself, in time and within [`MAX_RSS`], naming
/// the FIFO and the device; returns its exit code and output.
fn finishes(args: &[&str]) -> (i32, String) {
    let started = Instant::now();
    let (code, out, peak) = run_cli(args, LIMIT);
    assert_ne!(
        code,
        -1,
        "{args:?} did not finish within {LIMIT:?}:\n{}",
        tail(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{args:?} took {:?}",
        started.elapsed()
    );
    assert!(peak <= MAX_RSS, "{args:?}: peak RSS {} MiB", peak >> 20);
    assert!(
        out.contains("fifo.yaml") && out.contains("FIFO"),
        "{args:?}:\n{out}"
    );
    assert!(
        out.contains("zero.yaml") && out.contains("device"),
        "{args:?}:\n{out}"
    );
    (code, out)
}

#[test]
fn cli_commands_finish_on_a_poisoned_definitions_folder() {
    let defs = definitions_dir();
    let defs = defs.to_str().unwrap();
    let manifests = scratch("job");
    std::fs::write(
        manifests.join("job.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train, namespace: ml, uid: j-1}\nspec: {parallelism: 1}\n",
    )
    .unwrap();
    let manifests = manifests.to_str().unwrap();
    for args in [
        &["check", defs][..],
        &["definitions", "-d", defs],
        &["resolve", "-f", manifests, "-d", defs],
    ] {
        let (code, out) = finishes(args);
        assert_eq!(code, 1, "{out}");
        // Neither the environment nor a binary file is quoted.
        assert!(
            out.contains("environ.yaml") && out.contains("more than its size says"),
            "{out}"
        );
        assert!(
            out.contains("binary.yaml") && out.contains("not a text file"),
            "{out}"
        );
        assert!(
            !out.contains("PATH=") && !out.contains("secret-4711"),
            "{out}"
        );
    }
    // The aggregator reads its --definitions folder at start: it stops with the problems
    // listed instead of hanging.
    let listen = format!("127.0.0.1:{}", super::free_port());
    let admin = format!("127.0.0.1:{}", super::free_port());
    let (code, out) = finishes(&[
        "serve",
        "--upstream",
        "a=http://127.0.0.1:9",
        "--definitions",
        defs,
        "--listen",
        &listen,
        "--admin-listen",
        &admin,
    ]);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn resolve_finishes_on_a_poisoned_manifest_folder() {
    let dir = scratch("snapshot");
    std::fs::write(
        dir.join("job.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train, namespace: ml, uid: j-1}\nspec: {parallelism: 1}\n",
    )
    .unwrap();
    poison(&dir);
    let dir = dir.to_str().unwrap();
    // The special files are warnings; the workload still resolves.
    let (code, out) = finishes(&["resolve", "-f", dir, "job/train"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("train"), "{out}");
}

/// A GET on the admin port with a bearer token: the status.
fn get_with_token(addr: SocketAddr, path: &str, token: &str) -> u16 {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut response = Vec::new();
    let _ = s.read_to_end(&mut response);
    String::from_utf8_lossy(&response)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_half_written_token_file_grants_no_scope() {
    let dir = scratch("tokens");
    let manifests = scratch("tokens-manifests");
    let tokens = dir.join("tokens");
    let sched = "sched-token-0123456789";
    let prom = "prom-token-0123456789";
    std::fs::write(
        &tokens,
        format!("{sched} sched resolver\n{prom} prom metrics\n"),
    )
    .unwrap();
    let mut served = Served::start(&[
        "--manifests",
        manifests.to_str().unwrap(),
        "--auth-tokens",
        tokens.to_str().unwrap(),
        "--metrics-auth",
    ]);
    assert_eq!(get_with_token(served.admin, "/metrics", prom), 200);
    assert_eq!(get_with_token(served.admin, "/metrics", sched), 403);
    // Rewritten in place and caught half way: the scheduler's line has lost its scopes.
    std::fs::write(&tokens, format!("{sched} sched")).unwrap();
    // The file is re-read every second: the rejection is logged, and nothing changed.
    let until = Instant::now() + Duration::from_secs(10);
    while !served.log().contains("token file rejected") {
        assert!(
            Instant::now() < until,
            "no rejection logged:\n{}",
            tail(&served.log())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get_with_token(served.admin, "/metrics", sched), 403);
    assert_eq!(get_with_token(served.admin, "/metrics", prom), 200);
    served.assert_up_within(MAX_RSS);
}

#[test]
fn a_proc_environ_link_does_not_leak_into_list_sources() {
    const CANARY: &str = "canary-value-4711";
    let dir = scratch("environ");
    std::fs::write(
        dir.join("job.yaml"),
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: train, namespace: ml, uid: j-1}\n",
    )
    .unwrap();
    poison(&dir);
    secrets(&dir, CANARY);
    let mut served = Served::start_with_env(
        &["--manifests", dir.to_str().unwrap()],
        &[("KARTOGRAF_HOSTILE_CANARY", CANARY)],
    );
    served.wait_ready(Duration::from_secs(20));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let problems: Vec<pb::SourceProblem> = runtime.block_on(async {
        let mut client = DefinitionsClient::connect(served.grpc.clone())
            .await
            .expect("connects");
        client
            .list_sources(pb::ListSourcesRequest {})
            .await
            .expect("ListSources")
            .into_inner()
            .sources
            .into_iter()
            .flat_map(|s| s.problems)
            .collect()
    });
    let all = format!("{problems:?}");
    assert!(!all.contains(CANARY) && !all.contains("PATH="), "{all}");
    let about = |name: &str| {
        problems
            .iter()
            .find(|p| p.path.ends_with(name) || p.message.contains(name))
            .unwrap_or_else(|| panic!("no problem about {name}: {all}"))
            .message
            .clone()
    };
    assert!(
        about("environ.yaml").contains("more than its size says"),
        "{all}"
    );
    assert!(about("binary.yaml").contains("not a text file"), "{all}");
    assert!(about("fifo.yaml").contains("FIFO"), "{all}");
    assert!(about("zero.yaml").contains("device"), "{all}");
    assert!(!about("pagemap.json").is_empty());
    served.assert_up_within(MAX_RSS);
}
