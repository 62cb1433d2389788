//! Sharing equal subtrees and short strings between converted objects.
//!
//! Every array and object produced by conversion is looked up by its structural hash in a
//! process-wide table of weak references; an equal live one is returned instead (jq values
//! are immutable, so sharing is invisible to evaluation). Entries die with their last user
//! and are purged as the table grows. Short strings (keys, label values, phases) come from a
//! bounded table of strong references that is emptied when full.

use jaq_json::{Map, Rc, Val};
use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::{LazyLock, Mutex, MutexGuard, Weak};

/// Strings up to this length are interned.
const MAX_STRING: usize = 64;
/// The string table is emptied when it reaches this many entries.
const MAX_STRINGS: usize = 1 << 16;

/// Hash of a leaf: a type tag and its bytes.
pub fn hash_leaf(tag: u8, bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    h.write_u8(tag);
    h.write(bytes);
    h.finish()
}

/// Incremental hash of an array or object from its children's hashes.
pub struct Hash(std::hash::DefaultHasher);

impl Hash {
    /// Starts a hash for a node of type `tag`.
    pub fn new(tag: u8) -> Hash {
        let mut h = std::hash::DefaultHasher::new();
        h.write_u8(tag);
        Hash(h)
    }

    /// Adds a child's hash.
    pub fn add(&mut self, child: u64) {
        self.0.write_u64(child);
    }

    /// The node's hash.
    pub fn finish(self) -> u64 {
        self.0.finish()
    }
}

enum Node {
    Arr(Weak<Vec<Val>>),
    Obj(Weak<Map<Val, Val>>),
}

impl Node {
    fn alive(&self) -> bool {
        match self {
            Node::Arr(w) => w.strong_count() > 0,
            Node::Obj(w) => w.strong_count() > 0,
        }
    }
}

#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Vec<Node>>,
    /// Purge dead node entries when `nodes` grows beyond this.
    purge_at: usize,
    strings: HashMap<Box<str>, Val>,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);

/// The locked sharing table, held for one conversion.
pub struct Interner(MutexGuard<'static, Table>);

impl Interner {
    /// Locks the process-wide table.
    pub fn lock() -> Interner {
        // The table holds no invariant a panic could break.
        Interner(TABLE.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A string value, shared with equal short strings.
    pub fn string(&mut self, s: &str) -> Val {
        if s.len() > MAX_STRING {
            return super::string(s);
        }
        if let Some(v) = self.0.strings.get(s) {
            return v.clone();
        }
        if self.0.strings.len() >= MAX_STRINGS {
            self.0.strings.clear();
        }
        let v = super::string(s);
        self.0.strings.insert(s.into(), v.clone());
        v
    }

    /// `val` (an array or object with structural hash `hash`), or an equal live one.
    pub fn share(&mut self, val: Val, hash: u64) -> Val {
        let table = &mut *self.0;
        let bucket = table.nodes.entry(hash).or_default();
        for node in bucket.iter() {
            let found = match (node, &val) {
                (Node::Arr(w), Val::Arr(a)) => w.upgrade().filter(|o| same_arr(o, a)).map(Val::Arr),
                (Node::Obj(w), Val::Obj(m)) => w.upgrade().filter(|o| same_map(o, m)).map(Val::Obj),
                _ => None,
            };
            if let Some(shared) = found {
                return shared;
            }
        }
        match &val {
            Val::Arr(a) => bucket.push(Node::Arr(Rc::downgrade(a))),
            Val::Obj(m) => bucket.push(Node::Obj(Rc::downgrade(m))),
            _ => return val,
        }
        if table.nodes.len() > table.purge_at {
            table.nodes.retain(|_, b| {
                b.retain(Node::alive);
                !b.is_empty()
            });
            table.purge_at = (2 * table.nodes.len()).max(4096);
        }
        val
    }
}

/// Strict structural equality: same variants, same numbers, same key order.
pub(super) fn same(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Num(x), Val::Num(y)) => match (x, y) {
            (jaq_json::Num::Int(x), jaq_json::Num::Int(y)) => x == y,
            (jaq_json::Num::Float(x), jaq_json::Num::Float(y)) => x.to_bits() == y.to_bits(),
            _ => false,
        },
        (Val::TStr(x), Val::TStr(y)) | (Val::BStr(x), Val::BStr(y)) => x == y,
        (Val::Arr(x), Val::Arr(y)) => same_arr(x, y),
        (Val::Obj(x), Val::Obj(y)) => same_map(x, y),
        _ => false,
    }
}

fn same_arr(a: &Rc<Vec<Val>>, b: &Rc<Vec<Val>>) -> bool {
    Rc::ptr_eq(a, b) || (a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| same(x, y)))
}

fn same_map(a: &Rc<Map<Val, Val>>, b: &Rc<Map<Val, Val>>) -> bool {
    Rc::ptr_eq(a, b)
        || (a.len() == b.len()
            && a.iter()
                .zip(b.iter())
                .all(|((ka, va), (kb, vb))| same(ka, kb) && same(va, vb)))
}
