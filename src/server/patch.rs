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
                let object = store.root_object(&found.uid).ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "this server keeps no object for {}/{}/{} (an aggregator keeps only graphs); ask the cluster's own server",
                        echo(&found.kind),
                        echo(&found.namespace),
                        echo(&found.name)
                    ))
                })?;
                let lookup = catalog
                    .lookup(&found.api_version, &found.kind)
                    .ok_or_else(|| {
                        Status::failed_precondition(format!(
                            "no definition covers {}/{}",
                            echo(&found.api_version),
                            echo(&found.kind)
                        ))
                    })?;
                self.shared
                    .evaluations
                    .run(move || -> Result<pb::PatchResponse, Status> {
                        let p = patch::plan(&lookup.definition, &object, &intents)
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
                    .await?
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
