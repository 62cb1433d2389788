//! The index's writer thread: sources running on the async runtime hand their changes to it
//! instead of calling the index themselves, so conversion of relists aside, no resolution
//! (and no jq evaluation) runs on the runtime's workers.
//!
//! Changes are applied in arrival order and in batches: the thread takes what has queued up
//! (at most [`BATCH`] operations), applies it under one hold of the writer lock and resolves
//! the affected workloads once per batch, so a burst of pod events costs one resolution per
//! workload rather than one per event. Senders wait (asynchronously) when [`QUEUE`]
//! operations are in flight.

use super::Index;
use crate::definition::Catalog;
use crate::model::Cached;
use crate::model::{Skip, SkipCounts, Skipped};
use serde_json::Value as Json;
use std::sync::{Arc, Weak};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

/// Operations in flight before senders wait.
pub const QUEUE: usize = 4096;
/// Stack of the threads that resolve (the writer, and those a flush spreads over): jq
/// evaluation's depth budget is set for it.
pub(super) const WRITER_STACK: usize = 32 * 1024 * 1024;
/// Operations applied per batch at most.
pub const BATCH: usize = 1024;

enum Op {
    Apply(Json, Arc<str>, OwnedSemaphorePermit),
    ApplyConverted(Result<Cached, Skip>, Arc<str>, OwnedSemaphorePermit),
    Delete(String, OwnedSemaphorePermit),
    Reset(
        Arc<str>,
        Vec<Result<Cached, Skip>>,
        oneshot::Sender<Skipped>,
    ),
    Update(Arc<str>, Update, oneshot::Sender<Skipped>),
    BeginList(Arc<str>),
    Stage(Arc<str>, Vec<Result<Cached, Skip>>, OwnedSemaphorePermit),
    FinishList(Arc<str>, oneshot::Sender<Skipped>),
    Reresolve(Arc<Catalog>),
    MarkSynced(String),
    Barrier(oneshot::Sender<()>),
}

/// Incremental changes from one source: objects added or replaced, objects removed (by
/// identity) and notes set or cleared on objects.
#[derive(Debug, Default)]
pub struct Update {
    /// Objects to add or replace.
    pub upserts: Vec<Cached>,
    /// Identities of objects to remove.
    pub deletes: Vec<String>,
    /// Notes to set (`Some`) or clear (`None`), by identity.
    pub notes: Vec<(String, Option<String>)>,
    /// Documents the source skipped since its last update, by reason (counted, not applied).
    pub skipped: SkipCounts,
}

impl Update {
    /// True when it changes and counts nothing.
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty()
            && self.deletes.is_empty()
            && self.notes.is_empty()
            && self.skipped.is_empty()
    }
}

/// A handle for sending changes to the index's writer thread. Cheap to clone.
#[derive(Clone)]
pub struct Feed {
    tx: mpsc::UnboundedSender<Op>,
    permits: Arc<Semaphore>,
    index: Weak<Index>,
}

