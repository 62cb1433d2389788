//! The load-time safety gate: an allow-list over jaq's parsed AST.
//!
//! jaq has no fuel or time limit, and some constructs cannot be interrupted once started
//! (`def f: 1 + f; f` overflows the stack and aborts the process). So every expression is
//! checked before it is compiled: only read-only, non-recursive constructs and an allow-list
//! of builtins pass. With the gate, evaluation time is bounded by expression size × input size.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::path::Part;

/// Largest literal bound accepted for `range` and `limit`.
pub const MAX_RANGE: f64 = 1_000.0;

/// Builtins an expression may call (any arity), besides `range` and `limit`, which are
/// checked separately.
const ALLOWED: &[&str] = &[
    // core
    "empty",
    "error",
    "not",
    "select",
    "length",
    "utf8bytelength",
    "type",
    "tostring",
    "tonumber",
    "tojson",
    "fromjson",
    "explode",
    "implode",
    "null",
    "true",
    "false",
    "isempty",
    "getpath",
    // objects and arrays
    "keys",
    "keys_unsorted",
    "values",
    "has",
    "in",
    "inside",
    "contains",
    "map",
    "map_values",
    "to_entries",
    "from_entries",
    "with_entries",
    "add",
    "any",
    "all",
    "first",
    "last",
    "nth",
    "reverse",
    "sort",
    "sort_by",
    "group_by",
    "unique",
    "unique_by",
    "min",
    "max",
    "min_by",
    "max_by",
    "flatten",
    "index",
    "rindex",
    "indices",
    "transpose",
    "pick",
    // type filters
    "nulls",
    "booleans",
    "numbers",
    "strings",
    "arrays",
    "objects",
    "iterables",
    "scalars",
    "isboolean",
    "isnumber",
    "isstring",
    "isarray",
    "isobject",
    // strings
    "join",
    "split",
    "splits",
    "test",
    "match",
    "capture",
    "sub",
    "gsub",
    "scan",
    "ascii_downcase",
    "ascii_upcase",
    "startswith",
    "endswith",
    "ltrimstr",
    "rtrimstr",
    "trim",
    "ltrim",
    "rtrim",
    // numbers
    "floor",
    "ceil",
    "round",
    "sqrt",
    "abs",
    "fabs",
    "pow",
    "log",
    "log2",
    "log10",
    "exp",
    "exp2",
    "exp10",
    "isnan",
    "isinfinite",
    "isfinite",
    "isnormal",
    "infinite",
    "nan",
    "significand",
    "trunc",
];

/// Format strings (`@base64 "..."` or bare `@json`) an expression may use.
const ALLOWED_FORMATS: &[&str] = &[
    "@text", "@json", "@html", "@uri", "@sh", "@base64", "@base64d",
];

/// Builtins that are refused with a specific reason (the rest get a generic message).
fn refusal(name: &str) -> Option<&'static str> {
    Some(match name {
        "recurse" | "repeat" | "while" | "until" | "walk" | "paths" | "leaf_paths"
        | "combinations" => "may run without bound (recursion or unbounded output)",
        "env" | "input" | "inputs" | "input_filename" | "halt" | "halt_error" | "debug"
        | "stderr" | "now" | "builtins" => "reads or affects the process environment",
        "mktime" | "gmtime" | "localtime" | "strftime" | "strptime" | "strflocaltime"
        | "todate" | "fromdate" | "date" | "dateadd" | "datesub" | "fromdateiso8601"
        | "todateiso8601" => "depends on clocks or time zones",
        "del" | "delpaths" | "setpath" | "to_number" => {
            "modifies values (definitions are read-only)"
        }
        _ => return None,
    })
}

