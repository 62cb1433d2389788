//! Kubernetes label selectors, parsed and matched exactly as `labels.Parse` of
//! k8s.io/apimachinery does: `k=v`, `k==v`, `k!=v`, `k in (v1,v2)`, `k notin (v1,v2)`, `k`
//! (exists), `!k` (does not exist), `k>n`, `k<n` (integers), joined by `,` (AND). Keys are
//! qualified names (an optional DNS-1123 subdomain prefix of at most 253 characters and `/`,
//! then a name of at most 63 characters of `[A-Za-z0-9._-]` that starts and ends
//! alphanumeric); values are empty or at most 63 characters of the same set. Everything
//! Kubernetes rejects is rejected with a message naming the problem.
//!
//! Two limits of kartograf's own bound the work of one selector: at most
//! [`MAX_SELECTOR_BYTES`] bytes (checked before anything is parsed) and at most
//! [`MAX_REQUIREMENTS`] requirements. Parsing is one linear pass.
//!
//! One deliberate difference: the Go lexer stops at a NUL byte as if the selector ended
//! there (`a\0garbage` selects `a`); here NUL is an ordinary character, so such a selector is
//! rejected as an invalid key or value.

use crate::excerpt::echo;
use crate::model::names::{is_dns1123_subdomain, is_qualified_name_part};
use std::fmt;

/// Longest label selector accepted, in bytes.
pub const MAX_SELECTOR_BYTES: usize = 4096;

/// Most requirements (comma-separated terms) in one selector.
pub const MAX_REQUIREMENTS: usize = 64;

/// Longest label value, and longest name part of a key.
const NAME_MAX: usize = 63;

/// Longest key prefix (a DNS-1123 subdomain).
const PREFIX_MAX: usize = 253;

/// A parsed selector: every requirement must hold. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// Sorted by key, as Kubernetes sorts them.
    requirements: Vec<Requirement>,
}

/// One term: a key, an operator and its values (sorted, without duplicates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

/// The operators of a requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)`
    NotIn,
    /// `k=v`
    Equals,
    /// `k==v`
    DoubleEquals,
    /// `k!=v`
    NotEquals,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>n`
    GreaterThan,
    /// `k<n`
    LessThan,
}

/// Why a label selector was refused (messages quote at most a bounded part of it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// Longer than [`MAX_SELECTOR_BYTES`].
    #[error("label_selector is {0} bytes; at most {MAX_SELECTOR_BYTES} are accepted")]
    TooLong(usize),
    /// Not a valid selector.
    #[error("label_selector {:?} is not a valid Kubernetes label selector: {syntax}", echo(.selector))]
    Invalid {
        /// The selector.
        selector: String,
        /// What is wrong in it.
        #[source]
        syntax: SyntaxError,
    },
}

/// What is wrong in a label selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// More than [`MAX_REQUIREMENTS`] requirements.
    #[error("more than {MAX_REQUIREMENTS} requirements; at most {MAX_REQUIREMENTS} are accepted")]
    TooManyRequirements,
    /// A token where another was expected.
    #[error("found '{}', expected: {expected}", echo(.found))]
    Unexpected {
        /// The token's text.
        found: String,
        /// What was expected there.
        expected: &'static str,
    },
    /// A key that is not a label key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A value that is not a label value.
    #[error("invalid label value {:?} for key {:?}: {rule}", echo(.value), echo(.key))]
    Value {
        /// The value.
        value: String,
        /// Its key.
        key: String,
        /// The rule it breaks.
        rule: ValueRule,
    },
    /// A non-integer value of `gt` or `lt`.
    #[error("for 'gt', 'lt' operators the value must be an integer (key {:?})", echo(.key))]
    NotAnInteger {
        /// The key.
        key: String,
    },
}

/// A string that is not a Kubernetes label key (`IsQualifiedName`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label key {:?}: {rule}", echo(.key))]
pub struct KeyError {
    /// The key.
    pub key: String,
    /// The rule it breaks.
    pub rule: KeyRule,
}

/// A rule of label keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyRule {
    /// More than one `/`.
    #[error("a key is an optional DNS subdomain prefix, '/' and a name")]
    Shape,
    /// `/name`.
    #[error("the prefix part must not be empty")]
    EmptyPrefix,
    /// A prefix over 253 characters.
    #[error("the prefix part must be no more than 253 characters")]
    LongPrefix,
    /// A prefix that is not a DNS-1123 subdomain.
    #[error(
        "the prefix part must be a DNS-1123 subdomain (lower case alphanumeric characters, '-' or '.', starting and ending alphanumeric)"
    )]
    PrefixNotSubdomain,
    /// No name part.
    #[error("the name part must not be empty")]
    EmptyName,
    /// A name part over 63 characters.
    #[error("the name part must be no more than 63 characters")]
    LongName,
    /// A name part of other characters.
    #[error(
        "the name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
    )]
    NameCharacters,
}

/// A rule of label values (`IsValidLabelValue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ValueRule {
    /// Over 63 characters.
    #[error("must be no more than 63 characters")]
    TooLong,
    /// Other characters.
    #[error(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
    )]
    Characters,
}

