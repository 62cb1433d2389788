//! A static cluster snapshot (objects and pods read from manifest files) and resolution
//! against it: the offline form of `Resolve`. The objects are held by the same [`Index`] the
//! server uses (ownership, root finding and pod membership are written once), built when a
//! catalog first asks for it; resolution is on demand.

use crate::definition::Catalog;
use crate::expr::Limits;
use crate::index::{Incoming, Index, OnDemand, Write};
use crate::model::Skip;
use crate::model::{Cached, ObjectMeta, Pod};
use crate::resolve::Resolution;
use crate::source::manifests;
use parking_lot::Mutex;
use serde_json::Value as Json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Warnings kept by a snapshot; beyond these only their number is (see
/// [`Snapshot::warnings_dropped`]).
pub const MAX_WARNINGS: usize = 20;

/// Objects and pods of a cluster at one moment.
#[derive(Default)]
pub struct Snapshot {
    /// Every object, by identity; the first document of an identity wins.
    objects: Vec<Cached>,
    /// The file (a number into `sources`) of each identity's first document.
    seen: HashMap<Arc<str>, u32>,
    sources: Vec<Arc<str>>,
    /// Documents that were skipped or defined twice, owner cycles: with the reason (the
    /// first [`MAX_WARNINGS`]).
    pub warnings: Vec<String>,
    /// Warnings beyond [`MAX_WARNINGS`], counted but not kept.
    pub warnings_dropped: usize,
    /// The index over `objects` for the catalog last asked about (kept to tell whether the
    /// next catalog holds the same definitions).
    index: Mutex<Option<(Catalog, Arc<Index>)>>,
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

/// Why the manifest files of a snapshot cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A path that does not exist.
    #[error("{}: no such file or directory", .0.display())]
    Missing(PathBuf),
    /// A path with no manifest file.
    #[error("{}: no .yaml, .yml or .json files", .0.display())]
    NoManifests(PathBuf),
    /// A file that cannot be read.
    #[error("{}: {source}", .file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: crate::folder::read::ReadError,
    },
    /// A file that does not parse.
    #[error("{}: {source}", .file.display())]
    Parse {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: crate::manifest::ManifestError,
    },
}

impl Snapshot {
    /// Reads every manifest file in `paths` (files or directories, walked as `serve` walks
    /// them: each file once through link loops, special files skipped with a warning, reads
    /// bounded). An unreadable or unparseable file is an error; a document that is not a
    /// usable object is a warning. The same identity twice keeps its first document, in one
    /// file as across files (as `serve` does).
    pub fn load(paths: &[PathBuf], limits: Limits) -> Result<Snapshot, LoadError> {
        let mut snapshot = Snapshot::default();
        for path in paths {
            let walk = crate::folder::walk(path, crate::folder::is_manifest);
            if !walk.exists {
                return Err(LoadError::Missing(path.clone()));
            }
            for problem in walk.problems {
                snapshot.warn(problem);
            }
            if walk.files.is_empty() {
                return Err(LoadError::NoManifests(path.clone()));
            }
            // Read, parse and convert on every core, at most `--max-reload-bytes` of files
            // at once; add in file order.
            let read = crate::folder::batches(&walk.files, usize::MAX, |(_, stamp)| stamp.size())
                .into_iter()
                .flat_map(|batch| {
                    crate::folder::read_in_parallel(batch, |(file, _)| {
                        let source = file.display().to_string();
                        let text =
                            crate::folder::read_text(file).map_err(|source| LoadError::Read {
                                file: file.clone(),
                                source,
                            })?;
                        let converted = manifests::convert(&text, limits).map_err(|source| {
                            LoadError::Parse {
                                file: file.clone(),
                                source,
                            }
                        })?;
                        Ok::<_, LoadError>((source, converted))
                    })
                })
                .collect::<Vec<_>>();
            for result in read {
                let (source, converted) = result?;
                let file = snapshot.source(&source);
                for c in converted.objects {
                    snapshot.add_converted(Ok(c), file);
                }
                for note in converted.skipped.first {
                    snapshot.warn(format!("{source}: skipped a document: {note}"));
                }
                snapshot.warnings_dropped += converted.skipped.more;
            }
        }
        Ok(snapshot)
    }

    /// Adds one object or pod; unusable documents become warnings. An identity seen before
    /// keeps its first document (a warning names both sources).
    pub fn add(&mut self, doc: &Json, limits: Limits, source: &str) {
        let file = self.source(source);
        self.add_converted(Cached::from_json(doc, limits), file);
    }

    /// The number of `source` (the last one, or a new one).
    fn source(&mut self, source: &str) -> u32 {
        if self.sources.last().is_none_or(|s| **s != *source) {
            self.sources.push(source.into());
        }
        u32::try_from(self.sources.len() - 1).unwrap_or(u32::MAX)
    }

