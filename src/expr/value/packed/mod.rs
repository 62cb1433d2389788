//! A JSON document packed into one compact, immutable buffer, unpacked into a jq value only
//! when something must be evaluated on it.
//!
//! The cache keeps every pod this way (a few hundred bytes instead of a tree of maps): the
//! evaluations resolution needs are remembered per pod (see `object::Memo`), so a pod is
//! unpacked when it arrives and again only when the catalog changes.
//!
//! Packing applies a [`Keep`] projection while it reads the borrowed JSON (nothing is copied
//! first), sorts object keys and normalizes numbers exactly as [`super::from_json`] does, and
//! spends the same size and depth budget. Object keys are written as ids into a process-wide
//! table (bounded; keys beyond it are written inline). Strings of an unpacked value share
//! the packed buffer instead of being copied.
//!
//! Layout: one tag byte per node — null, false, true, integer (zig-zag varint), float (8
//! bytes), string (varint length, bytes), array (varint count, items), object (varint
//! count, then key and value per entry). A key is a varint `id << 1 | 1`, or `len << 1`
//! followed by the key's bytes.

mod stream;

pub use stream::{PackSeed, Parsed};

use super::{ConvertError, Doc, Limits, float, spend};
use bytes::Bytes;
use jaq_json::{Map, Num, Rc, Val};
use parking_lot::RwLock;
use serde_json::Value as Json;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::LazyLock;

/// Which parts of a document to keep.
#[derive(Debug)]
pub enum Keep {
    /// The value as it is.
    All,
    /// Of an object, only these fields, each projected in turn (a non-object is dropped).
    Fields(&'static [(&'static str, Keep)]),
    /// Of an object, every field but these.
    Without(&'static [&'static str]),
    /// Of an array, every item projected (items of another shape are kept as they are).
    Each(&'static Keep),
    /// Of an object, these fields by their own rule, every other field by the second.
    Shape(&'static [(&'static str, Keep)], &'static Keep),
    /// Leave the field out (in a [`Keep::Shape`]).
    Drop,
    /// Everything, except `env` and `envFrom` of the items of any `containers` or
    /// `initContainers` list at any depth (what pod templates embedded in objects hold).
    NoEnv,
}

impl Keep {
    /// The rule for field `key` of an object kept by this rule, whatever the field holds
    /// (`None`: the field is left out). Rules that do not name fields keep every field,
    /// `NoEnv` passing itself down.
    pub fn field(&self, key: &str) -> Option<&Keep> {
        // Length and first byte first: this runs for every field of every object parsed,
        // and most names differ there (a call to memcmp costs more than the comparison).
        let same = |k: &str| {
            k.len() == key.len() && k.as_bytes().first() == key.as_bytes().first() && k == key
        };
        let named = |fields: &'static [(&'static str, Keep)]| {
            fields.iter().find(|(k, _)| same(k)).map(|(_, r)| r)
        };
        match self {
            Keep::Fields(fields) => named(fields),
            Keep::Shape(fields, rest) => match named(fields).unwrap_or(rest) {
                Keep::Drop => None,
                rule => Some(rule),
            },
            Keep::Without(skip) => (!skip.iter().any(|k| same(k))).then_some(&Keep::All),
            Keep::NoEnv => Some(&Keep::NoEnv),
            Keep::Drop => None,
            Keep::All | Keep::Each(_) => Some(&Keep::All),
        }
    }

    /// The rule for the items of an array kept by this rule (`None`: an array is left out
    /// here: a rule that projects an object's fields drops its field when it holds an array,
    /// see `field_rule`). `NoEnv` passes itself down; other rules keep items whole.
    pub fn item(&self) -> Option<&Keep> {
        match self {
            Keep::Each(k) => Some(k),
            Keep::NoEnv => Some(&Keep::NoEnv),
            Keep::Fields(_) | Keep::Drop => None,
            Keep::All | Keep::Without(_) | Keep::Shape(..) => Some(&Keep::All),
        }
    }
}

