//! Reading Kubernetes manifests: YAML (several `---` documents) or JSON, with `List` kinds
//! flattened. Used for definition files and for cluster snapshots.

use crate::excerpt::duplicate_key;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON value read with one rule that YAML reading has too: a duplicate key in an object
/// is an error (naming the key), not a silent "last one wins". Every JSON document a
/// stranger hands over (manifest files, inline objects) is read this way.
pub struct Strict(pub Value);

/// Parses JSON text as a [`Strict`] value.
pub fn from_json_strict(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(text).map(|s| s.0)
}

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict::deserialize(d).map(|s| s.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(duplicate_key(&key));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A value the reader does not keep, skipped with the one rule every document is read with:
/// a duplicate key in any of its objects fails the parse (naming the key), as it does in
/// the values kept — so a file is accepted or refused for the same reasons whatever its form
/// (a `---` stream, a lone document, a `List`, an array, YAML).
pub struct Unkept;

impl<'de> Deserialize<'de> for Unkept {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Unkept, D::Error> {
        d.deserialize_any(UnkeptVisitor)
    }
}

/// Maps with at most this many keys are checked for duplicates by a scan (no hashing).
const SCANNED_KEYS: usize = 16;

/// The visitor of [`Unkept`], for a caller that already holds the map or sequence to skip.
pub struct UnkeptVisitor;

impl<'de> Visitor<'de> for UnkeptVisitor {
    type Value = Unkept;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Unkept, E> {
        Ok(Unkept)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Unkept, E> {
        Ok(Unkept)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Unkept, E> {
        Ok(Unkept)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Unkept, E> {
        Ok(Unkept)
    }
    fn visit_str<E>(self, _: &str) -> Result<Unkept, E> {
        Ok(Unkept)
    }
    fn visit_unit<E>(self) -> Result<Unkept, E> {
        Ok(Unkept)
    }
    fn visit_none<E>(self) -> Result<Unkept, E> {
        Ok(Unkept)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Unkept, D::Error> {
        Unkept::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unkept, A::Error> {
        while seq.next_element::<Unkept>()?.is_some() {}
        Ok(Unkept)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unkept, A::Error> {
        let mut scanned: Vec<Key<'de>> = Vec::new();
        let mut hashed: std::collections::HashSet<Key<'de>> = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let seen = if hashed.is_empty() {
                scanned.contains(&key)
            } else {
                hashed.contains(&key)
            };
            if seen {
                return Err(duplicate_key(&key.0));
            }
            if hashed.is_empty() && scanned.len() < SCANNED_KEYS {
                scanned.push(key);
            } else {
                hashed.extend(scanned.drain(..));
                hashed.insert(key);
            }
            map.next_value::<Unkept>()?;
        }
        Ok(Unkept)
    }
}

/// An object key, borrowed from the text when it has no escapes.
#[derive(PartialEq, Eq, Hash)]
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Text that is neither YAML nor JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not valid YAML or JSON: {yaml}")]
pub struct ManifestError {
    /// The YAML parser's message, printable and cut to a bounded excerpt (it may quote the
    /// text, which may be a link to secrets), so the error itself carries no more than that.
    pub yaml: String,
}

/// Parses text into its documents. JSON is tried first when the text starts with `{` or `[`;
/// empty documents are skipped; any `kind` ending in `List` with an `items` array is
/// flattened into its items.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, ManifestError> {
    let trimmed = text.trim_start();
    let docs: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match from_json_strict(trimmed) {
            Ok(Value::Array(items)) => items,
            Ok(v) => vec![v],
            // Valid JSON but for what it holds (a duplicate key): said as JSON says it.
            Err(e) if e.is_data() => {
                return Err(ManifestError {
                    yaml: crate::excerpt::value_free(&e.to_string()),
                });
            }
            Err(_) => parse_yaml(text)?,
        }
    } else if let Some(docs) = parse_json_stream(text) {
        docs
    } else {
        parse_yaml(text)?
    };
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        flatten(doc, &mut out);
    }
    Ok(out)
}

/// A `---`-separated stream whose every document is one JSON object (what `kubectl get -o
/// json` dumps and generators write), parsed with serde_json: JSON is YAML and this is many
/// times faster. `None` when any document is anything else, so the caller parses YAML.
fn parse_json_stream(text: &str) -> Option<Vec<Value>> {
    json_stream(text)?
        .into_iter()
        .map(|doc| from_json_strict(doc).ok())
        .collect()
}

/// The documents of a `---`-separated stream (or a lone document) that look like JSON
/// objects, as text, empty ones left out; `None` when one does not start with `{`. Whether
/// each is JSON is for the caller's parse to find.
pub fn json_stream(text: &str) -> Option<Vec<&str>> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(text[start..at].trim());
            start = at + line.len();
        }
        at += line.len();
    }
    docs.push(text[start..].trim());
    docs.retain(|doc| !doc.is_empty());
    docs.iter().all(|doc| doc.starts_with('{')).then_some(docs)
}

