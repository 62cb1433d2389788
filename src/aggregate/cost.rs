//! What a received graph costs in memory, beyond its encoding: decoded, every element of a
//! repeated message field is a struct of its own (an empty `Diagnostic` is 2 bytes on the
//! wire and 144 in memory). [`decoded`] estimates the full graph's decoded size from the
//! encoding, before anything is decoded; [`held`] is what the aggregator keeps of a graph
//! (its encoding and its decoded summary).

use crate::board::Published;
use crate::proto::v1 as pb;
use std::mem::size_of;

/// A decoded graph may be this many times larger than its bound (real graphs decode to a
/// few times their encoding; element floods to up to ~70 times).
pub(super) const DECODED_PER_ENCODED: usize = 16;

/// Nesting deeper than this does not decode (prost's own limit).
const MAX_DEPTH: u32 = 100;

/// A message type of the graph, for the walk.
#[derive(Clone, Copy)]
enum Msg {
    Workload,
    Status,
    Totals,
    Resources,
    Gang,
    GangGroup,
    Component,
    Instance,
    PodInfo,
    /// A message without nested repeated fields (its struct is inline in its parent).
    Flat,
}

/// What a length-delimited field of a message holds.
enum Field {
    /// One element of a repeated message field (a struct of this size), of this type.
    Element(usize, Msg),
    /// A singular message field (inline in its parent).
    Inline(Msg),
    /// One element of a repeated string field or map (its struct size).
    Item(usize),
    /// A string, bytes or packed scalars.
    Plain,
}

fn field(msg: Msg, number: u64) -> Field {
    use Field::{Element, Inline, Item, Plain};
    let entry = size_of::<(String, String)>() + 16;
    match (msg, number) {
        (Msg::Workload, 5) => Inline(Msg::Status),
        (Msg::Workload, 7) => Inline(Msg::Totals),
        (Msg::Workload, 8) => Inline(Msg::Gang),
        (Msg::Workload, 9) => Element(size_of::<pb::Component>(), Msg::Component),
        (Msg::Workload, 10) => Element(size_of::<pb::PodInfo>(), Msg::PodInfo),
        (Msg::Workload, 11) => Element(size_of::<pb::Diagnostic>(), Msg::Flat),
        (Msg::Workload, 20) | (Msg::Resources, 4) => Item(entry),
        (Msg::Status, 4) => Element(size_of::<pb::Condition>(), Msg::Flat),
        (Msg::Totals, 1 | 2) | (Msg::Instance, 5) | (Msg::PodInfo, 6) => Inline(Msg::Resources),
        (Msg::Gang, 1) | (Msg::GangGroup, 4) => Element(size_of::<pb::GangGroup>(), Msg::GangGroup),
        (Msg::GangGroup, 8) => Item(size_of::<String>()),
        (Msg::Component, 3) => Element(size_of::<pb::Instance>(), Msg::Instance),
        (Msg::Instance, 6) => Inline(Msg::Totals),
        (Msg::Instance, 7) => Element(size_of::<pb::PodInfo>(), Msg::PodInfo),
        (Msg::Instance, 8) => Element(size_of::<pb::Component>(), Msg::Component),
        _ => Plain,
    }
}

fn walk(mut buf: &[u8], msg: Msg, depth: u32, total: &mut usize) -> Option<()> {
    use prost::encoding::decode_varint;
    if depth > MAX_DEPTH {
        return None;
    }
    while !buf.is_empty() {
        let key = decode_varint(&mut buf).ok()?;
        let skip = match key & 7 {
            0 => {
                decode_varint(&mut buf).ok()?;
                0
            }
            1 => 8,
            5 => 4,
            2 => {
                let len = usize::try_from(decode_varint(&mut buf).ok()?).ok()?;
                let inner = buf.get(..len)?;
                match field(msg, key >> 3) {
                    Field::Element(size, of) => {
                        *total = total.saturating_add(size);
                        walk(inner, of, depth + 1, total)?;
                    }
                    Field::Inline(of) => walk(inner, of, depth + 1, total)?,
                    Field::Item(size) => *total = total.saturating_add(size),
                    Field::Plain => {}
                }
                len
            }
            _ => return None,
        };
        buf = buf.get(skip..)?;
    }
    Some(())
}

/// About how many bytes the encoded `Workload` takes once decoded (its bytes, for strings
/// and scalars, plus the struct of every element of a repeated field); `None` when it is
/// malformed (it would not decode).
pub(super) fn decoded(bytes: &[u8]) -> Option<usize> {
    let mut total = size_of::<pb::Workload>().saturating_add(bytes.len());
    walk(bytes, Msg::Workload, 0, &mut total)?;
    Some(total)
}

