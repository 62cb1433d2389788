//! CustomResourceDefinitions as the drift check reads them: group, kind, and per version
//! whether it is served, stored, deprecated, and its OpenAPI v3 schema.

use crate::definition::catalog::version_priority;
use crate::folder;
use serde_json::Value as Json;
use std::path::Path;

/// One version of a CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct CrdVersion {
    /// `v1`, `v1alpha2`, …
    pub name: String,
    /// Served by the API server.
    pub served: bool,
    /// The storage version.
    pub storage: bool,
    /// Marked deprecated.
    pub deprecated: bool,
    /// `openAPIV3Schema` (`Null` when the CRD has none: anything goes).
    pub schema: Json,
}

/// A CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct Crd {
    /// `metadata.name` (`widgets.example.com`).
    pub name: String,
    /// `spec.group`.
    pub group: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// Where it was read: a file, or `cluster`.
    pub source: String,
    /// Its versions, highest Kubernetes priority first.
    pub versions: Vec<CrdVersion>,
}

/// Why a CustomResourceDefinition cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrdError {
    /// No `spec.group` or no `spec.names.kind`.
    #[error("CRD `{name}` has no spec.group or spec.names.kind")]
    NoGroupOrKind {
        /// `metadata.name`.
        name: String,
    },
    /// Neither `spec.versions` nor `spec.version`.
    #[error("CRD `{name}` has no versions")]
    NoVersions {
        /// `metadata.name`.
        name: String,
    },
}

impl Crd {
    /// Reads a CRD object (`apiextensions.k8s.io/v1`, or the older `v1beta1` with one schema
    /// for every version). `None` when `doc` is not a CRD.
    pub fn from_json(doc: &Json, source: &str) -> Option<Result<Crd, CrdError>> {
        if doc.get("kind").and_then(Json::as_str) != Some("CustomResourceDefinition") {
            return None;
        }
        Some(Crd::parse(doc, source))
    }

    fn parse(doc: &Json, source: &str) -> Result<Crd, CrdError> {
        let text = |p: &str| {
            doc.pointer(p)
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let name = text("/metadata/name");
        let (group, kind) = (text("/spec/group"), text("/spec/names/kind"));
        if group.is_empty() || kind.is_empty() {
            return Err(CrdError::NoGroupOrKind { name });
        }
        let shared = doc.pointer("/spec/validation/openAPIV3Schema").cloned();
        let mut versions: Vec<CrdVersion> = Vec::new();
        for v in doc
            .pointer("/spec/versions")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            let flag = |k: &str| v.get(k).and_then(Json::as_bool).unwrap_or(false);
            let Some(vname) = v.get("name").and_then(Json::as_str) else {
                continue;
            };
            versions.push(CrdVersion {
                name: vname.to_owned(),
                served: v.get("served").and_then(Json::as_bool).unwrap_or(true),
                storage: flag("storage"),
                deprecated: flag("deprecated"),
                schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .cloned()
                    .or_else(|| shared.clone())
                    .unwrap_or(Json::Null),
            });
        }
        if versions.is_empty() {
            let v = text("/spec/version");
            if v.is_empty() {
                return Err(CrdError::NoVersions { name });
            }
            versions.push(CrdVersion {
                name: v,
                served: true,
                storage: true,
                deprecated: false,
                schema: shared.unwrap_or(Json::Null),
            });
        }
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.name)));
        Ok(Crd {
            name,
            group,
            kind,
            source: source.to_owned(),
            versions,
        })
    }

    /// The version named `name`.
    pub fn version(&self, name: &str) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.name == name)
    }

    /// `group/version Kind` of one of its versions, for messages.
    pub fn describe(&self, version: &str) -> String {
        format!("{}/{version} {}", self.group, self.kind)
    }
}

/// Removes from a schema what the drift check never reads (descriptions, validation rules,
/// defaults, examples): a CRD kept in memory shrinks to about a tenth. Names of properties are
/// kept whatever they are.
pub fn strip(schema: &mut Json) {
    const DROPPED: &[&str] = &[
        "description",
        "x-kubernetes-validations",
        "example",
        "externalDocs",
        "pattern",
        "format",
        "default",
        "required",
        "maxLength",
        "minLength",
        "maximum",
        "minimum",
        "maxItems",
        "minItems",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
    ];
    fn go(node: &mut Json, depth: usize) {
        if depth > 200 {
            return;
        }
        match node {
            Json::Object(map) => {
                map.retain(|k, _| !DROPPED.contains(&k.as_str()));
                for (k, v) in map.iter_mut() {
                    if k == "properties" {
                        if let Json::Object(props) = v {
                            props.values_mut().for_each(|p| go(p, depth + 1));
                        }
                    } else {
                        go(v, depth + 1);
                    }
                }
            }
            Json::Array(items) => items.iter_mut().for_each(|v| go(v, depth + 1)),
            _ => {}
        }
    }
    go(schema, 0);
}

/// Every CRD in the YAML/JSON files below `path` (multi-document, `List` kinds). Documents
/// that are not CRDs are skipped; unreadable files and malformed CRDs are errors.
pub fn load_path(path: &Path) -> (Vec<Crd>, Vec<String>) {
    let mut crds = Vec::new();
    let mut errors = Vec::new();
    let walk = folder::walk(path, folder::is_manifest);
    if !walk.exists {
        errors.push(format!(
            "{}: cannot read: no such file or directory",
            path.display()
        ));
        return (crds, errors);
    }
    errors.extend(walk.problems);
    if walk.files.is_empty() {
        errors.push(format!("{}: no .yaml, .yml or .json files", path.display()));
        return (crds, errors);
    }
    for (file, _) in walk.files {
        let source = file.display().to_string();
        let text = match folder::read_text(&file) {
            Ok(text) => text,
            Err(e) => {
                errors.push(format!("{source}: cannot read: {e}"));
                continue;
            }
        };
        match crate::manifest::parse_documents(&text) {
            Ok(docs) => {
                let before = crds.len();
                for doc in &docs {
                    match Crd::from_json(doc, &source) {
                        Some(Ok(crd)) => crds.push(crd),
                        Some(Err(e)) => errors.push(format!("{source}: {e}")),
                        None => {}
                    }
                }
                if crds.len() == before {
                    errors.push(format!("{source}: holds no CustomResourceDefinition"));
                }
            }
            Err(e) => errors.push(format!("{source}: {e}")),
        }
    }
    (crds, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_v1_and_v1beta1_crds() {
        let v1 = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Widget"}, "versions": [
                {"name": "v1alpha1", "served": true, "storage": false, "deprecated": true,
                 "schema": {"openAPIV3Schema": {"type": "object"}}},
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {}}}}]}});
        let crd = Crd::from_json(&v1, "w.yaml").unwrap().unwrap();
        assert_eq!(
            (crd.group.as_str(), crd.kind.as_str()),
            ("example.com", "Widget")
        );
        let names: Vec<&str> = crd.versions.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["v1", "v1alpha1"], "highest priority first");
        assert!(crd.version("v1alpha1").unwrap().deprecated);
        let beta = json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "olds.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Old"}, "version": "v1",
                     "validation": {"openAPIV3Schema": {"type": "object"}}}});
        let crd = Crd::from_json(&beta, "o.yaml").unwrap().unwrap();
        assert_eq!(crd.versions[0].schema, json!({"type": "object"}));
        assert!(Crd::from_json(&json!({"kind": "Pod"}), "p").is_none());
        let bad = json!({"kind": "CustomResourceDefinition", "spec": {}});
        assert!(Crd::from_json(&bad, "b").unwrap().is_err());
    }
}
