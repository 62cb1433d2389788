//! Watched directories that cost nothing at rest: which files changed is decided from their
//! metadata (size, modification and change times, inode; [`crate::folder::walk`]), and only
//! files whose metadata changed are read; a file is parsed again only when its content hash
//! changed too.
//!
//! The watcher ignores the file accesses the walk itself causes, and also
//! watches the directory's parent, so a directory that is removed and created again is
//! watched again at once.

use crate::folder::{Stamp, Walk, count_read, max_file_bytes, read};
use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecursiveMode, Watcher};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Debounce after a file event before scanning.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// Periodic scan, in case an event was missed.
pub const RESCAN: Duration = Duration::from_secs(30);
/// What a tracked file last gave: its stamp, content hash and the caller's payload.
struct Known<T> {
    stamp: Stamp,
    hash: u64,
    /// `None` for a file that never parsed (remembered so it is not read again unchanged).
    payload: Option<T>,
}

/// A file whose metadata changed (or that is new): it must be read to know more.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The file.
    pub path: PathBuf,
    stamp: Stamp,
}

impl Candidate {
    /// The size the file reported.
    pub fn size(&self) -> u64 {
        self.stamp.size()
    }
}

/// What reading a candidate found.
pub enum Read {
    /// The same content as last time (only its metadata changed).
    Unchanged,
    /// New content, and its hash.
    Changed(String, u64),
    /// It could not be read (it keeps what it gave before).
    Unreadable(crate::folder::read::ReadError),
}

/// The files of a walk compared with what is known: candidates to read, and files gone.
#[derive(Debug, Default)]
pub struct Scan {
    /// Files that are new or whose metadata changed, by path.
    pub candidates: Vec<Candidate>,
    /// Files that are gone.
    pub removed: Vec<PathBuf>,
}

impl Scan {
    /// True when nothing may have changed.
    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty() && self.removed.is_empty()
    }
}

/// Files of a directory tree with what each last gave (`T`, the caller's parse result).
pub struct Tracker<T> {
    /// By path (hashed: a path is looked up once per object of a scan).
    known: HashMap<PathBuf, Known<T>>,
    /// Files this tracker has read.
    reads: AtomicU64,
}

impl<T> Default for Tracker<T> {
    fn default() -> Self {
        Tracker {
            known: HashMap::new(),
            reads: AtomicU64::new(0),
        }
    }
}

/// The content hash recorded for a file that could not be read (no content matches it, but
/// for a chance of one in 2^64).
const UNREAD: u64 = 0;

fn hash(bytes: &[u8]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(bytes)
}

impl<T> Tracker<T> {
    /// Compares a walk with what is known, from metadata alone (nothing is read).
    pub fn scan(&self, walk: &Walk) -> Scan {
        let present: HashSet<&Path> = walk.files.iter().map(|(p, _)| p.as_path()).collect();
        let mut removed: Vec<PathBuf> = self
            .known
            .keys()
            .filter(|p| !present.contains(p.as_path()))
            .cloned()
            .collect();
        removed.sort();
        let candidates = walk
            .files
            .iter()
            .filter(|(path, stamp)| self.known.get(path).is_none_or(|k| k.stamp != *stamp))
            .map(|(path, stamp)| Candidate {
                path: path.clone(),
                stamp: *stamp,
            })
            .collect();
        Scan {
            candidates,
            removed,
        }
    }

    /// Reads a candidate (safe to call from several threads at once): at most
    /// [`max_file_bytes`], whatever its metadata says, and only text.
    pub fn read(&self, c: &Candidate) -> Read {
        let max = max_file_bytes();
        if c.stamp.size() > max {
            return Read::Unreadable(crate::folder::read::ReadError::TooLarge(max));
        }
        count_read();
        self.reads.fetch_add(1, Ordering::Relaxed);
        let bytes = match read::bytes(&c.path, max) {
            Ok(b) => b,
            Err(e) => return Read::Unreadable(e),
        };
        let h = hash(&bytes);
        if self.known.get(&c.path).is_some_and(|k| k.hash == h) {
            return Read::Unchanged;
        }
        match read::text(bytes) {
            Ok(text) => Read::Changed(text, h),
            Err(e) => Read::Unreadable(e),
        }
    }

