//! `serve --manifests DIR`: every YAML/JSON file below DIR is the cluster.
//!
//! The directory is scanned by metadata ([`super::files`]): a scan with nothing changed reads
//! no file, and a changed file is parsed alone, its objects sent to the index as adds,
//! replacements and removals of that file's objects only. A file that stops parsing (a
//! half-saved edit) keeps its last good objects, with the error reported (log,
//! `kartograf_source_problems`, `Sources.ListSources`); a directory that disappears keeps
//! everything until it is back. An object defined in two files is taken from the first file
//! by path, and both the log and a `source_note` diagnostic on its workload say so.

use super::files::{self, DirWatch, Tracker};
use crate::board::SourceProblem;
use crate::expr::Limits;
use crate::folder::Walk;
use crate::index::{Index, Update};
use crate::manifest;
use crate::model::Cached;
use crate::model::{Skip, SkipCounts, Skipped};
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    Parsed(u64, Converted),
}

/// The objects a file gave, sorted by identity, one per identity.
#[derive(Default)]
struct FileObjects(Vec<(Identity, Cached)>);

impl FileObjects {
    fn get(&self, id: &str) -> Option<&Cached> {
        self.0
            .binary_search_by(|(i, _)| i.as_ref().cmp(id))
            .ok()
            .map(|at| &self.0[at].1)
    }
}

/// The files defining one identity (by file number), in path order: the first is in effect.
enum Providers {
    One(u32),
    Many(Vec<u32>),
}

impl Providers {
    fn as_slice(&self) -> &[u32] {
        match self {
            Providers::One(f) => std::slice::from_ref(f),
            Providers::Many(fs) => fs,
        }
    }
}

/// The documents of a directory tree as the index should hold them.
pub struct ManifestSet {
    root: PathBuf,
    limits: Limits,
    tracker: Tracker<FileObjects>,
    /// Files defining each identity (see [`Providers`]).
    providers: HashMap<Identity, Providers>,
    /// File numbers: each path once.
    files: Vec<PathBuf>,
    file_numbers: HashMap<PathBuf, u32>,
    /// Identities defined in more than one file, with the note about them.
    noted: BTreeMap<Identity, String>,
    /// Current problems per file (or the directory itself).
    problems: std::collections::BTreeMap<PathBuf, String>,
    /// Documents skipped since the last update, by reason (for the index's counts).
    skip_counts: SkipCounts,
}

impl ManifestSet {
    /// An empty set over `root` (nothing read yet).
    pub fn new(root: &Path, limits: Limits) -> ManifestSet {
        ManifestSet {
            root: root.to_path_buf(),
            limits,
            tracker: Tracker::default(),
            providers: HashMap::new(),
            files: Vec::new(),
            file_numbers: HashMap::new(),
            noted: BTreeMap::new(),
            problems: std::collections::BTreeMap::new(),
            skip_counts: SkipCounts::default(),
        }
    }

    /// The problems known now: files that failed (they keep their last good objects), a
    /// missing directory, objects defined in two files.
    pub fn problems(&self) -> Vec<SourceProblem> {
        let files = self.problems.iter().map(|(p, m)| SourceProblem {
            path: p.display().to_string(),
            message: m.clone(),
        });
        let duplicates = self.noted.iter().map(|(id, note)| SourceProblem {
            path: id.to_string(),
            message: note.clone(),
        });
        files.chain(duplicates).collect()
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
        self.scan_each(None)
    }

    /// [`ManifestSet::scan`], handing what each batch of files changed to `emit` as soon
    /// as it is parsed (so a cold start indexes while it still reads); returns the rest.
    pub fn scan_streaming(&mut self, emit: &mut dyn FnMut(Update)) -> Update {
        self.scan_each(Some(emit))
    }

