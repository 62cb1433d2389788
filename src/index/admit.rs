//! Placing a pod that is being created (not cached yet, as at admission): its workload through
//! its controller chain among the cached objects (and owners read directly from the cluster
//! when the cache has not seen them yet), and its component and replica as resolution would
//! place it beside the workload's root. Also the cached pods whose workload labels are
//! missing or stale, for the labelling pass.

use super::Index;
use crate::board::pod_labels::{self, WORKLOAD_KIND, WORKLOAD_NAME};
use crate::board::{MAX_FETCHED_OWNERS, NewPod};
use crate::model::ownership::{self, OwnerGraph, Root};
use crate::model::{Cached, Object, ObjectMeta, Pod};
use crate::resolve;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest one placement evaluates (the webhook's budget is far larger; a slow definition
/// gives a placement without a component rather than a late answer).
const PLACE_DEADLINE: Duration = Duration::from_millis(100);

/// The cache's owner graph with owners read directly laid over it.
struct WithFetched<'a> {
    cached: &'a dyn OwnerGraph,
    fetched: &'a [Arc<Object>],
}

impl OwnerGraph for WithFetched<'_> {
    fn meta(&self, uid: &str) -> Option<&ObjectMeta> {
        self.cached.meta(uid).or_else(|| {
            self.fetched
                .iter()
                .find(|o| *o.meta.uid == *uid)
                .map(|o| &o.meta)
        })
    }
}

/// A cached pod whose workload labels are missing or name another workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlabelled {
    /// Pod uid.
    pub uid: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
}

impl Index {
    /// Where `pod`, not cached yet, belongs (see [`NewPod`]).
    pub fn place_new_pod(&self, pod: &Pod) -> NewPod {
        self.place_new_pod_with(pod, &[])
    }

    /// Like [`Index::place_new_pod`], with `fetched`: owners read directly from the cluster
    /// because the cache has not seen them yet (at most [`MAX_FETCHED`] are looked at). The
    /// same checks apply to them as to cached owners.
    pub fn place_new_pod_with(&self, pod: &Pod, fetched: &[Arc<Object>]) -> NewPod {
        let fetched = &fetched[..fetched.len().min(MAX_FETCHED_OWNERS)];
        let catalog = self.catalog.load();
        let (cached_root, root) = {
            let objects = self.objects();
            let cached = objects.graph();
            let graph = WithFetched {
                cached: &cached,
                fetched,
            };
            // An owner cycle names no workload (the cache's resolution refuses it too).
            if ownership::cycle_above(&pod.meta, &graph).is_some() {
                return NewPod::None;
            }
            let chain = ownership::controller_chain(&pod.meta, &graph);
            // Every known owner on the chain must be the object its reference names, in the
            // pod's namespace: a pod cannot claim another namespace's workload.
            for owner in &chain {
                if let Some(meta) = graph.meta(&owner.uid)
                    && (meta.namespace != pod.meta.namespace
                        || meta.kind != owner.kind
                        || meta.name != owner.name
                        || group(&meta.api_version) != group(&owner.api_version))
                {
                    return NewPod::None;
                }
            }
            let owner = match ownership::root_in(&pod.meta, &chain, &catalog) {
                Root::Owner(owner) => owner,
                // A pod that is its own workload (a kind with a definition of its own): its
                // pods are itself, in the definition's root component.
                Root::Itself => {
                    let Some(lookup) = catalog.lookup(&pod.meta.api_version, &pod.meta.kind) else {
                        return NewPod::None;
                    };
                    return NewPod::Placed {
                        kind: pod.meta.kind.clone(),
                        name: pod.meta.name.clone(),
                        component: lookup.definition.components.first().map(|c| c.name.clone()),
                        instance: String::new(),
                        replica: String::new(),
                    };
                }
                Root::Uncovered(_) => return NewPod::None,
            };
            match objects.get(&owner.uid) {
                Some(entry) => {
                    let Cached::Object(root) = &entry.cached else {
                        return NewPod::None;
                    };
                    (Some((objects.uid(&owner.uid), entry.version)), root.clone())
                }
                None => match fetched.iter().find(|o| *o.meta.uid == *owner.uid) {
                    Some(root) => (None, root.clone()),
                    None => {
                        return NewPod::OwnerNotCached(owner);
                    }
                },
            }
        };
        let Some(lookup) = catalog.lookup(&root.meta.api_version, &root.meta.kind) else {
            return NewPod::None;
        };
        let prepared = cached_root
            .as_ref()
            .map(|(uid, version)| self.prepared_for(uid, &root, *version, &lookup.definition));
        let pods = [pod];
        let input = resolve::Input {
            definition: &lookup.definition,
            generation: lookup.definition.generation(),
            root: &root,
            pods: &pods,
            fallback_from: lookup.fallback_from.as_deref(),
            deadline: Some(Instant::now() + PLACE_DEADLINE),
            prepared: prepared.as_deref(),
        };
        let resolution = resolve::resolve(&input);
        let placement = resolution
            .placements
            .get(&pod.meta.identity())
            .filter(|p| !p.component.is_empty());
        NewPod::Placed {
            kind: root.meta.kind.clone(),
            name: root.meta.name.clone(),
            component: placement.map(|p| component_path(&lookup.definition, &p.component)),
            instance: placement.map(|p| p.instance.clone()).unwrap_or_default(),
            replica: placement.map(|p| p.replica.clone()).unwrap_or_default(),
        }
    }

