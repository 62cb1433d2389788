//! Navigating OpenAPI v3 schemas: CRD structural schemas and the embedded Kubernetes core
//! schema, as `serde_json` values.
//!
//! The two differ in one rule. A CRD's schema is *structural*: the API server prunes every
//! field it does not declare, so `{type: object}` without `properties` is an empty object
//! (unless `x-kubernetes-preserve-unknown-fields`). The core schema only describes: a bare
//! object type there (`FieldsV1`) is free-form. `metadata` of a CRD's root, and of an
//! `x-kubernetes-embedded-resource`, is the core `ObjectMeta`.

use crate::expr::paths::Step;
use serde_json::{Map, Value as Json};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The embedded Kubernetes core schema subset (see `schemas/README.md`).
const CORE_TEXT: &str = include_str!("../../schemas/kubernetes-core.json");

/// Schema name of `ObjectMeta` in the core schema.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// Schema name of `PodTemplateSpec`.
pub const POD_TEMPLATE_SPEC: &str = "io.k8s.api.core.v1.PodTemplateSpec";
/// Schema name of `PodSpec`.
pub const POD_SPEC: &str = "io.k8s.api.core.v1.PodSpec";
/// Schema name of `Container`.
pub const CONTAINER: &str = "io.k8s.api.core.v1.Container";
/// Schema name of `ResourceRequirements`.
pub const RESOURCES: &str = "io.k8s.api.core.v1.ResourceRequirements";
/// Schema name of `PodResourceClaim`.
pub const POD_RESOURCE_CLAIM: &str = "io.k8s.api.core.v1.PodResourceClaim";
/// Schema name of `Pod`.
pub const POD: &str = "io.k8s.api.core.v1.Pod";

/// The embedded core schema: named schemas and the kinds they define.
pub struct Core {
    schemas: Map<String, Json>,
    kinds: HashMap<(String, String, String), String>,
    /// Where the subset came from (`info.source`).
    pub source: String,
}

impl Core {
    /// The embedded core schema, parsed once.
    pub fn get() -> &'static Core {
        static CORE: OnceLock<Core> = OnceLock::new();
        CORE.get_or_init(|| Core::parse(CORE_TEXT))
    }

    fn parse(text: &str) -> Core {
        let doc: Json = serde_json::from_str(text).unwrap_or_default();
        let schemas = doc
            .pointer("/components/schemas")
            .and_then(Json::as_object)
            .cloned()
            .unwrap_or_default();
        let mut kinds = HashMap::new();
        for (name, schema) in &schemas {
            for gvk in schema
                .get("x-kubernetes-group-version-kind")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                let s = |k: &str| {
                    gvk.get(k)
                        .and_then(Json::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                kinds.insert((s("group"), s("version"), s("kind")), name.clone());
            }
        }
        let source = doc
            .pointer("/info/source")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned();
        Core {
            schemas,
            kinds,
            source,
        }
    }

    /// The named schema (`io.k8s.api.core.v1.PodSpec`).
    pub fn schema(&self, name: &str) -> Option<Node<'_>> {
        self.schemas.get(name).map(|value| Node {
            value,
            pruned: false,
        })
    }

    /// The schema of a built-in kind, if the subset has it.
    pub fn kind(&self, group: &str, version: &str, kind: &str) -> Option<Node<'_>> {
        let key = (group.to_owned(), version.to_owned(), kind.to_owned());
        self.kinds.get(&key).and_then(|name| self.schema(name))
    }
}

/// A schema node; `pruned` when it belongs to a CRD's structural schema.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    /// The schema JSON.
    pub value: &'a Json,
    /// Undeclared fields are pruned (CRD) rather than undescribed (core).
    pub pruned: bool,
}

