//! The catalog: every active definition, indexed by root kind.
//!
//! Built from layers; a later layer replaces an earlier one's definition for the same root
//! group/version/kind (embedded < directory < cluster). Immutable once built: a reload
//! builds a new catalog and publishes it whole.

use super::DefinitionError;
use super::breaker::ExceededTotals;
use super::load::{self, LoadOptions, Parsed};
use super::model::GroupVersionKind;
use super::plan::Definition;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Origin label of the definitions compiled into the binary.
pub const EMBEDDED: &str = "embedded";

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_catalog.rs"));
}

/// The result of looking up the definition for an object's kind.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The definition.
    pub definition: Arc<Definition>,
    /// Set when no definition exists for the exact version and one for another version of
    /// the same group and kind was used instead.
    pub fallback_from: Option<String>,
}

/// An immutable set of active definitions. Cloning shares the definitions.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    generation: u64,
    by_gvk: BTreeMap<GroupVersionKind, Arc<Definition>>,
    by_group_kind: HashMap<(String, String), Vec<Arc<Definition>>>,
    child_kinds: HashSet<(String, String)>,
    /// The options its non-embedded layers were compiled with (for definitions compiled
    /// beside it, e.g. a candidate a client validates).
    options: LoadOptions,
    /// Where its definitions count their budget exhaustions.
    exceeded: ExceededTotals,
}

impl Catalog {
    /// Builds a catalog from layers of definitions, lowest precedence first.
    pub fn from_layers(
        generation: u64,
        layers: impl IntoIterator<Item = Vec<Arc<Definition>>>,
    ) -> Catalog {
        Catalog::counting(generation, layers, ExceededTotals::default())
    }

    /// [`Catalog::from_layers`], its definitions counting their budget exhaustions into
    /// `exceeded` (the totals of the layers that build it, shared by their catalogs).
    pub fn counting(
        generation: u64,
        layers: impl IntoIterator<Item = Vec<Arc<Definition>>>,
        exceeded: ExceededTotals,
    ) -> Catalog {
        let mut by_gvk = BTreeMap::new();
        for layer in layers {
            for def in layer {
                by_gvk.insert(def.root_kind.clone(), def);
            }
        }
        let mut by_group_kind: HashMap<(String, String), Vec<Arc<Definition>>> = HashMap::new();
        let mut child_kinds = HashSet::new();
        for def in by_gvk.values() {
            def.published_in(generation);
            def.breaker().count_into(&exceeded);
            by_group_kind
                .entry((def.root_kind.group.clone(), def.root_kind.kind.clone()))
                .or_default()
                .push(def.clone());
            for kind in def.child_kinds() {
                child_kinds.insert((kind.group.clone(), kind.kind.clone()));
            }
        }
        Catalog {
            generation,
            by_gvk,
            by_group_kind,
            child_kinds,
            options: LoadOptions::default(),
            exceeded,
        }
    }

    /// Budget exhaustions of its definitions (and of earlier versions counted into the same
    /// totals), per (definition name, budget).
    pub fn exceeded_totals(&self) -> Vec<(String, &'static str, u64)> {
        self.exceeded.snapshot()
    }

    /// Counts the budget exhaustions of `definition`, which this catalog does not hold (a
    /// `ValidateDefinition` candidate previewed on a sample), into its totals.
    pub fn count_exceeded_of(&self, definition: &Definition) {
        definition.breaker().count_into(&self.exceeded);
    }

    /// This catalog, noting that its layers were compiled with `options`.
    pub fn with_options(mut self, options: LoadOptions) -> Catalog {
        self.options = options;
        self
    }

    /// The options its layers were compiled with ([`Catalog::with_options`]; the default
    /// otherwise).
    pub fn options(&self) -> LoadOptions {
        self.options
    }

    /// Whether `other` holds the very same definitions (shared, not merely equal).
    pub fn same_definitions(&self, other: &Catalog) -> bool {
        self.by_gvk.len() == other.by_gvk.len()
            && self
                .by_gvk
                .iter()
                .zip(&other.by_gvk)
                .all(|((a, x), (b, y))| a == b && Arc::ptr_eq(x, y))
    }

