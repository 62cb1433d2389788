//! `serve --manifests DIR`: every YAML/JSON file below DIR is the cluster.

use crate::index::Index;
use crate::manifest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The source name used in the index.
pub const SOURCE: &str = "manifests";

/// Reads every document below `dir`, parsing files on all cores; unreadable files are
/// reported and skipped. Documents keep file order.
pub fn read_all(dir: &Path) -> (Vec<serde_json::Value>, Vec<String>, u64) {
    let files: Vec<PathBuf> = manifest::files_below(dir).unwrap_or_default();
    let hash = super::hash_files(&files);
    let read_one = |file: &PathBuf| {
        std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|t| manifest::parse_documents(&t))
            .map_err(|e| format!("{}: {e}", file.display()))
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len());
    let parsed: Vec<Result<Vec<serde_json::Value>, String>> = if threads <= 1 {
        files.iter().map(read_one).collect()
    } else {
        let per = files.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = files
                .chunks(per)
                .map(|chunk| s.spawn(move || chunk.iter().map(read_one).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join()
                        .unwrap_or_else(|_| vec![Err("a manifest parser thread failed".to_owned())])
                })
                .collect()
        })
    };
    let mut docs = Vec::new();
    let mut problems = Vec::new();
    for result in parsed {
        match result {
            Ok(d) => docs.extend(d),
            Err(e) => problems.push(e),
        }
    }
    (docs, problems, hash)
}

/// Loads `dir` into the index, marks the source synced, then keeps the index in step with
/// the files until the watcher channel closes.
pub async fn run(index: Arc<Index>, dir: PathBuf) {
    // Watch first, so no edit made right after the initial load is missed.
    let watcher = super::watch_dir(&dir);
    let feed = index.feed();
    let Some((docs, problems, mut last)) = read_converted(&index, &dir).await else {
        return;
    };
    for p in problems {
        tracing::warn!(problem = %p, "skipped a manifest file");
    }
    let documents = docs.len();
    for skipped in feed.reset(SOURCE, docs).await {
        tracing::warn!(%skipped, "skipped a manifest document");
    }
    feed.mark_synced(SOURCE);
    tracing::info!(dir = %dir.display(), documents, revision = index.revision(), "manifests loaded");
    let (_watcher, mut ticks) = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(error = %e, dir = %dir.display(), "cannot watch the manifest directory; changes will not be seen");
            return;
        }
    };
    while ticks.recv().await.is_some() {
        let Some((docs, problems, hash)) = read_converted(&index, &dir).await else {
            return;
        };
        if hash == last {
            continue;
        }
        last = hash;
        for p in problems {
            tracing::warn!(problem = %p, "skipped a manifest file");
        }
        let documents = docs.len();
        let skipped = feed.reset(SOURCE, docs).await;
        for s in skipped {
            tracing::warn!(skipped = %s, "skipped a manifest document");
        }
        tracing::info!(documents, revision = index.revision(), "manifests reloaded");
    }
}

/// Documents converted for the index.
type Converted = Vec<Result<crate::object::Cached, String>>;

/// Reads and converts every document below `dir` on a blocking thread (off the runtime's
/// workers); `None` when that thread could not run.
async fn read_converted(index: &Arc<Index>, dir: &Path) -> Option<(Converted, Vec<String>, u64)> {
    let (index, dir) = (index.clone(), dir.to_path_buf());
    let read = tokio::task::spawn_blocking(move || {
        let (docs, problems, hash) = read_all(&dir);
        let converted = docs.iter().map(|d| index.convert(d)).collect();
        (converted, problems, hash)
    });
    match read.await {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::error!(error = %e, "reading the manifest directory failed");
            None
        }
    }
}
