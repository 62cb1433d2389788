//! Definition sources at run time: `--definitions DIR` (hot reloaded) and Karta objects of
//! the cluster (fed by the Kubernetes source), over the embedded catalog.
//!
//! [`Layers`] (`definition::layers`) holds the last good definitions of every source;
//! [`Publisher`] is its single
//! owner at run time: every source update goes through [`Publisher::update`], which rebuilds
//! the catalog from all layers (cluster > directory > embedded, per root group/version/kind),
//! publishes it whole (arc-swap) with a higher generation and sets the [`LoadReport`], so a
//! directory reload never drops cluster definitions and vice versa. Each file or Karta object
//! is validated and compiled off the request path; one that fails keeps its last good
//! definitions and its errors are reported.

use super::files::{self, Tracker};
use crate::definition::catalog;
pub use crate::definition::layers::Layers;
use crate::definition::{Definition, DefinitionError, LoadOptions, LoadReport, load};
use crate::index::Index;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The single owner of [`Layers`] at run time: applies an update, rebuilds and publishes
/// the catalog to the index and the errors to the report, and tells watchers of
/// [`Publisher::subscribe`] the new generation.
pub struct Publisher {
    layers: Mutex<Layers>,
    index: Arc<Index>,
    report: Arc<LoadReport>,
    generation: tokio::sync::watch::Sender<u64>,
}

impl Publisher {
    /// A publisher over `layers`; nothing is published until the first update.
    pub fn new(layers: Layers, index: Arc<Index>, report: Arc<LoadReport>) -> Arc<Publisher> {
        let (generation, _) = tokio::sync::watch::channel(0);
        Arc::new(Publisher {
            layers: Mutex::new(layers),
            index,
            report,
            generation,
        })
    }

    /// Applies `change` to the layers, then rebuilds and publishes (under one lock, so
    /// concurrent sources publish in order and none overwrites another's layer).
    /// A `change` returning `false` means nothing changed: no new catalog is published
    /// (every other return type always publishes).
    pub fn update<R: Changed>(&self, change: impl FnOnce(&mut Layers) -> R) {
        let mut layers = self.layers.lock();
        if !change(&mut layers).changed() {
            return;
        }
        let (catalog, errors) = layers.build();
        let generation = catalog.generation();
        tracing::info!(
            generation,
            definitions = catalog.len(),
            errors = errors.len(),
            "definitions published"
        );
        self.report.set(errors);
        self.index.feed().set_catalog(catalog);
        self.generation.send_replace(generation);
    }

    /// The report every publication sets (load errors; schema drift is set beside them).
    pub fn report(&self) -> Arc<LoadReport> {
        self.report.clone()
    }

    /// Sees the generation of every published catalog.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }
}

/// What a [`Publisher::update`] change reports: `()` always publishes, a `bool` only when true.
pub trait Changed {
    /// Whether to publish.
    fn changed(&self) -> bool;
}

impl Changed for () {
    fn changed(&self) -> bool {
        true
    }
}

impl Changed for bool {
    fn changed(&self) -> bool {
        *self
    }
}

/// Reads a definitions directory: only files whose metadata and then content changed are
/// parsed and compiled again; each file that fails keeps its last good definitions; a
/// directory that disappears keeps all of them (reported) until it is back.
pub struct Reloader {
    dir: PathBuf,
    origin: String,
    options: LoadOptions,
    tracker: Tracker<Vec<Arc<Definition>>>,
    errors: BTreeMap<PathBuf, Vec<DefinitionError>>,
    missing: bool,
    /// False until the first reload (which always returns the layer).
    loaded: bool,
}

impl Reloader {
    /// A reloader for `dir` that compiles with `options` (nothing read yet).
    pub fn new(dir: &Path, options: LoadOptions) -> Reloader {
        Reloader {
            dir: dir.to_path_buf(),
            origin: format!("directory:{}", dir.display()),
            options,
            tracker: Tracker::default(),
            errors: BTreeMap::new(),
            missing: false,
            loaded: false,
        }
    }

    /// Scans the directory; `None` when nothing changed, else the directory layer (every
    /// file's last good definitions) and the errors in effect.
    pub fn reload(&mut self) -> Option<(Vec<Arc<Definition>>, Vec<DefinitionError>)> {
        let first = !std::mem::replace(&mut self.loaded, true);
        let walk = crate::folder::walk(&self.dir, crate::folder::is_manifest);
        let source = self.dir.display().to_string();
        if !walk.exists {
            if !self.missing {
                tracing::warn!(dir = %source, "the definitions directory is gone (removed or renamed?); its last good definitions stay active until it is back");
                self.missing = true;
                self.errors.insert(
                    self.dir.clone(),
                    vec![DefinitionError::new(
                        &source,
                        "",
                        None,
                        "the directory does not exist; its last good definitions stay active",
                    )],
                );
                return Some(self.layer());
            }
            return first.then(|| self.layer());
        }
        let was_missing = std::mem::take(&mut self.missing);
        if was_missing {
            self.errors.remove(&self.dir);
        }
        let scan = self.tracker.scan(&walk);
        if scan.is_empty() && !was_missing && !first {
            return None;
        }
        let mut changed = !scan.removed.is_empty() || was_missing || first;
        for path in &scan.removed {
            self.tracker.remove(path);
            self.errors.remove(path);
        }
        for c in &scan.candidates {
            let (text, hash) = match self.tracker.read(c) {
                files::Read::Unchanged => {
                    self.tracker.unchanged(c);
                    continue;
                }
                files::Read::Unreadable(why) => {
                    let e = DefinitionError::unreadable(&c.path.display().to_string(), why);
                    tracing::warn!(error = %e, "definition file unreadable; its last good version stays active");
                    self.errors.insert(c.path.clone(), vec![e]);
                    self.tracker.unreadable(c);
                    changed = true;
                    continue;
                }
                files::Read::Changed(text, hash) => (text, hash),
            };
            changed = true;
            let source = c.path.display().to_string();
            let (parsed, parse_errors) = load::parse_text(&text, &source);
            let (defs, compile_errors) = catalog::compile_all(parsed, &self.origin, self.options);
            let file_errors: Vec<DefinitionError> =
                parse_errors.into_iter().chain(compile_errors).collect();
            if file_errors.is_empty() {
                for w in defs.iter().flat_map(|d| d.warnings.iter()) {
                    tracing::warn!(warning = %w, "definition loaded with a warning");
                }
                let defs = self.same_as_before(&c.path, defs);
                self.tracker.keep(c, hash, defs);
                self.errors.remove(&c.path);
            } else {
                crate::definition::log_refused(
                    &source,
                    &file_errors,
                    "definition rejected; the last good version stays active",
                );
                self.tracker.failed(c, hash);
                self.errors.insert(c.path.clone(), file_errors);
            }
        }
        if !changed {
            return None;
        }
        Some(self.layer())
    }

