//! A native evaluator for the simplest expressions — key paths (`.metadata.labels["a/b"]`,
//! optionally with `?`), literals and `//` between them — which are most selectors and many
//! scale paths. Same results as jq, without the interpreter's per-call overhead. Anything
//! else is left to jaq.

use super::value::{Packed, Walk, as_bytes};
use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Term};
use jaq_core::path::{Opt, Part};
use jaq_json::Val;

/// A natively evaluated expression.
#[derive(Debug, Clone)]
pub enum Fast {
    /// `.a.b["c"]?`: keys, each with whether it is optional.
    Path(Vec<(Val, bool)>),
    /// `l // r`.
    Alt(Box<Fast>, Box<Fast>),
    /// A literal.
    Lit(Val),
}

/// Recognizes a fast expression in a parsed term.
pub fn recognize(term: &Term<&str>) -> Option<Fast> {
    match term {
        Term::Id => Some(Fast::Path(Vec::new())),
        Term::Path(base, path) => {
            let Fast::Path(mut keys) = recognize(base)? else {
                return None;
            };
            for (part, opt) in &path.0 {
                let Part::Index(index) = part else {
                    return None;
                };
                keys.push((plain_string(index)?, matches!(opt, Opt::Optional)));
            }
            Some(Fast::Path(keys))
        }
        Term::BinOp(l, BinaryOp::Alt, r) => {
            Some(Fast::Alt(Box::new(recognize(l)?), Box::new(recognize(r)?)))
        }
        Term::Num(n) => {
            let f: f64 = n.parse().ok()?;
            let json = serde_json::Number::from_f64(f)?;
            Some(Fast::Lit(
                super::value::from_json(&serde_json::Value::Number(json), super::Limits::default())
                    .ok()?,
            ))
        }
        Term::Str(None, _) => Some(Fast::Lit(plain_string(term)?)),
        Term::Call(name, args) if args.is_empty() => match *name {
            "null" => Some(Fast::Lit(Val::Null)),
            "true" => Some(Fast::Lit(Val::Bool(true))),
            "false" => Some(Fast::Lit(Val::Bool(false))),
            _ => None,
        },
        _ => None,
    }
}

fn plain_string(term: &Term<&str>) -> Option<Val> {
    let Term::Str(None, parts) = term else {
        return None;
    };
    let mut s = String::new();
    for part in parts {
        match part {
            StrPart::Str(text) => s.push_str(text),
            StrPart::Char(c) => s.push(*c),
            StrPart::Term(_) => return None,
        }
    }
    Some(super::value::string(&s))
}

/// Why a fast evaluation failed (the message jq would give).
#[derive(Debug)]
pub struct FastError(pub String);

impl Fast {
    /// Evaluates: `Ok(None)` means no output (an optional step on a non-object).
    pub fn eval(&self, input: &Val) -> Result<Option<Val>, FastError> {
        match self {
            Fast::Lit(v) => Ok(Some(v.clone())),
            Fast::Path(keys) => {
                let mut at = input;
                for (key, optional) in keys {
                    match at {
                        Val::Null => return Ok(Some(Val::Null)),
                        Val::Obj(map) => match map.get(key) {
                            Some(v) => at = v,
                            None => return Ok(Some(Val::Null)),
                        },
                        other => {
                            if *optional {
                                return Ok(None);
                            }
                            return Err(FastError(format!(
                                "cannot index {} with {}",
                                super::value::to_json(other),
                                super::value::to_json(key)
                            )));
                        }
                    }
                }
                Ok(Some(at.clone()))
            }
            Fast::Alt(l, r) => match l.eval(input)? {
                Some(v) if super::value::truthy(&v) => Ok(Some(v)),
                _ => r.eval(input),
            },
        }
    }

    /// [`Fast::eval`] on a packed value, unpacking only what the paths reach; `None` when
    /// it cannot tell without the whole value (a step that fails: its message shows the
    /// value) or the buffer is empty or malformed.
    pub fn eval_packed(&self, input: &Packed) -> Option<Result<Option<Val>, FastError>> {
        match self {
            Fast::Lit(v) => Some(Ok(Some(v.clone()))),
            Fast::Path(keys) => {
                // Keys are strings (`recognize` makes no others): checked, not collected.
                if !keys.iter().all(|(key, _)| as_bytes(key).is_some()) {
                    return None;
                }
                match input.walk(keys.iter().filter_map(|(key, _)| as_bytes(key)))? {
                    Walk::Found(v) => Some(Ok(Some(v))),
                    Walk::Stuck(step) if keys.get(step).is_some_and(|(_, optional)| *optional) => {
                        Some(Ok(None))
                    }
                    Walk::Stuck(_) => None,
                }
            }
            Fast::Alt(l, r) => match l.eval_packed(input)? {
                Ok(Some(v)) if super::value::truthy(&v) => Some(Ok(Some(v))),
                Ok(_) => r.eval_packed(input),
                Err(e) => Some(Err(e)),
            },
        }
    }
}
