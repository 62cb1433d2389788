//! What Karmada reads from a pod spec: the node claim (node selector, tolerations, required
//! node affinity), the priority class, and the objects the pod references (ConfigMaps,
//! Secrets, PersistentVolumeClaims, ServiceAccounts) as Karmada's native interpreter and
//! Kubernetes' `VisitPodSecretNames`/`VisitPodConfigmapNames` find them.

use super::wire::{Dependency, NodeClaim};
use crate::expr::value::{as_array, as_str, entries, get, get_path, to_json};
use jaq_json::Val;
use std::collections::BTreeSet;

/// Most references one workload may report (a hostile template cannot grow the answer
/// beyond this; the object's size bounds it further).
pub const MAX_DEPENDENCIES: usize = 4096;

/// The node claim of a pod spec; `None` when it claims nothing.
pub fn node_claim(spec: &Val) -> Option<NodeClaim> {
    let node_selector = get(spec, "nodeSelector")
        .into_iter()
        .flat_map(entries)
        .filter_map(|(k, v)| Some((as_str(k)?.to_owned(), as_str(v)?.to_owned())))
        .collect();
    let tolerations = get(spec, "tolerations")
        .map(as_array)
        .unwrap_or_default()
        .iter()
        .map(to_json)
        .collect();
    let hard_node_affinity = get_path(
        spec,
        &[
            "affinity",
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
        ],
    )
    .filter(|v| !matches!(v, Val::Null))
    .map(to_json);
    let claim = NodeClaim {
        hard_node_affinity,
        node_selector,
        tolerations,
    };
    let empty = claim.hard_node_affinity.is_none()
        && claim.node_selector.is_empty()
        && claim.tolerations.is_empty();
    (!empty).then_some(claim)
}

