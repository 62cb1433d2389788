//! The status conditions of a Karta object, with upstream Workload Map's operator's types,
//! reasons and messages (`operator/pkg/status.go`), plus kartograf's schema drift.
//!
//! - `KartaValidated`: the validator's verdict (`ValidationSucceeded`, or `ValidationFailed`
//!   with its first errors, bounded).
//! - `CRDExists`: the cluster serves the root kind at its version (`CRDFound` /
//!   `CRDNotFound`; built-in kinds count, as upstream's).
//! - `Ready`: both of the above (`Ready` / `NotReady`).
//! - `SchemaInSync` (kartograf's): every field path the definition reads exists in the
//!   served CRD's schema (`SchemaMatches`), or not (`SchemaDrift`, the findings), or it
//!   could not be checked (`Unknown`, `NotChecked`).
//!
//! [`merge`] follows `meta.SetStatusCondition`: `lastTransitionTime` moves only when a
//! condition's status changes, and conditions of other types are kept.

use serde::{Deserialize, Serialize};

/// The spec passed the validator.
pub const KARTA_VALIDATED: &str = "KartaValidated";
/// A CRD (or a built-in API) serves the root kind.
pub const CRD_EXISTS: &str = "CRDExists";
/// Validated and served.
pub const READY: &str = "Ready";
/// The definition's field paths exist in the served schema (kartograf's).
pub const SCHEMA_IN_SYNC: &str = "SchemaInSync";

/// A `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `status` last changed (RFC 3339, seconds).
    #[serde(default)]
    pub last_transition_time: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
}

/// What the conditions are computed from.
#[derive(Debug, Clone)]
pub struct Facts {
    /// `metadata.generation`.
    pub generation: i64,
    /// `Ok`, or the validator's errors.
    pub validation: Result<(), ValidationFailed>,
    /// Whether the cluster serves the root kind (`None`: the object names no root kind).
    pub served: Option<bool>,
    /// The root kind, for messages.
    pub root: Option<crate::definition::GroupVersionKind>,
    /// Schema drift findings (`None`: not checked; empty: it fits).
    pub drift: Option<Vec<String>>,
}

/// The validator's errors on a Karta object; the message is their bounded summary
/// ([`super::summarize`]), the `KartaValidated` condition's message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", validation_message(.errors))]
pub struct ValidationFailed {
    /// The errors (empty: the object defines no definition, without a specific error).
    pub errors: Vec<crate::definition::DefinitionError>,
}

fn validation_message(errors: &[crate::definition::DefinitionError]) -> String {
    let summary = super::summarize(errors);
    if summary.is_empty() {
        "Karta validation failed".to_owned()
    } else {
        summary
    }
}

fn condition(type_: &str, ok: bool, reasons: (&str, &str), message: String, g: i64) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        observed_generation: Some(g),
        last_transition_time: String::new(),
        reason: if ok { reasons.0 } else { reasons.1 }.to_owned(),
        message: if ok { String::new() } else { message },
    }
}

/// The conditions `facts` call for (without transition times).
pub fn desired(facts: &Facts) -> Vec<Condition> {
    let g = facts.generation;
    let validated = facts.validation.is_ok();
    let validation_message = match &facts.validation {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    };
    let served = facts.served == Some(true);
    let served_message = match (&facts.root, facts.served) {
        (Some(g), Some(_)) => format!(
            "CRD for {}/{} not found or does not serve version {}",
            g.group, g.kind, g.version
        ),
        _ => "CustomResourceDefinition for the root component GVK does not exist in the cluster or does not serve the referenced version".to_owned(),
    };
    let mut out = vec![
        condition(
            KARTA_VALIDATED,
            validated,
            ("ValidationSucceeded", "ValidationFailed"),
            validation_message,
            g,
        ),
        condition(
            CRD_EXISTS,
            served,
            ("CRDFound", "CRDNotFound"),
            served_message,
            g,
        ),
        condition(
            READY,
            validated && served,
            ("Ready", "NotReady"),
            "Validated and CRDExists must both be True".to_owned(),
            g,
        ),
    ];
    let schema = match &facts.drift {
        None => Condition {
            type_: SCHEMA_IN_SYNC.to_owned(),
            status: "Unknown".to_owned(),
            observed_generation: Some(g),
            last_transition_time: String::new(),
            reason: "NotChecked".to_owned(),
            message: "no schema of the root kind was read (the CRD is not served, or the definition is invalid)".to_owned(),
        },
        Some(findings) => {
            let mut message = findings
                .iter()
                .take(super::MESSAGE_ERRORS)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n");
            if findings.len() > super::MESSAGE_ERRORS {
                message.push_str(&format!(
                    "\n… and {} more finding(s); `kartograf check --cluster` lists them all",
                    findings.len() - super::MESSAGE_ERRORS
                ));
            }
            crate::excerpt::bound(&mut message, super::MESSAGE_BYTES);
            condition(
                SCHEMA_IN_SYNC,
                findings.is_empty(),
                ("SchemaMatches", "SchemaDrift"),
                message,
                g,
            )
        }
    };
    out.push(schema);
    out
}

