//! A static cluster snapshot (objects and pods read from manifest files) and resolution
//! against it: the offline form of `Resolve`.

use crate::definition::{Catalog, GroupVersionKind};
use crate::expr::Limits;
use crate::manifest;
use crate::object::{Object, ObjectMeta, Pod};
use crate::resolve::ownership::{self, OwnerGraph, Root};
use crate::resolve::{self, Resolution};
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Objects and pods of a cluster at one moment.
#[derive(Default)]
pub struct Snapshot {
    objects: Vec<Object>,
    pods: Vec<Pod>,
    /// The file (or source) each of `objects` came from.
    object_sources: Vec<Arc<str>>,
    /// The file (or source) each of `pods` came from.
    pod_sources: Vec<Arc<str>>,
    metas: HashMap<String, ObjectMeta>,
    /// Documents that were skipped, with the reason.
    pub warnings: Vec<String>,
}

impl OwnerGraph for Snapshot {
    fn meta(&self, uid: &str) -> Option<&ObjectMeta> {
        self.metas.get(uid)
    }
}

/// Why a workload could not be resolved from a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// No root workload matches.
    #[error("{0}")]
    NotFound(String),
    /// More than one root workload matches; the caller must name one.
    #[error("{0}")]
    Ambiguous(String),
    /// No definition covers the workload's kind.
    #[error("no definition covers {0}; see `kartograf definitions`")]
    NoDefinition(String),
}

impl Snapshot {
    /// Reads every manifest file in `paths` (files or directories).
    pub fn load(paths: &[PathBuf], limits: Limits) -> Result<Snapshot, String> {
        let mut snapshot = Snapshot::default();
        for path in paths {
            let files =
                manifest::files_below(path).map_err(|e| format!("{}: {e}", path.display()))?;
            if files.is_empty() {
                return Err(format!("{}: no .yaml, .yml or .json files", path.display()));
            }
            for file in files {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                let docs = manifest::parse_documents(&text)
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                for doc in docs {
                    snapshot.add(&doc, limits, &file.display().to_string());
                }
            }
        }
        snapshot.note_cycles();
        snapshot.note_duplicates();
        Ok(snapshot)
    }

    /// Adds a warning for every object (or pod) present more than once, naming the files.
    pub fn note_duplicates(&mut self) {
        let mut seen: HashMap<String, Vec<&str>> = HashMap::new();
        let mut order: Vec<(&ObjectMeta, String)> = Vec::new();
        for (meta, source) in self.all_with_sources() {
            let id = meta.identity();
            let files = seen.entry(id.clone()).or_default();
            if files.len() == 1 {
                order.push((meta, id));
            }
            files.push(source);
        }
        let found: Vec<String> = order
            .into_iter()
            .map(|(meta, id)| {
                format!(
                    "{}/{} appears {} times ({}); one copy is used",
                    meta.kind,
                    meta.key(),
                    seen[&id].len(),
                    seen[&id].join(", ")
                )
            })
            .collect();
        self.warnings.extend(found);
    }

    /// Every object and pod with the file it came from.
    fn all_with_sources(&self) -> impl Iterator<Item = (&ObjectMeta, &str)> {
        let objects = self.objects.iter().map(|o| &o.meta);
        let pods = self.pods.iter().map(|p| &p.meta);
        objects
            .zip(self.object_sources.iter())
            .chain(pods.zip(self.pod_sources.iter()))
            .map(|(m, s)| (m, &**s))
    }

    /// The file an object or pod of this snapshot (by address) came from.
    fn source_of(&self, meta: &ObjectMeta) -> &str {
        self.all_with_sources()
            .find(|(m, _)| std::ptr::eq(*m, meta))
            .map_or("", |(_, s)| s)
    }

    /// Why `matches` (two or more) are ambiguous and what would tell them apart.
    fn ambiguity(&self, matches: &[&ObjectMeta]) -> String {
        let describe = |m: &ObjectMeta| {
            let file = self.source_of(m);
            let uid = if m.uid.is_empty() {
                String::new()
            } else {
                format!(" uid {}", m.uid)
            };
            format!("{} {}/{}{uid} in {file}", m.api_version, m.kind, m.key())
        };
        let listed: Vec<String> = matches.iter().map(|m| describe(m)).collect();
        let first = matches[0];
        let all = |same: &dyn Fn(&ObjectMeta) -> bool| matches.iter().all(|m| same(m));
        if all(&|m| m.identity() == first.identity()) {
            return format!(
                "the same object is in several places: {}; pass only one of them with -f (or remove the copy)",
                listed.join("; ")
            );
        }
        if !all(&|m| m.namespace == first.namespace) {
            return format!(
                "several workloads match; narrow with -n NAMESPACE: {}",
                listed.join("; ")
            );
        }
        if !all(&|m| m.gvk().group == first.gvk().group) {
            return format!(
                "several workloads match; name one with its API group as KIND.GROUP/NAME (e.g. {}.{}/{}): {}",
                first.kind.to_ascii_lowercase(),
                first.gvk().group,
                first.name,
                listed.join("; ")
            );
        }
        format!(
            "different objects with the same kind, namespace and name: {}; pass only the file that holds the one you mean with -f",
            listed.join("; ")
        )
    }

