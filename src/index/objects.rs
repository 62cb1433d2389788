//! The object store: every cached object and pod by uid, the name index, controller links
//! (owner → children) and source notes. Written only by the index's writer, in short critical
//! sections; read by lookups by name and by pod.

use super::Uid;
use super::names::{Name, NameIndex};
use crate::board::Board;
use crate::definition::Catalog;
use crate::model::ownership::{self, OwnerGraph, Root};
use crate::model::{Cached, ObjectMeta};
use foldhash::{HashMap, HashSet, HashSetExt};
use std::collections::BTreeSet;
use std::sync::Arc;

/// One cached object.
pub(super) struct Entry {
    pub(super) cached: Cached,
    /// Bumped on every change of this object.
    pub(super) version: u64,
    /// The source it came from (shared by all of that source's objects).
    pub(super) source: Arc<str>,
    /// For a pod: the root it was last resolved under. A hint that may be stale (the pod
    /// or an owner between it and the root may have moved since): readers check it against
    /// the pod's current controller chain or the root's placements.
    pub(super) root: Option<Uid>,
}

/// The cached objects and their links: written only by the index's writer, in short
/// critical sections (never while evaluating); read by name and pod lookups.
#[derive(Default)]
pub(super) struct Objects {
    /// By uid; read through [`Objects::get`] and the other accessors, written only by
    /// [`Objects::put`] and [`Objects::take`].
    entries: HashMap<Uid, Entry>,
    /// (apiVersion-less kind, namespace, name) -> uid.
    pub(super) by_name: NameIndex,
    /// owner uid -> uids of objects whose controller it is.
    pub(super) children: HashMap<Uid, Children>,
    /// How many entries are pods.
    pub(super) pods: usize,
    /// Notes a source attached to objects (e.g. "defined twice"), shown as a diagnostic on
    /// every workload the object is part of.
    pub(super) notes: HashMap<Uid, Arc<str>>,
}

impl Objects {
    /// The entry of `uid`.
    pub(super) fn get(&self, uid: &str) -> Option<&Entry> {
        self.entries.get(uid)
    }

    /// The entry of `uid`, to change in place (its cached copy or root hint; never its
    /// links or name: those change through [`Objects::put`]).
    pub(super) fn get_mut(&mut self, uid: &str) -> Option<&mut Entry> {
        self.entries.get_mut(uid)
    }

    /// The map's shared copy of `uid` and its entry.
    pub(super) fn get_key_value(&self, uid: &str) -> Option<(&Uid, &Entry)> {
        self.entries.get_key_value(uid)
    }

    /// How many objects (pods included) are cached.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every cached object.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Uid, &Entry)> {
        self.entries.iter()
    }

    /// The objects as an owner graph (for controller chains).
    pub(super) fn graph(&self) -> Graph<'_> {
        Graph(&self.entries)
    }

    /// Stores `entry` under `shared` (its uid), replacing what was there: unlinks the old
    /// copy's controller link and name, links the new one, keeps the pod count. `affected`
    /// is called with the store before the change and after it, so the caller can mark the
    /// roots the object belonged to and belongs to now.
    pub(super) fn put(
        &mut self,
        shared: Uid,
        mut entry: Entry,
        affected: &mut dyn FnMut(&Objects),
    ) {
        let uid = shared.clone();
        if let Some(old) = self.entries.get(uid.as_ref()) {
            entry.root = old.root.clone();
            let old_meta = old.cached.meta().clone();
            unlink(self, &uid, &old_meta);
        }
        affected(self);
        if let Some(owner) = entry.cached.meta().controller() {
            let owner = self.uid(&owner.uid);
            self.children
                .entry(owner)
                .or_default()
                .insert(shared.clone());
        }
        let is_pod = matches!(entry.cached, Cached::Pod(_));
        let name_meta = entry.cached.clone();
        let replaced = self.entries.insert(shared.clone(), entry);
        let was_pod = replaced
            .as_ref()
            .is_some_and(|e| matches!(e.cached, Cached::Pod(_)));
        match (is_pod, was_pod) {
            (true, false) => self.pods += 1,
            (false, true) => self.pods -= 1,
            _ => {}
        }
        let Objects {
            entries, by_name, ..
        } = self;
        by_name.insert(&Graph(entries), Name::of(name_meta.meta()), shared);
        affected(self);
    }

    /// Removes `uid` with its links, name and note; `affected` is called with the store
    /// before the change. Nothing happens when it is not cached.
    pub(super) fn take(&mut self, uid: &str, affected: &mut dyn FnMut(&Objects)) {
        let Some(entry) = self.entries.get(uid) else {
            return;
        };
        let meta = entry.cached.meta().clone();
        affected(self);
        unlink(self, uid, &meta);
        if let Some(old) = self.entries.remove(uid) {
            if matches!(old.cached, Cached::Pod(_)) {
                self.pods -= 1;
            }
            self.notes.remove(uid);
        }
    }

    /// The shared copy of `uid` when a map already holds one, else a new one.
    pub(super) fn uid(&self, uid: &str) -> Uid {
        self.entries
            .get_key_value(uid)
            .map(|(k, _)| k)
            .or_else(|| self.children.get_key_value(uid).map(|(k, _)| k))
            .map_or_else(|| Arc::from(uid), Arc::clone)
    }
}

