//! Writes a synthetic cluster (see `benches/synth`) as a manifest directory, one file per
//! workload, for `kartograf serve --manifests DIR` or `kartograf resolve -f DIR --all`.
//!
//! `cargo run --release --example synth -- --workloads 1000 --pods 10000 --seed 1 --out DIR`
//! (`--templates DIR` reads the templates from another directory, e.g. to try one alone).

#[path = "../benches/synth/mod.rs"]
mod synth;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let number = |name: &str, default: u64| -> Result<u64, String> {
        value(name).map_or(Ok(default), |v| {
            v.parse().map_err(|e| format!("{name} {v}: {e}"))
        })
    };
    let spec = synth::Spec {
        workloads: number("--workloads", 1000)? as usize,
        pods: number("--pods", 10_000)? as usize,
        seed: number("--seed", 1)?,
    };
    let out = value("--out").ok_or("--out DIR is required")?;
    let dir = value("--templates").map_or_else(synth::template_dir, std::path::PathBuf::from);
    let templates = synth::load_templates(&dir)?;
    let cluster = synth::generate(&templates, spec);
    cluster
        .write_dir(std::path::Path::new(&out))
        .map_err(|e| format!("{out}: {e}"))?;
    println!(
        "{} workloads, {} intermediates, {} pods written to {out}",
        cluster.roots.len(),
        cluster.intermediates.len(),
        cluster.pods.len()
    );
    Ok(())
}
