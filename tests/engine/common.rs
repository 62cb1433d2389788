//! Shared helpers: the embedded catalog, fixtures, graph lookups, running the binary.

use kartograf::definition::Catalog;
use kartograf::expr::Limits;
use kartograf::proto::v1 as pb;
use kartograf::resolve::Resolution;
use kartograf::source::offline::Snapshot;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The embedded catalog, compiled once per test binary.
pub fn catalog() -> &'static Catalog {
    static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    CATALOG.get_or_init(|| Catalog::embedded().expect("embedded catalog is valid"))
}

/// Path of a fixture under `tests/fixtures/engine`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/engine")
        .join(name)
}

/// Resolves `target` (or the only root) from one fixture file with `catalog`.
pub fn resolve_with(catalog: &Catalog, file: &str, target: Option<&str>) -> Resolution {
    let snapshot = Snapshot::load(&[fixture(file)], Limits::default()).expect("fixture loads");
    let root = snapshot
        .select(catalog, target, None)
        .expect("workload found");
    snapshot
        .resolve(
            catalog,
            &root,
            Some(Instant::now() + Duration::from_secs(10)),
        )
        .expect("resolves")
}

/// Resolves with the embedded catalog.
pub fn resolve(file: &str, target: Option<&str>) -> Resolution {
    resolve_with(catalog(), file, target)
}

/// Depth-first search for a component by name.
pub fn component<'a>(w: &'a pb::Workload, name: &str) -> &'a pb::Component {
    fn find<'a>(cs: &'a [pb::Component], name: &str) -> Option<&'a pb::Component> {
        for c in cs {
            if c.name == name {
                return Some(c);
            }
            for i in &c.instances {
                if let Some(found) = find(&i.children, name) {
                    return Some(found);
                }
            }
        }
        None
    }
    find(&w.components, name).unwrap_or_else(|| panic!("no component {name}"))
}

/// The instance `id` (and `replica`) of component `name`.
pub fn instance<'a>(w: &'a pb::Workload, name: &str, id: &str, replica: &str) -> &'a pb::Instance {
    component(w, name)
        .instances
        .iter()
        .find(|i| i.id == id && i.replica == replica)
        .unwrap_or_else(|| panic!("no instance {name}/{id}[{replica}]"))
}

/// Pod counts of a workload.
pub fn pods(w: &pb::Workload) -> pb::PodCounts {
    w.pods.expect("pod counts")
}

/// (desired, held) GPUs of a workload.
pub fn gpus(w: &pb::Workload) -> (f64, f64) {
    let t = w.totals.clone().expect("totals");
    (
        t.desired.expect("desired").gpus,
        t.current.expect("current").gpus,
    )
}

/// The primary phase.
pub fn phase(w: &pb::Workload) -> pb::Phase {
    pb::Phase::try_from(w.status.as_ref().expect("status").phase).expect("known phase")
}

/// Diagnostic codes of a graph.
pub fn codes(w: &pb::Workload) -> Vec<String> {
    w.diagnostics.iter().map(|d| d.code.clone()).collect()
}

/// Runs the `kartograf` binary.
pub fn kartograf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("binary runs")
}

/// Writes `text` to a fresh file in a temp folder and returns its path.
pub fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "kartograf-test-{}-{}",
        std::process::id(),
        unique()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp file");
    path
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