/// The conditions after setting `desired` on `current` at `now`, or `None` when nothing
/// would change (no write is needed).
pub fn merge(current: &[Condition], desired: Vec<Condition>, now: &str) -> Option<Vec<Condition>> {
    let mut out: Vec<Condition> = current.to_vec();
    let mut changed = false;
    for mut want in desired {
        match out.iter_mut().find(|c| c.type_ == want.type_) {
            Some(have) => {
                let same = have.status == want.status
                    && have.reason == want.reason
                    && have.message == want.message
                    && have.observed_generation == want.observed_generation;
                if same && !have.last_transition_time.is_empty() {
                    continue;
                }
                want.last_transition_time =
                    if have.status == want.status && !have.last_transition_time.is_empty() {
                        have.last_transition_time.clone()
                    } else {
                        now.to_owned()
                    };
                *have = want;
                changed = true;
            }
            None => {
                want.last_transition_time = now.to_owned();
                out.push(want);
                changed = true;
            }
        }
    }
    changed.then_some(out)
}

/// The current time as a condition writes it (RFC 3339, whole seconds, UTC).
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            generation: 3,
            validation: Ok(()),
            served: Some(true),
            root: Some(crate::definition::GroupVersionKind::new(
                "ray.io", "v1", "RayJob",
            )),
            drift: Some(Vec::new()),
        }
    }

    #[test]
    fn ready_needs_validated_and_served() {
        let all = desired(&facts());
        assert!(all.iter().all(|c| c.status == "True"), "{all:?}");
        let mut f = facts();
        f.served = Some(false);
        let all = desired(&f);
        let crd = all.iter().find(|c| c.type_ == CRD_EXISTS).unwrap();
        assert_eq!(crd.reason, "CRDNotFound");
        assert_eq!(
            crd.message,
            "CRD for ray.io/RayJob not found or does not serve version v1"
        );
        let ready = all.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NotReady")
        );
    }

    #[test]
    fn a_failed_validation_says_why_in_its_condition() {
        let message = |errors: Vec<crate::definition::DefinitionError>| {
            let mut f = facts();
            f.validation = Err(ValidationFailed { errors });
            let all = desired(&f);
            let c = all.iter().find(|c| c.type_ == KARTA_VALIDATED).unwrap();
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", "ValidationFailed")
            );
            c.message.clone()
        };
        assert_eq!(message(Vec::new()), "Karta validation failed");
        let e = crate::definition::DefinitionError::new("k", "spec.x", None, "bad x");
        assert_eq!(message(vec![e.clone()]), super::super::summarize(&[e]));
    }

    #[test]
    fn merge_writes_only_changes_and_keeps_transition_times() {
        let first = merge(&[], desired(&facts()), "t1").unwrap();
        assert!(merge(&first, desired(&facts()), "t2").is_none());
        let mut f = facts();
        f.drift = Some(vec!["`.spec.x`: no field".to_owned()]);
        let second = merge(&first, desired(&f), "t2").unwrap();
        let schema = second.iter().find(|c| c.type_ == SCHEMA_IN_SYNC).unwrap();
        assert_eq!(
            (schema.status.as_str(), schema.last_transition_time.as_str()),
            ("False", "t2")
        );
        let ready = second.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(ready.last_transition_time, "t1");
        f.generation = 4;
        let third = merge(&second, desired(&f), "t3").unwrap();
        let ready = third.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (
                ready.observed_generation,
                ready.last_transition_time.as_str()
            ),
            (Some(4), "t1")
        );
    }
}
