//! Metered structural operations on jq values: equality, ordering, `contains` and
//! `indices`. Each visits values node by node and pays one work unit per node, so comparing
//! or searching large values costs what it really costs. They agree with jaq's own
//! (unmetered) implementations, which recurse without bound on work.

use crate::expr::budget;
use jaq_json::{Rc, Val};
use std::cmp::Ordering;

/// Equality, as jq's `==`.
pub fn eq(a: &Val, b: &Val) -> bool {
    budget::work(1);
    match (a, b) {
        (Val::Arr(x), Val::Arr(y)) => {
            x.len() == y.len()
                && (Rc::ptr_eq(x, y) || x.iter().zip(y.iter()).all(|(a, b)| eq(a, b)))
        }
        (Val::Obj(x), Val::Obj(y)) => {
            x.len() == y.len()
                && (Rc::ptr_eq(x, y) || x.iter().all(|(k, v)| y.get(k).is_some_and(|w| eq(v, w))))
        }
        (Val::BStr(x) | Val::TStr(x), Val::BStr(y) | Val::TStr(y)) => {
            budget::work(x.len().min(y.len()) as u64 / 64);
            x == y
        }
        _ => a == b,
    }
}

/// jq's total order: null < false < true < numbers < strings < arrays < objects; arrays
/// lexicographically; objects by their sorted keys, then by the values in key order.
pub fn cmp(a: &Val, b: &Val) -> Ordering {
    budget::work(1);
    match (a, b) {
        (Val::Arr(x), Val::Arr(y)) => {
            if Rc::ptr_eq(x, y) {
                return Ordering::Equal;
            }
            for (a, b) in x.iter().zip(y.iter()) {
                let o = cmp(a, b);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Val::Obj(x), Val::Obj(y)) => match (x.len(), y.len()) {
            (0, 0) => Ordering::Equal,
            (0, _) => Ordering::Less,
            (_, 0) => Ordering::Greater,
            _ if Rc::ptr_eq(x, y) => Ordering::Equal,
            _ => {
                let l = sorted_entries(x.iter());
                let r = sorted_entries(y.iter());
                let keys = lexicographic(l.iter().map(|e| e.0), r.iter().map(|e| e.0));
                keys.then_with(|| lexicographic(l.iter().map(|e| e.1), r.iter().map(|e| e.1)))
            }
        },
        (Val::BStr(x) | Val::TStr(x), Val::BStr(y) | Val::TStr(y)) => {
            budget::work(x.len().min(y.len()) as u64 / 64);
            x.cmp(y)
        }
        _ => a.cmp(b),
    }
}

fn sorted_entries<'v>(
    entries: impl Iterator<Item = (&'v Val, &'v Val)>,
) -> Vec<(&'v Val, &'v Val)> {
    let mut v: Vec<(&Val, &Val)> = entries.collect();
    budget::work(v.len() as u64);
    v.sort_by(|a, b| cmp(a.0, b.0));
    v
}

