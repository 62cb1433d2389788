//! What a definition says about writing, prepared once per definition: for each component,
//! the expressions that locate its pod template (or pod spec and metadata, or fragments),
//! its replica count and its suspend actions, each parsed for path mode and compiled for
//! reading back.

use super::pathmode::PathExpr;
use crate::definition::Definition;
use crate::definition::model::{ComponentDefinition, SuspendAction};
use crate::expr::Expr;
use parking_lot::Mutex;
use serde_json::Value as Json;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// One definition field that is read and written.
#[derive(Debug)]
pub(crate) struct Field {
    /// YAML path of the field in the definition.
    pub(crate) yaml: String,
    /// Its expression.
    pub(crate) source: String,
    /// Path mode (`None`: not valid jq).
    pub(crate) path: Option<PathExpr>,
    /// Compiled for reading back (`None`: refused by the compiler).
    pub(crate) read: Option<Expr>,
}

impl Field {
    fn new(yaml: String, source: &str) -> Field {
        Field {
            yaml,
            source: source.to_owned(),
            path: PathExpr::parse(source),
            read: Expr::compile(source).ok(),
        }
    }
}

/// Where a component's pods are described.
// One per component, built once per definition load: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Shape {
    /// `podTemplateSpecPath`.
    Template(Field),
    /// `podSpecPath` and `metadataPath`.
    Spec {
        spec: Field,
        metadata: Option<Field>,
    },
    /// `fragmentedPodSpecDefinition`'s writable fragments.
    Fragmented {
        scheduler_name: Option<Field>,
        priority_class_name: Option<Field>,
        labels: Option<Field>,
        annotations: Option<Field>,
    },
}

/// One suspend or resume action.
#[derive(Debug)]
pub(crate) struct Action {
    pub(crate) path: Field,
    /// The decoded value, or why it does not decode.
    pub(crate) value: Result<Json, String>,
}

/// A component's writable parts.
#[derive(Debug)]
pub(crate) struct ComponentPlan {
    pub(crate) name: String,
    pub(crate) shape: Option<Shape>,
    /// Where replicas are written (`interpreterDefinition.replicasAssignPath`, else
    /// `scaleDefinition.replicasPath`) and the path they are read back from.
    pub(crate) replicas: Option<(Field, Field)>,
    pub(crate) suspend: Vec<Action>,
    pub(crate) resume: Vec<Action>,
}

/// A definition's writable parts, components in the definition's order.
#[derive(Debug)]
pub(crate) struct WritePlan {
    pub(crate) components: Vec<ComponentPlan>,
}

fn actions(yaml: &str, list: &[SuspendAction]) -> Vec<Action> {
    list.iter()
        .enumerate()
        .map(|(n, a)| Action {
            path: Field::new(format!("{yaml}[{n}].path"), &a.path),
            value: match &a.value {
                // Upstream's form: JSON-encoded text.
                Json::String(text) => serde_json::from_str(text)
                    .map_err(|e| format!("`{text}` is not JSON-encoded text: {e}")),
                // An older form: the value itself.
                other => Ok(other.clone()),
            },
        })
        .collect()
}

fn component(c: &ComponentDefinition, yaml: &str) -> ComponentPlan {
    let field = |name: &str, source: &Option<String>| {
        source
            .as_deref()
            .map(|s| Field::new(format!("{yaml}.specDefinition.{name}"), s))
    };
    let shape = c.spec_definition.as_ref().and_then(|s| {
        if let Some(t) = &s.pod_template_spec_path {
            Some(Shape::Template(Field::new(
                format!("{yaml}.specDefinition.podTemplateSpecPath"),
                t,
            )))
        } else if let Some(p) = &s.pod_spec_path {
            Some(Shape::Spec {
                spec: Field::new(format!("{yaml}.specDefinition.podSpecPath"), p),
                metadata: field("metadataPath", &s.metadata_path),
            })
        } else {
            s.fragmented_pod_spec_definition.as_ref().map(|f| {
                let frag = |name: &str, source: &Option<String>| {
                    source.as_deref().map(|s| {
                        Field::new(
                            format!("{yaml}.specDefinition.fragmentedPodSpecDefinition.{name}"),
                            s,
                        )
                    })
                };
                Shape::Fragmented {
                    scheduler_name: frag("schedulerNamePath", &f.scheduler_name_path),
                    priority_class_name: frag("priorityClassNamePath", &f.priority_class_name_path),
                    labels: frag("labelsPath", &f.labels_path),
                    annotations: frag("annotationsPath", &f.annotations_path),
                }
            })
        }
    });
    let read = c
        .scale_definition
        .as_ref()
        .and_then(|s| s.replicas_path.as_deref())
        .map(|s| Field::new(format!("{yaml}.scaleDefinition.replicasPath"), s));
    let assign = c
        .interpreter_definition
        .as_ref()
        .and_then(|i| i.replicas_assign_path.as_deref())
        .map(|s| {
            Field::new(
                format!("{yaml}.interpreterDefinition.replicasAssignPath"),
                s,
            )
        });
    let replicas = match (assign, read) {
        (Some(a), Some(r)) => Some((a, r)),
        (None, Some(r)) => {
            let again = Field::new(r.yaml.clone(), &r.source);
            Some((r, again))
        }
        _ => None,
    };
    let (suspend, resume) = match &c.suspend_definition {
        Some(s) => (
            actions(
                &format!("{yaml}.suspendDefinition.suspendActions"),
                &s.suspend_actions,
            ),
            actions(
                &format!("{yaml}.suspendDefinition.resumeActions"),
                &s.resume_actions,
            ),
        ),
        None => (Vec::new(), Vec::new()),
    };
    ComponentPlan {
        name: c.name.clone(),
        shape,
        replicas,
        suspend,
        resume,
    }
}

/// Plans kept per definition (by its process-unique id); emptied when full.
const MAX_PLANS: usize = 256;

/// The write plan of `definition`, prepared on first use.
pub(crate) fn of(definition: &Definition) -> Arc<WritePlan> {
    static PLANS: OnceLock<Mutex<HashMap<u64, Arc<WritePlan>>>> = OnceLock::new();
    let plans = PLANS.get_or_init(Mutex::default);
    if let Some(p) = plans.lock().get(&definition.id()) {
        return p.clone();
    }
    let structure = &definition.karta.spec.structure_definition;
    let mut components = Vec::with_capacity(definition.components.len());
    for c in &definition.components {
        let model = if c.parent.is_none() {
            Some(&structure.root_component)
        } else {
            structure.child_components.iter().find(|m| m.name == c.name)
        };
        components.push(match model {
            Some(m) => component(m, &c.path),
            None => ComponentPlan {
                name: c.name.clone(),
                shape: None,
                replicas: None,
                suspend: Vec::new(),
                resume: Vec::new(),
            },
        });
    }
    let plan = Arc::new(WritePlan { components });
    let mut guard = plans.lock();
    if guard.len() >= MAX_PLANS {
        guard.clear();
    }
    guard.insert(definition.id(), plan.clone());
    plan
}
