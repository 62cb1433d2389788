//! A published workload graph, kept as its wire encoding (encoded once, shared by every
//! `Resolve` answer and `Watch` subscriber that sends this version) plus its summary (what
//! lists, totals and metrics read). The full graph is decoded only when asked for as a
//! struct: the encoding is about a fifth of the struct's size.

use crate::proto::v1 as pb;
use crate::resolve;
use bytes::Bytes;
use prost::Message;
use std::sync::{Arc, OnceLock};

/// Workload field number of `revision` (see proto/kartograf/v1/kartograf.proto).
const REVISION_FIELD: u32 = 4;

/// One version of a workload graph, as the index publishes it.
#[derive(Debug)]
pub struct Published {
    /// The graph without its component tree, pod lists and gang members
    /// ([`resolve::summarize`]), with its revision.
    pub summary: Arc<pb::Workload>,
    /// The full graph's encoding: everything but the revision, then the revision field
    /// (protobuf allows fields in any order).
    full: Bytes,
    /// Length of `full` without the revision field: two versions are equal when these
    /// prefixes are (map fields are ordered, so equal graphs encode equally).
    base: usize,
    summary_bytes: OnceLock<Bytes>,
}

impl Published {
    /// Encodes a freshly resolved graph (with its revision set).
    pub fn new(mut graph: pb::Workload) -> Published {
        let revision = std::mem::take(&mut graph.revision);
        let mut buf = Vec::with_capacity(graph.encoded_len() + 11);
        // Encoding into a Vec cannot run out of space.
        let _ = graph.encode(&mut buf);
        let base = buf.len();
        if revision != 0 {
            prost::encoding::uint64::encode(REVISION_FIELD, &revision, &mut buf);
        }
        graph.revision = revision;
        resolve::summarize(&mut graph);
        Published {
            summary: Arc::new(graph),
            full: Bytes::from(buf),
            base,
            summary_bytes: OnceLock::new(),
        }
    }

    /// The same graph at `revision` (a copy of the encoding with the revision field
    /// replaced; cheap next to encoding, so it can run while the index publishes).
    pub fn stamped(&self, revision: u64) -> Published {
        let mut buf = Vec::with_capacity(self.base + 11);
        buf.extend_from_slice(self.full.get(..self.base).unwrap_or_default());
        if revision != 0 {
            prost::encoding::uint64::encode(REVISION_FIELD, &revision, &mut buf);
        }
        let mut summary = (*self.summary).clone();
        summary.revision = revision;
        Published {
            summary: Arc::new(summary),
            full: Bytes::from(buf),
            base: self.base,
            summary_bytes: OnceLock::new(),
        }
    }

    /// True when both hold the same graph, whatever their revisions.
    pub fn same_graph(&self, other: &Published) -> bool {
        self.full.get(..self.base) == other.full.get(..other.base)
    }

    /// The full graph, decoded from its encoding.
    pub fn graph(&self) -> pb::Workload {
        // The bytes were encoded from a `pb::Workload` by this process.
        pb::Workload::decode(self.full.clone()).unwrap_or_else(|_| (*self.summary).clone())
    }

    /// The protobuf encoding of the graph in `view` (`pb::View` as sent on the wire; anything
    /// but SUMMARY is the full view), shared by every caller.
    pub fn encoded(&self, view: i32) -> Bytes {
        if view == pb::View::Summary as i32 {
            self.summary_bytes
                .get_or_init(|| Bytes::from(self.summary.encode_to_vec()))
                .clone()
        } else {
            self.full.clone()
        }
    }
}

impl std::ops::Deref for Published {
    type Target = pb::Workload;

    fn deref(&self) -> &pb::Workload {
        &self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(revision: u64, pods: u32) -> pb::Workload {
        pb::Workload {
            r#ref: Some(pb::ObjectRef {
                kind: "Example".into(),
                name: "a".into(),
                ..Default::default()
            }),
            revision,
            pods: Some(pb::PodCounts {
                desired: pods,
                current: pods,
                ready: 0,
            }),
            components: vec![pb::Component {
                name: "workers".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_full_graph_encoded_and_the_summary_as_a_struct() {
        let p = Published::new(graph(7, 3));
        assert_eq!(p.graph(), graph(7, 3), "decodes to what was published");
        assert!(p.components.is_empty(), "the struct kept is the summary");
        assert_eq!(p.revision, 7);
        let full = pb::Workload::decode(p.encoded(pb::View::Full as i32)).unwrap();
        assert_eq!(full, graph(7, 3));
        let summary = pb::Workload::decode(p.encoded(pb::View::Summary as i32)).unwrap();
        assert_eq!(summary.revision, 7);
        assert!(summary.components.is_empty());
    }

    #[test]
    fn graphs_compare_without_their_revisions() {
        let a = Published::new(graph(7, 3));
        let b = a.stamped(9);
        assert_eq!(b.graph(), graph(9, 3));
        assert_eq!(b.revision, 9);
        assert!(a.same_graph(&b));
        assert!(a.same_graph(&Published::new(graph(8, 3))));
        assert!(!a.same_graph(&Published::new(graph(7, 4))));
    }
}