impl Feed {
    /// Starts the writer thread of `index`.
    pub(super) fn start(index: &Arc<Index>) -> Feed {
        let (tx, rx) = mpsc::unbounded_channel();
        let weak = Arc::downgrade(index);
        let thread = weak.clone();
        let started = std::thread::Builder::new()
            .name("kartograf-index".to_owned())
            .stack_size(WRITER_STACK)
            .spawn(move || write_loop(thread, rx));
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start the index writer thread");
        }
        Feed {
            tx,
            permits: Arc::new(Semaphore::new(QUEUE)),
            index: weak,
        }
    }

    async fn permit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().acquire_owned().await.ok()
    }

    /// Adds or replaces one object from `source`.
    pub async fn apply(&self, json: Json, source: &str) {
        if let Some(p) = self.permit().await {
            let _ = self.tx.send(Op::Apply(json, Arc::from(source), p));
        }
    }

    /// Adds or replaces one object converted by the caller (see [`Cached::from_parsed`]).
    pub async fn apply_converted(&self, cached: Result<Cached, Skip>, source: &str) {
        if let Some(p) = self.permit().await {
            let _ = self
                .tx
                .send(Op::ApplyConverted(cached, Arc::from(source), p));
        }
    }

    /// Removes one object by uid (or identity).
    pub async fn delete(&self, uid: String) {
        if let Some(p) = self.permit().await {
            let _ = self.tx.send(Op::Delete(uid, p));
        }
    }

    /// Replaces everything `source` holds (see [`Index::reset_converted`]); returns the
    /// skipped documents once applied.
    pub async fn reset(&self, source: &str, items: Vec<Result<Cached, Skip>>) -> Skipped {
        let (done, applied) = oneshot::channel();
        if self
            .tx
            .send(Op::Reset(Arc::from(source), items, done))
            .is_err()
        {
            return Skipped::default();
        }
        applied.await.unwrap_or_default()
    }

    /// Starts a list of `source` received in parts: [`Feed::stage`] each part as it
    /// arrives, then [`Feed::finish_list`]. Parts are stored at once; the workloads they
    /// affect are resolved once, when the list ends (a list in parts never resolves a root
    /// once per part that brings one of its pods).
    pub fn begin_list(&self, source: &str) {
        let _ = self.tx.send(Op::BeginList(Arc::from(source)));
    }

    /// Applies part of the open list of `source`; waits while the writer is [`QUEUE`]
    /// objects behind.
    pub async fn stage(&self, source: &str, items: Vec<Result<Cached, Skip>>) {
        let n = u32::try_from(items.len().clamp(1, QUEUE)).unwrap_or(1);
        if let Ok(p) = self.permits.clone().acquire_many_owned(n).await {
            let _ = self.tx.send(Op::Stage(Arc::from(source), items, p));
        }
    }

    /// Ends the open list of `source` (see [`Feed::begin_list`]): removes what it held and
    /// the list did not, resolves what the list changed; returns the skipped documents once
    /// applied.
    pub async fn finish_list(&self, source: &str) -> Skipped {
        let (done, applied) = oneshot::channel();
        if self
            .tx
            .send(Op::FinishList(Arc::from(source), done))
            .is_err()
        {
            return Skipped::default();
        }
        applied.await.unwrap_or_default()
    }

    /// Queues incremental changes of `source` (applied in order with everything queued
    /// before); the receiver fires once they are applied. For producers on a blocking thread
    /// that keep working meanwhile.
    pub fn update_queued(&self, source: &str, update: Update) -> oneshot::Receiver<Skipped> {
        let (done, applied) = oneshot::channel();
        let _ = self.tx.send(Op::Update(Arc::from(source), update, done));
        applied
    }

    /// Applies incremental changes of `source` in one batch; waits until they are applied.
    pub async fn update(&self, source: &str, update: Update) {
        let (done, applied) = oneshot::channel();
        if self
            .tx
            .send(Op::Update(Arc::from(source), update, done))
            .is_ok()
        {
            let _ = applied.await;
        }
    }

    /// Publishes `catalog` at once (lookups and new resolutions use it from now on) and
    /// queues the re-resolution of the workloads it may change.
    pub fn set_catalog(&self, catalog: Catalog) {
        let Some(index) = self.index.upgrade() else {
            return;
        };
        let previous = index.catalog();
        index.store_catalog(catalog);
        let _ = self.tx.send(Op::Reresolve(previous));
    }

    /// Marks `source`'s first full sync done, after everything sent before it is applied.
    pub fn mark_synced(&self, source: &str) {
        let _ = self.tx.send(Op::MarkSynced(source.to_owned()));
    }

    /// Waits until everything sent before is applied and published.
    pub async fn flush(&self) {
        let (done, applied) = oneshot::channel();
        if self.tx.send(Op::Barrier(done)).is_ok() {
            let _ = applied.await;
        }
    }
}

fn write_loop(index: Weak<Index>, mut rx: mpsc::UnboundedReceiver<Op>) {
    while let Some(first) = rx.blocking_recv() {
        let Some(index) = index.upgrade() else {
            return;
        };
        let mut after: Vec<Op> = Vec::new();
        let mut replies: Vec<(oneshot::Sender<Skipped>, Skipped)> = Vec::new();
        let mut batch = index.batch();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(op) = next.take() {
            taken += 1;
            match op {
                Op::Apply(json, source, _permit) => {
                    if let Err(e) = batch.apply(&json, &source) {
                        tracing::warn!(source = %source, "object skipped: {e}");
                    }
                }
                Op::ApplyConverted(cached, source, _permit) => match cached {
                    Ok(c) => {
                        batch.apply_converted(c, &source);
                    }
                    Err(e) => {
                        index.count_skip(&source, &e);
                        tracing::warn!(source = %source, "object skipped: {e}");
                    }
                },
                Op::Delete(uid, _permit) => batch.delete(&uid),
                Op::Reset(source, items, done) => {
                    replies.push((done, batch.reset_converted(&source, items)));
                }
                Op::Update(source, update, done) => {
                    if !update.skipped.is_empty() {
                        index.count_skips(&source, |c| c.merge(&update.skipped));
                    }
                    for cached in update.upserts {
                        batch.upsert(cached, &source);
                    }
                    for uid in &update.deletes {
                        batch.delete(uid);
                    }
                    for (uid, note) in &update.notes {
                        batch.note(uid, note.as_deref());
                    }
                    replies.push((done, Skipped::default()));
                }
                Op::BeginList(source) => batch.begin_list(&source),
                Op::Stage(source, items, _permit) => batch.stage(&source, items),
                Op::FinishList(source, done) => {
                    replies.push((done, batch.finish_list(&source)));
                    let handed = std::mem::take(&mut batch.handed);
                    index.prepare_ahead_beside(handed);
                }
                Op::Reresolve(previous) => batch.reresolve_since(&previous),
                op @ (Op::MarkSynced(_) | Op::Barrier(_)) => after.push(op),
            }
            if taken < BATCH && after.is_empty() {
                next = rx.try_recv().ok();
            }
        }
        drop(batch);
        for (done, skipped) in replies {
            let _ = done.send(skipped);
        }
        for op in after {
            match op {
                Op::MarkSynced(source) => {
                    index.mark_synced(&source);
                    if index.synced() {
                        index.batch().release_open_lists();
                    }
                }
                Op::Barrier(done) => {
                    let _ = done.send(());
                }
                _ => {}
            }
        }
    }
}