/// A container without its environment.
const NO_ENV_CONTAINER: Keep = Keep::Without(&["env", "envFrom"]);

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
const INT: u8 = 3;
const FLOAT: u8 = 4;
const STRING: u8 = 5;
const ARRAY: u8 = 6;
const OBJECT: u8 = 7;

/// Keys in the process-wide table at most; later new keys are written inline.
const MAX_KEYS: usize = 1 << 14;
/// Keys longer than this are written inline.
const MAX_KEY_LEN: usize = 128;

#[derive(Default)]
struct Keys {
    /// Seeded per process: keys come from cluster objects.
    ids: HashMap<Box<str>, u32, foldhash::quality::RandomState>,
    bytes: Vec<Bytes>,
}

static KEYS: LazyLock<RwLock<Keys>> = LazyLock::new(RwLock::default);

/// A packed JSON value. Equal bytes mean equal documents; equal documents pack to equal
/// bytes once their keys are in the key table (a key is written inline the first time it is
/// seen, and as an id after that).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Packed(Bytes);

/// Where a path of object keys leads ([`Packed::walk`]), as jq's `.k1.k2…` does.
#[derive(Debug)]
pub enum Walk {
    /// The value there; `null` past a missing key or a `null`.
    Found(Val),
    /// The step at this index meets a value that is neither an object nor `null` (jq
    /// fails there, or gives nothing for an optional step).
    Stuck(usize),
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed({} bytes)", self.0.len())
    }
}

impl Packed {
    /// Packs the part of `json` that `keep` selects, within `limits`.
    pub fn pack(json: &Json, keep: &Keep, limits: Limits) -> Result<Packed, ConvertError> {
        let mut packer = Packer {
            out: Vec::with_capacity(512),
            budget: limits.max_bytes,
            limits,
            missing: Vec::new(),
        };
        {
            let keys = KEYS.read();
            packer.value(json, keep, 0, &keys)?;
        }
        learn(packer.missing);
        // Copied into a buffer of its size: shrinking the one written in place can leave it
        // in its larger block (mimalloc keeps a block that shrinks by less than half), up to
        // half the size again for every cached object.
        Ok(Packed(Bytes::copy_from_slice(&packer.out)))
    }