/// A YAML stream parsed one document at a time, each (a `List` flattened) handed to `each`,
/// so the peak is one document's tree rather than the stream's. The text is cut at document
/// markers (a line `---`, or `--- ` and content), which YAML forbids inside any scalar at the
/// start of a line. `Ok(true)`: every document was handed over; `Ok(false)`: the stream could
/// not be cut (directives, or a piece that does not parse alone although the whole does), so
/// the caller discards what `each` got and parses the text whole — also for JSON text (an
/// object or an array), which the whole parse reads as JSON; `Err`: the text is not YAML,
/// with the whole parse's error.
pub fn yaml_documents(text: &str, each: &mut dyn FnMut(Value)) -> Result<bool, ManifestError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{')
        || trimmed.starts_with('[')
        || text.lines().any(|l| l.starts_with('%'))
    {
        return Ok(false);
    }
    // Each piece is parsed as soon as its end is found (nothing is kept per piece).
    let mut out = Vec::new();
    let mut piece = |piece: &str| -> bool {
        match parse_yaml(piece) {
            Ok(docs) => {
                for doc in docs {
                    flatten(doc, &mut out);
                    for v in out.drain(..) {
                        each(v);
                    }
                }
                true
            }
            Err(_) => false,
        }
    };
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        if (bare == "---" || line.starts_with("--- ")) && at > start {
            if !piece(&text[start..at]) {
                // Said as the whole parse says it (its error names the line in the file).
                return parse_yaml(text).map(|_| false);
            }
            start = at;
        }
        at += line.len();
    }
    if !piece(&text[start..]) {
        return parse_yaml(text).map(|_| false);
    }
    Ok(true)
}

/// YAML with limits that scale with the text: any number of documents (`kubectl get -o
/// yaml` of 100,000 pods is one `List` of 15 million nodes), while aliases, anchors and
/// nesting keep their fixed caps, so an alias bomb ("billion laughs") still fails fast.
fn parse_yaml(text: &str) -> Result<Vec<Value>, ManifestError> {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = text.len() / 3 + 1024;
    budget.max_nodes += text.len() / 2;
    budget.max_events += text.len();
    budget.max_total_scalar_bytes += text.len();
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // No snippet of the offending line: an error never quotes more of a file than a
    // bounded, printable excerpt (the file may be a link to secrets).
    options.with_snippet = false;
    serde_saphyr::from_multiple_with_options::<Value>(text, options).map_err(|e| ManifestError {
        yaml: yaml_message(&e),
    })
}

/// The YAML parser's error in our words: a duplicate key as every reader reports it (the
/// parser's own message suggests one of its options), anything else without a value of the
/// file ([`crate::excerpt::value_free`]).
fn yaml_message(e: &serde_saphyr::Error) -> String {
    match e.without_snippet() {
        serde_saphyr::Error::DuplicateMappingKey { key, location } => {
            let key = key
                .as_deref()
                .map(|k| {
                    format!(
                        " `{}`",
                        crate::excerpt::printable(k, crate::excerpt::ECHO_BYTES)
                    )
                })
                .unwrap_or_default();
            format!(
                "duplicate key{key} at line {} column {}",
                location.line(),
                location.column()
            )
        }
        _ => crate::excerpt::value_free(&e.to_string()),
    }
}

/// When `doc` is one JSON object of a `…List` kind with one `items` array: hands its items
/// (flattened: a `List` inside is its items) to `each` one at a time, as they are parsed, so
/// no tree of the whole list is built, and returns true. False when it is anything else;
/// `each` may have been called by then, and the caller discards what it gave.
pub fn json_list_items(doc: &str, each: &mut dyn FnMut(Value)) -> bool {
    use serde::de::Deserializer as _;
    let mut parser = serde_json::Deserializer::from_str(doc);
    matches!(parser.deserialize_map(ListVisitor { each }), Ok(true)) && parser.end().is_ok()
}

/// The top level of a JSON `…List`: its `kind` and `items`, other fields skipped.
struct ListVisitor<'a> {
    each: &'a mut dyn FnMut(Value),
}

impl<'de> serde::de::Visitor<'de> for ListVisitor<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut kind: Option<Value> = None;
        let mut items = 0;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "items" => {
                    map.next_value_seed(ItemsSeed {
                        each: &mut *self.each,
                    })?;
                    items += 1;
                }
                // A duplicate key fails the list, so that the whole parse reports it.
                "kind" if kind.is_some() => return Err(duplicate_key("kind")),
                "kind" => kind = Some(map.next_value()?),
                _ => {
                    map.next_value::<Unkept>()?;
                }
            }
        }
        let list = kind
            .as_ref()
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
        Ok(list && items == 1)
    }
}

/// A list's `items`: each element flattened and handed on (anything but an array fails,
/// so the caller parses the document whole).
struct ItemsSeed<'a> {
    each: &'a mut dyn FnMut(Value),
}

impl<'de> serde::de::DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ItemsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of items")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut flat = Vec::new();
        while let Some(Strict(item)) = seq.next_element::<Strict>()? {
            flatten(item, &mut flat);
            flat.drain(..).for_each(&mut *self.each);
        }
        Ok(())
    }
}

