//! `serve --manifests DIR`: every YAML/JSON file below DIR is the cluster.
//!
//! The directory is scanned by metadata ([`super::files`]): a scan with nothing changed reads
//! no file, and a changed file is parsed alone, its objects sent to the index as adds,
//! replacements and removals of that file's objects only. A file that stops parsing (a
//! half-saved edit) keeps its last good objects, with the error reported (log,
//! `kartograf_source_problems`, `Sources.ListSources`); a directory that disappears keeps
//! everything until it is back. An object defined in two files is taken from the first file
//! by path, and both the log and a `source_note` diagnostic on its workload say so.

use super::files::{self, DirWatch, Tracker, Walk};
use crate::expr::Limits;
use crate::index::{Index, SourceProblem, Update};
use crate::manifest;
use crate::object::Cached;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The source name used in the index.
pub const SOURCE: &str = "manifests";

/// An object's identity (its uid, or kind/namespace/name without one).
type Identity = Arc<str>;

/// Files read, parsed and converted together (on every core) during a scan.
const BATCH_FILES: usize = 64;

/// What reading a candidate file gave.
enum Outcome {
    Unchanged,
    Unreadable(String),
    Failed(u64, String),
    Parsed(u64, Vec<Result<Cached, String>>),
}

/// The objects a file gave, by identity.
type FileObjects = Vec<(Identity, Cached)>;

/// The documents of a directory tree as the index should hold them.
pub struct ManifestSet {
    root: PathBuf,
    limits: Limits,
    tracker: Tracker<FileObjects>,
    /// Files defining each identity, sorted: the first is the one in effect.
    providers: HashMap<Identity, Vec<PathBuf>>,
    /// Identities noted as duplicates last time.
    noted: HashSet<Identity>,
    /// Current problems per file (or the directory itself).
    problems: std::collections::BTreeMap<PathBuf, String>,
}

impl ManifestSet {
    /// An empty set over `root` (nothing read yet).
    pub fn new(root: &Path, limits: Limits) -> ManifestSet {
        ManifestSet {
            root: root.to_path_buf(),
            limits,
            tracker: Tracker::default(),
            providers: HashMap::new(),
            noted: HashSet::new(),
            problems: std::collections::BTreeMap::new(),
        }
    }

    /// The problems known now: files that failed (they keep their last good objects), a
    /// missing directory, objects defined in two files.
    pub fn problems(&self) -> Vec<SourceProblem> {
        self.problems
            .iter()
            .map(|(p, m)| SourceProblem {
                path: p.display().to_string(),
                message: m.clone(),
            })
            .collect()
    }

    /// How many files this set has read.
    pub fn reads(&self) -> u64 {
        self.tracker.reads()
    }

    /// How many objects are in effect.
    pub fn objects(&self) -> usize {
        self.providers.len()
    }

    /// Scans the tree and returns what changed for the index. Reads only files whose
    /// metadata changed; parses only those whose content changed.
    pub fn scan(&mut self) -> Update {
        let walk: Walk = files::walk(&self.root, files::is_manifest);
        self.problems
            .retain(|p, _| p != &self.root && !p.starts_with("walk:"));
        if !walk.exists {
            self.problems.insert(
                self.root.clone(),
                "the directory does not exist (removed or renamed?); its objects stay until it is back".to_owned(),
            );
            return Update::default();
        }
        for problem in &walk.problems {
            self.problems
                .insert(PathBuf::from(format!("walk:{problem}")), problem.clone());
        }
        let scan = self.tracker.scan(&walk);
        let mut touched: BTreeSet<Identity> = BTreeSet::new();
        for path in &scan.removed {
            self.problems.remove(path);
            if let Some(objects) = self.tracker.remove(path) {
                for (id, _) in objects {
                    self.drop_provider(&id, path);
                    touched.insert(id);
                }
            }
        }
        // Candidates are read, parsed and converted on every core, a batch at a time (so a
        // cold start never holds the whole directory's text and parse trees at once).
        let limits = self.limits;
        for batch in scan.candidates.chunks(BATCH_FILES) {
            let tracker = &self.tracker;
            let read = files::parallel_map(batch.to_vec(), |c| {
                let outcome = match tracker.read(&c) {
                    files::Read::Unchanged => Outcome::Unchanged,
                    files::Read::Unreadable(why) => Outcome::Unreadable(why),
                    files::Read::Changed(text, hash) => match manifest::parse_documents(&text) {
                        Ok(docs) => Outcome::Parsed(
                            hash,
                            docs.iter().map(|d| Cached::from_json(d, limits)).collect(),
                        ),
                        Err(e) => Outcome::Failed(hash, e),
                    },
                };
                (c, outcome)
            });
            for (c, outcome) in read {
                match outcome {
                    Outcome::Unchanged => self.tracker.unchanged(&c),
                    Outcome::Unreadable(why) => {
                        tracing::warn!(file = %c.path.display(), "cannot read a manifest file (its last good objects stay): {why}");
                        self.problems.insert(c.path.clone(), why);
                    }
                    Outcome::Failed(hash, e) => {
                        tracing::warn!(file = %c.path.display(), "a manifest file does not parse; its last good objects stay: {e}");
                        self.problems.insert(c.path.clone(), e);
                        self.tracker.failed(&c, hash);
                    }
                    Outcome::Parsed(hash, docs) => self.take(&c, hash, docs, &mut touched),
                }
            }
        }
        self.changes(touched)
    }

