//! The README's layer list is the import rule of `src/`: each module imports only the modules
//! listed above it. This test reads that list from README.md ("Architecture") and every
//! source file (comments and `#[cfg(test)] mod tests` blocks aside, as tests may reach any
//! layer), and names every arrow that points up, every module missing from the list, and
//! every use of the index above it besides the Store seam (`server/store.rs`) and the
//! metrics that read its sizes; and, inside every folder, every import circle between its
//! files (`cli/client.rs` ⇄ `cli/gangs.rs` was one). It also checks the "one door each" rules:
//! `kube::` only in `source/`, `cli/`, `metrics/` and `main.rs`; no `static` state in the
//! folders of [`STATELESS`]; one caller of `eval_with` outside `expr/`.

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

/// The sibling modules a file of one folder refers to: `super::name` (also inside
/// `super::{…}`) and `crate::<folder path>::name`, for each `name` among `siblings`.
fn sibling_refs(code: &str, folder: &str, siblings: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    let prefixes = ["super::".to_owned(), format!("crate::{folder}::")];
    for prefix in &prefixes {
        let mut rest = code;
        while let Some(i) = rest.find(prefix.as_str()) {
            let preceded_by_ident = rest[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            rest = &rest[i + prefix.len()..];
            if preceded_by_ident {
                continue;
            }
            let group = match rest.strip_prefix('{') {
                // `super::{a, b::X}`: each item's first name, up to the group's closing brace.
                Some(inner) => {
                    let mut depth = 1;
                    let end = inner
                        .char_indices()
                        .find(|(_, c)| {
                            depth += match c {
                                '{' => 1,
                                '}' => -1,
                                _ => 0,
                            };
                            depth == 0
                        })
                        .map_or(inner.len(), |(i, _)| i);
                    let mut items = Vec::new();
                    let mut depth = 0;
                    let mut item = String::new();
                    for c in inner[..end].chars() {
                        match c {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                            _ => {}
                        }
                        if depth == 0 && c != ',' {
                            item.push(c);
                        }
                    }
                    items.push(item);
                    items
                }
                None => vec![rest.to_owned()],
            };
            for item in group {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if siblings.contains(&name) && !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// The import circles among the files of one folder (each file a node, `mod.rs` aside: the
/// folder itself), as `a -> b -> a`.
fn circles(edges: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    fn visit(
        at: &str,
        edges: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
        found: &mut Vec<String>,
    ) {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut circle = path[i..].to_vec();
            circle.push(at.to_owned());
            found.push(circle.join(" -> "));
            return;
        }
        if !done.insert(at.to_owned()) {
            return;
        }
        path.push(at.to_owned());
        for next in edges.get(at).into_iter().flatten() {
            visit(next, edges, path, done, found);
        }
        path.pop();
    }
    let mut found = Vec::new();
    let mut done = std::collections::BTreeSet::new();
    for start in edges.keys() {
        visit(start, edges, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

/// The import graph of the files directly in `dir` (a folder below `src/` named `folder`,
/// e.g. `cli` or `source/kube`).
fn folder_graph(dir: &Path, folder: &str) -> BTreeMap<String, Vec<String>> {
    let mut siblings = Vec::new();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("folder readable").flatten() {
        let path = entry.path();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            siblings.push(name);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            siblings.push(name.clone());
            files.push((name, path));
        }
    }
    let folder = folder.replace('/', "::");
    files
        .into_iter()
        .map(|(name, path)| {
            let code = code_of(&std::fs::read_to_string(&path).expect("readable"));
            let refs = sibling_refs(&code, &folder, &siblings)
                .into_iter()
                .filter(|r| *r != name)
                .collect();
            (name, refs)
        })
        .collect()
}

#[test]
fn no_import_circle_inside_a_folder() {
    let src = root().join("src");
    let mut dirs = vec![src.clone()];
    let mut problems = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable").flatten() {
            if entry.path().is_dir() {
                dirs.push(entry.path());
            }
        }
        if dir == src {
            continue;
        }
        let folder = dir
            .strip_prefix(&src)
            .expect("below src")
            .to_string_lossy()
            .into_owned();
        for circle in circles(&folder_graph(&dir, &folder)) {
            problems.push(format!("src/{folder}: import circle {circle}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_circle_check_sees_a_circle_between_two_files() {
    let siblings = ["client".to_owned(), "gangs".to_owned(), "tree".to_owned()];
    let client = code_of("use super::{EXIT, output, tree};\nfn f(a: &super::gangs::Args) {}\n");
    let gangs = code_of("pub server: crate::cli::client::ServerArgs,\n// super::tree\n");
    assert_eq!(
        sibling_refs(&client, "cli", &siblings),
        vec!["tree".to_owned(), "gangs".to_owned()]
    );
    assert_eq!(
        sibling_refs(&gangs, "cli", &siblings),
        vec!["client".to_owned()]
    );
    let edges: BTreeMap<String, Vec<String>> = [
        ("client".to_owned(), sibling_refs(&client, "cli", &siblings)),
        ("gangs".to_owned(), sibling_refs(&gangs, "cli", &siblings)),
        ("tree".to_owned(), Vec::new()),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        circles(&edges),
        vec!["client -> gangs -> client".to_owned()]
    );
    // Without the arrow back there is none.
    let mut open = edges.clone();
    open.insert("gangs".to_owned(), Vec::new());
    assert!(circles(&open).is_empty());
}

/// The files below `src/` (paths relative to the crate root, `/`-separated) with their code
/// ([`code_of`]).
fn src_code() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let rel = f
                .strip_prefix(root())
                .expect("below root")
                .to_string_lossy()
                .replace('\\', "/");
            let code = code_of(&std::fs::read_to_string(&f).expect("readable"));
            (rel, code)
        })
        .collect()
}

/// Whether `code` names the `kube` crate (`kube::…`, not `source::kube::…`).
fn names_kube(code: &str) -> bool {
    code.match_indices("kube::").any(|(i, _)| {
        !code[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    })
}

/// The `static` items (and `thread_local!` blocks) of `code`, by line: `static NAME`.
fn static_items(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in code.lines() {
        let mut l = line.trim_start();
        for vis in ["pub(crate) ", "pub(super) ", "pub "] {
            l = l.strip_prefix(vis).unwrap_or(l);
        }
        if let Some(rest) = l.strip_prefix("static ") {
            let rest = rest.strip_prefix("mut ").unwrap_or(rest);
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(format!("static {name}"));
        } else if l.starts_with("thread_local!") {
            found.push("thread_local!".to_owned());
        }
    }
    found
}

#[test]
fn the_kubernetes_client_is_named_only_by_sources_cli_and_metrics() {
    let allowed = ["src/source/", "src/cli/", "src/metrics/", "src/main.rs"];
    let problems: Vec<String> = src_code()
        .into_iter()
        .filter(|(rel, _)| !allowed.iter().any(|a| rel.starts_with(a)))
        .filter(|(_, code)| names_kube(code))
        .map(|(rel, _)| format!("{rel} names kube:: (only {allowed:?} may)"))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Folders that keep no process-wide state: what they keep belongs to a value passed in.
const STATELESS: &[&str] = &[
    "src/gangs/",
    "src/ui/",
    "src/webhook/",
    "src/definition/",
    "src/karta/",
    "src/board/",
    "src/index/",
];

#[test]
fn engine_folders_hold_no_static_state() {
    let mut problems = Vec::new();
    for (rel, code) in src_code() {
        if !STATELESS.iter().any(|f| rel.starts_with(f)) {
            continue;
        }
        for item in static_items(&code) {
            problems.push(format!(
                "{rel}: {item} (state belongs to a value passed in)"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn eval_with_is_called_from_one_file_outside_expr() {
    let callers: Vec<String> = src_code()
        .into_iter()
        .filter(|(rel, code)| !rel.starts_with("src/expr/") && code.contains(".eval_with("))
        .map(|(rel, _)| rel)
        .collect();
    assert_eq!(callers, vec!["src/resolve/evaluate.rs".to_owned()]);
}

#[test]
fn the_state_and_kube_checks_see_what_they_look_for() {
    assert!(names_kube("use kube::api::Api;"));
    assert!(names_kube("fn f(c: kube::Client) {}"));
    assert!(!names_kube("crate::source::kube::karta::status::run()"));
    assert!(!names_kube("my_kube::x()"));
    assert_eq!(
        static_items(
            "static A: u8 = 0;\n    pub(crate) static mut B: u8 = 0;\nfn f() -> &'static str { \"\" }\nthread_local! {}\n"
        ),
        vec!["static A", "static B", "thread_local!"]
    );
}