/// What a node describes, after `$ref`/`allOf` are followed.
#[derive(Debug, Clone)]
pub enum Shape<'a> {
    /// An object: declared `properties`, the schema of map values (`additionalProperties`),
    /// whether undeclared fields are kept, whether it is an embedded resource.
    Object {
        /// Declared fields.
        properties: Option<&'a Map<String, Json>>,
        /// Schema of every value of a map.
        values: Option<Node<'a>>,
        /// Undeclared fields are kept (and not described).
        open: bool,
        /// `x-kubernetes-embedded-resource`: `metadata` is an `ObjectMeta`.
        embedded: bool,
    },
    /// An array of `items`.
    Array(Option<Node<'a>>),
    /// A scalar of these JSON types, with its `enum` if it has one.
    Scalar {
        /// `string`, `integer`, `number`, `boolean`.
        types: Vec<&'a str>,
        /// Allowed values.
        allowed: Option<&'a [Json]>,
    },
    /// Anything (no type, or `x-kubernetes-preserve-unknown-fields` without properties).
    Any,
}

impl Shape<'_> {
    /// A short name for messages: `an object`, `an array`, `a string`, `any value`.
    pub fn describe(&self) -> String {
        match self {
            Shape::Object { .. } => "an object".into(),
            Shape::Array(_) => "an array".into(),
            Shape::Scalar { types, .. } => {
                format!("a {}", types.join(" or "))
            }
            Shape::Any => "any value".into(),
        }
    }
}

fn flag(v: &Json, key: &str) -> bool {
    v.get(key).and_then(Json::as_bool) == Some(true)
}

const SCALARS: &[&str] = &["string", "integer", "number", "boolean"];

impl<'a> Node<'a> {
    /// Follows `$ref` and single-`allOf` wrappers (core schema).
    pub fn resolve(self) -> Node<'a> {
        let mut node = self;
        for _ in 0..16 {
            let v = node.value;
            let target = v.get("$ref").and_then(Json::as_str).or_else(|| {
                match v.get("allOf").and_then(Json::as_array).map(Vec::as_slice) {
                    Some([only]) if v.get("properties").is_none() && v.get("type").is_none() => {
                        only.get("$ref").and_then(Json::as_str)
                    }
                    _ => None,
                }
            });
            let Some(target) = target else {
                return node;
            };
            let name = target.rsplit('/').next().unwrap_or_default();
            match Core::get().schemas.get(name) {
                Some(value) => {
                    node = Node {
                        value,
                        pruned: false,
                    }
                }
                None => return node,
            }
        }
        node
    }

    /// What the node describes.
    pub fn shape(self) -> Shape<'a> {
        let node = self.resolve();
        let v = node.value;
        if flag(v, "x-kubernetes-int-or-string") {
            return Shape::Scalar {
                types: vec!["integer", "string"],
                allowed: None,
            };
        }
        let ty = v.get("type").and_then(Json::as_str);
        let properties = v.get("properties").and_then(Json::as_object);
        let additional = v.get("additionalProperties");
        let preserve = flag(v, "x-kubernetes-preserve-unknown-fields");
        if ty.is_none() && properties.is_none() && additional.is_none() {
            // Unions of scalars (`Quantity`, `IntOrString` in the core schema).
            let alternatives = v
                .get("oneOf")
                .or_else(|| v.get("anyOf"))
                .and_then(Json::as_array);
            if let Some(alts) = alternatives {
                let types: Option<Vec<&str>> = alts
                    .iter()
                    .map(|a| {
                        a.get("type")
                            .and_then(Json::as_str)
                            .filter(|t| SCALARS.contains(t))
                    })
                    .collect();
                if let Some(types) = types.filter(|t| !t.is_empty()) {
                    return Shape::Scalar {
                        types,
                        allowed: None,
                    };
                }
            }
            return Shape::Any;
        }
        match ty {
            Some("array") => Shape::Array(v.get("items").map(|items| Node {
                value: items,
                pruned: node.pruned,
            })),
            Some(t) if SCALARS.contains(&t) => Shape::Scalar {
                types: vec![t],
                allowed: v.get("enum").and_then(Json::as_array).map(Vec::as_slice),
            },
            _ => {
                let values = additional.filter(|a| a.is_object()).map(|a| Node {
                    value: a,
                    pruned: node.pruned,
                });
                let open = preserve
                    || additional.and_then(Json::as_bool) == Some(true)
                    || (!node.pruned && properties.is_none() && values.is_none());
                Shape::Object {
                    properties,
                    values,
                    open,
                    embedded: flag(v, "x-kubernetes-embedded-resource"),
                }
            }
        }
    }

    fn child(self, value: &'a Json) -> Node<'a> {
        Node {
            value,
            pruned: self.pruned,
        }
    }
}