/// Parses a selector; an error says what is wrong (quoting at most a bounded part of it).
pub fn parse(selector: &str) -> Result<Selector, SelectorError> {
    if selector.len() > MAX_SELECTOR_BYTES {
        return Err(SelectorError::TooLong(selector.len()));
    }
    let tokens = lex(selector);
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
    };
    let mut requirements = parser.selector().map_err(|syntax| SelectorError::Invalid {
        selector: selector.to_owned(),
        syntax,
    })?;
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(Selector { requirements })
}

impl Selector {
    /// True when every requirement holds for `labels` (key, value pairs; keys unique).
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True for the selector that selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

/// The canonical form Kubernetes prints (`Selector.String()`): requirements sorted by key,
/// values sorted, no spaces but around `in`/`notin`.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = self.values.join(",");
        match self.op {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={values}", self.key),
            Operator::DoubleEquals => write!(f, "{}=={values}", self.key),
            Operator::NotEquals => write!(f, "{}!={values}", self.key),
            Operator::GreaterThan => write!(f, "{}>{values}", self.key),
            Operator::LessThan => write!(f, "{}<{values}", self.key),
            Operator::In => write!(f, "{} in ({values})", self.key),
            Operator::NotIn => write!(f, "{} notin ({values})", self.key),
        }
    }
}

impl Requirement {
    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values, sorted.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has(&self, value: &str) -> bool {
        self.values
            .binary_search_by(|v| v.as_str().cmp(value))
            .is_ok()
    }

