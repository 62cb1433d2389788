//! JSONPatch (RFC 6902) operations as Karmada applies them, and the base64 form Go gives a
//! `[]byte` field in JSON.

pub use crate::definition::assign::Step;
use serde_json::{Value as Json, json};

/// The JSON pointer (RFC 6901) of a path: the write path's.
pub use crate::patch::ops::pointer;

/// Why a value cannot be put at a path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// An index past the end of its array (at this JSON pointer).
    #[error("{0} is past the end of its array")]
    PastEnd(String),
    /// The path runs through a scalar (at this JSON pointer).
    #[error("{0} runs through a value that is not an object or array")]
    ThroughScalar(String),
    /// An array element below a missing member (at this JSON pointer) cannot be built.
    #[error("{0} does not exist")]
    Missing(String),
    /// The empty path.
    #[error("cannot replace the whole object")]
    WholeObject,
}

/// The operation that puts `value` at `path` in `doc`: `replace` where something is,
/// `add` at the first missing object member (with the rest of the path built as nested
/// objects); `None` when the value is there already; `Err` when the path runs through a
/// scalar or past the end of an array.
pub fn set(doc: &Json, path: &[Step], value: Json) -> Result<Option<Json>, PatchError> {
    let mut at = doc;
    for (i, step) in path.iter().enumerate() {
        let next = match (step, at) {
            (Step::Key(k), Json::Object(map)) => map.get(k),
            (Step::Index(n), Json::Array(items)) => match items.get(*n) {
                Some(v) => Some(v),
                None => {
                    return Err(PatchError::PastEnd(pointer(&path[..=i])));
                }
            },
            _ => {
                return Err(PatchError::ThroughScalar(pointer(&path[..=i])));
            }
        };
        match next {
            Some(v) => at = v,
            None => {
                let mut built = value;
                for rest in path[i + 1..].iter().rev() {
                    built = match rest {
                        Step::Key(k) => json!({ k.clone(): built }),
                        Step::Index(_) => {
                            return Err(PatchError::Missing(pointer(&path[..=i])));
                        }
                    };
                }
                return Ok(Some(
                    json!({"op": "add", "path": pointer(&path[..=i]), "value": built}),
                ));
            }
        }
    }
    if *at == value {
        return Ok(None);
    }
    if path.is_empty() {
        return Err(PatchError::WholeObject);
    }
    Ok(Some(
        json!({"op": "replace", "path": pointer(path), "value": value}),
    ))
}

/// Standard base64 with padding, as Go's `encoding/json` writes `[]byte`.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"[{\"op\":\"x\"}]?"), "W3sib3AiOiJ4In1dPw==");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn set_replaces_adds_or_refuses() {
        let doc = json!({"spec": {"replicas": 2, "groups": [{"n": 1}], "name": "x"}});
        let key = |k: &str| Step::Key(k.to_owned());
        let at = [key("spec"), key("replicas")];
        assert_eq!(
            set(&doc, &at, json!(5)).unwrap(),
            Some(json!({"op": "replace", "path": "/spec/replicas", "value": 5}))
        );
        assert_eq!(set(&doc, &at, json!(2)).unwrap(), None);
        assert_eq!(
            set(&doc, &[key("spec"), key("scale"), key("n")], json!(3)).unwrap(),
            Some(json!({"op": "add", "path": "/spec/scale", "value": {"n": 3}}))
        );
        assert_eq!(
            set(
                &doc,
                &[key("spec"), key("groups"), Step::Index(0), key("a/b~")],
                json!(1)
            )
            .unwrap(),
            Some(json!({"op": "add", "path": "/spec/groups/0/a~1b~0", "value": 1}))
        );
        assert!(
            set(
                &doc,
                &[key("spec"), key("groups"), Step::Index(3)],
                json!(1)
            )
            .is_err()
        );
        assert!(set(&doc, &[key("spec"), key("name"), key("x")], json!(1)).is_err());
    }
}
