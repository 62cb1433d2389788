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
use super::write::{Incoming, Write};
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
    /// Writes applied in order in one batch; the permit bounds the queue, the sender (if
    /// any) hears what they skipped once they are applied.
    Writes(
        Vec<Write>,
        Option<OwnedSemaphorePermit>,
        Option<oneshot::Sender<Skipped>>,
    ),
    /// The catalog was published at once ([`Feed::set_catalog`]); re-resolve what changed
    /// since this one.
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
    /// The writes that make this update, in order: counts, upserts, deletions, notes.
    pub fn into_writes(self, source: &str) -> Vec<Write> {
        let source: Arc<str> = Arc::from(source);
        let mut writes =
            Vec::with_capacity(1 + self.upserts.len() + self.deletes.len() + self.notes.len());
        if !self.skipped.is_empty() {
            writes.push(Write::CountSkipped {
                source: source.clone(),
                counts: self.skipped,
            });
        }
        writes.extend(self.upserts.into_iter().map(|c| Write::Apply {
            source: source.clone(),
            object: Incoming::Converted(Ok(c)),
        }));
        writes.extend(self.deletes.into_iter().map(|uid| Write::Delete { uid }));
        writes.extend(
            self.notes
                .into_iter()
                .map(|(uid, note)| Write::Note { uid, note }),
        );
        writes
    }

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

    /// Sends one write, applied in order with everything sent before; waits (for a write
    /// that carries objects) while the writer is [`QUEUE`] objects behind. What it skips is
    /// logged.
    pub async fn write(&self, write: Write) {
        let weight = u32::try_from(write.weight().min(QUEUE)).unwrap_or(1);
        let permit = if weight == 0 {
            None
        } else {
            match self.permits.clone().acquire_many_owned(weight).await {
                Ok(p) => Some(p),
                Err(_) => return,
            }
        };
        let _ = self.tx.send(Op::Writes(vec![write], permit, None));
    }

    /// Queues `writes`, applied together in one batch after everything sent before; the
    /// receiver hears what they skipped once they are applied. For producers on a blocking
    /// thread that keep working meanwhile.
    pub fn write_queued(&self, writes: Vec<Write>) -> oneshot::Receiver<Skipped> {
        let (done, applied) = oneshot::channel();
        let _ = self.tx.send(Op::Writes(writes, None, Some(done)));
        applied
    }

    /// Applies `writes` together in one batch; waits until they are applied and returns
    /// what they skipped.
    pub async fn write_all(&self, writes: Vec<Write>) -> Skipped {
        self.write_queued(writes).await.unwrap_or_default()
    }

    /// Adds or replaces one object from `source` ([`Write::Apply`]).
    pub async fn apply(&self, json: Json, source: &str) {
        let object = Incoming::Json(json);
        self.write(Write::Apply {
            source: Arc::from(source),
            object,
        })
        .await;
    }

    /// Adds or replaces one object converted by the caller (see [`Cached::from_parsed`]).
    pub async fn apply_converted(&self, cached: Result<Cached, Skip>, source: &str) {
        let object = Incoming::Converted(cached);
        self.write(Write::Apply {
            source: Arc::from(source),
            object,
        })
        .await;
    }

    /// Removes one object by uid (or identity) ([`Write::Delete`]).
    pub async fn delete(&self, uid: String) {
        self.write(Write::Delete { uid }).await;
    }

    /// Replaces everything `source` holds ([`Write::Reset`]); returns the skipped documents
    /// once applied.
    pub async fn reset(&self, source: &str, items: Vec<Result<Cached, Skip>>) -> Skipped {
        let source = Arc::from(source);
        self.write_all(vec![Write::Reset { source, items }]).await
    }

    /// Starts a list of `source` received in parts: [`Feed::stage`] each part as it
    /// arrives, then [`Feed::finish_list`]. Parts are stored at once; the workloads they
    /// affect are resolved as `listing.rs` schedules.
    pub fn begin_list(&self, source: &str) {
        let source = Arc::from(source);
        let _ = self
            .tx
            .send(Op::Writes(vec![Write::BeginList { source }], None, None));
    }

    /// Applies part of the open list of `source`; waits while the writer is [`QUEUE`]
    /// objects behind.
    pub async fn stage(&self, source: &str, items: Vec<Result<Cached, Skip>>) {
        let source = Arc::from(source);
        self.write(Write::Stage { source, items }).await;
    }

    /// Ends the open list of `source` (see [`Feed::begin_list`]): removes what it held and
    /// the list did not, resolves what the list changed; returns the skipped documents once
    /// applied.
    pub async fn finish_list(&self, source: &str) -> Skipped {
        let source = Arc::from(source);
        self.write_all(vec![Write::FinishList { source }]).await
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

/// The source a write names (empty for one that names none), for its log lines.
fn write_source(write: &Write) -> Arc<str> {
    match write {
        Write::Apply { source, .. }
        | Write::Reset { source, .. }
        | Write::BeginList { source }
        | Write::Stage { source, .. }
        | Write::FinishList { source }
        | Write::CountSkipped { source, .. } => source.clone(),
        Write::Delete { .. } | Write::Note { .. } => Arc::from(""),
    }
}

fn write_loop(index: Weak<Index>, mut rx: mpsc::UnboundedReceiver<Op>) {
    while let Some(first) = rx.blocking_recv() {
        let Some(index) = index.upgrade() else {
            return;
        };
        let mut barriers: Vec<oneshot::Sender<()>> = Vec::new();
        let mut replies: Vec<(oneshot::Sender<Skipped>, Skipped)> = Vec::new();
        let mut batch = index.batch();
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(op) = next.take() {
            taken += 1;
            match op {
                Op::Writes(writes, _permit, reply) => {
                    let mut skipped = Skipped::default();
                    for write in writes {
                        let finishing = matches!(write, Write::FinishList { .. });
                        let source = write_source(&write);
                        let these = batch.write(write);
                        if reply.is_none() {
                            for line in these.lines() {
                                tracing::warn!(source = %source, "object skipped: {line}");
                            }
                        }
                        skipped.merge(these);
                        if finishing {
                            let handed = std::mem::take(&mut batch.handed);
                            index.prepare_ahead_beside(handed);
                        }
                    }
                    if let Some(done) = reply {
                        replies.push((done, skipped));
                    }
                }
                Op::Reresolve(previous) => batch.reresolve_since(&previous),
                // Both end the batch: readiness and a barrier wait for what came before.
                Op::MarkSynced(source) => {
                    batch.mark_synced(&source);
                    break;
                }
                Op::Barrier(done) => {
                    barriers.push(done);
                    break;
                }
            }
            if taken < BATCH {
                next = rx.try_recv().ok();
            }
        }
        drop(batch);
        for (done, skipped) in replies {
            let _ = done.send(skipped);
        }
        for done in barriers {
            let _ = done.send(());
        }
    }
}