    /// Records a candidate whose content did not change (its new metadata is remembered).
    pub fn unchanged(&mut self, c: &Candidate) {
        if let Some(k) = self.known.get_mut(&c.path) {
            k.stamp = c.stamp;
        }
    }

    /// Records what a changed file gave after it parsed.
    pub fn keep(&mut self, c: &Candidate, hash: u64, payload: T) {
        self.known.insert(
            c.path.clone(),
            Known {
                stamp: c.stamp,
                hash,
                payload: Some(payload),
            },
        );
    }

    /// Records a changed file that failed to parse: it keeps its last good payload, and the
    /// same bad content is not read again at every scan.
    pub fn failed(&mut self, c: &Candidate, hash: u64) {
        let k = self.known.entry(c.path.clone()).or_insert(Known {
            stamp: c.stamp,
            hash,
            payload: None,
        });
        k.stamp = c.stamp;
        k.hash = hash;
    }

    /// Records a candidate that could not be read: it keeps its last good payload, it is
    /// known (so its removal is seen), and whatever it holds next counts as changed.
    pub fn unreadable(&mut self, c: &Candidate) {
        let k = self.known.entry(c.path.clone()).or_insert(Known {
            stamp: c.stamp,
            hash: UNREAD,
            payload: None,
        });
        k.stamp = c.stamp;
        k.hash = UNREAD;
    }

    /// How many files this tracker has read.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Forgets a removed file; returns what it gave.
    pub fn remove(&mut self, path: &Path) -> Option<T> {
        self.known.remove(path).and_then(|k| k.payload)
    }

    /// What a file gave last, if it ever parsed.
    pub fn payload(&self, path: &Path) -> Option<&T> {
        self.known.get(path).and_then(|k| k.payload.as_ref())
    }

    /// Every file that parsed at least once, with its last good payload, by path.
    pub fn iter(&self) -> impl Iterator<Item = (&PathBuf, &T)> {
        let mut all: Vec<(&PathBuf, &T)> = self
            .known
            .iter()
            .filter_map(|(p, k)| k.payload.as_ref().map(|t| (p, t)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        all.into_iter()
    }
}

/// A watch on a directory tree that survives the directory being removed and created again.
pub struct DirWatch {
    root: PathBuf,
    watcher: Option<notify::RecommendedWatcher>,
    /// Device and inode of the root the watcher was set on.
    watched: Option<(u64, u64)>,
    events: mpsc::UnboundedSender<()>,
}

/// Whether a file-system event can mean a change (reads, including the scanner's own, do
/// not).
fn relevant(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

impl DirWatch {
    /// Watches `root` (recursively) and its parent (for the root itself appearing or going).
    /// The returned receiver gets a tick, debounced, on every relevant event and every
    /// [`RESCAN`]; the watch must be [`DirWatch::refresh`]ed after each scan.
    pub fn start(root: &Path, rescan: Duration) -> (DirWatch, mpsc::Receiver<()>) {
        let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<()>();
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                let woke = tokio::select! {
                    e = raw_rx.recv() => e.is_some(),
                    _ = tokio::time::sleep(rescan) => true,
                };
                if !woke {
                    return;
                }
                // Debounce: swallow the burst.
                tokio::time::sleep(DEBOUNCE).await;
                while raw_rx.try_recv().is_ok() {}
                if tx.send(()).await.is_err() {
                    return;
                }
            }
        });
        // Event paths are absolute: so must the root be that they are matched against.
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        let mut w = DirWatch {
            root,
            watcher: None,
            watched: None,
            events: raw_tx,
        };
        w.refresh();
        (w, rx)
    }

