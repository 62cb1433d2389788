//! The live feed of the web view (`/ui/api/events`): server-sent events fed by the board's
//! change history, the same that `Watch` reads.
//!
//! - `hello` (id = revision): the feed is current to this revision. With a resume point (the
//!   `Last-Event-ID` header, as `EventSource` sends it on reconnect, or `?since=`), the
//!   changes since then follow as one `changes` event first and `hello` says `resumed`.
//! - `changes` (id = revision): workloads added, modified or deleted since the last event,
//!   coalesced per workload, at most [`MAX_LISTED`] listed (`more` counts the rest).
//! - `reset` (id = revision): the resume point is older than the kept history (or from
//!   another process): the client must reload what it shows ("started over").
//! - `definitions`: the catalog changed (a new generation): definitions pages reload.
//! - a comment line every [`PING`], so idle connections stay open and dead ones are found.
//!
//! Events are sent at most every [`MIN_GAP`] (changes in between coalesce). A client that
//! does not read holds one bounded queue; its feed resumes from its cursor when it reads
//! again. The feed ends when the server shuts down. At most [`MAX_FEEDS`] are open at once on
//! one listener (more get 503), so probes and scrapes always find a connection.

use super::Body;
use crate::board::Filter;
use crate::proto::v1 as pb;
use crate::server::Shared;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Changes one `changes` event lists (the rest are counted in `more`).
pub const MAX_LISTED: usize = 200;
/// A comment is sent after this long without an event.
pub const PING: Duration = Duration::from_secs(15);
/// Shortest time between two events.
pub const MIN_GAP: Duration = Duration::from_millis(150);
/// How often the catalog generation is checked.
const CATALOG_CHECK: Duration = Duration::from_secs(1);
/// Events queued for one client before the feed waits for it.
const QUEUE: usize = 4;
/// Feeds open at once on one admin listener: half the admin port's connections (`admin.rs` checks
/// it at compile time), so that probes and scrapes always find room. More are refused (503;
/// the page retries).
pub const MAX_FEEDS: usize = 128;

/// The feeds open on one listener (owned by its [`View`](super::View)).
#[derive(Default, Clone)]
pub struct OpenFeeds(Arc<AtomicUsize>);

/// Counts an open feed until dropped.
struct FeedSlot(OpenFeeds);

impl FeedSlot {
    fn take(open: &OpenFeeds) -> Option<FeedSlot> {
        open.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_FEEDS).then_some(n + 1)
            })
            .ok()
            .map(|_| FeedSlot(open.clone()))
    }
}

impl Drop for FeedSlot {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Serialize)]
struct Hello {
    revision: u64,
    resumed: bool,
    synced: bool,
    generation: u64,
}

#[derive(Serialize)]
struct Changes {
    revision: u64,
    changes: Vec<Note>,
    more: usize,
}

#[derive(Serialize)]
struct Note {
    #[serde(rename = "type")]
    kind: &'static str,
    uid: String,
    cluster: String,
    namespace: String,
    workload_kind: String,
    name: String,
}

#[derive(Serialize)]
struct Reset {
    revision: u64,
    since: u64,
}

fn event(name: &str, id: Option<u64>, data: &impl Serialize) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "{}".to_owned());
    let mut text = format!("event: {name}\n");
    if let Some(id) = id {
        text.push_str(&format!("id: {id}\n"));
    }
    // serde_json writes no raw newline, so the data is one line.
    text.push_str(&format!("data: {data}\n\n"));
    Bytes::from(text)
}

fn type_name(kind: pb::EventType) -> &'static str {
    match kind {
        pb::EventType::Added => "added",
        pb::EventType::Modified => "modified",
        pb::EventType::Deleted => "deleted",
        _ => "other",
    }
}

/// The resume point of a request: `Last-Event-ID`, else `?since=`.
fn resume_point(query: Option<&str>, last_event_id: Option<&[u8]>) -> Option<u64> {
    let from_header = last_event_id
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok());
    from_header.or_else(|| super::query_param(query, "since").and_then(|v| v.parse().ok()))
}