    /// Size of the packed buffer in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// A hash of the packed bytes (seeded per process; see [`Packed`] for when equal
    /// documents have equal bytes).
    pub fn content_hash(&self) -> u64 {
        use std::hash::BuildHasher;
        static SEED: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);
        SEED.hash_one(self.0.as_ref())
    }

    /// True for the empty buffer (what [`Packed::default`] holds; unpacks to `null`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The jq value (`null` for an empty buffer).
    pub fn to_val(&self) -> Val {
        self.read(|reader| reader.val()).unwrap_or(Val::Null)
    }

    /// Runs `f` on a reader at the start of the buffer, under the key table's read lock.
    fn read<T>(&self, f: impl FnOnce(&mut Reader<'_>) -> Option<T>) -> Option<T> {
        let keys = KEYS.read();
        f(&mut Reader {
            buf: &self.0,
            at: 0,
            keys: &keys,
        })
    }

    /// The value at a path of object keys, unpacking nothing else (`None` when absent).
    pub fn lookup(&self, path: &[&str]) -> Option<Val> {
        self.with_node(|root| root.get_path(path)?.reader().val())
    }

    /// Where jq's `.k1.k2…` leads in the packed value, unpacking only what it reaches (see
    /// [`Walk`]); `None` for an empty or malformed buffer.
    pub fn walk<'k>(&self, path: impl IntoIterator<Item = &'k [u8]>) -> Option<Walk> {
        self.read(|reader| {
            for (step, want) in path.into_iter().enumerate() {
                match reader.byte()? {
                    NULL => return Some(Walk::Found(Val::Null)),
                    OBJECT if reader.field(want)? => {}
                    OBJECT => return Some(Walk::Found(Val::Null)),
                    _ => return Some(Walk::Stuck(step)),
                }
            }
            reader.val().map(Walk::Found)
        })
    }

    /// The string at a path of object keys (`None` when absent or not a string).
    pub fn text(&self, path: &[&str]) -> Option<&str> {
        let span = self.read(|reader| {
            reader.find(path)?;
            if reader.byte()? != STRING {
                return None;
            }
            let len = usize::try_from(reader.varint()?).ok()?;
            let start = reader.at;
            reader.advance(len)?;
            Some(start..start + len)
        })?;
        std::str::from_utf8(&self.0[span]).ok()
    }

    /// The object with string fields `fields` set (replacing fields of the same name; the
    /// `fields` given in key order). Anything but an object is returned as it is.
    pub fn with_strings(&self, fields: &[(&str, &str)]) -> Packed {
        if fields.iter().all(|(k, v)| self.text(&[k]) == Some(v)) {
            return self.clone();
        }
        // Each entry: its key's text, and the bytes of key and value.
        let entries = self.read(|reader| {
            if reader.byte()? != OBJECT {
                return None;
            }
            let mut entries: Vec<(Bytes, std::ops::Range<usize>)> = Vec::new();
            for _ in 0..reader.varint()? {
                let start = reader.at;
                let key = reader.key_bytes()?;
                reader.skip()?;
                entries.push((key, start..reader.at));
            }
            Some(entries)
        });
        let Some(entries) = entries else {
            return self.clone();
        };
        let keys = KEYS.read();
        let mut out = Vec::with_capacity(self.0.len() + 64);
        let mut missing = Vec::new();
        let mut new = fields.iter().peekable();
        let kept = entries
            .iter()
            .filter(|(k, _)| !fields.iter().any(|(f, _)| f.as_bytes() == k.as_ref()))
            .count();
        out.push(OBJECT);
        write_varint(&mut out, (kept + fields.len()) as u64);
        let write_field = |out: &mut Vec<u8>, missing: &mut Vec<String>, k: &str, v: &str| {
            write_key(out, k, &keys, missing);
            out.push(STRING);
            write_varint(out, v.len() as u64);
            out.extend_from_slice(v.as_bytes());
        };
        for (key, span) in &entries {
            while let Some((k, v)) = new.next_if(|(k, _)| k.as_bytes() < key.as_ref()) {
                write_field(&mut out, &mut missing, k, v);
            }
            if !fields.iter().any(|(f, _)| f.as_bytes() == key.as_ref()) {
                out.extend_from_slice(&self.0[span.clone()]);
            }
        }
        for (k, v) in new {
            write_field(&mut out, &mut missing, k, v);
        }
        drop(keys);
        learn(missing);
        Packed(Bytes::from(out))
    }

    /// The value as JSON (keys sorted, integral numbers as integers).
    pub fn to_json(&self) -> Json {
        super::to_json(&self.to_val())
    }

    /// The packed bytes (for tests that break them).
    #[cfg(test)]
    pub(crate) fn raw_bytes(&self) -> Bytes {
        self.0.clone()
    }

    /// A buffer as it is (for tests of malformed buffers).
    #[cfg(test)]
    pub(crate) fn from_raw(bytes: Bytes) -> Packed {
        Packed(bytes)
    }

    /// Runs `f` on the root value read in place (nothing unpacked but what `f` asks for).
    /// `f` runs under the key table's read lock: it must not call other `Packed` methods.
    pub fn with_node<T>(&self, f: impl FnOnce(Node<'_>) -> T) -> T {
        let keys = KEYS.read();
        f(Node {
            buf: &self.0,
            at: 0,
            keys: &keys,
        })
    }
}

/// A value inside a packed buffer, read in place ([`Packed::with_node`]). Reads of a
/// malformed buffer give `None` (or nothing to iterate).
#[derive(Clone, Copy)]
pub struct Node<'a> {
    buf: &'a Bytes,
    at: usize,
    keys: &'a Keys,
}

/// The elements of a packed array ([`Doc::items`] of a [`Node`]).
struct Items<'a> {
    reader: Reader<'a>,
    left: u64,
}

impl<'a> Iterator for Items<'a> {
    type Item = Node<'a>;

    fn next(&mut self) -> Option<Node<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let item = Node {
            buf: self.reader.buf,
            at: self.reader.at,
            keys: self.reader.keys,
        };
        if self.reader.skip().is_none() {
            self.left = 0;
            return None;
        }
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // A malformed buffer may end early: the length is an upper bound, but it is the
        // right one for every well-formed buffer, which collect may allocate for.
        let n = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(self.reader.buf.len());
        (n, Some(n))
    }
}

