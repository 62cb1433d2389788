//! `WorkloadResolver.Patch`: the write path's engine ([`crate::patch`]) on a cached workload
//! (with `test` preconditions on its uid and resourceVersion) or on an inline object. The
//! server computes patches; it never applies them.

use super::resolver::{ResolverService, parse_inline, resolve_inline};
use super::validate;
use crate::excerpt::echo;
use crate::patch::{self, Intents, Lifecycle, PatchRefused, Toleration};
use crate::proto::v1 as pb;
use serde_json::Value as Json;
use tonic::Status;

/// Largest inline object a `Patch` accepts, as JSON text.
pub const MAX_INLINE_OBJECT_BYTES: usize = 3 * 1024 * 1024;

/// Bytes of answers [`PatchMemo`] keeps at most.
pub const MEMO_BYTES: u64 = 16 * 1024 * 1024;

/// How long [`PatchMemo`] keeps an answer.
pub const MEMO_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// Answers of `Patch` by reference (without a dry run), remembered: the same intents and
/// output on the same version of the same cached object, through the same definition, give
/// the same answer, so a consumer that asks again on every reconcile costs a lookup.
/// Bounded by [`MEMO_BYTES`] of answers and [`MEMO_TTL`].
pub struct PatchMemo {
    answers: moka::sync::Cache<MemoKey, pb::PatchResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct MemoKey {
    uid: String,
    version: u64,
    definition: u64,
    /// The checked intents and the output form, written canonically (maps are ordered).
    request: String,
}

impl PatchMemo {
    /// An empty memo.
    pub fn new() -> std::sync::Arc<PatchMemo> {
        std::sync::Arc::new(PatchMemo {
            answers: moka::sync::Cache::builder()
                .max_capacity(MEMO_BYTES)
                .weigher(|k: &MemoKey, v: &pb::PatchResponse| {
                    let bytes = k.uid.len() + k.request.len() + v.patch_json.len() + 512;
                    u32::try_from(bytes).unwrap_or(u32::MAX)
                })
                .time_to_live(MEMO_TTL)
                .build(),
        })
    }
}

/// The intents of a request, checked against Kubernetes' rules.
pub fn intents(p: &pb::PatchIntents) -> Result<Intents, Status> {
    let lifecycle = match pb::Lifecycle::try_from(p.lifecycle) {
        Ok(pb::Lifecycle::Unspecified) => None,
        Ok(pb::Lifecycle::Suspend) => Some(Lifecycle::Suspend),
        Ok(pb::Lifecycle::Resume) => Some(Lifecycle::Resume),
        Err(_) => {
            return Err(Status::invalid_argument(format!(
                "intents.lifecycle: {} is not LIFECYCLE_SUSPEND or LIFECYCLE_RESUME",
                p.lifecycle
            )));
        }
    };
    let out = Intents {
        scheduler_name: (!p.scheduler_name.is_empty()).then(|| p.scheduler_name.clone()),
        labels: p.labels.clone(),
        annotations: p.annotations.clone(),
        priority_class_name: (!p.priority_class_name.is_empty())
            .then(|| p.priority_class_name.clone()),
        node_selector: p.node_selector.clone(),
        tolerations: p
            .tolerations
            .iter()
            .map(|t| Toleration {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect(),
        lifecycle,
        replicas: p.replicas.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    };
    out.validate()
        .map_err(|e| Status::invalid_argument(format!("intents: {e}")))?;
    if out.is_empty() {
        return Err(Status::invalid_argument(
            "intents: empty; set at least one (scheduler_name, labels, annotations, priority_class_name, node_selector, tolerations, lifecycle, replicas)",
        ));
    }
    Ok(out)
}

/// The status a refusal is answered with.
pub fn refused(e: PatchRefused) -> Status {
    match e {
        PatchRefused::Unsupported { .. } => Status::failed_precondition(e.to_string()),
        _ => Status::invalid_argument(e.to_string()),
    }
}

/// The patch in the requested form, and the number of changing operations.
fn render(p: &patch::Patch, output: pb::PatchOutput) -> String {
    match output {
        pb::PatchOutput::MergePatch => p.merge_patch().to_string(),
        pb::PatchOutput::Object => p.patched().to_string(),
        pb::PatchOutput::Unspecified | pb::PatchOutput::JsonPatch => p.json_patch().to_string(),
    }
}

fn object_ref(o: &Json) -> pb::ObjectRef {
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    pb::ObjectRef {
        api_version: s(&o["apiVersion"]),
        kind: s(&o["kind"]),
        namespace: s(&o["metadata"]["namespace"]),
        name: s(&o["metadata"]["name"]),
        uid: s(&o["metadata"]["uid"]),
    }
}

impl ResolverService {
    /// Answers `Patch`.
    pub(super) async fn patch_checked(
        &self,
        req: pb::PatchRequest,
    ) -> Result<pb::PatchResponse, Status> {
        validate::cluster("cluster", &req.cluster)?;
        let output = pb::PatchOutput::try_from(req.output).map_err(|_| {
            Status::invalid_argument(format!(
                "output: {} is not PATCH_OUTPUT_JSON_PATCH, _MERGE_PATCH or _OBJECT",
                req.output
            ))
        })?;
        let intents = intents(&req.intents.unwrap_or_default())?;
        let dry_run = req.dry_run;
        let store = &self.shared.store;
        let catalog = store.catalog();
        match req.target {
            None => Err(Status::invalid_argument(
                "set one of target.workload or target.inline",
            )),
            Some(pb::patch_request::Target::Workload(r)) => {
                validate::workload_ref(&r)?;
                self.ready()?;
                let published = store.workload(&r, &req.cluster)?;
                let found = published.r#ref.clone().unwrap_or_default();
                let lookup = catalog
                    .lookup(&found.api_version, &found.kind)
                    .ok_or_else(|| {
                        Status::failed_precondition(format!(
                            "no definition covers {}/{}",
                            echo(&found.api_version),
                            echo(&found.kind)
                        ))
                    })?;
                let key = |version: u64| MemoKey {
                    uid: found.uid.clone(),
                    version,
                    definition: lookup.definition.generation(),
                    request: format!("{intents:?} {output:?}"),
                };
                let memo = self.shared.patch_memo.clone();
                if !dry_run
                    && let Some(version) = store.root_version(&found.uid)
                    && let Some(answer) = memo.answers.get(&key(version))
                {
                    return Ok(answer);
                }
                let root = store.root_object(&found.uid).ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "this server keeps no object for {}/{}/{} (an aggregator keeps only graphs); ask the cluster's own server",
                        echo(&found.kind),
                        echo(&found.namespace),
                        echo(&found.name)
                    ))
                })?;
                let stored = key(root.version);
                let answer = self
                    .shared
                    .evaluations
                    .run(move || -> Result<pb::PatchResponse, Status> {
                        let object = root.json;
                        let p = patch::plan_with(&lookup.definition, &object, Some(root.val), &intents)
                            .and_then(|p| p.guarded(&object))
                            .map_err(refused)?;
                        // The cache keeps no `env` of pod templates: only operations are
                        // exact.
                        let whole_arrays = p.merge_patch_sends_arrays();
                        match output {
                            pb::PatchOutput::Object => {
                                return Err(Status::failed_precondition(
                                    "output: the cached object keeps no `env` of pod templates, so it cannot be sent whole; ask for PATCH_OUTPUT_JSON_PATCH, or send the object inline",
                                ));
                            }
                            pb::PatchOutput::MergePatch if whole_arrays => {
                                return Err(Status::failed_precondition(
                                    "output: this merge patch would send arrays of pod templates whole, and the cache keeps no `env` of pod templates; ask for PATCH_OUTPUT_JSON_PATCH, or send the object inline",
                                ));
                            }
                            _ => {}
                        }
                        let graph = dry_run.then(|| dry_run_graph(&lookup, p.patched(), &[]));
                        Ok(pb::PatchResponse {
                            patch_json: render(&p, output),
                            changes: p.changes() as u32,
                            target: Some(found),
                            graph: graph.transpose()?,
                        })
                    })
                    .await??;
                if !dry_run {
                    memo.answers.insert(stored, answer.clone());
                }
                Ok(answer)
            }
            Some(pb::patch_request::Target::Inline(inline)) => {
                if inline.object_json.len() > MAX_INLINE_OBJECT_BYTES {
                    return Err(Status::invalid_argument(format!(
                        "inline.object_json: {} bytes exceed the bound of {MAX_INLINE_OBJECT_BYTES}",
                        inline.object_json.len()
                    )));
                }
                self.shared
                    .evaluations
                    .run(move || -> Result<pb::PatchResponse, Status> {
                        let (root, pods) = parse_inline(&inline, "inline.")?;
                        if let Some(problem) = &root.problem {
                            return Err(Status::invalid_argument(format!(
                                "inline.object_json: {problem}"
                            )));
                        }
                        let object = crate::manifest::from_json_strict(&inline.object_json)
                            .map_err(|e| {
                                Status::invalid_argument(format!(
                                    "inline.object_json is not valid JSON: {e}"
                                ))
                            })?;
                        let lookup = catalog
                            .lookup(&root.meta.api_version, &root.meta.kind)
                            .ok_or_else(|| {
                                Status::failed_precondition(format!(
                                    "no definition covers {}/{}",
                                    echo(&root.meta.api_version),
                                    echo(&root.meta.kind)
                                ))
                            })?;
                        let mut p =
                            patch::plan(&lookup.definition, &object, &intents).map_err(refused)?;
                        if !root.meta.uid.is_empty()
                            && object["metadata"]["resourceVersion"].is_string()
                        {
                            p = p.guarded(&object).map_err(refused)?;
                        }
                        let graph = dry_run.then(|| dry_run_graph(&lookup, p.patched(), &pods));
                        Ok(pb::PatchResponse {
                            patch_json: render(&p, output),
                            changes: p.changes() as u32,
                            target: Some(object_ref(&object)),
                            graph: graph.transpose()?,
                        })
                    })
                    .await?
            }
        }
    }
}

/// The graph the patched object resolves to.
fn dry_run_graph(
    lookup: &crate::definition::Lookup,
    patched: &Json,
    pods: &[crate::model::Pod],
) -> Result<pb::Workload, Status> {
    let root = crate::model::Object::from_json(patched, crate::expr::Limits::default())
        .map_err(|e| Status::invalid_argument(format!("the patched object: {e}")))?;
    Ok(resolve_inline(
        &lookup.definition,
        lookup.definition.generation(),
        lookup.fallback_from.as_deref(),
        &root,
        pods,
    ))
}