/// The priority class of a pod spec (empty when none).
pub fn priority_class(spec: &Val) -> String {
    get(spec, "priorityClassName")
        .and_then(as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The kinds of referenced objects, as the answer names them.
const CONFIG_MAP: &str = "ConfigMap";
const SECRET: &str = "Secret";
const PVC: &str = "PersistentVolumeClaim";
const SERVICE_ACCOUNT: &str = "ServiceAccount";

/// Adds the objects `spec` references to `out` (kind, name), at most [`MAX_DEPENDENCIES`].
pub fn references(spec: &Val, out: &mut BTreeSet<(&'static str, String)>) {
    let mut add = |kind: &'static str, name: Option<&Val>| {
        if let Some(name) = name.and_then(as_str).filter(|n| !n.is_empty())
            && out.len() < MAX_DEPENDENCIES
        {
            out.insert((kind, name.to_owned()));
        }
    };
    if let Some(sa) = get(spec, "serviceAccountName").and_then(as_str)
        && sa != "default"
    {
        add(SERVICE_ACCOUNT, get(spec, "serviceAccountName"));
    }
    for s in get(spec, "imagePullSecrets")
        .map(as_array)
        .unwrap_or_default()
    {
        add(SECRET, get(s, "name"));
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in get(spec, list).map(as_array).unwrap_or_default() {
            for from in get(c, "envFrom").map(as_array).unwrap_or_default() {
                add(CONFIG_MAP, get_path(from, &["configMapRef", "name"]));
                add(SECRET, get_path(from, &["secretRef", "name"]));
            }
            for env in get(c, "env").map(as_array).unwrap_or_default() {
                add(
                    CONFIG_MAP,
                    get_path(env, &["valueFrom", "configMapKeyRef", "name"]),
                );
                add(
                    SECRET,
                    get_path(env, &["valueFrom", "secretKeyRef", "name"]),
                );
            }
        }
    }
    for v in get(spec, "volumes").map(as_array).unwrap_or_default() {
        add(CONFIG_MAP, get_path(v, &["configMap", "name"]));
        add(SECRET, get_path(v, &["secret", "secretName"]));
        add(PVC, get_path(v, &["persistentVolumeClaim", "claimName"]));
        for source in get_path(v, &["projected", "sources"])
            .map(as_array)
            .unwrap_or_default()
        {
            add(CONFIG_MAP, get_path(source, &["configMap", "name"]));
            add(SECRET, get_path(source, &["secret", "name"]));
        }
        add(SECRET, get_path(v, &["azureFile", "secretName"]));
        for (volume, field) in [
            ("cephfs", "secretRef"),
            ("cinder", "secretRef"),
            ("flexVolume", "secretRef"),
            ("rbd", "secretRef"),
            ("scaleIO", "secretRef"),
            ("iscsi", "secretRef"),
            ("storageos", "secretRef"),
            ("csi", "nodePublishSecretRef"),
        ] {
            add(SECRET, get_path(v, &[volume, field, "name"]));
        }
    }
}

/// The references as Karmada's answer lists them, sorted by kind and name.
pub fn dependencies(refs: BTreeSet<(&'static str, String)>, namespace: &str) -> Vec<Dependency> {
    let mut out: Vec<Dependency> = refs
        .into_iter()
        .map(|(kind, name)| Dependency {
            api_version: "v1".to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name,
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::value::{Limits, from_json};

    fn val(json: serde_json::Value) -> Val {
        from_json(&json, Limits::default()).unwrap()
    }

    #[test]
    fn finds_every_kind_of_reference_once() {
        let spec = val(serde_json::json!({
            "serviceAccountName": "runner",
            "imagePullSecrets": [{"name": "pull"}],
            "containers": [{
                "envFrom": [{"configMapRef": {"name": "env-cm"}}, {"secretRef": {"name": "env-secret"}}],
                "env": [{"valueFrom": {"secretKeyRef": {"name": "key-secret"}}},
                        {"valueFrom": {"configMapKeyRef": {"name": "env-cm"}}}]
            }],
            "initContainers": [{"envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
            "volumes": [
                {"configMap": {"name": "vol-cm"}},
                {"secret": {"secretName": "vol-secret"}},
                {"persistentVolumeClaim": {"claimName": "data"}},
                {"projected": {"sources": [{"configMap": {"name": "proj-cm"}}, {"secret": {"name": "proj-secret"}}]}},
                {"csi": {"nodePublishSecretRef": {"name": "csi-secret"}}}
            ]
        }));
        let mut refs = BTreeSet::new();
        references(&spec, &mut refs);
        let deps = dependencies(refs, "ml");
        let names: Vec<String> = deps
            .iter()
            .map(|d| format!("{}/{}", d.kind, d.name))
            .collect();
        assert_eq!(
            names,
            [
                "ConfigMap/env-cm",
                "ConfigMap/init-cm",
                "ConfigMap/proj-cm",
                "ConfigMap/vol-cm",
                "PersistentVolumeClaim/data",
                "Secret/csi-secret",
                "Secret/env-secret",
                "Secret/key-secret",
                "Secret/proj-secret",
                "Secret/pull",
                "Secret/vol-secret",
                "ServiceAccount/runner",
            ]
        );
        assert!(
            deps.iter()
                .all(|d| d.namespace == "ml" && d.api_version == "v1")
        );
    }

    #[test]
    fn the_default_service_account_and_empty_claims_are_not_reported() {
        let spec = val(serde_json::json!({"serviceAccountName": "default", "containers": []}));
        let mut refs = BTreeSet::new();
        references(&spec, &mut refs);
        assert!(refs.is_empty());
        assert!(node_claim(&spec).is_none());
        let spec = val(serde_json::json!({
            "nodeSelector": {"gpu": "h100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "priorityClassName": "high"
        }));
        let claim = node_claim(&spec).unwrap();
        assert_eq!(
            claim.node_selector.get("gpu").map(String::as_str),
            Some("h100")
        );
        assert_eq!(claim.tolerations.len(), 1);
        assert!(claim.hard_node_affinity.is_some());
        assert_eq!(priority_class(&spec), "high");
    }

    #[test]
    fn references_stop_at_the_limit() {
        let volumes: Vec<serde_json::Value> = (0..MAX_DEPENDENCIES + 10)
            .map(|i| serde_json::json!({"configMap": {"name": format!("cm-{i}")}}))
            .collect();
        let spec = val(serde_json::json!({"volumes": volumes}));
        let mut refs = BTreeSet::new();
        references(&spec, &mut refs);
        assert_eq!(refs.len(), MAX_DEPENDENCIES);
    }
}
