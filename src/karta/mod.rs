//! Karta objects as cluster citizens, as upstream Workload Map's operator treats them: the
//! index labels (`run.ai/karta-group`, `run.ai/karta-version`, `run.ai/karta-kind`), the
//! validator's verdict on one object, and the status conditions ([`conditions`]: pure rules)
//! that one Lease-elected replica writes (the controller, with its watch, Lease, backoff and
//! status writes, is a Kubernetes source: `src/source/kube/karta/`). The admission
//! webhooks (`src/webhook/admission/`) answer from the same functions. See
//! `docs/karta-status.md`.

pub mod conditions;

use crate::definition::{Definition, DefinitionError, GroupVersionKind, catalog, load};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Label holding the root component's API group (empty for the core group).
pub const LABEL_GROUP: &str = "run.ai/karta-group";
/// Label holding the root component's API version.
pub const LABEL_VERSION: &str = "run.ai/karta-version";
/// Label holding the root component's kind.
pub const LABEL_KIND: &str = "run.ai/karta-kind";

/// Largest Karta object (JSON bytes) the validator reads: etcd's default request limit
/// (1.5 MiB); a larger object cannot be stored.
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024 / 2;

/// Errors quoted in one verdict message (the rest are counted).
pub const MESSAGE_ERRORS: usize = 5;

/// Bytes of one verdict message (a condition message, an admission denial).
pub const MESSAGE_BYTES: usize = 2048;

/// The root component's kind as written (`spec.structureDefinition.rootComponent.kind`),
/// read from the JSON so that an object the validator refuses still has one; `None` when
/// the kind is absent or empty.
pub fn root_kind(object: &Json) -> Option<GroupVersionKind> {
    let kind = object.pointer("/spec/structureDefinition/rootComponent/kind")?;
    let field = |f: &str| kind.get(f).and_then(Json::as_str).unwrap_or_default();
    let gvk = GroupVersionKind::new(field("group"), field("version"), field("kind"));
    (!gvk.kind.is_empty()).then_some(gvk)
}

/// The three index labels of a root kind, as upstream's operator stamps them; `None` when
/// a value could not be a label value (the validator refuses such a kind).
pub fn desired_labels(root: &GroupVersionKind) -> Option<BTreeMap<&'static str, String>> {
    let labels = BTreeMap::from([
        (LABEL_GROUP, root.group.clone()),
        (LABEL_VERSION, root.version.clone()),
        (LABEL_KIND, root.kind.clone()),
    ]);
    labels.values().all(|v| is_label_value(v)).then_some(labels)
}

/// A Kubernetes label value: empty, or at most 63 characters of `[A-Za-z0-9._-]` starting
/// and ending alphanumeric.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 63 && crate::model::names::is_qualified_name_part(value))
}

/// The labels among [`desired_labels`] that `object` lacks or holds with another value.
pub fn missing_labels(object: &Json) -> BTreeMap<&'static str, String> {
    let Some(desired) = root_kind(object).as_ref().and_then(desired_labels) else {
        return BTreeMap::new();
    };
    let labels = object.pointer("/metadata/labels");
    desired
        .into_iter()
        .filter(|(k, v)| labels.and_then(|l| l.get(*k)).and_then(Json::as_str) != Some(v.as_str()))
        .collect()
}

/// The origin label of a Karta object (as the cluster definition layer names it).
pub fn origin(name: &str) -> String {
    format!("cluster:{name}")
}

/// Validates one Karta object exactly as the definition loaders do (`kartograf check`,
/// `--definitions`, the cluster layer): parse, then compile. Objects above
/// [`MAX_OBJECT_BYTES`] are refused before they are read.
pub fn validate(object: &Json, name: &str) -> Result<Arc<Definition>, Vec<DefinitionError>> {
    let origin = origin(name);
    let size = serde_json::to_vec(object).map_or(usize::MAX, |v| v.len());
    if size > MAX_OBJECT_BYTES {
        return Err(vec![DefinitionError::new(
            &origin,
            "",
            None,
            format!("the object is {size} bytes; a Karta holds at most {MAX_OBJECT_BYTES}"),
        )]);
    }
    let parsed = load::parse_document(object, &origin, "").map_err(|e| vec![e])?;
    // The verdict does not depend on the loader's options (the phase precedence only picks
    // among matched statuses when resolving).
    let (mut defs, errors) = catalog::compile_all(vec![parsed], &origin, Default::default());
    match defs.pop() {
        Some(def) if errors.is_empty() => Ok(def),
        _ => Err(errors),
    }
}

/// One error as a verdict quotes it: `path: message (expression: `…`)`, each part bounded.
pub fn describe(e: &DefinitionError) -> String {
    use crate::excerpt::{TEXT_BYTES, excerpt};
    let mut out = String::new();
    if !e.path.is_empty() {
        out.push_str(&excerpt(&e.path, TEXT_BYTES / 8));
        out.push_str(": ");
    }
    out.push_str(&excerpt(&e.message, TEXT_BYTES / 8));
    if let Some(x) = &e.expression {
        out.push_str(" (expression: `");
        out.push_str(&excerpt(x, TEXT_BYTES / 16));
        out.push_str("`)");
    }
    out
}

/// The first [`MESSAGE_ERRORS`] errors, one per line, at most [`MESSAGE_BYTES`] in all,
/// with how many were left out.
pub fn summarize(errors: &[DefinitionError]) -> String {
    let mut out = String::new();
    let mut quoted = 0;
    for e in errors.iter().take(MESSAGE_ERRORS) {
        let line = describe(e);
        if !out.is_empty() && out.len() + line.len() + 1 > MESSAGE_BYTES - 96 {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&line);
        quoted += 1;
    }
    if quoted < errors.len() {
        out.push_str(&format!(
            "\n… and {} more error(s); `kartograf check` lists them all",
            errors.len() - quoted
        ));
    }
    crate::excerpt::bound(&mut out, MESSAGE_BYTES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_follow_the_root_kind_and_skip_impossible_values() {
        let obj = json!({"metadata": {"labels": {"run.ai/karta-kind": "Old"}},
            "spec": {"structureDefinition": {"rootComponent": {"kind": {"group": "ray.io", "version": "v1", "kind": "RayJob"}}}}});
        let missing = missing_labels(&obj);
        assert_eq!(missing.len(), 3);
        assert_eq!(missing[LABEL_KIND], "RayJob");
        let bad = GroupVersionKind::new("x", "v1", "Ray Job");
        assert!(desired_labels(&bad).is_none());
        assert!(missing_labels(&json!({"spec": {}})).is_empty());
    }

    #[test]
    fn a_summary_is_bounded_and_counts_what_it_leaves_out() {
        let errors: Vec<DefinitionError> = (0..100)
            .map(|i| {
                DefinitionError::new(
                    "s",
                    &format!("p{i}"),
                    Some(&"x".repeat(10_000)),
                    "m".repeat(10_000),
                )
            })
            .collect();
        let s = summarize(&errors);
        assert!(s.len() <= MESSAGE_BYTES, "{}", s.len());
        assert!(s.contains("more error(s)"), "{s}");
    }
}