    fn scan_each(&mut self, mut emit: Option<&mut dyn FnMut(Update)>) -> Update {
        let walk: Walk = crate::folder::walk(&self.root, crate::folder::is_manifest);
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
                for (id, _) in objects.0 {
                    self.drop_provider(&id, path);
                    touched.insert(id);
                }
            }
        }
        // Candidates are read, parsed and converted on every core, a batch at a time (so a
        // cold start never holds the whole directory's text and parse trees at once, and a
        // batch holds at most `--max-reload-bytes` of files).
        let limits = self.limits;
        for batch in crate::folder::batches(&scan.candidates, BATCH_FILES, |c| c.size()) {
            let tracker = &self.tracker;
            let read = crate::folder::read_in_parallel(batch, |c| match tracker.read(c) {
                files::Read::Unchanged => Outcome::Unchanged,
                files::Read::Unreadable(why) => Outcome::Unreadable(why.to_string()),
                files::Read::Changed(text, hash) => match convert(&text, limits) {
                    Ok(docs) => Outcome::Parsed(hash, docs),
                    Err(e) => Outcome::Failed(hash, e.to_string()),
                },
            });
            for (c, outcome) in batch.iter().zip(read) {
                match outcome {
                    Outcome::Unchanged => self.tracker.unchanged(c),
                    Outcome::Unreadable(why) => {
                        tracing::warn!(file = %c.path.display(), "cannot read a manifest file (its last good objects stay): {why}");
                        self.problems.insert(c.path.clone(), why);
                        self.tracker.unreadable(c);
                    }
                    Outcome::Failed(hash, e) => {
                        tracing::warn!(file = %c.path.display(), "a manifest file does not parse; its last good objects stay: {e}");
                        self.problems.insert(c.path.clone(), e);
                        self.tracker.failed(c, hash);
                    }
                    Outcome::Parsed(hash, docs) => self.take(c, hash, docs, &mut touched),
                }
            }
            if let Some(emit) = emit.as_mut() {
                emit(self.changes(std::mem::take(&mut touched)));
            }
        }
        self.changes(touched)
    }

    /// Takes a changed file's converted documents: its objects, and what changed.
    fn take(
        &mut self,
        c: &files::Candidate,
        hash: u64,
        docs: Converted,
        touched: &mut BTreeSet<Identity>,
    ) {
        let path = &c.path;
        let mut skipped = docs.skipped;
        self.skip_counts.merge(&docs.skip_counts);
        let mut all: Vec<(Identity, Cached)> = docs
            .objects
            .into_iter()
            .map(|cached| (identity(&cached), cached))
            .collect();
        // One object per identity: the file's first document of it (as across files, and
        // as `resolve -f` reads files). The sort is stable: equal identities keep their order.
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let mut objects: Vec<(Identity, Cached)> = Vec::with_capacity(all.len());
        for (id, cached) in all {
            if objects.last().is_some_and(|(last, _)| *last == id) {
                let duplicate = Skip::Duplicate(id.to_string());
                self.skip_counts.add(&duplicate);
                skipped.push(|| duplicate.to_string());
                continue;
            }
            objects.push((id, cached));
        }
        let objects = FileObjects(objects);
        if skipped.is_empty() {
            self.problems.remove(path);
        } else {
            let lines: Vec<String> = skipped.lines().collect();
            for s in &lines {
                tracing::warn!(file = %path.display(), "skipped a manifest document: {s}");
            }
            self.problems.insert(path.clone(), lines.join("; "));
        }
        let gone: Vec<Identity> = self
            .tracker
            .payload(path)
            .map(|old| {
                old.0
                    .iter()
                    .filter(|(id, _)| objects.get(id).is_none())
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in gone {
            self.drop_provider(&id, path);
            touched.insert(id);
        }
        let file = self.file_number(path);
        for (id, cached) in &objects.0 {
            self.add_provider(id, file);
            // An object whose content did not change needs nothing sent.
            let old = self.tracker.payload(path).and_then(|old| old.get(id));
            if !old.is_some_and(|o| o.same(cached)) {
                touched.insert(id.clone());
            }
        }
        self.tracker.keep(c, hash, objects);
    }

    fn file_number(&mut self, path: &Path) -> u32 {
        if let Some(n) = self.file_numbers.get(path) {
            return *n;
        }
        let n = u32::try_from(self.files.len()).unwrap_or(u32::MAX);
        self.files.push(path.to_path_buf());
        self.file_numbers.insert(path.to_path_buf(), n);
        n
    }

    fn add_provider(&mut self, id: &Identity, file: u32) {
        let files = &self.files;
        let by_path = |a: &u32, b: &u32| files[*a as usize].cmp(&files[*b as usize]);
        match self.providers.get_mut(id) {
            None => {
                self.providers.insert(id.clone(), Providers::One(file));
            }
            Some(Providers::One(f)) if *f == file => {}
            Some(Providers::One(f)) => {
                let mut all = vec![*f, file];
                all.sort_by(by_path);
                self.providers.insert(id.clone(), Providers::Many(all));
            }
            Some(Providers::Many(all)) => {
                if !all.contains(&file) {
                    all.push(file);
                    all.sort_by(by_path);
                }
            }
        }
    }

    fn drop_provider(&mut self, id: &Identity, path: &Path) {
        let Some(&file) = self.file_numbers.get(path) else {
            return;
        };
        let remove = match self.providers.get_mut(id) {
            Some(Providers::One(f)) => *f == file,
            Some(Providers::Many(all)) => {
                all.retain(|f| *f != file);
                if let [only] = all[..] {
                    self.providers.insert(id.clone(), Providers::One(only));
                }
                false
            }
            None => false,
        };
        if remove {
            self.providers.remove(id);
        }
    }

    /// What the index must do for each touched identity: the first file's copy, or removal.
    fn changes(&mut self, touched: BTreeSet<Identity>) -> Update {
        let mut update = Update {
            skipped: std::mem::take(&mut self.skip_counts),
            ..Update::default()
        };
        for id in touched {
            let Some(providers) = self.providers.get(&id) else {
                update.deletes.push(id.to_string());
                if self.noted.remove(&id).is_some() {
                    update.notes.push((id.to_string(), None));
                }
                continue;
            };
            let providers = providers.as_slice();
            let first = &self.files[providers[0] as usize];
            let copy = self
                .tracker
                .payload(first)
                .and_then(|o| o.get(&id))
                .cloned();
            if let Some(cached) = copy {
                update.upserts.push(cached);
            }
            if providers.len() > 1 {
                let files: Vec<String> = providers
                    .iter()
                    .map(|f| self.files[*f as usize].display().to_string())
                    .collect();
                let note = format!(
                    "{id} is defined in {} files ({}); the copy in {} is used",
                    files.len(),
                    files.join(", "),
                    files[0]
                );
                tracing::warn!("{note}");
                self.noted.insert(id.clone(), note.clone());
                update.notes.push((id.to_string(), Some(note)));
            } else if self.noted.remove(&id).is_some() {
                update.notes.push((id.to_string(), None));
            }
        }
        update
    }

    /// Every object in effect (the first file's copy of each identity).
    pub fn current(&self) -> Vec<Cached> {
        let mut out = Vec::with_capacity(self.providers.len());
        for (id, providers) in &self.providers {
            let first = &self.files[providers.as_slice()[0] as usize];
            if let Some(c) = self.tracker.payload(first).and_then(|o| o.get(id)) {
                out.push(c.clone());
            }
        }
        out
    }
}

/// An object's identity: its uid (the object's own copy, which the index shares too), or a
/// stand-in without one.
pub(crate) fn identity(cached: &Cached) -> Identity {
    let meta = cached.meta();
    if meta.uid.is_empty() {
        meta.identity().into()
    } else {
        meta.uid.clone()
    }
}

/// Messages about one file's documents kept in full; beyond these they are counted.
pub const MAX_NOTES: usize = 20;

/// Messages about a file's documents: the first [`MAX_NOTES`], and how many more there were.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Notes {
    /// The first messages.
    pub first: Vec<String>,
    /// Messages beyond those, counted only.
    pub more: usize,
}

