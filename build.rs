//! Compiles `proto/kartograf/v1/*.proto` with protox (pure Rust, no system protoc), generates
//! prost messages + tonic services, proto3-JSON serde impls (pbjson) and the reflection
//! descriptor set; embeds every `catalog/*.yaml` file.

use protox::prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=catalog");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(["kartograf/v1/kartograf.proto"], ["proto"])?;
    let descriptor = fds.encode_to_vec();
    std::fs::write(out_dir.join("kartograf_descriptor.bin"), &descriptor)?;
    tonic_prost_build::configure()
        .btree_map(".")
        .compile_fds(fds)?;
    pbjson_build::Builder::new()
        .register_descriptors(&descriptor)?
        .btree_map(["."])
        .build(&[".kartograf.v1"])?;
    embed_catalog(&out_dir)?;
    Ok(())
}

/// Writes `embedded_catalog.rs`: `FILES`, the name and text of every catalog file, sorted.
fn embed_catalog(out_dir: &std::path::Path) -> std::io::Result<()> {
    let dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join("catalog");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            )
        })
        .collect();
    files.sort();
    let mut code = String::from(
        "/// Embedded catalog files: (name, text).\npub const FILES: &[(&str, &str)] = &[\n",
    );
    for file in files {
        println!("cargo:rerun-if-changed={}", file.display());
        let name = format!(
            "catalog/{}",
            file.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
        );
        code.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            file.display().to_string()
        ));
    }
    code.push_str("];\n");
    std::fs::write(out_dir.join("embedded_catalog.rs"), code)
}