    /// Takes a changed file's converted documents: its objects, and what changed.
    fn take(
        &mut self,
        c: &files::Candidate,
        hash: u64,
        docs: Vec<Result<Cached, String>>,
        touched: &mut BTreeSet<Identity>,
    ) {
        let path = &c.path;
        let mut skipped = Vec::new();
        let mut objects: FileObjects = Vec::with_capacity(docs.len());
        let mut seen: HashSet<Identity> = HashSet::new();
        for converted in docs {
            match converted {
                Ok(cached) => {
                    let id: Identity = cached.meta().identity().into();
                    if !seen.insert(id.clone()) {
                        skipped.push(format!(
                            "{id} is defined twice in this file; the last one is used"
                        ));
                        objects.retain(|(i, _)| i != &id);
                    }
                    objects.push((id, cached));
                }
                Err(e) => skipped.push(e),
            }
        }
        if skipped.is_empty() {
            self.problems.remove(path);
        } else {
            for s in &skipped {
                tracing::warn!(file = %path.display(), "skipped a manifest document: {s}");
            }
            self.problems.insert(path.clone(), skipped.join("; "));
        }
        let old: HashMap<Identity, Cached> = self
            .tracker
            .payload(path)
            .map(|o| o.iter().cloned().collect())
            .unwrap_or_default();
        for id in old.keys().filter(|id| !seen.contains(*id)) {
            self.drop_provider(id, path);
            touched.insert(id.clone());
        }
        for (id, cached) in &objects {
            let providers = self.providers.entry(id.clone()).or_default();
            if let Err(at) = providers.binary_search(path) {
                providers.insert(at, path.clone());
            }
            // An object whose content did not change needs nothing sent.
            if !old.get(id).is_some_and(|o| o.same(cached)) {
                touched.insert(id.clone());
            }
        }
        self.tracker.keep(c, hash, objects);
    }

    fn drop_provider(&mut self, id: &Identity, path: &Path) {
        if let Some(providers) = self.providers.get_mut(id) {
            providers.retain(|p| p != path);
            if providers.is_empty() {
                self.providers.remove(id);
            }
        }
    }

    /// What the index must do for each touched identity: the first file's copy, or removal.
    fn changes(&mut self, touched: BTreeSet<Identity>) -> Update {
        let mut update = Update::default();
        for id in touched {
            let Some(providers) = self.providers.get(&id) else {
                update.deletes.push(id.to_string());
                if self.noted.remove(&id) {
                    update.notes.push((id.to_string(), None));
                }
                continue;
            };
            let first = &providers[0];
            let copy = self
                .tracker
                .payload(first)
                .and_then(|o| o.iter().find(|(i, _)| i == &id))
                .map(|(_, c)| c.clone());
            if let Some(cached) = copy {
                update.upserts.push(cached);
            }
            if providers.len() > 1 {
                let files: Vec<String> =
                    providers.iter().map(|p| p.display().to_string()).collect();
                let note = format!(
                    "{id} is defined in {} files ({}); the copy in {} is used",
                    files.len(),
                    files.join(", "),
                    files[0]
                );
                tracing::warn!("{note}");
                self.noted.insert(id.clone());
                update.notes.push((id.to_string(), Some(note)));
            } else if self.noted.remove(&id) {
                update.notes.push((id.to_string(), None));
            }
        }
        update
    }

    /// Every object in effect (the first file's copy of each identity).
    pub fn current(&self) -> Vec<Cached> {
        let mut out = Vec::with_capacity(self.providers.len());
        for (id, providers) in &self.providers {
            if let Some((_, c)) = self
                .tracker
                .payload(&providers[0])
                .and_then(|o| o.iter().find(|(i, _)| i == id))
            {
                out.push(c.clone());
            }
        }
        out
    }
}

/// Reads every object below `path` once (for callers that do not watch): the objects in
/// effect and the problems met.
pub fn read_once(path: &Path) -> (Vec<Cached>, Vec<SourceProblem>) {
    let mut set = ManifestSet::new(path, Limits::default());
    let update = set.scan();
    (update.upserts, set.problems())
}

/// Loads `dir` into the index, marks the source synced, then keeps the index in step with
/// the files until the task is dropped. Scans run on a blocking thread.
pub async fn run(index: Arc<Index>, dir: PathBuf) {
    run_with(index, dir, files::RESCAN).await;
}

/// [`run`] with the period of the scan that runs even without file events.
pub async fn run_with(index: Arc<Index>, dir: PathBuf, rescan: Duration) {
    // Watch first, so no edit made right after the initial load is missed.
    let (mut watch, mut ticks) = DirWatch::start(&dir, rescan);
    let feed = index.feed();
    let mut set = ManifestSet::new(&dir, Limits::default());
    let mut first = true;
    loop {
        let scanned = tokio::task::spawn_blocking(move || {
            let update = set.scan();
            (set, update)
        })
        .await;
        let update;
        (set, update) = match scanned {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "scanning the manifest directory failed");
                return;
            }
        };
        index.set_source_problems(SOURCE, set.problems());
        if first {
            // The first scan replaces whatever the source held.
            let skipped = feed
                .reset(SOURCE, update.upserts.into_iter().map(Ok).collect())
                .await;
            for s in skipped {
                tracing::warn!(skipped = %s, "skipped a manifest document");
            }
            feed.update(
                SOURCE,
                Update {
                    notes: update.notes,
                    ..Update::default()
                },
            )
            .await;
            feed.mark_synced(SOURCE);
            first = false;
            tracing::info!(dir = %dir.display(), objects = set.objects(), revision = index.revision(), "manifests loaded");
        } else if !update.is_empty() {
            let (upserts, deletes) = (update.upserts.len(), update.deletes.len());
            feed.update(SOURCE, update).await;
            tracing::info!(
                changed = upserts,
                removed = deletes,
                revision = index.revision(),
                "manifests reloaded"
            );
        }
        watch.refresh();
        if ticks.recv().await.is_none() {
            return;
        }
    }
}
