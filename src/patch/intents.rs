//! What a caller wants changed, and Kubernetes' rules for each value (checked before any
//! patch is made).

use crate::model::names::{is_dns1123_subdomain, is_qualified_name_part};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;

/// Most entries of each list or map in [`Intents`].
pub const MAX_ENTRIES: usize = 64;
/// Kubernetes' limit on the total size of an object's annotations.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// Suspend or resume, through the definition's `suspendDefinition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Apply `suspendActions`.
    Suspend,
    /// Apply `resumeActions`.
    Resume,
}

/// A toleration to add to every pod template (appended when no equal one is there).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Toleration {
    /// Taint key (empty with `Exists`: every taint).
    pub key: String,
    /// The value (`Equal`); `None` is `Exists`.
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`, or empty (every effect).
    pub effect: String,
}

impl Toleration {
    /// Parses `KEY[=VALUE]:EFFECT` (`KEY` alone or `KEY=VALUE` tolerate every effect).
    pub fn parse(text: &str) -> Result<Toleration, IntentError> {
        let (kv, effect) = match text.rsplit_once(':') {
            Some((kv, effect)) => (kv, effect),
            None => (text, ""),
        };
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (kv, None),
        };
        let t = Toleration {
            key: key.to_owned(),
            value,
            effect: effect.to_owned(),
        };
        t.check()?;
        Ok(t)
    }

    fn check(&self) -> Result<(), IntentError> {
        if self.key.is_empty() && self.value.is_some() {
            return Err(IntentError::new(
                "toleration",
                &self.key,
                "a value needs a key",
            ));
        }
        if !self.key.is_empty() {
            check_qualified_name("toleration key", &self.key)?;
        }
        if let Some(v) = &self.value {
            check_label_value("toleration value", v)?;
        }
        if !matches!(
            self.effect.as_str(),
            "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            return Err(IntentError::new(
                "toleration effect",
                &self.effect,
                "must be NoSchedule, PreferNoSchedule or NoExecute",
            ));
        }
        Ok(())
    }

    /// The toleration as Kubernetes writes it.
    pub fn to_json(&self) -> Json {
        let mut m = serde_json::Map::new();
        if !self.key.is_empty() {
            m.insert("key".into(), json!(self.key));
        }
        match &self.value {
            Some(v) => {
                m.insert("operator".into(), json!("Equal"));
                m.insert("value".into(), json!(v));
            }
            None => {
                m.insert("operator".into(), json!("Exists"));
            }
        }
        if !self.effect.is_empty() {
            m.insert("effect".into(), json!(self.effect));
        }
        Json::Object(m)
    }
}

/// Everything a patch may change. Empty fields change nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Intents {
    /// `spec.schedulerName` of every pod template.
    pub scheduler_name: Option<String>,
    /// Pod template labels, merged (existing ones are kept).
    pub labels: BTreeMap<String, String>,
    /// Pod template annotations, merged.
    pub annotations: BTreeMap<String, String>,
    /// `spec.priorityClassName` of every pod template.
    pub priority_class_name: Option<String>,
    /// `spec.nodeSelector` entries, merged.
    pub node_selector: BTreeMap<String, String>,
    /// `spec.tolerations`, each appended when no equal one is there.
    pub tolerations: Vec<Toleration>,
    /// Suspend or resume.
    pub lifecycle: Option<Lifecycle>,
    /// Replicas of components, by component name.
    pub replicas: BTreeMap<String, i32>,
}

/// An intent Kubernetes (or kartograf's bounds) would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} `{value}`: {problem}")]
pub struct IntentError {
    /// Which intent.
    pub what: String,
    /// The value (an excerpt of at most 256 bytes).
    pub value: String,
    /// Why.
    pub problem: String,
}

impl IntentError {
    fn new(what: &str, value: &str, problem: &str) -> IntentError {
        IntentError {
            what: what.to_owned(),
            value: crate::excerpt::excerpt(value, 256).into_owned(),
            problem: problem.to_owned(),
        }
    }
}

/// Kubernetes' qualified name (label and annotation keys): `[prefix/]name`, the prefix a
/// DNS-1123 subdomain, the name at most 63 characters of `[A-Za-z0-9-_.]`, alphanumeric at
/// both ends.
pub fn check_qualified_name(what: &str, key: &str) -> Result<(), IntentError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.is_empty() || !is_dns1123_subdomain(p))
    {
        return Err(IntentError::new(
            what,
            key,
            "the prefix must be a DNS-1123 subdomain (lower-case alphanumerics, `-`, `.`)",
        ));
    }
    if name.is_empty() || name.len() > 63 || !is_qualified_name_part(name) {
        return Err(IntentError::new(
            what,
            key,
            "the name must be 1-63 characters of [A-Za-z0-9-_.], alphanumeric at both ends",
        ));
    }
    Ok(())
}

/// Kubernetes' label value: empty, or at most 63 characters of `[A-Za-z0-9-_.]`,
/// alphanumeric at both ends.
pub fn check_label_value(what: &str, value: &str) -> Result<(), IntentError> {
    if value.is_empty() || (value.len() <= 63 && is_qualified_name_part(value)) {
        Ok(())
    } else {
        Err(IntentError::new(
            what,
            value,
            "must be empty or 1-63 characters of [A-Za-z0-9-_.], alphanumeric at both ends",
        ))
    }
}

fn check_subdomain(what: &str, value: &str) -> Result<(), IntentError> {
    if !value.is_empty() && is_dns1123_subdomain(value) {
        Ok(())
    } else {
        Err(IntentError::new(
            what,
            value,
            "must be a DNS-1123 subdomain (at most 253 lower-case alphanumerics, `-`, `.`)",
        ))
    }
}

/// Parses `K=V`.
pub fn parse_pair(what: &str, text: &str) -> Result<(String, String), IntentError> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| IntentError::new(what, text, "expected KEY=VALUE"))
}

impl Intents {
    /// True when nothing would change.
    pub fn is_empty(&self) -> bool {
        !self.touches_pods() && self.lifecycle.is_none() && self.replicas.is_empty()
    }

    /// True when an intent writes pod templates.
    pub fn touches_pods(&self) -> bool {
        self.scheduler_name.is_some()
            || self.priority_class_name.is_some()
            || !self.labels.is_empty()
            || !self.annotations.is_empty()
            || !self.node_selector.is_empty()
            || !self.tolerations.is_empty()
    }

    /// Checks every value against Kubernetes' rules and kartograf's bounds.
    pub fn validate(&self) -> Result<(), IntentError> {
        let count = |what: &str, n: usize| {
            if n > MAX_ENTRIES {
                Err(IntentError::new(
                    what,
                    &n.to_string(),
                    &format!("at most {MAX_ENTRIES} entries"),
                ))
            } else {
                Ok(())
            }
        };
        count("labels", self.labels.len())?;
        count("annotations", self.annotations.len())?;
        count("node selector", self.node_selector.len())?;
        count("tolerations", self.tolerations.len())?;
        count("replicas", self.replicas.len())?;
        if let Some(s) = &self.scheduler_name {
            check_subdomain("scheduler name", s)?;
        }
        if let Some(p) = &self.priority_class_name {
            check_subdomain("priority class", p)?;
        }
        for (k, v) in &self.labels {
            check_qualified_name("label key", k)?;
            check_label_value("label value", v)?;
        }
        let mut size = 0;
        for (k, v) in &self.annotations {
            check_qualified_name("annotation key", k)?;
            size += k.len() + v.len();
        }
        if size > MAX_ANNOTATION_BYTES {
            return Err(IntentError::new(
                "annotations",
                &format!("{size} bytes"),
                &format!("may total at most {MAX_ANNOTATION_BYTES} bytes"),
            ));
        }
        for (k, v) in &self.node_selector {
            check_qualified_name("node selector key", k)?;
            check_label_value("node selector value", v)?;
        }
        for t in &self.tolerations {
            t.check()?;
        }
        for (component, n) in &self.replicas {
            if component.is_empty() {
                return Err(IntentError::new("replicas", component, "name a component"));
            }
            if *n < 0 {
                return Err(IntentError::new(
                    "replicas",
                    &n.to_string(),
                    "must not be negative",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_rules_refuse_bad_keys_and_values() {
        for key in ["kai.scheduler/queue", "team", "a.b/c_d-e.f"] {
            assert!(check_qualified_name("k", key).is_ok(), "{key}");
        }
        for key in [
            "",
            "/x",
            "Bad_Prefix/x",
            "x/",
            "-x",
            &"a".repeat(64),
            "a/b/c",
        ] {
            assert!(check_qualified_name("k", key).is_err(), "{key}");
        }
        assert!(check_label_value("v", "").is_ok());
        assert!(check_label_value("v", "team-a").is_ok());
        assert!(check_label_value("v", "has space").is_err());
        assert!(check_label_value("v", &"a".repeat(64)).is_err());
        let bad = Intents {
            scheduler_name: Some("Kai_Scheduler".into()),
            ..Intents::default()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn tolerations_parse_as_kubectl_writes_them() {
        let t = Toleration::parse("nvidia.com/gpu:NoSchedule").unwrap();
        assert_eq!(
            t.to_json(),
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
        );
        let t = Toleration::parse("pool=a100:NoExecute").unwrap();
        assert_eq!(
            t.to_json(),
            json!({"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoExecute"})
        );
        assert!(Toleration::parse("pool=a100:Sometimes").is_err());
        assert!(Toleration::parse("=x:NoSchedule").is_err());
    }
}
