//! A published workload graph with its wire encodings, made once on first use and then
//! shared by every `Resolve` answer and `Watch` subscriber that sends this version.

use crate::proto::v1 as pb;
use crate::resolve;
use bytes::Bytes;
use prost::Message;
use std::sync::OnceLock;

/// One version of a workload graph, as the index publishes it.
#[derive(Debug)]
pub struct Published {
    /// The graph.
    pub graph: std::sync::Arc<pb::Workload>,
    full: OnceLock<Bytes>,
    summary: OnceLock<Bytes>,
}

impl Published {
    /// Wraps a freshly resolved graph.
    pub fn new(graph: pb::Workload) -> Published {
        Published {
            graph: std::sync::Arc::new(graph),
            full: OnceLock::new(),
            summary: OnceLock::new(),
        }
    }

    /// The protobuf encoding of the graph in `view` (`pb::View` as sent on the wire; anything
    /// but SUMMARY is the full view), encoded once per view and shared after that.
    pub fn encoded(&self, view: i32) -> Bytes {
        if view == pb::View::Summary as i32 {
            self.summary
                .get_or_init(|| {
                    let mut w = (*self.graph).clone();
                    resolve::summarize(&mut w);
                    Bytes::from(w.encode_to_vec())
                })
                .clone()
        } else {
            self.full
                .get_or_init(|| Bytes::from(self.graph.encode_to_vec()))
                .clone()
        }
    }
}

impl std::ops::Deref for Published {
    type Target = pb::Workload;

    fn deref(&self) -> &pb::Workload {
        &self.graph
    }
}
