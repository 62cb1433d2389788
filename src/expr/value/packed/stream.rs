//! Packing while parsing: a serde seed that writes the part of a document a [`Keep`] selects
//! straight into the packed form, without building a `serde_json::Value` first.
//!
//! The bytes are those [`Packed::pack`] writes for the same document parsed whole (the
//! projection, each field's rule refined by what the field holds, keys sorted, numbers
//! normalized). A duplicate key fails the parse, among the fields kept and among those
//! dropped alike ([`Unkept`]), as a strict whole parse fails. Object entries are written as they are parsed
//! and put in key order when the object ends (one copy per nesting level); dropped fields
//! are skipped by the parser. Limits are not enforced while parsing: the document is packed
//! whole (but for long strings met past the size budget, written empty) and [`Parsed::over`]
//! tells whether it is beyond them, so a caller can still read the metadata of an object it
//! will not keep (serde_json bounds nesting to 128 levels, and
//! the input's size bounds the output).

use super::{ARRAY, FALSE, FLOAT, INT, KEYS, Keep, Keys, NO_ENV_CONTAINER, NULL, OBJECT, Packed};
use super::{STRING, TRUE, learn, write_key, write_varint};
use crate::expr::value::{ConvertError, Limits, float};
use crate::manifest::{Unkept, UnkeptVisitor};
use bytes::Bytes;
use jaq_json::Num;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A document packed while parsed (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Parsed {
    /// The projection, packed whole.
    pub packed: Packed,
    /// Why the document is beyond the limits it was parsed with (it is packed whole anyway).
    pub over: Option<ConvertError>,
    /// The captured strings, one per path of [`PackSeed::capture`] (`None`: absent or not a
    /// string).
    pub captured: Vec<Option<String>>,
}

/// Parses one document into a [`Parsed`], keeping what `keep` keeps. Strings at the
/// `capture` paths (object keys from the top, at most 32 paths) are copied out whether the
/// projection keeps them or not (below a dropped field, only the dropped field itself).
pub struct PackSeed<'a> {
    /// What is kept.
    pub keep: &'a Keep,
    /// The limits [`Parsed::over`] is measured against.
    pub limits: Limits,
    /// Paths of strings to copy out.
    pub capture: &'a [&'a [&'a str]],
}

impl<'de> DeserializeSeed<'de> for PackSeed<'_> {
    type Value = Parsed;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed, D::Error> {
        let capture = &self.capture[..self.capture.len().min(32)];
        let mut missing = Vec::new();
        let (out, spent, deepest, captured) = {
            let keys = KEYS.read();
            let mut state = State {
                out: Vec::with_capacity(1024),
                keytext: String::new(),
                entries: Vec::new(),
                scratch: Vec::new(),
                keys: &keys,
                missing: &mut missing,
                spent: 0,
                deepest: 0,
                capture,
                captured: vec![None; capture.len()],
                duplicate: None,
                max_bytes: self.limits.max_bytes,
            };
            let all = if capture.is_empty() {
                0
            } else {
                u32::MAX >> (32 - capture.len())
            };
            Node {
                st: &mut state,
                keep: self.keep,
                refine: Refine::Plain,
                depth: 0,
                capture: all,
            }
            .deserialize(d)?;
            if let Some(key) = &state.duplicate {
                return Err(crate::excerpt::duplicate_key(key));
            }
            (state.out, state.spent, state.deepest, state.captured)
        };
        learn(missing);
        let over = if deepest > self.limits.max_depth {
            Some(ConvertError::TooDeep {
                limit: self.limits.max_depth,
            })
        } else if spent > self.limits.max_bytes {
            Some(ConvertError::TooLarge {
                limit: self.limits.max_bytes,
            })
        } else {
            None
        };
        Ok(Parsed {
            // Copied into a buffer of its size, as `Packed::pack` does.
            packed: Packed(Bytes::copy_from_slice(&out)),
            over,
            captured,
        })
    }
}

