//! The response body of `Watch`: gRPC messages written straight from a subscriber's frames.
//! Small frames are copied into a batch (sent when it reaches [`BATCH`] bytes or the
//! subscriber has nothing more for now); a workload of [`SHARED`] bytes or more is sent as
//! its own chunk, the graph version's shared encoding itself. So a subscriber whose client
//! does not read holds at most one batch and references to shared graphs, not copies.
//!
//! The transport polls the body again only once the client's flow-control window took the
//! last chunk: the time between handing a chunk out and the next poll is the subscriber's
//! stall ([`Stall`], watched by the connection). A subscriber polled after a stall of the
//! Watch stall limit or more ends with RESOURCE_EXHAUSTED (reconnect with
//! `since_revision`); one never polled again is cut with its connection (see
//! [`super::conn`]).

use super::conn::Stall;
use super::watch::FrameStream;
use bytes::{BufMut, Bytes, BytesMut};
use hyper::body::{Body, Frame};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::Status;
use tonic::codegen::http::HeaderMap;

/// A batch is sent once it holds this many bytes.
pub const BATCH: usize = 16 * 1024;
/// Workloads at least this large are sent as their shared encoding, never copied.
pub const SHARED: usize = 1024;

/// See the module documentation.
pub struct WatchBody {
    frames: FrameStream,
    batch: BytesMut,
    /// A shared workload encoding to send after the batch.
    next: Option<Bytes>,
    /// Trailers to send once the batch is out.
    end: Option<HeaderMap>,
    done: bool,
    /// The stall clock and its limit, when the connection watches it.
    stall: Option<(Arc<Stall>, Duration)>,
}

fn trailers(status: &Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        // Only the message can fail to encode: send the code alone.
        let _ = Status::new(status.code(), "").add_header(&mut map);
    }
    map
}

impl WatchBody {
    /// The body of a subscriber's `frames`; with `stall`, a stall of its duration or more
    /// ends it.
    pub fn new(frames: FrameStream, stall: Option<(Arc<Stall>, Duration)>) -> WatchBody {
        WatchBody {
            frames,
            batch: BytesMut::new(),
            next: None,
            end: None,
            done: false,
            stall,
        }
    }

