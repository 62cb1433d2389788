//! Plain path expressions (the extension `interpreterDefinition.replicasAssignPath`): the
//! jq subset whose every output is a location that can be written (`.spec.replicas`,
//! `.spec.groups[0].replicas`, `.spec.groups[]?.replicas`, `.spec["a.b"]`). Evaluated here
//! on the JSON object (the expression gate refuses jq's `path()` for definitions), yielding
//! one location per output in jq's order.

use serde_json::Value as Json;

/// One step of a location in a JSON document.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// An object member.
    Key(String),
    /// An array element.
    Index(usize),
}

/// One segment of a path expression.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    /// `.name`, `."name"`, `["name"]`.
    Key(String),
    /// `[N]`.
    Index(usize),
    /// `[]` (`[]?`: nothing for a value that is not an array).
    Each { optional: bool },
}

/// A parsed path expression.
#[derive(Debug, Clone, PartialEq)]
pub struct AssignPath(Vec<Segment>);

/// Most locations one expression may yield.
pub const MAX_LOCATIONS: usize = 4096;

/// An expression that is not a plain path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{expression}` is not a plain path expression: {problem}")]
pub struct AssignPathError {
    /// The expression.
    pub expression: String,
    /// What is not a plain path in it.
    pub problem: NotPlain,
}

/// What makes an expression no plain path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotPlain {
    /// It does not start with `.`.
    #[error("it must start with `.`")]
    NoLeadingDot,
    /// A string without its closing quote.
    #[error("unterminated string")]
    UnterminatedString,
    /// `.` alone.
    #[error("`.` alone is the whole object")]
    WholeObject,
    /// `.` followed by no name.
    #[error("a name must follow `.`")]
    NoName,
    /// `[` without `]`.
    #[error("unclosed `[`")]
    UnclosedBracket,
    /// `["key"` followed by something else than `]`.
    #[error("expected `]` after the key")]
    NoBracketAfterKey,
    /// Something else than a key, an index or nothing in brackets.
    #[error("only `[]`, `[N]` and `[\"key\"]` are allowed")]
    Bracket,
    /// Another segment.
    #[error("only `.name`, `[N]`, `[]` and `[\"key\"]` segments are allowed")]
    Segment,
}

/// Why a path expression yields no locations on a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// `[]` (not `[]?`) on a value that is not an array.
    #[error("`[]` on a value that is not an array")]
    NotAnArray,
    /// More than [`MAX_LOCATIONS`] locations.
    #[error("more than {MAX_LOCATIONS} locations")]
    TooMany,
}

impl AssignPath {
    /// Parses `source`; the error says what is not a plain path.
    pub fn parse(source: &str) -> Result<AssignPath, AssignPathError> {
        let s = source.trim();
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut out = Vec::new();
        let fail = |problem: NotPlain| AssignPathError {
            expression: source.to_owned(),
            problem,
        };
        if !s.starts_with('.') {
            return Err(fail(NotPlain::NoLeadingDot));
        }
        while i < bytes.len() {
            match bytes[i] {
                b'.' if bytes.get(i + 1) == Some(&b'"') => {
                    let (key, next) =
                        quoted(s, i + 1).ok_or_else(|| fail(NotPlain::UnterminatedString))?;
                    out.push(Segment::Key(key));
                    i = next;
                }
                b'.' if bytes.get(i + 1) == Some(&b'[') => i += 1,
                b'.' => {
                    let start = i + 1;
                    let mut end = start;
                    while end < bytes.len()
                        && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_')
                    {
                        end += 1;
                    }
                    if end == start {
                        if bytes.len() == 1 {
                            return Err(fail(NotPlain::WholeObject));
                        }
                        return Err(fail(NotPlain::NoName));
                    }
                    out.push(Segment::Key(s[start..end].to_owned()));
                    i = end;
                }
                b'[' => {
                    let close = s[i..]
                        .find(']')
                        .map(|p| i + p)
                        .ok_or_else(|| fail(NotPlain::UnclosedBracket))?;
                    let inner = s[i + 1..close].trim();
                    let mut next = close + 1;
                    if inner.is_empty() {
                        let optional = bytes.get(next) == Some(&b'?');
                        if optional {
                            next += 1;
                        }
                        out.push(Segment::Each { optional });
                    } else if inner.starts_with('"') {
                        let (key, end) = quoted(
                            s,
                            i + 1 + (s[i + 1..].len() - s[i + 1..].trim_start().len()),
                        )
                        .ok_or_else(|| fail(NotPlain::UnterminatedString))?;
                        if s[end..].trim_start().as_bytes().first() != Some(&b']') {
                            return Err(fail(NotPlain::NoBracketAfterKey));
                        }
                        out.push(Segment::Key(key));
                        next = s[end..].find(']').map_or(close + 1, |p| end + p + 1);
                    } else {
                        let n = inner
                            .parse::<usize>()
                            .map_err(|_| fail(NotPlain::Bracket))?;
                        out.push(Segment::Index(n));
                    }
                    i = next;
                }
                b'?' => i += 1,
                _ => {
                    return Err(fail(NotPlain::Segment));
                }
            }
        }
        Ok(AssignPath(out))
    }