    /// Where the cached pod `uid` belongs, placed as at admission (so that its labels are
    /// the ones the webhook gives); [`NewPod::None`] when no such pod is cached.
    pub fn place_cached_pod(&self, uid: &str) -> NewPod {
        let pod = {
            let objects = self.objects();
            match objects.get(uid).map(|e| &e.cached) {
                Some(Cached::Pod(pod)) => pod.clone(),
                _ => return NewPod::None,
            }
        };
        self.place_new_pod(&pod)
    }

    /// Cached pods of workloads published after `since` (every workload when 0) whose
    /// `kartograf.io/workload-kind` or `-name` label is missing or names another workload,
    /// at most `limit`, in namespaces `include` accepts; with the board's revision then.
    pub fn unlabelled_pods(
        &self,
        since: u64,
        limit: usize,
        include: impl Fn(&str) -> bool,
    ) -> (Vec<Unlabelled>, u64) {
        let (entries, revision) = self.board.entries();
        let mut out = Vec::new();
        for entry in entries {
            if out.len() >= limit {
                break;
            }
            let summary = &entry.graph.summary;
            if summary.revision <= since && since != 0 {
                continue;
            }
            let Some(r) = summary.r#ref.as_ref() else {
                continue;
            };
            if !include(&r.namespace) {
                continue;
            }
            let want_kind = pod_labels::label_value(&r.kind);
            let want_name = pod_labels::label_value(&r.name);
            let objects = self.objects();
            for (uid, _) in entry.placements.components() {
                if out.len() >= limit {
                    break;
                }
                let Some(Cached::Pod(pod)) = objects.get(uid).map(|e| &e.cached) else {
                    continue;
                };
                let has = |key: &str, want: &str| pod.label(key).as_deref() == Some(want);
                if !(has(WORKLOAD_KIND, &want_kind) && has(WORKLOAD_NAME, &want_name)) {
                    out.push(Unlabelled {
                        uid: pod.meta.uid.to_string(),
                        namespace: pod.meta.namespace.clone(),
                        name: pod.meta.name.clone(),
                    });
                }
            }
        }
        (out, revision)
    }
}

/// The API group of an `apiVersion` (versions may differ: an owner reference keeps the
/// version its writer used).
fn group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The path of component `name` of `definition`: the names from below the root component
/// down to it, `.` between levels (the root's own name for a pod of the root component).
fn component_path(definition: &crate::definition::Definition, name: &str) -> String {
    let comps = &definition.components;
    let Some(mut at) = comps.iter().position(|c| c.name == name) else {
        return name.to_owned();
    };
    if at == 0 {
        return name.to_owned();
    }
    let mut names = Vec::new();
    // Parents come before children, so the walk ends; bounded by the component count too.
    for _ in 0..comps.len() {
        if at == 0 {
            break;
        }
        names.push(comps[at].name.as_str());
        match comps[at].parent {
            Some(p) if p < at => at = p,
            _ => break,
        }
    }
    names.reverse();
    names.join(".")
}
