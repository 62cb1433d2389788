//! jq expressions on jaq: parse, safety-gate, compile once, evaluate with bounds.
//!
//! Semantics follow gojq (what Workload Map definitions are written against) for every
//! feature definitions use: input objects iterate in sorted key order (see [`value`]),
//! integral numbers print without a decimal point, a stream stops at its first error, and
//! non-finite arithmetic results (`1 / 0`) are errors.

pub mod budget;
pub mod fast;
pub mod gate;
pub mod metered;
pub mod paths;
pub mod value;

use jaq_core::load::lex::Token;
use jaq_core::load::parse::Def;
use jaq_core::load::{Arena, File, Lexer, Loader, Parser};
use jaq_core::{Compiler, Ctx, Vars};
pub use jaq_json::Val;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

pub use budget::{Budget, Exceeded};
use metered::MVal;
use metered::natives::{self, Data};
pub use value::{ConvertError, Limits};

/// Largest number of outputs one evaluation may produce (as upstream: 1,000).
pub const MAX_OUTPUTS: usize = 1000;

type Filter = jaq_core::Filter<Data>;

/// A compiled, safety-checked jq expression. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Expr {
    source: Arc<str>,
    /// The compiled jq program. Expressions the fast path evaluates drop theirs after the
    /// load-time check (a compiled program carries the whole standard library, ~100 KB)
    /// and compile it again only if asked to run on jaq.
    filter: Arc<OnceLock<Filter>>,
    vars: Arc<[String]>,
    /// Native evaluation for plain paths, literals and `//` between them.
    fast: Option<Arc<fast::Fast>>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

/// Why an expression could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// Not valid jq syntax.
    #[error("syntax error: {0}")]
    Syntax(String),
    /// Valid jq, but uses constructs the safety gate refuses.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Refused(Vec<gate::Refused>),
    /// Calls an undefined function or variable.
    #[error("{0}")]
    Undefined(String),
}

/// Why an evaluation failed. Never fatal: the resolver turns it into a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A jq runtime error (e.g. `null * 1`, `error("x")`).
    #[error("{0}")]
    Runtime(String),
    /// More than [`MAX_OUTPUTS`] outputs.
    #[error("more than {MAX_OUTPUTS} outputs")]
    TooManyOutputs,
    /// The caller's deadline passed.
    #[error("evaluation deadline exceeded")]
    Deadline,
    /// One of the evaluation's own budgets ran out.
    #[error("evaluation budget exceeded: {0}")]
    Budget(Exceeded),
}

/// The prelude every expression is compiled against: jaq's standard definitions plus
/// overrides that keep a definition from stopping the process.
fn prelude() -> &'static [Def<&'static str>] {
    static PRELUDE: OnceLock<Vec<Def<&'static str>>> = OnceLock::new();
    PRELUDE.get_or_init(|| {
        // gojq-compatible `join` (null as "", scalars as JSON), `from_entries` (k, name,
        // Name, K, Key; v, Value), sorted keys for `to_entries`/`keys_unsorted` (gojq sorts
        // object keys, also of objects built in the expression), and a `halt` that cannot
        // stop the process.
        const OVERRIDES: &str = r#"
            def join($x): _kg_join($x);
            def from_entries: reduce .[] as $x ({};
                . + { ($x | if .key == null then .k // .name // .Name // .K // .Key else .key end
                         | if type == "string" then . elif type == "null" then "null" else tojson end):
                      ($x | if has("value") then .value elif has("v") then .v else .Value end) });
            def to_entries: [keys[] as $k | {key: $k, value: .[$k]}];
            def keys_unsorted: keys;
            def with_entries(f): to_entries | map(f) | from_entries;
            def halt: error("halt is not allowed");
            def halt_error($code): error("halt_error is not allowed");
            def halt_error: halt_error(5);
        "#;
        let overrides = jaq_core::load::parse(OVERRIDES, |p| p.defs()).unwrap_or_default();
        let guards = jaq_core::load::parse(natives::GUARDS, |p| p.defs()).unwrap_or_default();
        jaq_core::defs()
            .chain(guards)
            .chain(jaq_std::defs())
            .chain(jaq_json::defs())
            .chain(overrides)
            .collect()
    })
}

/// Compiled programs by source and variables, shared by every expression (in any
/// definition, across reloads) with the same text while one of them lives.
type FilterCache =
    std::collections::HashMap<(String, Vec<String>), std::sync::Weak<OnceLock<Filter>>>;

