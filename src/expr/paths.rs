//! Static extraction of the field paths a jq expression reads, on jaq's parsed AST.
//!
//! An abstract interpretation: every term maps its input (an abstract value) to the abstract
//! values it may output. A value read from the input is a [`FieldPath`] (`.spec.workers[].replicas`);
//! literals, constructed arrays and objects are tracked so that `[.a, .b] | .[]`,
//! `{x: .a} | .x`, `to_entries[] | .value` and `… as $x | $x.b` still resolve to input
//! fields. Every path navigated from the input is recorded as a [`Read`], every `==`/`!=`
//! between an input field and a literal as a [`Comparison`], and the expression's own outputs
//! as [`Output`]s. What the analysis cannot follow (a `reduce` accumulator, `getpath` with a
//! computed path, a user `def`) is never guessed: it is listed in [`Analysis::unchecked`].
//!
//! Pure: no evaluation happens, nothing is read but the source.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::load::{Lexer, Parser};
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part};
use serde_json::Value as Json;
use std::collections::BTreeSet;
use std::fmt;

/// Most alternative values one term is tracked with; beyond it the rest is "not checked".
const MAX_VALUES: usize = 64;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// `.name` or `["name"]`.
    Key(String),
    /// `[n]` with a literal integer (also `first`, `last`, `nth(n)`).
    Index(i64),
    /// `[]`: every element (or every value of an object).
    Each,
    /// `[a:b]`: a slice of an array or string.
    Slice,
    /// `[expr]` with a computed key or index.
    Dynamic,
}

/// Where a field path starts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Root {
    /// The expression's input (`.`).
    Input,
    /// A global variable standing for an object (e.g. `$pod`).
    Var(String),
}

/// A path into the input (or a global object), e.g. `.spec.workers[].replicas`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath {
    /// Where it starts.
    pub root: Root,
    /// The steps.
    pub steps: Vec<Step>,
}

impl FieldPath {
    /// The input itself (`.`).
    pub fn input() -> FieldPath {
        FieldPath {
            root: Root::Input,
            steps: Vec::new(),
        }
    }

    fn with(&self, step: Step) -> FieldPath {
        let mut steps = self.steps.clone();
        steps.push(step);
        FieldPath {
            root: self.root.clone(),
            steps,
        }
    }

    /// True when `self` is `other` or a path below it.
    pub fn starts_with(&self, other: &FieldPath) -> bool {
        self.root == other.root && self.steps.starts_with(&other.steps)
    }
}

/// True when `key` can be written as `.key` in jq.
fn plain_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Key(k) if plain_key(k) => write!(f, ".{k}"),
            Step::Key(k) => write!(f, "[{}]", Json::String(k.clone())),
            Step::Index(i) => write!(f, "[{i}]"),
            Step::Each => f.write_str("[]"),
            Step::Slice => f.write_str("[:]"),
            Step::Dynamic => f.write_str("[…]"),
        }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Root::Var(name) = &self.root {
            f.write_str(name)?;
        } else if self.steps.is_empty()
            || !matches!(self.steps[0], Step::Key(ref k) if plain_key(k))
        {
            f.write_str(".")?;
        }
        for step in &self.steps {
            step.fmt(f)?;
        }
        Ok(())
    }
}

/// One field path the expression reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Read {
    /// The path.
    pub path: FieldPath,
    /// Read under `?` or `try`: a missing or mistyped field yields nothing instead of an
    /// error.
    pub optional: bool,
}

/// `path == value` or `path != value` with a literal.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The field compared.
    pub path: FieldPath,
    /// The literal it is compared with.
    pub value: Json,
}

/// One output of the expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A field of the input, as it is.
    Field(FieldPath),
    /// A literal.
    Literal(Json),
    /// Anything else (computed, constructed, or not followed).
    Computed,
}

/// What an expression reads.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Field paths read, the longest of each chain (a path that is the prefix of another
    /// read is left out), sorted.
    pub reads: Vec<Read>,
    /// Comparisons of a field with a literal.
    pub comparisons: Vec<Comparison>,
    /// The expression's outputs.
    pub outputs: Vec<Output>,
    /// What could not be analysed, each as a short phrase (e.g. "`getpath` with a computed
    /// path"): the reads below those points are not known.
    pub unchecked: Vec<String>,
}

/// Why an expression cannot be analysed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AnalyseError {
    /// The lexer refuses it.
    #[error("cannot be lexed")]
    Lex,
    /// The parser refuses it.
    #[error("cannot be parsed")]
    Parse,
}

