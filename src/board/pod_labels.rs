//! The labels a pod gets naming its workload (at admission, `POST /mutate/pods`, and from
//! the labelling pass), and Kubernetes' label value rules for them.

use crate::board::NewPod;
use std::collections::BTreeMap;

/// The root workload's kind.
pub const WORKLOAD_KIND: &str = "kartograf.io/workload-kind";
/// The root workload's name.
pub const WORKLOAD_NAME: &str = "kartograf.io/workload-name";
/// The component path (`.` between levels).
pub const COMPONENT: &str = "kartograf.io/component";
/// The component instance (one of a component's instances, when it has several).
pub const INSTANCE: &str = "kartograf.io/instance";
/// The replica key in a replicated component.
pub const REPLICA: &str = "kartograf.io/replica";

/// Longest label value Kubernetes accepts.
const MAX_VALUE: usize = 63;

/// `text` as a valid label value: characters outside `[A-Za-z0-9-_.]` become `-`, the ends
/// are trimmed to alphanumerics, and a value longer than 63 characters keeps its first 54
/// and a `-` and 8 hex digits of a hash of the whole (so distinct long names stay distinct).
pub fn label_value(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.len() <= MAX_VALUE {
        return trimmed.to_owned();
    }
    let head = trimmed[..54].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!(
        "{head}-{:08x}",
        crate::gangs::names::fnv32a(&[text.as_bytes()])
    )
}

/// The labels for a pod placed as `place` (empty: none).
pub fn for_pod(place: &NewPod) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    match place {
        NewPod::Placed {
            kind,
            name,
            component,
            instance,
            replica,
        } => {
            out.insert(WORKLOAD_KIND, label_value(kind));
            out.insert(WORKLOAD_NAME, label_value(name));
            if let Some(c) = component {
                out.insert(COMPONENT, label_value(c));
            }
            if !instance.is_empty() {
                out.insert(INSTANCE, label_value(instance));
            }
            if !replica.is_empty() {
                out.insert(REPLICA, label_value(replica));
            }
        }
        // The owner may itself be owned by a workload not cached either (an intermediate
        // owner and its root created moments ago): its root is not known, so nothing is
        // claimed.
        NewPod::OwnerNotCached(_) | NewPod::None => {}
    }
    out.retain(|_, v| !v.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::intents::check_label_value;

    #[test]
    fn every_value_is_a_valid_label_value() {
        let long = "a".repeat(253);
        let long2 = format!("{}b", "a".repeat(252));
        for text in [
            "llama-train",
            "workers.gpu",
            "a b/c",
            "-lead-",
            "ünïcode",
            long.as_str(),
            "---",
            "",
        ] {
            let v = label_value(text);
            assert!(check_label_value("value", &v).is_ok(), "{text:?} → {v:?}");
        }
        assert_eq!(label_value("llama-train"), "llama-train");
        assert_eq!(label_value(&long).len(), 63);
        assert_ne!(label_value(&long), label_value(&long2));
    }
}