    /// Keeps a warning (the first [`MAX_WARNINGS`]; the others are counted).
    fn warn(&mut self, warning: String) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(warning);
        } else {
            self.warnings_dropped += 1;
        }
    }

    /// [`Snapshot::add`] of an already converted document from source number `file`.
    fn add_converted(&mut self, converted: Result<Cached, Skip>, file: u32) {
        let source = self.sources[file as usize].clone();
        match converted {
            Ok(cached) => {
                let identity = manifests::identity(&cached);
                if let Some(first) = self.seen.get(&identity) {
                    let first = self.sources[*first as usize].clone();
                    let meta = cached.meta();
                    self.warn(format!(
                        "{source}: {}/{} (uid {identity}) is also in {first}; the copy in {first} is used (remove one, or give them different uids)",
                        meta.kind,
                        meta.key(),
                    ));
                    return;
                }
                self.seen.insert(identity, file);
                self.objects.push(cached);
                *self.index.lock() = None;
            }
            Err(e) => self.warn(format!("{source}: skipped a document: {e}")),
        }
    }

    /// The index over the snapshot for `catalog` (built on first use per catalog; objects
    /// are stored, nothing is resolved until asked).
    pub fn index(&self, catalog: &Catalog) -> Arc<Index> {
        let mut slot = self.index.lock();
        if let Some((seen, index)) = slot.as_ref()
            && seen.same_definitions(catalog)
        {
            return index.clone();
        }
        let index = Arc::new(Index::new(catalog.clone(), &[]));
        {
            let mut batch = index.batch();
            let source: Arc<str> = Arc::from("files");
            for c in &self.objects {
                batch.write(Write::Apply {
                    source: source.clone(),
                    object: Incoming::Converted(Ok(c.clone())),
                });
            }
            batch.skip_resolution();
        }
        *slot = Some((catalog.clone(), index.clone()));
        index
    }

    /// Warnings for every object whose controller chain runs into an owner cycle (under
    /// `catalog`'s view of the objects).
    pub fn owner_cycles(&self, catalog: &Catalog) -> Vec<String> {
        self.index(catalog).owner_cycles()
    }

    /// Every object and pod, in load order.
    pub fn objects(&self) -> &[Cached] {
        &self.objects
    }

    /// All pods.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.objects
            .iter()
            .filter_map(|c| match c {
                Cached::Pod(p) => Some(p.clone()),
                Cached::Object(_) => None,
            })
            .collect()
    }

    /// Every root workload: objects (and bare pods) whose kind has a definition and whose
    /// controller chain holds no kind that has one.
    pub fn roots(&self, catalog: &Catalog) -> Vec<ObjectMeta> {
        self.index(catalog).roots()
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
        let in_ns = |m: &ObjectMeta| namespace.is_none_or(|ns| m.namespace == ns);
        let mut roots: Vec<ObjectMeta> = self
            .roots(catalog)
            .into_iter()
            .filter(|m| in_ns(m))
            .collect();
        roots.sort_by(|a, b| {
            (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name))
        });
        let describe = |ms: &[ObjectMeta]| {
            ms.iter()
                .map(|m| format!("{}/{}", m.kind, m.key()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(t) = target else {
            return match roots.as_slice() {
                [one] => Ok(one.clone()),
                [] => Err(SnapshotError::NotFound(
                    "the files hold no root workload of a kind with a definition".into(),
                )),
                many => Err(SnapshotError::Ambiguous(format!(
                    "several root workloads; name one as KIND/NAME: {}",
                    describe(many)
                ))),
            };
        };
        let (kind, name) = t.split_once('/').ok_or_else(|| {
            SnapshotError::NotFound(format!("`{t}` is not of the form KIND/NAME"))
        })?;
        // `kind` or `kind.group`, as kubectl takes them.
        let (kind, group) = kind.split_once('.').unwrap_or((kind, ""));
        let kind = kind.to_ascii_lowercase();
        let named = |m: &ObjectMeta| {
            let k = m.kind.to_ascii_lowercase();
            (k == kind || format!("{k}s") == kind)
                && m.name == name
                && (group.is_empty() || m.gvk().group == group)
        };
        let mut matches: Vec<ObjectMeta> = roots.iter().filter(|m| named(m)).cloned().collect();
        if matches.is_empty() {
            matches = self.index(catalog).objects_where(|m| {
                in_ns(m) && named(m) && catalog.lookup(&m.api_version, &m.kind).is_some()
            });
            matches.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        }
        match matches.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(SnapshotError::NotFound(format!(
                "no workload {t}; the files hold: {}",
                describe(&roots)
            ))),
            many => Err(SnapshotError::Ambiguous(self.ambiguity(many))),
        }
    }

    /// Why `matches` (two or more distinct objects) are ambiguous, and what would tell them
    /// apart: `-n`, the API group, or passing only one file.
    fn ambiguity(&self, matches: &[ObjectMeta]) -> String {
        let describe = |m: &ObjectMeta| {
            let identity: Arc<str> = if m.uid.is_empty() {
                m.identity().into()
            } else {
                m.uid.clone()
            };
            let file = self
                .seen
                .get(&identity)
                .map_or("", |f| &*self.sources[*f as usize]);
            let uid = if m.uid.is_empty() {
                String::new()
            } else {
                format!(" uid {}", m.uid)
            };
            format!("{} {}/{}{uid} in {file}", m.api_version, m.kind, m.key())
        };
        let listed: Vec<String> = matches.iter().map(describe).collect();
        let first = &matches[0];
        let all = |same: &dyn Fn(&ObjectMeta) -> bool| matches.iter().all(same);
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

    /// Resolves the workload `root` with the pods whose controller chain reaches it.
    pub fn resolve(
        &self,
        catalog: &Catalog,
        root: &ObjectMeta,
        deadline: Option<Instant>,
    ) -> Result<Resolution, SnapshotError> {
        let index = self.index(catalog);
        index
            .resolve_now(&root.identity(), deadline)
            .map_err(|e| match e {
                OnDemand::NoDefinition(gvk) => SnapshotError::NoDefinition(gvk),
                OnDemand::NotCached => SnapshotError::NotFound(format!(
                    "{}/{} is not in the snapshot",
                    root.kind,
                    root.key()
                )),
            })
    }
}
