//! `Definitions`: what is loaded, and validation (with a preview) of a candidate.

use super::Shared;
use super::validate;
use crate::definition::{DefinitionError, catalog, load};
use crate::excerpt::{TEXT_BYTES, echo, excerpt};
use crate::proto::v1 as pb;
use tonic::{Request, Response, Status};

/// Most errors one `ValidateDefinition` answer lists (one more says how many were left out).
pub const MAX_DEFINITION_ERRORS: usize = 100;

/// Errors as the API sends them: each text field cut to [`TEXT_BYTES`], at most
/// [`MAX_DEFINITION_ERRORS`] of them and then one that counts the rest.
fn wire_errors(errors: Vec<DefinitionError>) -> Vec<pb::DefinitionError> {
    let total = errors.len();
    let mut out: Vec<pb::DefinitionError> = errors
        .into_iter()
        .take(MAX_DEFINITION_ERRORS)
        .map(|e| pb::DefinitionError {
            path: excerpt(&e.path, TEXT_BYTES).into_owned(),
            expression: excerpt(e.expression.as_deref().unwrap_or_default(), TEXT_BYTES)
                .into_owned(),
            message: excerpt(&e.message, TEXT_BYTES).into_owned(),
        })
        .collect();
    if total > MAX_DEFINITION_ERRORS {
        out.push(pb::DefinitionError {
            message: format!(
                "{} more errors not listed (at most {MAX_DEFINITION_ERRORS} are)",
                total - MAX_DEFINITION_ERRORS
            ),
            ..Default::default()
        });
    }
    out
}

/// A definition file's errors in one `last_error` text: each error cut to [`TEXT_BYTES`],
/// at most [`MAX_DEFINITION_ERRORS`].
fn joined_errors<'a>(errors: impl Iterator<Item = &'a DefinitionError>) -> String {
    let all: Vec<String> = errors.map(|e| e.to_string()).collect();
    let mut parts: Vec<String> = all
        .iter()
        .take(MAX_DEFINITION_ERRORS)
        .map(|e| excerpt(e, TEXT_BYTES).into_owned())
        .collect();
    if all.len() > MAX_DEFINITION_ERRORS {
        parts.push(format!(
            "{} more errors not listed",
            all.len() - MAX_DEFINITION_ERRORS
        ));
    }
    parts.join("; ")
}

pub use crate::definition::LoadReport;

/// The `Definitions` service.
pub struct DefinitionsService {
    shared: Shared,
}

impl DefinitionsService {
    /// A service over `shared`.
    pub fn new(shared: Shared) -> Self {
        DefinitionsService { shared }
    }
}

fn gvk(k: &crate::definition::GroupVersionKind) -> pb::GroupVersionKind {
    pb::GroupVersionKind {
        group: k.group.clone(),
        version: k.version.clone(),
        kind: k.kind.clone(),
    }
}

#[tonic::async_trait]
impl pb::definitions_server::Definitions for DefinitionsService {
    async fn list_definitions(
        &self,
        _request: Request<pb::ListDefinitionsRequest>,
    ) -> Result<Response<pb::ListDefinitionsResponse>, Status> {
        let catalog = self.shared.store.catalog();
        let errors = self.shared.report.get();
        let mut definitions: Vec<pb::DefinitionInfo> = catalog
            .definitions()
            .map(|d| pb::DefinitionInfo {
                name: d.name.clone(),
                root_kind: Some(gvk(&d.root_kind)),
                origin: d.origin.clone(),
                generation: d.generation(),
                last_error: joined_errors(errors.iter().filter(|e| e.source == d.source)),
                active: true,
                components: d.components.iter().map(|c| c.name.clone()).collect(),
                quarantined: d.breaker().quarantined().is_some(),
                quarantine_reason: d
                    .breaker()
                    .quarantined()
                    .map(|q| excerpt(&q.reason, TEXT_BYTES).into_owned())
                    .unwrap_or_default(),
                warnings: d
                    .warnings
                    .iter()
                    .map(|w| excerpt(&w.to_string(), TEXT_BYTES).into_owned())
                    .chain(self.shared.report.drift_of(&d.name))
                    .take(MAX_DEFINITION_ERRORS)
                    .collect(),
            })
            .collect();
        // Files whose definitions never loaded.
        let active_sources: Vec<&str> = catalog.definitions().map(|d| d.source.as_str()).collect();
        let mut failed: Vec<&DefinitionError> = errors
            .iter()
            .filter(|e| !active_sources.contains(&e.source.as_str()))
            .collect();
        failed.sort_by(|a, b| a.source.cmp(&b.source));
        for source in failed
            .iter()
            .map(|e| e.source.clone())
            .collect::<std::collections::BTreeSet<_>>()
        {
            definitions.push(pb::DefinitionInfo {
                name: source.clone(),
                origin: "directory".to_owned(),
                last_error: joined_errors(failed.iter().copied().filter(|e| e.source == source)),
                active: false,
                ..Default::default()
            });
        }
        Ok(Response::new(pb::ListDefinitionsResponse {
            definitions,
            generation: catalog.generation(),
        }))
    }

