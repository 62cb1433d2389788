//! `Definitions`: what is loaded, and validation (with a preview) of a candidate.

use super::Shared;
use crate::definition::{DefinitionError, catalog, load};
use crate::proto::v1 as pb;
use tonic::{Request, Response, Status};

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
        let catalog = self.shared.index.catalog();
        let errors = self.shared.report.get();
        let mut definitions: Vec<pb::DefinitionInfo> = catalog
            .definitions()
            .map(|d| pb::DefinitionInfo {
                name: d.name.clone(),
                root_kind: Some(gvk(&d.root_kind)),
                origin: d.origin.clone(),
                generation: catalog.generation(),
                last_error: errors
                    .iter()
                    .filter(|e| e.source == d.source)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
                active: true,
                components: d.components.iter().map(|c| c.name.clone()).collect(),
                warnings: self.shared.report.drift_of(&d.name),
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
                last_error: failed
                    .iter()
                    .filter(|e| e.source == source)
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
                active: false,
                ..Default::default()
            });
        }
        Ok(Response::new(pb::ListDefinitionsResponse {
            definitions,
            generation: catalog.generation(),
        }))
    }

    async fn validate_definition(
        &self,
        request: Request<pb::ValidateDefinitionRequest>,
    ) -> Result<Response<pb::ValidateDefinitionResponse>, Status> {
        let req = request.into_inner();
        let (parsed, mut errors) = load::parse_text(&req.definition, "request");
        if parsed.is_empty() && errors.is_empty() {
            errors.push(DefinitionError::new(
                "request",
                "",
                None,
                "holds no definition",
            ));
        }
        let (defs, compile_errors) = catalog::compile_all(parsed, "validate");
        errors.extend(compile_errors);
        let mut preview = None;
        if let (true, Some(sample), Some(def)) = (errors.is_empty(), req.sample, defs.first()) {
            let (root, pods) = super::resolver::parse_inline(&sample, "sample.")?;
            preview = Some(super::resolver::resolve_inline(def, 0, None, &root, &pods));
        }
        Ok(Response::new(pb::ValidateDefinitionResponse {
            valid: errors.is_empty(),
            errors: errors
                .into_iter()
                .map(|e| pb::DefinitionError {
                    path: e.path,
                    expression: e.expression.unwrap_or_default(),
                    message: e.message,
                })
                .collect(),
            preview,
        }))
    }
}