/// Parses `source` and extracts what it reads. `globals` are the global variables the
/// expression may use; each of `objects` (a subset, e.g. `$pod`) stands for an object whose
/// fields are tracked like the input's.
pub fn analyse(source: &str, globals: &[&str], objects: &[&str]) -> Result<Analysis, AnalyseError> {
    let tokens = Lexer::new(source).lex().map_err(|_| AnalyseError::Lex)?;
    let term = Parser::new(&tokens)
        .parse(|p| p.term())
        .map_err(|_| AnalyseError::Parse)?;
    Ok(analyse_term(&term, globals, objects))
}

/// [`analyse`] on a parsed term.
pub fn analyse_term(term: &Term<&str>, globals: &[&str], objects: &[&str]) -> Analysis {
    let mut cx = Cx {
        globals: globals
            .iter()
            .map(|g| {
                let value = if objects.contains(g) {
                    Abs::Field(
                        FieldPath {
                            root: Root::Var((*g).to_owned()),
                            steps: Vec::new(),
                        },
                        false,
                    )
                } else {
                    Abs::Computed
                };
                ((*g).to_owned(), value)
            })
            .collect(),
        env: Vec::new(),
        reads: BTreeSet::new(),
        comparisons: Vec::new(),
        unchecked: Vec::new(),
        optional: 0,
    };
    let input = Abs::Field(FieldPath::input(), false);
    let outputs = cx.eval(term, &input);
    let outputs = outputs
        .into_iter()
        .map(|v| match v {
            Abs::Field(p, _) => Output::Field(p),
            Abs::Lit(v) => Output::Literal(v),
            _ => Output::Computed,
        })
        .fold(Vec::new(), |mut out, o| {
            if !out.contains(&o) {
                out.push(o);
            }
            out
        });
    // Keep the longest path of each chain (the same path read both optionally and not
    // counts as not optional).
    let all: Vec<Read> = cx.reads.into_iter().collect();
    let mut reads: Vec<Read> = Vec::new();
    for r in &all {
        let longer = all
            .iter()
            .any(|o| o.path != r.path && o.path.starts_with(&r.path));
        let same_essential = !r.optional
            || !all
                .iter()
                .any(|o| o.path == r.path && !o.optional && o != r);
        if !longer && same_essential && !reads.iter().any(|x| x.path == r.path) {
            reads.push(r.clone());
        }
    }
    let mut unchecked = cx.unchecked;
    unchecked.dedup();
    Analysis {
        reads,
        comparisons: cx.comparisons,
        outputs,
        unchecked,
    }
}

/// An abstract value.
#[derive(Debug, Clone, PartialEq)]
enum Abs {
    /// A value of the input (or of a global object) at this path; `true` when reached
    /// under `?`/`try`.
    Field(FieldPath, bool),
    /// A value built from the input field at this path by arithmetic (`.a + .b` merges
    /// objects or concatenates arrays): navigating it reads the field's parts, but it is not
    /// the field itself (no comparison or output is about the field).
    Part(FieldPath, bool),
    /// A literal scalar.
    Lit(Json),
    /// A value computed from others (a number, a string, a boolean): not part of the input.
    Computed,
    /// A constructed array: any of these elements.
    Array(Vec<Abs>),
    /// A constructed object with literal keys.
    Object(Vec<(String, Vec<Abs>)>),
    /// The analysis lost track (the reason): navigating into it reads unknown fields.
    Unknown(&'static str),
}

struct Cx {
    globals: Vec<(String, Abs)>,
    /// Variables bound by `as`, innermost last.
    env: Vec<(String, Vec<Abs>)>,
    reads: BTreeSet<Read>,
    comparisons: Vec<Comparison>,
    unchecked: Vec<String>,
    /// Depth of `?`/`try` around the term being analysed.
    optional: usize,
}

fn push_unique(out: &mut Vec<Abs>, v: Abs) {
    if !out.contains(&v) {
        out.push(v);
    }
}

fn lit_of(term: &Term<&str>) -> Option<Json> {
    match term {
        Term::Num(n) => {
            let f: f64 = n.parse().ok()?;
            if f.fract() == 0.0 && f.abs() < 9e15 {
                Some(Json::from(f as i64))
            } else {
                serde_json::Number::from_f64(f).map(Json::Number)
            }
        }
        Term::Str(None, parts) => {
            let mut s = String::new();
            for part in parts {
                match part {
                    StrPart::Str(t) => s.push_str(t),
                    StrPart::Char(c) => s.push(*c),
                    StrPart::Term(_) => return None,
                }
            }
            Some(Json::String(s))
        }
        Term::Call(name, args) if args.is_empty() => match *name {
            "null" => Some(Json::Null),
            "true" => Some(Json::Bool(true)),
            "false" => Some(Json::Bool(false)),
            _ => None,
        },
        Term::Neg(t) => match lit_of(t)? {
            Json::Number(n) => n.as_i64().map(|i| Json::from(-i)).or_else(|| {
                n.as_f64()
                    .and_then(|f| serde_json::Number::from_f64(-f))
                    .map(Json::Number)
            }),
            _ => None,
        },
        _ => None,
    }
}

impl Cx {
    fn not_checked(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.unchecked.contains(&what) {
            self.unchecked.push(what);
        }
    }