/// Strings longer than this are not copied once a document is over its size budget (no
/// metadata field the reader needs of such an object is this long).
const ELIDED_STRING: usize = 1024;

/// Containers without their environment.
const CONTAINERS: Keep = Keep::Each(&NO_ENV_CONTAINER);

/// One object entry parsed so far: its key (in `State::keytext`) and value (in `State::out`).
struct Entry {
    key: (usize, usize),
    value: (usize, usize),
    /// False when the field's rule dropped the value for what it holds.
    kept: bool,
    /// Budget the value spent.
    spent: usize,
}

/// What one document's parse writes to and reads from.
struct State<'k, 'c> {
    out: Vec<u8>,
    /// Keys of the objects being parsed, one after another (a stack).
    keytext: String,
    /// Entries of the objects being parsed (a stack).
    entries: Vec<Entry>,
    /// Where an object's entries are copied to be written back in key order.
    scratch: Vec<u8>,
    keys: &'k Keys,
    /// Keys written inline that the key table should learn.
    missing: &'k mut Vec<String>,
    /// Budget spent, as `Packed::pack` spends it.
    spent: usize,
    /// Deepest node kept.
    deepest: usize,
    capture: &'c [&'c [&'c str]],
    captured: Vec<Option<String>>,
    /// The first duplicate key found among kept fields.
    duplicate: Option<String>,
    /// The size budget ([`Limits::max_bytes`]).
    max_bytes: usize,
}

/// How a value's rule depends on what the value is (see `field_rule` in the parent module).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refine {
    /// The rule applies as it is.
    Plain,
    /// A field projected as an object: anything else is dropped.
    DropUnlessObject,
    /// A field projected as an array: anything else is dropped.
    DropUnlessArray,
    /// `containers`/`initContainers` under [`Keep::NoEnv`]: an array keeps its items
    /// without their environment.
    Containers,
    /// An array item: the rule applies to an object, anything else is kept whole.
    ObjectsOnly,
}

/// One value to parse and pack.
struct Node<'s, 'k, 'c, 'r> {
    st: &'s mut State<'k, 'c>,
    keep: &'r Keep,
    refine: Refine,
    depth: usize,
    /// Capture paths (bits) whose keys match the path to this value.
    capture: u32,
}

impl Node<'_, '_, '_, '_> {
    /// Counts a kept scalar or container node; false when the rule drops a value of this
    /// type (`container`: the value is an object or array).
    fn keeps(&mut self, object: bool, array: bool) -> bool {
        let kept = match self.refine {
            Refine::DropUnlessObject => object,
            Refine::DropUnlessArray => array,
            _ => true,
        };
        if kept {
            self.st.spent += 8;
            self.st.deepest = self.st.deepest.max(self.depth);
        }
        kept
    }

    fn string(mut self, s: &str) -> bool {
        if !self.keeps(false, false) {
            return false;
        }
        if self.capture != 0 {
            for (i, path) in self.st.capture.iter().enumerate() {
                if self.capture & (1 << i) != 0 && path.len() == self.depth {
                    self.st.captured[i] = Some(s.to_owned());
                }
            }
        }
        self.st.spent += s.len();
        // Past the budget the object is not kept (only its metadata is read): a long string
        // is not copied, so a huge value costs no second copy of itself.
        let s = if self.st.spent > self.st.max_bytes && s.len() > ELIDED_STRING {
            ""
        } else {
            s
        };
        self.st.out.push(STRING);
        write_varint(&mut self.st.out, s.len() as u64);
        self.st.out.extend_from_slice(s.as_bytes());
        true
    }

    fn number(mut self, n: Num) -> bool {
        if !self.keeps(false, false) {
            return false;
        }
        match n {
            Num::Int(i) => {
                self.st.out.push(INT);
                let i = i as i64;
                write_varint(&mut self.st.out, ((i << 1) ^ (i >> 63)) as u64);
            }
            Num::Float(f) => {
                self.st.out.push(FLOAT);
                self.st.out.extend_from_slice(&f.to_le_bytes());
            }
            _ => self.st.out.push(NULL),
        }
        true
    }