/// Why a path does not fit a schema, at the step that fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The object has no such field.
    UnknownField(String),
    /// The step needs an object (a key) or an array (an index) but the value is another
    /// shape; `found` describes it.
    WrongShape {
        /// What the step needs: `an object`, `an array`, `an array or an object`.
        needs: &'static str,
        /// What the schema says.
        found: String,
    },
}

/// Where a path ends in a schema.
#[derive(Debug, Clone)]
pub enum Walk<'a> {
    /// Every step fits; the node at the end.
    Found(Node<'a>),
    /// The first `depth` steps fit, then the schema is open (undeclared fields kept).
    Open(usize),
    /// The first `depth` steps fit; step `depth` names a field the object does not declare
    /// but keeps (`x-kubernetes-preserve-unknown-fields` beside declared `properties`): valid,
    /// and worth a look (a typo, or a field of another release).
    Undeclared(usize, String),
    /// The first `depth` steps fit; the next cannot be checked (why).
    NotChecked(usize, &'static str),
    /// Step `depth` does not fit.
    Fail(usize, Problem),
}

/// A schema to continue with when a path reaches an open node at `at` (steps with every
/// element step written as [`Step::Each`]): how an embedded `PodTemplateSpec` a CRD leaves
/// open is checked against the core schema.
#[derive(Debug, Clone)]
pub struct Overlay<'a> {
    /// Where.
    pub at: Vec<Step>,
    /// What to continue with.
    pub node: Node<'a>,
}

/// `steps` with every element step (`[n]`, `[…]` on arrays) written as `[]`, for matching
/// overlays.
pub fn normalize(steps: &[Step]) -> Vec<Step> {
    steps
        .iter()
        .map(|s| match s {
            Step::Index(_) | Step::Dynamic | Step::Slice => Step::Each,
            other => other.clone(),
        })
        .collect()
}

