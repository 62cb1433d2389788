//! Workload objects derived from the demo cluster, shared by the engine and service tests.

#![allow(dead_code)]

/// The demo LeaderWorkerSet (replicas 2, size 2, 8 GPUs a pod) as YAML, named `name` (uid
/// `{name}-uid`) with `replicas` replicas.
pub fn lws(name: &str, replicas: &str) -> String {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/cluster/leaderworkerset.yaml"),
    )
    .expect("demo LWS");
    let root = text.split("\n---\n").nth(1).expect("the LWS document");
    root.replacen(
        "\n  replicas: 2\n",
        &format!("\n  replicas: {replicas}\n"),
        1,
    )
    .replace("name: vllm-70b\n", &format!("name: {name}\n"))
    .replace(
        "uid: 7a000042-0000-4000-8000-000000000001",
        &format!("uid: {name}-uid"),
    )
}

/// Every realistic snapshot file (`tests/catalog/<framework>/`, `examples/cluster/`; YAML
/// and JSON, not the `.expect.yaml` expectations), sorted.
pub fn snapshot_files() -> Vec<std::path::PathBuf> {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut stack = vec![root.join("tests/catalog"), root.join("examples/cluster")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("readable").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "json")
                && !p.to_string_lossy().ends_with(".expect.yaml")
            {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}