fn filter_cache() -> &'static parking_lot::Mutex<FilterCache> {
    static CACHE: OnceLock<parking_lot::Mutex<FilterCache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The compiled program of `source`, shared with any live expression of the same text.
fn shared_filter(source: &str, vars: &[&str]) -> Result<Arc<OnceLock<Filter>>, CompileError> {
    let key = (
        source.to_owned(),
        vars.iter().map(|v| (*v).to_owned()).collect::<Vec<_>>(),
    );
    let cached = filter_cache()
        .lock()
        .get(&key)
        .and_then(std::sync::Weak::upgrade);
    if let Some(filter) = cached {
        return Ok(filter);
    }
    let filter = Arc::new(OnceLock::from(compile_filter(source, vars)?));
    let mut cache = filter_cache().lock();
    if cache.len() >= 1024 && cache.len().is_power_of_two() {
        cache.retain(|_, w| w.strong_count() > 0);
    }
    cache.insert(key, Arc::downgrade(&filter));
    Ok(filter)
}

/// Loads `source` with the prelude and compiles it for metered evaluation.
fn compile_filter(source: &str, vars: &[&str]) -> Result<Filter, CompileError> {
    let arena = Arena::default();
    let loader = Loader::new(prelude().iter().cloned());
    let modules = loader
        .load(
            &arena,
            File {
                code: source,
                path: (),
            },
        )
        .map_err(|_| CompileError::Syntax("could not be parsed".to_owned()))?;
    let filter = Compiler::default()
        .with_funs(natives::all())
        .with_global_vars(vars.iter().copied())
        .compile(modules)
        .map_err(|errors| {
            let names: Vec<String> = errors
                .iter()
                .flat_map(|(_, errs)| errs.iter())
                .map(|(name, kind)| format!("undefined {} `{name}`", kind.as_str()))
                .collect();
            CompileError::Undefined(names.join("; "))
        })?;
    Ok(filter)
}

impl Expr {
    /// Parses, gates and compiles `source`. `vars` names the global variables (with `$`)
    /// the expression may read; their values are passed to [`Expr::eval_with`] in order.
    pub fn compile_with(source: &str, vars: &[&str]) -> Result<Expr, CompileError> {
        let refused = gate::check_source(source);
        if !refused.is_empty() {
            return Err(CompileError::Refused(refused));
        }
        let tokens = Lexer::new(source).lex().map_err(|errors| {
            let (expected, found) = &errors[0];
            CompileError::Syntax(format!(
                "expected {} at `{}`",
                expected.as_str(),
                snippet(found)
            ))
        })?;
        let term = Parser::new(&tokens).parse(|p| p.term()).map_err(|errors| {
            let (expected, found) = &errors[0];
            let found = Token::opt_as_str(*found, source);
            let found = if found.is_empty() {
                "end of input".to_owned()
            } else {
                format!("`{}`", snippet(found))
            };
            CompileError::Syntax(format!("expected {}, found {found}", expected.as_str()))
        })?;
        let refused = gate::check(&term);
        if !refused.is_empty() {
            return Err(CompileError::Refused(refused));
        }
        let fast = if vars.is_empty() {
            fast::recognize(&term).map(Arc::new)
        } else {
            None
        };
        let filter = if fast.is_some() {
            // Checked, then dropped (compiled again only if asked to run on jaq).
            compile_filter(source, vars)?;
            Arc::new(OnceLock::new())
        } else {
            shared_filter(source, vars)?
        };
        Ok(Expr {
            source: source.into(),
            filter,
            vars: vars.iter().map(|v| (*v).to_owned()).collect(),
            fast,
        })
    }

    /// The compiled program (compiled again for a fast-path expression on first use).
    fn filter(&self) -> Result<&Filter, EvalError> {
        if let Some(f) = self.filter.get() {
            return Ok(f);
        }
        let vars: Vec<&str> = self.vars.iter().map(String::as_str).collect();
        let compiled = compile_filter(&self.source, &vars)
            .map_err(|e| EvalError::Runtime(format!("cannot compile again: {e}")))?;
        Ok(self.filter.get_or_init(|| compiled))
    }

    /// Parses, gates and compiles an expression without variables.
    pub fn compile(source: &str) -> Result<Expr, CompileError> {
        Self::compile_with(source, &[])
    }

