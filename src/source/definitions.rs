//! Definition sources and their layering: the embedded catalog, `--definitions DIR` (hot
//! reloaded) and Karta objects of the cluster (fed by the Kubernetes source).
//!
//! [`Layers`] holds the last good definitions of every source; [`Publisher`] is its single
//! owner at run time: every source update goes through [`Publisher::update`], which rebuilds
//! the catalog from all layers (cluster > directory > embedded, per root group/version/kind),
//! publishes it whole (arc-swap) with a higher generation and sets the [`LoadReport`], so a
//! directory reload never drops cluster definitions and vice versa. Each file or Karta object
//! is validated and compiled off the request path; one that fails keeps its last good
//! definitions and its errors are reported.

use super::files::{self, Tracker};
use crate::definition::catalog::{self, Catalog, load_embedded};
use crate::definition::{Definition, DefinitionError, GroupVersionKind, LoadReport, load};
use crate::index::Index;
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One Karta object of the cluster: its last good definitions and current errors.
struct ClusterKarta {
    origin: String,
    /// The `spec` last compiled, to skip events that change nothing (status, labels,
    /// a relist of the same objects).
    spec: Json,
    good: Vec<Arc<Definition>>,
    errors: Vec<DefinitionError>,
}

/// The last good definitions of every source.
pub struct Layers {
    embedded: Vec<Arc<Definition>>,
    embedded_errors: Vec<DefinitionError>,
    directory: Vec<Arc<Definition>>,
    directory_errors: Vec<DefinitionError>,
    /// Karta objects by key (uid, else name).
    cluster: BTreeMap<String, ClusterKarta>,
    generation: u64,
}

impl Default for Layers {
    fn default() -> Self {
        Layers::new()
    }
}

impl Layers {
    /// The embedded catalog alone; generation 1 is the first [`Layers::build`].
    pub fn new() -> Layers {
        let (embedded, embedded_errors) = load_embedded();
        Layers {
            embedded,
            embedded_errors,
            directory: Vec::new(),
            directory_errors: Vec::new(),
            cluster: BTreeMap::new(),
            generation: 0,
        }
    }

    /// Replaces the directory layer (its last good definitions and current errors).
    pub fn set_directory(&mut self, defs: Vec<Arc<Definition>>, errors: Vec<DefinitionError>) {
        self.directory = defs;
        self.directory_errors = errors;
    }

    /// Adds or replaces the Karta object `key` (`origin` labels its definitions and errors,
    /// e.g. `cluster:my-karta`). An invalid object keeps its last good definitions.
    /// Returns false (and does nothing) when the object's `spec` is the one last compiled.
    pub fn apply_cluster(&mut self, key: &str, origin: &str, object: &Json) -> bool {
        let spec = object.get("spec").cloned().unwrap_or(Json::Null);
        if self
            .cluster
            .get(key)
            .is_some_and(|k| k.origin == origin && k.spec == spec)
        {
            return false;
        }
        let (parsed, mut errors) = match load::parse_document(object, origin, "") {
            Ok(p) => (vec![p], Vec::new()),
            Err(e) => (Vec::new(), vec![e]),
        };
        let (defs, compile_errors) = catalog::compile_all(parsed, origin);
        errors.extend(compile_errors);
        for e in &errors {
            tracing::warn!(error = %e, "cluster definition rejected; the last good version stays active");
        }
        let entry = self
            .cluster
            .entry(key.to_owned())
            .or_insert_with(|| ClusterKarta {
                origin: origin.to_owned(),
                spec: Json::Null,
                good: Vec::new(),
                errors: Vec::new(),
            });
        entry.origin = origin.to_owned();
        entry.spec = spec;
        if errors.is_empty() {
            for w in defs.iter().flat_map(|d| d.warnings.iter()) {
                tracing::warn!(warning = %w, "cluster definition loaded with a warning");
            }
            entry.good = defs;
        }
        entry.errors = errors;
        true
    }

    /// Removes the Karta object `key` and its definitions.
    pub fn delete_cluster(&mut self, key: &str) {
        self.cluster.remove(key);
    }