    fn tag(mut self, tag: u8) -> bool {
        if !self.keeps(false, false) {
            return false;
        }
        self.st.out.push(tag);
        true
    }

    /// Inserts an array's tag and count before its items, written from `start`.
    fn header(&mut self, start: usize, tag: u8, count: usize) {
        let mut head = [0u8; 11];
        head[0] = tag;
        let mut len = 1;
        let mut n = count as u64;
        while n >= 0x80 {
            head[len] = (n as u8) | 0x80;
            n >>= 7;
            len += 1;
        }
        head[len] = n as u8;
        self.st
            .out
            .splice(start..start, head[..=len].iter().copied());
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_, '_, '_, '_> {
    /// Whether the value was kept (written).
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_, '_, '_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(self.tag(NULL))
    }

    fn visit_none<E>(self) -> Result<bool, E> {
        Ok(self.tag(NULL))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_bool<E>(self, v: bool) -> Result<bool, E> {
        Ok(self.tag(if v { TRUE } else { FALSE }))
    }

    fn visit_i64<E>(self, v: i64) -> Result<bool, E> {
        Ok(self.number(match isize::try_from(v) {
            Ok(i) => Num::Int(i),
            Err(_) => float(v as f64),
        }))
    }

    fn visit_u64<E>(self, v: u64) -> Result<bool, E> {
        // As serde_json's `Number::as_i64`, then `as_f64`.
        Ok(self.number(
            match i64::try_from(v).ok().and_then(|i| isize::try_from(i).ok()) {
                Some(i) => Num::Int(i),
                None => float(v as f64),
            },
        ))
    }

    fn visit_f64<E>(self, v: f64) -> Result<bool, E> {
        Ok(self.number(float(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(self.string(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<bool, A::Error> {
        if !self.keeps(false, true) {
            while seq.next_element::<Unkept>()?.is_some() {}
            return Ok(false);
        }
        let keep = match (self.refine, self.keep) {
            (Refine::Containers, _) => &CONTAINERS,
            (Refine::ObjectsOnly, _) => &Keep::All,
            (_, keep) => keep,
        };
        // As the tree packer: see `Keep::item`.
        let item = keep.item().unwrap_or(&Keep::All);
        let start = self.st.out.len();
        let mut count = 0usize;
        while seq
            .next_element_seed(Node {
                st: &mut *self.st,
                keep: item,
                refine: Refine::ObjectsOnly,
                depth: self.depth + 1,
                capture: 0,
            })?
            .is_some()
        {
            count += 1;
        }
        self.header(start, ARRAY, count);
        Ok(true)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<bool, A::Error> {
        if !self.keeps(true, false) {
            UnkeptVisitor.visit_map(map)?;
            return Ok(false);
        }
        let start = self.st.out.len();
        let first_entry = self.st.entries.len();
        let first_key = self.st.keytext.len();
        loop {
            let key_start = self.st.keytext.len();
            if map
                .next_key_seed(KeySeed {
                    keytext: &mut self.st.keytext,
                })?
                .is_none()
            {
                break;
            }
            let key = &self.st.keytext[key_start..];
            let mut capture = 0u32;
            if self.capture != 0 {
                for (i, path) in self.st.capture.iter().enumerate() {
                    if self.capture & (1 << i) != 0 && path.get(self.depth) == Some(&key) {
                        capture |= 1 << i;
                    }
                }
            }
            let Some((rule, refine)) = child_rule(self.keep, key) else {
                if capture == 0 {
                    map.next_value::<Unkept>()?;
                } else {
                    // A dropped string a path ends at is still captured.
                    if let Scalar(Some(text)) = map.next_value::<Scalar>()? {
                        for (i, path) in self.st.capture.iter().enumerate() {
                            if capture & (1 << i) != 0 && path.len() == self.depth + 1 {
                                self.st.captured[i] = Some(text.clone());
                            }
                        }
                    }
                }
                // Kept as a dropped entry, so that a duplicate of it is found too.
                let at = self.st.out.len();
                self.st.entries.push(Entry {
                    key: (key_start, self.st.keytext.len()),
                    value: (at, at),
                    kept: false,
                    spent: 0,
                });
                continue;
            };
            let key_end = self.st.keytext.len();
            let (value_start, spent_before) = (self.st.out.len(), self.st.spent);
            let kept = map.next_value_seed(Node {
                st: &mut *self.st,
                keep: rule,
                refine,
                depth: self.depth + 1,
                capture,
            })?;
            self.st.entries.push(Entry {
                key: (key_start, key_end),
                value: (value_start, self.st.out.len()),
                kept,
                spent: self.st.spent - spent_before,
            });
        }
        self.finish_object(start, first_entry, first_key);
        Ok(true)
    }
}

impl Node<'_, '_, '_, '_> {
    /// Rewrites the entries parsed from `start` as one object: sorted by key, the last of
    /// equal keys kept, dropped values left out.
    fn finish_object(&mut self, start: usize, first_entry: usize, first_key: usize) {
        let st = &mut *self.st;
        let keytext = &st.keytext;
        let entries = &mut st.entries[first_entry..];
        let text = |e: &Entry| &keytext[e.key.0..e.key.1];
        // Stable: equal keys stay in the order they came.
        entries.sort_by(|a, b| text(a).cmp(text(b)));
        let mut count = 0usize;
        for i in 0..entries.len() {
            let last_of_key = entries
                .get(i + 1)
                .is_none_or(|n| text(n) != text(&entries[i]));
            if !last_of_key {
                // A duplicate key: the parse fails (after this object is written whole).
                if st.duplicate.is_none() {
                    st.duplicate = Some(text(&entries[i]).to_owned());
                }
                st.spent -= entries[i].spent;
                entries[i].kept = false;
            } else if entries[i].kept {
                count += 1;
                st.spent += entries[i].key.1 - entries[i].key.0;
            }
        }
        st.scratch.clear();
        st.scratch.extend_from_slice(&st.out[start..]);
        st.out.truncate(start);
        st.out.push(OBJECT);
        write_varint(&mut st.out, count as u64);
        for e in st.entries[first_entry..].iter().filter(|e| e.kept) {
            write_key(
                &mut st.out,
                &st.keytext[e.key.0..e.key.1],
                st.keys,
                st.missing,
            );
            st.out
                .extend_from_slice(&st.scratch[e.value.0 - start..e.value.1 - start]);
        }
        st.entries.truncate(first_entry);
        st.keytext.truncate(first_key);
    }
}

/// The rule for field `key` of an object kept by `keep` and how what the field holds refines
/// it (`None`: the field is dropped whatever it holds).
fn child_rule<'r>(keep: &'r Keep, key: &str) -> Option<(&'r Keep, Refine)> {
    let rule = keep.field(key)?;
    let refine = match (keep, rule) {
        (Keep::NoEnv, _) if matches!(key, "containers" | "initContainers") => Refine::Containers,
        (Keep::Fields(_), Keep::Fields(_)) => Refine::DropUnlessObject,
        (Keep::Fields(_), Keep::Each(_)) => Refine::DropUnlessArray,
        _ => Refine::Plain,
    };
    Some((rule, refine))
}

/// A string (`Some`), or any other value, skipped (`None`).
struct Scalar(Option<String>);

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scalar, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Scalar;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }

            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(Some(v.to_owned())))
            }

            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }

            fn visit_bool<E>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }

            fn visit_i64<E>(self, _: i64) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }

            fn visit_u64<E>(self, _: u64) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }

            fn visit_f64<E>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar(None))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<Unkept>()?.is_some() {}
                Ok(Scalar(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
                UnkeptVisitor.visit_map(map)?;
                Ok(Scalar(None))
            }
        }
        d.deserialize_any(Text)
    }
}

/// Appends an object key to the key stack.
struct KeySeed<'a> {
    keytext: &'a mut String,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.keytext.push_str(v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{OBJECT_RULE, POD_PROJECTION};
    use serde_json::{Value as Json, json};

    const RULE: Keep = Keep::Fields(&[
        ("kind", Keep::All),
        ("meta", Keep::Without(&["secret"])),
        ("items", Keep::Each(&Keep::Fields(&[("a", Keep::All)]))),
        ("spec", Keep::Fields(&[("x", Keep::All)])),
        ("tmpl", Keep::NoEnv),
        ("shape", Keep::Shape(&[("gone", Keep::Drop)], &Keep::All)),
    ]);

    fn try_parse(text: &str, keep: &Keep, limits: Limits) -> Result<Parsed, serde_json::Error> {
        let mut d = serde_json::Deserializer::from_str(text);
        PackSeed {
            keep,
            limits,
            capture: &[],
        }
        .deserialize(&mut d)
    }

    fn parse(text: &str, keep: &Keep, limits: Limits) -> Parsed {
        try_parse(text, keep, limits).unwrap()
    }

    /// Packing while parsing `text` gives the bytes `Packed::pack` gives for it parsed whole;
    /// or, when `text` has a duplicate key among the fields `keep` keeps, fails naming it.
    fn assert_same(text: &str, keep: &Keep) {
        let json: Json = serde_json::from_str(text).unwrap();
        let strict = crate::manifest::from_json_strict(text);
        // Both write known keys as ids once the key table has them.
        let _ = Packed::pack(&json, keep, Limits::default());
        let _ = try_parse(text, keep, Limits::default());
        let whole = Packed::pack(&json, keep, Limits::default()).unwrap();
        let streamed = match try_parse(text, keep, Limits::default()) {
            Ok(streamed) => streamed,
            Err(e) => {
                assert!(strict.is_err(), "{text}: {e}");
                assert!(e.to_string().contains("duplicate key"), "{text}: {e}");
                return;
            }
        };
        assert_eq!(streamed.over, None, "{text}");
        assert_eq!(streamed.packed.to_json(), whole.to_json(), "{text}");
        assert_eq!(streamed.packed, whole, "{text}");
    }

    #[test]
    fn a_duplicate_key_kept_or_dropped_fails_the_parse() {
        for (text, keep) in [
            (r#"{"dup": 1, "dup": {"x": 2}}"#, &Keep::All),
            (r#"{"spec": "first", "spec": {"x": 1}}"#, &RULE),
            (r#"{"spec": {"x": 1, "x": 2, "w": 3}}"#, &RULE),
            // Fields the rule drops: the same rule.
            (r#"{"kind": "K", "z": 1, "z": 2}"#, &RULE),
            (r#"{"kind": "K", "z": {"a": [{"b": 1, "b": 2}]}}"#, &RULE),
            (
                r#"{"kind": "K", "z": {"k0": 0, "k1": 1, "k2": 2, "k3": 3, "k4": 4, "k5": 5, "k6": 6, "k7": 7, "k8": 8, "k9": 9, "ka": 10, "kb": 11, "kc": 12, "kd": 13, "ke": 14, "kf": 15, "kg": 16, "kh": 17, "k3": 18}}"#,
                &RULE,
            ),
        ] {
            let e = try_parse(text, keep, Limits::default()).expect_err(text);
            assert!(e.to_string().contains("duplicate key"), "{text}: {e}");
        }
        assert!(
            try_parse(
                r#"{"kind": "K", "z": {"a": [{"b": 1}, {"b": 2}], "\u0062": 1, "b": 2}}"#,
                &RULE,
                Limits::default()
            )
            .is_err(),
            "an escaped key is the same key"
        );
        assert!(
            try_parse(
                r#"{"kind": "K", "z": {"a": [{"b": 1}, {"b": 2}]}, "y": 1}"#,
                &RULE,
                Limits::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn packs_what_packing_the_parsed_document_packs() {
        for keep in [
            &Keep::All,
            &RULE,
            &POD_PROJECTION,
            &OBJECT_RULE,
            &Keep::NoEnv,
        ] {
            for text in [
                r#"{"z": 1, "a": {"y": [1, 2.0, 2.5, -7, 1e300, -0.0, null, true, false]}, "m": "é✓"}"#,
                r#"{"kind": "K", "meta": {"secret": "s", "name": "n"}, "other": {"deep": [1]}}"#,
                r#"{"items": [{"a": 1, "b": 2}, 3, [{"a": 1, "b": 2}], "s"], "spec": "not an object"}"#,
                r#"{"items": {"a": 1}, "spec": {"x": {"y": 1}, "z": 2}}"#,
                r#"{"tmpl": {"containers": [{"name": "c", "env": [1], "envFrom": []}, 7,
                    [{"env": 1}]], "initContainers": {"env": 1},
                    "nested": {"containers": [{"env": 2, "x": 1}]},
                    "lists": [[{"containers": [{"env": 3}]}], {"containers": [{"env": 4}]}]}}"#,
                r#"{"shape": {"gone": 1, "kept": 2}, "a\"b": 1, "a": 0, "\u00e9": "\n\"",
                    "big": 18446744073709551615, "neg": -9223372036854775808, "f": 9007199254740993.0}"#,
                r#"{"dup": 1, "dup": {"x": 2}, "spec": {"x": 1}, "spec": "not an object"}"#,
                r#"{"spec": "first", "spec": {"x": 1, "x": 2, "w": 3}}"#,
                r#"{"metadata": {"name": "p", "managedFields": [{"m": 1}], "resourceVersion": "4",
                    "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "k": "v"}},
                    "spec": {"containers": [{"name": "c", "env": [{"name": "E"}], "resources": {}}],
                    "initContainers": "none", "nodeName": "n"}, "status": {"conditions": [
                    {"type": "Ready", "status": "True", "lastProbeTime": null}], "phase": "Running"}}"#,
                r#"[{"b": 1, "a": 2}, [], {}, "", 0]"#,
                r#""just a string""#,
                r#"{}"#,
            ] {
                assert_same(text, keep);
            }
        }
    }

    #[test]
    fn random_documents_pack_the_same() {
        // A deterministic generator of nested documents with keys the rules name.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        const KEYS: [&str; 12] = [
            "kind",
            "meta",
            "items",
            "spec",
            "x",
            "a",
            "containers",
            "env",
            "tmpl",
            "metadata",
            "status",
            "zz",
        ];
        fn document(next: &mut impl FnMut(u64) -> u64, depth: u32) -> String {
            match if depth > 4 { next(4) } else { next(7) } {
                0 => "null".into(),
                1 => format!("{}", next(1000) as i64 - 500),
                2 => format!("{}.5", next(100)),
                3 => format!("\"s{}\"", next(10)),
                4 | 5 => {
                    let n = next(5);
                    let fields: Vec<String> = (0..n)
                        .map(|_| {
                            let key = KEYS[next(KEYS.len() as u64) as usize];
                            format!("\"{key}\": {}", document(next, depth + 1))
                        })
                        .collect();
                    format!("{{{}}}", fields.join(", "))
                }
                _ => {
                    let n = next(4);
                    let items: Vec<String> = (0..n).map(|_| document(next, depth + 1)).collect();
                    format!("[{}]", items.join(", "))
                }
            }
        }
        for _ in 0..2000 {
            let text = document(&mut next, 0);
            for keep in [&Keep::All, &RULE, &POD_PROJECTION, &OBJECT_RULE] {
                assert_same(&text, keep);
            }
        }
    }

    #[test]
    fn measures_the_limits_as_packing_enforces_them() {
        let tight = Limits {
            max_bytes: 50,
            max_depth: 8,
        };
        let big = json!({"x": "y".repeat(100), "dropped": "z".repeat(100)}).to_string();
        assert!(matches!(
            parse(&big, &Keep::All, tight).over,
            Some(ConvertError::TooLarge { .. })
        ));
        // What the rule drops spends nothing.
        let kept_small = json!({"kind": "k", "other": "z".repeat(100)}).to_string();
        assert_eq!(parse(&kept_small, &RULE, tight).over, None);
        let mut deep = json!(1);
        for _ in 0..20 {
            deep = json!([deep]);
        }
        let parsed = parse(&deep.to_string(), &Keep::All, tight);
        assert!(matches!(parsed.over, Some(ConvertError::TooDeep { .. })));
        // Packed whole anyway, so what it holds can still be read.
        assert_eq!(parsed.packed.to_json(), deep);
        // At the budget exactly: within it, as `Packed::pack` has it.
        for n in 0..80 {
            let text = json!({"k": "v".repeat(n)}).to_string();
            let json: Json = serde_json::from_str(&text).unwrap();
            assert_eq!(
                parse(&text, &Keep::All, tight).over,
                Packed::pack(&json, &Keep::All, tight).err(),
                "{text}"
            );
        }
    }

    #[test]
    fn captures_strings_kept_or_dropped() {
        const CAPTURE: &[&[&str]] = &[
            &["metadata", "name"],
            &["metadata", "resourceVersion"],
            &["metadata", "uid"],
            &["spec", "nodeName"],
            &["kind"],
        ];
        let text = r#"{"kind": 5, "metadata": {"resourceVersion": "7", "name": "p", "uid": {"x": 1},
            "labels": {"name": "not this"}}, "spec": {"nodeName": "n"}, "name": "nor this"}"#;
        let mut d = serde_json::Deserializer::from_str(text);
        let parsed = PackSeed {
            keep: &POD_PROJECTION,
            limits: Limits::default(),
            capture: CAPTURE,
        }
        .deserialize(&mut d)
        .unwrap();
        assert_eq!(
            parsed.captured,
            [
                Some("p".into()),
                Some("7".into()),
                None,
                Some("n".into()),
                None
            ]
        );
        // The resource version is captured though the projection drops it.
        assert!(
            parsed
                .packed
                .lookup(&["metadata", "resourceVersion"])
                .is_none()
        );
    }

    #[test]
    fn sets_top_level_strings() {
        let text = r#"{"metadata": {"name": "p"}, "spec": {}, "apiVersion": "old"}"#;
        let packed = parse(text, &Keep::All, Limits::default()).packed;
        let set = packed.with_strings(&[("apiVersion", "v1"), ("kind", "Pod")]);
        assert_eq!(
            set.to_json(),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}})
        );
        assert_eq!(set.text(&["kind"]), Some("Pod"));
        assert_eq!(set.text(&["metadata", "name"]), Some("p"));
        assert_eq!(set.text(&["metadata"]), None);
        // Equal strings: the same buffer back.
        assert_eq!(
            set.with_strings(&[("apiVersion", "v1"), ("kind", "Pod")]),
            set
        );
        // Anything but an object is left as it is.
        let list = parse("[1]", &Keep::All, Limits::default()).packed;
        assert_eq!(list.with_strings(&[("kind", "Pod")]), list);
    }
}

#[cfg(test)]
mod deep {
    use super::*;

    #[test]
    fn the_deepest_document_serde_json_parses_fits_a_small_stack() {
        // serde_json stops at 128 levels; up to there, parsing and packing recurse once per
        // level. A tokio worker has 2 MiB of stack: check with half of that.
        let text = format!("{}1{}", r#"{"a": ["#.repeat(63), "]}".repeat(63));
        let handle = std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                let mut d = serde_json::Deserializer::from_str(&text);
                PackSeed {
                    keep: &Keep::NoEnv,
                    limits: Limits::default(),
                    capture: &[],
                }
                .deserialize(&mut d)
                .map(|p| p.over)
            })
            .unwrap();
        assert_eq!(handle.join().unwrap().unwrap(), None);
        // Deeper than serde_json goes: an error, not a crash.
        let deeper = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let mut d = serde_json::Deserializer::from_str(&deeper);
        let parsed = PackSeed {
            keep: &Keep::All,
            limits: Limits::default(),
            capture: &[],
        }
        .deserialize(&mut d);
        assert!(parsed.is_err());
    }
}