impl Notes {
    /// Keeps `note` (or counts it when [`MAX_NOTES`] are kept already).
    pub fn push(&mut self, note: impl FnOnce() -> String) {
        if self.first.len() < MAX_NOTES {
            self.first.push(note());
        } else {
            self.more += 1;
        }
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }

    /// Every message, and one for the number of the others.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        let more = (self.more > 0).then(|| format!("… and {} more", self.more));
        self.first.iter().cloned().chain(more)
    }
}

/// A file's documents converted: the objects, and why the others were skipped.
#[derive(Default)]
pub struct Converted {
    /// The objects, in document order.
    pub objects: Vec<Cached>,
    /// Documents that are not usable objects.
    pub skipped: Notes,
    /// The same, counted by reason.
    pub skip_counts: SkipCounts,
}

impl Converted {
    fn add(&mut self, converted: Result<Cached, Skip>) {
        match converted {
            Ok(c) => self.objects.push(c),
            Err(e) => self.skip(e),
        }
    }

    /// Notes and counts one skipped document.
    fn skip(&mut self, skip: Skip) {
        self.skip_counts.add(&skip);
        self.skipped.push(|| skip.to_string());
    }
}

/// A file's objects, each converted, and why others were not; `Err` when the file does not
/// parse. JSON objects (one, or a `---` stream) are packed while they are parsed, and the
/// items of a JSON `…List` are parsed one at a time (no tree of the whole file is built); a
/// YAML stream is parsed one document at a time ([`manifest::yaml_documents`]).
pub(crate) fn convert(text: &str, limits: Limits) -> Result<Converted, manifest::ManifestError> {
    if let Some(docs) = manifest::json_stream(text) {
        let mut out = Converted::default();
        let mut json = true;
        for doc in docs {
            if let Some(cached) = Cached::from_json_text(doc, limits) {
                out.objects.push(cached);
                continue;
            }
            let mut items = Converted::default();
            if manifest::json_list_items(doc, &mut |item| {
                items.add(Cached::from_json(&item, limits));
            }) {
                out.objects.append(&mut items.objects);
                for note in items.skipped.first {
                    out.skipped.push(|| note);
                }
                out.skipped.more += items.skipped.more;
                out.skip_counts.merge(&items.skip_counts);
                continue;
            }
            // A document on its own (not a usable object, or not JSON: then the whole file
            // is read as YAML, as a whole parse would).
            match manifest::from_json_strict(doc) {
                Ok(value) => {
                    let mut values = Vec::new();
                    manifest::flatten(value, &mut values);
                    for v in &values {
                        out.add(Cached::from_json(v, limits));
                    }
                }
                Err(_) => {
                    json = false;
                    break;
                }
            }
        }
        if json {
            return Ok(out);
        }
    }
    // YAML: one document at a time when the stream can be cut, else whole.
    let mut out = Converted::default();
    if manifest::yaml_documents(text, &mut |d| out.add(Cached::from_json(&d, limits)))? {
        return Ok(out);
    }
    let mut out = Converted::default();
    for d in &manifest::parse_documents(text)? {
        out.add(Cached::from_json(d, limits));
    }
    Ok(out)
}

