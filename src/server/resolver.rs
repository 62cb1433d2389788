//! `WorkloadResolver`: Resolve, List, Watch, Totals.

use super::Shared;
use super::watch::FrameStream;
use super::wire::{Frame, ResolveFrame};
use crate::expr::Limits;
use crate::index::{Filter, TotalsKey};
use crate::object::{Object, Pod};
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
    shared: Shared,
}

impl ResolverService {
    /// A service over `shared`.
    pub fn new(shared: Shared) -> Self {
        ResolverService { shared }
    }

    fn ready(&self) -> Result<(), Status> {
        if self.shared.index.synced() {
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
    let object = parse_json(&inline.object_json, &format!("{prefix}object_json"))?;
    let root = Object::from_json(&object, Limits::default())
        .map_err(|e| Status::invalid_argument(format!("{prefix}object_json: {e}")))?;
    let mut pods = Vec::new();
    for (i, text) in inline.pods_json.iter().enumerate() {
        let v = parse_json(text, &format!("{prefix}pods_json[{i}]"))?;
        let pod = Pod::from_json(&v, Limits::default())
            .map_err(|e| Status::invalid_argument(format!("{prefix}pods_json[{i}]: {e}")))?;
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

/// A List/Watch filter, with its label selector checked.
fn checked_filter(
    namespace: String,
    kinds: Vec<String>,
    label_selector: String,
) -> Result<Filter, Status> {
    let filter = Filter {
        namespace,
        kinds,
        label_selector,
    };
    filter.validate().map_err(Status::invalid_argument)?;
    Ok(filter)
}

fn parse_json(text: &str, what: &str) -> Result<serde_json::Value, Status> {
    serde_json::from_str(text)
        .map_err(|e| Status::invalid_argument(format!("{what} is not valid JSON: {e}")))
}

impl ResolverService {
    /// Answers `Resolve`; a cached workload is sent as its shared encoding.
    pub(super) async fn resolve_frame(
        &self,
        req: pb::ResolveRequest,
    ) -> Result<ResolveFrame, Status> {
        let index = &self.shared.index;
        match req.target {
            None => Err(Status::invalid_argument(
                "set one of target.workload, target.pod or target.inline",
            )),
            Some(pb::resolve_request::Target::Workload(r)) => {
                self.ready()?;
                if r.name.is_empty() && r.uid.is_empty() {
                    return Err(Status::invalid_argument(
                        "workload needs a uid, or a name (with namespace and kind)",
                    ));
                }
                if let Some(w) = index.published(&r) {
                    return Ok(ResolveFrame {
                        workload: w.encoded(req.view),
                        pod: None,
                    });
                }
                let catalog = index.catalog();
                if !r.kind.is_empty() {
                    let known = catalog
                        .definitions()
                        .any(|d| d.root_kind.kind.eq_ignore_ascii_case(&r.kind));
                    if !known {
                        return Err(Status::failed_precondition(format!(
                            "no definition covers kind `{}`; see ListDefinitions (add one with --definitions or a Karta object)",
                            r.kind
                        )));
                    }
                }
                let what = if r.uid.is_empty() {
                    format!("{}/{}/{}", r.kind, r.namespace, r.name)
                } else {
                    format!("uid {}", r.uid)
                };
                Err(Status::not_found(format!(
                    "no workload {what} is known (is it part of another workload, or not created yet?)"
                )))
            }
            Some(pb::resolve_request::Target::Pod(r)) => {
                self.ready()?;
                match index.published_of_pod(&r) {
                    Ok((w, placement)) => Ok(ResolveFrame {
                        workload: w.encoded(req.view),
                        pod: Some(placement),
                    }),
                    Err(true) => Err(Status::not_found(format!(
                        "pod {}/{} belongs to no known workload",
                        r.namespace, r.name
                    ))),
                    Err(false) => Err(Status::not_found(format!(
                        "pod {}/{} is not known",
                        r.namespace, r.name
                    ))),
                }
            }
            Some(pb::resolve_request::Target::Inline(inline)) => {
                let catalog = index.catalog();
                let view = req.view;
                // Parsing and evaluating the caller's data runs on the evaluation threads.
                let encoded = self
                    .shared
                    .evaluations
                    .run(move || -> Result<Bytes, Status> {
                        let (root, pods) = parse_inline(&inline, "")?;
                        let lookup = catalog
                            .lookup(&root.meta.api_version, &root.meta.kind)
                            .ok_or_else(|| {
                                Status::failed_precondition(format!(
                                    "no definition covers {}/{}",
                                    root.meta.api_version, root.meta.kind
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
        self.ready()?;
        let filter = checked_filter(req.namespace, req.kinds, req.label_selector)?;
        Ok(super::watch::start(
            self.shared.clone(),
            filter,
            req.since_revision,
            req.view,
        ))
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

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        self.ready()?;
        let req = request.into_inner();
        let filter = checked_filter(req.namespace, req.kinds, req.label_selector)?;
        let limit = match req.page_size as usize {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        let offset = if req.page_token.is_empty() {
            0
        } else {
            req.page_token
                .parse::<usize>()
                .map_err(|_| Status::invalid_argument("page_token is not one this server issued"))?
        };
        let (page, more, revision) = self.shared.index.list(&filter, offset, limit);
        let workloads = page.iter().map(|w| view(w, req.view)).collect();
        let next_page_token = if more {
            (offset + limit).to_string()
        } else {
            String::new()
        };
        Ok(Response::new(pb::ListResponse {
            workloads,
            next_page_token,
            revision,
        }))
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

    async fn totals(
        &self,
        request: Request<pb::TotalsRequest>,
    ) -> Result<Response<pb::TotalsResponse>, Status> {
        self.ready()?;
        let req = request.into_inner();
        let key = match pb::GroupBy::try_from(req.group_by).unwrap_or(pb::GroupBy::Unspecified) {
            pb::GroupBy::Unspecified | pb::GroupBy::Namespace => TotalsKey::Namespace,
            pb::GroupBy::Kind => TotalsKey::Kind,
            pb::GroupBy::Workload => TotalsKey::Workload,
        };
        let (rows, revision) = self.shared.index.totals(key, &req.namespace);
        Ok(Response::new(pb::TotalsResponse { rows, revision }))
    }
}
