//! jq values: conversion from and to `serde_json`, gojq-style stringification, and small
//! read accessors used by the resolver.
//!
//! Conversion happens once per object change. It sorts object keys (gojq iterates objects in
//! sorted key order), turns integral floats into integers (gojq prints `2.0` as `2`) and
//! enforces a size and depth budget so a hostile object cannot exhaust memory or stack.
//!
//! The cache does not keep jq values: it keeps objects [`Packed`] and unpacks them when
//! something must be evaluated.

mod doc;
mod packed;

pub use doc::Doc;

pub use packed::{Keep, Node, PackSeed, Packed, Parsed, Walk};

use jaq_json::{Map, Num, Rc, Val};
use serde_json::Value as Json;

/// Budget for converting one object to a jq value.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Approximate size budget: string bytes plus 8 per node.
    pub max_bytes: usize,
    /// Maximum nesting depth.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // Kubernetes stores at most ~1.5 MiB per object; anything far beyond is not a real
        // object. Depth 128 matches serde_json's own recursion limit.
        Limits {
            max_bytes: 4 * 1024 * 1024,
            max_depth: 128,
        }
    }
}

/// Why an object could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// The object exceeds the size budget.
    #[error("object is larger than the {limit}-byte budget")]
    TooLarge {
        /// The budget in bytes.
        limit: usize,
    },
    /// The object nests deeper than the depth budget.
    #[error("object nests deeper than {limit} levels")]
    TooDeep {
        /// The depth budget.
        limit: usize,
    },
}

/// Converts a JSON value to a jq value within `limits`.
pub fn from_json(json: &Json, limits: Limits) -> Result<Val, ConvertError> {
    let mut budget = limits.max_bytes;
    convert(json, 0, limits, &mut budget)
}

fn spend(budget: &mut usize, amount: usize, limits: Limits) -> Result<(), ConvertError> {
    *budget = budget.checked_sub(amount).ok_or(ConvertError::TooLarge {
        limit: limits.max_bytes,
    })?;
    Ok(())
}

fn convert(
    json: &Json,
    depth: usize,
    limits: Limits,
    budget: &mut usize,
) -> Result<Val, ConvertError> {
    if depth > limits.max_depth {
        return Err(ConvertError::TooDeep {
            limit: limits.max_depth,
        });
    }
    spend(budget, 8, limits)?;
    Ok(match json {
        Json::Null => Val::Null,
        Json::Bool(b) => Val::Bool(*b),
        Json::Number(n) => Val::Num(number(n)),
        Json::String(s) => {
            spend(budget, s.len(), limits)?;
            string(s)
        }
        Json::Array(items) => {
            let out = items
                .iter()
                .map(|item| convert(item, depth + 1, limits, budget))
                .collect::<Result<Vec<_>, _>>()?;
            Val::Arr(Rc::new(out))
        }
        Json::Object(map) => {
            let mut entries: Vec<(&String, &Json)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let mut out = Map::default();
            out.reserve(entries.len());
            for (key, value) in entries {
                spend(budget, key.len(), limits)?;
                out.insert(string(key), convert(value, depth + 1, limits, budget)?);
            }
            Val::obj(out)
        }
    })
}

/// Strict structural equality: same variants, same numbers, same key order.
pub fn identical(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Num(x), Val::Num(y)) => match (x, y) {
            (Num::Int(x), Num::Int(y)) => x == y,
            (Num::Float(x), Num::Float(y)) => x.to_bits() == y.to_bits(),
            _ => false,
        },
        (Val::TStr(x), Val::TStr(y)) | (Val::BStr(x), Val::BStr(y)) => x == y,
        (Val::Arr(x), Val::Arr(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| identical(a, b))
        }
        (Val::Obj(x), Val::Obj(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((ka, va), (kb, vb))| identical(ka, kb) && identical(va, vb))
        }
        _ => false,
    }
}

/// A jq string value.
pub fn string(s: &str) -> Val {
    Val::utf8_str(s.to_owned().into_bytes())
}

fn number(n: &serde_json::Number) -> Num {
    if let Some(i) = n.as_i64().and_then(|i| isize::try_from(i).ok()) {
        return Num::Int(i);
    }
    match n.as_f64() {
        Some(f) => float(f),
        None => Num::Float(f64::NAN),
    }
}

/// Integral floats within ±2^53 become integers, as in gojq's output.
fn float(f: f64) -> Num {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if f.fract() == 0.0 && f.abs() <= EXACT {
        Num::Int(f as isize)
    } else {
        Num::Float(f)
    }
}

/// Converts a jq value back to JSON. Non-finite numbers become `null`; byte strings are
/// decoded lossily; non-string object keys are stringified.
pub fn to_json(val: &Val) -> Json {
    match val {
        Val::Null => Json::Null,
        Val::Bool(b) => Json::Bool(*b),
        Val::Num(n) => match number_f64(n) {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Json::from(f as i64),
            Some(f) => serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number),
            None => Json::Null,
        },
        Val::TStr(b) | Val::BStr(b) => Json::String(String::from_utf8_lossy(b).into_owned()),
        Val::Arr(items) => Json::Array(items.iter().map(to_json).collect()),
        Val::Obj(map) => Json::Object(
            map.iter()
                .map(|(k, v)| (key_string(k), to_json(v)))
                .collect(),
        ),
    }
}

fn key_string(key: &Val) -> String {
    match key {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
        other => to_text(other),
    }
}