    fn cap(&mut self, mut values: Vec<Abs>) -> Vec<Abs> {
        if values.len() > MAX_VALUES {
            values.truncate(MAX_VALUES);
            self.not_checked(format!("more than {MAX_VALUES} alternative values"));
        }
        values
    }

    /// Navigates one step from `value`.
    fn nav(&mut self, value: &Abs, step: &Step, optional: bool, out: &mut Vec<Abs>) {
        let optional = optional || self.optional > 0;
        match value {
            Abs::Field(path, opt) | Abs::Part(path, opt) => {
                let path = path.with(step.clone());
                let opt = *opt || optional;
                self.reads.insert(Read {
                    path: path.clone(),
                    optional: opt,
                });
                push_unique(out, Abs::Field(path, opt));
            }
            Abs::Lit(Json::Null) => push_unique(out, Abs::Lit(Json::Null)),
            Abs::Lit(_) | Abs::Computed => push_unique(out, Abs::Computed),
            Abs::Array(items) => match step {
                Step::Each | Step::Index(_) | Step::Dynamic => {
                    for item in items {
                        push_unique(out, item.clone());
                    }
                }
                Step::Slice => push_unique(out, value.clone()),
                // Indexing an array with a key is an error: no output.
                Step::Key(_) => {}
            },
            Abs::Object(entries) => match step {
                Step::Key(k) => match entries.iter().find(|(name, _)| name == k) {
                    Some((_, values)) => values.iter().for_each(|v| push_unique(out, v.clone())),
                    None => push_unique(out, Abs::Lit(Json::Null)),
                },
                Step::Each | Step::Dynamic => {
                    for (_, values) in entries {
                        values.iter().for_each(|v| push_unique(out, v.clone()));
                    }
                }
                Step::Index(_) | Step::Slice => {}
            },
            Abs::Unknown(reason) => {
                self.not_checked(format!("`{step}` on {reason}"));
                push_unique(out, Abs::Unknown(reason));
            }
        }
    }

    fn nav_all(&mut self, values: &[Abs], step: &Step, optional: bool) -> Vec<Abs> {
        let mut out = Vec::new();
        for v in values {
            self.nav(v, step, optional, &mut out);
        }
        self.cap(out)
    }

    fn lookup(&mut self, name: &str) -> Vec<Abs> {
        if let Some((_, values)) = self.env.iter().rev().find(|(n, _)| n == name) {
            return values.clone();
        }
        if let Some((_, value)) = self.globals.iter().find(|(n, _)| n == name) {
            return vec![value.clone()];
        }
        if name == "$__loc__" {
            return vec![Abs::Computed];
        }
        self.not_checked(format!("the variable `{name}`"));
        vec![Abs::Unknown("an unknown variable")]
    }