    /// Replaces the whole cluster layer with `objects` (`(key, origin, object)`, a full
    /// list): objects not in it are removed; ones already known keep their last good
    /// definitions if the new version fails.
    /// Returns whether anything changed.
    pub fn reset_cluster(&mut self, objects: &[(String, String, Json)]) -> bool {
        let keep: std::collections::HashSet<&str> =
            objects.iter().map(|(k, _, _)| k.as_str()).collect();
        let before = self.cluster.len();
        self.cluster.retain(|k, _| keep.contains(k.as_str()));
        let mut changed = self.cluster.len() != before;
        for (key, origin, object) in objects {
            changed |= self.apply_cluster(key, origin, object);
        }
        changed
    }

    /// The next catalog (higher generation) and every current error. Two Karta objects with
    /// the same root kind: the first by origin wins, the other is reported.
    pub fn build(&mut self) -> (Catalog, Vec<DefinitionError>) {
        self.generation += 1;
        let mut errors: Vec<DefinitionError> = self
            .embedded_errors
            .iter()
            .chain(&self.directory_errors)
            .cloned()
            .collect();
        let mut entries: Vec<&ClusterKarta> = self.cluster.values().collect();
        entries.sort_by(|a, b| a.origin.cmp(&b.origin));
        let mut cluster: Vec<Arc<Definition>> = Vec::new();
        let mut owner: HashMap<GroupVersionKind, &str> = HashMap::new();
        for entry in entries {
            errors.extend(entry.errors.iter().cloned());
            for def in &entry.good {
                match owner.get(&def.root_kind) {
                    Some(first) => errors.push(DefinitionError::new(
                        &entry.origin,
                        "spec.structureDefinition.rootComponent.kind",
                        None,
                        format!("{} is already defined by {first}", def.root_kind),
                    )),
                    None => {
                        owner.insert(def.root_kind.clone(), &entry.origin);
                        cluster.push(def.clone());
                    }
                }
            }
        }
        let catalog = Catalog::from_layers(
            self.generation,
            [self.embedded.clone(), self.directory.clone(), cluster],
        );
        (catalog, errors)
    }
}

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
        let mut layers = self.layers.lock().unwrap_or_else(|e| e.into_inner());
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
    tracker: Tracker<Vec<Arc<Definition>>>,
    errors: BTreeMap<PathBuf, Vec<DefinitionError>>,
    missing: bool,
    /// False until the first reload (which always returns the layer).
    loaded: bool,
}

impl Reloader {
    /// A reloader for `dir` (nothing read yet).
    pub fn new(dir: &Path) -> Reloader {
        Reloader {
            dir: dir.to_path_buf(),
            origin: format!("directory:{}", dir.display()),
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
        let walk = files::walk(&self.dir, files::is_manifest);
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
                    changed = true;
                    continue;
                }
                files::Read::Changed(text, hash) => (text, hash),
            };
            changed = true;
            let source = c.path.display().to_string();
            let (parsed, parse_errors) = load::parse_text(&text, &source);
            let (defs, compile_errors) = catalog::compile_all(parsed, &self.origin);
            let file_errors: Vec<DefinitionError> =
                parse_errors.into_iter().chain(compile_errors).collect();
            if file_errors.is_empty() {
                for w in defs.iter().flat_map(|d| d.warnings.iter()) {
                    tracing::warn!(warning = %w, "definition loaded with a warning");
                }
                self.tracker.keep(c, hash, defs);
                self.errors.remove(&c.path);
            } else {
                for e in &file_errors {
                    tracing::warn!(error = %e, "definition rejected; the last good version stays active");
                }
                self.tracker.failed(c, hash);
                self.errors.insert(c.path.clone(), file_errors);
            }
        }
        if !changed {
            return None;
        }
        Some(self.layer())
    }

    fn layer(&self) -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
        let defs = self
            .tracker
            .iter()
            .flat_map(|(_, d)| d.iter().cloned())
            .collect();
        let errors = self.errors.values().flatten().cloned().collect();
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
