//! Responses built from pre-encoded graphs. `Resolve` answers and `Watch` events carry a
//! graph version's shared encoding ([`crate::board::Published::encoded`]) instead of a cloned
//! and re-encoded graph per call or per subscriber. A frame encodes byte for byte as the
//! generated message would (an embedded message is a length-delimited field either way).

use crate::proto::v1 as pb;
use bytes::{BufMut, Bytes};
use prost::Message;
use std::marker::PhantomData;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder};

/// Something written to the wire as one protobuf message.
pub trait Frame: Send + 'static {
    /// Appends the message's encoding.
    fn encode_to(&self, buf: &mut impl BufMut);

    /// The encoding as a vector (tests and the non-routed trait methods).
    fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode_to(&mut v);
        v
    }
}

/// A `WatchEvent` whose workload is already encoded.
#[derive(Debug, Clone)]
pub struct WatchFrame {
    /// `pb::EventType`.
    pub kind: i32,
    /// The event's revision.
    pub revision: u64,
    /// The encoded `Workload`, if any.
    pub workload: Option<Bytes>,
}

impl WatchFrame {
    /// An event without a workload (SYNCED, RESET).
    pub fn bare(kind: pb::EventType, revision: u64) -> WatchFrame {
        WatchFrame {
            kind: kind as i32,
            revision,
            workload: None,
        }
    }

    /// The message this frame encodes.
    pub fn to_message(&self) -> Result<pb::WatchEvent, Status> {
        pb::WatchEvent::decode(self.to_vec().as_slice())
            .map_err(|e| Status::internal(format!("re-decoding an event: {e}")))
    }
}

impl WatchFrame {
    /// Appends the message's encoding up to the workload's bytes (the whole message when
    /// it has no workload): with the workload after it, the same bytes as
    /// [`Frame::encode_to`].
    pub fn encode_head(&self, buf: &mut impl BufMut) {
        if self.kind != 0 {
            put_key(buf, 1, VARINT);
            // Enums are int32, sign-extended like prost does.
            put_varint(buf, i64::from(self.kind) as u64);
        }
        if self.revision != 0 {
            put_key(buf, 2, VARINT);
            put_varint(buf, self.revision);
        }
        if let Some(w) = &self.workload {
            put_key(buf, 3, LEN);
            put_varint(buf, w.len() as u64);
        }
    }

    /// Length of the message's encoding.
    pub fn encoded_len(&self) -> usize {
        let varint = |v: u64| (64 - (v | 1).leading_zeros() as usize).div_ceil(7);
        let mut n = 0;
        if self.kind != 0 {
            n += 1 + varint(i64::from(self.kind) as u64);
        }
        if self.revision != 0 {
            n += 1 + varint(self.revision);
        }
        if let Some(w) = &self.workload {
            n += 1 + varint(w.len() as u64) + w.len();
        }
        n
    }
}

impl Frame for WatchFrame {
    fn encode_to(&self, buf: &mut impl BufMut) {
        self.encode_head(buf);
        if let Some(w) = &self.workload {
            buf.put_slice(w);
        }
    }
}

/// A `ResolveResponse` whose workload is already encoded.
#[derive(Debug, Clone)]
pub struct ResolveFrame {
    /// The encoded `Workload`.
    pub workload: Bytes,
    /// Where the requested pod sits, for pod targets.
    pub pod: Option<pb::PodPlacement>,
}

impl Frame for ResolveFrame {
    fn encode_to(&self, buf: &mut impl BufMut) {
        put_message(buf, 1, &self.workload);
        if let Some(p) = &self.pod {
            put_message(buf, 2, &p.encode_to_vec());
        }
    }
}

const VARINT: u8 = 0;
const LEN: u8 = 2;

fn put_key(buf: &mut impl BufMut, tag: u8, wire_type: u8) {
    // Every tag here is below 16: the key is one byte.
    buf.put_u8((tag << 3) | wire_type);
}

fn put_varint(buf: &mut impl BufMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_message(buf: &mut impl BufMut, tag: u8, encoded: &[u8]) {
    put_key(buf, tag, LEN);
    put_varint(buf, encoded.len() as u64);
    buf.put_slice(encoded);
}

/// A gRPC codec that sends [`Frame`]s and decodes requests with prost.
pub struct FrameCodec<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for FrameCodec<T, U> {
    fn default() -> Self {
        FrameCodec(PhantomData)
    }
}

/// The encoder of [`FrameCodec`].
pub struct FrameEncoder<T>(PhantomData<fn() -> T>);

impl<T: Frame> Encoder for FrameEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode_to(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

impl<T: Frame, U: Message + Default + Send + 'static> Codec for FrameCodec<T, U> {
    type Encode = T;
    type Decode = U;
    type Encoder = FrameEncoder<T>;
    type Decoder = tonic_prost::ProstDecoder<U>;

    fn encoder(&mut self) -> FrameEncoder<T> {
        FrameEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> pb::Workload {
        pb::Workload {
            r#ref: Some(pb::ObjectRef {
                kind: "Job".into(),
                name: "j".repeat(300),
                ..Default::default()
            }),
            revision: 1 << 40,
            ..Default::default()
        }
    }

    #[test]
    fn frames_encode_exactly_as_the_generated_messages() {
        let w = workload();
        let bytes = Bytes::from(w.encode_to_vec());
        for (kind, revision, workload) in [
            (pb::EventType::Modified, 300u64, Some(w.clone())),
            (pb::EventType::Synced, 0, None),
            (pb::EventType::Unspecified, 1, Some(pb::Workload::default())),
        ] {
            let frame = WatchFrame {
                kind: kind as i32,
                revision,
                workload: workload.as_ref().map(|w| Bytes::from(w.encode_to_vec())),
            };
            let message = pb::WatchEvent {
                r#type: kind as i32,
                revision,
                workload,
            };
            assert_eq!(frame.to_vec(), message.encode_to_vec());
            assert_eq!(frame.encoded_len(), message.encoded_len());
            let mut split = Vec::new();
            frame.encode_head(&mut split);
            split.extend_from_slice(frame.workload.as_deref().unwrap_or_default());
            assert_eq!(split, frame.to_vec());
        }
        let pod = pb::PodPlacement {
            component: "c".into(),
            ..Default::default()
        };
        let frame = ResolveFrame {
            workload: bytes,
            pod: Some(pod.clone()),
        };
        let message = pb::ResolveResponse {
            workload: Some(w),
            pod: Some(pod),
        };
        assert_eq!(frame.to_vec(), message.encode_to_vec());
    }
}
