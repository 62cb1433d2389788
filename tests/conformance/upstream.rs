//! Workload Map's own definitions for the recorded kinds (`definitions/karta`), loaded
//! unchanged through kartograf's loader and validator.

use kartograf::definition::catalog::{Catalog, compile_all};
use kartograf::definition::{Definition, DefinitionError, load};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directory holding upstream's definition files.
pub fn definitions_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/definitions/karta")
}

/// Every upstream definition file, parsed and compiled; with the errors of those that fail.
pub fn load_all() -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
    load_annotated(None)
}

/// [`load_all`], each definition annotated with `kartograf.io/phase-precedence: VALUE` in
/// memory (the files stay unchanged).
pub fn load_annotated(precedence: Option<&str>) -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
    load_from(&definitions_root(), precedence)
}

/// The directory holding the definitions Workload Map's e2e recordings name
/// (`definitions/workload-map`, from dsx-ai-factory/workload-map).
pub fn workload_map_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/definitions/workload-map")
}

/// Every definition file below `root`, parsed and compiled, each annotated with
/// `kartograf.io/phase-precedence: VALUE` in memory when `precedence` is given.
pub fn load_from(
    root: &Path,
    precedence: Option<&str>,
) -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
    let (files, problems) = load::definition_files(root);
    assert!(problems.is_empty(), "{}: {problems:?}", root.display());
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for file in &files {
        let (mut p, e) = load::parse_file(file);
        if let Some(value) = precedence {
            for one in &mut p {
                one.karta.metadata.annotations.insert(
                    kartograf::definition::plan::PHASE_PRECEDENCE.to_owned(),
                    value.to_owned(),
                );
            }
        }
        parsed.extend(p);
        errors.extend(e);
    }
    let (defs, e) = compile_all(parsed, "upstream", Default::default());
    errors.extend(e);
    (defs, errors)
}

/// A catalog of upstream's definitions (every one must load).
pub fn catalog() -> &'static Catalog {
    static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    CATALOG.get_or_init(|| {
        let (defs, errors) = load_all();
        assert!(
            errors.is_empty(),
            "upstream definitions refused: {errors:#?}"
        );
        Catalog::from_layers(1, [defs])
    })
}

/// A catalog of upstream's definitions with Workload Map's phase precedence.
pub fn catalog_workload_map_phase() -> &'static Catalog {
    static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    CATALOG.get_or_init(|| {
        let (defs, errors) = load_annotated(Some("workload-map"));
        assert!(errors.is_empty(), "{errors:#?}");
        Catalog::from_layers(1, [defs])
    })
}

/// A catalog of the definitions Workload Map's e2e recordings name (`definitions/workload-map`),
/// with kartograf's phase precedence, or annotated `kartograf.io/phase-precedence: workload-map`.
pub fn workload_map_catalog(workload_map_precedence: bool) -> &'static Catalog {
    static PLAIN: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    static ANNOTATED: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    let (cell, precedence) = if workload_map_precedence {
        (&ANNOTATED, Some("workload-map"))
    } else {
        (&PLAIN, None)
    };
    cell.get_or_init(|| {
        let (defs, errors) = load_from(&workload_map_root(), precedence);
        assert!(errors.is_empty(), "{errors:#?}");
        Catalog::from_layers(1, [defs])
    })
}
