//! The native functions metered evaluation runs with: jaq's core and standard functions
//! (generic over the value type, so metered through [`MVal`]'s operations), and metered
//! versions of the JSON-specific ones jaq provides only for its own value type (`tojson`,
//! `fromjson`, `length`, `contains`, `indices`, …), plus a linear `join` and the cost guard
//! in front of regular expressions.

use super::{ELEMENT_BYTES, ENTRY_BYTES, HEADER_BYTES, MVal, compare, json_text};
use crate::expr::budget::{self, Exceeded};
use jaq_core::data::JustLut;
use jaq_core::native::{Filter, Fun, bome, run, unary, v};
use jaq_core::{Error, Exn, RunPtr, ValR};
use jaq_json::{Num, Val};

/// The data kind metered filters run on.
pub type Data = JustLut<MVal>;

/// Longest regular expression a definition may use, in bytes.
pub const MAX_REGEX: usize = 1024;

/// Natives of jaq's standard library renamed so that guard definitions (see [`GUARDS`])
/// can take their names: the regex functions, and the string functions whose cost grows
/// with the length of their input (scans, and outputs larger than their input).
const GUARDED_NATIVES: &[(&str, &str)] = &[
    ("matches", "_kg_raw_matches"),
    ("split_matches", "_kg_raw_split_matches"),
    ("split_", "_kg_raw_split_"),
    ("trim", "_kg_raw_trim"),
    ("ltrim", "_kg_raw_ltrim"),
    ("rtrim", "_kg_raw_rtrim"),
    ("startswith", "_kg_raw_startswith"),
    ("endswith", "_kg_raw_endswith"),
    ("ltrimstr", "_kg_raw_ltrimstr"),
    ("rtrimstr", "_kg_raw_rtrimstr"),
    ("ascii_downcase", "_kg_raw_ascii_downcase"),
    ("ascii_upcase", "_kg_raw_ascii_upcase"),
    ("explode", "_kg_raw_explode"),
    ("implode", "_kg_raw_implode"),
    ("escape_html", "_kg_raw_escape_html"),
    ("unescape_html", "_kg_raw_unescape_html"),
    ("escape_sh", "_kg_raw_escape_sh"),
    ("encode_uri", "_kg_raw_encode_uri"),
    ("decode_uri", "_kg_raw_decode_uri"),
    ("encode_base64", "_kg_raw_encode_base64"),
    ("decode_base64", "_kg_raw_decode_base64"),
];

/// jq definitions placed before jaq's standard library, so that its regex functions
/// (`test`, `match`, `capture`, `sub`, `splits`, …) pay for their search, and its string
/// functions for their scan and check room for their output, before they run.
/// `_kg_room(k)` pays one work unit per 64 bytes (or elements) of its input and fails
/// unless `k` bytes per input byte (or element) still fit in the memory budget.
pub const GUARDS: &str = r#"
    def matches($re; $flags): _kg_regex_cost($re) | _kg_raw_matches($re; $flags);
    def split_matches($re; $flags): _kg_regex_cost($re) | _kg_raw_split_matches($re; $flags);
    def split_($re; $flags): _kg_regex_cost($re) | _kg_raw_split_($re; $flags);
    def trim: _kg_room(0) | _kg_raw_trim;
    def ltrim: _kg_room(0) | _kg_raw_ltrim;
    def rtrim: _kg_room(0) | _kg_raw_rtrim;
    def startswith($s): _kg_room(0) | _kg_raw_startswith($s);
    def endswith($s): _kg_room(0) | _kg_raw_endswith($s);
    def ltrimstr($s): _kg_room(0) | _kg_raw_ltrimstr($s);
    def rtrimstr($s): _kg_room(0) | _kg_raw_rtrimstr($s);
    def ascii_downcase: _kg_room(1) | _kg_raw_ascii_downcase;
    def ascii_upcase: _kg_room(1) | _kg_raw_ascii_upcase;
    def explode: _kg_room(40) | _kg_raw_explode;
    def implode: _kg_room(4) | _kg_raw_implode;
    def escape_html: _kg_room(6) | _kg_raw_escape_html;
    def unescape_html: _kg_room(1) | _kg_raw_unescape_html;
    def escape_sh: _kg_room(4) | _kg_raw_escape_sh;
    def encode_uri: _kg_room(3) | _kg_raw_encode_uri;
    def decode_uri: _kg_room(1) | _kg_raw_decode_uri;
    def encode_base64: _kg_room(2) | _kg_raw_encode_base64;
    def decode_base64: _kg_room(1) | _kg_raw_decode_base64;
"#;