/// Follows `steps` from `root`. `root_is_resource` says `root` is a whole object (its
/// `metadata` is an `ObjectMeta`). Where the schema is open, an [`Overlay`] at or below that
/// point (on the way of `steps`) says what is there.
pub fn walk<'a>(
    root: Node<'a>,
    root_is_resource: bool,
    steps: &[Step],
    overlays: &[Overlay<'a>],
) -> Walk<'a> {
    let core = Core::get();
    let all = normalize(steps);
    // The nearest overlay at or below step `depth` on the way of `steps`.
    let jump = |depth: usize| -> Option<(usize, Node<'a>)> {
        overlays
            .iter()
            .filter(|o| o.at.len() >= depth && all.starts_with(&o.at))
            .min_by_key(|o| o.at.len())
            .map(|o| (o.at.len(), o.node))
    };
    let mut node = root;
    let mut resource = root_is_resource;
    let mut depth = 0;
    while depth < steps.len() {
        let step = &steps[depth];
        let shape = node.shape();
        let open_without_fields = matches!(
            shape,
            Shape::Any
                | Shape::Object {
                    properties: None,
                    values: None,
                    open: true,
                    ..
                }
        );
        if open_without_fields {
            match jump(depth) {
                Some((to, n)) if to > depth || !std::ptr::eq(n.value, node.value) => {
                    depth = to;
                    node = n;
                    resource = false;
                    continue;
                }
                _ => return Walk::Open(depth),
            }
        }
        let next: Node<'a> = match (&shape, step) {
            (Shape::Any, _) => return Walk::Open(depth),
            (
                Shape::Object {
                    properties,
                    values,
                    open,
                    embedded,
                },
                Step::Key(key),
            ) => {
                if key == "metadata" && (resource || *embedded) {
                    let declared = properties.and_then(|p| p.get(key));
                    let bare = declared.is_none_or(|d| {
                        d.get("properties").is_none()
                            && !flag(d, "x-kubernetes-preserve-unknown-fields")
                    });
                    if bare && let Some(meta) = core.schema(OBJECT_META) {
                        resource = false;
                        node = meta;
                        depth += 1;
                        continue;
                    }
                }
                match (properties.and_then(|p| p.get(key)), values) {
                    (Some(v), _) => node.child(v),
                    (None, Some(v)) => *v,
                    (None, None) if *open => match jump(depth + 1) {
                        Some((to, n)) => {
                            depth = to;
                            node = n;
                            resource = false;
                            continue;
                        }
                        None if properties.is_some_and(|p| !p.is_empty()) => {
                            return Walk::Undeclared(depth, key.clone());
                        }
                        None => return Walk::Open(depth + 1),
                    },
                    (None, None) => return Walk::Fail(depth, Problem::UnknownField(key.clone())),
                }
            }
            (Shape::Object { values, open, .. }, Step::Each | Step::Dynamic) => match values {
                Some(v) => *v,
                None if *open => return Walk::Open(depth),
                None if matches!(step, Step::Dynamic) => {
                    return Walk::NotChecked(
                        depth,
                        "a computed key into an object with fixed fields",
                    );
                }
                None => return Walk::NotChecked(depth, "iterating the fields of an object"),
            },
            (Shape::Object { .. }, Step::Index(_) | Step::Slice) => {
                return Walk::Fail(
                    depth,
                    Problem::WrongShape {
                        needs: "an array",
                        found: shape.describe(),
                    },
                );
            }
            (Shape::Array(items), Step::Each | Step::Index(_) | Step::Dynamic) => match items {
                Some(i) => *i,
                None => return Walk::Open(depth + 1),
            },
            (Shape::Array(_), Step::Slice) => node,
            (Shape::Array(_), Step::Key(_)) => {
                return Walk::Fail(
                    depth,
                    Problem::WrongShape {
                        needs: "an object",
                        found: shape.describe(),
                    },
                );
            }
            (Shape::Scalar { types, .. }, Step::Slice) if types.contains(&"string") => node,
            (Shape::Scalar { .. }, _) => {
                let needs = match step {
                    Step::Key(_) => "an object",
                    Step::Index(_) | Step::Slice => "an array",
                    _ => "an array or an object",
                };
                return Walk::Fail(
                    depth,
                    Problem::WrongShape {
                        needs,
                        found: shape.describe(),
                    },
                );
            }
        };
        resource = false;
        node = next;
        depth += 1;
    }
    // A path that ends on an open node an overlay describes ends on the overlay.
    if matches!(node.shape(), Shape::Any)
        && let Some((to, n)) = jump(depth)
        && to == depth
    {
        return Walk::Found(n);
    }
    Walk::Found(node)
}

