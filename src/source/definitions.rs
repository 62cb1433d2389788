//! Hot reload of `--definitions DIR`: each file is validated and compiled off the request
//! path; a file that fails keeps its last good definitions; the new catalog is published
//! whole (arc-swap) with a higher generation, and affected workloads are re-resolved.

use crate::definition::catalog::{self, Catalog, load_embedded};
use crate::definition::{Definition, DefinitionError, LoadReport, load};
use crate::index::Index;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Last good definitions per file, and the catalog generation.
pub struct Reloader {
    dir: PathBuf,
    origin: String,
    good: BTreeMap<PathBuf, Vec<Arc<Definition>>>,
    generation: u64,
    /// Hash of the files the last reload read.
    hash: u64,
}

impl Reloader {
    /// A reloader for `dir`.
    pub fn new(dir: &Path) -> Reloader {
        Reloader {
            dir: dir.to_path_buf(),
            origin: format!("directory:{}", dir.display()),
            good: BTreeMap::new(),
            generation: 0,
            hash: 0,
        }
    }

    /// Re-reads the directory and builds the next catalog (embedded + directory) and the
    /// errors to report. Files that fail keep their previous good definitions.
    pub fn reload(&mut self) -> (Catalog, Vec<DefinitionError>) {
        let (embedded, mut errors) = load_embedded();
        let files = load::definition_files(&self.dir).unwrap_or_default();
        self.hash = super::hash_files(&files);
        let mut next: BTreeMap<PathBuf, Vec<Arc<Definition>>> = BTreeMap::new();
        for file in files {
            let (parsed, parse_errors) = load::parse_file(&file);
            let (defs, compile_errors) = catalog::compile_all(parsed, &self.origin);
            let file_errors: Vec<DefinitionError> =
                parse_errors.into_iter().chain(compile_errors).collect();
            if file_errors.is_empty() {
                next.insert(file, defs);
            } else {
                for e in &file_errors {
                    tracing::warn!(error = %e, "definition rejected; the last good version stays active");
                }
                errors.extend(file_errors);
                if let Some(previous) = self.good.get(&file) {
                    next.insert(file, previous.clone());
                }
            }
        }
        self.good = next;
        self.generation += 1;
        let layer: Vec<Arc<Definition>> = self.good.values().flatten().cloned().collect();
        (
            Catalog::from_layers(self.generation, [embedded, layer]),
            errors,
        )
    }

    /// Reloads now and publishes to `index` and `report`.
    pub fn publish(&mut self, index: &Index, report: &LoadReport) {
        let (catalog, errors) = self.reload();
        tracing::info!(
            generation = catalog.generation(),
            definitions = catalog.len(),
            errors = errors.len(),
            "definitions loaded"
        );
        report.set(errors);
        index.set_catalog(catalog);
    }
}

/// Watches the directory and republishes on every change (including one made between the
/// initial load and the watch starting).
pub async fn run(mut reloader: Reloader, index: Arc<Index>, report: Arc<LoadReport>) {
    let dir = reloader.dir.clone();
    let (_watcher, mut ticks) = match super::watch_dir(&dir) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(error = %e, dir = %dir.display(), "cannot watch the definitions directory; edits will not be seen");
            return;
        }
    };
    loop {
        let hash = super::hash_files(&load::definition_files(&dir).unwrap_or_default());
        if hash != reloader.hash {
            reloader.publish(&index, &report);
        }
        if ticks.recv().await.is_none() {
            return;
        }
    }
}
