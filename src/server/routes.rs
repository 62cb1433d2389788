//! The `WorkloadResolver` HTTP routes: `Resolve` and `Watch` are served with
//! [`FrameCodec`] (shared pre-encoded graphs); every other method goes to the generated
//! server.

use super::conn::conn_of;
use super::resolver::ResolverService;
use super::watch::FrameStream;
use super::watch_body::WatchBody;
use super::wire::{FrameCodec, ResolveFrame, WatchFrame};
use crate::proto::v1 as pb;
use parking_lot::Mutex;
use pb::workload_resolver_server::{SERVICE_NAME, WorkloadResolverServer};
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::codegen::{Body, BoxFuture, StdError, http};
use tonic::server::{Grpc, NamedService};
use tonic::{Request, Response, Status};

const RESOLVE: &str = "/kartograf.v1.WorkloadResolver/Resolve";
const WATCH: &str = "/kartograf.v1.WorkloadResolver/Watch";

/// The `WorkloadResolver` service as added to the tonic router.
#[derive(Clone)]
pub struct ResolverRoutes {
    service: Arc<ResolverService>,
    generated: WorkloadResolverServer<ResolverService>,
    max_message_bytes: usize,
}

impl ResolverRoutes {
    /// Routes over `service`, accepting requests up to `max_message_bytes`.
    pub fn new(service: ResolverService, max_message_bytes: usize) -> ResolverRoutes {
        let service = Arc::new(service);
        ResolverRoutes {
            generated: WorkloadResolverServer::from_arc(service.clone())
                .max_decoding_message_size(max_message_bytes),
            service,
            max_message_bytes,
        }
    }
}

impl NamedService for ResolverRoutes {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> tower::Service<http::Request<B>> for ResolverRoutes
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let service = self.service.clone();
        let limit = Some(self.max_message_bytes);
        match req.uri().path() {
            RESOLVE => Box::pin(async move {
                let method = tower::service_fn(move |r: Request<pb::ResolveRequest>| {
                    let service = service.clone();
                    async move {
                        let frame: ResolveFrame = service.resolve_frame(r.into_inner()).await?;
                        Ok::<_, Status>(Response::new(frame))
                    }
                });
                let mut grpc = Grpc::new(FrameCodec::<ResolveFrame, pb::ResolveRequest>::default())
                    .apply_max_message_size_config(limit, None);
                Ok(grpc.unary(method, req).await)
            }),
            WATCH => Box::pin(async move {
                // tonic decodes the request and writes the response head (or the error);
                // the events go out through a `WatchBody`, which shares graph encodings
                // instead of copying them into tonic's buffers.
                let stall = conn_of(&req).map(|c| (c.watch(), c.watch_stall()));
                let started: Arc<Mutex<Option<FrameStream>>> = Arc::default();
                let slot = started.clone();
                let method = tower::service_fn(move |r: Request<pb::WatchRequest>| {
                    let service = service.clone();
                    let slot = slot.clone();
                    async move {
                        let frames = service.watch_frames(r.into_inner())?;
                        *slot.lock() = Some(frames);
                        Ok(Response::new(futures::stream::empty::<
                            Result<WatchFrame, Status>,
                        >()))
                    }
                });
                let mut grpc = Grpc::new(FrameCodec::<WatchFrame, pb::WatchRequest>::default())
                    .apply_max_message_size_config(limit, None);
                let response = grpc.server_streaming(method, req).await;
                let frames = started.lock().take();
                Ok(match frames {
                    Some(frames) => {
                        response.map(|_| tonic::body::Body::new(WatchBody::new(frames, stall)))
                    }
                    None => response,
                })
            }),
            _ => tower::Service::call(&mut self.generated, req),
        }
    }
}