impl<'a> Node<'a> {
    fn reader(self) -> Reader<'a> {
        Reader {
            buf: self.buf,
            at: self.at,
            keys: self.keys,
        }
    }

    fn tag(self) -> Option<u8> {
        self.buf.get(self.at).copied()
    }

    /// True for `true`.
    pub fn is_true(self) -> bool {
        self.tag() == Some(TRUE)
    }

    /// The value unpacked (`null` when malformed).
    pub fn to_val(self) -> Val {
        self.reader().val().unwrap_or(Val::Null)
    }
}

impl<'a> Doc<'a> for Node<'a> {
    fn get(self, key: &str) -> Option<Self> {
        let mut reader = self.reader();
        if reader.byte()? != OBJECT || !reader.field(key.as_bytes())? {
            return None;
        }
        Some(Node {
            at: reader.at,
            ..self
        })
    }

    fn as_str(self) -> Option<&'a str> {
        let mut reader = self.reader();
        if reader.byte()? != STRING {
            return None;
        }
        let len = usize::try_from(reader.varint()?).ok()?;
        let start = reader.at;
        reader.advance(len)?;
        std::str::from_utf8(&self.buf[start..start + len]).ok()
    }

    fn as_f64(self) -> Option<f64> {
        let mut reader = self.reader();
        match reader.byte()? {
            INT => {
                let z = reader.varint()?;
                Some((((z >> 1) as i64) ^ -((z & 1) as i64)) as f64)
            }
            FLOAT => Some(f64::from_le_bytes(
                self.buf.get(reader.at..reader.at + 8)?.try_into().ok()?,
            )),
            _ => None,
        }
    }

    fn is_number(self) -> bool {
        matches!(self.tag(), Some(INT | FLOAT))
    }

    fn is_true(self) -> bool {
        Node::is_true(self)
    }

    /// Its size hint is the array's length, so collecting allocates once.
    fn items(self) -> impl Iterator<Item = Self> {
        let mut reader = self.reader();
        let left = match reader.byte() {
            Some(ARRAY) => reader.varint().unwrap_or(0),
            _ => 0,
        };
        Items { reader, left }
    }

    fn entries(self) -> impl Iterator<Item = (&'a [u8], Self)> {
        let mut reader = self.reader();
        let mut left = match reader.byte() {
            Some(OBJECT) => reader.varint().unwrap_or(0),
            _ => 0,
        };
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let entry = reader.key_ref().and_then(|key| {
                let value = Node {
                    at: reader.at,
                    ..self
                };
                reader.skip()?;
                Some((key, value))
            });
            if entry.is_none() {
                left = 0;
            }
            entry
        })
    }

    fn to_text(self) -> String {
        super::to_text(&self.to_val())
    }
}

struct Packer {
    out: Vec<u8>,
    budget: usize,
    limits: Limits,
    /// Keys written inline that the table should learn.
    missing: Vec<String>,
}

impl Packer {
    fn varint(&mut self, n: u64) {
        write_varint(&mut self.out, n);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.varint(b.len() as u64);
        self.out.extend_from_slice(b);
    }

    fn key(&mut self, key: &str, keys: &Keys) {
        write_key(&mut self.out, key, keys, &mut self.missing);
    }