    /// Every location the expression yields on `doc`, at most [`MAX_LOCATIONS`]. A missing
    /// member is still a location (it can be added); `[]` on an absent value yields nothing;
    /// `[]` on anything else that is not an array is an error unless `[]?`.
    pub fn locations(&self, doc: &Json) -> Result<Vec<Vec<Step>>, LocationError> {
        let mut current: Vec<(Vec<Step>, Option<&Json>)> = vec![(Vec::new(), Some(doc))];
        for seg in &self.0 {
            let mut next = Vec::new();
            for (path, value) in current {
                match seg {
                    Segment::Key(k) => {
                        let mut p = path;
                        p.push(Step::Key(k.clone()));
                        next.push((p, value.and_then(|v| v.get(k))));
                    }
                    Segment::Index(n) => {
                        let mut p = path;
                        p.push(Step::Index(*n));
                        next.push((p, value.and_then(|v| v.get(*n))));
                    }
                    Segment::Each { optional } => match value {
                        Some(Json::Array(items)) => {
                            for (n, item) in items.iter().enumerate() {
                                let mut p = path.clone();
                                p.push(Step::Index(n));
                                next.push((p, Some(item)));
                            }
                        }
                        None | Some(Json::Null) => {}
                        Some(_) if *optional => {}
                        Some(_) => return Err(LocationError::NotAnArray),
                    },
                }
                if next.len() > MAX_LOCATIONS {
                    return Err(LocationError::TooMany);
                }
            }
            current = next;
        }
        Ok(current.into_iter().map(|(p, _)| p).collect())
    }
}

/// A JSON string literal starting at byte `at` (a `"`): its text and the byte after it.
fn quoted(s: &str, at: usize) -> Option<(String, usize)> {
    let rest = s.get(at..)?;
    let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
    let key = de.next()?.ok()?;
    Some((key, at + de.byte_offset()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> Step {
        Step::Key(k.to_owned())
    }

    #[test]
    fn plain_paths_parse_and_yield_their_locations() {
        let doc = json!({"spec": {"replicas": 2, "groups": [{"replicas": 1}, {"n": 0}], "a.b": 1}});
        let at = |src: &str| AssignPath::parse(src).unwrap().locations(&doc).unwrap();
        assert_eq!(
            at(".spec.replicas"),
            vec![vec![key("spec"), key("replicas")]]
        );
        assert_eq!(
            at(".spec.missing.deeper"),
            vec![vec![key("spec"), key("missing"), key("deeper")]]
        );
        assert_eq!(
            at(".spec.groups[]?.replicas"),
            vec![
                vec![key("spec"), key("groups"), Step::Index(0), key("replicas")],
                vec![key("spec"), key("groups"), Step::Index(1), key("replicas")],
            ]
        );
        assert_eq!(
            at(".spec.groups[1].n"),
            vec![vec![key("spec"), key("groups"), Step::Index(1), key("n")]]
        );
        assert_eq!(at(r#".spec["a.b"]"#), vec![vec![key("spec"), key("a.b")]]);
        assert_eq!(at(r#".spec."a.b""#), vec![vec![key("spec"), key("a.b")]]);
        assert!(at(".spec.absent[]").is_empty());
        assert!(
            AssignPath::parse(".spec.replicas[]")
                .unwrap()
                .locations(&doc)
                .is_err()
        );
        assert!(
            AssignPath::parse(".spec.replicas[]?")
                .unwrap()
                .locations(&doc)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn anything_but_a_plain_path_is_refused() {
        for bad in [
            ".spec.replicas // 1",
            "1",
            ".",
            ".spec | .replicas",
            ".spec[.x]",
            ".a[",
            ".a[-1]",
            "path(.a)",
        ] {
            assert!(AssignPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn locations_are_bounded() {
        let row: Vec<u8> = vec![0; 100];
        let doc = json!({"a": vec![row; 100]});
        let p = AssignPath::parse(".a[][]").unwrap();
        assert_eq!(p.locations(&doc).unwrap_err(), LocationError::TooMany);
    }
}
