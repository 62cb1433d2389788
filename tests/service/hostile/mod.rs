//! The hostile suite (issue 27): the real `kartograf` binary as a process, fed what an
//! attacker controls (objects, manifest files, definition folders, upstreams, token files,
//! connections). Every case asserts that the process stays up and that its memory, as the OS
//! reports it, stays under a bound.
//!
//! Each area has a module of its own; they share [`Served`].

#![allow(dead_code)]

mod aggregator;
mod doors;
mod files;
mod net;
mod patch;
mod resolve;
mod weak_spots;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::ports::free_port;

/// A fresh, empty directory for one case.
pub fn scratch(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "kartograf-hostile-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// The `kartograf` binary the cases run: this build's, or the one `KARTOGRAF_BIN` names (a
/// release build, for the figures in BENCHMARKS.md).
pub fn binary() -> String {
    std::env::var("KARTOGRAF_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kartograf").to_owned())
}

/// `kartograf serve` as a child process on loopback ports of its own.
pub struct Served {
    child: Child,
    /// The gRPC address (`http://127.0.0.1:PORT`).
    pub grpc: String,
    /// The admin listener.
    pub admin: SocketAddr,
    stderr: PathBuf,
}

impl Served {
    /// Starts `kartograf serve ARGS` (listeners added) and waits until `/livez` answers.
    pub fn start(args: &[&str]) -> Served {
        Served::start_with_env(args, &[])
    }

    /// As [`Served::start`], with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Served {
        let grpc_port = free_port();
        let admin_port = free_port();
        let stderr = scratch("stderr").join("serve.log");
        let log = std::fs::File::create(&stderr).expect("log file");
        let child = Command::new(binary())
            .arg("serve")
            .args(args)
            .args(["--listen", &format!("127.0.0.1:{grpc_port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
            .envs(env.iter().copied())
            .env_remove("KARTOGRAF_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kartograf serve");
        let mut served = Served {
            child,
            grpc: format!("http://127.0.0.1:{grpc_port}"),
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
            stderr,
        };
        let until = Instant::now() + Duration::from_secs(60);
        while served.get("/livez").0 != 200 {
            assert!(
                served.running(),
                "kartograf serve exited at start:\n{}",
                served.log()
            );
            assert!(Instant::now() < until, "no /livez within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        served
    }

    /// Waits until `/readyz` answers 200 (the first full load is done).
    pub fn wait_ready(&mut self, within: Duration) {
        let until = Instant::now() + within;
        while self.get("/readyz").0 != 200 {
            assert!(self.running(), "exited before ready:\n{}", self.log());
            assert!(Instant::now() < until, "not ready within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has not exited.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Resident memory now, in bytes (from `/proc`).
    pub fn rss(&self) -> u64 {
        crate::process::status_kib(&self.pid().to_string(), "VmRSS:") * 1024
    }

    /// The most resident memory the process ever had, in bytes (from `/proc`).
    pub fn peak_rss(&self) -> u64 {
        crate::process::status_kib(&self.pid().to_string(), "VmHWM:") * 1024
    }

    /// A plain HTTP/1.1 GET on the admin listener: (status, body); (0, "") when it did not
    /// answer within 5 s.
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(self.admin, path, Duration::from_secs(5))
    }

    /// Asserts that the process is up, that `/livez` answers, and that it never held more
    /// than `max_bytes` of resident memory.
    pub fn assert_up_within(&mut self, max_bytes: u64) {
        assert!(
            self.running(),
            "kartograf serve exited:\n{}",
            tail(&self.log())
        );
        let (status, _) = self.get("/livez");
        assert_eq!(status, 200, "/livez did not answer:\n{}", tail(&self.log()));
        let peak = self.peak_rss();
        assert!(
            peak <= max_bytes,
            "peak RSS {} MiB over the bound of {} MiB",
            peak >> 20,
            max_bytes >> 20
        );
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last 4 KiB of a log, for failure messages.
pub fn tail(log: &str) -> &str {
    let mut at = log.len().saturating_sub(4096);
    while !log.is_char_boundary(at) {
        at += 1;
    }
    &log[at..]
}

/// A plain HTTP/1.1 GET: (status, body); (0, "") on any failure or after `timeout`.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, timeout) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut response = Vec::new();
    let _ = s.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Runs `kartograf ARGS` to the end (with a time limit): (exit code, stdout + stderr, peak
/// RSS in bytes). The code is -1 when it was killed at the limit.
pub fn run_cli(args: &[&str], limit: Duration) -> (i32, String, u64) {
    let out_path = scratch("cli").join("out.log");
    let out = std::fs::File::create(&out_path).expect("log");
    let err = out.try_clone().expect("log");
    let mut child = Command::new(binary())
        .args(args)
        .env_remove("KARTOGRAF_TOKEN")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("run kartograf");
    let pid = child.id().to_string();
    let until = Instant::now() + limit;
    let mut peak = 0;
    let code = loop {
        peak = peak.max(crate::process::status_kib(&pid, "VmHWM:") * 1024);
        match child.try_wait() {
            Ok(Some(status)) => break status.code().unwrap_or(-1),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break -1;
            }
        }
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    (code, text, peak)
}

/// Writes `text` to `dir/name` through a temporary file and a rename (as a careful writer
/// does), so a watcher never reads it half written.
pub fn write_atomically(dir: &Path, name: &str, text: &[u8]) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, dir.join(name)).expect("rename");
}