    fn value(
        &mut self,
        json: &Json,
        keep: &Keep,
        depth: usize,
        keys: &Keys,
    ) -> Result<(), ConvertError> {
        if depth > self.limits.max_depth {
            return Err(ConvertError::TooDeep {
                limit: self.limits.max_depth,
            });
        }
        spend(&mut self.budget, 8, self.limits)?;
        match (json, keep) {
            (Json::Object(map), keep) => {
                let rule = |k: &str, v: &Json| field_rule(keep, k, v);
                // serde_json's map yields its keys in order, which is the packed order: the
                // entries are counted, then written as they come (no list to sort). Keys
                // out of order (a map that keeps insertion order) take the sorting path.
                let mut count = 0usize;
                let mut previous: Option<&str> = None;
                let mut sorted = true;
                for (k, v) in map {
                    if rule(k, v).is_some() {
                        count += 1;
                        sorted &= previous.is_none_or(|p| p < k.as_str());
                        previous = Some(k);
                    }
                }
                if !sorted {
                    let mut picked: Vec<(&str, &Json, &Keep)> = map
                        .iter()
                        .filter_map(|(k, v)| rule(k, v).map(|r| (k.as_str(), v, r)))
                        .collect();
                    picked.sort_unstable_by(|a, b| a.0.cmp(b.0));
                    return self.object(picked, depth, keys);
                }
                self.out.push(OBJECT);
                self.varint(count as u64);
                for (k, v) in map {
                    if let Some(r) = rule(k, v) {
                        spend(&mut self.budget, k.len(), self.limits)?;
                        self.key(k, keys);
                        self.value(v, r, depth + 1, keys)?;
                    }
                }
                Ok(())
            }
            (Json::Array(items), keep) => {
                // A projected object's array field never reaches here (dropped with its
                // field); a document that is an array where an object is projected keeps it.
                let item_keep = keep.item().unwrap_or(&Keep::All);
                self.out.push(ARRAY);
                self.varint(items.len() as u64);
                for item in items {
                    let item_keep = match (item, item_keep) {
                        (Json::Object(_), k) => k,
                        _ => &Keep::All,
                    };
                    self.value(item, item_keep, depth + 1, keys)?;
                }
                Ok(())
            }
            (Json::Null, _) => {
                self.out.push(NULL);
                Ok(())
            }
            (Json::Bool(b), _) => {
                self.out.push(if *b { TRUE } else { FALSE });
                Ok(())
            }
            (Json::Number(n), _) => {
                match super::number(n) {
                    Num::Int(i) => {
                        self.out.push(INT);
                        let i = i as i64;
                        self.varint(((i << 1) ^ (i >> 63)) as u64);
                    }
                    Num::Float(f) => {
                        self.out.push(FLOAT);
                        self.out.extend_from_slice(&f.to_le_bytes());
                    }
                    // `number` yields only integers and floats.
                    _ => self.out.push(NULL),
                }
                Ok(())
            }
            (Json::String(s), _) => {
                spend(&mut self.budget, s.len(), self.limits)?;
                self.out.push(STRING);
                self.bytes(s.as_bytes());
                Ok(())
            }
        }
    }

    fn object(
        &mut self,
        entries: Vec<(&str, &Json, &Keep)>,
        depth: usize,
        keys: &Keys,
    ) -> Result<(), ConvertError> {
        self.out.push(OBJECT);
        self.varint(entries.len() as u64);
        for (k, v, keep) in entries {
            spend(&mut self.budget, k.len(), self.limits)?;
            self.key(k, keys);
            self.value(v, keep, depth + 1, keys)?;
        }
        Ok(())
    }
}