    async fn list_sources(
        &self,
        _request: Request<pb::ListSourcesRequest>,
    ) -> Result<Response<pb::ListSourcesResponse>, Status> {
        let store = &self.shared.store;
        let pending = store.pending();
        let mut sources: Vec<pb::SourceInfo> = store
            .source_problems()
            .into_iter()
            .map(|(name, problems)| pb::SourceInfo {
                synced: !pending.contains(&name),
                problems: problems
                    .into_iter()
                    .take(MAX_DEFINITION_ERRORS)
                    .map(|p| pb::SourceProblem {
                        path: excerpt(&p.path, TEXT_BYTES).into_owned(),
                        message: excerpt(&p.message, TEXT_BYTES).into_owned(),
                    })
                    .collect(),
                name,
            })
            .collect();
        if let Some(path) = self.shared.policies.path() {
            let path = path.display().to_string();
            sources.push(pb::SourceInfo {
                name: "policies".to_owned(),
                synced: true,
                problems: self
                    .shared
                    .policies
                    .problem()
                    .map(|message| pb::SourceProblem {
                        path: excerpt(&path, TEXT_BYTES).into_owned(),
                        message: excerpt(&message, TEXT_BYTES).into_owned(),
                    })
                    .into_iter()
                    .collect(),
            });
        }
        for name in pending {
            if !sources.iter().any(|s| s.name == name) {
                sources.push(pb::SourceInfo {
                    name,
                    synced: false,
                    problems: Vec::new(),
                });
            }
        }
        sources.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Response::new(pb::ListSourcesResponse { sources }))
    }

    async fn validate_definition(
        &self,
        request: Request<pb::ValidateDefinitionRequest>,
    ) -> Result<Response<pb::ValidateDefinitionResponse>, Status> {
        let req = request.into_inner();
        // Compiled as the catalog in effect was (`--phase-precedence`); a preview's budget
        // exhaustions count into its totals (`kartograf_evaluation_budget_exceeded_total`).
        let catalog = self.shared.store.catalog();
        // Compiling the candidate and evaluating it on the sample runs on the evaluation
        // threads, under the same budgets as every evaluation.
        let response = self
            .shared
            .evaluations
            .run(move || validate_request(req, &catalog))
            .await
            .and_then(|r| r)
            .map_err(validate::bounded)?;
        Ok(Response::new(response))
    }
}

/// Validates a candidate definition (compiled as `live` was) and previews it on the
/// sample, if one is given; budget exhaustions of the preview count into `live`'s totals.
fn validate_request(
    req: pb::ValidateDefinitionRequest,
    live: &crate::definition::Catalog,
) -> Result<pb::ValidateDefinitionResponse, Status> {
    let options = live.options();
    // The sample is checked whether or not the definition is valid: a malformed sample is
    // the request's fault either way.
    let sample = match &req.sample {
        Some(sample) => Some(super::resolver::parse_inline(sample, "sample.")?),
        None => None,
    };
    let (parsed, mut errors) = load::parse_text(&req.definition, "request");
    if parsed.is_empty() && errors.is_empty() {
        errors.push(DefinitionError::new(
            "request",
            "",
            None,
            "holds no definition",
        ));
    }
    let (defs, compile_errors) = catalog::compile_all(parsed, "validate", options);
    errors.extend(compile_errors);
    let mut preview = None;
    if let (true, Some((root, pods))) = (errors.is_empty(), sample) {
        let gvk = root.meta.gvk();
        let def = defs
            .iter()
            .find(|d| d.root_kind == gvk)
            .or_else(|| {
                defs.iter()
                    .find(|d| d.root_kind.group == gvk.group && d.root_kind.kind == gvk.kind)
            })
            .ok_or_else(|| {
                let roots: Vec<String> = defs.iter().map(|d| d.root_kind.to_string()).collect();
                Status::invalid_argument(format!(
                    "sample.object_json is a {}, but the definition's root is {}: send a sample of the root kind",
                    echo(&gvk.to_string()),
                    echo(&roots.join(", "))
                ))
            })?;
        let fallback = (def.root_kind != gvk).then(|| gvk.to_string());
        live.count_exceeded_of(def);
        preview = Some(super::resolver::resolve_inline(
            def,
            0,
            fallback.as_deref(),
            &root,
            &pods,
        ));
    }
    let warnings = wire_errors(
        defs.iter()
            .flat_map(|d| d.warnings.iter().cloned())
            .collect(),
    );
    Ok(pb::ValidateDefinitionResponse {
        valid: errors.is_empty(),
        errors: wire_errors(errors),
        preview,
        warnings,
    })
}
