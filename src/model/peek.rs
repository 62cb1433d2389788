//! A glance at a JSON object's text: its first top-level `apiVersion` and `kind`, read
//! without parsing the rest, so the rule of what is kept can be chosen before the object is
//! packed while parsed. Only a guess: the parse is the truth (a duplicate key fails it
//! there, an escaped string is not read here), and callers check it.

/// The first top-level `apiVersion` and `kind` string values of `text` (an object), each
/// `None` when not met before the scan stopped (the end of the object, anything malformed,
/// or a string with escapes).
pub fn type_of(text: &str) -> (Option<&str>, Option<&str>) {
    let b = text.as_bytes();
    let (mut api_version, mut kind) = (None, None);
    let mut i = skip_space(b, 0);
    if b.get(i) != Some(&b'{') {
        return (None, None);
    }
    i += 1;
    while api_version.is_none() || kind.is_none() {
        i = skip_space(b, i);
        if b.get(i) != Some(&b'"') {
            break;
        }
        let (key, after) = string_at(b, i);
        i = skip_space(b, after);
        if b.get(i) != Some(&b':') {
            break;
        }
        i = skip_space(b, i + 1);
        if b.get(i) == Some(&b'"') {
            let (value, after) = string_at(b, i);
            match key {
                Some("apiVersion") if api_version.is_none() => api_version = value,
                Some("kind") if kind.is_none() => kind = value,
                _ => {}
            }
            i = after;
        } else {
            i = skip_value(b, i);
        }
        i = skip_space(b, i);
        if b.get(i) != Some(&b',') {
            break;
        }
        i += 1;
    }
    (api_version, kind)
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The string opening at `b[i]` (a `"`): its text when it has no escapes, and where it ends
/// (after the closing quote, or the end of `b`).
fn string_at(b: &[u8], i: usize) -> (Option<&str>, usize) {
    let start = i + 1;
    let mut j = start;
    let mut escaped = false;
    while let Some(&c) = b.get(j) {
        match c {
            b'\\' => {
                escaped = true;
                j += 2;
            }
            b'"' => {
                let text = if escaped {
                    None
                } else {
                    b.get(start..j).and_then(|s| std::str::from_utf8(s).ok())
                };
                return (text, j + 1);
            }
            _ => j += 1,
        }
    }
    (None, b.len())
}

/// Where the value (not a string) starting at `b[i]` ends: at the `,` or closing bracket
/// after it, or the end of `b`.
fn skip_value(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while let Some(&c) = b.get(i) {
        match c {
            b'"' => {
                i = string_at(b, i).1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth == 0 => return i,
            b'}' | b']' => depth -= 1,
            b',' if depth == 0 => return i,
            _ => {}
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::type_of;

    #[test]
    fn reads_the_first_top_level_type_fields_wherever_they_are() {
        assert_eq!(
            type_of(r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {}}"#),
            (Some("v1"), Some("Pod"))
        );
        // After nested values holding the same keys, strings with brackets and escapes.
        let text = r#" { "spec": {"kind": "X", "a": [1, {"apiVersion": "no"}], "s": "}\"]{"},
            "n": -1.5e3, "t": true, "kind" : "Job", "z": null, "apiVersion":"batch/v1" }"#;
        assert_eq!(type_of(text), (Some("batch/v1"), Some("Job")));
        // The first of duplicates (the parse refuses the document: callers check).
        assert_eq!(
            type_of(r#"{"kind": "Pod", "kind": "PodList"}"#),
            (None, Some("Pod"))
        );
    }

    #[test]
    fn gives_up_on_anything_else() {
        for text in [
            "",
            "[1]",
            "\"kind\"",
            r#"{"kind": 1}"#,
            r#"{"a": "unterminated"#,
            r#"{"a" 1, "kind": "Pod"}"#,
            r#"{"a": {"b": 1, "kind": "Pod"}"#,
            "{\"a\": \"\\",
        ] {
            let (api_version, kind) = type_of(text);
            assert!(
                api_version.is_none() && kind.is_none(),
                "{text:?} gave {api_version:?} {kind:?}"
            );
        }
        assert_eq!(type_of(r#"{"kind": "Pod", "x"#), (None, Some("Pod")));
        // A string with escapes is not read (the parse reads it).
        assert_eq!(
            type_of(r#"{"kind": "P\u006fd", "apiVersion": "v1"}"#),
            (Some("v1"), None)
        );
    }
}
