//! What a drift check found, per definition: findings (errors and warnings), what it could
//! not check, and counts. Serializes to JSON (camelCase) for `kartograf check -o json`.

use serde::Serialize;
use std::fmt;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The definition does not fit the schema: a path finds nothing or the wrong thing.
    Error,
    /// Worth knowing before an upgrade (a deprecated or newer version, a child kind).
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// Finding codes.
pub mod code {
    /// A path names a field the schema does not have.
    pub const UNKNOWN_FIELD: &str = "unknown_field";
    /// A path indexes an array as an object, or a scalar, or the other way round.
    pub const WRONG_SHAPE: &str = "wrong_shape";
    /// A value compared with (or matched against) a field is not in the field's `enum`.
    pub const NOT_IN_ENUM: &str = "not_in_enum";
    /// A value compared with, or written to, a field has another JSON type than the field.
    pub const WRONG_TYPE: &str = "wrong_type";
    /// A pod spec path does not lead to what its field promises (a PodTemplateSpec, …).
    pub const WRONG_TARGET: &str = "wrong_target";
    /// A path names a field an object keeps without declaring it (warning).
    pub const UNDECLARED_FIELD: &str = "undeclared_field";
    /// A pod expression reads a field kartograf does not keep of pods (always `null`).
    pub const NOT_CACHED: &str = "not_cached";
    /// The definition's version of its root kind is not served by the CRD.
    pub const VERSION_NOT_SERVED: &str = "version_not_served";
    /// The definition's version is deprecated in the CRD.
    pub const VERSION_DEPRECATED: &str = "version_deprecated";
    /// The CRD serves a newer version that no definition covers.
    pub const NEWER_VERSION: &str = "newer_version";
    /// A child or additional kind's version is not served by its CRD.
    pub const CHILD_VERSION_NOT_SERVED: &str = "child_version_not_served";
}

/// One problem with one expression (or with the definition as a whole).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// One of [`code`].
    pub code: &'static str,
    /// YAML path of the expression in the definition (empty for the definition as a whole).
    pub path: String,
    /// The expression.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub expression: String,
    /// The field path the expression reads that fails, as jq (`.spec.workers[].replicas`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// The part of `field` that still fits the schema (where it fails).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub at: String,
    /// The schema checked against: `group/version Kind (file)`.
    pub schema: String,
    /// Other versions of the CRD in which `field` exists.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub present_in: Vec<String>,
    /// What is wrong, in one sentence (names the versions and the likely move).
    pub message: String,
}

impl fmt::Display for Finding {
    /// `<yaml path>: <message> (expression: `...`)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if !self.expression.is_empty() {
            write!(f, " (expression: `{}`)", one_line(&self.expression))?;
        }
        Ok(())
    }
}

/// An expression, or a part of one, that the check could not follow.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotChecked {
    /// YAML path of the expression.
    pub path: String,
    /// The expression.
    pub expression: String,
    /// Why (e.g. "`getpath` with a computed path", "no schema for example.com/Widget").
    pub reason: String,
}

/// Counts of one definition's check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Expressions in the definition.
    pub expressions: usize,
    /// Expressions analysed completely (every field path they read is known).
    pub analysed: usize,
    /// Field paths read (longest of each chain).
    pub field_paths: usize,
    /// Field paths checked to their end against a schema.
    pub checked: usize,
    /// Field paths that fit up to an open schema (`x-kubernetes-preserve-unknown-fields`,
    /// an untyped field): checked as far as the schema goes.
    pub open: usize,
    /// Field paths not checked (no schema, a computed key into a fixed object, …).
    pub not_checked: usize,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        self.expressions += o.expressions;
        self.analysed += o.analysed;
        self.field_paths += o.field_paths;
        self.checked += o.checked;
        self.open += o.open;
        self.not_checked += o.not_checked;
    }
}

/// The check of one definition.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DefinitionReport {
    /// Definition name.
    pub name: String,
    /// File (or origin) it came from.
    pub source: String,
    /// Root kind, `group/version/Kind`.
    pub root_kind: String,
    /// What it was checked against (`None`: no schema for its root kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Errors and warnings.
    pub findings: Vec<Finding>,
    /// What could not be checked.
    pub not_checked: Vec<NotChecked>,
    /// Counts.
    pub stats: Stats,
}

impl DefinitionReport {
    /// Number of findings of `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }
}

/// The check of a set of definitions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Per definition, in the order given.
    pub definitions: Vec<DefinitionReport>,
    /// Where the CRDs came from (files, or `cluster`).
    pub crds: Vec<String>,
    /// Where the Kubernetes core schema came from.
    pub core: String,
    /// Totals.
    pub stats: Stats,
    /// Errors over all definitions.
    pub errors: usize,
    /// Warnings over all definitions.
    pub warnings: usize,
}

impl Report {
    /// Builds the totals.
    pub fn new(definitions: Vec<DefinitionReport>, crds: Vec<String>, core: String) -> Report {
        let mut stats = Stats::default();
        definitions.iter().for_each(|d| stats += d.stats);
        let errors = definitions.iter().map(|d| d.count(Severity::Error)).sum();
        let warnings = definitions.iter().map(|d| d.count(Severity::Warning)).sum();
        Report {
            definitions,
            crds,
            core,
            stats,
            errors,
            warnings,
        }
    }
}

/// An expression on one line (YAML block scalars span several).
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
