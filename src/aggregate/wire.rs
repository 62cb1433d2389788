//! Calls to an upstream kartograf that keep each graph as the bytes the upstream encoded:
//! the response messages below declare the `Workload` field as `bytes` (an embedded message
//! and a bytes field are both length-delimited on the wire), so the graph is received
//! without being decoded into a struct here, and can be relayed as is.

use crate::proto::v1 as pb;
use bytes::Bytes;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;
use tonic::{Request, Status, Streaming};

/// What a `WatchEvent` or `ResolveResponse` adds to its graph at most (field keys, lengths,
/// type, revision and a pod placement's names).
const ENVELOPE_BYTES: usize = 4096;

/// The largest message accepted from an upstream whose graphs may have `graph_bytes`.
pub fn event_limit(graph_bytes: usize) -> usize {
    graph_bytes.saturating_add(ENVELOPE_BYTES)
}

const WATCH: &str = "/kartograf.v1.WorkloadResolver/Watch";
const RESOLVE: &str = "/kartograf.v1.WorkloadResolver/Resolve";

/// A `WatchEvent` with its workload still encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawWatchEvent {
    /// `pb::EventType`.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    /// The upstream's revision of the event.
    #[prost(uint64, tag = "2")]
    pub revision: u64,
    /// The encoded `Workload` (none for SYNCED and RESET).
    #[prost(bytes = "bytes", optional, tag = "3")]
    pub workload: Option<Bytes>,
}

/// A `ResolveResponse` with its workload still encoded.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawResolveResponse {
    /// The encoded `Workload`.
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub workload: Option<Bytes>,
    /// Where the requested pod sits.
    #[prost(message, optional, tag = "2")]
    pub pod: Option<pb::PodPlacement>,
}

/// Only the reference of an encoded `Workload` (every other field is skipped unread).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WorkloadRef {
    /// `Workload.ref`.
    #[prost(message, optional, tag = "1")]
    pub r#ref: Option<pb::ObjectRef>,
    /// `Workload.cluster`.
    #[prost(string, tag = "2")]
    pub cluster: String,
}

fn request<T>(message: T, token: Option<&MetadataValue<Ascii>>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", token.clone());
    }
    request
}

/// A client that refuses (before buffering it) any message over `limit` bytes.
async fn ready(channel: Channel, limit: usize) -> Result<tonic::client::Grpc<Channel>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(limit);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("not reachable: {e}")))?;
    Ok(grpc)
}

/// Opens a `Watch` on an upstream; events over `limit` bytes end the stream with
/// OUT_OF_RANGE.
pub async fn watch(
    channel: Channel,
    token: Option<&MetadataValue<Ascii>>,
    message: pb::WatchRequest,
    limit: usize,
) -> Result<Streaming<RawWatchEvent>, Status> {
    let mut grpc = ready(channel, limit).await?;
    let codec = tonic_prost::ProstCodec::<pb::WatchRequest, RawWatchEvent>::default();
    let response = grpc
        .server_streaming(
            request(message, token),
            PathAndQuery::from_static(WATCH),
            codec,
        )
        .await?;
    Ok(response.into_inner())
}

/// Calls `Resolve` on an upstream (an answer over `limit` bytes is OUT_OF_RANGE).
pub async fn resolve(
    channel: Channel,
    token: Option<&MetadataValue<Ascii>>,
    message: pb::ResolveRequest,
    limit: usize,
) -> Result<RawResolveResponse, Status> {
    let mut grpc = ready(channel, limit).await?;
    let codec = tonic_prost::ProstCodec::<pb::ResolveRequest, RawResolveResponse>::default();
    let response = grpc
        .unary(
            request(message, token),
            PathAndQuery::from_static(RESOLVE),
            codec,
        )
        .await?;
    Ok(response.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn raw_messages_read_the_generated_encodings() {
        let workload = pb::Workload {
            r#ref: Some(pb::ObjectRef {
                kind: "Job".into(),
                uid: "u1".into(),
                ..Default::default()
            }),
            cluster: "eu".into(),
            revision: 7,
            ..Default::default()
        };
        let event = pb::WatchEvent {
            r#type: pb::EventType::Added as i32,
            revision: 9,
            workload: Some(workload.clone()),
        };
        let raw = RawWatchEvent::decode(event.encode_to_vec().as_slice()).unwrap();
        assert_eq!(raw.revision, 9);
        let bytes = raw.workload.unwrap();
        assert_eq!(bytes, Bytes::from(workload.encode_to_vec()));
        let only = WorkloadRef::decode(bytes).unwrap();
        assert_eq!(only.r#ref.unwrap().uid, "u1");
        assert_eq!(only.cluster, "eu");
        let synced = pb::WatchEvent {
            r#type: pb::EventType::Synced as i32,
            revision: 10,
            workload: None,
        };
        let raw = RawWatchEvent::decode(synced.encode_to_vec().as_slice()).unwrap();
        assert!(raw.workload.is_none());
        let answer = pb::ResolveResponse {
            workload: Some(workload.clone()),
            pod: Some(pb::PodPlacement {
                component: "c".into(),
                ..Default::default()
            }),
        };
        let raw = RawResolveResponse::decode(answer.encode_to_vec().as_slice()).unwrap();
        assert_eq!(raw.workload.unwrap(), workload.encode_to_vec());
        assert_eq!(raw.pod.unwrap().component, "c");
    }
}