/// Every native function an expression may reach (jaq's `env` is left out).
pub fn all() -> impl Iterator<Item = Fun<Data>> {
    let std = jaq_std::funs::<Data>()
        .filter(|(name, _, _)| *name != "env")
        .map(|(name, args, native)| {
            let name = GUARDED_NATIVES
                .iter()
                .find(|(from, _)| *from == name)
                .map_or(name, |(_, to)| to);
            (name, args, native)
        });
    jaq_core::funs::<Data>()
        .chain(std)
        .chain(own().into_vec().into_iter().map(run::<Data>))
}

/// Prints `v` as JSON within the evaluation's memory budget.
pub fn to_json(v: &Val) -> Vec<u8> {
    let left = usize::try_from(budget::memory_left()).unwrap_or(usize::MAX);
    match json_text(v, left) {
        Some(text) => text,
        None => budget::fail(Exceeded::Memory),
    }
}

fn own() -> Box<[Filter<RunPtr<Data>>]> {
    Box::new([
        ("tojson", v(0), |cv| {
            let text = to_json(cv.1.inner());
            super::charge_str(text.len());
            bome(Ok(MVal::scalar(Val::utf8_str(text))))
        }),
        ("fromjson", v(0), |cv| from_json(cv.1)),
        ("tobytes", v(0), |cv| bome(to_bytes(cv.1))),
        ("length", v(0), |cv| bome(length(cv.1))),
        ("contains", v(1), |cv| {
            unary(cv, |x, y| {
                Ok(MVal::from(compare::contains(x.inner(), y.inner())))
            })
        }),
        ("has", v(1), |cv| {
            unary(cv, |v, k| v.index_opt(&k).map(|o| MVal::from(o.is_some())))
        }),
        ("indices", v(1), |cv| unary(cv, indices)),
        ("bsearch", v(1), |cv| unary(cv, bsearch)),
        ("_kg_join", v(1), |cv| unary(cv, join)),
        ("_kg_regex_cost", v(1), |cv| unary(cv, regex_cost)),
        ("_kg_room", v(1), |cv| unary(cv, room)),
    ])
}

fn length(v: MVal) -> ValR<MVal> {
    budget::work(1);
    let n: usize = match v.inner() {
        Val::Null => 0,
        Val::Num(n) => {
            let negative = match n {
                Num::Int(i) => *i < 0,
                Num::BigInt(b) => b.sign() == num_bigint::Sign::Minus,
                Num::Float(f) => *f < 0.0,
                Num::Dec(d) => d.starts_with('-'),
            };
            return if negative { -v } else { Ok(v) };
        }
        Val::TStr(s) => {
            budget::work(s.len() as u64 / 64);
            // Characters as jaq counts them (an invalid byte sequence is one character).
            bstr::ByteSlice::chars(&s[..]).count()
        }
        Val::BStr(b) => b.len(),
        Val::Arr(a) => a.len(),
        Val::Obj(o) => o.len(),
        Val::Bool(_) => return Err(Error::str(format!("{v} has no length"))),
    };
    Ok(MVal::from(n))
}

/// What `fromjson` learns from a scan of its text before parsing it.
struct Shape {
    /// Largest nesting of `[`/`{`, outside strings.
    depth: u32,
    /// Containers opened, and separators (`,` `:`) outside strings: an upper bound of the
    /// values the text holds, less one per top-level value.
    values: u64,
    /// A `#` outside strings: jaq's reader would skip the rest of the line as a comment
    /// (hiding brackets from this scan), and JSON has no comments.
    comment: bool,
}

fn json_shape(text: &[u8]) -> Shape {
    let mut shape = Shape {
        depth: 0,
        values: 0,
        comment: false,
    };
    let (mut depth, mut in_str, mut escaped) = (0u32, false, false);
    for &b in text {
        if in_str {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                shape.depth = shape.depth.max(depth);
                shape.values += 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' => shape.values += 1,
            b'#' => {
                shape.comment = true;
                return shape;
            }
            _ => {}
        }
    }
    shape
}

fn from_json<'a>(v: MVal) -> jaq_core::ValXs<'a, MVal> {
    let Val::TStr(text) = v.inner() else {
        return bome(Err(Error::typ(v, "string")));
    };
    let text = text.clone();
    budget::work(1 + text.len() as u64 / 16);
    let shape = json_shape(&text);
    if shape.comment {
        return bome(Err(Error::str(format!(
            "cannot parse as JSON (`#` outside a string; JSON has no comments): {v}"
        ))));
    }
    budget::depth(shape.depth);
    budget::bytes(2 * text.len() as u64 + (ENTRY_BYTES + HEADER_BYTES) * shape.values);
    let mut out: Vec<Result<MVal, Exn<'a, MVal>>> = Vec::new();
    for parsed in jaq_json::read::parse_many(&text) {
        match parsed {
            Ok(value) => out.push(Ok(MVal::built(value, shape.depth))),
            Err(e) => {
                out.push(Err(Exn::from(Error::str(format!(
                    "cannot parse {v} as JSON: {e}"
                )))));
                break;
            }
        }
    }
    Box::new(out.into_iter())
}

