//! The cold-start schedule, in one place. A source hands a (re)list over in parts as it
//! downloads ([`Batch::begin_list`], [`Batch::stage`] per part, [`Batch::finish_list`]); the
//! objects of each part are stored at once, but when their roots are resolved is decided
//! here, so that a cold start resolves each root once, as early as its pods are likely in:
//!
//! - **After the index is synced** (a relist): a list's roots are resolved when it ends.
//! - **Before the first sync, in the last list still arriving** (the pods, in practice: they
//!   are listed after the workloads they belong to): a root the list touched and that no
//!   part touched for [`RIPE_AFTER`] parts since is resolved at once, beside the rest of the
//!   download. Lists come sorted by namespace and name, and a workload's pods share its
//!   name, so by then its pods are most likely all in. A root touched again later is
//!   resolved again when the list ends.
//! - **Before the first sync, a list that ends while another is still arriving** (jobs
//!   before pods) hands its roots over to that list instead of resolving them: their pods
//!   are still coming. The roots handed over are *prepared ahead* on a thread of their own
//!   ([`Index::prepare_ahead`]): what the definitions read of the root alone is evaluated
//!   while the pods download, so their resolution later finds it done.
//! - **Once synced, lists still open** are failing or stuck: the roots they hold are released
//!   to be resolved ([`Batch::release_open_lists`]).
//! - **A list begun again** before it ended (a restarted watch) gives back what it held.

use super::batch::Batch;
use super::{Index, Uid};
use crate::model::ownership::{self, Root};
use crate::model::{Cached, Skip, Skipped};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Parts of a list (see [`Batch::stage`]) after which a root the list no longer touches is
/// resolved before the index first syncs.
pub(super) const RIPE_AFTER: u64 = 4;

/// A list received in parts: what it held so far, the roots its objects affect (resolved
/// once, when it ends, or before: see [`Batch::stage`]) and the objects it skipped.
#[derive(Default)]
pub(super) struct OpenList {
    pub(super) seen: foldhash::HashSet<String>,
    pub(super) dirty: BTreeSet<Uid>,
    pub(super) skipped: Skipped,
    /// Parts staged so far.
    pub(super) parts: u64,
    /// Roots of `dirty` the list's own objects affected, with the last part that did.
    pub(super) touched: foldhash::HashMap<Uid, u64>,
}

impl Batch<'_> {
    /// Starts a list of `source` received in parts ([`Batch::stage`], then
    /// [`Batch::finish_list`]); a list of it still open is abandoned (what it applied stays,
    /// and its roots are resolved with this batch).
    pub(super) fn begin_list(&mut self, source: &str) {
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
    pub(super) fn stage(&mut self, source: &str, items: Vec<Result<Cached, Skip>>) {
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
    pub(super) fn finish_list(&mut self, source: &str) -> Skipped {
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
}

impl Index {
    /// Evaluates ahead what the definitions read of roots `uids` alone ([`Prepared`]), so
    /// that their resolution, held until their pods are in (see [`Batch::finish_list`]),
    /// finds it done: at a cold start the pod list downloads for seconds while the roots'
    /// own evaluations (about 40% of resolving them) wait. Reads the objects under short
    /// read locks; a root changed meanwhile is prepared again when resolved.
    pub(crate) fn prepare_ahead(&self, uids: &[Uid]) {
        let catalog = self.catalog.load_full();
        for uid in uids {
            let found = {
                let objects = self.objects();
                objects.get(uid).and_then(|entry| match &entry.cached {
                    Cached::Object(o)
                        if ownership::root_of(&o.meta, &objects.graph(), &catalog)
                            == Root::Itself =>
                    {
                        Some((o.clone(), entry.version))
                    }
                    _ => None,
                })
            };
            let Some((root, version)) = found else {
                continue;
            };
            if let Some(lookup) = catalog.lookup(&root.meta.api_version, &root.meta.kind) {
                self.prepared_for(uid, &root, version, &lookup.definition);
            }
        }
    }

    /// [`Index::prepare_ahead`] on a thread of its own, beside the rest of the download (no
    /// thread to be had: the roots are prepared when resolved).
    pub(super) fn prepare_ahead_beside(self: &Arc<Self>, handed: Vec<Uid>) {
        if handed.is_empty() {
            return;
        }
        let index = self.clone();
        let _ = std::thread::Builder::new()
            .name("kartograf-prepare".into())
            .stack_size(super::feed::WRITER_STACK)
            .spawn(move || index.prepare_ahead(&handed));
    }
}