    /// Evaluates `term` on one input value.
    fn eval(&mut self, term: &Term<&str>, input: &Abs) -> Vec<Abs> {
        if let Some(lit) = lit_of(term) {
            return vec![Abs::Lit(lit)];
        }
        let out = match term {
            Term::Id => vec![input.clone()],
            Term::Recurse => {
                self.not_checked("`..`");
                vec![Abs::Unknown("`..`")]
            }
            Term::Num(_) => vec![Abs::Computed],
            Term::Str(_, parts) => {
                for part in parts {
                    if let StrPart::Term(t) = part {
                        self.eval(t, input);
                    }
                }
                vec![Abs::Computed]
            }
            Term::Arr(None) => vec![Abs::Array(Vec::new())],
            Term::Arr(Some(t)) => {
                let items = self.eval(t, input);
                vec![Abs::Array(items)]
            }
            Term::Obj(entries) => self.object(entries, input),
            Term::Neg(t) => {
                self.eval(t, input);
                vec![Abs::Computed]
            }
            Term::BinOp(l, op, r) => self.binop(l, op, r, input),
            Term::Label(_, t) => self.eval(t, input),
            Term::Break(_) => Vec::new(),
            Term::Fold(_, source, pattern, args) => self.fold(source, pattern, args, input),
            Term::TryCatch(t, catch) => {
                self.optional += 1;
                let mut out = self.eval(t, input);
                self.optional -= 1;
                if let Some(c) = catch {
                    for v in self.eval(c, &Abs::Computed) {
                        push_unique(&mut out, v);
                    }
                }
                out
            }
            Term::IfThenElse(branches, otherwise) => {
                let mut out = Vec::new();
                for (cond, then) in branches {
                    self.eval(cond, input);
                    for v in self.eval(then, input) {
                        push_unique(&mut out, v);
                    }
                }
                match otherwise {
                    Some(e) => self
                        .eval(e, input)
                        .into_iter()
                        .for_each(|v| push_unique(&mut out, v)),
                    None => push_unique(&mut out, input.clone()),
                }
                out
            }
            Term::Def(_, body) => {
                self.not_checked("a user `def`");
                self.eval(body, &Abs::Unknown("a value inside a user `def`"));
                vec![Abs::Unknown("the result of a user `def`")]
            }
            Term::Call(name, args) => self.call(name, args, input),
            Term::Var(name) => self.lookup(name),
            Term::Path(base, path) => {
                let mut values = self.eval(base, input);
                for (part, opt) in &path.0 {
                    let optional = matches!(opt, Opt::Optional);
                    let steps: Vec<Step> = match part {
                        Part::Index(index) => self
                            .eval(index, input)
                            .into_iter()
                            .map(|k| match k {
                                Abs::Lit(Json::String(s)) => Step::Key(s),
                                Abs::Lit(Json::Number(n)) if n.as_i64().is_some() => {
                                    Step::Index(n.as_i64().unwrap_or_default())
                                }
                                _ => Step::Dynamic,
                            })
                            .fold(Vec::new(), |mut acc, s| {
                                if !acc.contains(&s) {
                                    acc.push(s);
                                }
                                acc
                            }),
                        Part::Range(None, None) => vec![Step::Each],
                        Part::Range(from, to) => {
                            from.iter().chain(to.iter()).for_each(|t| {
                                self.eval(t, input);
                            });
                            vec![Step::Slice]
                        }
                    };
                    let mut next = Vec::new();
                    for step in &steps {
                        for v in self.nav_all(&values, step, optional) {
                            push_unique(&mut next, v);
                        }
                    }
                    values = self.cap(next);
                }
                values
            }
        };
        self.cap(out)
    }

    fn eval_all(&mut self, term: &Term<&str>, inputs: &[Abs]) -> Vec<Abs> {
        let mut out = Vec::new();
        for input in inputs {
            for v in self.eval(term, input) {
                push_unique(&mut out, v);
            }
        }
        self.cap(out)
    }

    fn object(&mut self, entries: &[(Term<&str>, Option<Term<&str>>)], input: &Abs) -> Vec<Abs> {
        let mut fields: Vec<(String, Vec<Abs>)> = Vec::new();
        let mut computed_keys = false;
        for (key, value) in entries {
            let name = match key {
                Term::Var(v) => Some(v.trim_start_matches('$').to_owned()),
                other => match lit_of(other) {
                    Some(Json::String(s)) => Some(s),
                    _ => {
                        self.eval(other, input);
                        None
                    }
                },
            };
            let values = match (value, key) {
                (Some(v), _) => self.eval(v, input),
                (None, Term::Var(v)) => self.lookup(v),
                (None, _) => match &name {
                    Some(n) => {
                        self.nav_all(std::slice::from_ref(input), &Step::Key(n.clone()), false)
                    }
                    None => vec![Abs::Computed],
                },
            };
            match name {
                Some(n) => fields.push((n, values)),
                None => computed_keys = true,
            }
        }
        if computed_keys {
            vec![Abs::Unknown("an object with computed keys")]
        } else {
            vec![Abs::Object(fields)]
        }
    }