fn to_bytes(v: MVal) -> ValR<MVal> {
    fn collect(v: &Val, out: &mut Vec<u8>) -> bool {
        budget::work(1);
        match v {
            Val::Num(Num::Int(i)) => match u8::try_from(*i) {
                Ok(b) => {
                    out.push(b);
                    true
                }
                Err(_) => false,
            },
            Val::BStr(b) | Val::TStr(b) => {
                budget::bytes(b.len() as u64);
                out.extend_from_slice(b);
                true
            }
            Val::Arr(items) => items.iter().all(|x| collect(x, out)),
            _ => false,
        }
    }
    let mut out = Vec::new();
    if collect(v.inner(), &mut out) {
        Ok(MVal::scalar(Val::byte_str(out)))
    } else {
        Err(Error::str(format!("cannot convert {v} to bytes")))
    }
}

fn indices(x: MVal, y: MVal) -> ValR<MVal> {
    match compare::indices(x.inner(), y.inner()) {
        Some(found) => {
            budget::bytes(HEADER_BYTES + ELEMENT_BYTES * found.len() as u64);
            Ok(found.into_iter().map(|i| MVal::from(i as isize)).collect())
        }
        None => Err(Error::index(x, y)),
    }
}

fn bsearch(a: MVal, x: MVal) -> ValR<MVal> {
    let Val::Arr(items) = a.inner() else {
        return Err(Error::typ(a, "array"));
    };
    let found = items.binary_search_by(|y| compare::cmp(y, x.inner()));
    let i = match found {
        Ok(i) => i as isize,
        Err(i) => -1 - i as isize,
    };
    Ok(MVal::from(i))
}

/// gojq's `join`: null as "", strings as they are, other scalars as JSON; one separator
/// between items. Linear in the result (jq's definition re-copies the string per item).
fn join(items: MVal, sep: MVal) -> ValR<MVal> {
    let values: Vec<&Val> = match items.inner() {
        Val::Arr(a) => a.iter().collect(),
        Val::Obj(o) => o.values().collect(),
        _ => return Err(Error::typ(items.clone(), "iterable (array or object)")),
    };
    // As in jq, the separator is only looked at between two items.
    let sep: &[u8] = match sep.inner() {
        Val::TStr(s) | Val::BStr(s) => s,
        _ if values.len() < 2 => b"",
        Val::Null => b"",
        _ => return Err(Error::str(format!("cannot join with {sep}"))),
    };
    let left = budget::memory_left();
    let mut out: Vec<u8> = Vec::new();
    for (i, item) in values.into_iter().enumerate() {
        budget::work(1);
        if i > 0 {
            out.extend_from_slice(sep);
        }
        match item {
            Val::Null => {}
            Val::TStr(s) | Val::BStr(s) => out.extend_from_slice(s),
            other => out.extend_from_slice(&to_json(other)),
        }
        if out.len() as u64 > left {
            budget::fail(Exceeded::Memory);
        }
    }
    super::charge_str(out.len());
    Ok(MVal::scalar(Val::utf8_str(out)))
}

/// Pays for a regular-expression search of the input string with `re` (at worst
/// proportional to their lengths' product) and refuses expressions longer than
/// [`MAX_REGEX`]; returns the input.
fn regex_cost(input: MVal, re: MVal) -> ValR<MVal> {
    let re_len = match re.inner() {
        Val::TStr(s) | Val::BStr(s) => s.len(),
        _ => return Err(Error::typ(re, "string")),
    };
    if re_len > MAX_REGEX {
        return Err(Error::str(format!(
            "regular expression of {re_len} bytes is longer than the {MAX_REGEX}-byte limit"
        )));
    }
    let text = input.inner().clone();
    let text_len = match &text {
        Val::TStr(s) | Val::BStr(s) => s.len(),
        _ => 0,
    };
    budget::work(1 + text_len as u64 * (re_len as u64 + 1) / 2);
    Ok(input)
}

/// Pays for a scan of the input (one unit per 64 bytes of a string, or elements of an array)
/// and fails unless `per` bytes per byte or element fit in the memory budget: the guard in
/// front of string functions whose time or output grows with their input. Returns the input.
fn room(input: MVal, per: MVal) -> ValR<MVal> {
    let n = match input.inner() {
        Val::TStr(s) | Val::BStr(s) => s.len(),
        Val::Arr(a) => a.len(),
        _ => 0,
    } as u64;
    budget::work(1 + n / 64);
    let per = match per.inner() {
        Val::Num(Num::Int(k)) => (*k).max(0) as u64,
        _ => 0,
    };
    if n.saturating_mul(per) > budget::memory_left() {
        budget::fail(Exceeded::Memory);
    }
    Ok(input)
}
