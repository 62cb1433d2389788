//! The layering of definition sources: the embedded catalog, a definitions directory and
//! Karta objects of the cluster, merged per root group/version/kind with precedence cluster >
//! directory > embedded. The one implementation, used by `serve` (through
//! `source::definitions::Publisher`, which owns the layers at run time) and by the CLI.

use super::breaker::ExceededTotals;
use super::catalog::{self, Catalog, load_embedded};
use super::{Definition, DefinitionError, GroupVersionKind, LoadOptions, load};
use serde_json::Value as Json;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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
    /// How the directory and cluster layers compile.
    options: LoadOptions,
    /// Budget exhaustions of every definition its catalogs published.
    exceeded: ExceededTotals,
}

impl Default for Layers {
    fn default() -> Self {
        Layers::new(LoadOptions::default())
    }
}

impl Layers {
    /// The embedded catalog alone; generation 1 is the first [`Layers::build`]. The directory
    /// and cluster layers compile with `options`.
    pub fn new(options: LoadOptions) -> Layers {
        let (embedded, embedded_errors) = load_embedded();
        Layers {
            embedded,
            embedded_errors,
            directory: Vec::new(),
            directory_errors: Vec::new(),
            cluster: BTreeMap::new(),
            generation: 0,
            options,
            exceeded: ExceededTotals::default(),
        }
    }

    /// How the directory and cluster layers compile (for a caller that loads the directory).
    pub fn options(&self) -> LoadOptions {
        self.options
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
        let (defs, compile_errors) = catalog::compile_all(parsed, origin, self.options);
        errors.extend(compile_errors);
        super::log_refused(
            origin,
            &errors,
            "cluster definition rejected; the last good version stays active",
        );
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
        let catalog = Catalog::counting(
            self.generation,
            [self.embedded.clone(), self.directory.clone(), cluster],
            self.exceeded.clone(),
        )
        .with_options(self.options);
        (catalog, errors)
    }
}
