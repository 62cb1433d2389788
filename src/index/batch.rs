//! A batch of changes applied under one hold of the index's writer lock; the affected
//! workloads are resolved and published once, when the batch ends.

use super::{Incoming, Index, Uid, Writer};
use crate::definition::Catalog;
use crate::model::{Cached, Pod};
use crate::model::{Skip, Skipped};
use foldhash::{HashSet, HashSetExt};
use parking_lot::MutexGuard;
use std::sync::Arc;

/// Changes applied under one hold of the index's writer lock (see [`Index::batch`]).
pub struct Batch<'a> {
    pub(super) index: &'a Index,
    pub(super) writer: MutexGuard<'a, Writer>,
    /// Pods that kept their unpacked value for their first resolution.
    pub(super) keep: Vec<Arc<Pod>>,
    /// Roots lists that ended before the first sync handed to a list still arriving (see
    /// [`Batch::finish_list`]): the writer has them prepared ahead ([`Index::prepare_ahead`]).
    pub(super) handed: Vec<Uid>,
    /// Sources whose first full sync is marked done when the batch ends, after its graphs
    /// are published ([`Batch::mark_synced`]).
    pub(super) synced: Vec<String>,
}

impl Batch<'_> {
    /// Adds or replaces one object from `source` ([`super::Write::Apply`]): converted here
    /// unless the source did, a pod keeping its unpacked value for the resolution at the end
    /// of the batch. Returns its identity, or why it was skipped (counted).
    pub(super) fn apply(&mut self, object: Incoming, source: &str) -> Result<String, Skip> {
        let converted = match object {
            Incoming::Json(json) => Cached::from_json_keeping_value(&json, self.index.limits),
            Incoming::Converted(c) => c,
        };
        let cached = converted.inspect_err(|e| self.index.count_skip(source, e))?;
        Ok(self.apply_converted(cached, source))
    }

    /// [`Batch::apply`] of a converted object (a pod may keep its value; see
    /// [`Cached::from_json_keeping_value`]).
    pub(super) fn apply_converted(&mut self, cached: Cached, source: &str) -> String {
        let is_pod = matches!(cached, Cached::Pod(_));
        let uid = self.index.insert(&mut self.writer, cached, source);
        // The pod as stored (an unchanged update keeps the cached copy, which holds no value).
        if is_pod
            && let Some(Cached::Pod(p)) = self.index.objects().get(uid.as_str()).map(|e| &e.cached)
        {
            self.keep.push(p.clone());
        }
        uid
    }

    /// Removes one object by uid (or identity).
    pub(super) fn delete(&mut self, uid: &str) {
        self.index.remove(&mut self.writer, uid);
    }

    /// Attaches a note to an object (or removes it with `None`); the workloads it is part
    /// of carry it as a `source_note` diagnostic.
    pub(super) fn note(&mut self, uid: &str, note: Option<&str>) {
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
            objects
                .roots(uid, &catalog, &self.index.board)
                .mark(&mut self.writer.dirty);
        }
    }

    /// Replaces everything `source` holds ([`super::Write::Reset`]).
    pub(super) fn reset_converted(
        &mut self,
        source: &str,
        items: Vec<Result<Cached, Skip>>,
    ) -> Skipped {
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

    /// Removes what `source` holds beyond `seen`.
    pub(super) fn remove_stale(&mut self, source: &str, seen: &HashSet<String>) {
        let stale: Vec<Uid> = self
            .index
            .objects()
            .iter()
            .filter(|(uid, e)| e.source.as_ref() == source && !seen.contains(uid.as_ref()))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in stale {
            self.index.remove(&mut self.writer, &uid);
        }
    }

    /// Publishes `catalog` (lookups and resolutions use it from now on) and re-resolves the
    /// workloads whose definitions it changed.
    pub fn set_catalog(&mut self, catalog: Catalog) {
        let previous = self.index.catalog();
        self.index.store_catalog(catalog);
        self.reresolve_since(&previous);
    }

    /// Marks `source`'s first full sync done once this batch's graphs are published (when it
    /// ends), so readiness never reports graphs not yet served.
    pub fn mark_synced(&mut self, source: &str) {
        self.synced.push(source.to_owned());
    }

    /// Drops the resolutions this batch would run when it ends (objects are stored, nothing
    /// is resolved or published: for offline use, which resolves on demand).
    pub fn skip_resolution(&mut self) {
        self.writer.dirty.clear();
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
            objects
                .roots(&uid, &catalog, &self.index.board)
                .mark(&mut self.writer.dirty);
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.index.flush(&mut self.writer);
        for p in self.keep.drain(..) {
            p.memo.drop_value();
        }
        if self.synced.is_empty() {
            return;
        }
        for source in std::mem::take(&mut self.synced) {
            self.index.mark_synced(&source);
        }
        if self.index.synced() {
            // Roots held for lists still open are resolved now (see `listing.rs`).
            self.release_open_lists();
            self.index.flush(&mut self.writer);
        }
    }
}
