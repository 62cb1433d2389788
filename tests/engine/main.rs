//! Engine tests: expressions, definitions, resolution and the offline CLI, in one test
//! binary (one link) as the build guide asks.

mod budget;
mod budget_holes;
mod catalog;
mod cli;
mod common;
mod definitions;
mod deploy;
mod deploy_shapes;
mod drift;
mod fuzz;
mod gangs;
mod jq_compat;
mod malformed;
mod memo;
mod resolution;
mod safety;

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
