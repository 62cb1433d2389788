//! The resolver's evaluations: every jq evaluation of a resolution goes through here, where
//! failures become diagnostics (deadline, budget, quarantine, runtime errors) and what a pod
//! answers is remembered on it.

use super::Resolver;
use super::diagnostics::{ERROR, WARNING, code};
use crate::definition::plan::Compiled;
use crate::expr::EvalError;
use crate::expr::value::{Doc, to_text};
use crate::model::memo::Answer;
use jaq_json::Val;

/// What [`Resolver::ask`] learned from a pod.
pub(super) struct Asked {
    pub(super) answer: Answer,
    /// The evaluation error, already reported.
    pub(super) failure: Option<String>,
    /// False when the deadline cut the evaluation short.
    pub(super) remember: bool,
}

/// Question kinds, kept in the low bits of [`question`] (definition items are aligned).
pub(super) const KEY: usize = 0;
/// A gang member filter.
pub(super) const FILTER: usize = 1;
/// A component's type selector.
pub(super) const TYPE: usize = 2;

/// Identifies a question about a pod: the address of the definition item that asks it
/// (stable while the definition lives) tagged with the kind of question.
pub(super) fn question<T>(item: &T, kind: usize) -> usize {
    std::ptr::from_ref(item) as usize | kind
}

/// Why an evaluation gave no outputs.
pub(super) enum Failure {
    /// The resolve deadline passed (reported once; never remembered).
    Expired,
    /// The expression failed; the message is the diagnostic's.
    Error(String),
    /// The evaluation exceeded a budget (already reported; never remembered).
    Budget,
}

/// Why a guarded evaluation gave no outputs.
#[derive(Debug)]
pub enum Cut {
    /// The definition is quarantined (the reason); nothing was evaluated.
    Quarantined(String),
    /// The deadline passed.
    Deadline,
    /// A budget ran out (recorded against the definition's breaker).
    Budget(crate::expr::budget::Exceeded),
    /// The expression failed at run time.
    Failed(EvalError),
}

impl Cut {
    /// The diagnostic code of an evaluation cut short (`None`: the expression failed).
    pub fn code(&self) -> Option<&'static str> {
        match self {
            Cut::Quarantined(_) => Some(code::QUARANTINED),
            Cut::Deadline => Some(code::DEADLINE),
            Cut::Budget(_) => Some(code::BUDGET_EXCEEDED),
            Cut::Failed(_) => None,
        }
    }
}

/// The one guarded evaluation of a definition's expression: refused while the definition
/// is quarantined, run under `deadline` (`run` is given it) and the evaluation budget, a
/// budget overrun recorded against the definition's circuit breaker. Every evaluation of a
/// definition on objects goes through here (the resolver, Karmada's interpreter).
pub fn guarded(
    def: &crate::definition::Definition,
    deadline: Option<std::time::Instant>,
    run: impl FnOnce(Option<std::time::Instant>) -> Result<Vec<Val>, EvalError>,
) -> Result<Vec<Val>, Cut> {
    if let Some(q) = def.breaker().quarantined() {
        return Err(Cut::Quarantined(q.reason.to_string()));
    }
    match run(deadline) {
        Ok(out) => Ok(out),
        Err(EvalError::Deadline) => Err(Cut::Deadline),
        Err(EvalError::Budget(what)) => {
            def.breaker().record(what);
            Err(Cut::Budget(what))
        }
        Err(e) => Err(Cut::Failed(e)),
    }
}

/// [`guarded`] evaluation of `expr` on `input` with `vars`.
pub fn evaluate(
    def: &crate::definition::Definition,
    expr: &crate::expr::Expr,
    input: &Val,
    vars: &[Val],
    deadline: Option<std::time::Instant>,
) -> Result<Vec<Val>, Cut> {
    guarded(def, deadline, |deadline| {
        bounded(expr, input, vars, deadline)
    })
}