    /// `defs` (just compiled from `path`), each replaced by the version `path` held before
    /// when they are the same definition (an edit of comments or formatting): the catalog
    /// then sees no change, so no workload is re-resolved or sent again.
    fn same_as_before(&self, path: &Path, defs: Vec<Arc<Definition>>) -> Vec<Arc<Definition>> {
        let Some(before) = self.tracker.payload(path) else {
            return defs;
        };
        defs.into_iter()
            .map(|new| {
                before
                    .iter()
                    .find(|old| {
                        old.name == new.name
                            && old.origin == new.origin
                            && old.source == new.source
                            && old.karta == new.karta
                    })
                    .cloned()
                    .unwrap_or(new)
            })
            .collect()
    }

    /// Every file's last good definitions, and the errors in effect. Two files defining one
    /// root kind: the first by path wins, and the other is reported (as `check` and the CLI
    /// report two definitions of one kind in a folder).
    fn layer(&self) -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
        let mut errors: Vec<DefinitionError> = self.errors.values().flatten().cloned().collect();
        let mut defs: Vec<Arc<Definition>> = Vec::new();
        let mut first: HashMap<&crate::definition::GroupVersionKind, &Definition> = HashMap::new();
        for def in self.tracker.iter().flat_map(|(_, d)| d.iter()) {
            match first.get(&def.root_kind) {
                Some(winner) => {
                    tracing::warn!(kind = %def.root_kind, dropped = %def.source, used = %winner.source, "two definition files define one root kind; the first by path is used");
                    errors.push(DefinitionError::new(
                        &def.source,
                        "spec.structureDefinition.rootComponent.kind",
                        None,
                        format!(
                            "{} is already defined by `{}` in {}; this definition is not used",
                            def.root_kind, winner.name, winner.source
                        ),
                    ));
                }
                None => {
                    first.insert(&def.root_kind, def);
                    defs.push(def.clone());
                }
            }
        }
        (defs, errors)
    }

    /// Scans and, when something changed, publishes the directory layer through
    /// `publisher`.
    pub fn publish(&mut self, publisher: &Publisher) {
        if let Some((defs, errors)) = self.reload() {
            publisher.update(|layers| layers.set_directory(defs, errors));
        }
    }
}

/// Watches the directory and republishes on every change (including one made between the
/// initial load and the watch starting). Scans and compilation run on a blocking thread.
pub async fn run(mut reloader: Reloader, publisher: Arc<Publisher>) {
    let (mut watch, mut ticks) = files::DirWatch::start(&reloader.dir, files::RESCAN);
    loop {
        let publisher_for_scan = publisher.clone();
        let scanned = tokio::task::spawn_blocking(move || {
            reloader.publish(&publisher_for_scan);
            reloader
        })
        .await;
        reloader = match scanned {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "reloading definitions failed");
                return;
            }
        };
        watch.refresh();
        if ticks.recv().await.is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn karta(name: &str, kind: &str) -> String {
        format!(
            "apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {{name: {name}}}\nspec:\n  structureDefinition:\n    rootComponent:\n      name: root\n      kind: {{group: example.com, version: v1, kind: {kind}}}\n      statusDefinition:\n        statusMappings:\n          running: [{{byExpression: {{expression: 'true', expectedResult: 'true'}}}}]\n"
        )
    }

    #[test]
    fn two_files_defining_one_kind_keep_the_first_by_path_and_report_the_other() {
        let d = std::env::temp_dir().join(format!("kartograf-defs-dup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("a.yaml"), karta("first", "Widget")).unwrap();
        std::fs::write(d.join("b.yaml"), karta("second", "Widget")).unwrap();
        std::fs::write(d.join("c.yaml"), karta("other", "Gadget")).unwrap();
        let (defs, errors) = Reloader::new(&d, LoadOptions::default())
            .reload()
            .expect("first load");
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["first", "other"]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = errors[0].to_string();
        assert!(
            e.contains("b.yaml") && e.contains("first") && e.contains("a.yaml"),
            "{e}"
        );
    }
}
