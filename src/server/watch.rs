//! `Watch`: a snapshot (ADDED…, SYNCED), then changes. A subscriber is the response stream
//! itself: no task, no channel. When the transport polls it for the next frame it reads the
//! index from its cursor; a new revision only wakes it. While it is slow (not polled: HTTP/2
//! flow control is full), changes pile up only in the shared, bounded history and reach it
//! coalesced to the latest graph per workload. A subscriber that falls out of the history
//! gets RESET and a fresh snapshot. A resumed subscriber gets SYNCED after its catch-up, as
//! a new one after its snapshot, so that either knows when it is current. Nobody waits for a
//! slow subscriber. Events carry each graph version's shared encoding: a change is encoded
//! once per view, whatever the number of subscribers, and a snapshot waits as graph
//! references until it is sent. The transport sends the frames through
//! [`super::watch_body::WatchBody`], which also cuts off subscribers that stop reading.

use super::Shared;
use super::wire::WatchFrame;
use crate::board::{Filter, Published};
use crate::metrics::WatchSubscription;
use crate::proto::v1 as pb;
use futures::Stream;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio_stream::wrappers::WatchStream as Signal;
use tonic::Status;

/// The stream of a subscriber's events, as pre-encoded frames.
pub type FrameStream = Pin<Box<dyn Stream<Item = Result<WatchFrame, Status>> + Send>>;

/// The stream type of `Watch` as the generated trait declares it (decoded messages).
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

/// Default of [`WatchLimit`]'s cap (`serve --max-watch-streams`).
pub const DEFAULT_MAX_WATCH_STREAMS: usize = 10_000;

/// The cap on `Watch` streams open at once across the server: one more is refused with
/// `RESOURCE_EXHAUSTED`, so that streams cannot grow memory without bound.
#[derive(Debug)]
pub struct WatchLimit {
    max: usize,
    open: AtomicUsize,
}

impl WatchLimit {
    /// At most `max` streams at once.
    pub fn new(max: usize) -> Arc<WatchLimit> {
        Arc::new(WatchLimit {
            max,
            open: AtomicUsize::new(0),
        })
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A slot for one more stream, held until it is dropped; refused at the cap.
    fn acquire(self: &Arc<Self>) -> Result<WatchSlot, Status> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .map(|_| WatchSlot(self.clone()))
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "{} Watch streams are open, the most this server keeps (--max-watch-streams); retry later",
                    self.max
                ))
            })
    }
}

/// One open stream's place under the [`WatchLimit`].
#[derive(Debug)]
struct WatchSlot(Arc<WatchLimit>);

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Starts a subscriber; refused with `RESOURCE_EXHAUSTED` when the server's
/// [`WatchLimit`] is reached.
pub fn start(
    shared: Shared,
    filter: Filter,
    since: u64,
    view_kind: i32,
) -> Result<FrameStream, Status> {
    let slot = shared.watch_limit.acquire()?;
    Ok(Box::pin(Subscriber {
        _slot: slot,
        _subscription: shared.metrics.watch_subscribed(),
        // Yields at once, so the first poll reads the changes since `since`.
        revisions: Signal::new(shared.store.board().subscribe()),
        shutdown: Signal::from_changes(shared.shutdown.clone()),
        cursor: (since != 0).then_some(since),
        resuming: since != 0,
        pending: VecDeque::new(),
        done: false,
        shared,
        filter,
        view_kind,
    }))
}

/// What a subscriber has read from the index and not yet handed out: frames, or the rest of
/// a snapshot (a graph reference each, turned into a frame when it is handed out).
enum Queued {
    Frame(WatchFrame),
    Snapshot(std::vec::IntoIter<Arc<Published>>),
}

/// One subscriber's state between polls.
struct Subscriber {
    shared: Shared,
    filter: Filter,
    view_kind: i32,
    /// The revision the subscriber is (or, once `pending` is sent, will be) current to;
    /// `None` until the snapshot is taken.
    cursor: Option<u64>,
    /// True until the catch-up of a resumed subscriber is queued (SYNCED follows it).
    resuming: bool,
    /// Frames read from the index, not yet handed to the transport.
    pending: VecDeque<Queued>,
    /// Wakes the stream on each new index revision.
    revisions: Signal<u64>,
    /// Wakes the stream when the server starts shutting down.
    shutdown: Signal<bool>,
    done: bool,
    _subscription: WatchSubscription,
    _slot: WatchSlot,
}

impl Subscriber {
    /// Queues the full snapshot then SYNCED; returns the revision it is current to.
    fn snapshot(&mut self) -> u64 {
        self.resuming = false;
        let (all, revision) = self.shared.store.board().snapshot(&self.filter);
        self.pending.push_back(Queued::Snapshot(all.into_iter()));
        self.queue(WatchFrame::bare(pb::EventType::Synced, revision));
        revision
    }

    fn queue(&mut self, frame: WatchFrame) {
        self.pending.push_back(Queued::Frame(frame));
    }

    /// The next frame to hand out, if any.
    fn next_frame(&mut self) -> Option<WatchFrame> {
        loop {
            match self.pending.front_mut()? {
                Queued::Snapshot(rest) => match rest.next() {
                    Some(w) => {
                        return Some(WatchFrame {
                            kind: pb::EventType::Added as i32,
                            revision: w.revision,
                            workload: Some(w.encoded(self.view_kind)),
                        });
                    }
                    None => {
                        self.pending.pop_front();
                    }
                },
                Queued::Frame(_) => match self.pending.pop_front() {
                    Some(Queued::Frame(f)) => return Some(f),
                    _ => return None,
                },
            }
        }
    }

    /// Queues what the subscriber needs to be current now (RESET and a snapshot when its
    /// cursor fell out of the history).
    fn catch_up(&mut self, cursor: u64) -> u64 {
        match self
            .shared
            .store
            .board()
            .changes_since_counted(cursor, &self.filter)
        {
            None => {
                self.queue(WatchFrame::bare(pb::EventType::Reset, cursor));
                self.snapshot()
            }
            Some((changes, revision, coalesced)) => {
                self.shared.metrics.watch_coalesced(coalesced);
                let view = self.view_kind;
                self.pending.extend(changes.into_iter().map(|c| {
                    Queued::Frame(WatchFrame {
                        kind: c.kind as i32,
                        revision: c.revision,
                        workload: Some(c.workload.encoded(view)),
                    })
                }));
                if std::mem::take(&mut self.resuming) {
                    self.queue(WatchFrame::bare(pb::EventType::Synced, revision));
                }
                revision
            }
        }
    }
}

impl Stream for Subscriber {
    type Item = Result<WatchFrame, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(frame) = this.next_frame() {
                return Poll::Ready(Some(Ok(frame)));
            }
            let cursor = match this.cursor {
                Some(c) => c,
                None => {
                    this.cursor = Some(this.snapshot());
                    continue;
                }
            };
            // Any change of the shutdown signal (or its sender gone) ends the stream.
            if Pin::new(&mut this.shutdown).poll_next(cx).is_ready() {
                this.done = true;
                return Poll::Ready(Some(Err(Status::unavailable(
                    "kartograf is shutting down; reconnect with since_revision to resume",
                ))));
            }
            match Pin::new(&mut this.revisions).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    this.done = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(_)) => this.cursor = Some(this.catch_up(cursor)),
            }
        }
    }
}