    fn binop(
        &mut self,
        l: &Term<&str>,
        op: &BinaryOp<&str>,
        r: &Term<&str>,
        input: &Abs,
    ) -> Vec<Abs> {
        match op {
            BinaryOp::Pipe(None) => {
                let left = self.eval(l, input);
                self.eval_all(r, &left)
            }
            BinaryOp::Pipe(Some(pattern)) => {
                let left = self.eval(l, input);
                let before = self.env.len();
                self.bind(pattern, &left, input);
                let out = self.eval(r, input);
                self.env.truncate(before);
                out
            }
            BinaryOp::Comma | BinaryOp::Alt => {
                let mut out = self.eval(l, input);
                for v in self.eval(r, input) {
                    push_unique(&mut out, v);
                }
                out
            }
            BinaryOp::Or | BinaryOp::And => {
                self.eval(l, input);
                self.eval(r, input);
                vec![Abs::Computed]
            }
            BinaryOp::Cmp(cmp) => {
                let left = self.eval(l, input);
                let right = self.eval(r, input);
                if matches!(cmp, Cmp::Eq | Cmp::Ne) {
                    for a in &left {
                        for b in &right {
                            let pair = match (a, b) {
                                (Abs::Field(p, _), Abs::Lit(v))
                                | (Abs::Lit(v), Abs::Field(p, _)) => Some((p, v)),
                                _ => None,
                            };
                            if let Some((path, value)) = pair {
                                let c = Comparison {
                                    path: path.clone(),
                                    value: value.clone(),
                                };
                                if !self.comparisons.contains(&c) {
                                    self.comparisons.push(c);
                                }
                            }
                        }
                    }
                }
                vec![Abs::Computed]
            }
            // Division splits strings and divides numbers, the remainder is a number: new
            // values, not parts of the operands.
            BinaryOp::Math(Math::Div | Math::Rem) => {
                self.eval(l, input);
                self.eval(r, input);
                vec![Abs::Computed]
            }
            BinaryOp::Math(_) => {
                let left = self.eval(l, input);
                let right = self.eval(r, input);
                let operands: Vec<&Abs> = left
                    .iter()
                    .chain(&right)
                    .filter(|v| !matches!(v, Abs::Lit(Json::Null)))
                    .collect();
                if operands
                    .iter()
                    .all(|v| matches!(v, Abs::Lit(_) | Abs::Computed))
                {
                    return vec![Abs::Computed];
                }
                // Arrays concatenate, objects merge: the parts of the result are the parts of
                // the operands.
                if operands.iter().all(|v| matches!(v, Abs::Array(_))) {
                    let mut items = Vec::new();
                    for v in operands {
                        if let Abs::Array(i) = v {
                            i.iter().for_each(|x| push_unique(&mut items, x.clone()));
                        }
                    }
                    return vec![Abs::Array(items)];
                }
                let mut out = Vec::new();
                for v in operands {
                    let part = match v {
                        Abs::Field(p, o) | Abs::Part(p, o) => Abs::Part(p.clone(), *o),
                        Abs::Lit(_) | Abs::Computed => continue,
                        other => other.clone(),
                    };
                    push_unique(&mut out, part);
                }
                out
            }
            BinaryOp::Assign | BinaryOp::Update | BinaryOp::UpdateMath(_) | BinaryOp::UpdateAlt => {
                self.not_checked("an assignment");
                self.eval(l, input);
                self.eval(r, input);
                vec![Abs::Unknown("the result of an assignment")]
            }
        }
    }

    /// Binds the variables of `pattern` to `values` (array and object patterns navigate).
    fn bind(&mut self, pattern: &Pattern<&str>, values: &[Abs], input: &Abs) {
        match pattern {
            Pattern::Var(name) => self.env.push(((*name).to_owned(), values.to_vec())),
            Pattern::Arr(items) => {
                for (i, p) in items.iter().enumerate() {
                    let at = self.nav_all(values, &Step::Index(i as i64), false);
                    self.bind(p, &at, input);
                }
            }
            Pattern::Obj(entries) => {
                for (key, p) in entries {
                    let step = match lit_of(key) {
                        Some(Json::String(s)) => Step::Key(s),
                        _ => {
                            self.eval(key, input);
                            Step::Dynamic
                        }
                    };
                    let at = self.nav_all(values, &step, false);
                    self.bind(p, &at, input);
                }
            }
        }
    }

    /// `reduce`/`foreach`: the source and the initial value run on the input; the update
    /// runs on an accumulator the analysis does not follow.
    fn fold(
        &mut self,
        source: &Term<&str>,
        pattern: &Pattern<&str>,
        args: &[Term<&str>],
        input: &Abs,
    ) -> Vec<Abs> {
        let items = self.eval(source, input);
        let before = self.env.len();
        let init = args
            .first()
            .map(|t| self.eval(t, input))
            .unwrap_or_default();
        self.bind(pattern, &items, input);
        let mut acc = init;
        push_unique(&mut acc, Abs::Unknown("a `reduce`/`foreach` accumulator"));
        for t in args.iter().skip(1) {
            self.eval_all(t, &acc);
        }
        self.env.truncate(before);
        vec![Abs::Unknown("the result of `reduce`/`foreach`")]
    }

    /// The elements of `input` (`.[]`).
    fn elements(&mut self, input: &Abs) -> Vec<Abs> {
        self.nav_all(std::slice::from_ref(input), &Step::Each, false)
    }

