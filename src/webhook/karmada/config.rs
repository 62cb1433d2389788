//! The `ResourceInterpreterWebhookConfiguration` that sends Karmada's interpreter calls for
//! every root kind of a catalog to kartograf (`deploy/karmada/` holds the embedded
//! catalog's; a test keeps it equal to [`render`]).

use crate::definition::Catalog;
use std::collections::BTreeSet;
use std::fmt::Write;

/// API groups Kubernetes serves itself: Karmada's native interpreter knows their kinds in
/// detail (retained member fields, pruned generated fields, exact status aggregation), so
/// only the replica and component questions come to kartograf.
pub const BUILT_IN_GROUPS: [&str; 3] = ["", "apps", "batch"];

/// Operations asked for kinds of the built-in groups.
pub const BUILT_IN_OPERATIONS: [&str; 2] = ["InterpretReplica", "InterpretComponent"];

/// Where the generated configuration points by default (the Service of `deploy/karmada/`).
pub const DEFAULT_URL: &str = "https://kartograf-webhook.karmada-system.svc:443/karmada/interpret";

/// The configuration as YAML: one rule per root kind (group, version, kind) of `catalog`,
/// sorted, all nine operations except for [`BUILT_IN_GROUPS`]; `url` and `ca_bundle`
/// (base64 PEM) go to `clientConfig`.
pub fn render(catalog: &Catalog, url: &str, ca_bundle: &str) -> String {
    let kinds: BTreeSet<(String, String, String)> = catalog
        .definitions()
        .map(|d| {
            let k = &d.root_kind;
            (k.group.clone(), k.version.clone(), k.kind.clone())
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Generated from the embedded catalog (`kartograf karmada-config`); a test keeps it\n\
         # equal. Apply to the Karmada API server (karmada-apiserver), with caBundle set to the\n\
         # base64 PEM CA that signed the webhook's certificate (docs/karmada.md).\n\
         apiVersion: config.karmada.io/v1alpha1\n\
         kind: ResourceInterpreterWebhookConfiguration\n\
         metadata:\n  name: kartograf\n\
         webhooks:\n  - name: interpreter.kartograf.io\n    rules:"
    );
    for (group, version, kind) in &kinds {
        let operations: Vec<&str> = if BUILT_IN_GROUPS.contains(&group.as_str()) {
            BUILT_IN_OPERATIONS.to_vec()
        } else {
            super::wire::OPERATIONS.to_vec()
        };
        let list = |items: &[&str]| {
            items
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "      - operations: [{}]\n        apiGroups: [{}]\n        apiVersions: [{}]\n        kinds: [{}]",
            list(&operations),
            list(&[group]),
            list(&[version]),
            list(&[kind]),
        );
    }
    let _ = writeln!(
        out,
        "    clientConfig:\n      url: {url}\n      caBundle: {ca_bundle:?}\n    \
         interpreterContextVersions: [\"v1alpha1\"]\n    timeoutSeconds: 3"
    );
    out
}
