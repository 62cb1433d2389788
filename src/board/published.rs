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
/// Workload field number of `diagnostics`.
const DIAGNOSTICS_FIELD: u32 = 11;

/// One version of a workload graph, as the index (or an aggregator) publishes it.
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
    /// Length of the graph as resolved (or received), before diagnostics appended by
    /// [`Published::with_diagnostic`]; `plain <= base`.
    plain: usize,
    /// How many diagnostics were appended (the last ones of `summary.diagnostics`).
    appended: usize,
    summary_bytes: OnceLock<Bytes>,
}

/// The revision field as [`Published`] writes it after the graph.
fn revision_field(revision: u64) -> Vec<u8> {
    let mut buf = Vec::with_capacity(11);
    if revision != 0 {
        prost::encoding::uint64::encode(REVISION_FIELD, &revision, &mut buf);
    }
    buf
}

/// Where the last top-level field of an encoded message starts, and its field number
/// (`None` for an empty or malformed message, or one with groups).
fn last_field(mut buf: &[u8]) -> Option<(usize, u32)> {
    use prost::encoding::decode_varint;
    let total = buf.len();
    let mut last = None;
    while !buf.is_empty() {
        let start = total - buf.len();
        let key = decode_varint(&mut buf).ok()?;
        let skip = match key & 7 {
            0 => {
                decode_varint(&mut buf).ok()?;
                0
            }
            1 => 8,
            2 => usize::try_from(decode_varint(&mut buf).ok()?).ok()?,
            5 => 4,
            _ => return None,
        };
        buf = buf.get(skip..)?;
        last = Some((start, u32::try_from(key >> 3).ok()?));
    }
    last
}

impl Published {
    /// Encodes a freshly resolved graph (with its revision set).
    pub fn new(mut graph: pb::Workload) -> Published {
        let revision = std::mem::take(&mut graph.revision);
        let mut buf = Vec::with_capacity(graph.encoded_len() + 11);
        // Encoding into a Vec cannot run out of space.
        let _ = graph.encode(&mut buf);
        let base = buf.len();
        buf.extend_from_slice(&revision_field(revision));
        graph.revision = revision;
        resolve::summarize(&mut graph);
        Published {
            summary: Arc::new(graph),
            full: Bytes::from(buf),
            base,
            plain: base,
            appended: 0,
            summary_bytes: OnceLock::new(),
        }
    }

    /// A graph received as another server encoded it (an upstream's `Watch` event), kept as
    /// those bytes: it is decoded once for its summary, and re-encoded only when it must
    /// change (it names no cluster and `cluster` is given) or when its revision is not the
    /// last field (the bytes came from another encoder than [`Published`]).
    pub fn from_wire(bytes: Bytes, cluster: &str) -> Result<Published, prost::DecodeError> {
        let mut graph = pb::Workload::decode(bytes.clone())?;
        if graph.cluster.is_empty() && !cluster.is_empty() {
            graph.cluster = cluster.to_owned();
            return Ok(Published::new(graph));
        }
        let base = match last_field(&bytes) {
            // The revision is the last field: everything before it is the graph.
            Some((start, REVISION_FIELD)) => start,
            // No revision at all.
            _ if graph.revision == 0 => bytes.len(),
            _ => return Ok(Published::new(graph)),
        };
        resolve::summarize(&mut graph);
        Ok(Published {
            summary: Arc::new(graph),
            full: bytes,
            base,
            plain: base,
            appended: 0,
            summary_bytes: OnceLock::new(),
        })
    }

    /// The same graph at `revision` (a copy of the encoding with the revision field
    /// replaced; cheap next to encoding, so it can run while the index publishes).
    pub fn stamped(&self, revision: u64) -> Published {
        let mut buf = Vec::with_capacity(self.base + 11);
        buf.extend_from_slice(self.full.get(..self.base).unwrap_or_default());
        buf.extend_from_slice(&revision_field(revision));
        let mut summary = (*self.summary).clone();
        summary.revision = revision;
        Published {
            summary: Arc::new(summary),
            full: Bytes::from(buf),
            base: self.base,
            plain: self.plain,
            appended: self.appended,
            summary_bytes: OnceLock::new(),
        }
    }

    /// The graph with one more diagnostic, without decoding or re-encoding it: a repeated
    /// field's elements may come in several runs, so the diagnostic is appended to the
    /// encoding.
    pub fn with_diagnostic(&self, diagnostic: pb::Diagnostic) -> Published {
        let mut buf = Vec::with_capacity(self.base + diagnostic.encoded_len() + 16);
        buf.extend_from_slice(self.full.get(..self.base).unwrap_or_default());
        prost::encoding::message::encode(DIAGNOSTICS_FIELD, &diagnostic, &mut buf);
        let base = buf.len();
        buf.extend_from_slice(&revision_field(self.summary.revision));
        let mut summary = (*self.summary).clone();
        summary.diagnostics.push(diagnostic);
        Published {
            summary: Arc::new(summary),
            full: Bytes::from(buf),
            base,
            plain: self.plain,
            appended: self.appended + 1,
            summary_bytes: OnceLock::new(),
        }
    }

