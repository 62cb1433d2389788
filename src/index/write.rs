//! The one write protocol of the index: every change a source (or a test) makes is a
//! [`Write`], spoken the same to the sync [`Batch`] (tests, offline resolution) and to the
//! async [`super::Feed`] (sources, through the writer thread). The verbs: apply, delete,
//! note, reset, begin/stage/finish a list, count what was skipped; a catalog change and a
//! source's first sync are `set_catalog` and `mark_synced`, named the same on both (the
//! feed publishes a catalog at once and queues its re-resolution; either marks a sync done
//! once the writes before it are published).

use super::Batch;
use crate::expr::Limits;
use crate::model::{Cached, Skip, SkipCounts, Skipped};
use serde_json::Value as Json;
use std::sync::Arc;

/// One change to the index.
#[derive(Debug)]
pub enum Write {
    /// Adds or replaces one object of `source`.
    Apply {
        /// The source it comes from.
        source: Arc<str>,
        /// The object.
        object: Incoming,
    },
    /// Removes one object by uid (or identity).
    Delete {
        /// Its uid or identity.
        uid: String,
    },
    /// Attaches a source's note to an object (`None` removes it); the workloads it is part
    /// of carry it as a `source_note` diagnostic.
    Note {
        /// The object's uid or identity.
        uid: String,
        /// The note.
        note: Option<String>,
    },
    /// Replaces everything `source` holds with these objects at once.
    Reset {
        /// The source.
        source: Arc<str>,
        /// Its objects, converted (failures are what it skipped).
        items: Vec<Result<Cached, Skip>>,
    },
    /// Begins a list of `source` received in parts (see `listing.rs`).
    BeginList {
        /// The source.
        source: Arc<str>,
    },
    /// One part of the open list of `source`.
    Stage {
        /// The source.
        source: Arc<str>,
        /// The part's objects, converted.
        items: Vec<Result<Cached, Skip>>,
    },
    /// Ends the open list of `source`: what it held and the list did not is removed.
    FinishList {
        /// The source.
        source: Arc<str>,
    },
    /// Documents `source` skipped before they reached the index, counted by reason.
    CountSkipped {
        /// The source.
        source: Arc<str>,
        /// The counts.
        counts: SkipCounts,
    },
}

/// An object as a source hands it over.
#[derive(Debug)]
pub enum Incoming {
    /// A document to convert (a pod keeps its unpacked value for its first resolution).
    Json(Json),
    /// Converted by the caller (e.g. while it was parsed), or why it could not be.
    Converted(Result<Cached, Skip>),
}

impl Write {
    /// Adds or replaces `doc` of `source` ([`Write::Apply`]; converted by the writer, as
    /// [`Incoming::Json`]).
    pub fn apply(source: &str, doc: Json) -> Write {
        Write::Apply {
            source: Arc::from(source),
            object: Incoming::Json(doc),
        }
    }

    /// Removes the object with this uid or identity ([`Write::Delete`]).
    pub fn delete(uid: &str) -> Write {
        Write::Delete {
            uid: uid.to_owned(),
        }
    }

    /// Replaces everything `source` holds with `docs` ([`Write::Reset`]), each converted
    /// here within the default limits as the sources convert (a failure is its skip).
    pub fn reset(source: &str, docs: &[Json]) -> Write {
        Write::Reset {
            source: Arc::from(source),
            items: docs
                .iter()
                .map(|d| Cached::from_json(d, Limits::default()))
                .collect(),
        }
    }

    /// Objects this write carries, for the writer's queue bound (at least 1 for a write that
    /// carries any).
    pub(super) fn weight(&self) -> usize {
        match self {
            Write::Apply { .. } | Write::Delete { .. } => 1,
            Write::Stage { items, .. } => items.len().max(1),
            _ => 0,
        }
    }
}

impl Batch<'_> {
    /// Applies one write; returns what it skipped (a failed conversion, or a list's or
    /// reset's skipped documents).
    pub fn write(&mut self, write: Write) -> Skipped {
        let mut skipped = Skipped::default();
        match write {
            Write::Apply { source, object } => {
                if let Err(e) = self.apply(object, &source) {
                    skipped.push(e);
                }
            }
            Write::Delete { uid } => self.delete(&uid),
            Write::Note { uid, note } => self.note(&uid, note.as_deref()),
            Write::Reset { source, items } => skipped = self.reset_converted(&source, items),
            Write::BeginList { source } => self.begin_list(&source),
            Write::Stage { source, items } => self.stage(&source, items),
            Write::FinishList { source } => skipped = self.finish_list(&source),
            Write::CountSkipped { source, counts } => {
                if !counts.is_empty() {
                    self.index.count_skips(&source, |c| c.merge(&counts));
                }
            }
        }
        skipped
    }
}
