//! Placing a pod that is being created (not cached yet, as at admission): its workload through
//! its controller chain among the cached objects, and its component and replica as
//! resolution would place it beside the workload's root.

use super::Index;
use crate::board::NewPod;
use crate::model::ownership::{self, Root};
use crate::model::{Cached, Pod};
use crate::resolve;
use std::time::{Duration, Instant};

/// Longest one placement evaluates (the webhook's budget is far larger; a slow definition
/// gives a placement without a component rather than a late answer).
const PLACE_DEADLINE: Duration = Duration::from_millis(100);

impl Index {
    /// Where `pod`, not cached yet, belongs (see [`NewPod`]).
    pub fn place_new_pod(&self, pod: &Pod) -> NewPod {
        let catalog = self.catalog.load();
        let (uid, root, version) = {
            let objects = self.objects();
            let graph = objects.graph();
            let chain = ownership::controller_chain(&pod.meta, &graph);
            // Every cached owner on the chain must be the object its reference names, in the
            // pod's namespace: a pod cannot claim another namespace's workload.
            for owner in &chain {
                if let Some(meta) = ownership::OwnerGraph::meta(&graph, &owner.uid)
                    && (meta.namespace != pod.meta.namespace
                        || meta.kind != owner.kind
                        || meta.name != owner.name)
                {
                    return NewPod::None;
                }
            }
            let owner = match ownership::root_in(&pod.meta, &chain, &catalog) {
                Root::Owner(owner) => owner,
                Root::Itself | Root::Uncovered(_) => return NewPod::None,
            };
            let Some(entry) = objects.get(&owner.uid) else {
                return NewPod::OwnerNotCached {
                    kind: owner.kind,
                    name: owner.name,
                };
            };
            let Cached::Object(root) = &entry.cached else {
                return NewPod::None;
            };
            (objects.uid(&owner.uid), root.clone(), entry.version)
        };
        let Some(lookup) = catalog.lookup(&root.meta.api_version, &root.meta.kind) else {
            return NewPod::None;
        };
        let prepared = self.prepared_for(&uid, &root, version, &lookup.definition);
        let pods = [pod];
        let input = resolve::Input {
            definition: &lookup.definition,
            generation: lookup.definition.generation(),
            root: &root,
            pods: &pods,
            fallback_from: lookup.fallback_from.as_deref(),
            deadline: Some(Instant::now() + PLACE_DEADLINE),
            prepared: Some(&prepared),
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