/// Writes `n` as a varint.
fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Writes an object key: its id in the key table, or inline (noted in `missing` for the
/// table to learn).
fn write_key(out: &mut Vec<u8>, key: &str, keys: &Keys, missing: &mut Vec<String>) {
    match keys.ids.get(key) {
        Some(&id) => write_varint(out, u64::from(id) << 1 | 1),
        None => {
            if key.len() <= MAX_KEY_LEN && keys.bytes.len() < MAX_KEYS {
                missing.push(key.to_owned());
            }
            write_varint(out, (key.len() as u64) << 1);
            out.extend_from_slice(key.as_bytes());
        }
    }
}

/// Adds keys written inline to the key table (up to [`MAX_KEYS`]).
fn learn(missing: Vec<String>) {
    if missing.is_empty() {
        return;
    }
    let mut keys = KEYS.write();
    for key in missing {
        if keys.bytes.len() >= MAX_KEYS {
            break;
        }
        if !keys.ids.contains_key(key.as_str()) {
            let id = keys.bytes.len() as u32;
            // Static: unpacking clones a key for every object field, on every thread, and a
            // static `Bytes` clones without touching a shared counter. The table never forgets
            // a key and is bounded (`MAX_KEYS` of at most `MAX_KEY_LEN` bytes: 2 MiB).
            let leaked: &'static str = Box::leak(key.clone().into_boxed_str());
            keys.bytes.push(Bytes::from_static(leaked.as_bytes()));
            keys.ids.insert(key.into_boxed_str(), id);
        }
    }
}

/// The rule for field `key` (holding `value`) of an object kept by `keep`; `None` when the
/// field is left out. [`Keep::field`], refined by what the value is.
fn field_rule<'k>(keep: &'k Keep, key: &str, value: &Json) -> Option<&'k Keep> {
    const CONTAINERS: Keep = Keep::Each(&NO_ENV_CONTAINER);
    let rule = keep.field(key)?;
    match (keep, rule, value) {
        (Keep::NoEnv, _, Json::Array(_)) if matches!(key, "containers" | "initContainers") => {
            Some(&CONTAINERS)
        }
        // A field projected as an object (array) that is not one is dropped.
        (Keep::Fields(_), Keep::Fields(_), v) if !v.is_object() => None,
        (Keep::Fields(_), Keep::Each(_), v) if !v.is_array() => None,
        _ => Some(rule),
    }
}

/// Reads a buffer written by [`Packer`]. Defensive: a malformed buffer gives `None`.
struct Reader<'a> {
    buf: &'a Bytes,
    at: usize,
    keys: &'a Keys,
}

impl<'a> Reader<'a> {
    /// Moves to the value at a path of object keys (`None` when absent).
    fn find(&mut self, path: &[&str]) -> Option<()> {
        for want in path {
            if self.byte()? != OBJECT || !self.field(want.as_bytes())? {
                return None;
            }
        }
        Some(())
    }

    /// In an object whose tag was just read, moves to the value of key `want`; false (the
    /// reader somewhere inside the object) when it has none.
    fn field(&mut self, want: &[u8]) -> Option<bool> {
        // Keys are written in byte order: the search ends at the first key past `want`.
        for _ in 0..self.varint()? {
            match self.key_cmp(want)? {
                Ordering::Equal => return Some(true),
                Ordering::Greater => return Some(false),
                Ordering::Less => self.skip()?,
            }
        }
        Some(false)
    }

    /// Reads a key: how it compares with `want`.
    fn key_cmp(&mut self, want: &[u8]) -> Option<Ordering> {
        let k = self.varint()?;
        if k & 1 == 1 {
            let key = self.keys.bytes.get(usize::try_from(k >> 1).ok()?)?;
            Some(key.as_ref().cmp(want))
        } else {
            let len = usize::try_from(k >> 1).ok()?;
            let start = self.at;
            self.advance(len)?;
            Some(self.buf[start..start + len].cmp(want))
        }
    }

    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn slice(&mut self, len: usize) -> Option<Bytes> {
        let end = self.at.checked_add(len).filter(|&e| e <= self.buf.len())?;
        let out = self.buf.slice(self.at..end);
        self.at = end;
        Some(out)
    }

    fn key_bytes(&mut self) -> Option<Bytes> {
        let k = self.varint()?;
        if k & 1 == 1 {
            self.keys.bytes.get(usize::try_from(k >> 1).ok()?).cloned()
        } else {
            self.slice(usize::try_from(k >> 1).ok()?)
        }
    }

