//! Schema drift: do a definition's jq paths still fit the frameworks' schemas?
//!
//! Statically, [`check`] takes every expression of a definition (see [`targets`]: which
//! object it runs on, what its outputs must be), extracts the field paths it reads
//! ([`crate::expr::paths`]) and follows them through the OpenAPI v3 schema of the kind they
//! run on ([`schema`]): the CRD of the root kind ([`crd`], from files or a cluster), the
//! embedded Kubernetes core schema for built-in kinds, embedded pod templates a CRD leaves
//! open, and pods (as kartograf caches them). What it finds ([`report`]) names the
//! expression, the path that fails, and the versions of the CRD that do have it.
//!
//! At run time, [`EmptyPaths`] counts, per definition and field, the workload graphs in which
//! a path that should find something found nothing — drift no schema shows (labels,
//! annotations, condition types).
//!
//! Pure: no Kubernetes client, no async runtime.

pub mod check;
pub mod crd;
mod empty;
pub mod report;
pub mod schema;
pub mod targets;

pub use check::{Schemas, check_definition};
pub use crd::Crd;
pub use empty::EmptyPaths;
pub use report::{DefinitionReport, Finding, Report, Severity};

use crate::definition::{Definition, GroupVersionKind};

/// Checks `definitions` against `schemas`; `covered` lists every root kind a definition in
/// effect covers (so a newer CRD version that has its own definition is not reported).
pub fn check_all<'a>(
    definitions: impl IntoIterator<Item = &'a Definition>,
    schemas: &Schemas,
    sources: Vec<String>,
) -> Report {
    let definitions: Vec<&Definition> = definitions.into_iter().collect();
    let covered: Vec<GroupVersionKind> = definitions.iter().map(|d| d.root_kind.clone()).collect();
    let reports = definitions
        .iter()
        .map(|d| check_definition(d, schemas, &covered))
        .collect();
    Report::new(reports, sources, schema::Core::get().source.clone())
}