    /// (Re)sets the watches when the root is new, gone or replaced by another directory.
    pub fn refresh(&mut self) {
        let current = std::fs::metadata(&self.root)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if self.watcher.is_some() && current == self.watched {
            return;
        }
        let events = self.events.clone();
        let root = self.root.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // The parent's other entries are not ours; an event without paths may be.
            if let Ok(event) = event
                && relevant(&event.kind)
                && (event.paths.is_empty() || event.paths.iter().any(|p| p.starts_with(&root)))
            {
                let _ = events.send(());
            }
        });
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, path = %self.root.display(), "cannot watch; changes are seen by the periodic scan only");
                return;
            }
        };
        let parent = self
            .root
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        if let Err(e) = watcher.watch(&parent, RecursiveMode::NonRecursive) {
            tracing::warn!(error = %e, path = %parent.display(), "cannot watch the parent directory");
        }
        if current.is_some()
            && std::fs::metadata(&self.root).is_ok_and(|m| m.is_dir())
            && let Err(e) = watcher.watch(&self.root, RecursiveMode::Recursive)
        {
            tracing::warn!(error = %e, path = %self.root.display(), "cannot watch; changes are seen by the periodic scan only");
        }
        if self.watched.is_some() && current != self.watched {
            tracing::info!(path = %self.root.display(), "directory replaced; watching the new one");
        }
        // A directory that appeared (or replaced another) since the last scan may have
        // changed again before its watch was set: one more scan sees what no event reports.
        let appeared = self.watcher.is_some() && current.is_some() && current != self.watched;
        self.watched = current;
        self.watcher = Some(watcher);
        if appeared {
            let _ = self.events.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::folder::{is_manifest, walk};

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kartograf-files-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn walks_each_file_once_through_link_loops() {
        let d = temp("loops");
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join("a/one.yaml"), "x: 1").unwrap();
        std::fs::write(d.join("a/b/two.json"), "{}").unwrap();
        std::fs::write(d.join("a/b/notes.txt"), "no").unwrap();
        std::os::unix::fs::symlink(".", d.join("self")).unwrap();
        std::os::unix::fs::symlink("..", d.join("a/up")).unwrap();
        std::os::unix::fs::symlink("one.yaml", d.join("a/same.yaml")).unwrap();
        let w = walk(&d, is_manifest);
        let names: Vec<String> = w
            .files
            .iter()
            .map(|(p, _)| p.strip_prefix(&d).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a/b/two.json", "a/one.yaml"]);
        assert!(w.exists);
    }

    #[test]
    fn special_files_are_reported_and_never_read() {
        let d = temp("special");
        std::fs::write(d.join("good.yaml"), "a: 1").unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(d.join("fifo.yaml"))
            .status()
            .unwrap();
        assert!(made.success());
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.yaml")).unwrap();
        std::os::unix::fs::symlink("/dev/null", d.join("ignored.txt")).unwrap();
        let w = walk(&d, is_manifest);
        assert_eq!(w.files.len(), 1);
        assert!(w.files[0].0.ends_with("good.yaml"));
        assert_eq!(w.problems.len(), 2, "{:?}", w.problems);
        assert!(
            w.problems
                .iter()
                .any(|p| p.contains("fifo.yaml") && p.contains("FIFO"))
        );
        assert!(
            w.problems
                .iter()
                .any(|p| p.contains("zero.yaml") && p.contains("device"))
        );
        // A root that is itself a FIFO is reported, not opened.
        let w = walk(&d.join("fifo.yaml"), is_manifest);
        assert!(w.files.is_empty() && w.problems[0].contains("FIFO"));
    }

    #[test]
    fn a_file_that_holds_more_than_its_size_says_is_refused_unquoted() {
        let d = temp("proc");
        std::os::unix::fs::symlink("/proc/self/environ", d.join("env.yaml")).unwrap();
        let t: Tracker<()> = Tracker::default();
        let scan = t.scan(&walk(&d, is_manifest));
        assert_eq!(scan.candidates.len(), 1);
        match t.read(&scan.candidates[0]) {
            Read::Unreadable(why) => {
                assert!(
                    matches!(why, crate::folder::read::ReadError::Overfull),
                    "{why}"
                );
                let why = why.to_string();
                assert!(why.contains("more than its size says"), "{why}");
                assert!(!why.contains("PATH"), "{why}");
            }
            _ => panic!("/proc/self/environ was handed on as text"),
        }
    }

    #[tokio::test]
    async fn a_file_rewritten_without_pause_still_ticks_while_it_is_written() {
        let d = temp("busy");
        let (_w, mut ticks) = DirWatch::start(&d, Duration::from_secs(600));
        while tokio::time::timeout(DEBOUNCE * 3, ticks.recv())
            .await
            .is_ok()
        {}
        // Rewritten every 50 ms for 2 s (a debounce that restarted at every event would
        // not tick until the writes stop).
        let writer = tokio::spawn({
            let d = d.clone();
            async move {
                for i in 0..40 {
                    std::fs::write(d.join("busy.yaml"), format!("n: {i}")).unwrap();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        let mut during = 0;
        while !writer.is_finished() {
            if tokio::time::timeout(Duration::from_millis(100), ticks.recv())
                .await
                .is_ok()
            {
                during += 1;
            }
        }
        assert!(during >= 2, "{during} ticks while the file was rewritten");
    }

    #[tokio::test]
    async fn a_directory_that_replaced_the_watched_one_is_scanned_once_more_when_watched() {
        let parent = temp("replaced");
        let root = parent.join("root");
        std::fs::create_dir_all(&root).unwrap();
        let (mut w, mut ticks) = DirWatch::start(&root, Duration::from_secs(600));
        // Waits until no tick has come for a while.
        async fn quiet(ticks: &mut mpsc::Receiver<()>) {
            while tokio::time::timeout(DEBOUNCE * 3, ticks.recv())
                .await
                .is_ok()
            {}
        }
        quiet(&mut ticks).await;
        std::fs::rename(&root, parent.join("old")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        // The parent's events tick; then all is quiet, as after a scan that read the new
        // directory while a file was written in it before its watch was set.
        quiet(&mut ticks).await;
        std::fs::write(root.join("missed.yaml"), "a: 1").unwrap();
        quiet(&mut ticks).await;
        // Setting the watches on the new directory asks for one more scan.
        w.refresh();
        let tick = tokio::time::timeout(DEBOUNCE * 5, ticks.recv()).await;
        assert!(matches!(tick, Ok(Some(()))), "no scan after the new watch");
        // Nothing replaced since: no more ticks.
        w.refresh();
        assert!(
            tokio::time::timeout(DEBOUNCE * 3, ticks.recv())
                .await
                .is_err()
        );
    }

    #[test]
    fn reads_only_changed_files_and_reports_only_new_content() {
        let d = temp("diff");
        std::fs::write(d.join("a.yaml"), "a: 1").unwrap();
        std::fs::write(d.join("b.yaml"), "b: 1").unwrap();
        let mut t: Tracker<u32> = Tracker::default();
        // Reads every candidate, keeps the changed ones; returns the changed paths.
        let round = |t: &mut Tracker<u32>| {
            let scan = t.scan(&walk(&d, is_manifest));
            let mut changed = Vec::new();
            for c in &scan.candidates {
                match t.read(c) {
                    Read::Changed(_, h) => {
                        t.keep(c, h, 1);
                        changed.push(c.path.clone());
                    }
                    Read::Unchanged => t.unchanged(c),
                    Read::Unreadable(e) => panic!("{e}"),
                }
            }
            for p in &scan.removed {
                t.remove(p);
            }
            (changed, scan.removed)
        };
        assert_eq!(round(&mut t).0.len(), 2);
        let before = t.reads();
        assert!(t.scan(&walk(&d, is_manifest)).is_empty());
        assert_eq!(t.reads(), before, "nothing read when nothing changed");
        // Same content rewritten: read once, not reported.
        std::thread::sleep(Duration::from_millis(10));
        std::fs::write(d.join("a.yaml"), "a: 1").unwrap();
        assert!(round(&mut t).0.is_empty());
        assert!(round(&mut t).0.is_empty());
        assert_eq!(t.reads(), before + 1);
        std::fs::write(d.join("b.yaml"), "b: 2").unwrap();
        std::fs::remove_file(d.join("a.yaml")).unwrap();
        let (changed, removed) = round(&mut t);
        assert_eq!(changed, [d.join("b.yaml")]);
        assert_eq!(removed, [d.join("a.yaml")]);
    }
}
