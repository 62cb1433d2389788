//! RFC 6902 operations, written one at a time onto a working copy of the object so that
//! each later write sees what earlier ones created; and the RFC 7386 merge patch of the
//! result.

use super::pathmode::{Loc, get};
use crate::definition::assign::Step;
use crate::expr::{Limits, Val, value};
use jaq_json::Rc;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// One RFC 6902 operation (only the kinds the engine emits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// Fails the whole patch unless the value at `path` equals `value`.
    Test {
        /// JSON pointer.
        path: String,
        /// Expected value.
        value: Json,
    },
    /// Adds a member (or appends to an array with `/-`).
    Add {
        /// JSON pointer.
        path: String,
        /// The value.
        value: Json,
    },
    /// Replaces an existing value.
    Replace {
        /// JSON pointer.
        path: String,
        /// The value.
        value: Json,
    },
}

impl Op {
    /// The JSON pointer the operation acts on.
    pub fn path(&self) -> &str {
        match self {
            Op::Test { path, .. } | Op::Add { path, .. } | Op::Replace { path, .. } => path,
        }
    }
}

/// The JSON pointer of a location.
pub fn pointer(loc: &[Step]) -> String {
    let mut s = String::new();
    for step in loc {
        s.push('/');
        match step {
            Step::Key(k) => {
                for c in k.chars() {
                    match c {
                        '~' => s.push_str("~0"),
                        '/' => s.push_str("~1"),
                        c => s.push(c),
                    }
                }
            }
            Step::Index(i) => s.push_str(&i.to_string()),
        }
    }
    s
}

/// Why a value cannot be written at a location.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Something on the way is neither an object nor absent (e.g. a string).
    #[error("`{at}` is {found}, not an object")]
    NotAnObject {
        /// JSON pointer of the value in the way.
        at: String,
        /// Its JSON type.
        found: &'static str,
    },
    /// An array element that does not exist (only objects are created).
    #[error("`{at}` is no element of an existing array")]
    NoElement {
        /// JSON pointer of the element.
        at: String,
    },
}

/// Where one operation wrote in the working copy (one per operation, in order; the value is
/// the operation's): the read-back replays these on the original's jq value instead of
/// converting the whole patched object again.
#[derive(Debug, Clone)]
pub(crate) enum Edit {
    /// The member or element at this location became the value.
    Put(Loc),
    /// The value was appended to the array at this location.
    Push(Loc),
}

/// The working copy and the operations written so far.
pub(crate) struct Writer {
    pub(crate) doc: Json,
    pub(crate) ops: Vec<Op>,
    /// Where each operation wrote, for replaying on a jq value (see [`Edit`]).
    pub(crate) edits: Vec<Edit>,
    /// Where each write goes in a merge patch (see [`merge_root`]).
    pub(crate) roots: Vec<Loc>,
    /// About how many bytes the operations take as JSON.
    pub(crate) bytes: usize,
}

/// About how many bytes `v` takes as JSON (strings without escapes).
fn size(v: &Json) -> usize {
    match v {
        Json::Null | Json::Bool(_) => 5,
        Json::Number(_) => 12,
        Json::String(s) => s.len() + 2,
        Json::Array(a) => 2 + a.iter().map(|x| size(x) + 1).sum::<usize>(),
        Json::Object(m) => 2 + m.iter().map(|(k, x)| k.len() + 4 + size(x)).sum::<usize>(),
    }
}

fn mut_at<'a>(doc: &'a mut Json, loc: &[Step]) -> Option<&'a mut Json> {
    let mut cur = doc;
    for step in loc {
        cur = match step {
            Step::Key(k) => cur.as_object_mut()?.get_mut(k)?,
            Step::Index(i) => cur.as_array_mut()?.get_mut(*i)?,
        };
    }
    Some(cur)
}

impl Writer {
    pub(crate) fn new(doc: Json) -> Writer {
        Writer {
            doc,
            ops: Vec::new(),
            edits: Vec::new(),
            roots: Vec::new(),
            bytes: 0,
        }
    }