    /// Hands out `data`, starting the stall clock.
    fn data(&mut self, data: Bytes) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some((stall, _)) = &self.stall {
            stall.start();
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    /// Ends with `status` after what is batched.
    fn finish(&mut self, status: &Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.batch.is_empty() {
            self.done = true;
            return Poll::Ready(Some(Ok(Frame::trailers(trailers(status)))));
        }
        self.end = Some(trailers(status));
        let batch = self.batch.split().freeze();
        self.data(batch)
    }
}

impl Body for WatchBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if let Some((stall, limit)) = &this.stall
            && let Some(waited) = stall.end()
            && waited >= *limit
        {
            let limit = limit.as_secs_f64();
            this.done = true;
            return Poll::Ready(Some(Ok(Frame::trailers(trailers(
                &Status::resource_exhausted(format!(
                    "this Watch subscriber left its events untaken for over {limit}s; \
                     reconnect with since_revision set to the last revision received"
                )),
            )))));
        }
        if let Some(shared) = this.next.take() {
            return this.data(shared);
        }
        if let Some(end) = this.end.take() {
            this.done = true;
            return Poll::Ready(Some(Ok(Frame::trailers(end))));
        }
        loop {
            match this.frames.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(len) = u32::try_from(frame.encoded_len()) else {
                        return this.finish(&Status::internal("an event over 4 GiB"));
                    };
                    this.batch.put_u8(0);
                    this.batch.put_u32(len);
                    frame.encode_head(&mut this.batch);
                    match frame.workload {
                        Some(w) if w.len() >= SHARED => {
                            this.next = Some(w);
                            let batch = this.batch.split().freeze();
                            return this.data(batch);
                        }
                        Some(w) => this.batch.put_slice(&w),
                        None => {}
                    }
                    if this.batch.len() >= BATCH {
                        let batch = this.batch.split().freeze();
                        return this.data(batch);
                    }
                }
                Poll::Ready(Some(Err(status))) => return this.finish(&status),
                Poll::Ready(None) => return this.finish(&Status::ok("")),
                Poll::Pending if this.batch.is_empty() => return Poll::Pending,
                Poll::Pending => {
                    let batch = this.batch.split().freeze();
                    return this.data(batch);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1 as pb;
    use crate::server::wire::{Frame as _, WatchFrame};
    use http_body_util::BodyExt;
    use prost::Message;

    fn frame(kind: pb::EventType, revision: u64, size: usize) -> WatchFrame {
        WatchFrame {
            kind: kind as i32,
            revision,
            workload: (size > 0).then(|| {
                Bytes::from(
                    pb::Workload {
                        cluster: "c".repeat(size),
                        ..Default::default()
                    }
                    .encode_to_vec(),
                )
            }),
        }
    }

    /// Splits a gRPC body into its messages.
    fn messages(mut data: &[u8]) -> Vec<pb::WatchEvent> {
        let mut out = Vec::new();
        while !data.is_empty() {
            assert_eq!(data[0], 0, "uncompressed");
            let len = u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize;
            out.push(pb::WatchEvent::decode(&data[5..5 + len]).unwrap());
            data = &data[5 + len..];
        }
        out
    }

    #[tokio::test]
    async fn the_body_is_the_stream_of_messages_then_the_status() {
        let frames = vec![
            frame(pb::EventType::Added, 5, 10),
            frame(pb::EventType::Added, 6, 5000),
            frame(pb::EventType::Modified, 7, 40_000),
            frame(pb::EventType::Synced, 7, 0),
        ];
        let expected: Vec<pb::WatchEvent> = frames
            .iter()
            .map(|f| pb::WatchEvent::decode(f.to_vec().as_slice()).unwrap())
            .collect();
        let shared = frames[2].workload.clone().unwrap();
        let stream: FrameStream = Box::pin(futures::stream::iter(frames.into_iter().map(Ok)));
        let mut body = WatchBody::new(stream, None);
        let mut data = Vec::new();
        let mut chunks = Vec::new();
        let mut trailers = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.unwrap();
            if frame.is_data() {
                let chunk = frame.into_data().unwrap();
                data.extend_from_slice(&chunk);
                chunks.push(chunk);
            } else {
                trailers = frame.into_trailers().ok();
            }
        }
        assert_eq!(messages(&data), expected);
        assert!(
            chunks.iter().any(|c| c.as_ptr() == shared.as_ptr()),
            "a large workload is sent as its shared encoding"
        );
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        assert!(body.is_end_stream());
    }

    #[tokio::test]
    async fn an_error_ends_the_body_with_its_status_after_what_was_batched() {
        let items = vec![
            Ok(frame(pb::EventType::Added, 5, 10)),
            Err(Status::unavailable("shutting down")),
        ];
        let stream: FrameStream = Box::pin(futures::stream::iter(items));
        let collected = WatchBody::new(stream, None).collect().await.unwrap();
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(trailers.get("grpc-status").unwrap(), "14");
        assert_eq!(messages(&collected.to_bytes()).len(), 1);
    }

    #[tokio::test]
    async fn a_subscriber_polled_after_a_long_stall_ends_with_resource_exhausted() {
        let stream: FrameStream = Box::pin(futures::stream::iter(
            (1..100u64).map(|r| Ok(frame(pb::EventType::Modified, r, 2000))),
        ));
        let stall = Arc::new(Stall::default());
        let mut body = WatchBody::new(stream, Some((stall.clone(), Duration::from_millis(50))));
        let first = body.frame().await.unwrap().unwrap();
        assert!(first.is_data());
        // Taken at once: no stall, the stream goes on.
        assert!(body.frame().await.unwrap().unwrap().is_data());
        tokio::time::sleep(Duration::from_millis(80)).await;
        let last = body.frame().await.unwrap().unwrap();
        let trailers = last.into_trailers().expect("the status");
        assert_eq!(trailers.get("grpc-status").unwrap(), "8");
        let message = trailers.get("grpc-message").unwrap().to_str().unwrap();
        assert!(message.contains("since_revision"), "{message}");
        assert!(body.frame().await.is_none());
    }
}