    /// The embedded catalog alone.
    pub fn embedded() -> Result<Catalog, Vec<DefinitionError>> {
        let (defs, errors) = load_embedded();
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Catalog::from_layers(1, [defs]))
    }

    /// Catalog generation (bumped on every published change).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The (group, kind) pairs whose definitions differ between `previous` and this catalog
    /// (added, removed, or another compiled version), plus the kinds either catalog names as
    /// a child kind when those sets differ: only workloads of these kinds (and what they own)
    /// can resolve differently.
    pub fn changed_kinds(&self, previous: &Catalog) -> HashSet<(String, String)> {
        let mut changed = HashSet::new();
        let same = |a: &[Arc<Definition>], b: &[Arc<Definition>]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
        };
        for (key, defs) in &self.by_group_kind {
            if previous
                .by_group_kind
                .get(key)
                .is_none_or(|p| !same(p, defs))
            {
                changed.insert(key.clone());
            }
        }
        for key in previous.by_group_kind.keys() {
            if !self.by_group_kind.contains_key(key) {
                changed.insert(key.clone());
            }
        }
        if self.child_kinds != previous.child_kinds {
            changed.extend(
                self.child_kinds
                    .symmetric_difference(&previous.child_kinds)
                    .cloned(),
            );
        }
        changed
    }

    /// Every definition, sorted by root kind.
    pub fn definitions(&self) -> impl Iterator<Item = &Arc<Definition>> {
        self.by_gvk.values()
    }

    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.by_gvk.len()
    }

    /// True when there are no definitions.
    pub fn is_empty(&self) -> bool {
        self.by_gvk.is_empty()
    }

    /// The definition for an object of `api_version`/`kind`: exact version first, else the
    /// same group and kind at the highest-priority other version (GA > beta > alpha, then
    /// by number, as Kubernetes orders versions).
    pub fn lookup(&self, api_version: &str, kind: &str) -> Option<Lookup> {
        let gvk = GroupVersionKind::from_api_version(api_version, kind);
        if let Some(def) = self.by_gvk.get(&gvk) {
            return Some(Lookup {
                definition: def.clone(),
                fallback_from: None,
            });
        }
        let candidates = self
            .by_group_kind
            .get(&(gvk.group.clone(), gvk.kind.clone()))?;
        let def = candidates
            .iter()
            .max_by_key(|d| version_priority(&d.root_kind.version))?;
        Some(Lookup {
            definition: def.clone(),
            fallback_from: Some(gvk.to_string()),
        })
    }

    /// True when some definition has a root of this group and kind (any version).
    pub fn covers(&self, group: &str, kind: &str) -> bool {
        self.by_group_kind
            .contains_key(&(group.to_owned(), kind.to_owned()))
    }

    /// True when some definition lists this group and kind as a child or additional kind.
    pub fn is_child_kind(&self, group: &str, kind: &str) -> bool {
        self.child_kinds
            .contains(&(group.to_owned(), kind.to_owned()))
    }
}

/// Compiles parsed documents with the given origin and loader's options; duplicate root
/// kinds within one batch are errors (the first wins).
pub fn compile_all(
    parsed: Vec<Parsed>,
    origin: &str,
    options: LoadOptions,
) -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
    let mut defs: Vec<Arc<Definition>> = Vec::new();
    let mut errors = Vec::new();
    for (p, compiled) in compile_each(&parsed, origin, options) {
        match compiled {
            Ok(def) => {
                if let Some(first) = defs.iter().find(|d| d.root_kind == def.root_kind) {
                    errors.push(DefinitionError::new(
                        &p.source,
                        "spec.structureDefinition.rootComponent.kind",
                        None,
                        format!(
                            "{} is already defined by `{}` in {}",
                            def.root_kind, first.name, first.source
                        ),
                    ));
                } else {
                    defs.push(Arc::new(def));
                }
            }
            Err(errs) => errors.extend(errs),
        }
    }
    (defs, errors)
}

/// Compiles every parsed definition, on as many threads as there are cores (a catalog of
/// a few dozen definitions is a tenth of a second of jq compilation on one), in order.
fn compile_each<'p>(
    parsed: &'p [Parsed],
    origin: &str,
    options: LoadOptions,
) -> Vec<(&'p Parsed, Result<Definition, Vec<DefinitionError>>)> {
    let compiled = crate::parallel::map_in_order(
        parsed,
        crate::parallel::cores(),
        "kartograf-compile",
        COMPILE_STACK,
        |p| Definition::compile(p.karta.clone(), &p.source, origin, options),
    );
    parsed.iter().zip(compiled).collect()
}

/// Stack of a thread compiling definitions (jq's parser recurses).
const COMPILE_STACK: usize = 8 << 20;

/// Loads the embedded catalog.
pub fn load_embedded() -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for (file, text) in embedded::FILES {
        let (p, e) = load::parse_text(text, file);
        parsed.extend(p);
        errors.extend(e);
    }
    let (defs, e) = compile_all(parsed, EMBEDDED, LoadOptions::default());
    errors.extend(e);
    (defs, errors)
}

/// The names and texts of the embedded catalog files.
pub fn embedded_files() -> &'static [(&'static str, &'static str)] {
    embedded::FILES
}

/// Loads every definition file below `path` with the loader's `options`.
pub fn load_path(
    path: &Path,
    options: LoadOptions,
) -> (Vec<Arc<Definition>>, Vec<DefinitionError>) {
    let source = path.display().to_string();
    let (files, mut errors) = load::definition_files(path);
    let mut parsed = Vec::new();
    for file in files {
        let (p, e) = load::parse_file(&file);
        parsed.extend(p);
        errors.extend(e);
    }
    let (defs, e) = compile_all(parsed, &format!("directory:{source}"), options);
    errors.extend(e);
    (defs, errors)
}

/// Kubernetes version priority: `v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha1` > others.
pub fn version_priority(version: &str) -> (u8, u32, u32) {
    let parse = |v: &str| -> Option<(u8, u32, u32)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u32 = digits.parse().ok()?;
        match &rest[digits.len()..] {
            "" => Some((3, major, 0)),
            tail => {
                let (stage, n) = if let Some(n) = tail.strip_prefix("beta") {
                    (2, n)
                } else {
                    (1, tail.strip_prefix("alpha")?)
                };
                Some((stage, major, n.parse().ok()?))
            }
        }
    };
    parse(version).unwrap_or((0, 0, 0))
}

#[cfg(test)]
mod tests {
    use super::version_priority;

    #[test]
    fn versions_order_like_kubernetes() {
        let mut v = [
            "v1alpha1", "v10", "v1beta2", "v1", "v2", "v1beta1", "foo", "v2alpha1",
        ];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(
            v,
            [
                "v10", "v2", "v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1", "foo"
            ]
        );
    }
}