    /// Makes the value at `loc` equal `value`, creating missing objects on the way; writes
    /// nothing when it already is.
    pub(crate) fn set(&mut self, loc: &Loc, value: Json) -> Result<(), WriteError> {
        if get(&self.doc, loc) == Some(&value) {
            return Ok(());
        }
        // The deepest ancestor that exists as a container.
        let mut k = 0;
        while k < loc.len() {
            match get(&self.doc, &loc[..=k]) {
                Some(Json::Null) | None => break,
                Some(Json::Object(_) | Json::Array(_)) => k += 1,
                Some(_) if k + 1 == loc.len() => break,
                Some(other) => {
                    return Err(WriteError::NotAnObject {
                        at: pointer(&loc[..=k]),
                        found: crate::definition::model::json_type(other),
                    });
                }
            }
        }
        if loc.is_empty() {
            return Err(WriteError::NoElement { at: String::new() });
        }
        // A container at the final location is replaced whole.
        let k = k.min(loc.len() - 1);
        // loc[..k] exists as a container; loc[k] is absent, null, or the final value.
        let mut nested = value;
        for step in loc[k + 1..].iter().rev() {
            match step {
                Step::Key(key) => {
                    let mut m = serde_json::Map::new();
                    m.insert(key.clone(), nested);
                    nested = Json::Object(m);
                }
                Step::Index(_) => {
                    return Err(WriteError::NoElement {
                        at: pointer(&loc[..=k + 1]),
                    });
                }
            }
        }
        let at = &loc[..=k];
        let exists = get(&self.doc, at).is_some();
        let path = pointer(at);
        let Some(parent) = mut_at(&mut self.doc, &loc[..k]) else {
            return Err(WriteError::NoElement { at: path });
        };
        match (&loc[k], parent) {
            (Step::Key(key), Json::Object(m)) => {
                m.insert(key.clone(), nested.clone());
            }
            (Step::Index(i), Json::Array(a)) if *i < a.len() => a[*i] = nested.clone(),
            (Step::Key(_), Json::Null) | (Step::Index(_), _) | (Step::Key(_), _) => {
                return Err(WriteError::NoElement { at: path });
            }
        }
        self.edits.push(Edit::Put(at.to_vec()));
        self.roots.push(merge_root(loc));
        self.bytes += path.len() + size(&nested) + 32;
        self.ops.push(if exists {
            Op::Replace {
                path,
                value: nested,
            }
        } else {
            Op::Add {
                path,
                value: nested,
            }
        });
        Ok(())
    }

    /// Appends `item` to the array at `loc` (created when absent) unless an equal item is
    /// there.
    pub(crate) fn append(&mut self, loc: &Loc, item: Json) -> Result<(), WriteError> {
        match get(&self.doc, loc) {
            Some(Json::Array(items)) => {
                if items.contains(&item) {
                    return Ok(());
                }
                let path = format!("{}/-", pointer(loc));
                if let Some(Json::Array(items)) = mut_at(&mut self.doc, loc) {
                    items.push(item.clone());
                }
                self.edits.push(Edit::Push(loc.clone()));
                self.roots.push(merge_root(loc));
                self.bytes += path.len() + size(&item) + 32;
                self.ops.push(Op::Add { path, value: item });
                Ok(())
            }
            None | Some(Json::Null) => self.set(loc, Json::Array(vec![item])),
            Some(other) => Err(WriteError::NotAnObject {
                at: pointer(loc),
                found: crate::definition::model::json_type(other),
            }),
        }
    }
}

/// `original` (a jq value of the object the writer started from) with `ops` replayed where
/// `edits` say they wrote: equal to converting the writer's document, for the cost of the
/// paths written. Copies only the containers on those paths (the rest is shared); a new
/// member goes where conversion puts it (keys in byte order). `None` when an edit does not
/// fit the value (it cannot happen for edits of the same object; the caller then converts
/// the document).
pub(crate) fn replay(original: &Val, ops: &[Op], edits: &[Edit]) -> Option<Val> {
    if ops.len() != edits.len() {
        return None;
    }
    let mut root = original.clone();
    for (op, edit) in ops.iter().zip(edits) {
        let (Op::Add { value, .. } | Op::Replace { value, .. }) = op else {
            return None;
        };
        let value = value::from_json(value, Limits::default()).ok()?;
        match edit {
            Edit::Put(at) => {
                let (step, parent) = at.split_last()?;
                match (step, container(&mut root, parent)?) {
                    (Step::Key(key), Val::Obj(m)) => {
                        let m = Rc::make_mut(m);
                        let key_val = value::string(key);
                        if let Some(slot) = m.get_mut(&key_val) {
                            *slot = value;
                        } else {
                            let at = m
                                .binary_search_by(|k, _| {
                                    value::as_bytes(k).unwrap_or_default().cmp(key.as_bytes())
                                })
                                .err()?;
                            m.shift_insert(at, key_val, value);
                        }
                    }
                    (Step::Index(i), Val::Arr(a)) => *Rc::make_mut(a).get_mut(*i)? = value,
                    _ => return None,
                }
            }
            Edit::Push(at) => match container(&mut root, at)? {
                Val::Arr(a) => Rc::make_mut(a).push(value),
                _ => return None,
            },
        }
    }
    Some(root)
}

