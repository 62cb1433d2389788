//! Feeders of the index: a manifest directory (the cluster as files), the Kubernetes API
//! ([`kube`]: objects, and Karta objects as cluster definitions) and a definitions directory
//! (hot-reloaded; [`definitions`] also owns the layering of all definition sources). The
//! directory sources watch their directory with `notify`, debounce, re-read everything and
//! compare a hash (ConfigMap-style `..data` symlink swaps name no file), and re-read
//! periodically as a fallback.

pub mod crds;
pub mod definitions;
pub mod kube;
pub mod manifests;

use notify::{RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

/// Debounce after a file event before re-reading.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// Periodic re-read, in case an event was missed.
pub const RESCAN: Duration = Duration::from_secs(30);

/// Watches `path` and sends a tick (debounced) whenever something below it changes, and
/// every [`RESCAN`]. The returned watcher must be kept alive.
pub fn watch_dir(path: &Path) -> notify::Result<(notify::RecommendedWatcher, mpsc::Receiver<()>)> {
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = raw_tx.send(());
        }
    })?;
    let target: PathBuf = if path.is_file() {
        path.parent().unwrap_or(path).to_path_buf()
    } else {
        path.to_path_buf()
    };
    watcher.watch(&target, RecursiveMode::Recursive)?;
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            let woke = tokio::select! {
                e = raw_rx.recv() => e.is_some(),
                _ = tokio::time::sleep(RESCAN) => true,
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
    Ok((watcher, rx))
}

/// A cheap content hash of every file below `path` (names and bytes).
pub fn hash_files(files: &[PathBuf]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files {
        f.hash(&mut h);
        if let Ok(bytes) = std::fs::read(f) {
            bytes.hash(&mut h);
        }
    }
    h.finish()
}