    /// The graph without the diagnostics [`Published::with_diagnostic`] appended (itself
    /// when there are none), at the same revision.
    pub fn without_appended(self: &Arc<Self>) -> Arc<Published> {
        if self.appended == 0 {
            return self.clone();
        }
        let mut buf = Vec::with_capacity(self.plain + 11);
        buf.extend_from_slice(self.full.get(..self.plain).unwrap_or_default());
        buf.extend_from_slice(&revision_field(self.summary.revision));
        let mut summary = (*self.summary).clone();
        let keep = summary.diagnostics.len().saturating_sub(self.appended);
        summary.diagnostics.truncate(keep);
        Arc::new(Published {
            summary: Arc::new(summary),
            full: Bytes::from(buf),
            base: self.plain,
            plain: self.plain,
            appended: 0,
            summary_bytes: OnceLock::new(),
        })
    }

    /// How many diagnostics [`Published::with_diagnostic`] appended.
    pub fn appended(&self) -> usize {
        self.appended
    }

    /// True when both hold the same graph, whatever their revisions.
    pub fn same_graph(&self, other: &Published) -> bool {
        self.full.get(..self.base) == other.full.get(..other.base)
    }

    /// The full graph, decoded from its encoding.
    pub fn graph(&self) -> pb::Workload {
        // The bytes were encoded from a `pb::Workload` by this process (or checked when
        // received).
        pb::Workload::decode(self.full.clone()).unwrap_or_else(|_| (*self.summary).clone())
    }

    /// Bytes held by this version: its full encoding (what memory figures count).
    pub fn encoded_len(&self) -> usize {
        self.full.len()
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

    fn stale() -> pb::Diagnostic {
        pb::Diagnostic {
            severity: "warning".into(),
            code: "upstream_stale".into(),
            message: "gone quiet".into(),
            ..Default::default()
        }
    }

    #[test]
    fn received_bytes_are_kept_as_they_came() {
        let sent = Published::new(graph(7, 3)).stamped(41);
        let bytes = sent.encoded(pb::View::Full as i32);
        let got = Published::from_wire(bytes.clone(), "eu").unwrap();
        // The sender named no cluster: the receiver fills it in (one re-encoding).
        assert_eq!(got.cluster, "eu");
        assert_eq!(got.graph().cluster, "eu");
        let mut named = graph(7, 3);
        named.cluster = "us".into();
        let sent = Published::new(named).stamped(41);
        let bytes = sent.encoded(pb::View::Full as i32);
        let got = Published::from_wire(bytes.clone(), "eu").unwrap();
        assert_eq!(got.encoded(pb::View::Full as i32), bytes, "passed through");
        assert_eq!(got.cluster, "us", "the sender's cluster stays");
        assert!(got.components.is_empty(), "summarized");
        assert!(got.same_graph(&sent));
        let restamped = got.stamped(9);
        assert_eq!(restamped.graph().revision, 9);
        assert!(restamped.same_graph(&got));
        // Bytes whose revision is not last (another encoder) are normalized once.
        let mut w = graph(5, 1);
        w.cluster = "us".into();
        let plain = Published::from_wire(Bytes::from(w.encode_to_vec()), "").unwrap();
        assert_eq!(plain.graph(), w);
        assert!(Published::from_wire(Bytes::from_static(b"\xff\xff"), "").is_err());
    }

    #[test]
    fn an_appended_diagnostic_is_part_of_the_graph_until_removed() {
        let a = Published::new(graph(7, 3));
        let marked = Arc::new(a.with_diagnostic(stale()));
        assert!(!marked.same_graph(&a));
        let full = marked.graph();
        assert_eq!(full.diagnostics, vec![stale()]);
        assert_eq!(full.revision, 7);
        assert_eq!(full.components.len(), 1);
        assert_eq!(marked.diagnostics, vec![stale()], "the summary has it too");
        let stamped = Arc::new(marked.stamped(12));
        assert_eq!(stamped.graph().diagnostics, vec![stale()]);
        assert_eq!(stamped.appended(), 1);
        let back = stamped.without_appended();
        assert!(back.same_graph(&a));
        assert_eq!(back.graph(), graph(12, 3));
        assert!(back.diagnostics.is_empty());
    }
}