/// What the client must receive to be current from `cursor`: an event and the new cursor.
fn catch_up(shared: &Shared, cursor: u64) -> (Bytes, u64) {
    let board = shared.store.board();
    match board.changes_since_counted(cursor, &Filter::default()) {
        None => {
            let revision = board.revision();
            (
                event(
                    "reset",
                    Some(revision),
                    &Reset {
                        revision,
                        since: cursor,
                    },
                ),
                revision,
            )
        }
        Some((changes, revision, _)) => {
            let more = changes.len().saturating_sub(MAX_LISTED);
            let cut = |s: &str| crate::excerpt::excerpt(s, super::api::LABEL_BYTES).into_owned();
            let notes = changes
                .iter()
                .take(MAX_LISTED)
                .map(|c| {
                    let r = c.workload.r#ref.clone().unwrap_or_default();
                    Note {
                        kind: type_name(c.kind),
                        uid: cut(&r.uid),
                        cluster: cut(&c.workload.cluster),
                        namespace: cut(&r.namespace),
                        workload_kind: cut(&r.kind),
                        name: cut(&r.name),
                    }
                })
                .collect();
            (
                event(
                    "changes",
                    Some(revision),
                    &Changes {
                        revision,
                        changes: notes,
                        more,
                    },
                ),
                revision,
            )
        }
    }
}

/// The `/ui/api/events` answer: a stream of events until the client leaves or the server
/// shuts down.
pub fn events(
    shared: &Shared,
    open: &OpenFeeds,
    query: Option<&str>,
    last_event_id: Option<&[u8]>,
) -> Response<Body> {
    let since = resume_point(query, last_event_id);
    let Some(slot) = FeedSlot::take(open) else {
        return super::error(
            hyper::StatusCode::SERVICE_UNAVAILABLE,
            &format!("{MAX_FEEDS} live feeds are open already; retry later"),
        );
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(QUEUE);
    let shared = shared.clone();
    tokio::spawn(async move {
        let _slot = slot;
        let board = shared.store.board();
        let mut revisions = board.subscribe();
        let mut shutdown = shared.shutdown.clone();
        let mut generation = shared.store.catalog().generation();
        let mut cursor = board.revision();
        let mut resumed = false;
        if let Some(since) = since {
            let (first, next) = catch_up(&shared, since);
            resumed = !first.starts_with(b"event: reset");
            if tx.send(first).await.is_err() {
                return;
            }
            cursor = next;
        }
        let hello = Hello {
            revision: cursor,
            resumed,
            synced: shared.store.synced(),
            generation,
        };
        if tx.send(event("hello", Some(cursor), &hello)).await.is_err() {
            return;
        }
        revisions.borrow_and_update();
        let mut check = tokio::time::interval(CATALOG_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sent = tokio::time::Instant::now();
        loop {
            if *shutdown.borrow() {
                return;
            }
            let ping = tokio::time::sleep_until(last_sent + PING);
            tokio::select! {
                changed = revisions.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // Lets changes that come together leave together.
                    tokio::time::sleep_until(last_sent + MIN_GAP).await;
                    revisions.borrow_and_update();
                    let (frame, next) = catch_up(&shared, cursor);
                    cursor = next;
                    if tx.send(frame).await.is_err() {
                        return;
                    }
                    last_sent = tokio::time::Instant::now();
                }
                _ = check.tick() => {
                    let now = shared.store.catalog().generation();
                    if now != generation {
                        generation = now;
                        let frame = event("definitions", None, &serde_json::json!({ "generation": now }));
                        if tx.send(frame).await.is_err() {
                            return;
                        }
                        last_sent = tokio::time::Instant::now();
                    }
                }
                () = ping => {
                    if tx.send(Bytes::from_static(b": ping\n\n")).await.is_err() {
                        return;
                    }
                    last_sent = tokio::time::Instant::now();
                }
                _ = shutdown.changed() => return,
                // The client left: the slot is free at once, not at the next ping.
                () = tx.closed() => return,
            }
        }
    });
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut response = Response::new(StreamBody::new(frames).boxed());
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resume_point_comes_from_the_header_first() {
        assert_eq!(resume_point(Some("since=5"), Some(b"7")), Some(7));
        assert_eq!(resume_point(Some("since=5"), None), Some(5));
        assert_eq!(resume_point(Some("since=5"), Some(b"x")), Some(5));
        assert_eq!(resume_point(None, Some(b"-1")), None);
        assert_eq!(resume_point(None, None), None);
    }

    #[test]
    fn events_are_one_data_line() {
        let e = event(
            "changes",
            Some(3),
            &serde_json::json!({ "name": "a\nb\r\n<script>" }),
        );
        let text = std::str::from_utf8(&e).unwrap();
        // Three fields and the blank line that ends the event: no newline or carriage return
        // from the data splits it.
        assert_eq!(text.matches('\n').count(), 4, "{text}");
        assert!(!text.contains('\r'), "{text}");
        assert!(text.starts_with("event: changes\nid: 3\ndata: {"));
        assert!(text.ends_with("}\n\n"));
    }
}