/// About how many heap bytes a decoded summary holds (what [`crate::resolve::summarize`]
/// keeps: diagnostics, labels, conditions, gang groups without their pods).
fn summary(w: &pb::Workload) -> usize {
    fn resources(r: Option<&pb::Resources>) -> usize {
        r.map_or(0, |r| {
            r.raw
                .iter()
                .map(|(k, v)| size_of::<(String, String)>() + 16 + k.len() + v.len())
                .sum()
        })
    }
    fn groups(all: &[pb::GangGroup]) -> usize {
        all.iter()
            .map(|g| {
                size_of::<pb::GangGroup>()
                    + g.name.len()
                    + g.component.len()
                    + g.instance.len()
                    + g.replica.len()
                    + g.pods.capacity() * size_of::<String>()
                    + groups(&g.subgroups)
            })
            .sum()
    }
    let refs = w.r#ref.as_ref().map_or(0, |r| {
        r.api_version.len() + r.kind.len() + r.namespace.len() + r.name.len() + r.uid.len()
    });
    let definition = w
        .definition
        .as_ref()
        .map_or(0, |d| d.name.len() + d.origin.len());
    let status = w.status.as_ref().map_or(0, |s| {
        s.raw_phase.len()
            + s.matched.capacity() * size_of::<i32>()
            + s.conditions
                .iter()
                .map(|c| {
                    size_of::<pb::Condition>()
                        + c.r#type.len()
                        + c.status.len()
                        + c.reason.len()
                        + c.message.len()
                })
                .sum::<usize>()
    });
    let totals = w.totals.as_ref().map_or(0, |t| {
        resources(t.desired.as_ref()) + resources(t.current.as_ref())
    });
    let diagnostics: usize = w
        .diagnostics
        .iter()
        .map(|d| {
            size_of::<pb::Diagnostic>()
                + d.severity.len()
                + d.code.len()
                + d.message.len()
                + d.component.len()
                + d.expression.len()
                + d.path.len()
        })
        .sum();
    let labels: usize = w
        .labels
        .iter()
        .map(|(k, v)| size_of::<(String, String)>() + 16 + k.len() + v.len())
        .sum();
    let gang = w.gang.as_ref().map_or(0, |g| groups(&g.groups));
    size_of::<pb::Workload>()
        + refs
        + w.cluster.len()
        + w.created.len()
        + definition
        + status
        + totals
        + diagnostics
        + labels
        + gang
        + w.components.capacity() * size_of::<pb::Component>()
        + w.unattributed_pods.capacity() * size_of::<pb::PodInfo>()
}

/// What the aggregator holds for one graph: its encoding and its decoded summary.
pub(super) fn held(graph: &Published) -> usize {
    graph.encoded_len().saturating_add(summary(&graph.summary))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn element_floods_are_seen_before_decoding() {
        let flood = pb::Workload {
            diagnostics: vec![pb::Diagnostic::default(); 10_000],
            components: vec![
                pb::Component {
                    instances: vec![pb::Instance::default(); 1000],
                    ..Default::default()
                };
                10
            ],
            ..Default::default()
        };
        let bytes = flood.encode_to_vec();
        let estimate = decoded(&bytes).unwrap();
        let structs = 10_000 * size_of::<pb::Diagnostic>()
            + 10 * size_of::<pb::Component>()
            + 10_000 * size_of::<pb::Instance>();
        assert!(estimate >= structs, "{estimate} < {structs}");
        assert!(estimate > 40 * bytes.len(), "a flood is ~70x its encoding");
        // A realistic graph stays within a few times its encoding.
        let pod = |i: usize| pb::PodInfo {
            name: format!("train-workers-0-{i}-abcde"),
            uid: format!("3f6c2a1e-8b7d-4c55-9e0a-{i:012}"),
            node: format!("gpu-node-{i}"),
            phase: "Running".into(),
            ready: true,
            ..Default::default()
        };
        let real = pb::Workload {
            components: vec![pb::Component {
                name: "workers".into(),
                instances: (0..100)
                    .map(|i| pb::Instance {
                        id: format!("{i}"),
                        pod_list: (0..8).map(|p| pod(i * 8 + p)).collect(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let bytes = real.encode_to_vec();
        let estimate = decoded(&bytes).unwrap();
        assert!(
            estimate < 4 * bytes.len(),
            "{estimate} for {} bytes",
            bytes.len()
        );
        assert!(decoded(&[0xff]).is_none(), "malformed");
    }

    #[test]
    fn a_summary_counts_what_it_keeps() {
        let flood = pb::Workload {
            diagnostics: vec![pb::Diagnostic::default(); 10_000],
            ..Default::default()
        };
        let graph = Published::from_wire(flood.encode_to_vec().into(), "c").unwrap();
        assert!(held(&graph) >= 10_000 * size_of::<pb::Diagnostic>());
        // The tree is not kept, not even as capacity.
        let tree = pb::Workload {
            cluster: "c".into(),
            unattributed_pods: vec![pb::PodInfo::default(); 10_000],
            ..Default::default()
        };
        let graph = Published::from_wire(tree.encode_to_vec().into(), "c").unwrap();
        assert!(
            held(&graph) < graph.encoded_len() + 4096,
            "{}",
            held(&graph)
        );
    }
}
