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
    /// copy's controller link and name, links the new one, keeps the pod count. Returns the
    /// roots the object and everything below it belonged to before and belong to now.
    pub(super) fn put(
        &mut self,
        shared: Uid,
        mut entry: Entry,
        catalog: &Catalog,
        board: &Board,
    ) -> Roots {
        let uid = shared.clone();
        let old_meta = match self.entries.get(uid.as_ref()) {
            Some(old) => {
                entry.root = old.root.clone();
                let meta = old.cached.meta().clone();
                unlink(self, &uid, &meta);
                Some(meta)
            }
            None => None,
        };
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
        // The store before the change is the store now with the old copy in its place.
        let before = Before {
            entries: &self.entries,
            uid: &uid,
            meta: old_meta.as_ref(),
        };
        let now = Graph(&self.entries);
        let was = match &old_meta {
            Some(meta) => self.up(&uid, meta, catalog, &before),
            None => Up::absent(),
        };
        let is = self.up(&uid, name_meta.meta(), catalog, &now);
        let mut roots = Roots::default();
        self.down(
            &uid,
            &[(&was, &before), (&is, &now)],
            catalog,
            board,
            &mut roots,
        );
        roots
    }

    /// Removes `uid` with its links, name and note. Returns the roots it and everything
    /// below it belonged to; none when it is not cached.
    pub(super) fn take(&mut self, uid: &str, catalog: &Catalog, board: &Board) -> Roots {
        let mut roots = Roots::default();
        let Some((shared, entry)) = self.entries.get_key_value(uid) else {
            return roots;
        };
        let shared = shared.clone();
        let meta = entry.cached.meta().clone();
        let now = Graph(&self.entries);
        let was = self.up(&shared, &meta, catalog, &now);
        self.down(&shared, &[(&was, &now)], catalog, board, &mut roots);
        unlink(self, uid, &meta);
        if let Some(old) = self.entries.remove(uid) {
            if matches!(old.cached, Cached::Pod(_)) {
                self.pods -= 1;
            }
            self.notes.remove(uid);
        }
        roots
    }

    /// The roots `uid` and everything below it belong to now (see [`Objects::put`]).
    pub(super) fn roots(&self, uid: &str, catalog: &Catalog, board: &Board) -> Roots {
        let mut roots = Roots::default();
        let shared = self.uid(uid);
        let now = Graph(&self.entries);
        let is = match self.entries.get(uid) {
            Some(entry) => self.up(&shared, entry.cached.meta(), catalog, &now),
            None => Up::absent(),
        };
        self.down(&shared, &[(&is, &now)], catalog, board, &mut roots);
        roots
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

/// The roots a change touches: those the changed object and everything below it belonged
/// to before the change (with the pods' last-resolved roots and the published workloads
/// among them), and those they belong to after it.
#[derive(Debug, Default)]
pub(super) struct Roots {
    /// Before the change.
    pub(super) before: Vec<Uid>,
    /// After it.
    pub(super) after: Vec<Uid>,
}

impl Roots {
    /// Marks them all dirty.
    pub(super) fn mark(self, dirty: &mut BTreeSet<Uid>) {
        dirty.extend(self.before);
        dirty.extend(self.after);
    }

    /// Adds a root of state `i` (0 before, 1 after).
    fn push(&mut self, i: usize, root: Uid) {
        if i == 0 {
            self.before.push(root);
        } else {
            self.after.push(root);
        }
    }
}

/// One state of an object's controller chain, walked up once: its own root and what the
/// objects below it inherit.
struct Up {
    /// The object's root (`None` when uncovered or not cached).
    root: Option<Uid>,
    /// The topmost owner in its chain whose kind has a definition: the root of everything
    /// below it.
    top: Option<Uid>,
    /// The chain's length.
    hops: usize,
    /// The chain stopped short (a cycle, or [`ownership::MAX_HOPS`]): the objects below are
    /// walked up each on their own.
    cut: bool,
}

impl Up {
    /// The state before an object was cached.
    fn absent() -> Up {
        Up {
            root: None,
            top: None,
            hops: 0,
            cut: false,
        }
    }
}

/// The store as it was before `uid` changed: `uid` held `meta` (or was not cached).
struct Before<'a> {
    entries: &'a HashMap<Uid, Entry>,
    uid: &'a str,
    meta: Option<&'a ObjectMeta>,
}

impl OwnerGraph for Before<'_> {
    fn meta(&self, uid: &str) -> Option<&ObjectMeta> {
        if uid == self.uid {
            self.meta
        } else {
            self.entries.get(uid).map(|e| e.cached.meta())
        }
    }
}

