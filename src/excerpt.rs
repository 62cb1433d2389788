//! Bounded excerpts of values that come from outside: whatever a client or an object holds is
//! quoted at most up to a fixed size, so no answer, status message or diagnostic grows with
//! the size of a hostile value. A cut value ends with `…(N bytes)`, N being its full length.

use std::borrow::Cow;

/// Bytes of a client value quoted in a gRPC status message (names, kinds, selectors, tokens).
pub const ECHO_BYTES: usize = 256;

/// Bytes of one text field of a diagnostic or definition error (message, expression, path).
pub const TEXT_BYTES: usize = 4096;

/// Bytes of a whole gRPC status message (`grpc-message`), whatever it quotes.
pub const STATUS_BYTES: usize = 2048;

/// `text` when it has at most `max` bytes; else its longest prefix of at most `max` bytes
/// that ends on a character boundary, followed by `…(N bytes)`.
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…({} bytes)", &text[..end], text.len()))
}

/// [`excerpt`] with [`ECHO_BYTES`]: a client value inside an error message.
pub fn echo(text: &str) -> Cow<'_, str> {
    excerpt(text, ECHO_BYTES)
}

/// Bytes of a parse error about a file (which may quote a bit of the file).
pub const PARSE_ERROR_BYTES: usize = 256;

/// `text` with control characters (newlines, NUL, escapes, …) written as `\u{..}`, then cut
/// to [`excerpt`]`(…, max)`: what may quote outside content goes into one printable line.
pub fn printable(text: &str, max: usize) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let before = out.len();
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            let _ = write!(out, "…({} bytes)", text.len());
            return out;
        }
    }
    out
}

/// The parse error for a duplicate object key (the key as a bounded, printable excerpt):
/// JSON and YAML documents alike fail on one.
pub fn duplicate_key<E: serde::de::Error>(key: &str) -> E {
    E::custom(format!("duplicate key `{}`", printable(key, ECHO_BYTES)))
}

/// A parser's message about a file, with no value of the file in it: `invalid type: string
/// "…", expected struct Karta` becomes `invalid type: string, expected struct Karta`, an
/// unknown variant loses its name, and any other double-quoted text becomes `"…"`. Field and
/// key names (in backticks) stay; the result is one printable line of at most
/// [`PARSE_ERROR_BYTES`]. (A file may be a link to secrets: its values never reach a log, a
/// status or an answer.)
pub fn value_free(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(PARSE_ERROR_BYTES));
    let mut rest = message;
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(tail) = rest.strip_prefix(prefix)
            && let Some(at) = tail.rfind(", expected ")
        {
            let what = &tail[..at];
            let kind = what
                .find(['"', '`', '\''])
                .map_or(what, |q| &what[..q])
                .trim_end();
            out.push_str(prefix);
            out.push_str(kind);
            rest = &tail[at..];
            break;
        }
    }
    if let Some(tail) = rest.strip_prefix("unknown variant `")
        && let Some(end) = tail.find("`, expected ")
    {
        out.push_str("unknown variant");
        rest = &tail[end + 1..];
    }
    // Any other double-quoted text may be a value.
    let mut quoted = false;
    for c in rest.chars() {
        match (c, quoted) {
            ('"', false) => {
                out.push_str("\"…");
                quoted = true;
            }
            ('"', true) => {
                out.push('"');
                quoted = false;
            }
            (_, true) => {}
            (c, false) => out.push(c),
        }
    }
    if quoted {
        out.push('"');
    }
    printable(&out, PARSE_ERROR_BYTES)
}

/// Cuts `text` in place to [`excerpt`]`(text, max)`.
pub fn bound(text: &mut String, max: usize) {
    if text.len() > max {
        *text = excerpt(text, max).into_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_messages_lose_the_values_of_the_file() {
        let secret = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI";
        for (message, want) in [
            (
                format!("invalid type: string \"{secret}\", expected struct Karta"),
                "invalid type: string, expected struct Karta".to_owned(),
            ),
            (
                format!("invalid value: string \"{secret}, expected x\", expected a quantity"),
                "invalid value: string, expected a quantity".to_owned(),
            ),
            (
                "invalid type: integer `5`, expected a string".to_owned(),
                "invalid type: integer, expected a string".to_owned(),
            ),
            (
                format!("unknown variant `{secret}`, expected one of `a`, `b`"),
                "unknown variant, expected one of `a`, `b`".to_owned(),
            ),
            (
                format!("bad thing \"{secret}\" here"),
                "bad thing \"…\" here".to_owned(),
            ),
            (
                "missing field `spec`".to_owned(),
                "missing field `spec`".to_owned(),
            ),
        ] {
            let got = value_free(&message);
            assert_eq!(got, want, "{message}");
            assert!(!got.contains("wJalr"), "{got}");
        }
    }

    #[test]
    fn short_values_pass_unchanged() {
        assert!(matches!(excerpt("abc", 3), Cow::Borrowed("abc")));
        assert_eq!(excerpt("", 0), "");
    }

    #[test]
    fn long_values_are_cut_with_their_length() {
        let big = "x".repeat(1 << 20);
        let cut = echo(&big);
        assert_eq!(cut, format!("{}…(1048576 bytes)", "x".repeat(ECHO_BYTES)));
        assert!(cut.len() < ECHO_BYTES + 32);
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // "é" is two bytes: a cut at 3 bytes keeps one character.
        assert_eq!(excerpt("éé", 3), "é…(4 bytes)");
        let mut s = "日本語".to_owned();
        bound(&mut s, 4);
        assert_eq!(s, "日…(9 bytes)");
    }

    #[test]
    fn printable_escapes_control_characters_and_stays_bounded() {
        assert_eq!(printable("a\nb\0c", 64), "a\\u{a}b\\u{0}c");
        let long = format!("{}\n", "é".repeat(1000));
        let p = printable(&long, 100);
        assert!(p.len() < 140, "{p}");
        assert!(!p.chars().any(char::is_control));
        assert!(p.ends_with("(2001 bytes)"), "{p}");
    }
}
