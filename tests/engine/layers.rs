//! The README's layer list is the import rule of `src/`: each module imports only the modules
//! listed above it. This test reads that list from README.md ("Architecture") and every
//! source file (comments and `#[cfg(test)] mod tests` blocks aside, as tests may reach any
//! layer), and names every arrow that points up, every module missing from the list, and
//! every use of the index above it besides the Store seam (`server/store.rs`) and the
//! metrics that read its sizes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The modules of README's `src/` list, lowest first.
fn readme_layers() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let arch = readme
        .split("## Architecture")
        .nth(1)
        .expect("README has an Architecture section");
    let block = arch
        .split("```")
        .nth(1)
        .expect("a code block under Architecture");
    let mut layers = Vec::new();
    let mut in_src = false;
    for line in block.lines() {
        if line.starts_with("src/") {
            in_src = true;
            continue;
        }
        if !in_src {
            continue;
        }
        if !line.starts_with(' ') {
            break;
        }
        // `  name/  text` or `  name.rs  text`; continuation lines start deeper.
        let Some(rest) = line.strip_prefix("  ") else {
            continue;
        };
        if rest.starts_with(' ') {
            continue;
        }
        let token = rest.split_whitespace().next().unwrap_or("");
        let name = token
            .strip_suffix('/')
            .or_else(|| token.strip_suffix(".rs"))
            .unwrap_or_else(|| panic!("README layer line names no module: {line:?}"));
        layers.push(name.to_owned());
    }
    layers
}

/// The top-level modules `src/lib.rs` declares.
fn declared_modules() -> Vec<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without line comments and without its test module.
fn code_of(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::name` a piece of code refers to.
fn crate_refs(code: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let preceded_by_ident = rest[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[i + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() {
            refs.push(name);
        }
    }
    refs
}

/// The top-level module of a file below `src/`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("below src");
    let first = rel.components().next().expect("a component");
    let first = first.as_os_str().to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

#[test]
fn every_import_points_down_the_readme_layer_list() {
    let layers = readme_layers();
    assert!(layers.len() > 10, "README layer list not found: {layers:?}");
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    let mut problems = Vec::new();
    for module in declared_modules() {
        if !rank.contains_key(module.as_str()) {
            problems.push(format!("module {module} is not in README's layer list"));
        }
    }
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 50, "src files not found");
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(&own) = rank.get(module.as_str()) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable");
        let rel = file
            .strip_prefix(root())
            .expect("below root")
            .display()
            .to_string();
        let code = code_of(&text);
        let mut seen = std::collections::BTreeSet::new();
        for target in crate_refs(&code) {
            if target == module || !seen.insert(target.clone()) {
                continue;
            }
            match rank.get(target.as_str()) {
                Some(&t) if t > own => problems.push(format!(
                    "{rel}: {module} imports {target}, a layer above it"
                )),
                Some(_) => {}
                None => problems.push(format!("{rel}: imports crate::{target}, not a module")),
            }
            let reads_index_from_above = target == "index"
                && ["server", "aggregate", "webhook", "admin"].contains(&module.as_str())
                && rel != "src/server/store.rs";
            if reads_index_from_above {
                problems.push(format!(
                    "{rel}: {module} reads the index directly; readers use the board or the Store seam (server/store.rs)"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "layer rule broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_layer_check_sees_an_upward_import() {
    // The scanner itself: a reference in code counts, one in a comment or a test module
    // does not, and `other_crate::x` is not `crate::x`.
    let code = code_of(
        "use crate::server::Shared; // crate::cli\nfn f() { my_crate::admin::x(); }\n#[cfg(test)]\nmod tests { use crate::cli; }\n",
    );
    assert_eq!(crate_refs(&code), vec!["server".to_owned()]);
}
