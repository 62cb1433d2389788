//! Where a definition's read expression can be written: jq's `path()` semantics on the
//! subset of jq that definitions use for pod templates, pod specs, fragments, suspend
//! actions and scale paths, evaluated on the JSON object.
//!
//! Like jq's `path(f)`: `.a`, `.[n]`, `.[]` (arrays by index, objects in sorted key order),
//! `|`, `,`, `as $x` (a variable bound to a path stays a path), `if … then … else … end`
//! (conditions read the object), `select(cond)`, and `l // r` (the truthy paths of `l`, else those of `r`).
//! Deliberate extensions, so that read-only idioms of the catalog can be written (see
//! docs/patch.md): `l // LITERAL` is `l` (the location is created when missing), `l + r` is
//! `r` when `r` is a path (the right operand wins a merge) and `l` when `r` is a literal, and
//! `{k: e}` is a projection whose member `k` is written at `e`. Anything else is
//! [`Stop::NotAssignable`]: the caller then locates the value by content.

use crate::definition::assign::Step;
use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::load::{Lexer, Parser};
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most locations one expression may yield on one object.
pub const MAX_LOCATIONS: usize = crate::definition::assign::MAX_LOCATIONS;
/// Deepest expression nesting followed.
const MAX_DEPTH: usize = 64;

/// A location in the object.
pub type Loc = Vec<Step>;

/// Where a value an expression outputs can be written.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// At this location (created when missing).
    At(Loc),
    /// A constructed object: these members at their own targets, any other member at the
    /// base's (none: not writable).
    Object(BTreeMap<String, Target>, Option<Box<Target>>),
    /// A value the expression computed: readable, not writable.
    Computed(Json),
}

impl Target {
    /// Where member `key` of this value is written.
    pub fn field(&self, key: &str) -> Option<Target> {
        match self {
            Target::At(loc) => {
                let mut l = loc.clone();
                l.push(Step::Key(key.to_owned()));
                Some(Target::At(l))
            }
            Target::Object(members, base) => members
                .get(key)
                .cloned()
                .or_else(|| base.as_ref().and_then(|b| b.field(key))),
            Target::Computed(_) => None,
        }
    }
}

/// Why an expression yields no targets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    /// A construct that is not a path (the phrase names it).
    #[error("not a path: {0}")]
    NotAssignable(&'static str),
    /// More than [`MAX_LOCATIONS`] locations.
    #[error("more than {MAX_LOCATIONS} locations")]
    TooMany,
    /// A jq error on this object (e.g. `.a.b` where `.a` is a string).
    #[error("{0}")]
    Error(String),
}

/// A parsed expression in the subset followed here.
#[derive(Debug, Clone)]
pub struct PathExpr(Arc<P>);

#[derive(Debug)]
enum P {
    Id,
    Lit(Json),
    Var(String),
    Path(Box<P>, Vec<(Seg, bool)>),
    Pipe(Box<P>, Box<P>),
    Bind(Box<P>, String, Box<P>),
    Comma(Box<P>, Box<P>),
    Alt(Box<P>, Box<P>),
    Add(Box<P>, Box<P>),
    Obj(Vec<(String, P)>),
    Arr,
    If(Vec<(P, P)>, Option<Box<P>>),
    Cmp(Box<P>, bool, Box<P>),
    And(Box<P>, Box<P>),
    Or(Box<P>, Box<P>),
    Not,
    /// `select(cond)`: the input when `cond` is truthy (once per truthy output, as jq).
    Select(Box<P>),
    /// Parsed, but outside the subset (the phrase names it).
    Other(&'static str),
}

#[derive(Debug)]
enum Seg {
    Key(String),
    Index(i64),
    Each,
    Dynamic(Box<P>),
}

impl PathExpr {
    /// Parses `source`; `None` when it is not valid jq.
    pub fn parse(source: &str) -> Option<PathExpr> {
        let tokens = Lexer::new(source).lex().ok()?;
        let term = Parser::new(&tokens).parse(|p| p.term()).ok()?;
        Some(PathExpr(Arc::new(lower(&term, 0))))
    }

