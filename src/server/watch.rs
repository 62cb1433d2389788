//! `Watch`: a snapshot (ADDED…, SYNCED), then changes. Each subscriber has its own task and
//! a small bounded channel; while it is slow, changes pile up only in the shared, bounded
//! history and reach it coalesced to the latest graph per workload. A subscriber that falls
//! out of the history gets RESET and a fresh snapshot. Nobody waits for a slow subscriber.
//! Events carry each graph version's shared encoding: a change is encoded once per view,
//! whatever the number of subscribers.

use super::Shared;
use super::wire::WatchFrame;
use crate::index::Filter;
use crate::proto::v1 as pb;
use futures::Stream;
use std::pin::Pin;
use tokio::sync::mpsc;
use tonic::Status;

/// The stream of a subscriber's events, as pre-encoded frames.
pub type FrameStream = Pin<Box<dyn Stream<Item = Result<WatchFrame, Status>> + Send>>;

/// The stream type of `Watch` as the generated trait declares it (decoded messages).
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

/// Events buffered per subscriber before its task waits (and starts coalescing).
const BUFFER: usize = 64;

/// Starts a subscriber.
pub fn start(shared: Shared, filter: Filter, since: u64, view_kind: i32) -> FrameStream {
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(run(shared, filter, since, view_kind, tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

type Tx = mpsc::Sender<Result<WatchFrame, Status>>;

fn event(kind: pb::EventType, revision: u64) -> Result<WatchFrame, Status> {
    Ok(WatchFrame::bare(kind, revision))
}

/// Sends the full snapshot then SYNCED; returns the revision it is current to.
async fn snapshot(shared: &Shared, filter: &Filter, view_kind: i32, tx: &Tx) -> Option<u64> {
    let (all, revision) = shared.index.snapshot(filter);
    for w in &all {
        tx.send(Ok(WatchFrame {
            kind: pb::EventType::Added as i32,
            revision: w.revision,
            workload: Some(w.encoded(view_kind)),
        }))
        .await
        .ok()?;
    }
    tx.send(event(pb::EventType::Synced, revision)).await.ok()?;
    Some(revision)
}

async fn run(shared: Shared, filter: Filter, since: u64, view_kind: i32, tx: Tx) {
    let _subscription = shared.metrics.watch_subscribed();
    let mut revisions = shared.index.subscribe();
    let mut shutdown = shared.shutdown.clone();
    let mut cursor = if since == 0 {
        match snapshot(&shared, &filter, view_kind, &tx).await {
            Some(r) => r,
            None => return,
        }
    } else {
        since
    };
    loop {
        match shared.index.changes_since_counted(cursor, &filter) {
            None => {
                if tx.send(event(pb::EventType::Reset, cursor)).await.is_err() {
                    return;
                }
                match snapshot(&shared, &filter, view_kind, &tx).await {
                    Some(r) => cursor = r,
                    None => return,
                }
            }
            Some((changes, revision, coalesced)) => {
                shared.metrics.watch_coalesced(coalesced);
                for c in changes {
                    let frame = WatchFrame {
                        kind: c.kind as i32,
                        revision: c.revision,
                        workload: Some(c.workload.encoded(view_kind)),
                    };
                    if tx.send(Ok(frame)).await.is_err() {
                        return;
                    }
                }
                cursor = revision;
            }
        }
        tokio::select! {
            r = revisions.changed() => if r.is_err() { return },
            _ = tx.closed() => return,
            _ = shutdown.changed() => {
                let _ = tx.send(Err(Status::unavailable("kartograf is shutting down; reconnect with since_revision to resume"))).await;
                return;
            }
        }
        if *shutdown.borrow() {
            let _ = tx
                .send(Err(Status::unavailable(
                    "kartograf is shutting down; reconnect with since_revision to resume",
                )))
                .await;
            return;
        }
    }
}