/// One state of the store for a walk: what `uid` inherits there and the store as it was.
type State<'a> = (&'a Up, &'a dyn OwnerGraph);

impl Objects {
    /// Walks `meta`'s (the object `uid`'s) controller chain up once in `graph`.
    fn up(&self, uid: &Uid, meta: &ObjectMeta, catalog: &Catalog, graph: &dyn OwnerGraph) -> Up {
        let chain = ownership::controller_chain(meta, graph);
        let cut = ownership::chain_cut(meta, &chain, graph);
        let (root, top) = match ownership::root_in(meta, &chain, catalog) {
            Root::Owner(owner) => {
                let top = self.uid(&owner.uid);
                (Some(top.clone()), Some(top))
            }
            Root::Itself => (Some(uid.clone()), None),
            Root::Uncovered(_) => (None, None),
        };
        Up {
            root,
            top,
            hops: chain.len(),
            cut,
        }
    }

    /// Walks down from `uid` once, adding to `roots` each object's root in each state
    /// (`[before, after]`, or one state: `uid`'s own from its [`Up`], each object below
    /// derived from its parent's, or walked up on its own where that chain is `cut`), and,
    /// to `before`, the roots pods were last resolved under and the objects published as
    /// workloads.
    fn down(
        &self,
        uid: &Uid,
        states: &[State<'_>],
        catalog: &Catalog,
        board: &Board,
        roots: &mut Roots,
    ) {
        let mut start: [Option<Inherited>; 2] = [None, None];
        for (i, (up, _)) in states.iter().enumerate().take(2) {
            if let Some(root) = &up.root {
                roots.push(i, root.clone());
            }
            start[i] = Some(Inherited {
                top: up.top.clone(),
                hops: up.hops,
                cut: up.cut,
            });
        }
        if let Some(previous) = self.entries.get(uid).and_then(|e| e.root.as_ref()) {
            roots.before.push(previous.clone());
        }
        if board.get(uid).is_some() {
            roots.before.push(uid.clone());
        }
        let Some(children) = self.children.get(uid) else {
            return;
        };
        let mut stack: Vec<(Uid, usize, [Option<Inherited>; 2])> = children
            .into_iter()
            .map(|c| (c.clone(), 1, start.clone()))
            .collect();
        let mut seen = HashSet::new();
        seen.insert(uid.clone());
        while let Some((at, depth, above)) = stack.pop() {
            if depth > ownership::MAX_HOPS || !seen.insert(at.clone()) {
                continue;
            }
            let Some(entry) = self.entries.get(&at) else {
                continue;
            };
            let meta = entry.cached.meta();
            let mut next: [Option<Inherited>; 2] = [None, None];
            for (i, above) in above.into_iter().enumerate() {
                let (Some(above), Some((_, graph))) = (above, states.get(i)) else {
                    continue;
                };
                let hops = above.hops + 1;
                if above.cut || hops > ownership::MAX_HOPS {
                    // A cycle, or a chain longer than is followed: walked up on its own.
                    if let Some(root) = self.up(&at, meta, catalog, *graph).root {
                        roots.push(i, root);
                    }
                    next[i] = Some(Inherited {
                        top: None,
                        hops,
                        cut: true,
                    });
                    continue;
                }
                // The chain above `at` is its controller reference, then its parent's.
                let top = above.top.or_else(|| {
                    meta.controller()
                        .filter(|o| ownership::covers(o, catalog))
                        .map(|o| self.uid(&o.uid))
                });
                let root = match &top {
                    Some(top) => Some(top.clone()),
                    None => covers_kind(meta, catalog).then(|| at.clone()),
                };
                if let Some(root) = root {
                    roots.push(i, root);
                }
                next[i] = Some(Inherited {
                    top,
                    hops,
                    cut: false,
                });
            }
            if let Some(previous) = &entry.root {
                roots.before.push(previous.clone());
            }
            if board.get(&at).is_some() {
                roots.before.push(at.clone());
            }
            for child in self.children.get(&at).into_iter().flatten() {
                stack.push((child.clone(), depth + 1, next.clone()));
            }
        }
    }
}

/// What an object passes down to those it controls, in one state.
#[derive(Clone)]
struct Inherited {
    /// The topmost owner with a definition in the chain above the children.
    top: Option<Uid>,
    /// The length of the chain above the children.
    hops: usize,
    /// That chain stopped short: each object below is walked up on its own.
    cut: bool,
}

/// True when `catalog` has a definition for `meta`'s kind.
fn covers_kind(meta: &ObjectMeta, catalog: &Catalog) -> bool {
    let gvk = meta.gvk();
    catalog.covers(&gvk.group, &gvk.kind)
}