    fn call(&mut self, name: &str, args: &[Term<&str>], input: &Abs) -> Vec<Abs> {
        let arity = args.len();
        match (name, arity) {
            ("empty", 0) => Vec::new(),
            ("error", _) => {
                args.iter().for_each(|a| {
                    self.eval(a, input);
                });
                Vec::new()
            }
            ("select", 1) => {
                self.eval(&args[0], input);
                vec![input.clone()]
            }
            (
                "values" | "nulls" | "booleans" | "numbers" | "strings" | "arrays" | "objects"
                | "iterables" | "scalars",
                0,
            ) => vec![input.clone()],
            ("first", 0) => self.nav_all(std::slice::from_ref(input), &Step::Index(0), false),
            ("last", 0) => self.nav_all(std::slice::from_ref(input), &Step::Index(-1), false),
            ("nth", 1) => {
                let n = self.eval(&args[0], input);
                let step = match n.as_slice() {
                    [Abs::Lit(Json::Number(n))] if n.as_i64().is_some() => {
                        Step::Index(n.as_i64().unwrap_or_default())
                    }
                    _ => Step::Dynamic,
                };
                self.nav_all(std::slice::from_ref(input), &step, false)
            }
            ("first" | "last" | "isempty", 1) => {
                let out = self.eval(&args[0], input);
                if name == "isempty" {
                    vec![Abs::Computed]
                } else {
                    out
                }
            }
            ("limit" | "nth", 2) => {
                self.eval(&args[0], input);
                self.eval(&args[1], input)
            }
            ("min" | "max", 0) => self.elements(input),
            ("reverse" | "sort" | "unique", 0) => vec![input.clone()],
            ("min_by" | "max_by" | "sort_by" | "unique_by" | "group_by", 1) => {
                let elements = self.elements(input);
                self.eval_all(&args[0], &elements);
                match name {
                    "min_by" | "max_by" => elements,
                    "group_by" => vec![Abs::Array(vec![Abs::Array(elements)])],
                    _ => vec![input.clone()],
                }
            }
            ("map", 1) => {
                let elements = self.elements(input);
                let mapped = self.eval_all(&args[0], &elements);
                vec![Abs::Array(mapped)]
            }
            ("any" | "all", 1) => {
                let elements = self.elements(input);
                self.eval_all(&args[0], &elements);
                vec![Abs::Computed]
            }
            ("any" | "all", 2) => {
                let generated = self.eval(&args[0], input);
                self.eval_all(&args[1], &generated);
                vec![Abs::Computed]
            }
            ("to_entries", 0) => {
                let values = self.elements(input);
                vec![Abs::Array(vec![Abs::Object(vec![
                    ("key".to_owned(), vec![Abs::Computed]),
                    ("value".to_owned(), values),
                ])])]
            }
            ("with_entries" | "map_values", 1) => {
                let values = self.elements(input);
                let entry = if name == "with_entries" {
                    vec![Abs::Object(vec![
                        ("key".to_owned(), vec![Abs::Computed]),
                        ("value".to_owned(), values),
                    ])]
                } else {
                    values
                };
                self.eval_all(&args[0], &entry);
                vec![Abs::Unknown("the result of `with_entries`/`map_values`")]
            }
            ("has", 1) => {
                for key in self.eval(&args[0], input) {
                    let step = match key {
                        Abs::Lit(Json::String(s)) => Step::Key(s),
                        Abs::Lit(Json::Number(n)) if n.as_i64().is_some() => {
                            Step::Index(n.as_i64().unwrap_or_default())
                        }
                        _ => Step::Dynamic,
                    };
                    // `has` never fails on a missing field, but one the schema does not
                    // know is always false: it is a read.
                    self.nav_all(std::slice::from_ref(input), &step, true);
                }
                vec![Abs::Computed]
            }
            ("getpath", 1) => {
                // Followed only for a literal array written out (`getpath(["a", 0, "a"])`):
                // an array's abstract value is the set of its items, not their sequence.
                self.eval(&args[0], input);
                match literal_path(&args[0]) {
                    Some(steps) => {
                        let mut at = vec![input.clone()];
                        for s in &steps {
                            at = self.nav_all(&at, s, true);
                        }
                        let mut out = Vec::new();
                        at.into_iter().for_each(|v| push_unique(&mut out, v));
                        out
                    }
                    None => {
                        self.not_checked("`getpath` with a computed path");
                        vec![Abs::Unknown("a value read with `getpath`")]
                    }
                }
            }
            ("add" | "flatten" | "from_entries" | "transpose" | "pick", _) => {
                args.iter().for_each(|a| {
                    self.eval(a, input);
                });
                vec![Abs::Unknown(match name {
                    "add" => "the result of `add`",
                    "flatten" => "the result of `flatten`",
                    "from_entries" => "the result of `from_entries`",
                    "pick" => "the result of `pick`",
                    _ => "the result of `transpose`",
                })]
            }
            ("range", _) => {
                args.iter().for_each(|a| {
                    self.eval(a, input);
                });
                vec![Abs::Computed]
            }
            _ if is_scalar_builtin(name) => {
                args.iter().for_each(|a| {
                    self.eval(a, input);
                });
                vec![Abs::Computed]
            }
            _ => {
                self.not_checked(format!("`{name}/{arity}`"));
                args.iter().for_each(|a| {
                    self.eval(a, input);
                });
                vec![Abs::Unknown("the result of an unknown function")]
            }
        }
    }
}

/// Builtins whose result is a scalar (or a value built from scratch, such as `fromjson`,
/// `match`, `capture`, `split`): never a part of the input. Their arguments run on the
/// same input and are analysed for reads.
fn is_scalar_builtin(name: &str) -> bool {
    matches!(
        name,
        "not"
            | "length"
            | "utf8bytelength"
            | "type"
            | "tostring"
            | "tonumber"
            | "tojson"
            | "fromjson"
            | "explode"
            | "implode"
            | "keys"
            | "keys_unsorted"
            | "in"
            | "inside"
            | "contains"
            | "index"
            | "rindex"
            | "indices"
            | "isboolean"
            | "isnumber"
            | "isstring"
            | "isarray"
            | "isobject"
            | "join"
            | "split"
            | "splits"
            | "test"
            | "match"
            | "capture"
            | "sub"
            | "gsub"
            | "scan"
            | "ascii_downcase"
            | "ascii_upcase"
            | "startswith"
            | "endswith"
            | "ltrimstr"
            | "rtrimstr"
            | "trim"
            | "ltrim"
            | "rtrim"
            | "floor"
            | "ceil"
            | "round"
            | "sqrt"
            | "abs"
            | "fabs"
            | "pow"
            | "log"
            | "log2"
            | "log10"
            | "exp"
            | "exp2"
            | "exp10"
            | "isnan"
            | "isinfinite"
            | "isfinite"
            | "isnormal"
            | "infinite"
            | "nan"
            | "significand"
            | "trunc"
            | "@text"
            | "@json"
            | "@html"
            | "@uri"
            | "@sh"
            | "@base64"
            | "@base64d"
    )
}

/// The steps of a literal array of keys and indexes (`["spec", "x", 0]`), in order.
fn literal_path(term: &Term<&str>) -> Option<Vec<Step>> {
    fn items<'t>(t: &'t Term<&'t str>, out: &mut Vec<&'t Term<&'t str>>) {
        match t {
            Term::BinOp(l, BinaryOp::Comma, r) => {
                items(l, out);
                items(r, out);
            }
            other => out.push(other),
        }
    }
    let mut terms = Vec::new();
    match term {
        Term::Arr(None) => {}
        Term::Arr(Some(body)) => items(body, &mut terms),
        _ => return None,
    }
    terms
        .into_iter()
        .map(|t| match lit_of(t)? {
            Json::String(s) => Some(Step::Key(s)),
            Json::Number(n) => n.as_i64().map(Step::Index),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(src: &str) -> Vec<String> {
        analyse(src, &[], &[])
            .unwrap()
            .reads
            .iter()
            .map(|r| r.path.to_string())
            .collect()
    }

    fn outputs(src: &str) -> Vec<String> {
        analyse(src, &[], &[])
            .unwrap()
            .outputs
            .iter()
            .map(|o| match o {
                Output::Field(p) => p.to_string(),
                Output::Literal(v) => v.to_string(),
                Output::Computed => "computed".to_owned(),
            })
            .collect()
    }

    #[test]
    fn plain_paths_and_alternatives() {
        assert_eq!(reads(".spec.replicas // 1"), [".spec.replicas"]);
        assert_eq!(outputs(".spec.replicas // 1"), [".spec.replicas", "1"]);
        assert_eq!(
            reads(r#".metadata.labels["a.b/c"]"#),
            [r#".metadata.labels["a.b/c"]"#]
        );
        assert_eq!(reads(".a[0].b, .c[]?"), [".a[0].b", ".c[]"]);
        assert_eq!(reads("."), Vec::<String>::new());
        assert_eq!(outputs("."), ["."]);
    }

    #[test]
    fn pipes_variables_and_select() {
        assert_eq!(
            reads(".spec.suspend as $s | .spec.jobs[] | if $s then 0 else .replicas end"),
            [".spec.jobs[].replicas", ".spec.suspend"]
        );
        assert_eq!(
            reads(r#"any(.status.conditions[]?; .type == "Ready" and .status == "True")"#),
            [".status.conditions[].status", ".status.conditions[].type"]
        );
        let a = analyse(
            r#".status.conditions[]? | select(.type == "Ready")"#,
            &[],
            &[],
        )
        .unwrap();
        assert_eq!(a.comparisons.len(), 1);
        assert_eq!(
            a.comparisons[0].path.to_string(),
            ".status.conditions[].type"
        );
        assert_eq!(a.comparisons[0].value, serde_json::json!("Ready"));
        assert!(a.reads.iter().all(|r| r.optional));
        assert_eq!(
            outputs(r#".status.conditions[]? | select(.type == "Ready")"#),
            [".status.conditions[]"]
        );
    }

    #[test]
    fn division_makes_a_new_value() {
        // `/` splits a string: the pieces are no part of the string's field.
        assert_eq!(outputs(r#".spec.path / ".""#), ["computed"]);
        assert_eq!(reads(r#".spec.path / "." | .[]"#), [".spec.path"]);
        assert_eq!(outputs(".spec.a % 2"), ["computed"]);
    }

    #[test]
    fn map_constructions_and_entries() {
        assert_eq!(reads("[.spec.a[] | .n] | add"), [".spec.a[].n"]);
        assert_eq!(reads(".spec.a | map(.x.y) | min"), [".spec.a[].x.y"]);
        assert_eq!(reads("{w: .spec.w} | .w.replicas"), [".spec.w.replicas"]);
        assert_eq!(reads("[.a, .b] | .[].c"), [".a.c", ".b.c"]);
        assert_eq!(
            reads(".spec.specs | to_entries[] | .value.replicas"),
            [".spec.specs[].replicas"]
        );
        assert_eq!(reads(r#".spec | has("x")"#), [".spec.x"]);
        assert_eq!(reads(".a as [$x, $y] | $y.b"), [".a[0]", ".a[1].b"]);
        assert_eq!(reads(".a as {b: $x} | $x.c"), [".a.b.c"]);
    }

    #[test]
    fn arithmetic_keeps_the_parts_of_fields() {
        assert_eq!(reads("([.a] + [.b]) | .[].c"), [".a.c", ".b.c"]);
        assert_eq!(reads("((.x // {}) + (.y // {})).k"), [".x.k", ".y.k"]);
        let a = analyse(r#"(.a + "x") == "q""#, &[], &[]).unwrap();
        assert!(a.comparisons.is_empty(), "{:?}", a.comparisons);
        assert_eq!(outputs(".a + 1"), ["computed"]);
        assert_eq!(outputs(".a * 2 | . + 1"), ["computed"]);
    }

    #[test]
    fn dynamic_keys_and_global_objects() {
        assert_eq!(reads(".spec.m[.spec.k]"), [".spec.k", ".spec.m[…]"]);
        let a = analyse(
            r#"$pod.metadata.labels["x"] // ($keys | length)"#,
            &["$keys", "$pod"],
            &["$pod"],
        )
        .unwrap();
        let reads: Vec<String> = a.reads.iter().map(|r| r.path.to_string()).collect();
        assert_eq!(reads, ["$pod.metadata.labels.x"]);
        assert!(a.unchecked.is_empty());
    }

    #[test]
    fn what_is_not_followed_is_reported() {
        let a = analyse(".spec as $s | getpath([\"a\", .k]) | .x", &[], &[]).unwrap();
        assert!(
            a.unchecked.iter().any(|u| u.contains("getpath")),
            "{:?}",
            a.unchecked
        );
        let a = analyse("reduce .a[] as $x (0; . + $x.n)", &[], &[]).unwrap();
        assert!(a.unchecked.is_empty(), "{:?}", a.unchecked);
        let reads: Vec<String> = a.reads.iter().map(|r| r.path.to_string()).collect();
        assert_eq!(reads, [".a[].n"]);
        let a = analyse("reduce .a[] as $x ({}; .q) | .z", &[], &[]).unwrap();
        assert!(!a.unchecked.is_empty());
        let a = analyse(r#"getpath(["spec", "x"]) | .y"#, &[], &[]).unwrap();
        assert!(a.unchecked.is_empty());
        assert_eq!(a.reads[0].path.to_string(), ".spec.x.y");
        // Repeated keys keep their places.
        assert_eq!(
            super::tests::reads(r#"getpath(["template", "spec", "template"]) | .x"#),
            [".template.spec.template.x"]
        );
        // An array built from alternatives is no one path.
        let a = analyse(
            r#"("a", "b") as $r | ["spec", $r] as $p | getpath($p)"#,
            &[],
            &[],
        )
        .unwrap();
        assert!(a.unchecked.iter().any(|u| u.contains("getpath")));
    }

    #[test]
    fn paths_print_as_jq() {
        let p = FieldPath {
            root: Root::Input,
            steps: vec![
                Step::Key("spec".into()),
                Step::Key("a-b".into()),
                Step::Each,
                Step::Index(2),
            ],
        };
        assert_eq!(p.to_string(), r#".spec["a-b"][][2]"#);
        assert_eq!(FieldPath::input().to_string(), ".");
    }
}