    /// Reads a key: its bytes, borrowed from the key table or the buffer.
    fn key_ref(&mut self) -> Option<&'a [u8]> {
        let k = self.varint()?;
        let len = usize::try_from(k >> 1).ok()?;
        if k & 1 == 1 {
            self.keys.bytes.get(len).map(|b| b.as_ref())
        } else {
            let start = self.at;
            self.advance(len)?;
            Some(&self.buf[start..start + len])
        }
    }

    fn key(&mut self) -> Option<Val> {
        Some(Val::TStr(Box::new(self.key_bytes()?)))
    }

    /// Steps over one value without building it.
    fn skip(&mut self) -> Option<()> {
        match self.byte()? {
            NULL | FALSE | TRUE => {}
            INT => {
                self.varint()?;
            }
            FLOAT => self.advance(8)?,
            STRING => {
                let len = usize::try_from(self.varint()?).ok()?;
                self.advance(len)?;
            }
            ARRAY => {
                for _ in 0..self.varint()? {
                    self.skip()?;
                }
            }
            OBJECT => {
                for _ in 0..self.varint()? {
                    let k = self.varint()?;
                    if k & 1 == 0 {
                        self.advance(usize::try_from(k >> 1).ok()?)?;
                    }
                    self.skip()?;
                }
            }
            _ => return None,
        }
        Some(())
    }

    fn advance(&mut self, len: usize) -> Option<()> {
        self.at = self.at.checked_add(len).filter(|&e| e <= self.buf.len())?;
        Some(())
    }

    fn val(&mut self) -> Option<Val> {
        Some(match self.byte()? {
            NULL => Val::Null,
            FALSE => Val::Bool(false),
            TRUE => Val::Bool(true),
            INT => {
                let z = self.varint()?;
                let i = ((z >> 1) as i64) ^ -((z & 1) as i64);
                Val::Num(Num::Int(isize::try_from(i).ok()?))
            }
            FLOAT => {
                let raw = self.slice(8)?;
                let f = f64::from_le_bytes(raw.as_ref().try_into().ok()?);
                Val::Num(float(f))
            }
            STRING => {
                let len = usize::try_from(self.varint()?).ok()?;
                Val::TStr(Box::new(self.slice(len)?))
            }
            ARRAY => {
                let n = usize::try_from(self.varint()?).ok()?;
                let mut items = Vec::with_capacity(n.min(self.buf.len()));
                for _ in 0..n {
                    items.push(self.val()?);
                }
                Val::Arr(Rc::new(items))
            }
            OBJECT => {
                let n = usize::try_from(self.varint()?).ok()?;
                let mut map = Map::default();
                map.reserve(n.min(self.buf.len()));
                for _ in 0..n {
                    let k = self.key()?;
                    let v = self.val()?;
                    map.insert(k, v);
                }
                Val::obj(map)
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PROJECTION: Keep = Keep::Fields(&[
        ("kind", Keep::All),
        ("meta", Keep::Without(&["secret"])),
        ("items", Keep::Each(&Keep::Fields(&[("a", Keep::All)]))),
        ("spec", Keep::Fields(&[("x", Keep::All)])),
        ("list", Keep::Each(&Keep::All)),
    ]);

    #[test]
    fn round_trips_like_from_json() {
        let doc = json!({
            "z": [1, 2.0, 2.5, -7, null, true, false, "s", {"b": {}, "a": []}],
            "a": {"nested": {"deep": "é✓"}, "n": 9007199254740993_u64},
            "big": -9_000_000_000_i64,
            "": ""
        });
        let packed = Packed::pack(&doc, &Keep::All, Limits::default()).unwrap();
        let direct = super::super::from_json(&doc, Limits::default()).unwrap();
        assert_eq!(packed.to_json(), super::super::to_json(&direct));
        assert!(super::super::identical(&packed.to_val(), &direct));
        assert!(packed.len() < doc.to_string().len());
    }

    #[test]
    fn projects_while_packing() {
        let doc = json!({
            "kind": "Pod",
            "drop": {"everything": 1},
            "meta": {"name": "p", "secret": "x"},
            "items": [{"a": 1, "b": 2}, 3, [4]],
            "spec": "not an object",
            "list": "not an array"
        });
        let packed = Packed::pack(&doc, &PROJECTION, Limits::default()).unwrap();
        assert_eq!(
            packed.to_json(),
            json!({"kind": "Pod", "meta": {"name": "p"}, "items": [{"a": 1}, 3, [4]]})
        );
    }

    #[test]
    fn equal_documents_pack_equal_and_keys_learned_once() {
        let a = json!({"unusual-key-for-this-test": "v", "k": 1});
        let first = Packed::pack(&a, &Keep::All, Limits::default()).unwrap();
        let second = Packed::pack(&a, &Keep::All, Limits::default()).unwrap();
        // The second packing finds the key in the table and writes an id.
        assert!(second.len() < first.len());
        assert_eq!(first.to_json(), second.to_json());
        let third = Packed::pack(&a, &Keep::All, Limits::default()).unwrap();
        assert_eq!(second, third);
    }

    #[test]
    fn a_key_lookup_stops_past_the_key_and_still_finds_every_one() {
        // Keys in the table and written inline (new, long), with prefixes of each other and
        // bytes above ASCII; absent keys before, between and after them.
        let long = "k".repeat(MAX_KEY_LEN + 1);
        let mut doc = json!({"": 0, "a": 1, "ab": 2, "b": {"x": 3}, "é": 4, "zz": 5});
        doc[&long] = json!(6);
        doc["never-seen-before-key-of-this-test"] = json!(7);
        let texts = |packed: &Packed| {
            let mut found = Vec::new();
            for key in doc.as_object().unwrap().keys() {
                found.push(packed.lookup(&[key]).map(|v| super::super::to_json(&v)));
            }
            found
        };
        for packed in [
            Packed::pack(&doc, &Keep::All, Limits::default()).unwrap(),
            Packed::pack(&doc, &Keep::All, Limits::default()).unwrap(),
            Packed::pack(&json!({}), &Keep::All, Limits::default())
                .unwrap()
                .with_strings(&[("m", "x")]),
        ] {
            let want: Vec<_> = doc
                .as_object()
                .unwrap()
                .keys()
                .map(|k| packed.to_json().get(k).cloned())
                .collect();
            assert_eq!(texts(&packed), want);
            for absent in ["!", "aa", "a\0", "ac", "c", "zzz", "\u{10FFFF}", "kk"] {
                assert!(packed.lookup(&[absent]).is_none(), "{absent}");
            }
        }
        let packed = Packed::pack(&doc, &Keep::All, Limits::default()).unwrap();
        assert!(texts(&packed).iter().all(Option::is_some));
        assert!(packed.with_node(|n| n.get("b").and_then(|b| b.get("x")).is_some()));
        assert!(packed.with_node(|n| n.get("b").and_then(|b| b.get("w")).is_none()));
    }

    #[test]
    fn looks_up_paths_without_unpacking_the_rest() {
        let doc = json!({
            "a": [1, {"x": 2.5}, "s", null, true],
            "metadata": {"annotations": {"k": "v"}, "labels": {"app": "x", "n": 3}},
            "z": {"labels": 1}
        });
        let packed = Packed::pack(&doc, &Keep::All, Limits::default()).unwrap();
        let labels = packed.lookup(&["metadata", "labels"]).unwrap();
        assert_eq!(super::super::to_json(&labels), json!({"app": "x", "n": 3}));
        assert_eq!(
            super::super::to_json(&packed.lookup(&["z", "labels"]).unwrap()),
            json!(1)
        );
        assert!(packed.lookup(&["metadata", "missing"]).is_none());
        assert!(packed.lookup(&["a", "x"]).is_none(), "arrays have no keys");
        assert_eq!(super::super::to_json(&packed.lookup(&[]).unwrap()), doc);
    }

    #[test]
    fn enforces_budgets() {
        let big = json!({"x": "y".repeat(100)});
        let tight = Limits {
            max_bytes: 50,
            max_depth: 8,
        };
        assert!(matches!(
            Packed::pack(&big, &Keep::All, tight),
            Err(ConvertError::TooLarge { .. })
        ));
        let mut deep = json!(1);
        for _ in 0..20 {
            deep = json!([deep]);
        }
        let shallow = Limits {
            max_bytes: 10_000,
            max_depth: 8,
        };
        assert!(matches!(
            Packed::pack(&deep, &Keep::All, shallow),
            Err(ConvertError::TooDeep { .. })
        ));
    }

    #[test]
    fn malformed_buffers_unpack_to_null() {
        for raw in [
            vec![OBJECT, 5],
            vec![STRING, 200, 1],
            vec![99],
            vec![INT, 0xff],
        ] {
            assert!(matches!(Packed(Bytes::from(raw)).to_val(), Val::Null));
        }
        assert!(matches!(Packed::default().to_val(), Val::Null));
    }
}