/// Adds `doc` to `out`: nothing for a null document, the items (flattened) of a `…List`
/// with an `items` array, else `doc` itself.
pub fn flatten(doc: Value, out: &mut Vec<Value>) {
    match doc {
        Value::Null => {}
        Value::Object(mut map)
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && map.get("items").is_some_and(Value::is_array) =>
        {
            if let Some(Value::Array(items)) = map.remove("items") {
                for item in items {
                    flatten(item, out);
                }
            }
        }
        other => out.push(other),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_yaml_stream_read_document_by_document_is_the_whole_parse() {
        let texts = [
            "a: 1\n---\nb: 2\n",
            "---\nkind: PodList\nitems:\n- {kind: Pod, metadata: {name: a}}\n- {kind: Pod}\n---\n\n---\nc: |\n  ---x\n  y\n",
            "--- {a: 1}\n--- [1, 2]\n...\n---\nb: &x 2\nc: *x\n",
            "x: \"a\n  --- b\"\n---\ny: 1\n",
            "# only a comment\n",
        ];
        for text in texts {
            let mut streamed = Vec::new();
            let whole = super::parse_documents(text).expect("valid");
            assert_eq!(
                super::yaml_documents(text, &mut |v| streamed.push(v)),
                Ok(true),
                "{text:?}"
            );
            assert_eq!(streamed, whole, "{text:?}");
        }
        // Directives: not cut. An error: the whole parse's (its line is the file's).
        assert_eq!(
            super::yaml_documents("%YAML 1.2\n---\na: 1\n", &mut |_| {}),
            Ok(false)
        );
        let bad = "a: 1\n---\nb: 1\nb: 2\n";
        let e = super::yaml_documents(bad, &mut |_| {}).expect_err("duplicate key");
        assert_eq!(e, super::parse_documents(bad).expect_err("duplicate key"));
        assert!(e.yaml.contains("line 4"), "{e:?}");
    }

    use super::*;

    #[test]
    fn reads_multi_document_yaml_and_lists() {
        let text = "a: 1\n---\n---\nkind: List\nitems:\n- b: 2\n- c: 3\n";
        let docs = parse_documents(text).unwrap();
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[2]["c"], 3);
    }

    #[test]
    fn json_document_streams_parse_as_yaml_would() {
        let text =
            "---\n{\"kind\": \"A\", \"n\": 1.5, \"s\": \"x: y\"}\n---\n\n---\n{\"b\": [1, {}]}\n";
        let docs = parse_documents(text).unwrap();
        assert_eq!(
            docs,
            parse_yaml(text)
                .unwrap()
                .into_iter()
                .filter(|d| !d.is_null())
                .collect::<Vec<_>>()
        );
        assert_eq!(docs.len(), 2);
        // One YAML document among JSON ones: the whole stream is read as YAML.
        let mixed = "---\n{\"a\": 1}\n---\nb: 2\n";
        let docs = parse_documents(mixed).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1]["b"], 2);
    }

    #[test]
    fn reads_json_and_rejects_garbage() {
        assert_eq!(parse_documents(r#"{"a": 1}"#).unwrap().len(), 1);
        assert!(parse_documents("a: [unclosed").is_err());
        assert!(
            parse_documents("a: 1\na: 2\n").is_err(),
            "duplicate keys are rejected"
        );
        // One rule for JSON: a duplicate key fails the document, at any depth, in a lone
        // document, an array, a `---` stream and a List's items.
        for text in [
            r#"{"a": 1, "a": 2}"#,
            r#"[{"b": {"c": 1, "c": 1}}]"#,
            "---\n{\"a\": 1}\n---\n{\"x\": {\"k\": 1, \"k\": 2}}\n",
            r#"{"kind": "List", "items": [{"a": 1, "a": 1}]}"#,
        ] {
            let e = parse_documents(text).expect_err(text).to_string();
            assert!(e.to_lowercase().contains("duplicate"), "{text}: {e}");
        }
        // YAML too, in the same words (no parser option named).
        for text in [
            "a: 1\nb: {c: 1, c: 2}\n",
            "{\"a\": 1}\n---\n# note\nx: 1\nx: 2\n",
        ] {
            let e = parse_documents(text).expect_err(text).to_string();
            assert!(e.contains("duplicate key `"), "{text}: {e}");
            assert!(!e.contains("Options"), "{text}: {e}");
        }
        let e = from_json_strict(r#"{"a": {"k\u0000\n": 1, "k\u0000\n": 2}}"#).unwrap_err();
        assert!(
            e.to_string().contains("duplicate key `k\\u{0}\\u{a}`"),
            "{e}"
        );
    }

    #[test]
    fn parse_errors_quote_no_line_of_the_file() {
        let secret = "TOKEN=s3cr3t-value-that-must-not-leak";
        for text in [
            format!("a: [unclosed {secret}\n"),
            format!("{secret}: : :\n\tb"),
            format!("- {secret}\nkey: value\n"),
        ] {
            let e = parse_documents(&text).unwrap_err().to_string();
            assert!(!e.contains("s3cr3t"), "{e}");
            assert!(e.len() < 400 && !e.contains('\n'), "{e}");
        }
    }
}
