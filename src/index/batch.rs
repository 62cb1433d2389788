//! A batch of changes applied under one hold of the index's writer lock; the affected
//! workloads are resolved and published once, when the batch ends.

use super::objects::mark_affected;
use super::{Index, OpenList, Uid, Writer};
use crate::definition::Catalog;
use crate::model::{Cached, Pod};
use crate::model::{Skip, Skipped};
use foldhash::{HashSet, HashSetExt};
use parking_lot::MutexGuard;
use serde_json::Value as Json;
use std::sync::Arc;

/// Parts of a list (see [`Batch::stage`]) after which a root the list no longer touches is
/// resolved before the index first syncs.
pub(super) const RIPE_AFTER: u64 = 4;

/// Changes applied under one hold of the index's writer lock (see [`Index::batch`]).
pub struct Batch<'a> {
    pub(super) index: &'a Index,
    pub(super) writer: MutexGuard<'a, Writer>,
    /// Pods that kept their unpacked value for their first resolution.
    pub(super) keep: Vec<Arc<Pod>>,
    /// Roots lists that ended before the first sync handed to a list still arriving (see
    /// [`Batch::finish_list`]): the writer has them prepared ahead ([`Index::prepare_ahead`]).
    pub(super) handed: Vec<Uid>,
}

impl Batch<'_> {
    /// Adds or replaces one object from `source` (see [`Index::apply`]).
    pub fn apply(&mut self, json: &Json, source: &str) -> Result<String, Skip> {
        // A pod keeps its unpacked value for the resolution at the end of the batch, then
        // drops what it did not use.
        let cached = Cached::from_json_keeping_value(json, self.index.limits)
            .inspect_err(|e| self.index.count_skip(source, e))?;
        Ok(self.apply_converted(cached, source))
    }

    /// [`Batch::apply`] of an object converted by the caller (a pod keeping its value; see
    /// [`Cached::from_json_keeping_value`]).
    pub fn apply_converted(&mut self, cached: Cached, source: &str) -> String {
        let is_pod = matches!(cached, Cached::Pod(_));
        let uid = self.index.insert(&mut self.writer, cached, source);
        // The pod as stored (an unchanged update keeps the cached copy, which holds no value).
        if is_pod
            && let Some(Cached::Pod(p)) = self
                .index
                .objects()
                .entries
                .get(uid.as_str())
                .map(|e| &e.cached)
        {
            self.keep.push(p.clone());
        }
        uid
    }

    /// Removes one object by uid (or identity).
    pub fn delete(&mut self, uid: &str) {
        self.index.remove(&mut self.writer, uid);
    }

    /// Adds or replaces one converted object from `source`.
    pub fn upsert(&mut self, cached: Cached, source: &str) -> String {
        self.index.insert(&mut self.writer, cached, source)
    }

    /// Attaches a note to an object (or removes it with `None`); the workloads it is part
    /// of carry it as a `source_note` diagnostic.
    pub fn note(&mut self, uid: &str, note: Option<&str>) {
        let catalog = self.index.catalog.load();
        let mut objects = self.index.objects_mut();
        let shared = objects.uid(uid);
        let changed = match note {
            Some(n) => objects
                .notes
                .insert(shared, Arc::from(n))
                .is_none_or(|old| old.as_ref() != n),
            None => objects.notes.remove(uid).is_some(),
        };
        if changed {
            mark_affected(
                &objects,
                &catalog,
                &self.index.board,
                &mut self.writer.dirty,
                uid,
            );
        }
    }

    /// Replaces everything `source` holds (see [`Index::reset_converted`]).
    pub fn reset_converted(&mut self, source: &str, items: Vec<Result<Cached, Skip>>) -> Skipped {
        let mut skipped = Skipped::default();
        let mut seen = HashSet::new();
        for item in items {
            match item {
                Ok(cached) => {
                    let uid = self.index.insert(&mut self.writer, cached, source);
                    seen.insert(uid);
                }
                Err(e) => {
                    self.index.count_skip(source, &e);
                    skipped.push(e);
                }
            }
        }
        self.remove_stale(source, &seen);
        skipped
    }

    /// Starts a list of `source` received in parts ([`Batch::stage`], then
    /// [`Batch::finish_list`]); a list of it still open is abandoned (what it applied stays,
    /// and its roots are resolved with this batch).
    pub fn begin_list(&mut self, source: &str) {
        let source = self.writer.source(source);
        if let Some(old) = self.writer.listings.insert(source, OpenList::default()) {
            self.writer.dirty.extend(old.dirty);
        }
    }

    /// Applies part of the open list of `source` (one is begun if none is): the objects are
    /// stored at once, but the roots they affect are resolved only when the list ends, so a
    /// root whose pods arrive over many parts is resolved once.
    ///
    /// Except before the index first syncs (when nothing is served), in the last list still
    /// arriving (the pods, in a cold start): then a root that this list's objects affected,
    /// and that no part touched for `RIPE_AFTER` parts since, is resolved with this batch,
    /// beside the rest of the download — a list comes sorted by namespace and name, and a
    /// workload's pods share its name, so its pods are most likely all in. One touched again
    /// later is resolved again when the list ends.
    pub fn stage(&mut self, source: &str, items: Vec<Result<Cached, Skip>>) {
        let source = self.writer.source(source);
        let mut listing = self.writer.listings.remove(&source).unwrap_or_default();
        let outside = std::mem::take(&mut self.writer.dirty);
        for item in items {
            match item {
                Ok(cached) => {
                    let uid = self.index.insert(&mut self.writer, cached, &source);
                    listing.seen.insert(uid);
                }
                Err(e) => {
                    self.index.count_skip(&source, &e);
                    listing.skipped.push(e);
                }
            }
        }
        let staged = std::mem::replace(&mut self.writer.dirty, outside);
        listing.parts += 1;
        if !self.index.synced() {
            let part = listing.parts;
            for uid in &staged {
                listing.touched.insert(uid.clone(), part);
            }
            // While other lists arrive, they may still touch these roots (a root's pods come
            // after its jobs): only the last list still arriving resolves ahead.
            let alone = self.writer.listings.is_empty();
            let ripe: Vec<Uid> = listing
                .touched
                .iter()
                .filter(|(_, last)| alone && **last + RIPE_AFTER <= part)
                .map(|(uid, _)| uid.clone())
                .collect();
            for uid in ripe {
                listing.touched.remove(&uid);
                listing.dirty.remove(&uid);
                self.writer.dirty.insert(uid);
            }
        }
        listing.dirty.extend(staged);
        self.writer.listings.insert(source, listing);
    }

    /// Ends the open list of `source`: what the source held and the list did not is removed,
    /// and the roots the list affected are resolved with this batch. Returns the skipped
    /// objects (nothing without an open list).
    pub fn finish_list(&mut self, source: &str) -> Skipped {
        let Some(listing) = self.writer.listings.remove(source) else {
            return Skipped::default();
        };
        let outside = std::mem::take(&mut self.writer.dirty);
        self.remove_stale(source, &listing.seen);
        let mut dirty = std::mem::replace(&mut self.writer.dirty, outside);
        dirty.extend(listing.dirty);
        match self.writer.listings.values_mut().next() {
            // Before the index first syncs, nothing is served yet: a list that ends while
            // another is still arriving hands its roots over to that one, so a root whose
            // pods are still arriving is resolved once, when they are in. (A list that
            // starts over gives back what it held: see `begin_list`.)
            Some(open) if !self.index.synced() => {
                self.handed.extend(dirty.iter().cloned());
                open.dirty.extend(dirty);
            }
            _ => self.writer.dirty.extend(dirty),
        }
        listing.skipped
    }

    /// Resolves, with this batch, the roots lists that are still open hold (what lists
    /// that ended before the index synced handed over to them; see [`Batch::finish_list`]):
    /// once the index is synced, a list still open is one that is failing or stuck.
    pub fn release_open_lists(&mut self) {
        let writer = &mut *self.writer;
        for listing in writer.listings.values_mut() {
            writer.dirty.append(&mut listing.dirty);
        }
    }

    /// Removes what `source` holds beyond `seen`.
    fn remove_stale(&mut self, source: &str, seen: &HashSet<String>) {
        let stale: Vec<Uid> = self
            .index
            .objects()
            .entries
            .iter()
            .filter(|(uid, e)| e.source.as_ref() == source && !seen.contains(uid.as_ref()))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in stale {
            self.index.remove(&mut self.writer, &uid);
        }
    }

    /// Drops the resolutions this batch would run when it ends (objects are stored, nothing
    /// is resolved or published: for offline use, which resolves on demand).
    pub fn skip_resolution(&mut self) {
        self.writer.dirty.clear();
    }

    /// Re-resolves every workload under the catalog in effect.
    pub fn reresolve(&mut self) {
        let all: Vec<Uid> = self.index.objects().entries.keys().cloned().collect();
        self.writer.dirty.extend(all);
    }

    /// Re-resolves what a catalog change can affect: the objects of every kind whose
    /// definitions changed since `previous` and the objects such a kind controls (and,
    /// through them, the workloads they belong to and the objects they own).
    pub fn reresolve_since(&mut self, previous: &Catalog) {
        let catalog = self.index.catalog.load_full();
        let changed = catalog.changed_kinds(previous);
        if changed.is_empty() {
            return;
        }
        let objects = self.index.objects();
        let affected: Vec<Uid> = objects
            .entries
            .iter()
            .filter(|(_, e)| {
                // Objects of a changed kind, and objects a changed kind controls (their
                // controller may not be cached: only named in the owner reference).
                let meta = e.cached.meta();
                let gvk = meta.gvk();
                changed.contains(&(gvk.group, gvk.kind))
                    || meta.controller().is_some_and(|o| {
                        let gvk = o.gvk();
                        changed.contains(&(gvk.group, gvk.kind))
                    })
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in affected {
            mark_affected(
                &objects,
                &catalog,
                &self.index.board,
                &mut self.writer.dirty,
                &uid,
            );
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.index.flush(&mut self.writer);
        for p in self.keep.drain(..) {
            p.memo.drop_value();
        }
    }
}