    /// Kubernetes' `Requirement.Matches`.
    fn matches(&self, labels: &[(String, String)]) -> bool {
        let value = labels
            .iter()
            .find(|(k, _)| *k == self.key)
            .map(|(_, v)| v.as_str());
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                value.is_some_and(|v| self.has(v))
            }
            Operator::NotIn | Operator::NotEquals => value.is_none_or(|v| !self.has(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(label), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    label > bound
                } else {
                    label < bound
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    End,
    ClosePar,
    Comma,
    Not,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the selector into tokens with their text, ending with [`Token::End`]. Like the
/// Kubernetes lexer: whitespace separates, `==` and `!=` are read before `=` and `!`, and any
/// other run of characters is an identifier (`in` and `notin` are keywords).
fn lex(s: &str) -> Vec<(Token, &str)> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && is_whitespace(bytes[i]) {
            i += 1;
        }
        let Some(&b) = bytes.get(i) else {
            out.push((Token::End, ""));
            return out;
        };
        if is_special(b) {
            let two = bytes.get(i + 1) == Some(&b'=') && (b == b'=' || b == b'!');
            let (token, len) = match (b, two) {
                (b'=', true) => (Token::DoubleEquals, 2),
                (b'!', true) => (Token::NotEquals, 2),
                (b'=', _) => (Token::Equals, 1),
                (b'!', _) => (Token::Not, 1),
                (b'(', _) => (Token::OpenPar, 1),
                (b')', _) => (Token::ClosePar, 1),
                (b',', _) => (Token::Comma, 1),
                (b'>', _) => (Token::GreaterThan, 1),
                _ => (Token::LessThan, 1),
            };
            out.push((token, &s[i..i + len]));
            i += len;
        } else {
            let start = i;
            while i < bytes.len() && !is_special(bytes[i]) && !is_whitespace(bytes[i]) {
                i += 1;
            }
            // Only ASCII bytes end an identifier, so both ends are character boundaries.
            let word = &s[start..i];
            let token = match word {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier,
            };
            out.push((token, word));
        }
    }
}

/// Where a token is read: keys and values take `in`/`notin` as identifiers, operators don't.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser<'a> {
    tokens: &'a [(Token, &'a str)],
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self, context: Context) -> (Token, &'a str) {
        // The last token is always End; reading stops there.
        let (token, text) = self.tokens[self.at.min(self.tokens.len() - 1)];
        match (context, token) {
            (Context::Values, Token::In | Token::NotIn) => (Token::Identifier, text),
            _ => (token, text),
        }
    }

    fn next(&mut self, context: Context) -> (Token, &'a str) {
        let t = self.peek(context);
        self.at += 1;
        t
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, SyntaxError> {
        let mut requirements = Vec::new();
        loop {
            let (token, text) = self.peek(Context::Values);
            match token {
                Token::Identifier | Token::Not => {
                    if requirements.len() == MAX_REQUIREMENTS {
                        return Err(SyntaxError::TooManyRequirements);
                    }
                    requirements.push(self.requirement()?);
                    let (token, text) = self.next(Context::Values);
                    match token {
                        Token::End => return Ok(requirements),
                        Token::Comma => {
                            let (after, text) = self.peek(Context::Values);
                            if after != Token::Identifier && after != Token::Not {
                                return Err(found(text, "identifier after ','"));
                            }
                        }
                        _ => return Err(found(text, "',' or 'end of string'")),
                    }
                }
                Token::End => return Ok(requirements),
                _ => return Err(found(text, "!, identifier, or 'end of string'")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SyntaxError> {
        let (mut token, mut text) = self.next(Context::Values);
        let negated = token == Token::Not;
        if negated {
            (token, text) = self.next(Context::Values);
        }
        if token != Token::Identifier {
            return Err(found(text, "identifier"));
        }
        validate_key(text)?;
        let key = text.to_owned();
        let (after, _) = self.peek(Context::Values);
        if negated {
            return Ok(Requirement::new(key, Operator::DoesNotExist, Vec::new()));
        }
        if after == Token::End || after == Token::Comma {
            return Ok(Requirement::new(key, Operator::Exists, Vec::new()));
        }
        let (token, text) = self.next(Context::KeyAndOperator);
        let op = match token {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            _ => return Err(found(text, "in, notin, =, ==, !=, gt, lt")),
        };
        let values = match op {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        for v in &values {
            validate_value(&key, v)?;
        }
        if matches!(op, Operator::GreaterThan | Operator::LessThan)
            && values.iter().any(|v| v.parse::<i64>().is_err())
        {
            return Err(SyntaxError::NotAnInteger { key });
        }
        Ok(Requirement::new(key, op, values))
    }

    /// `( v1, v2, … )`: empty entries stand for the empty value, as in Kubernetes.
    fn value_set(&mut self) -> Result<Vec<String>, SyntaxError> {
        let (token, text) = self.next(Context::Values);
        if token != Token::OpenPar {
            return Err(found(text, "'('"));
        }
        let (token, text) = self.peek(Context::Values);
        match token {
            Token::ClosePar => {
                self.next(Context::Values);
                Ok(vec![String::new()])
            }
            Token::Identifier | Token::Comma => {
                let values = self.identifiers()?;
                let (token, text) = self.next(Context::Values);
                if token != Token::ClosePar {
                    return Err(found(text, "')'"));
                }
                Ok(values)
            }
            _ => Err(found(text, "',', ')' or identifier")),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, SyntaxError> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (token, text) = self.next(Context::Values);
            match token {
                Token::Identifier => {
                    values.push(text.to_owned());
                    let (after, text) = self.peek(Context::Values);
                    match after {
                        Token::Comma => continue,
                        Token::ClosePar => return Ok(values),
                        _ => return Err(found(text, "',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.peek(Context::Values).0 {
                        Token::ClosePar => {
                            values.push(String::new());
                            return Ok(values);
                        }
                        Token::Comma => {
                            self.next(Context::Values);
                            values.push(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(found(text, "',', or identifier")),
            }
        }
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`; nothing (end or `,`) is the empty value.
    fn exact_value(&mut self) -> Result<String, SyntaxError> {
        let (token, _) = self.peek(Context::Values);
        if token == Token::End || token == Token::Comma {
            return Ok(String::new());
        }
        match self.next(Context::Values) {
            (Token::Identifier, text) => Ok(text.to_owned()),
            (_, text) => Err(found(text, "identifier")),
        }
    }
}

impl Requirement {
    fn new(key: String, op: Operator, mut values: Vec<String>) -> Requirement {
        values.sort();
        values.dedup();
        Requirement { key, op, values }
    }
}

fn found(text: &str, expected: &'static str) -> SyntaxError {
    SyntaxError::Unexpected {
        found: text.to_owned(),
        expected,
    }
}

/// Kubernetes' `IsQualifiedName`, as a label key.
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    let bad = |rule: KeyRule| {
        Err(KeyError {
            key: key.to_owned(),
            rule,
        })
    };
    let name = match key.split_once('/') {
        None => key,
        Some((_, name)) if name.contains('/') => {
            return bad(KeyRule::Shape);
        }
        Some((prefix, name)) => {
            if prefix.is_empty() {
                return bad(KeyRule::EmptyPrefix);
            }
            if prefix.len() > PREFIX_MAX {
                return bad(KeyRule::LongPrefix);
            }
            if !is_dns1123_subdomain(prefix) {
                return bad(KeyRule::PrefixNotSubdomain);
            }
            name
        }
    };
    if name.is_empty() {
        return bad(KeyRule::EmptyName);
    }
    if name.len() > NAME_MAX {
        return bad(KeyRule::LongName);
    }
    if !is_qualified_name_part(name) {
        return bad(KeyRule::NameCharacters);
    }
    Ok(())
}

/// Kubernetes' `IsValidLabelValue`.
fn validate_value(key: &str, value: &str) -> Result<(), SyntaxError> {
    let bad = |rule: ValueRule| {
        Err(SyntaxError::Value {
            value: value.to_owned(),
            key: key.to_owned(),
            rule,
        })
    };
    if value.len() > NAME_MAX {
        return bad(ValueRule::TooLong);
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        return bad(ValueRule::Characters);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Cases from the behaviour of k8s.io/apimachinery `pkg/labels` (`selector_test.go`:
    //! TestSelectorParse, TestSetSelectorParser, TestSelectorMatches,
    //! TestRequirementConstructor, TestLexerSequence, TestToString).
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn ok(s: &str) -> Selector {
        parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn tokens(s: &str) -> Vec<Token> {
        lex(s).into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn lexes_like_kubernetes() {
        use Token::*;
        for (s, want) in [
            (
                "key in ( value )",
                vec![Identifier, In, OpenPar, Identifier, ClosePar],
            ),
            (
                "key notin ( value )",
                vec![Identifier, NotIn, OpenPar, Identifier, ClosePar],
            ),
            (
                "key in ( value1, value2 )",
                vec![
                    Identifier, In, OpenPar, Identifier, Comma, Identifier, ClosePar,
                ],
            ),
            ("!key", vec![Not, Identifier]),
            (
                "x in (),y",
                vec![Identifier, In, OpenPar, ClosePar, Comma, Identifier],
            ),
            (
                "== != (), = notin",
                vec![
                    DoubleEquals,
                    NotEquals,
                    OpenPar,
                    ClosePar,
                    Comma,
                    Equals,
                    NotIn,
                ],
            ),
            ("key>2", vec![Identifier, GreaterThan, Identifier]),
            ("key<1", vec![Identifier, LessThan, Identifier]),
            ("~", vec![Identifier]),
            ("||", vec![Identifier]),
            ("!==", vec![NotEquals, Equals]),
        ] {
            let mut want = want;
            want.push(End);
            assert_eq!(tokens(s), want, "{s:?}");
        }
    }

    #[test]
    fn accepts_what_kubernetes_accepts_and_prints_it_canonically() {
        // TestSelectorParse: the canonical form is the input without spaces.
        for s in [
            "x=a,y=b,z=c",
            "",
            "x!=a,y=b",
            "x=",
            "x= ",
            "x=,z= ",
            "x= ,z= ",
            "!x",
            "x>1",
            "x>1,z<5",
        ] {
            assert_eq!(ok(s).to_string(), s.replace(' ', ""), "{s:?}");
        }
        // TestSetSelectorParser (valid ones), with Kubernetes' canonical output.
        for (s, canonical) in [
            ("\rx", "x"),
            (
                "this-is-a-dns.domain.com/key-with-dash",
                "this-is-a-dns.domain.com/key-with-dash",
            ),
            (
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            ),
            (
                "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
                "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)",
            ),
            ("foo  in\t (abc)", "foo in (abc)"),
            ("x notin\n (abc)", "x notin (abc)"),
            ("x  notin\t\t\t(abc,def)", "x notin (abc,def)"),
            ("x in (abc,)", "x in (,abc)"),
            ("x in ()", "x in ()"),
            (
                "x notin (abc,,def),bar,z in (),w",
                "bar,w,x notin (,abc,def),z in ()",
            ),
            ("x,y in (a)", "x,y in (a)"),
            ("x=a", "x=a"),
            ("x>1", "x>1"),
            ("x<7", "x<7"),
            ("x=a,y!=b,z in (h,i,j)", "x=a,y!=b,z in (h,i,j)"),
            ("x notin ( )", "x notin ()"),
            ("x notin (, a)", "x notin (,a)"),
            ("a ", "a"),
            ("a in (x,y,notin, z,in)", "a in (in,notin,x,y,z)"),
            ("notin=in", "notin=in"),
            ("x==a,a=x", "a=x,x==a"),
            ("a==", "a=="),
            ("a!=,b", "a!=,b"),
        ] {
            assert_eq!(ok(s).to_string(), canonical, "{s:?}");
        }
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for s in [
            // TestSelectorParse / TestSetSelectorParser
            "x=a||y=b",
            "x==a==b",
            "!x=a",
            "x<a",
            "x,,y",
            ",x,y",
            "x nott in (y)",
            "a in (xyz),",
            "a in (xyz)b notin ()",
            "a in (xyz abc)",
            "a notin(",
            "a (",
            "(",
            // the cases
            "!",
            "=",
            "a=b=c",
            // more of the grammar
            "a,",
            "a in",
            "a in (b",
            "a in b",
            "a=(b)",
            "a>",
            "a>b",
            "a>-1",
            "a>1.5",
            "a<99999999999999999999",
            "!a in (b)",
            "a b",
            "!!a",
            ")",
            "a )",
        ] {
            assert!(parse(s).is_err(), "{s:?} should be rejected");
        }
    }

    #[test]
    fn keys_and_values_follow_kubernetes_naming() {
        // TestRequirementConstructor: keys.
        assert!(parse("1foo in (bar)").is_ok());
        assert!(parse("1234 in (bar)").is_ok());
        assert!(parse(&"a".repeat(254)).is_err(), "name part over 63");
        let max_name = "a".repeat(63);
        assert!(parse(&max_name).is_ok());
        assert!(parse(&format!("{max_name}b")).is_err());
        let prefix = format!("{}.{}", "p".repeat(126), "q".repeat(126));
        assert_eq!(prefix.len(), 253);
        assert!(parse(&format!("{prefix}/k")).is_ok());
        assert!(parse(&format!("{prefix}x/k")).is_err(), "prefix over 253");
        for bad in [
            "/k",
            "p/",
            "a/b/c",
            "Upper.case/k",
            "-a",
            "a-",
            "_a",
            "a.",
            "p_x/k",
            "ex..ample/k",
            "a\0b",
            "ünïcode",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(
                matches!(
                    &e,
                    SelectorError::Invalid {
                        syntax: SyntaxError::Key(_),
                        ..
                    }
                ),
                "{bad:?}: {e:?}"
            );
            assert!(e.to_string().contains("invalid label key"), "{bad:?}: {e}");
        }
        assert!(parse("A_b.c-D").is_ok(), "mixed case, '_', '.', '-' inside");
        // Values: at most 63 characters of the same set, or empty.
        assert!(parse(&format!("a={}", "v".repeat(63))).is_ok());
        let e = parse(&format!("a={}", "v".repeat(64)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no more than 63"), "{e}");
        for bad in ["a=-v", "a=v-", "a in (ok,-bad)", "a=v/w", "a=ü"] {
            let e = parse(bad).expect_err(bad);
            assert!(
                matches!(
                    &e,
                    SelectorError::Invalid {
                        syntax: SyntaxError::Value { .. },
                        ..
                    }
                ),
                "{bad:?}: {e:?}"
            );
            assert!(
                e.to_string().contains("invalid label value"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn matches_like_kubernetes() {
        let yes = |s: &str, l: &[(&str, &str)]| assert!(ok(s).matches(&set(l)), "{s} ~ {l:?}");
        let no = |s: &str, l: &[(&str, &str)]| assert!(!ok(s).matches(&set(l)), "{s} !~ {l:?}");
        // TestSelectorMatches
        yes("", &[("x", "y")]);
        yes("x=y", &[("x", "y")]);
        yes("x=y,z=w", &[("x", "y"), ("z", "w")]);
        yes("x!=y,z!=w", &[("x", "z"), ("z", "a")]);
        yes("notin=in", &[("notin", "in")]);
        yes("x", &[("x", "z")]);
        yes("!x", &[("y", "z")]);
        yes("x>1", &[("x", "2")]);
        yes("x<1", &[("x", "0")]);
        no("x=z", &[]);
        no("x=y", &[("x", "z")]);
        no("x=y,z=w", &[("x", "w"), ("z", "w")]);
        no("x!=y,z!=w", &[("x", "z"), ("z", "w")]);
        no("x", &[("y", "z")]);
        no("!x", &[("x", "z")]);
        no("x>1", &[("x", "0")]);
        no("x<1", &[("x", "2")]);
        let labels = [("foo", "bar"), ("baz", "blah")];
        yes("foo=bar,baz=blah", &labels);
        no("foo=blah", &labels);
        no("foo=bar,foobar=bar,baz=blah", &labels);
        // TestRequirementSelectorMatching
        yes("x in (foo),y notin (alpha)", &[("x", "foo"), ("y", "baz")]);
        no("x in (foo),y in (alpha)", &[("x", "foo"), ("y", "baz")]);
        yes("x notin (),y", &[("y", "")]);
        yes("!x,y", &[("y", "")]);
        no("x notin (),!y", &[("y", "")]);
        no("x in ()", &[("y", "baz")]);
        yes("x in ()", &[("x", "")]);
        yes("z>1", &[("z", "2")]);
        no("z>1", &[("z", "v2")]);
        // Integer comparison, not text.
        yes("z>9", &[("z", "10")]);
        yes("z<10", &[("z", "-5")]);
        no("z>1", &[]);
        // `!=` and `notin` hold when the key is absent; `in` and `=` do not.
        yes("a!=b", &[]);
        yes("a notin (b)", &[]);
        no("a in (b)", &[]);
    }

    #[test]
    fn limits_are_checked_before_parsing() {
        let huge = "a".repeat(1 << 20);
        let e = parse(&huge).unwrap_err().to_string();
        assert!(e.contains("1048576 bytes"), "{e}");
        assert!(
            e.len() < 200,
            "the message does not quote the selector: {e}"
        );
        let just = format!("a={}", "b".repeat(MAX_SELECTOR_BYTES - 2));
        assert!(
            parse(&just)
                .unwrap_err()
                .to_string()
                .contains("no more than 63"),
            "4096 bytes are parsed"
        );
        let many = (0..=MAX_REQUIREMENTS)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(
            parse(&many)
                .unwrap_err()
                .to_string()
                .contains("requirements")
        );
        let enough = (0..MAX_REQUIREMENTS)
            .map(|i| format!("k{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(ok(&enough).requirements().len(), MAX_REQUIREMENTS);
    }

    #[test]
    fn errors_quote_a_bounded_part_of_the_selector() {
        let long_value = format!("a={}", "v".repeat(3000));
        let e = parse(&long_value).unwrap_err().to_string();
        assert!(e.len() < 1000, "{} bytes: {e}", e.len());
        assert!(e.contains("(3002 bytes)"), "{e}");
    }

    #[test]
    fn error_messages_quote_a_bounded_part_of_the_input() {
        let e = parse("a in b").unwrap_err();
        assert_eq!(
            e.to_string(),
            "label_selector \"a in b\" is not a valid Kubernetes label selector: found 'b', expected: '('"
        );
        let e = parse("a/b/c").unwrap_err();
        assert_eq!(
            e.to_string(),
            "label_selector \"a/b/c\" is not a valid Kubernetes label selector: invalid label key \"a/b/c\": a key is an optional DNS subdomain prefix, '/' and a name"
        );
        let e = parse("a>x").unwrap_err();
        assert!(
            matches!(&e, SelectorError::Invalid { syntax: SyntaxError::NotAnInteger { key }, .. } if key == "a"),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .ends_with("for 'gt', 'lt' operators the value must be an integer (key \"a\")"),
            "{e}"
        );
    }
}