/// Paths (up to `limit`) below `root` where a field named `name` is declared, breadth
/// first, at most `max_depth` deep: where a field that is not where a definition expects it
/// may have moved to.
pub fn find_field(root: Node<'_>, name: &str, max_depth: usize, limit: usize) -> Vec<Vec<Step>> {
    let mut found = Vec::new();
    let mut queue: std::collections::VecDeque<(Node<'_>, Vec<Step>)> =
        std::collections::VecDeque::from([(root, Vec::new())]);
    let mut visited = 0usize;
    while let Some((node, path)) = queue.pop_front() {
        visited += 1;
        if found.len() >= limit || path.len() > max_depth || visited > 20_000 {
            break;
        }
        match node.shape() {
            Shape::Object {
                properties, values, ..
            } => {
                for (key, value) in properties.into_iter().flatten() {
                    let mut p = path.clone();
                    p.push(Step::Key(key.clone()));
                    if key == name {
                        found.push(p.clone());
                    }
                    queue.push_back((node.child(value), p));
                }
                if let Some(v) = values {
                    let mut p = path.clone();
                    p.push(Step::Each);
                    queue.push_back((v, p));
                }
            }
            Shape::Array(Some(items)) => {
                let mut p = path.clone();
                p.push(Step::Each);
                queue.push_back((items, p));
            }
            _ => {}
        }
    }
    found.truncate(limit);
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> Step {
        Step::Key(k.into())
    }

    #[test]
    fn core_kinds_and_refs_resolve() {
        let core = Core::get();
        let pod = core.kind("", "v1", "Pod").expect("Pod in the core subset");
        let steps = [
            key("spec"),
            key("containers"),
            Step::Each,
            key("resources"),
            key("limits"),
        ];
        assert!(matches!(walk(pod, true, &steps, &[]), Walk::Found(_)));
        let steps = [key("spec"), key("containerz")];
        assert!(matches!(
            walk(pod, true, &steps, &[]),
            Walk::Fail(1, Problem::UnknownField(ref k)) if k == "containerz"
        ));
        let steps = [
            key("metadata"),
            key("labels"),
            key("app.kubernetes.io/name"),
        ];
        assert!(matches!(walk(pod, true, &steps, &[]), Walk::Found(_)));
        let job = core.kind("batch", "v1", "Job").expect("Job");
        let steps = [
            key("spec"),
            key("template"),
            key("spec"),
            key("containers"),
            key("x"),
        ];
        assert!(matches!(
            walk(job, true, &steps, &[]),
            Walk::Fail(
                4,
                Problem::WrongShape {
                    needs: "an object",
                    ..
                }
            )
        ));
        assert!(core.kind("apps", "v1", "Deployment").is_some());
        assert!(!core.source.is_empty());
    }

    #[test]
    fn structural_rules_of_crds() {
        let schema = json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "bare": {"type": "object"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                "phase": {"type": "string", "enum": ["A", "B"]},
                "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}
            }}
        }});
        let root = Node {
            value: &schema,
            pruned: true,
        };
        let w = |steps: &[Step]| walk(root, true, steps, &[]);
        assert!(matches!(
            w(&[key("metadata"), key("annotations"), key("a")]),
            Walk::Found(_)
        ));
        assert!(matches!(
            w(&[key("spec"), key("bare"), key("x")]),
            Walk::Fail(2, _)
        ));
        assert!(matches!(
            w(&[key("spec"), key("free"), key("x"), key("y")]),
            Walk::Open(2)
        ));
        assert!(matches!(
            w(&[key("spec"), key("map"), Step::Dynamic, key("n")]),
            Walk::Found(_)
        ));
        assert!(matches!(
            w(&[key("spec"), key("map"), key("any"), key("m")]),
            Walk::Fail(3, _)
        ));
        assert!(matches!(
            w(&[key("spec"), key("replicas"), key("x")]),
            Walk::Fail(2, Problem::WrongShape { .. })
        ));
        assert!(matches!(
            w(&[key("spec"), Step::Each]),
            Walk::NotChecked(1, _)
        ));
        match w(&[key("spec"), key("phase")]) {
            Walk::Found(n) => match n.shape() {
                Shape::Scalar { allowed, .. } => assert_eq!(allowed.map(<[Json]>::len), Some(2)),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        match w(&[key("spec"), key("port")]) {
            Walk::Found(n) => {
                assert!(matches!(n.shape(), Shape::Scalar { ref types, .. } if types.len() == 2))
            }
            other => panic!("{other:?}"),
        }
        // An overlay types what the CRD leaves open.
        let template = Core::get().schema(POD_TEMPLATE_SPEC).unwrap();
        let overlays = [Overlay {
            at: vec![key("spec"), key("free")],
            node: template,
        }];
        let steps = [key("spec"), key("free"), key("spec"), key("containerz")];
        assert!(matches!(
            walk(root, true, &steps, &overlays),
            Walk::Fail(3, _)
        ));
        assert_eq!(
            find_field(root, "n", 6, 3),
            vec![vec![key("spec"), key("map"), Step::Each, key("n")]]
        );
    }
}