    /// The targets of the expression's outputs on `doc`, in output order.
    pub fn targets(&self, doc: &Json) -> Result<Vec<Target>, Stop> {
        let cx = Cx { doc };
        let mut out = Vec::new();
        cx.targets(&self.0, &Target::At(Vec::new()), &Env::default(), &mut out)?;
        Ok(out)
    }
}

fn lit_str(parts: &[StrPart<&str, Term<&str>>]) -> Option<String> {
    let mut s = String::new();
    for p in parts {
        match p {
            StrPart::Str(t) => s.push_str(t),
            StrPart::Char(c) => s.push(*c),
            StrPart::Term(_) => return None,
        }
    }
    Some(s)
}

fn lower(t: &Term<&str>, depth: usize) -> P {
    if depth > MAX_DEPTH {
        return P::Other("nesting too deep");
    }
    let d = depth + 1;
    let b = |t: &Term<&str>| Box::new(lower(t, d));
    match t {
        Term::Id => P::Id,
        Term::Num(n) => match serde_json::from_str::<Json>(n) {
            Ok(v) => P::Lit(v),
            Err(_) => P::Other("a number"),
        },
        Term::Str(None, parts) => match lit_str(parts) {
            Some(s) => P::Lit(Json::String(s)),
            None => P::Other("string interpolation"),
        },
        Term::Call(name, args) if args.is_empty() => match *name {
            "null" => P::Lit(Json::Null),
            "true" => P::Lit(Json::Bool(true)),
            "false" => P::Lit(Json::Bool(false)),
            "not" => P::Not,
            "empty" => P::Other("empty"),
            _ => P::Other("a function call"),
        },
        Term::Call("select", args) if args.len() == 1 => P::Select(b(&args[0])),
        Term::Var(v) => P::Var(v.trim_start_matches('$').to_owned()),
        Term::Arr(_) => P::Arr,
        Term::Obj(entries) => {
            let mut out = Vec::new();
            for (k, v) in entries {
                let key = match k {
                    Term::Str(None, parts) => lit_str(parts),
                    _ => None,
                };
                let (Some(key), Some(v)) = (key, v) else {
                    return P::Other("an object with computed keys");
                };
                out.push((key, lower(v, d)));
            }
            P::Obj(out)
        }
        Term::Path(base, path) => {
            let mut segs = Vec::new();
            for (part, opt) in &path.0 {
                let optional = matches!(opt, Opt::Optional);
                let seg = match part {
                    Part::Range(None, None) => Seg::Each,
                    Part::Range(..) => return P::Other("a slice"),
                    Part::Index(Term::Str(None, parts)) => match lit_str(parts) {
                        Some(k) => Seg::Key(k),
                        None => return P::Other("string interpolation"),
                    },
                    Part::Index(Term::Num(n)) => match n.parse::<i64>() {
                        Ok(i) => Seg::Index(i),
                        Err(_) => return P::Other("a fractional index"),
                    },
                    Part::Index(other) => Seg::Dynamic(b(other)),
                };
                segs.push((seg, optional));
            }
            P::Path(b(base), segs)
        }
        Term::BinOp(l, op, r) => match op {
            BinaryOp::Pipe(None) => P::Pipe(b(l), b(r)),
            BinaryOp::Pipe(Some(Pattern::Var(v))) => {
                P::Bind(b(l), v.trim_start_matches('$').to_owned(), b(r))
            }
            BinaryOp::Pipe(Some(_)) => P::Other("a destructuring pattern"),
            BinaryOp::Comma => P::Comma(b(l), b(r)),
            BinaryOp::Alt => P::Alt(b(l), b(r)),
            BinaryOp::Math(Math::Add) => P::Add(b(l), b(r)),
            BinaryOp::Cmp(Cmp::Eq) => P::Cmp(b(l), true, b(r)),
            BinaryOp::Cmp(Cmp::Ne) => P::Cmp(b(l), false, b(r)),
            BinaryOp::And => P::And(b(l), b(r)),
            BinaryOp::Or => P::Or(b(l), b(r)),
            _ => P::Other("an operator"),
        },
        Term::IfThenElse(branches, otherwise) => P::If(
            branches
                .iter()
                .map(|(c, t)| (lower(c, d), lower(t, d)))
                .collect(),
            otherwise.as_ref().map(|e| b(e)),
        ),
        _ => P::Other("a construct that is no path"),
    }
}

#[derive(Default, Clone)]
struct Env(Vec<(String, Bound)>);

#[derive(Clone)]
enum Bound {
    Target(Target),
    Value(Json),
}

impl Env {
    fn get(&self, name: &str) -> Option<&Bound> {
        self.0.iter().rev().find(|(n, _)| n == name).map(|(_, b)| b)
    }
    fn with(&self, name: &str, b: Bound) -> Env {
        let mut e = self.clone();
        e.0.push((name.to_owned(), b));
        e
    }
}

fn truthy(v: &Json) -> bool {
    !matches!(v, Json::Null | Json::Bool(false))
}

fn equal(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// The value at `loc` in `doc` (`None`: absent).
pub fn get<'a>(doc: &'a Json, loc: &[Step]) -> Option<&'a Json> {
    let mut cur = doc;
    for step in loc {
        cur = match step {
            Step::Key(k) => cur.as_object()?.get(k)?,
            Step::Index(i) => cur.as_array()?.get(*i)?,
        };
    }
    Some(cur)
}

