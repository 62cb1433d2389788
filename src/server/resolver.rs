//! `WorkloadResolver`: Resolve, List, Watch, Totals.

use super::Shared;
use super::paging;
use super::validate;
use super::watch::FrameStream;
use super::wire::{Frame, ResolveFrame};
use crate::excerpt::echo;
use crate::expr::Limits;
use crate::model::{Object, Pod};
use crate::proto::v1 as pb;
use crate::resolve;
use bytes::Bytes;
use prost::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// Default and largest `List` page.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// The `WorkloadResolver` service.
pub struct ResolverService {
    pub(super) shared: Shared,
}

impl ResolverService {
    /// A service over `shared`.
    pub fn new(shared: Shared) -> Self {
        ResolverService { shared }
    }

    pub(super) fn ready(&self) -> Result<(), Status> {
        if self.shared.store.synced() {
            Ok(())
        } else {
            Err(Status::unavailable(
                "kartograf is still loading its first full view of the cluster; retry shortly",
            ))
        }
    }
}

/// The graph as the requested view wants it.
fn view(graph: &Arc<pb::Workload>, view: i32) -> pb::Workload {
    let mut w = (**graph).clone();
    if view == pb::View::Summary as i32 {
        resolve::summarize(&mut w);
    }
    w
}

/// The object and pods of an inline workload; `prefix` names the field in errors.
pub(super) fn parse_inline(
    inline: &pb::InlineWorkload,
    prefix: &str,
) -> Result<(Object, Vec<Pod>), Status> {
    let what = format!("{prefix}object_json");
    if inline.object_json.trim().is_empty() {
        return Err(Status::invalid_argument(format!(
            "{what} is empty; send the object as JSON"
        )));
    }
    let object = parse_json(&inline.object_json, &what)?;
    let root = Object::from_json(&object, Limits::default())
        .map_err(|e| Status::invalid_argument(format!("{what}: {e}")))?;
    validate::inline_object(&what, &root.meta)?;
    let mut pods = Vec::new();
    for (i, text) in inline.pods_json.iter().enumerate() {
        let what = format!("{prefix}pods_json[{i}]");
        let v = parse_json(text, &what)?;
        let pod = Pod::from_json(&v, Limits::default())
            .map_err(|e| Status::invalid_argument(format!("{what}: {e}")))?;
        validate::inline_pod(&what, &pod.meta, &root.meta)?;
        pods.push(pod);
    }
    Ok((root, pods))
}

/// Resolves a caller-supplied workload (every supplied pod counts as its own).
pub(super) fn resolve_inline(
    definition: &crate::definition::Definition,
    generation: u64,
    fallback_from: Option<&str>,
    root: &Object,
    pods: &[Pod],
) -> pb::Workload {
    let refs: Vec<&Pod> = pods.iter().collect();
    let input = resolve::Input {
        definition,
        generation,
        root,
        pods: &refs,
        fallback_from,
        deadline: Some(Instant::now() + Duration::from_secs(2)),
        prepared: None,
    };
    resolve::resolve(&input).workload
}

fn parse_json(text: &str, what: &str) -> Result<serde_json::Value, Status> {
    crate::manifest::from_json_strict(text)
        .map_err(|e| Status::invalid_argument(format!("{what} is not valid JSON: {e}")))
}

impl ResolverService {
    /// Answers `Resolve`; a cached workload is sent as its shared encoding.
    pub(super) async fn resolve_frame(
        &self,
        req: pb::ResolveRequest,
    ) -> Result<ResolveFrame, Status> {
        self.resolve_checked(req).await.map_err(validate::bounded)
    }

    async fn resolve_checked(&self, req: pb::ResolveRequest) -> Result<ResolveFrame, Status> {
        let store = &self.shared.store;
        validate::view("view", req.view)?;
        validate::cluster("cluster", &req.cluster)?;
        let view = req.view;
        match &req.target {
            None => Err(Status::invalid_argument(
                "set one of target.workload, target.pod or target.inline",
            )),
            Some(pb::resolve_request::Target::Workload(r)) => {
                validate::workload_ref(r)?;
                self.ready()?;
                let w = store.workload(r, &req.cluster)?;
                Ok(ResolveFrame {
                    workload: w.encoded(view),
                    pod: None,
                })
            }
            Some(pb::resolve_request::Target::Pod(r)) => {
                validate::pod_ref(r)?;
                self.ready()?;
                store.pod(r.clone(), req.cluster.clone(), view).await
            }
            Some(pb::resolve_request::Target::Inline(inline)) => {
                if let Some(answer) = store.inline(&req).await {
                    return answer;
                }
                let inline = inline.clone();
                let catalog = store.catalog();
                // Parsing and evaluating the caller's data runs on the evaluation threads.
                let encoded = self
                    .shared
                    .evaluations
                    .run(move || -> Result<Bytes, Status> {
                        let (root, pods) = parse_inline(&inline, "inline.")?;
                        let lookup = catalog
                            .lookup(&root.meta.api_version, &root.meta.kind)
                            .ok_or_else(|| {
                                Status::failed_precondition(format!(
                                    "no definition covers {}/{}",
                                    echo(&root.meta.api_version),
                                    echo(&root.meta.kind)
                                ))
                            })?;
                        let mut w = resolve_inline(
                            &lookup.definition,
                            lookup.definition.generation(),
                            lookup.fallback_from.as_deref(),
                            &root,
                            &pods,
                        );
                        if view == pb::View::Summary as i32 {
                            resolve::summarize(&mut w);
                        }
                        Ok(Bytes::from(w.encode_to_vec()))
                    })
                    .await??;
                Ok(ResolveFrame {
                    workload: encoded,
                    pod: None,
                })
            }
        }
    }