/// The one evaluation of a definition's expression on an object outside `crate::expr`:
/// `expr` on `input` with `vars`, under `deadline` and the evaluation budget, its errors as
/// [`EvalError`]. [`evaluate`] adds the definition's breaker; the write path
/// (`crate::patch`) reads its fields with this alone, as it always has.
pub fn bounded(
    expr: &crate::expr::Expr,
    input: &Val,
    vars: &[Val],
    deadline: Option<std::time::Instant>,
) -> Result<Vec<Val>, EvalError> {
    expr.eval_with(input, vars, deadline)
}

impl Resolver<'_> {
    /// Evaluates `expr` on `input`; the first deadline miss is reported here.
    pub(super) fn try_eval(
        &mut self,
        expr: &Compiled,
        input: &Val,
        vars: &[Val],
        component: &str,
    ) -> Result<Vec<Val>, Failure> {
        if self.expired {
            return Err(Failure::Expired);
        }
        let out = evaluate(self.def, &expr.expr, input, vars, self.deadline);
        self.report(expr, component, out)
    }

    /// Evaluates `expr` on pod `i`. A fast-path expression on a pod not unpacked yet reads
    /// its packed form, unpacking only what the expression reaches (a cold start asks
    /// every pod a few label lookups: unpacking whole pods for them was most of their
    /// cost); the result is the same.
    fn try_eval_pod(
        &mut self,
        expr: &Compiled,
        i: usize,
        component: &str,
    ) -> Result<Vec<Val>, Failure> {
        let pod = self.pods[i];
        if self.values[i].is_none()
            && let Some(out) = expr.expr.eval_packed(&pod.packed)
        {
            if self.expired {
                return Err(Failure::Expired);
            }
            let out = guarded(self.def, self.deadline, |_| out);
            return self.report(expr, component, out);
        }
        let value = self.pod_value(i);
        self.try_eval(expr, &value, &[], component)
    }

    /// Turns what cut a [`guarded`] evaluation of `expr` short into diagnostics.
    fn report(
        &mut self,
        expr: &Compiled,
        component: &str,
        outcome: Result<Vec<Val>, Cut>,
    ) -> Result<Vec<Val>, Failure> {
        match outcome {
            Ok(out) => Ok(out),
            Err(Cut::Quarantined(reason)) => {
                self.expired = true;
                self.diags.push(
                    ERROR,
                    code::QUARANTINED,
                    format!(
                        "definition `{}` is quarantined: {reason}; its expressions are not evaluated and the graph is partial",
                        self.def.name
                    ),
                    "",
                    "",
                );
                Err(Failure::Expired)
            }
            Err(Cut::Deadline) => {
                self.expired = true;
                self.diags.push(
                    ERROR,
                    code::DEADLINE,
                    "resolve deadline exceeded; the graph is partial",
                    component,
                    expr.source(),
                );
                Err(Failure::Expired)
            }
            Err(Cut::Budget(what)) => {
                self.diags.push(
                    ERROR,
                    code::BUDGET_EXCEEDED,
                    format!(
                        "{} of definition `{}` exceeded its {what} budget; the graph is partial",
                        expr.path, self.def.name
                    ),
                    component,
                    expr.source(),
                );
                Err(Failure::Budget)
            }
            Err(Cut::Failed(e)) => Err(Failure::Error(format!("{} failed: {e}", expr.path))),
        }
    }

    /// Evaluates `expr` on `input`; errors become diagnostics and `None`.
    pub(super) fn eval_on(
        &mut self,
        expr: &Compiled,
        input: &Val,
        vars: &[Val],
        component: &str,
    ) -> Option<Vec<Val>> {
        match self.try_eval(expr, input, vars, component) {
            Ok(out) => Some(out),
            Err(Failure::Expired | Failure::Budget) => None,
            Err(Failure::Error(message)) => {
                self.diags
                    .push(WARNING, code::EVAL_ERROR, message, component, expr.source());
                None
            }
        }
    }

    /// Pod `i` as a jq value, unpacked once per resolution.
    pub(super) fn pod_value(&mut self, i: usize) -> Val {
        match &self.values[i] {
            Some(v) => v.clone(),
            None => {
                let pod = self.pods[i];
                let v = pod.memo.take_value().unwrap_or_else(|| pod.value());
                self.values[i] = Some(v.clone());
                v
            }
        }
    }

    /// Asks pod `i` a question that depends on the pod and the definition alone.
    /// `compute` answers it about pod `i` (evaluating through [`Resolver::evaluate`]);
    /// answers are remembered on the pod with the evaluation error they came with, which is
    /// reported again (for `component`, as an error of `expr`) whenever the answer is reused.
    /// `question` identifies the question within the definition (see [`question`]).
    pub(super) fn ask(
        &mut self,
        i: usize,
        question: usize,
        expr: Option<&Compiled>,
        component: &str,
        compute: impl FnOnce(&mut Self, usize) -> Asked,
    ) -> Answer {
        let pod = self.pods[i];
        if let Some((answer, failure)) = pod.memo.get(self.owner, question) {
            if let (Some(message), Some(expr)) = (failure, expr) {
                self.diags.push(
                    WARNING,
                    code::EVAL_ERROR,
                    message.into_string(),
                    component,
                    expr.source(),
                );
            }
            return answer;
        }
        let asked = compute(self, i);
        if asked.remember {
            pod.memo.put(
                self.owner,
                question,
                asked.answer.clone(),
                asked.failure.map(String::into_boxed_str),
            );
        }
        asked.answer
    }

    /// Evaluates `expr` on pod `i` for [`Resolver::ask`]: its outputs (`None` on failure),
    /// the failure message (also reported now) and whether the result may be remembered
    /// (not when the deadline cut it short).
    pub(super) fn evaluate(
        &mut self,
        expr: &Compiled,
        i: usize,
        component: &str,
    ) -> (Option<Vec<Val>>, Option<String>, bool) {
        match self.try_eval_pod(expr, i, component) {
            Ok(out) => (Some(out), None, true),
            Err(Failure::Expired | Failure::Budget) => (None, None, false),
            Err(Failure::Error(message)) => {
                self.diags.push(
                    WARNING,
                    code::EVAL_ERROR,
                    message.clone(),
                    component,
                    expr.source(),
                );
                (None, Some(message), true)
            }
        }
    }

    /// Evaluates on the root object.
    pub(super) fn eval_root(&mut self, expr: &Compiled, component: &str) -> Option<Vec<Val>> {
        let root = self.root_value();
        self.eval_on(expr, &root, &[], component)
    }

    /// Whether pod `i` has label `key` set to `value` (read from its packed form unless it
    /// is unpacked already).
    pub(super) fn pod_label_is(&self, i: usize, key: &str, value: &str) -> bool {
        let path = ["metadata", "labels", key];
        match &self.values[i] {
            Some(pod) => pod.get_path(&path).and_then(Doc::as_str) == Some(value),
            None => self.pods[i].packed.text(&path) == Some(value),
        }
    }

    /// The root object as a jq value, unpacked once per resolution.
    pub(super) fn root_value(&mut self) -> Val {
        self.root
            .get_or_insert_with(|| self.root_object.value())
            .clone()
    }

    /// Evaluates on pod `i` and requires exactly one non-empty output, returned as text.
    pub(super) fn pod_key(&mut self, expr: &Compiled, i: usize, component: &str) -> Option<String> {
        let question = question(expr, KEY);
        let answer = self.ask(i, question, Some(expr), component, |r, i| {
            let (out, failure, remember) = r.evaluate(expr, i, component);
            let key = match out.as_deref() {
                Some([v]) if !matches!(v, Val::Null) => Some(to_text(v))
                    .filter(|s| !s.is_empty())
                    .map(String::into_boxed_str),
                _ => None,
            };
            Asked {
                answer: Answer::Text(key),
                failure,
                remember,
            }
        });
        match answer {
            Answer::Text(key) => key.map(String::from),
            Answer::Flag(_) => None,
        }
    }
}
