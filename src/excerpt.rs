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
}
