//! The test process and its children as the OS reports them, and running one test of this
//! binary in a process of its own.

#![allow(dead_code)]

/// A `/proc/<pid>/status` field (`"VmRSS:"`, `"VmHWM:"`) in KiB; `pid` is a process id or
/// `"self"`. 0 where /proc is not available.
pub fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs the ignored test `name` of this test binary in a process of its own (for tests that
/// change process-wide state or measure the process) and fails unless it passes.
pub fn run_alone(name: &str) {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["--ignored", "--exact", name, "--test-threads", "1"])
        .output()
        .expect("runs the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} failed in its own process:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