    /// Adds one object or pod; unusable documents become warnings.
    pub fn add(&mut self, doc: &Json, limits: Limits, source: &str) {
        let is_pod = doc.get("kind").and_then(Json::as_str) == Some("Pod")
            && doc.get("apiVersion").and_then(Json::as_str) == Some("v1");
        let from: Arc<str> = match self.object_sources.last().or(self.pod_sources.last()) {
            Some(last) if **last == *source => last.clone(),
            _ => Arc::from(source),
        };
        let result = if is_pod {
            Pod::from_json(doc, limits).map(|p| {
                self.metas.insert(p.meta.identity(), p.meta.clone());
                self.pods.push(p);
                self.pod_sources.push(from);
            })
        } else {
            Object::from_json(doc, limits).map(|o| {
                self.metas.insert(o.meta.identity(), o.meta.clone());
                self.objects.push(o);
                self.object_sources.push(from);
            })
        };
        if let Err(e) = result {
            self.warnings
                .push(format!("{source}: skipped a document: {e}"));
        }
    }

    /// Adds a warning for every object whose controller chain runs into an owner cycle.
    pub fn note_cycles(&mut self) {
        let mut found = Vec::new();
        for meta in self
            .objects
            .iter()
            .map(|o| &o.meta)
            .chain(self.pods.iter().map(|p| &p.meta))
        {
            if let Some(names) = ownership::cycle_above(meta, self) {
                found.push(format!(
                    "owner cycle above {}/{}: {}; it belongs to no workload",
                    meta.kind,
                    meta.key(),
                    names.join(" -> ")
                ));
            }
        }
        self.warnings.extend(found);
    }

    /// All pods.
    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// Every root workload: objects (and bare pods) whose kind has a definition and whose
    /// controller chain holds no kind that has one.
    pub fn roots(&self, catalog: &Catalog) -> Vec<&ObjectMeta> {
        self.objects
            .iter()
            .map(|o| &o.meta)
            .chain(self.pods.iter().map(|p| &p.meta))
            .filter(|m| ownership::root_of(m, self, catalog) == Root::Itself)
            .collect()
    }

    /// Finds the workload named `kind/name` (kind case-insensitive, singular or plural;
    /// `namespace` narrows), or the only root workload when `target` is `None`. A named
    /// object that is not a root (a Job owned by another workload) is found too, when no root matches.
    pub fn select(
        &self,
        catalog: &Catalog,
        target: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<ObjectMeta, SnapshotError> {
        let in_ns = |m: &&ObjectMeta| namespace.is_none_or(|ns| m.namespace == ns);
        let roots: Vec<&ObjectMeta> = self.roots(catalog).into_iter().filter(in_ns).collect();
        let describe = |ms: &[&ObjectMeta]| {
            ms.iter()
                .map(|m| format!("{}/{}", m.kind, m.key()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(t) = target else {
            return match roots.as_slice() {
                [one] => Ok((*one).clone()),
                [] => Err(SnapshotError::NotFound(
                    "the files hold no root workload of a kind with a definition".into(),
                )),
                many if many.iter().all(|m| m.identity() == many[0].identity()) => {
                    Err(SnapshotError::Ambiguous(self.ambiguity(many)))
                }
                many => Err(SnapshotError::Ambiguous(format!(
                    "several root workloads; name one as KIND/NAME: {}",
                    describe(many)
                ))),
            };
        };
        let (kind, name) = t.split_once('/').ok_or_else(|| {
            SnapshotError::NotFound(format!("`{t}` is not of the form KIND/NAME"))
        })?;
        // `kind` or `kind.group` (as kubectl takes them).
        let (kind, group) = kind.split_once('.').unwrap_or((kind, ""));
        let kind = kind.to_ascii_lowercase();
        let named = |m: &&ObjectMeta| {
            let k = m.kind.to_ascii_lowercase();
            (k == kind || format!("{k}s") == kind)
                && m.name == name
                && (group.is_empty() || m.gvk().group == group)
        };
        let mut matches: Vec<&ObjectMeta> = roots.iter().copied().filter(named).collect();
        if matches.is_empty() {
            matches = self
                .objects
                .iter()
                .map(|o| &o.meta)
                .chain(self.pods.iter().map(|p| &p.meta))
                .filter(in_ns)
                .filter(named)
                .filter(|m| catalog.lookup(&m.api_version, &m.kind).is_some())
                .collect();
        }
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(SnapshotError::NotFound(format!(
                "no workload {t}; the files hold: {}",
                describe(&roots)
            ))),
            many => Err(SnapshotError::Ambiguous(self.ambiguity(many))),
        }
    }

    /// Resolves the root workload `root` with the pods whose controller chain reaches it.
    pub fn resolve(
        &self,
        catalog: &Catalog,
        root: &ObjectMeta,
        deadline: Option<Instant>,
    ) -> Result<Resolution, SnapshotError> {
        let lookup = catalog
            .lookup(&root.api_version, &root.kind)
            .ok_or_else(|| {
                SnapshotError::NoDefinition(
                    GroupVersionKind::from_api_version(&root.api_version, &root.kind).to_string(),
                )
            })?;
        let identity = root.identity();
        let object = self
            .objects
            .iter()
            .find(|o| o.meta.identity() == identity)
            .cloned()
            .or_else(|| {
                self.pods
                    .iter()
                    .find(|p| p.meta.identity() == identity)
                    .map(|p| p.to_object())
            })
            .ok_or_else(|| {
                SnapshotError::NotFound(format!(
                    "{}/{} is not in the snapshot",
                    root.kind,
                    root.key()
                ))
            })?;
        let pods: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| {
                p.meta.identity() == identity || ownership::belongs_to(&p.meta, &root.uid, self)
            })
            .collect();
        let input = resolve::Input {
            definition: &lookup.definition,
            generation: catalog.generation(),
            root: &object,
            pods: &pods,
            fallback_from: lookup.fallback_from.as_deref(),
            deadline,
            prepared: None,
        };
        Ok(resolve::resolve(&input))
    }
}