    /// True when evaluated natively (a plain path, literal or `//` between them).
    pub fn is_fast(&self) -> bool {
        self.fast.is_some()
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates on `input`: all outputs, or the first error.
    pub fn eval(&self, input: &Val) -> Result<Vec<Val>, EvalError> {
        self.eval_with(input, &[], None)
    }

    /// True when the expression reads neither its input nor variables (a literal), so any
    /// input gives the same result.
    pub fn is_constant(&self) -> bool {
        matches!(self.fast.as_deref(), Some(fast::Fast::Lit(_)))
    }

    /// Evaluates with global variable values (in the order given at compile time) and an
    /// optional deadline, checked between outputs.
    pub fn eval_with(
        &self,
        input: &Val,
        vars: &[Val],
        deadline: Option<Instant>,
    ) -> Result<Vec<Val>, EvalError> {
        match self.eval_outputs(input, vars, deadline) {
            (outputs, None) => Ok(outputs),
            (_, Some(e)) => Err(e),
        }
    }

    /// Evaluates and returns the outputs produced before the first error, and that error.
    pub fn eval_outputs(
        &self,
        input: &Val,
        vars: &[Val],
        deadline: Option<Instant>,
    ) -> (Vec<Val>, Option<EvalError>) {
        if let Some(fast) = &self.fast {
            return match fast.eval(input) {
                Ok(out) => (out.into_iter().collect(), None),
                Err(e) => (Vec::new(), Some(EvalError::Runtime(e.0))),
            };
        }
        self.eval_jaq(input, vars, deadline)
    }

    /// Evaluates a fast-path expression on a packed value, unpacking only what it reads;
    /// `None` for any other expression, or when the packed value cannot answer alone (see
    /// [`fast::Fast::eval_packed`]): then evaluate the unpacked value.
    pub fn eval_packed(&self, input: &value::Packed) -> Option<Result<Vec<Val>, EvalError>> {
        let out = self.fast.as_deref()?.eval_packed(input)?;
        Some(match out {
            Ok(out) => Ok(out.into_iter().collect()),
            Err(e) => Err(EvalError::Runtime(e.0)),
        })
    }

    /// Evaluates with jaq (never the native fast path) under the configured
    /// [`budget::configured`] budget.
    pub fn eval_jaq(
        &self,
        input: &Val,
        vars: &[Val],
        deadline: Option<Instant>,
    ) -> (Vec<Val>, Option<EvalError>) {
        self.eval_budgeted(input, vars, deadline, budget::configured())
    }

    /// Evaluates with jaq under `budget` (the earlier of its time and `deadline` ends it):
    /// all outputs produced before the first error, and that error.
    pub fn eval_budgeted(
        &self,
        input: &Val,
        vars: &[Val],
        deadline: Option<Instant>,
        budget: Budget,
    ) -> (Vec<Val>, Option<EvalError>) {
        let filter = match self.filter() {
            Ok(f) => f,
            Err(e) => return (Vec::new(), Some(e)),
        };
        let mut values: Vec<MVal> = vars.iter().cloned().map(MVal::input).collect();
        values.resize_with(self.vars.len(), || MVal::input(Val::Null));
        let mut outputs = Vec::new();
        let own_time_ends = Instant::now() + budget.time;
        let outcome = budget::run(budget, deadline, || {
            let ctx = Ctx::<Data>::new(&filter.lut, Vars::new(values));
            for item in filter.id.run((ctx, MVal::input(input.clone()))) {
                let val = match item {
                    Ok(val) => val.into_inner(),
                    Err(exn) => {
                        return Some(match exn.get_err() {
                            Ok(err) => EvalError::Runtime(truncate(err.to_string())),
                            Err(_) => EvalError::Runtime("evaluation stopped".to_owned()),
                        });
                    }
                };
                if let Val::Num(n) = &val
                    && value::number_f64(n).is_some_and(|f| !f.is_finite())
                {
                    return Some(EvalError::Runtime(
                        "arithmetic produced a non-finite number (division by zero?)".to_owned(),
                    ));
                }
                if outputs.len() == MAX_OUTPUTS {
                    return Some(EvalError::TooManyOutputs);
                }
                outputs.push(val);
                budget::work(1);
            }
            None
        });
        let error = match outcome {
            budget::Outcome::Done(error) => error,
            budget::Outcome::Exceeded(Exceeded::Time)
                if deadline.is_some_and(|d| d <= own_time_ends) =>
            {
                Some(EvalError::Deadline)
            }
            budget::Outcome::Exceeded(what) => Some(EvalError::Budget(what)),
            budget::Outcome::Panicked(message) => Some(EvalError::Runtime(truncate(format!(
                "internal evaluator error: {message}"
            )))),
        };
        (outputs, error)
    }

    /// The first output, `None` when there is none.
    pub fn first(&self, input: &Val) -> Result<Option<Val>, EvalError> {
        Ok(self.eval(input)?.into_iter().next())
    }
}

fn snippet(s: &str) -> String {
    s.chars().take(24).collect()
}

fn truncate(mut s: String) -> String {
    const MAX: usize = 300;
    if s.len() > MAX {
        let cut = (0..=MAX)
            .rev()
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn programs_are_shared_by_text_and_fast_paths_compile_theirs_only_when_run_on_jaq() {
        let a = Expr::compile("[.a[] | select(. > 1)] | length").unwrap();
        let b = Expr::compile("[.a[] | select(. > 1)] | length").unwrap();
        assert!(
            Arc::ptr_eq(&a.filter, &b.filter),
            "one program for one text"
        );
        let c = Expr::compile_with("[.a[] | select(. > 1)] | length", &["$pod"]).unwrap();
        assert!(
            !Arc::ptr_eq(&a.filter, &c.filter),
            "other variables, other program"
        );
        let fast = Expr::compile(".spec.replicas // 1").unwrap();
        assert!(fast.is_fast() && fast.filter.get().is_none());
        let input = value::from_json(&json!({"spec": {"replicas": 3}}), Limits::default()).unwrap();
        let (out, err) = fast.eval_jaq(&input, &[], None);
        assert_eq!((out, err), (vec![Val::from(3isize)], None));
        assert!(fast.filter.get().is_some(), "compiled on first use");
    }

    fn run(src: &str, input: serde_json::Value) -> Result<Vec<serde_json::Value>, EvalError> {
        let expr = Expr::compile(src).expect("compiles");
        let input = value::from_json(&input, Limits::default()).expect("converts");
        Ok(expr.eval(&input)?.iter().map(value::to_json).collect())
    }

    #[test]
    fn evaluates_paths_and_alternatives() {
        let obj = json!({"spec": {"replicas": 3}, "metadata": {"labels": {"a/b": "x"}}});
        assert_eq!(run(".spec.replicas // 1", obj.clone()).unwrap(), [json!(3)]);
        assert_eq!(run(".spec.missing // 1", obj.clone()).unwrap(), [json!(1)]);
        assert_eq!(
            run(r#".metadata.labels["a/b"]"#, obj).unwrap(),
            [json!("x")]
        );
    }

    #[test]
    fn stops_at_first_error_and_rejects_division_by_zero() {
        assert!(matches!(
            run(r#"1, error("x"), 2"#, json!(null)),
            Err(EvalError::Runtime(_))
        ));
        assert!(run("1 / 0", json!(null)).is_err());
        assert!(run(r#""abc" | tonumber"#, json!(null)).is_err());
    }

    #[test]
    fn caps_outputs() {
        assert_eq!(run("range(1000)", json!(null)).unwrap().len(), 1000);
        assert_eq!(
            run("range(1000), 1", json!(null)),
            Err(EvalError::TooManyOutputs)
        );
    }

    #[test]
    fn gate_refuses_runaway_and_impure_constructs() {
        for src in [
            "def f: 1 + f; f",
            "repeat(.)",
            "range(1e9)",
            "..",
            "recurse",
            "env",
            "$ENV",
            "input",
            "halt",
            ".a = 1",
            "del(.a)",
            ".a |= 1",
            ".a += 1",
            "now",
            "limit(.n; .[])",
            "range(1e9; 0; -1)",
            "range(5; 0)",
            "[range(1000) as $a | range(1000)]",
            "limit(-1; .[])",
            "range(1001)",
        ] {
            match Expr::compile(src) {
                Err(CompileError::Refused(r)) => assert!(!r.is_empty(), "{src}"),
                other => panic!("{src}: expected refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn reports_syntax_and_undefined() {
        assert!(matches!(
            Expr::compile(".a |"),
            Err(CompileError::Syntax(_))
        ));
        assert!(matches!(
            Expr::compile("$nope"),
            Err(CompileError::Undefined(_))
        ));
    }

    #[test]
    fn fast_path_agrees_with_jaq() {
        let inputs = [
            json!({"metadata": {"labels": {"a/b": "x", "n": 0}, "name": "p"}, "spec": {"replicas": 3, "f": false}}),
            json!({"metadata": null, "spec": "text"}),
            json!([1, 2]),
            json!(null),
            json!("s"),
        ];
        for src in [
            ".",
            r#".metadata.labels["a/b"]"#,
            ".metadata.labels.n",
            ".spec.replicas // 1",
            ".spec.f // \"d\"",
            ".spec.missing // .spec.replicas // 7",
            ".spec.x?",
            ".spec.x",
            ".a.b.c",
            "1",
            "\"lit\"",
            "null // false",
            ".metadata.labels[\"q\"]? // \"0\"",
        ] {
            let expr = Expr::compile(src).unwrap();
            assert!(expr.is_fast(), "{src} should take the fast path");
            for input in &inputs {
                let input = value::from_json(input, Limits::default()).unwrap();
                let (a, ea) = expr.eval_outputs(&input, &[], None);
                let (b, eb) = expr.eval_jaq(&input, &[], None);
                let a: Vec<_> = a.iter().map(value::to_json).collect();
                let b: Vec<_> = b.iter().map(value::to_json).collect();
                assert_eq!(
                    (a, ea.is_some()),
                    (b, eb.is_some()),
                    "{src} on {}",
                    value::to_json(&input)
                );
            }
        }
        assert!(!Expr::compile(".a[0]").unwrap().is_fast());
    }

    #[test]
    fn fast_paths_on_packed_values_answer_as_on_unpacked_ones_or_not_at_all() {
        let inputs = [
            json!({"metadata": {"labels": {"a/b": "x", "n": 0, "o": {"p": [1]}}, "name": "p"},
                   "spec": {"replicas": 3, "f": false, "x": null}}),
            json!({"metadata": null, "spec": "text"}),
            json!({"metadata": {"labels": "flat"}, "spec": [1]}),
            json!([1, 2]),
            json!(null),
            json!("s"),
        ];
        let mut answered = 0;
        let mut declined = Vec::new();
        for src in [
            ".",
            r#".metadata.labels["a/b"]"#,
            ".metadata.labels.n",
            ".metadata.labels.o",
            ".metadata.labels.o.p",
            ".spec.replicas // 1",
            ".spec.f // \"d\"",
            ".spec.missing // .spec.replicas // 7",
            ".spec.x?",
            ".spec.x.y",
            ".spec.x",
            ".a.b.c",
            "1",
            "null // false",
            ".metadata.labels[\"q\"]? // \"0\"",
            ".metadata.labels[\"q\"] // \"0\"",
        ] {
            let expr = Expr::compile(src).unwrap();
            for input in &inputs {
                let packed =
                    value::Packed::pack(input, &value::Keep::All, Limits::default()).unwrap();
                let unpacked = packed.to_val();
                let whole = expr.eval_with(&unpacked, &[], None);
                match expr.eval_packed(&packed) {
                    Some(out) => {
                        answered += 1;
                        let show = |r: Result<Vec<Val>, EvalError>| {
                            r.map(|o| o.iter().map(value::to_json).collect::<Vec<_>>())
                                .map_err(|e| e.to_string())
                        };
                        assert_eq!(show(out), show(whole), "{src} on {input}");
                    }
                    // Declined only where the unpacked value fails (jaq's message shows the
                    // value the path got stuck at).
                    None => {
                        assert!(whole.is_err(), "{src} on {input} declined");
                        declined.push(format!("{src} on {input}"));
                    }
                }
            }
        }
        assert!(
            answered >= 50,
            "{answered} answered, {} declined",
            declined.len()
        );
        assert!(declined.contains(&r#".spec.x on {"metadata":null,"spec":"text"}"#.to_owned()));
        // Not a fast path, or an empty buffer: the caller unpacks.
        let packed = value::Packed::pack(&inputs[0], &value::Keep::All, Limits::default()).unwrap();
        assert!(
            Expr::compile(".spec | length")
                .unwrap()
                .eval_packed(&packed)
                .is_none()
        );
        assert!(
            Expr::compile(".spec")
                .unwrap()
                .eval_packed(&value::Packed::default())
                .is_none()
        );
    }

    #[test]
    fn global_variables() {
        let expr = Expr::compile_with("$keys[0] + .x", &["$keys"]).unwrap();
        let input = value::from_json(&json!({"x": "b"}), Limits::default()).unwrap();
        let keys = value::from_json(&json!(["a"]), Limits::default()).unwrap();
        let out = expr.eval_with(&input, &[keys], None).unwrap();
        assert_eq!(value::to_json(&out[0]), json!("ab"));
    }
}