/// The objects one owner controls: a short list of exactly its size (most owners control a
/// few objects), a set once it is long (a Job or StatefulSet with thousands of pods).
pub(super) enum Children {
    Few(Vec<Uid>),
    Many(BTreeSet<Uid>),
}

/// Children kept as a list at most.
const FEW: usize = 16;

impl Default for Children {
    fn default() -> Self {
        Children::Few(Vec::new())
    }
}

impl Children {
    pub(super) fn insert(&mut self, uid: Uid) {
        match self {
            Children::Few(list) if list.contains(&uid) => {}
            Children::Few(list) if list.len() < FEW => {
                list.reserve_exact(1);
                list.push(uid);
            }
            Children::Few(list) => {
                let mut set: BTreeSet<Uid> = list.drain(..).collect();
                set.insert(uid);
                *self = Children::Many(set);
            }
            Children::Many(set) => {
                set.insert(uid);
            }
        }
    }

    pub(super) fn remove(&mut self, uid: &str) {
        match self {
            Children::Few(list) => {
                if let Some(i) = list.iter().position(|u| u.as_ref() == uid) {
                    list.swap_remove(i);
                }
            }
            Children::Many(set) => {
                set.remove(uid);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            Children::Few(list) => list.is_empty(),
            Children::Many(set) => set.is_empty(),
        }
    }
}

/// The uids in a [`Children`].
pub(super) enum ChildIter<'a> {
    Few(std::slice::Iter<'a, Uid>),
    Many(std::collections::btree_set::Iter<'a, Uid>),
}

impl<'a> Iterator for ChildIter<'a> {
    type Item = &'a Uid;

    fn next(&mut self) -> Option<&'a Uid> {
        match self {
            ChildIter::Few(i) => i.next(),
            ChildIter::Many(i) => i.next(),
        }
    }
}

impl<'a> IntoIterator for &'a Children {
    type Item = &'a Uid;
    type IntoIter = ChildIter<'a>;

    fn into_iter(self) -> ChildIter<'a> {
        match self {
            Children::Few(list) => ChildIter::Few(list.iter()),
            Children::Many(set) => ChildIter::Many(set.iter()),
        }
    }
}

impl Objects {
    /// [`Objects::uid`], taking `own` (an object's copy of its uid) when no map holds one.
    pub(super) fn uid_or(&self, uid: &str, own: &Uid) -> Uid {
        self.entries
            .get_key_value(uid)
            .map(|(k, _)| k)
            .or_else(|| self.children.get_key_value(uid).map(|(k, _)| k))
            .map_or_else(
                || {
                    if own.as_ref() == uid {
                        own.clone()
                    } else {
                        Arc::from(uid)
                    }
                },
                Arc::clone,
            )
    }
}

/// The objects as an owner graph (for controller chains).
pub(super) struct Graph<'a>(&'a HashMap<Uid, Entry>);

impl OwnerGraph for Graph<'_> {
    fn meta(&self, uid: &str) -> Option<&ObjectMeta> {
        self.0.get(uid).map(|e| e.cached.meta())
    }
}

/// Removes `uid`'s controller link and name.
pub(super) fn unlink(objects: &mut Objects, uid: &str, meta: &ObjectMeta) {
    if let Some(owner) = meta.controller()
        && let Some(set) = objects.children.get_mut(owner.uid.as_str())
    {
        set.remove(uid);
        if set.is_empty() {
            objects.children.remove(owner.uid.as_str());
        }
    }
    let Objects {
        entries, by_name, ..
    } = objects;
    by_name.remove_if(&Graph(entries), Name::of(meta), uid);
}

/// Marks dirty every root that `uid` or anything below it belongs to (now or before). An
/// object on the way is marked itself only when it is a root, or was one (`board` shows it),
/// so the thousands of pods a list brings are not each settled only to find they are none.
pub(super) fn mark_affected(
    objects: &Objects,
    catalog: &Catalog,
    board: &Board,
    dirty: &mut BTreeSet<Uid>,
    uid: &str,
) {
    let mut stack = vec![(objects.uid(uid), 0usize)];
    let mut seen = HashSet::new();
    while let Some((at, depth)) = stack.pop() {
        if !seen.insert(at.clone()) || depth > ownership::MAX_HOPS {
            continue;
        }
        let mut root = false;
        if let Some(entry) = objects.entries.get(&at) {
            if let Some(previous) = &entry.root {
                dirty.insert(previous.clone());
            }
            match ownership::root_of(entry.cached.meta(), &Graph(&objects.entries), catalog) {
                Root::Owner(owner) => {
                    dirty.insert(objects.uid(&owner.uid));
                }
                Root::Itself => root = true,
                Root::Uncovered(_) => {}
            }
        }
        if root || board.get(&at).is_some() {
            dirty.insert(at.clone());
        }
        for child in objects.children.get(&at).into_iter().flatten() {
            stack.push((child.clone(), depth + 1));
        }
    }
}
