//! One walker and one bounded reader for every folder kartograf reads (manifest and
//! definition directories, `check`, `resolve -d`, `drift --crds`, the aggregator's files).
//!
//! The walk follows symbolic links (ConfigMap mounts are made of them) but visits every
//! directory and every file once, by device and inode, so a link loop (`self -> .`) costs one
//! extra `stat`. Special files (FIFOs, devices, sockets) are reported and never opened; a read
//! is capped at the size the file reports and at [`max_file_bytes`] (`--max-file-size`), and
//! only text is accepted ([`read`]).

pub mod read;

use crate::parallel;
use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Deepest directory nesting walked.
pub const MAX_DEPTH: usize = 16;
/// Most files one directory tree may hold.
pub const MAX_FILES: usize = 1_000_000;
/// Default of the largest file read (larger ones are reported and skipped); see
/// [`set_max_file_bytes`].
pub const MAX_FILE_BYTES: u64 = 256 << 20;

static MAX_BYTES: AtomicU64 = AtomicU64::new(MAX_FILE_BYTES);

/// Sets the largest file every walker of this process reads (`--max-file-size`).
pub fn set_max_file_bytes(max: u64) {
    MAX_BYTES.store(max, Ordering::Relaxed);
}

/// The largest file read (see [`set_max_file_bytes`]).
pub fn max_file_bytes() -> u64 {
    MAX_BYTES.load(Ordering::Relaxed)
}

/// Default of [`set_max_batch_bytes`].
pub const MAX_BATCH_BYTES: u64 = 512 << 20;

static MAX_BATCH: AtomicU64 = AtomicU64::new(MAX_BATCH_BYTES);

/// Sets how many bytes of files are read and parsed at once (`--max-reload-bytes`): a reload
/// (or an offline load) of more reads them in turn, so its memory does not grow with the
/// number of large files or of cores.
pub fn set_max_batch_bytes(max: u64) {
    MAX_BATCH.store(max.max(1), Ordering::Relaxed);
}

/// The bytes of files read and parsed at once (see [`set_max_batch_bytes`]).
pub fn max_batch_bytes() -> u64 {
    MAX_BATCH.load(Ordering::Relaxed)
}

/// Splits `items` (each of the size `size` gives) into batches read together: at most
/// `max_items` each, and at most [`max_batch_bytes`] of files each (a larger file is a batch
/// of its own).
pub fn batches<T>(items: &[T], max_items: usize, size: impl Fn(&T) -> u64) -> Vec<&[T]> {
    let budget = max_batch_bytes();
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        if i > start && (i - start >= max_items.max(1) || bytes.saturating_add(n) > budget) {
            out.push(&items[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(n);
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

static READS: AtomicU64 = AtomicU64::new(0);

/// Counts one file read (by a walker's caller).
pub(crate) fn count_read() {
    READS.fetch_add(1, Ordering::Relaxed);
}

/// Files read by every tracked directory of this process (for metrics and tests).
pub fn reads() -> u64 {
    READS.load(Ordering::Relaxed)
}

/// What decides whether a file may have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
    ino: u64,
    dev: u64,
}

impl Stamp {
    /// The size the file reported.
    pub fn size(&self) -> u64 {
        self.len
    }

    pub(crate) fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: m.len(),
            modified: (m.mtime(), m.mtime_nsec()),
            changed: (m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
        }
    }
}

/// One walk of a directory tree.
#[derive(Debug, Default)]
pub struct Walk {
    /// Accepted files (sorted by path), each once.
    pub files: Vec<(PathBuf, Stamp)>,
    /// Problems met on the way (unreadable directories, loops, limits).
    pub problems: Vec<String>,
    /// False when the root does not exist (it was removed or renamed away).
    pub exists: bool,
}

/// Every file below `root` (or `root` itself if it is a file) for which `accept` is true;
/// entries whose name starts with `.` are skipped (ConfigMap `..data` is reached through its
/// links).
pub fn walk(root: &Path, accept: impl Fn(&Path) -> bool) -> Walk {
    let mut out = Walk::default();
    let meta = match std::fs::metadata(root) {
        Ok(m) => m,
        Err(_) => return out,
    };
    out.exists = true;
    if meta.is_file() {
        out.files.push((root.to_path_buf(), Stamp::of(&meta)));
        return out;
    }
    if !meta.is_dir() {
        out.problems.push(format!(
            "{}: {} (not a regular file or directory); not read",
            root.display(),
            read::special_kind(&meta)
        ));
        return out;
    }
    let mut dirs_seen: HashSet<(u64, u64)> = HashSet::new();
    let mut files_seen: HashSet<(u64, u64)> = HashSet::new();
    dirs_seen.insert((meta.dev(), meta.ino()));
    let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                out.problems.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
        names.sort();
        for path in names {
            // Follows links: a link to a directory is walked (once), a link to a file read.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let id = (meta.dev(), meta.ino());
            if meta.is_dir() {
                if depth + 1 > MAX_DEPTH {
                    out.problems.push(format!(
                        "{}: deeper than {MAX_DEPTH} levels; not read",
                        path.display()
                    ));
                } else if dirs_seen.insert(id) {
                    stack.push((path, depth + 1));
                }
                // A directory seen before is a link loop or a second link: skipped.
            } else if !accept(&path) {
                // Not ours (by name): not looked at further.
            } else if !meta.is_file() {
                // A FIFO would block the reader, a device never end: not read, reported.
                out.problems.push(format!(
                    "{}: {} (not a regular file); not read",
                    path.display(),
                    read::special_kind(&meta)
                ));
            } else if files_seen.insert(id) {
                if out.files.len() == MAX_FILES {
                    out.problems.push(format!(
                        "more than {MAX_FILES} files; the rest are not read"
                    ));
                    out.files.sort_by(|a, b| a.0.cmp(&b.0));
                    return out;
                }
                out.files.push((path, Stamp::of(&meta)));
            }
        }
    }
    out.files.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The text of the file at `path` for a caller that reads a tree once (CLI, aggregator):
/// read as the watchers read it (a regular file of at most [`max_file_bytes`], text only).
pub fn read_text(path: &Path) -> Result<String, read::ReadError> {
    READS.fetch_add(1, Ordering::Relaxed);
    read::text_file(path, max_file_bytes())
}

/// Maps `f` over `items` on every core, results in the items' order ([`parallel`]'s work
/// sharing): reading, parsing and converting many files is the bulk of a cold start.
pub fn read_in_parallel<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    // Parsing recurses per nesting level (bounded by the parsers' depth limits).
    parallel::map_in_order(items, parallel::cores(), "read-files", 8 << 20, f)
}

/// `*.yaml`, `*.yml` and `*.json`.
pub fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_at_most_the_budget_and_a_large_file_alone() {
        let sizes = [100u64, 300, 200, 600, 50, 50, 50];
        // The default budget (512 MiB) in units of 1 MiB.
        let mib = |n: &u64| n << 20;
        let got: Vec<Vec<u64>> = batches(&sizes, 64, mib)
            .into_iter()
            .map(<[u64]>::to_vec)
            .collect();
        assert_eq!(
            got,
            vec![vec![100, 300], vec![200], vec![600], vec![50, 50, 50]]
        );
        let by_count: Vec<usize> = batches(&[1u64; 5], 2, |n| *n)
            .iter()
            .map(|b| b.len())
            .collect();
        assert_eq!(by_count, vec![2, 2, 1]);
        assert!(batches::<u64>(&[], 2, |n| *n).is_empty());
    }
}
