//! Ownership: controller owner chains, which pods belong to a workload, and which objects
//! are root workloads.

use crate::definition::Catalog;
use crate::model::{ObjectMeta, OwnerRef};

/// Longest controller chain followed (pod → Job → its owner is 2 hops).
pub const MAX_HOPS: usize = 8;

/// Read access to cached object metadata by uid.
pub trait OwnerGraph {
    /// Metadata of the cached object with this uid.
    fn meta(&self, uid: &str) -> Option<&ObjectMeta>;
}

impl OwnerGraph for std::collections::HashMap<String, ObjectMeta> {
    fn meta(&self, uid: &str) -> Option<&ObjectMeta> {
        self.get(uid)
    }
}

/// The controller owner references above `start`, nearest first: at most [`MAX_HOPS`],
/// ending where an owner is not cached, has no controller, or a cycle begins.
pub fn controller_chain<'g>(start: &'g ObjectMeta, graph: &'g dyn OwnerGraph) -> Vec<&'g OwnerRef> {
    let mut chain: Vec<&OwnerRef> = Vec::new();
    let mut current = start;
    while chain.len() < MAX_HOPS {
        let Some(owner) = current.controller() else {
            break;
        };
        if *owner.uid == *start.uid || chain.iter().any(|o| o.uid == owner.uid) {
            break;
        }
        chain.push(owner);
        match graph.meta(&owner.uid) {
            Some(next) => current = next,
            None => break,
        }
    }
    chain
}

/// True when the controller chain of `object` reaches `root_uid`.
pub fn belongs_to(object: &ObjectMeta, root_uid: &str, graph: &dyn OwnerGraph) -> bool {
    !root_uid.is_empty()
        && controller_chain(object, graph)
            .iter()
            .any(|o| o.uid == root_uid)
}

/// Where an object's workload is rooted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Root {
    /// The object itself is a root workload.
    Itself,
    /// The root is this owner (the topmost owner in the chain whose kind has a definition).
    Owner(OwnerRef),
    /// No kind in the chain (nor the object's own) has a definition; this is the top owner.
    Uncovered(Option<OwnerRef>),
}

/// Finds the root workload of an object: the topmost object in its controller chain whose
/// kind has a definition (recognised from the owner reference alone), else the object itself
/// if its kind has one.
pub fn root_of(object: &ObjectMeta, graph: &dyn OwnerGraph, catalog: &Catalog) -> Root {
    root_in(object, &controller_chain(object, graph), catalog)
}

/// [`root_of`] over a chain already walked: `chain` is [`controller_chain`] of `object`.
pub fn root_in(object: &ObjectMeta, chain: &[&OwnerRef], catalog: &Catalog) -> Root {
    let covered = chain.iter().rev().find(|o| covers(o, catalog));
    match covered {
        Some(owner) => Root::Owner((*owner).clone()),
        None => {
            let gvk = object.gvk();
            if catalog.covers(&gvk.group, &gvk.kind) {
                Root::Itself
            } else {
                Root::Uncovered(chain.last().map(|o| (*o).clone()))
            }
        }
    }
}

/// True when `catalog` has a definition for the kind an owner reference names.
pub fn covers(owner: &OwnerRef, catalog: &Catalog) -> bool {
    let gvk = owner.gvk();
    catalog.covers(&gvk.group, &gvk.kind)
}

/// True when [`controller_chain`] of `start` (that is `chain`) stopped short of its end: at
/// [`MAX_HOPS`] or where an owner cycle begins.
pub fn chain_cut(start: &ObjectMeta, chain: &[&OwnerRef], graph: &dyn OwnerGraph) -> bool {
    if chain.len() >= MAX_HOPS {
        return true;
    }
    let last = match chain.last() {
        Some(owner) => graph.meta(&owner.uid),
        None => Some(start),
    };
    last.and_then(ObjectMeta::controller)
        .is_some_and(|next| *next.uid == *start.uid || chain.iter().any(|o| o.uid == next.uid))
}

/// The owner cycle above `start`, if its controller chain runs into one: the names around
/// the cycle, for a warning.
pub fn cycle_above(start: &ObjectMeta, graph: &dyn OwnerGraph) -> Option<Vec<String>> {
    let mut seen: Vec<&str> = vec![&*start.uid];
    let mut names = vec![format!("{}/{}", start.kind, start.name)];
    let mut current = start;
    for _ in 0..MAX_HOPS {
        let owner = current.controller()?;
        names.push(format!("{}/{}", owner.kind, owner.name));
        if seen.contains(&owner.uid.as_str()) {
            return Some(names);
        }
        seen.push(owner.uid.as_str());
        current = graph.meta(&owner.uid)?;
    }
    None
}