/// The number as f64, if it is one.
pub fn number_f64(n: &Num) -> Option<f64> {
    match n {
        Num::Int(i) => Some(*i as f64),
        Num::Float(f) => Some(*f),
        Num::BigInt(b) => b.to_string().parse().ok(),
        Num::Dec(d) => d.parse().ok(),
    }
}

/// gojq's `tostring`: strings unquoted, integral numbers without a decimal point, everything
/// else as compact JSON (objects with sorted keys, as the input was converted sorted).
pub fn to_text(val: &Val) -> String {
    match val {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
        Val::Num(n) => match number_f64(n) {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e17 => format!("{}", f as i64),
            Some(f) => format!("{f}"),
            None => "null".to_owned(),
        },
        other => to_json(other).to_string(),
    }
}

/// [`to_text`] of at most about `max` bytes: a longer text is cut (at a character boundary)
/// and ends with `…(N bytes)` giving its full length — `…(more than N bytes)` for an array
/// or object, which is never printed whole just to be measured.
pub fn to_text_bounded(val: &Val, max: usize) -> String {
    let cut = |text: &mut String| {
        let mut at = max.min(text.len());
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    };
    match val {
        Val::TStr(b) | Val::BStr(b) if b.len() > max => {
            let mut text = String::from_utf8_lossy(&b[..max + 4]).into_owned();
            cut(&mut text);
            format!("{text}…({} bytes)", b.len())
        }
        Val::Arr(_) | Val::Obj(_) => match crate::expr::metered::json_text(val, max) {
            Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            None => {
                let mut text = crate::expr::metered::json_prefix(val, max + 4);
                cut(&mut text);
                format!("{text}…(more than {max} bytes)")
            }
        },
        _ => to_text(val),
    }
}

/// Looks up `key` in an object value.
pub fn get<'v>(val: &'v Val, key: &str) -> Option<&'v Val> {
    match val {
        Val::Obj(map) => map.get(&string(key)),
        _ => None,
    }
}

/// Walks a path of object keys.
pub fn get_path<'v>(val: &'v Val, path: &[&str]) -> Option<&'v Val> {
    path.iter().try_fold(val, |v, key| get(v, key))
}

/// The bytes of a string value.
pub fn as_bytes(val: &Val) -> Option<&[u8]> {
    match val {
        Val::TStr(b) | Val::BStr(b) => Some(b),
        _ => None,
    }
}

/// The string content of a string value.
pub fn as_str(val: &Val) -> Option<&str> {
    as_bytes(val).and_then(|b| std::str::from_utf8(b).ok())
}

/// The elements of an array value (empty for anything else).
pub fn as_array(val: &Val) -> &[Val] {
    match val {
        Val::Arr(items) => items,
        _ => &[],
    }
}

/// The entries of an object value (empty for anything else).
pub fn entries(val: &Val) -> impl Iterator<Item = (&Val, &Val)> {
    let map = match val {
        Val::Obj(map) => Some(map),
        _ => None,
    };
    map.into_iter().flat_map(|m| m.iter())
}

/// A number value as f64.
pub fn as_f64(val: &Val) -> Option<f64> {
    match val {
        Val::Num(n) => number_f64(n),
        _ => None,
    }
}

/// True for jq's truthy values (anything but `null` and `false`).
pub fn truthy(val: &Val) -> bool {
    !matches!(val, Val::Null | Val::Bool(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_keys_and_normalizes_integral_floats() {
        let val = from_json(&json!({"b": 2.0, "a": [1.5, 3]}), Limits::default()).unwrap();
        assert_eq!(to_json(&val).to_string(), r#"{"a":[1.5,3],"b":2}"#);
        let keys: Vec<String> = entries(&val).map(|(k, _)| to_text(k)).collect();
        assert_eq!(keys, ["a", "b"]);
    }

    #[test]
    fn enforces_budgets() {
        let big = json!({"x": "y".repeat(100)});
        let tight = Limits {
            max_bytes: 50,
            max_depth: 8,
        };
        assert!(matches!(
            from_json(&big, tight),
            Err(ConvertError::TooLarge { .. })
        ));
        let mut deep = json!(1);
        for _ in 0..20 {
            deep = json!([deep]);
        }
        let shallow = Limits {
            max_bytes: 10_000,
            max_depth: 8,
        };
        assert!(matches!(
            from_json(&deep, shallow),
            Err(ConvertError::TooDeep { .. })
        ));
    }

    #[test]
    fn bounded_text_never_prints_a_large_value_whole() {
        let big: Vec<serde_json::Value> = (0..100_000).map(|i| json!({"i": i})).collect();
        let val = from_json(&json!(big), Limits::default()).unwrap();
        let text = to_text_bounded(&val, 100);
        assert!(
            text.len() <= 140 && text.ends_with("…(more than 100 bytes)"),
            "{text}"
        );
        assert!(text.starts_with(r#"[{"i":0},{"i":1}"#), "{text}");
        let s = string(&"é".repeat(1000));
        let text = to_text_bounded(&s, 11);
        assert_eq!(text, "ééééé…(2000 bytes)");
        assert_eq!(to_text_bounded(&string("short"), 100), "short");
        assert_eq!(to_text_bounded(&Val::Num(Num::Int(7)), 100), "7");
    }

    #[test]
    fn text_follows_gojq() {
        assert_eq!(to_text(&string("abc")), "abc");
        assert_eq!(to_text(&Val::Num(Num::Float(4.0))), "4");
        assert_eq!(to_text(&Val::Num(Num::Float(1.5))), "1.5");
        assert_eq!(to_text(&Val::Bool(true)), "true");
    }
}