fn lexicographic<'v>(
    mut l: impl Iterator<Item = &'v Val>,
    mut r: impl Iterator<Item = &'v Val>,
) -> Ordering {
    loop {
        match (l.next(), r.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(a), Some(b)) => {
                let o = cmp(a, b);
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// jq's `contains`: substrings, every element of `b` contained in some element of `a`,
/// every entry of `b` contained in `a`'s entry of the same key, else equality.
pub fn contains(a: &Val, b: &Val) -> bool {
    budget::work(1);
    match (a, b) {
        (Val::BStr(l), Val::BStr(r)) | (Val::TStr(l), Val::TStr(r)) => {
            budget::work((l.len() + r.len()) as u64 / 16);
            memchr::memmem::find(l, r).is_some()
        }
        (Val::Arr(l), Val::Arr(r)) => r.iter().all(|r| l.iter().any(|l| contains(l, r))),
        (Val::Obj(l), Val::Obj(r)) => r
            .iter()
            .all(|(k, r)| l.get(k).is_some_and(|l| contains(l, r))),
        _ => eq(a, b),
    }
}

/// Start positions of `y` in `x` (as jq's `indices`): substrings by character offset,
/// sub-arrays, or elements equal to `y`. `None` when `x` cannot be searched for `y`.
pub fn indices(x: &Val, y: &Val) -> Option<Vec<usize>> {
    budget::work(1);
    Some(match (x, y) {
        (Val::BStr(_), Val::BStr(y)) | (Val::TStr(_), Val::TStr(y)) if y.is_empty() => Vec::new(),
        (Val::TStr(x), Val::TStr(y)) => {
            budget::work(x.len() as u64 * (1 + y.len() as u64 / 64));
            // Character offsets, as jaq counts characters (an invalid byte sequence is one).
            let mut out = Vec::new();
            for (char_index, (byte, _, _)) in bstr::ByteSlice::char_indices(&x[..]).enumerate() {
                match x.get(byte..byte + y.len()) {
                    Some(w) if w == &y[..] => out.push(char_index),
                    Some(_) => {}
                    None => break,
                }
            }
            out
        }
        (Val::BStr(x), Val::BStr(y)) => {
            budget::work(x.len() as u64 * (1 + y.len() as u64 / 64));
            x.windows(y.len())
                .enumerate()
                .filter_map(|(i, w)| (w == &y[..]).then_some(i))
                .collect()
        }
        (Val::Arr(_), Val::Arr(y)) if y.is_empty() => Vec::new(),
        (Val::Arr(x), Val::Arr(y)) => x
            .windows(y.len())
            .enumerate()
            .filter_map(|(i, w)| w.iter().zip(y.iter()).all(|(a, b)| eq(a, b)).then_some(i))
            .collect(),
        (Val::Arr(x), y) => x
            .iter()
            .enumerate()
            .filter_map(|(i, a)| eq(a, y).then_some(i))
            .collect(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::value::{Limits, from_json};
    use serde_json::json;

    fn v(j: serde_json::Value) -> Val {
        from_json(&j, Limits::default()).unwrap()
    }

    #[test]
    fn agrees_with_jaq_on_order_and_equality() {
        let samples = [
            json!(null),
            json!(false),
            json!(true),
            json!(0),
            json!(1.5),
            json!(-3),
            json!(""),
            json!("a"),
            json!("ab"),
            json!([]),
            json!([1]),
            json!([1, 2]),
            json!([[1], 2]),
            json!({}),
            json!({"a": 1}),
            json!({"a": 2}),
            json!({"b": 0}),
            json!({"a": 1, "b": 0}),
            json!({"a": {"x": [1, 2]}}),
        ];
        for a in &samples {
            for b in &samples {
                let (a, b) = (v(a.clone()), v(b.clone()));
                assert_eq!(cmp(&a, &b), a.cmp(&b), "{a} vs {b}");
                assert_eq!(eq(&a, &b), a == b, "{a} == {b}");
            }
        }
    }

    #[test]
    fn contains_and_indices_follow_jq() {
        assert!(contains(&v(json!("foobar")), &v(json!("bar"))));
        assert!(contains(
            &v(json!({"a": [1, 2, {"b": 3}]})),
            &v(json!({"a": [{"b": 3}]}))
        ));
        assert!(!contains(&v(json!([1, 2])), &v(json!([3]))));
        assert_eq!(
            indices(&v(json!("a,b, cd, efg")), &v(json!(", "))),
            Some(vec![3, 7])
        );
        assert_eq!(indices(&v(json!("äa")), &v(json!("a"))), Some(vec![1]));
        assert_eq!(
            indices(&v(json!([0, 1, 2, 1, 3, 1, 2])), &v(json!([1, 2]))),
            Some(vec![1, 5])
        );
        assert_eq!(
            indices(&v(json!([0, 1, 1])), &v(json!(1))),
            Some(vec![1, 2])
        );
        assert_eq!(indices(&v(json!(1)), &v(json!(1))), None);
    }
}
