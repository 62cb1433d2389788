//! The active policy set of a server: swapped whole when its file changes and passes its
//! checks (the last good set stays otherwise), with what the admission routes did.

use super::{MAX_FILE_BYTES, PolicyError, PolicySet};
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// What the mutating routes did, since the start.
#[derive(Debug, Default)]
pub struct Counters {
    /// Workloads answered with a patch.
    pub workloads_patched: AtomicU64,
    /// Workloads a policy covers that already carried its intents (no patch).
    pub workloads_unchanged: AtomicU64,
    /// Workloads a policy covers that could not be patched (allowed, with a warning).
    pub workloads_failed: AtomicU64,
    /// Pods labelled with their workload at admission.
    pub pods_labelled: AtomicU64,
    /// Pods whose owner is not cached yet (admitted unlabelled).
    pub pods_owner_not_cached: AtomicU64,
    /// Pods in no workload, or whose object could not be read (no patch).
    pub pods_unlabelled: AtomicU64,
    /// Owners of a pod being admitted read directly from the cluster (not cached yet).
    pub owner_lookups_found: AtomicU64,
    /// Direct owner reads that found no such object.
    pub owner_lookups_missing: AtomicU64,
    /// Direct owner reads that failed or ran out of time.
    pub owner_lookups_failed: AtomicU64,
    /// Pods the labelling pass labelled after admission.
    pub pass_labelled: AtomicU64,
    /// Label patches of the labelling pass that failed.
    pub pass_failed: AtomicU64,
}

/// The policies in force, and where they come from.
#[derive(Debug)]
pub struct Live {
    set: ArcSwap<PolicySet>,
    path: Option<PathBuf>,
    /// The file's (modification time, length) when last read.
    seen: Mutex<Option<(SystemTime, u64)>>,
    /// Why the file on disk is not in force (`None`: it is).
    problem: Mutex<Option<String>>,
    /// What the routes did.
    pub counters: Counters,
}

impl Live {
    /// No policies (every workload is admitted unchanged; pods are still labelled).
    pub fn empty() -> Arc<Live> {
        Arc::new(Live {
            set: ArcSwap::from_pointee(PolicySet::default()),
            path: None,
            seen: Mutex::new(None),
            problem: Mutex::new(None),
            counters: Counters::default(),
        })
    }

    /// The policies of `path`, which must load now (a server does not start on a bad file).
    pub fn load(path: &Path) -> Result<Arc<Live>, PolicyError> {
        let set = read(path)?;
        Ok(Arc::new(Live {
            set: ArcSwap::from_pointee(set),
            path: Some(path.to_owned()),
            seen: Mutex::new(stamp(path)),
            problem: Mutex::new(None),
            counters: Counters::default(),
        }))
    }

    /// The set in force.
    pub fn current(&self) -> Arc<PolicySet> {
        self.set.load_full()
    }

    /// The policy file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Why the file on disk is not in force, if it is not.
    pub fn problem(&self) -> Option<String> {
        self.problem.lock().clone()
    }

    /// Reads the file again when its modification time or length changed: `Ok(true)` when a
    /// new set is in force, `Ok(false)` when nothing changed, the refusal otherwise (the
    /// last good set stays).
    pub fn reload_if_changed(&self) -> Result<bool, PolicyError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let now = stamp(path);
        {
            let mut seen = self.seen.lock();
            if *seen == now && now.is_some() {
                return Ok(false);
            }
            *seen = now;
        }
        match read(path) {
            Ok(set) => {
                self.set.store(Arc::new(set));
                *self.problem.lock() = None;
                Ok(true)
            }
            Err(e) => {
                *self.problem.lock() = Some(e.0.clone());
                Err(e)
            }
        }
    }

    /// A counter, read.
    pub fn count(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Reads and checks a policy file, bounded in size.
fn read(path: &Path) -> Result<PolicySet, PolicyError> {
    use std::io::Read;
    let shown = crate::excerpt::echo(&path.display().to_string()).into_owned();
    let file = std::fs::File::open(path)
        .map_err(|e| PolicyError(format!("{shown}: cannot be read: {e}")))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| PolicyError(format!("{shown}: cannot be read as UTF-8 text: {e}")))?;
    PolicySet::parse(&text).map_err(|e| PolicyError(format!("{shown}: {}", e.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_keeps_the_last_good_set_and_says_why() {
        let dir = std::env::temp_dir().join(format!("kartograf-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policies.yaml");
        std::fs::write(
            &path,
            "policies:\n  - {name: a, set: {schedulerName: kai}}\n",
        )
        .unwrap();
        let live = Live::load(&path).expect("loads");
        assert_eq!(live.current().len(), 1);
        assert_eq!(live.reload_if_changed(), Ok(false));
        std::fs::write(&path, "policies:\n  - {name: a, set: {schedulerName: kai}}\n  - {name: b, set: {schedulerName: volcano}}\n").unwrap();
        let e = live.reload_if_changed().unwrap_err();
        assert!(e.0.contains("conflicts"), "{e}");
        assert_eq!(live.current().len(), 1, "the last good set stays");
        assert!(live.problem().is_some());
        std::fs::write(&path, "policies:\n  - {name: a, set: {schedulerName: kai}}\n  - {name: b, namespaces: [x], set: {labels: {q: one}}}\n").unwrap();
        assert_eq!(live.reload_if_changed(), Ok(true));
        assert_eq!(live.current().len(), 2);
        assert_eq!(live.problem(), None);
        std::fs::remove_dir_all(&dir).ok();
    }
}
