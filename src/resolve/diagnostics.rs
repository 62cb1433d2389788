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
    /// A resource quantity is negative: not counted.
    pub const NEGATIVE_QUANTITY: &str = "negative_quantity";
    /// A quantity or count is beyond what it may be (a request above 2^63-1 units: not
    /// counted; a sum beyond its field's range: the field holds its maximum).
    pub const QUANTITY_OUT_OF_RANGE: &str = "quantity_out_of_range";
    /// A limit on the native work of one resolution cut the graph short (more instance or
    /// replica slots than allowed, its work budget): the graph is partial.
    pub const LIMIT_EXCEEDED: &str = "limit_exceeded";
    /// The definition of another version of the kind was used.
    pub const DEFINITION_FALLBACK: &str = "definition_fallback";
    /// A source's note about an object of the workload (e.g. defined in two files).
    pub const SOURCE_NOTE: &str = "source_note";
    /// A gang key could not be read from a pod.
    pub const GANG_KEY_MISSING: &str = "gang_key_missing";
    /// A pod matches no gang member.
    pub const GANG_NO_MEMBER: &str = "gang_no_member";
}

/// The codes that mean an evaluation was cut short (deadline, budget, quarantine): the
/// next try may complete, so such answers are neither remembered nor trusted.
pub const EVALUATION_CUT_SHORT: [&str; 3] =
    [code::DEADLINE, code::BUDGET_EXCEEDED, code::QUARANTINED];

/// The codes that mean a graph is cut short: an evaluation was ([`EVALUATION_CUT_SHORT`]),
/// or a limit on a resolution's native work was ([`code::LIMIT_EXCEEDED`]). Such a graph is
/// partial: no decision (a gang object, a skipped re-resolution) may rest on it.
pub const CUT_SHORT: [&str; 4] = [
    code::DEADLINE,
    code::BUDGET_EXCEEDED,
    code::QUARANTINED,
    code::LIMIT_EXCEEDED,
];

/// Whether `code` says an evaluation was cut short.
pub fn evaluation_cut_short(code: &str) -> bool {
    EVALUATION_CUT_SHORT.contains(&code)
}

/// Whether `code` says a graph is cut short.
pub fn cut_short(code: &str) -> bool {
    CUT_SHORT.contains(&code)
}

/// Most diagnostics of one code kept on one graph; the others are counted, and one more
/// diagnostic of that code says how many were not shown. (A workload of 100,000 pods that no
/// component claims has 32 `unattributed_pod` diagnostics and a count, not 100,000.)
pub const MAX_PER_CODE: usize = 32;

/// Diagnostics of one resolution, each reported once, at most [`MAX_PER_CODE`] per code.
#[derive(Default, Debug)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
    /// Per code: the positions of its kept diagnostics and how many more were not kept.
    codes: Vec<(String, Vec<usize>, usize)>,
}

impl Diagnostics {
    /// Adds a diagnostic unless an identical one exists; message, component and expression
    /// are cut to [`TEXT_BYTES`]. Past [`MAX_PER_CODE`] of its code it is only counted.
    pub fn push_diagnostic(&mut self, mut d: Diagnostic) {
        crate::excerpt::bound(&mut d.message, TEXT_BYTES);
        crate::excerpt::bound(&mut d.component, TEXT_BYTES);
        crate::excerpt::bound(&mut d.expression, TEXT_BYTES);
        let at = match self.codes.iter().position(|(c, _, _)| *c == d.code) {
            Some(at) => at,
            None => {
                self.codes.push((d.code.clone(), Vec::new(), 0));
                self.codes.len() - 1
            }
        };
        let (_, kept, more) = &mut self.codes[at];
        if kept.iter().any(|&i| self.items[i] == d) {
            return;
        }
        if kept.len() >= MAX_PER_CODE {
            *more += 1;
            return;
        }
        kept.push(self.items.len());
        self.items.push(d);
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

    /// The diagnostics, in the order they were found; then, for each code that had more
    /// than [`MAX_PER_CODE`], one saying how many more there were.
    pub fn into_vec(mut self) -> Vec<Diagnostic> {
        for (code, kept, more) in &self.codes {
            if *more == 0 {
                continue;
            }
            let severity = kept
                .last()
                .map_or(WARNING, |&i| self.items[i].severity.as_str())
                .to_owned();
            self.items.push(Diagnostic {
                severity,
                code: code.clone(),
                message: format!(
                    "{more} more `{code}` diagnostic(s) not shown (at most {MAX_PER_CODE} per \
                     code)"
                ),
                component: String::new(),
                expression: String::new(),
                path: String::new(),
            });
        }
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_keeps_a_bounded_number_and_counts_the_rest() {
        let mut d = Diagnostics::default();
        for i in 0..10_000 {
            d.push(WARNING, code::UNATTRIBUTED_POD, format!("pod p{i}"), "", "");
            // Duplicates are neither kept twice nor counted.
            d.push(WARNING, code::UNATTRIBUTED_POD, "pod p0", "", "");
        }
        d.push(ERROR, code::DEADLINE, "late", "", "");
        let items = d.into_vec();
        let unattributed: Vec<_> = items
            .iter()
            .filter(|x| x.code == code::UNATTRIBUTED_POD)
            .collect();
        assert_eq!(unattributed.len(), MAX_PER_CODE + 1);
        assert_eq!(
            unattributed.last().map(|x| x.message.as_str()),
            Some(
                format!(
                    "{} more `unattributed_pod` diagnostic(s) not shown (at most 32 per code)",
                    10_000 - MAX_PER_CODE
                )
                .as_str()
            )
        );
        assert!(items.iter().any(|x| x.code == code::DEADLINE));
    }

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
