//! Workload definitions: the Karta model, loading, validation, compilation and the catalog.
//!
//! Definitions come from three sources, merged per root kind with precedence
//! cluster Karta objects > `--definitions DIR` > the embedded catalog.

pub mod assign;
pub mod breaker;
pub mod catalog;
pub mod compile;
pub mod layers;
pub mod load;
pub mod model;
pub mod plan;

pub use catalog::{Catalog, Lookup};
pub use load::LoadOptions;
pub use model::{GroupVersionKind, Karta};
pub use plan::Definition;

/// One problem with a definition: where (file, YAML path), which expression, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionError {
    /// File (or other source label).
    pub source: String,
    /// YAML path of the offending field, e.g. `spec.structureDefinition.childComponents[1].scaleDefinition.replicasPath`.
    pub path: String,
    /// The expression, when the error is about one.
    pub expression: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl DefinitionError {
    /// A file or folder that could not be read.
    pub fn unreadable(source: &str, error: impl std::fmt::Display) -> Self {
        DefinitionError::new(source, "", None, format!("cannot read: {error}"))
    }

    /// Builds an error.
    pub fn new(
        source: &str,
        path: &str,
        expression: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        DefinitionError {
            source: source.to_owned(),
            path: path.to_owned(),
            expression: expression.map(str::to_owned),
            message: message.into(),
        }
    }
}

/// Errors of one refused file or object quoted in its log line; the others are counted.
pub const LOGGED_ERRORS: usize = 3;

/// Logs one refused definition file or object (`source`) as ONE warning line: how many
/// errors, and the first [`LOGGED_ERRORS`] of them (each cut to a bounded excerpt), however
/// many it has. `what` says what stays in effect.
pub fn log_refused(source: &str, errors: &[DefinitionError], what: &str) {
    if errors.is_empty() {
        return;
    }
    let first: Vec<String> = errors
        .iter()
        .take(LOGGED_ERRORS)
        .map(|e| crate::excerpt::excerpt(&e.to_string(), 512).into_owned())
        .collect();
    let more = errors.len().saturating_sub(LOGGED_ERRORS);
    let first = if more > 0 {
        format!("{} … and {more} more", first.join("; "))
    } else {
        first.join("; ")
    };
    tracing::warn!(
        source = %crate::excerpt::echo(source),
        errors = errors.len(),
        first = %first,
        "{what}"
    );
}

impl std::fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.source)?;
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(e) = &self.expression {
            write!(f, " (expression: `{e}`)")?;
        }
        Ok(())
    }
}

impl std::error::Error for DefinitionError {}

/// The errors of the last definition load (shown by `ListDefinitions`, the log and metrics),
/// and the schema drift of the definitions in effect (`ListDefinitions` warnings, metrics).
#[derive(Default)]
pub struct LoadReport {
    errors: parking_lot::Mutex<Vec<DefinitionError>>,
    drift: parking_lot::Mutex<std::collections::BTreeMap<String, Vec<String>>>,
}

impl LoadReport {
    /// Replaces the reported errors.
    pub fn set(&self, errors: Vec<DefinitionError>) {
        *self.errors.lock() = errors;
    }

    /// The reported errors.
    pub fn get(&self) -> Vec<DefinitionError> {
        self.errors.lock().clone()
    }

    /// Replaces the schema drift: per definition name checked against a schema, its
    /// findings (one line each; empty when it fits).
    pub fn set_drift(&self, drift: std::collections::BTreeMap<String, Vec<String>>) {
        *self.drift.lock() = drift;
    }

    /// The schema drift of every definition checked against a schema.
    pub fn drift(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        self.drift.lock().clone()
    }

    /// The drift findings of one definition; `None` when it was not checked.
    pub fn drift_checked(&self, definition: &str) -> Option<Vec<String>> {
        self.drift.lock().get(definition).cloned()
    }

    /// The drift findings of one definition (empty when none, or not checked).
    pub fn drift_of(&self, definition: &str) -> Vec<String> {
        self.drift_checked(definition).unwrap_or_default()
    }
}
