//! Collecting diagnostics for one graph, de-duplicated. A diagnostic's message and
//! expression are cut to [`TEXT_BYTES`] each (with the full length shown), so a value an
//! object or an expression produced cannot make a graph, or an answer, grow without bound.

use crate::excerpt::TEXT_BYTES;
use crate::proto::v1::Diagnostic;

/// Severity `info`: something a reader may want to know.
pub const INFO: &str = "info";
/// Severity `warning`: part of the graph may be wrong or missing.
pub const WARNING: &str = "warning";
/// Severity `error`: the graph could not be computed as defined.
pub const ERROR: &str = "error";

/// Longest rendering of a value quoted in a diagnostic (the whole message is bounded too).
pub const VALUE_BYTES: usize = 256;

/// Diagnostic codes.
pub mod code {
    /// A jq expression failed at run time.
    pub const EVAL_ERROR: &str = "eval_error";
    /// The resolve deadline passed; the rest of the graph is partial.
    pub const DEADLINE: &str = "deadline_exceeded";
    /// An evaluation exceeded its work, memory, depth or time budget.
    pub const BUDGET_EXCEEDED: &str = "budget_exceeded";
    /// The definition is quarantined (its evaluations kept exceeding their budgets).
    pub const QUARANTINED: &str = "definition_quarantined";
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
    /// A source's note about an object of the workload (e.g. defined in two files).
    pub const SOURCE_NOTE: &str = "source_note";
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
    /// Adds a diagnostic unless an identical one exists; message, component and expression
    /// are cut to [`TEXT_BYTES`].
    pub fn push_diagnostic(&mut self, mut d: Diagnostic) {
        crate::excerpt::bound(&mut d.message, TEXT_BYTES);
        crate::excerpt::bound(&mut d.component, TEXT_BYTES);
        crate::excerpt::bound(&mut d.expression, TEXT_BYTES);
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

    /// Adds a diagnostic unless an identical one exists (cut as [`Diagnostics::push_diagnostic`]
    /// cuts).
    pub fn push(
        &mut self,
        severity: &str,
        code: &str,
        message: impl Into<String>,
        component: &str,
        expression: &str,
    ) {
        let message = message.into();
        let d = Diagnostic {
            severity: severity.to_owned(),
            code: code.to_owned(),
            message,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_with_their_length() {
        let mut d = Diagnostics::default();
        let value = "v".repeat(3 << 20);
        d.push(
            WARNING,
            code::BAD_VALUE,
            format!("yielded {value}"),
            "c",
            &value,
        );
        let items = d.into_vec();
        let m = &items[0].message;
        assert!(m.len() < TEXT_BYTES + 32, "{}", m.len());
        assert!(
            m.starts_with("yielded vvv") && m.ends_with("…(3145736 bytes)"),
            "{m:.40}"
        );
        assert!(items[0].expression.ends_with("…(3145728 bytes)"));
    }
}