    /// Starts a `Watch` subscriber.
    pub(super) fn watch_frames(&self, req: pb::WatchRequest) -> Result<FrameStream, Status> {
        let start = || {
            validate::view("view", req.view)?;
            let (filter, _) = validate::filter(
                req.namespace.clone(),
                req.kinds.clone(),
                req.label_selector.clone(),
                req.cluster.clone(),
            )?;
            self.ready()?;
            super::watch::start(self.shared.clone(), filter, req.since_revision, req.view)
        };
        start().map_err(validate::bounded)
    }

    /// Answers `List`: a page in (namespace, kind, name, uid) order after the token's position.
    fn list_page(&self, req: pb::ListRequest) -> Result<pb::ListResponse, Status> {
        validate::view("view", req.view)?;
        let (filter, canonical) =
            validate::filter(req.namespace, req.kinds, req.label_selector, req.cluster)?;
        let fingerprint = paging::fingerprint(&filter, &canonical);
        let after = if req.page_token.is_empty() {
            None
        } else {
            Some(paging::decode(&req.page_token, fingerprint)?)
        };
        self.ready()?;
        let limit = match req.page_size as usize {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        let board = self.shared.store.board();
        let (mut page, mut more, revision) = board.list_after(
            &filter,
            after.as_ref().map(|p| (&p.at, p.cluster.as_deref())),
            limit,
        );
        let mut next_page_token = String::new();
        while more {
            let (last, cluster) = page
                .last()
                .map(|w| (w.r#ref.clone().unwrap_or_default(), w.cluster.clone()))
                .unwrap_or_default();
            if let Some(token) = paging::encode(fingerprint, &last, &cluster) {
                next_page_token = token;
                break;
            }
            // The last key is too long for a token (a name longer than Kubernetes allows):
            // the page goes on past it.
            let (rest, rest_more, _) =
                board.list_after(&filter, Some((&last, Some(cluster.as_str()))), limit);
            page.extend(rest);
            more = rest_more;
        }
        Ok(pb::ListResponse {
            workloads: page.iter().map(|w| view(w, req.view)).collect(),
            next_page_token,
            revision,
        })
    }

    /// Answers `Totals`.
    fn totals_rows(&self, req: pb::TotalsRequest) -> Result<pb::TotalsResponse, Status> {
        let key = validate::group_by(req.group_by)?;
        validate::namespace("namespace", &req.namespace)?;
        validate::cluster("cluster", &req.cluster)?;
        self.ready()?;
        let (rows, revision) = self
            .shared
            .store
            .board()
            .totals(key, &req.namespace, &req.cluster);
        Ok(pb::TotalsResponse { rows, revision })
    }
}

/// The generated trait. The server routes `Resolve` and `Watch` past it (see
/// [`super::routes`]) to send pre-encoded frames; these methods decode the same frames, so
/// anything calling the trait directly gets identical answers.
#[tonic::async_trait]
impl pb::workload_resolver_server::WorkloadResolver for ResolverService {
    async fn resolve(
        &self,
        request: Request<pb::ResolveRequest>,
    ) -> Result<Response<pb::ResolveResponse>, Status> {
        let frame = self.resolve_frame(request.into_inner()).await?;
        pb::ResolveResponse::decode(frame.to_vec().as_slice())
            .map(Response::new)
            .map_err(|e| Status::internal(format!("re-decoding a response: {e}")))
    }

    async fn gangs(
        &self,
        request: Request<pb::GangsRequest>,
    ) -> Result<Response<pb::GangsResponse>, Status> {
        let req = request.into_inner();
        let format = crate::gangs::Format::from_proto(req.format).ok_or_else(|| {
            Status::invalid_argument(format!(
                "format: {} is not a gang format (GANG_FORMAT_KAI, _WORKLOAD or _COSCHEDULING)",
                req.format
            ))
        })?;
        let mut target = req
            .workload
            .ok_or_else(|| Status::invalid_argument("set workload (a ResolveRequest)"))?;
        target.view = pb::View::Full as i32;
        let frame = self.resolve_frame(target).await?;
        let workload = pb::ResolveResponse::decode(frame.to_vec().as_slice())
            .map_err(|e| Status::internal(format!("re-decoding a response: {e}")))?
            .workload
            .unwrap_or_default();
        let rendered = crate::gangs::render(&workload, format)
            .map_err(|e| validate::bounded(Status::failed_precondition(e.to_string())))?;
        Ok(Response::new(pb::GangsResponse {
            objects_json: rendered.objects.iter().map(|o| o.to_string()).collect(),
            notes: rendered.notes,
        }))
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        self.list_page(request.into_inner())
            .map(Response::new)
            .map_err(validate::bounded)
    }

    type WatchStream = super::watch::WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let frames = self.watch_frames(request.into_inner())?;
        let events = futures::StreamExt::map(frames, |f| f.and_then(|f| f.to_message()));
        Ok(Response::new(Box::pin(events)))
    }

    async fn patch(
        &self,
        request: Request<pb::PatchRequest>,
    ) -> Result<Response<pb::PatchResponse>, Status> {
        self.patch_checked(request.into_inner())
            .await
            .map(Response::new)
            .map_err(validate::bounded)
    }

    async fn totals(
        &self,
        request: Request<pb::TotalsRequest>,
    ) -> Result<Response<pb::TotalsResponse>, Status> {
        self.totals_rows(request.into_inner())
            .map(Response::new)
            .map_err(validate::bounded)
    }
}