/// A construct the gate refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The construct as written, e.g. `recurse`, `..`, `=`.
    pub construct: String,
    /// Why it is refused.
    pub reason: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` is not allowed: {}", self.construct, self.reason)
    }
}

/// Deepest bracket nesting (`(`, `[`, `{`, string interpolation) accepted in a source.
/// The lexer, parser, compiler and evaluator all recurse per level; 1,000 levels overflow a
/// 2 MiB thread stack and abort the process.
pub const MAX_NESTING: usize = 64;

/// Deepest parsed term accepted (operator chains, `-`, `if`, `try` nest without brackets).
pub const MAX_DEPTH: usize = 256;

/// Longest expression source accepted, in bytes (the catalog's longest is about 2 KiB). It
/// bounds the nesting the parser sees before [`check`] can measure the parsed term: 5,000
/// nested `-` overflow a 2 MiB stack while parsing.
pub const MAX_LENGTH: usize = 4 * 1024;

/// Checks an expression's source before it is lexed: its length and bracket nesting.
pub fn check_source(source: &str) -> Vec<Refused> {
    let mut refused = Vec::new();
    if source.len() > MAX_LENGTH {
        refuse(
            &mut refused,
            "expression",
            format!("longer than {MAX_LENGTH} bytes"),
        );
    }
    let (mut depth, mut max) = (0usize, 0usize);
    for b in source.bytes() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if max > MAX_NESTING || prefix_run(source) > MAX_NESTING {
        refuse(
            &mut refused,
            "nesting",
            format!("brackets or prefix operators nest deeper than {MAX_NESTING} levels"),
        );
    }
    refused
}

/// Longest run of prefix operators (`-`, `try`) separated only by whitespace: each nests
/// one parser level without brackets.
fn prefix_run(source: &str) -> usize {
    let bytes = source.as_bytes();
    let (mut i, mut run, mut max) = (0, 0usize, 0usize);
    while i < bytes.len() {
        let word_end = |n: usize| {
            bytes
                .get(i + n)
                .is_none_or(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        };
        if bytes[i].is_ascii_whitespace() {
            i += 1;
        } else if bytes[i] == b'-' {
            run += 1;
            i += 1;
        } else if bytes[i..].starts_with(b"try") && word_end(3) {
            run += 1;
            i += 3;
        } else {
            run = 0;
            i += 1;
        }
        max = max.max(run);
    }
    max
}

/// Checks a parsed expression; returns every refused construct (empty when safe).
pub fn check(term: &Term<&str>) -> Vec<Refused> {
    let mut refused = Vec::new();
    if deeper_than(term, MAX_DEPTH) {
        refuse(
            &mut refused,
            "nesting",
            format!("the expression nests deeper than {MAX_DEPTH} levels"),
        );
        return refused;
    }
    walk(term, &mut refused);
    if count_ranges(term) > 1 {
        refuse(
            &mut refused,
            "range",
            "at most one `range` per expression (nested ranges multiply)",
        );
    }
    refused
}

/// Number of `range` calls in a term.
fn count_ranges(term: &Term<&str>) -> usize {
    let mut n = 0;
    visit(term, &mut |t| {
        if let Term::Call("range", _) = t {
            n += 1;
        }
    });
    n
}

/// True when `term` nests more than `limit` levels (recursing at most `limit` deep).
fn deeper_than(term: &Term<&str>, limit: usize) -> bool {
    if limit == 0 {
        return true;
    }
    let mut deeper = false;
    children(term, &mut |t| {
        if !deeper && deeper_than(t, limit - 1) {
            deeper = true;
        }
    });
    deeper
}

/// Calls `f` on `term` and every term below it (patterns and paths included).
fn visit<'a>(term: &'a Term<&'a str>, f: &mut dyn FnMut(&'a Term<&'a str>)) {
    f(term);
    children(term, &mut |t| visit(t, f));
}

/// Calls `each` on the direct subterms of `term`.
fn children<'a>(term: &'a Term<&'a str>, each: &mut dyn FnMut(&'a Term<&'a str>)) {
    let mut each = |t: &'a Term<&'a str>| each(t);
    match term {
        Term::Id | Term::Num(_) | Term::Break(_) | Term::Recurse | Term::Var(_) => {}
        Term::Str(_, parts) => parts.iter().for_each(|p| {
            if let StrPart::Term(t) = p {
                each(t)
            }
        }),
        Term::Arr(inner) => inner.iter().for_each(|t| each(t)),
        Term::Obj(entries) => entries.iter().for_each(|(k, v)| {
            each(k);
            v.iter().for_each(&mut each);
        }),
        Term::Neg(t) | Term::Label(_, t) => each(t),
        Term::BinOp(l, _, r) => {
            each(l);
            each(r);
        }
        Term::Fold(_, source, _, args) => {
            each(source);
            args.iter().for_each(&mut each);
        }
        Term::TryCatch(t, c) => {
            each(t);
            c.iter().for_each(|c| each(c));
        }
        Term::IfThenElse(branches, otherwise) => {
            branches.iter().for_each(|(c, t)| {
                each(c);
                each(t);
            });
            otherwise.iter().for_each(|e| each(e));
        }
        Term::Def(defs, body) => {
            defs.iter().for_each(|d| each(&d.body));
            each(body);
        }
        Term::Call(_, args) => args.iter().for_each(&mut each),
        Term::Path(t, path) => {
            each(t);
            for (part, _) in &path.0 {
                match part {
                    Part::Index(i) => each(i),
                    Part::Range(from, to) => {
                        from.iter().for_each(&mut each);
                        to.iter().for_each(&mut each);
                    }
                }
            }
        }
    }
}

fn refuse(out: &mut Vec<Refused>, construct: impl Into<String>, reason: impl Into<String>) {
    let refused = Refused {
        construct: construct.into(),
        reason: reason.into(),
    };
    if !out.contains(&refused) {
        out.push(refused);
    }
}

fn walk(term: &Term<&str>, out: &mut Vec<Refused>) {
    match term {
        Term::Id | Term::Num(_) | Term::Break(_) => {}
        Term::Recurse => refuse(out, "..", "recursive descent may run without bound"),
        Term::Var(name) => {
            if matches!(*name, "$ENV" | "$__loc__" | "$__prog_args") {
                refuse(out, *name, "reads the process environment");
            }
        }
        Term::Str(format, parts) => {
            if let Some(format) = format
                && !ALLOWED_FORMATS.contains(format)
            {
                refuse(out, *format, "this format is not supported");
            }
            for part in parts {
                if let StrPart::Term(t) = part {
                    walk(t, out);
                }
            }
        }
        Term::Arr(inner) => {
            if let Some(t) = inner {
                walk(t, out);
            }
        }
        Term::Obj(entries) => {
            for (k, v) in entries {
                walk(k, out);
                if let Some(v) = v {
                    walk(v, out);
                }
            }
        }
        Term::Neg(t) => walk(t, out),
        Term::BinOp(l, op, r) => {
            match op {
                BinaryOp::Assign => refuse(
                    out,
                    "=",
                    "assignment modifies values (definitions are read-only)",
                ),
                BinaryOp::Update => refuse(
                    out,
                    "|=",
                    "update modifies values (definitions are read-only)",
                ),
                BinaryOp::UpdateMath(m) => refuse(
                    out,
                    format!("{}=", m.as_str()),
                    "update modifies values (definitions are read-only)",
                ),
                BinaryOp::UpdateAlt => refuse(
                    out,
                    "//=",
                    "update modifies values (definitions are read-only)",
                ),
                BinaryOp::Pipe(Some(pattern)) => walk_pattern(pattern, out),
                _ => {}
            }
            walk(l, out);
            walk(r, out);
        }
        Term::Label(_, t) => walk(t, out),
        Term::Fold(_, source, pattern, args) => {
            walk(source, out);
            walk_pattern(pattern, out);
            args.iter().for_each(|t| walk(t, out));
        }
        Term::TryCatch(t, catch) => {
            walk(t, out);
            if let Some(c) = catch {
                walk(c, out);
            }
        }
        Term::IfThenElse(branches, otherwise) => {
            for (cond, then) in branches {
                walk(cond, out);
                walk(then, out);
            }
            if let Some(e) = otherwise {
                walk(e, out);
            }
        }
        Term::Def(defs, body) => {
            for def in defs {
                refuse(
                    out,
                    format!("def {}", def.name),
                    "user definitions are not allowed (they allow unbounded recursion)",
                );
            }
            walk(body, out);
        }
        Term::Call(name, args) => {
            check_call(name, args, out);
            args.iter().for_each(|t| walk(t, out));
        }
        Term::Path(t, path) => {
            walk(t, out);
            for (part, _) in &path.0 {
                match part {
                    Part::Index(i) => walk(i, out),
                    Part::Range(from, to) => {
                        if let Some(f) = from {
                            walk(f, out);
                        }
                        if let Some(t) = to {
                            walk(t, out);
                        }
                    }
                }
            }
        }
    }
}

fn walk_pattern(pattern: &Pattern<&str>, out: &mut Vec<Refused>) {
    match pattern {
        Pattern::Var(_) => {}
        Pattern::Arr(items) => items.iter().for_each(|p| walk_pattern(p, out)),
        Pattern::Obj(entries) => {
            for (key, p) in entries {
                walk(key, out);
                walk_pattern(p, out);
            }
        }
    }
}

/// A numeric literal, possibly negated.
fn literal(term: &Term<&str>) -> Option<f64> {
    match term {
        Term::Num(n) => n.parse().ok(),
        Term::Neg(t) => literal(t).map(|n| -n),
        _ => None,
    }
}

fn check_call(name: &str, args: &[Term<&str>], out: &mut Vec<Refused>) {
    match name {
        "range" => {
            let bounds: Option<Vec<f64>> = args.iter().map(literal).collect();
            let span = match bounds.as_deref() {
                Some([to]) => Some(*to),
                Some([from, to]) | Some([from, to, _]) => Some(to - from),
                _ => None,
            };
            // A zero or backwards step would run forever or from the far end.
            let by_ok = match bounds.as_deref() {
                Some([_, _, by]) => *by >= 1.0,
                _ => true,
            };
            if !matches!(span, Some(s) if (0.0..=MAX_RANGE).contains(&s)) || !by_ok {
                refuse(
                    out,
                    "range",
                    format!("only literal bounds spanning at most {MAX_RANGE} are allowed"),
                );
            }
        }
        "limit" => {
            if !matches!(args.first().and_then(literal), Some(n) if (0.0..=MAX_RANGE).contains(&n))
            {
                refuse(
                    out,
                    "limit",
                    format!("only a literal count of at most {MAX_RANGE} is allowed"),
                );
            }
        }
        _ if ALLOWED.contains(&name) || ALLOWED_FORMATS.contains(&name) => {}
        _ => match refusal(name) {
            Some(reason) => refuse(out, name, reason),
            None => refuse(out, name, "not in the list of allowed builtins"),
        },
    }
}