/// Reads every object below `path` once (for callers that do not watch): the objects in
/// effect and the problems met.
pub fn read_once(path: &Path) -> (Vec<Cached>, Vec<SourceProblem>) {
    let mut set = ManifestSet::new(path, Limits::default());
    let update = set.scan();
    (update.upserts, set.problems())
}

fn log_skipped(skipped: Skipped) {
    for s in skipped.lines() {
        tracing::warn!(skipped = %s, "skipped a manifest document");
    }
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
        let streaming = first.then(|| (feed.clone(), tokio::runtime::Handle::current()));
        let scanned = tokio::task::spawn_blocking(move || {
            let Some((feed, runtime)) = streaming else {
                let update = set.scan();
                return (set, update);
            };
            // The first scan replaces whatever the source held, then hands each batch of
            // files to the index writer as soon as it is parsed: reading and indexing overlap.
            let skipped = runtime.block_on(feed.reset(SOURCE, Vec::new()));
            log_skipped(skipped);
            let mut queued = Vec::new();
            let rest = set.scan_streaming(&mut |update| {
                queued.push(feed.write_queued(update.into_writes(SOURCE)));
            });
            queued.push(feed.write_queued(rest.into_writes(SOURCE)));
            for applied in queued {
                log_skipped(runtime.block_on(applied).unwrap_or_default());
            }
            (set, Update::default())
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
            // Applied by now (streamed from the scan).
            feed.mark_synced(SOURCE);
            first = false;
            tracing::info!(dir = %dir.display(), objects = set.objects(), revision = index.board().revision(), "manifests loaded");
        } else if !update.is_empty() {
            let (upserts, deletes) = (update.upserts.len(), update.deletes.len());
            log_skipped(feed.write_all(update.into_writes(SOURCE)).await);
            tracing::info!(
                changed = upserts,
                removed = deletes,
                revision = index.board().revision(),
                "manifests reloaded"
            );
        }
        watch.refresh();
        if ticks.recv().await.is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the whole-parse path gives for `text` (documents parsed to JSON, then converted).
    fn parsed_whole(text: &str) -> Converted {
        let mut out = Converted::default();
        for d in &manifest::parse_documents(text).unwrap() {
            out.add(Cached::from_json(d, Limits::default()));
        }
        out
    }

    fn assert_same(got: &Converted, want: &Converted) {
        assert_eq!(got.objects.len(), want.objects.len());
        for (g, w) in got.objects.iter().zip(&want.objects) {
            assert!(g.same_content(w), "{g:?} vs {w:?}");
        }
        assert_eq!(got.skipped, want.skipped);
    }

    #[test]
    fn a_json_stream_converts_as_its_whole_parse_does_lists_and_bad_documents_included() {
        let pod = |name: &str| {
            format!(
                r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}", "uid": "u-{name}"}},
                "spec": {{"nodeName": "n", "containers": [{{"name": "c", "resources": {{"requests": {{"cpu": "1"}}}}}}]}}}}"#
            )
        };
        let plain = format!("---\n{}\n---\n\n---\n{}\n", pod("a"), pod("b"));
        let list = format!(
            "{}\n---\n{{\"kind\": \"List\", \"apiVersion\": \"v1\", \"items\": [{}, {}]}}\n",
            pod("a"),
            pod("b"),
            pod("c")
        );
        let nameless = format!(
            "{}\n---\n{{\"kind\": \"Pod\", \"apiVersion\": \"v1\"}}\n",
            pod("a")
        );
        for text in [plain, list, nameless] {
            let _ = parsed_whole(&text);
            let got = convert(&text, Limits::default()).unwrap();
            assert_same(&got, &parsed_whole(&text));
        }
        // The list's items are the objects; the nameless document is reported, not dropped.
        let list = format!(
            "{{\"kind\": \"PodList\", \"items\": [{}, {}]}}",
            pod("x"),
            pod("y")
        );
        assert_eq!(convert(&list, Limits::default()).unwrap().objects.len(), 2);
        let nameless = convert("{\"kind\": \"Pod\"}", Limits::default()).unwrap();
        assert!(nameless.objects.is_empty());
        assert!(
            matches!(&nameless.skipped.first[..], [e] if e.contains("no kind or no metadata.name"))
        );
    }

    #[test]
    fn a_stream_that_is_not_all_json_objects_is_read_as_yaml_or_fails_whole() {
        let text = "{\"kind\": \"Pod\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"a\"}}\n---\nkind: Pod\napiVersion: v1\nmetadata:\n  name: b\n";
        let got = convert(text, Limits::default()).unwrap();
        assert_same(&got, &parsed_whole(text));
        assert_eq!(got.objects.len(), 2);
        assert!(convert("{\"kind\": \"Pod\", \"metadata\": {", Limits::default()).is_err());
    }

    #[test]
    fn the_same_uid_twice_in_one_file_keeps_the_first_copy_here_and_offline() {
        let d = std::env::temp_dir().join(format!("kartograf-uid-twice-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let job = |name: &str| {
            format!(
                "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}, namespace: ns, uid: same}}\n"
            )
        };
        let text = format!("{}---\n{}---\n{{}}\n", job("first"), job("second"));
        std::fs::write(d.join("a.yaml"), &text).unwrap();
        let mut set = ManifestSet::new(&d, Limits::default());
        set.scan();
        let current = set.current();
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].meta().name, "first");
        let problems = set.problems();
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("same is defined more than once")),
            "{problems:?}"
        );
        let snapshot =
            super::super::offline::Snapshot::load(std::slice::from_ref(&d), Limits::default())
                .expect("loads");
        let roots = snapshot
            .index(&crate::definition::Catalog::default())
            .objects_where(|_| true);
        assert_eq!(roots.len(), 1);
        assert_eq!(roots[0].name, "first");
        assert!(snapshot.warnings.iter().any(|w| w.contains("same")));
    }

    #[test]
    fn messages_about_a_files_documents_are_bounded() {
        let text = "{}\n---\n".repeat(10_000);
        let converted = convert(&text, Limits::default()).unwrap();
        assert!(converted.objects.is_empty());
        assert_eq!(converted.skipped.first.len(), MAX_NOTES);
        assert_eq!(converted.skipped.more, 10_000 - MAX_NOTES);
        let lines: Vec<String> = converted.skipped.lines().collect();
        assert_eq!(lines.len(), MAX_NOTES + 1);
        assert!(lines[MAX_NOTES].contains("9980 more"));
    }

    #[test]
    fn a_json_list_is_read_item_by_item_as_its_whole_parse() {
        let item = |n: u32| {
            format!(
                r#"{{"apiVersion": "batch/v1", "kind": "Job", "metadata": {{"name": "j{n}", "uid": "u{n}"}}}}"#
            )
        };
        // `kind` after `items` (as kubectl writes it), a nested List, an unusable item.
        let text = format!(
            r#"{{"apiVersion": "v1", "items": [{}, {{"kind": "List", "items": [{}]}}, {{}}], "kind": "List", "metadata": {{}}}}"#,
            item(1),
            item(2)
        );
        let got = convert(&text, Limits::default()).unwrap();
        assert_same(&got, &parsed_whole(&text));
        assert_eq!(got.objects.len(), 2);
        assert_eq!(got.skipped.first.len(), 1);
        // Not a List kind, or `items` not an array: the document itself, as a whole parse.
        for other in [
            format!(
                r#"{{"kind": "Job", "apiVersion": "batch/v1", "items": [{}], "metadata": {{"name": "x"}}}}"#,
                item(3)
            ),
            r#"{"kind": "JobList", "items": {"a": 1}}"#.to_owned(),
        ] {
            assert_same(
                &convert(&other, Limits::default()).unwrap(),
                &parsed_whole(&other),
            );
        }
    }
}
