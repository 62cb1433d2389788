//! Locating by content: where an expression that is no path got its output from. Used for
//! pod templates and pod specs whose read expression computes (`as` projections with
//! computed indexes, `getpath`, `reduce`): an output found unchanged in the object is
//! written there; a constructed template is written where its `metadata` or `spec` was
//! found. Every write is then checked by reading the object again (see `super::verify`).

use super::pathmode::{Loc, Target};
use crate::definition::assign::Step;
use serde_json::Value as Json;

/// Most object nodes inspected in one object.
const MAX_NODES: usize = 200_000;

/// One container of the document: its parent's index in the arena and its step from there
/// (locations are built only for nodes that match).
struct Node<'a> {
    parent: Option<usize>,
    key: Option<&'a str>,
    index: usize,
    value: &'a Json,
}

/// Every container of `doc` outside the root's `metadata` and `status`, in document order,
/// as an arena (at most [`MAX_NODES`] object nodes).
fn nodes(doc: &Json) -> Vec<Node<'_>> {
    let mut out: Vec<Node<'_>> = Vec::new();
    let mut objects = 0;
    // (parent, key, index, value) still to visit.
    let mut stack: Vec<(Option<usize>, Option<&str>, usize, &Json)> = Vec::new();
    if let Json::Object(m) = doc {
        for (k, v) in m.iter().rev() {
            if k != "metadata" && k != "status" {
                stack.push((None, Some(k.as_str()), 0, v));
            }
        }
    }
    while let Some((parent, key, index, v)) = stack.pop() {
        if objects >= MAX_NODES {
            break;
        }
        let at = out.len();
        match v {
            Json::Object(m) => {
                objects += 1;
                out.push(Node {
                    parent,
                    key,
                    index,
                    value: v,
                });
                for (k, c) in m.iter().rev() {
                    stack.push((Some(at), Some(k.as_str()), 0, c));
                }
            }
            Json::Array(items) => {
                out.push(Node {
                    parent,
                    key,
                    index,
                    value: v,
                });
                for (i, c) in items.iter().enumerate().rev() {
                    stack.push((Some(at), None, i, c));
                }
            }
            _ => {}
        }
    }
    out
}

/// The location of arena node `at`.
fn loc_of(all: &[Node<'_>], mut at: usize) -> Loc {
    let mut loc = Vec::new();
    loop {
        let n = &all[at];
        loc.push(match n.key {
            Some(k) => Step::Key(k.to_owned()),
            None => Step::Index(n.index),
        });
        match n.parent {
            Some(p) => at = p,
            None => break,
        }
    }
    loc.reverse();
    loc
}

/// For each output (objects; `None` for anything else), where it sits in `doc`: the n-th
/// output equal to an earlier one takes the n-th equal node. `None` when not found.
pub fn locate(doc: &Json, outputs: &[Option<&Json>]) -> Vec<Option<Target>> {
    let all = nodes(doc);
    let find = |v: &Json, skip: usize| -> Option<Loc> {
        let Json::Object(m) = v else { return None };
        if m.is_empty() {
            return None;
        }
        all.iter()
            .enumerate()
            .filter(|(_, n)| n.value.is_object() && n.value == v)
            .nth(skip)
            .map(|(i, _)| loc_of(&all, i))
    };
    let mut out = Vec::with_capacity(outputs.len());
    for (i, o) in outputs.iter().enumerate() {
        let Some(v) = o else {
            out.push(None);
            continue;
        };
        let earlier = outputs[..i].iter().filter(|p| **p == Some(*v)).count();
        if let Some(loc) = find(v, earlier) {
            out.push(Some(Target::At(loc)));
            continue;
        }
        // A constructed template: where its metadata or spec is.
        let mut parent = None;
        for member in ["spec", "metadata"] {
            if let Some(child) = v.get(member)
                && let Some(mut loc) = find(child, earlier)
                && loc.last() == Some(&Step::Key(member.to_owned()))
            {
                loc.pop();
                parent = Some(Target::At(loc));
                break;
            }
        }
        out.push(parent);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outputs_are_found_by_content_in_order() {
        let t = json!({"spec": {"containers": [{"name": "a"}]}});
        let doc = json!({"spec": {"a": {"template": t}, "b": {"template": t}},
                         "status": {"template": t}});
        let got = locate(&doc, &[Some(&t), Some(&t)]);
        let at = |k: &str| {
            Some(Target::At(vec![
                Step::Key("spec".into()),
                Step::Key(k.into()),
                Step::Key("template".into()),
            ]))
        };
        assert_eq!(got, vec![at("a"), at("b")]);
        // A constructed template whose spec is found.
        let built = json!({"metadata": {}, "spec": {"containers": [{"name": "a"}]}});
        assert!(locate(&doc, &[Some(&built)])[0].is_some());
        assert_eq!(locate(&doc, &[Some(&json!({"x": 1}))]), vec![None]);
    }
}