/// The value at `loc`, made unique on the way so it can be changed.
fn container<'a>(root: &'a mut Val, loc: &[Step]) -> Option<&'a mut Val> {
    let mut cur = root;
    for step in loc {
        cur = match (step, cur) {
            (Step::Key(k), Val::Obj(m)) => Rc::make_mut(m).get_mut(&value::string(k))?,
            (Step::Index(i), Val::Arr(a)) => Rc::make_mut(a).get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// The RFC 7386 merge patch that sets every value of `patched` at `roots` (locations that
/// stop before the first array element: RFC 7386 sends arrays whole).
pub fn merge_patch(patched: &Json, roots: &[Loc]) -> Json {
    let mut out = Json::Object(serde_json::Map::new());
    for root in roots {
        let Some(value) = get(patched, root) else {
            continue;
        };
        let mut cur = &mut out;
        for (n, step) in root.iter().enumerate() {
            let Step::Key(k) = step else { break };
            let Json::Object(m) = cur else { break };
            if n + 1 == root.len() {
                m.insert(k.clone(), value.clone());
                break;
            }
            cur = m
                .entry(k.clone())
                .or_insert_with(|| Json::Object(serde_json::Map::new()));
            if !cur.is_object() {
                break;
            }
        }
    }
    out
}

/// Where a write at `loc` is sent in a merge patch: `loc` up to its first array element.
pub fn merge_root(loc: &[Step]) -> Loc {
    loc.iter()
        .take_while(|s| matches!(s, Step::Key(_)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn loc(p: &[&str]) -> Loc {
        p.iter()
            .map(|s| match s.parse::<usize>() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Key((*s).to_owned()),
            })
            .collect()
    }

    #[test]
    fn writes_create_missing_objects_once_and_skip_equal_values() {
        let mut w = Writer::new(json!({"spec": {"template": {"spec": {}}}}));
        w.set(
            &loc(&["spec", "template", "metadata", "labels", "a/b"]),
            json!("1"),
        )
        .unwrap();
        w.set(
            &loc(&["spec", "template", "metadata", "labels", "c"]),
            json!("2"),
        )
        .unwrap();
        w.set(
            &loc(&["spec", "template", "metadata", "labels", "c"]),
            json!("2"),
        )
        .unwrap();
        w.set(&loc(&["spec", "template", "spec"]), json!({}))
            .unwrap();
        assert_eq!(
            serde_json::to_value(&w.ops).unwrap(),
            json!([
                {"op": "add", "path": "/spec/template/metadata", "value": {"labels": {"a/b": "1"}}},
                {"op": "add", "path": "/spec/template/metadata/labels/c", "value": "2"},
            ])
        );
        assert_eq!(pointer(&loc(&["a~b", "c/d"])), "/a~0b/c~1d");
    }

    #[test]
    fn scalars_in_the_way_and_missing_elements_are_refused() {
        let mut w = Writer::new(json!({"spec": "x", "list": []}));
        assert!(matches!(
            w.set(&loc(&["spec", "a"]), json!(1)),
            Err(WriteError::NotAnObject { .. })
        ));
        assert!(matches!(
            w.set(&loc(&["list", "0", "a"]), json!(1)),
            Err(WriteError::NoElement { .. })
        ));
        assert!(w.ops.is_empty());
    }

    #[test]
    fn appends_only_absent_items_and_merge_patches_send_arrays_whole() {
        let before = json!({"spec": {"t": [{"key": "a"}]}});
        let mut w = Writer::new(before.clone());
        w.append(&loc(&["spec", "t"]), json!({"key": "a"})).unwrap();
        w.append(&loc(&["spec", "t"]), json!({"key": "b"})).unwrap();
        w.append(&loc(&["spec", "u"]), json!({"key": "c"})).unwrap();
        assert_eq!(w.ops.len(), 2);
        let roots = [
            merge_root(&loc(&["spec", "t", "1"])),
            merge_root(&loc(&["spec", "u"])),
        ];
        assert_eq!(
            merge_patch(&w.doc, &roots),
            json!({"spec": {"t": [{"key": "a"}, {"key": "b"}], "u": [{"key": "c"}]}})
        );
    }
}
