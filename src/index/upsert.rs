//! How the writer stores one converted object or removes one: the namespace shard, the
//! shortcut for a pod update that changes nothing a graph reads, and the object store's
//! links, marking the roots a change touches dirty.

use super::objects::Entry;
use super::settle::cut_short;
use super::{Index, Writer};
use crate::gangs::verify::PodLinks;
use crate::model::{Cached, Pod, Skip};
use crate::resolve;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Two versions of a pod agree on everything accounting and the graph read besides the
/// definition's questions: among them the gang objects it names, which the live gang check
/// reads (a pod that comes to name its PodGroup must re-check its workload's gangs).
fn same_accounting(a: &Pod, b: &Pod) -> bool {
    a.node == b.node
        && a.phase == b.phase
        && a.ready == b.ready
        && a.reason == b.reason
        && *a.request == *b.request
        && a.bad_quantities == b.bad_quantities
        && a.resource_claims == b.resource_claims
        && PodLinks::of(a).names == PodLinks::of(b).names
}

impl Index {
    /// Whether a pod update can keep the cached copy (`Some(true)`: identical, skip it),
    /// replace it without re-resolving (`Some(false)`), or must be inserted (`None`).
    fn pod_unchanged(&self, uid: &str, cached: &Cached, source: &str) -> Option<bool> {
        let Cached::Pod(after) = cached else {
            return None;
        };
        let (before, root) = {
            let objects = self.objects();
            let old = objects.get(uid)?;
            let Cached::Pod(before) = &old.cached else {
                return None;
            };
            if old.source.as_ref() != source
                || before.meta != after.meta
                || before.problem != after.problem
            {
                return None;
            }
            if before.packed == after.packed {
                return Some(true);
            }
            // A pod that is its own workload is read whole (its status is the workload's).
            let root = old.root.as_ref().filter(|r| r.as_ref() != uid)?;
            let root = objects.get(root)?.cached.meta().clone();
            (before.clone(), root)
        };
        if !same_accounting(&before, after) {
            return None;
        }
        // A resolution the deadline or a budget cut short asked some pods only part of
        // their questions.
        let whole = self
            .board
            .get(&root.uid)
            .is_some_and(|w| !cut_short(&w.graph));
        if !whole {
            return None;
        }
        let catalog = self.catalog.load();
        let lookup = catalog.lookup(&root.api_version, &root.kind)?;
        // Evaluates the definition's pod questions on the new version: outside every lock
        // readers take.
        resolve::same_answers(
            &lookup.definition,
            lookup.definition.generation(),
            &before,
            after,
            Some(Instant::now() + self.resolve_timeout),
        )
        .then_some(false)
    }

    /// Inserts a converted object; returns its identity.
    pub(super) fn insert(&self, w: &mut Writer, mut cached: Cached, source: &str) -> String {
        let uid = cached.meta().identity();
        if let Some(ns) = &self.namespace
            && &cached.meta().namespace != ns
        {
            // Another shard's object: not kept (and a copy kept before is removed).
            self.count_skip(source, &Skip::OtherNamespace(uid.clone()));
            self.remove(w, &uid);
            return uid;
        }
        // A pod update that changes nothing the graph reads (a kubelet heartbeat, a restart
        // count, a status write with the same content) skips re-resolving: the same
        // projection keeps the cached copy and what it remembers; otherwise the same
        // accounting facts and the same answers to the definition's questions keep the new
        // copy (see `resolve::same_answers`).
        match self.pod_unchanged(&uid, &cached, source) {
            Some(true) => return uid,
            Some(false) => {
                let mut objects = self.objects_mut();
                if let Some(key) = objects.get_key_value(uid.as_str()).map(|(k, _)| k) {
                    cached.share_uid(&key.clone());
                }
                if let Some(old) = objects.get_mut(uid.as_str()) {
                    old.cached = cached;
                }
                return uid;
            }
            None => {}
        }
        let source = w.source(source);
        let catalog = self.catalog.load();
        let mut objects = self.objects_mut();
        // One copy of the uid: the map's key, else the object's own.
        let shared = objects.uid_or(&uid, &cached.meta().uid);
        cached.share_uid(&shared);
        w.version_counter += 1;
        let entry = Entry {
            cached,
            version: w.version_counter,
            source,
            root: None,
        };
        objects
            .put(shared, entry, &catalog, &self.board)
            .mark(&mut w.dirty);
        self.writes.fetch_add(1, Ordering::Release);
        uid
    }

    pub(super) fn remove(&self, w: &mut Writer, uid: &str) {
        let catalog = self.catalog.load();
        // A root (or a published workload) it was is marked before it goes.
        self.objects_mut()
            .take(uid, &catalog, &self.board)
            .mark(&mut w.dirty);
        self.writes.fetch_add(1, Ordering::Release);
    }
}
