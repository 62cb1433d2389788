//! Collecting diagnostics for one graph, de-duplicated.

use crate::proto::v1::Diagnostic;

/// Severity `info`: something a reader may want to know.
pub const INFO: &str = "info";
/// Severity `warning`: part of the graph may be wrong or missing.
pub const WARNING: &str = "warning";
/// Severity `error`: the graph could not be computed as defined.
pub const ERROR: &str = "error";

/// Diagnostic codes.
pub mod code {
    /// A jq expression failed at run time.
    pub const EVAL_ERROR: &str = "eval_error";
    /// The resolve deadline passed; the rest of the graph is partial.
    pub const DEADLINE: &str = "deadline_exceeded";
    /// The object could not be read (too large, too deep).
    pub const OBJECT_UNREADABLE: &str = "object_unreadable";
    /// A path yielded a value of the wrong type.
    pub const BAD_VALUE: &str = "bad_value";
    /// Positional outputs do not match the number of instances.
    pub const COUNT_MISMATCH: &str = "count_mismatch";
    /// A pod spec path found nothing: the component has no pods by spec.
    pub const SPEC_MISSING: &str = "spec_missing";
    /// A pod belongs to the workload but no component claims it.
    pub const UNATTRIBUTED_POD: &str = "unattributed_pod";
    /// A pod uses DRA resource claims, which are not counted.
    pub const DRA_CLAIMS: &str = "dra_claims";
    /// A resource quantity could not be parsed.
    pub const BAD_QUANTITY: &str = "bad_quantity";
    /// The definition of another version of the kind was used.
    pub const DEFINITION_FALLBACK: &str = "definition_fallback";
    /// A gang key could not be read from a pod.
    pub const GANG_KEY_MISSING: &str = "gang_key_missing";
    /// A pod matches no gang member.
    pub const GANG_NO_MEMBER: &str = "gang_no_member";
}

/// Diagnostics of one resolution, each reported once.
#[derive(Default, Debug)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Adds a diagnostic unless an identical one exists.
    pub fn push_diagnostic(&mut self, d: Diagnostic) {
        if !self.items.contains(&d) {
            self.items.push(d);
        }
    }

    /// Adds a diagnostic about the definition field at YAML path `path` (a path that should
    /// have found something and found nothing), unless an identical one exists.
    pub fn push_at(
        &mut self,
        severity: &str,
        code: &str,
        message: impl Into<String>,
        component: &str,
        expression: &str,
        path: &str,
    ) {
        self.push_diagnostic(Diagnostic {
            severity: severity.to_owned(),
            code: code.to_owned(),
            message: message.into(),
            component: component.to_owned(),
            expression: expression.to_owned(),
            path: path.to_owned(),
        });
    }

    /// Adds a diagnostic unless an identical one exists.
    pub fn push(
        &mut self,
        severity: &str,
        code: &str,
        message: impl Into<String>,
        component: &str,
        expression: &str,
    ) {
        let d = Diagnostic {
            severity: severity.to_owned(),
            code: code.to_owned(),
            message: message.into(),
            component: component.to_owned(),
            expression: expression.to_owned(),
            path: String::new(),
        };
        self.push_diagnostic(d);
    }

    /// True if a diagnostic with this code exists.
    pub fn has(&self, code: &str) -> bool {
        self.items.iter().any(|d| d.code == code)
    }

    /// The diagnostics, in the order they were found.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.items
    }
}