struct Cx<'a> {
    doc: &'a Json,
}

fn push<T>(out: &mut Vec<T>, v: T) -> Result<(), Stop> {
    if out.len() >= MAX_LOCATIONS {
        return Err(Stop::TooMany);
    }
    out.push(v);
    Ok(())
}

impl Cx<'_> {
    fn value_of(&self, t: &Target) -> Json {
        match t {
            Target::At(loc) => get(self.doc, loc).cloned().unwrap_or(Json::Null),
            Target::Object(members, base) => {
                let mut obj = match base.as_ref().map(|b| self.value_of(b)) {
                    Some(Json::Object(m)) => m,
                    _ => serde_json::Map::new(),
                };
                for (k, t) in members {
                    obj.insert(k.clone(), self.value_of(t));
                }
                Json::Object(obj)
            }
            Target::Computed(v) => v.clone(),
        }
    }

    /// The single target of `p`, when it has exactly one.
    fn one_target(&self, p: &P, input: &Target, env: &Env) -> Result<Target, Stop> {
        let mut out = Vec::new();
        self.targets(p, input, env, &mut out)?;
        if out.len() == 1 {
            Ok(out.remove(0))
        } else {
            Err(Stop::NotAssignable("an operand with several outputs"))
        }
    }

    fn targets(&self, p: &P, input: &Target, env: &Env, out: &mut Vec<Target>) -> Result<(), Stop> {
        match p {
            P::Id => push(out, input.clone()),
            P::Var(name) => match env.get(name) {
                Some(Bound::Target(t)) => push(out, t.clone()),
                Some(Bound::Value(v)) => push(out, Target::Computed(v.clone())),
                None => Err(Stop::NotAssignable("an unknown variable")),
            },
            P::Path(base, segs) => {
                let mut cur = Vec::new();
                self.targets(base, input, env, &mut cur)?;
                for (seg, optional) in segs {
                    let mut next = Vec::new();
                    for t in cur {
                        self.step(&t, seg, *optional, env, &mut next)?;
                    }
                    cur = next;
                }
                for t in cur {
                    push(out, t)?;
                }
                Ok(())
            }
            P::Pipe(l, r) => {
                let mut mid = Vec::new();
                self.targets(l, input, env, &mut mid)?;
                for t in &mid {
                    self.targets(r, t, env, out)?;
                }
                Ok(())
            }
            P::Bind(e, name, body) => {
                let mut bound = Vec::new();
                match self.targets(e, input, env, &mut bound) {
                    Ok(()) => {
                        for t in bound {
                            self.targets(body, input, &env.with(name, Bound::Target(t)), out)?;
                        }
                    }
                    Err(Stop::NotAssignable(_)) => {
                        for v in self.values(e, input, env)? {
                            self.targets(body, input, &env.with(name, Bound::Value(v)), out)?;
                        }
                    }
                    Err(e) => return Err(e),
                }
                Ok(())
            }
            P::Comma(l, r) => {
                self.targets(l, input, env, out)?;
                self.targets(r, input, env, out)
            }
            P::Alt(l, r) => {
                let mut left = Vec::new();
                // As jq: errors on the left are suppressed.
                match self.targets(l, input, env, &mut left) {
                    Ok(()) | Err(Stop::Error(_)) => {}
                    Err(e) => return Err(e),
                }
                let truthy_left: Vec<Target> = left
                    .iter()
                    .filter(|t| truthy(&self.value_of(t)))
                    .cloned()
                    .collect();
                if !truthy_left.is_empty() {
                    for t in truthy_left {
                        push(out, t)?;
                    }
                    return Ok(());
                }
                let mut right = Vec::new();
                match self.targets(r, input, env, &mut right) {
                    Ok(()) => {
                        for t in right {
                            push(out, t)?;
                        }
                        Ok(())
                    }
                    // `l // LITERAL`: write at `l`, created when missing.
                    Err(Stop::NotAssignable(_)) if is_literal(r) => {
                        for t in left {
                            push(out, t)?;
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            P::Add(l, r) => {
                let right = if is_literal(r) {
                    None
                } else {
                    Some(self.one_target(r, input, env)?)
                };
                let left = || self.one_target(l, input, env);
                match right {
                    Some(Target::At(loc)) => push(out, Target::At(loc)),
                    Some(Target::Object(members, None)) => {
                        push(out, Target::Object(members, Some(Box::new(left()?))))
                    }
                    Some(t @ Target::Object(_, Some(_))) => push(out, t),
                    Some(Target::Computed(_)) => Err(Stop::NotAssignable("a computed operand")),
                    None => push(out, left()?),
                }
            }
            P::Obj(_) if is_literal(p) => Err(Stop::NotAssignable("a literal")),
            P::Obj(entries) => {
                let mut members = BTreeMap::new();
                for (k, v) in entries {
                    if is_literal(v) {
                        continue;
                    }
                    if let Ok(t) = self.one_target(v, input, env) {
                        members.insert(k.clone(), t);
                    }
                }
                push(out, Target::Object(members, None))
            }
            P::If(branches, otherwise) => {
                for (cond, then) in branches {
                    let v = self.values(cond, input, env)?;
                    if v.len() != 1 {
                        return Err(Stop::NotAssignable("a condition with several outputs"));
                    }
                    if truthy(&v[0]) {
                        return self.targets(then, input, env, out);
                    }
                }
                match otherwise {
                    Some(e) => self.targets(e, input, env, out),
                    None => push(out, input.clone()),
                }
            }
            P::Select(cond) => {
                for v in self.values(cond, input, env)? {
                    if truthy(&v) {
                        push(out, input.clone())?;
                    }
                }
                Ok(())
            }
            P::Lit(_) | P::Arr => Err(Stop::NotAssignable("a literal")),
            P::Cmp(..) | P::And(..) | P::Or(..) | P::Not => {
                Err(Stop::NotAssignable("a computed value"))
            }
            P::Other(what) => Err(Stop::NotAssignable(what)),
        }
    }

    fn step(
        &self,
        t: &Target,
        seg: &Seg,
        optional: bool,
        env: &Env,
        out: &mut Vec<Target>,
    ) -> Result<(), Stop> {
        let key = match seg {
            Seg::Dynamic(p) => {
                let v = self.values(p, &Target::At(Vec::new()), env)?;
                match v.as_slice() {
                    [Json::String(s)] => Seg::Key(s.clone()),
                    [Json::Number(n)] => match n.as_i64() {
                        Some(i) => Seg::Index(i),
                        None => return Err(Stop::NotAssignable("a fractional index")),
                    },
                    _ => return Err(Stop::NotAssignable("a computed index")),
                }
            }
            Seg::Key(k) => Seg::Key(k.clone()),
            Seg::Index(i) => Seg::Index(*i),
            Seg::Each => Seg::Each,
        };
        match (t, &key) {
            (Target::Object(..), Seg::Key(k)) => match t.field(k) {
                Some(f) => push(out, f),
                None => Err(Stop::NotAssignable("a member a constructed object lacks")),
            },
            (Target::Object(..), _) => Err(Stop::NotAssignable("iterating a constructed object")),
            (Target::Computed(v), seg) => {
                let items: Vec<Json> = match (v, seg) {
                    (Json::Object(m), Seg::Key(k)) => vec![m.get(k).cloned().unwrap_or(Json::Null)],
                    (Json::Null, Seg::Key(_) | Seg::Index(_)) => vec![Json::Null],
                    (Json::Array(a), Seg::Index(i)) => {
                        vec![
                            usize::try_from(*i)
                                .ok()
                                .and_then(|i| a.get(i))
                                .cloned()
                                .unwrap_or(Json::Null),
                        ]
                    }
                    (Json::Array(a), Seg::Each) => a.clone(),
                    (Json::Object(m), Seg::Each) => m.values().cloned().collect(),
                    (Json::Null, Seg::Each) => Vec::new(),
                    _ if optional => Vec::new(),
                    _ => return Err(Stop::Error(format!("cannot index {}", kind(Some(v))))),
                };
                for item in items {
                    push(out, Target::Computed(item))?;
                }
                Ok(())
            }
            (Target::At(loc), _) => {
                let here = get(self.doc, loc);
                let mismatch = |what: &str| {
                    if optional {
                        Ok(())
                    } else {
                        Err(Stop::Error(format!("cannot {what} {}", kind(here))))
                    }
                };
                match key {
                    Seg::Key(k) => match here {
                        None | Some(Json::Null) | Some(Json::Object(_)) => {
                            let mut l = loc.clone();
                            l.push(Step::Key(k));
                            push(out, Target::At(l))
                        }
                        _ => mismatch("index with a key"),
                    },
                    Seg::Index(i) => {
                        if i < 0 {
                            return Err(Stop::NotAssignable("a negative index"));
                        }
                        match here {
                            None | Some(Json::Null) | Some(Json::Array(_)) => {
                                let mut l = loc.clone();
                                l.push(Step::Index(i as usize));
                                push(out, Target::At(l))
                            }
                            _ => mismatch("index with a number"),
                        }
                    }
                    Seg::Each => match here {
                        None | Some(Json::Null) => Ok(()),
                        Some(Json::Array(items)) => {
                            for n in 0..items.len() {
                                let mut l = loc.clone();
                                l.push(Step::Index(n));
                                push(out, Target::At(l))?;
                            }
                            Ok(())
                        }
                        Some(Json::Object(map)) => {
                            // serde_json keeps keys sorted: jq's (gojq's) order.
                            for k in map.keys() {
                                let mut l = loc.clone();
                                l.push(Step::Key(k.clone()));
                                push(out, Target::At(l))?;
                            }
                            Ok(())
                        }
                        _ => mismatch("iterate over"),
                    },
                    Seg::Dynamic(_) => Err(Stop::NotAssignable("a computed index")),
                }
            }
        }
    }

    /// The values `p` outputs (value mode, for conditions and bindings).
    fn values(&self, p: &P, input: &Target, env: &Env) -> Result<Vec<Json>, Stop> {
        let here = || self.value_of(input);
        Ok(match p {
            P::Lit(v) => vec![v.clone()],
            P::Var(name) => match env.get(name) {
                Some(Bound::Target(t)) => vec![self.value_of(t)],
                Some(Bound::Value(v)) => vec![v.clone()],
                None => return Err(Stop::NotAssignable("an unknown variable")),
            },
            P::Not => vec![Json::Bool(!truthy(&here()))],
            P::Cmp(l, eq, r) => {
                let (a, b) = (
                    self.one_value(l, input, env)?,
                    self.one_value(r, input, env)?,
                );
                vec![Json::Bool(equal(&a, &b) == *eq)]
            }
            P::And(l, r) => {
                let a = truthy(&self.one_value(l, input, env)?);
                vec![Json::Bool(a && truthy(&self.one_value(r, input, env)?))]
            }
            P::Or(l, r) => {
                let a = truthy(&self.one_value(l, input, env)?);
                vec![Json::Bool(a || truthy(&self.one_value(r, input, env)?))]
            }
            P::Pipe(l, r) => {
                let mut out = Vec::new();
                for v in self.values(l, input, env)? {
                    out.extend(self.values(r, &self.pinned(v), env)?);
                }
                out
            }
            P::Alt(l, r) => {
                let left: Vec<Json> = self
                    .values(l, input, env)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(truthy)
                    .collect();
                if left.is_empty() {
                    self.values(r, input, env)?
                } else {
                    left
                }
            }
            P::Obj(entries) => {
                let mut m = serde_json::Map::new();
                for (k, v) in entries {
                    m.insert(k.clone(), self.one_value(v, input, env)?);
                }
                vec![Json::Object(m)]
            }
            P::Add(l, r) => {
                let (a, b) = (
                    self.one_value(l, input, env)?,
                    self.one_value(r, input, env)?,
                );
                vec![add(a, b)?]
            }
            P::If(branches, otherwise) => {
                for (cond, then) in branches {
                    if truthy(&self.one_value(cond, input, env)?) {
                        return self.values(then, input, env);
                    }
                }
                match otherwise {
                    Some(e) => self.values(e, input, env)?,
                    None => vec![here()],
                }
            }
            _ => {
                let mut ts = Vec::new();
                self.targets(p, input, env, &mut ts)?;
                ts.iter().map(|t| self.value_of(t)).collect()
            }
        })
    }

    fn one_value(&self, p: &P, input: &Target, env: &Env) -> Result<Json, Stop> {
        let mut v = self.values(p, input, env)?;
        if v.len() == 1 {
            Ok(v.remove(0))
        } else {
            Err(Stop::NotAssignable("an operand with several outputs"))
        }
    }

    /// A value computed in value mode has no location: later steps may only read it.
    fn pinned(&self, v: Json) -> Target {
        Target::Computed(v)
    }
}

fn is_literal(p: &P) -> bool {
    match p {
        P::Lit(_) | P::Arr => true,
        P::Obj(entries) => entries.iter().all(|(_, v)| is_literal(v)),
        _ => false,
    }
}

fn kind(v: Option<&Json>) -> &'static str {
    v.map_or("null", crate::definition::model::json_type)
}

fn add(a: Json, b: Json) -> Result<Json, Stop> {
    Ok(match (a, b) {
        (Json::Null, x) | (x, Json::Null) => x,
        (Json::Object(mut x), Json::Object(y)) => {
            x.extend(y);
            Json::Object(x)
        }
        (Json::Array(mut x), Json::Array(y)) => {
            x.extend(y);
            Json::Array(x)
        }
        (Json::String(x), Json::String(y)) => Json::String(x + &y),
        (Json::Number(x), Json::Number(y)) => {
            serde_json::Number::from_f64(x.as_f64().unwrap_or(0.0) + y.as_f64().unwrap_or(0.0))
                .map_or(Json::Null, Json::Number)
        }
        _ => return Err(Stop::Error("cannot add these values".into())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(path: &[&str]) -> Target {
        Target::At(
            path.iter()
                .map(|s| match s.parse::<usize>() {
                    Ok(i) => Step::Index(i),
                    Err(_) => Step::Key((*s).to_owned()),
                })
                .collect(),
        )
    }

    fn targets(src: &str, doc: &Json) -> Result<Vec<Target>, Stop> {
        PathExpr::parse(src).expect("parses").targets(doc)
    }

    #[test]
    fn plain_paths_and_iteration_follow_jq() {
        let doc = json!({"spec": {"jobs": [{"t": 1}, {"t": 2}], "svc": {"b": {}, "a": {}}}});
        assert_eq!(
            targets(".spec.jobs[].t", &doc).unwrap(),
            vec![
                at(&["spec", "jobs", "0", "t"]),
                at(&["spec", "jobs", "1", "t"])
            ]
        );
        assert_eq!(
            targets(".spec.svc[] | .x", &doc).unwrap(),
            vec![
                at(&["spec", "svc", "a", "x"]),
                at(&["spec", "svc", "b", "x"])
            ]
        );
        assert!(targets(".spec.none[]?", &doc).unwrap().is_empty());
        assert!(matches!(targets(".spec.jobs.x", &doc), Err(Stop::Error(_))));
    }

    #[test]
    fn alternatives_choose_the_truthy_side_or_create_before_a_literal() {
        let doc = json!({"spec": {"w": {"x": 1}}});
        assert_eq!(
            targets(".spec.l // .spec.w", &doc).unwrap(),
            vec![at(&["spec", "w"])]
        );
        assert_eq!(
            targets(".spec.w // .spec.l", &doc).unwrap(),
            vec![at(&["spec", "w"])]
        );
        assert_eq!(
            targets(".spec.t // {}", &doc).unwrap(),
            vec![at(&["spec", "t"])]
        );
        assert_eq!(
            targets("(.spec.a // {}) + (.spec.b // {})", &doc).unwrap(),
            vec![at(&["spec", "b"])]
        );
    }

    #[test]
    fn bindings_conditions_and_projections_keep_paths() {
        let doc = json!({"spec": {"on": true, "h": {"template": {"spec": {"c": [1]}}}}});
        let src = ".spec as $s | $s.h.template as $t | if $s.on == true then \
                   {metadata: ($t.metadata // {}), spec: (($t.spec // {}) + {c: [2]})} else $t end";
        let t = targets(src, &doc).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            t[0].field("metadata").and_then(|m| m.field("labels")),
            Some(at(&["spec", "h", "template", "metadata", "labels"]))
        );
        assert_eq!(
            t[0].field("spec").and_then(|m| m.field("schedulerName")),
            Some(at(&["spec", "h", "template", "spec", "schedulerName"]))
        );
        let meta = targets("{annotations: (.spec.ann // {})}", &doc).unwrap();
        assert_eq!(meta[0].field("annotations"), Some(at(&["spec", "ann"])));
        assert_eq!(meta[0].field("labels"), None);
    }

    #[test]
    fn select_keeps_the_locations_whose_condition_holds() {
        let doc = json!({"spec": {"templates": [
            {"name": "dag", "dag": {}},
            {"name": "a", "container": {"image": "x"}},
            {"name": "b", "script": {"image": "y"}, "schedulerName": "old"}
        ]}});
        let src =
            ".spec.templates[] | select(.container != null or .script != null) | .schedulerName";
        assert_eq!(
            targets(src, &doc).unwrap(),
            vec![
                at(&["spec", "templates", "1", "schedulerName"]),
                at(&["spec", "templates", "2", "schedulerName"])
            ]
        );
        assert!(
            targets(".spec | select(.none == 1)", &doc)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn computed_values_are_not_assignable() {
        let doc = json!({"spec": {"replicas": 2}});
        for src in [
            "(.spec.replicas // 1) * 2",
            "1",
            ".spec | keys[]",
            "[.spec]",
        ] {
            assert!(
                matches!(targets(src, &doc), Err(Stop::NotAssignable(_))),
                "{src}"
            );
        }
    }

    #[test]
    fn locations_are_bounded() {
        let doc = json!({"a": vec![vec![0u8; 100]; 100]});
        assert_eq!(targets(".a[][]", &doc).unwrap_err(), Stop::TooMany);
    }
}
