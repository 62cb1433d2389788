//! Every jq expression of a definition, with the YAML path it is written at, the object it
//! runs on and what its outputs must be (see docs/definitions.md §2: every component path
//! runs on the root object, pod selectors and gang keys on pods).

use crate::definition::compile::MIN_MEMBER_VARS;
use crate::definition::model::{ComponentDefinition, Karta, StatusMatcher};

/// The object an expression receives as `.`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The workload's root object.
    Workload,
    /// A pod (as kartograf caches it: a projection).
    Pod,
}

/// What an expression's outputs are read as.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// Nothing in particular (a matcher expression, a filter).
    Any,
    /// A PodTemplateSpec (`podTemplateSpecPath`).
    PodTemplate,
    /// A PodSpec (`podSpecPath`).
    PodSpec,
    /// An ObjectMeta (`metadataPath`).
    Metadata,
    /// A list of containers (`containersPath`).
    Containers,
    /// One container (`containerPath`).
    Container,
    /// A ResourceRequirements (`resourcesPath`).
    Resources,
    /// A list of pod resource claims (`resourceClaimsPath`).
    ResourceClaims,
    /// A map of strings (`annotationsPath`, `labelsPath`).
    StringMap,
    /// A whole number, or a string holding one (scale paths, `minMemberPath`).
    Count,
    /// A scalar used as text (instance ids, pod keys, the phase).
    Text,
    /// The raw phase; matched against these `byPhase` values.
    Phase(Vec<String>),
    /// An array of conditions; the field names and the values matchers expect.
    Conditions(ConditionsUse),
    /// A suspend/resume path: the field written, and the JSON value written there.
    Assignment(serde_json::Value),
    /// A matcher expression whose first output, as text, must equal this.
    Expected(String),
}

/// How a definition uses the conditions its `conditionsDefinition.path` yields.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConditionsUse {
    /// Field names: type, status, reason (only when a matcher constrains the reason).
    pub fields: Vec<String>,
    /// `(field name, expected value)` of every `byConditions` entry.
    pub expected: Vec<(String, String)>,
}

/// One expression of a definition.
#[derive(Debug, Clone)]
pub struct Target {
    /// YAML path, as validation errors name it.
    pub path: String,
    /// The expression.
    pub source: String,
    /// What it runs on.
    pub on: On,
    /// What its outputs are.
    pub role: Role,
    /// Global variables it may read.
    pub globals: &'static [&'static str],
}

struct Collect {
    out: Vec<Target>,
}

impl Collect {
    fn add(&mut self, path: String, source: Option<&String>, on: On, role: Role) {
        if let Some(source) = source.filter(|s| !s.trim().is_empty()) {
            self.out.push(Target {
                path,
                source: source.clone(),
                on,
                role,
                globals: &[],
            });
        }
    }
}

/// Every expression of `karta`, in document order.
pub fn targets(karta: &Karta) -> Vec<Target> {
    let mut c = Collect { out: Vec::new() };
    let structure = &karta.spec.structure_definition;
    component(
        &mut c,
        &structure.root_component,
        "spec.structureDefinition.rootComponent",
    );
    for (i, child) in structure.child_components.iter().enumerate() {
        component(
            &mut c,
            child,
            &format!("spec.structureDefinition.childComponents[{i}]"),
        );
    }
    if let Some(gang) = &karta.spec.optimization_instructions.gang_scheduling {
        let base = "spec.optimizationInstructions.gangScheduling";
        for (i, group) in gang.pod_groups.iter().enumerate() {
            let gp = format!("{base}.podGroups[{i}]");
            for (j, member) in group.members.iter().enumerate() {
                let mp = format!("{gp}.members[{j}]");
                for (k, key) in member.group_by_key_paths.iter().enumerate() {
                    c.add(
                        format!("{mp}.groupByKeyPaths[{k}]"),
                        Some(key),
                        On::Pod,
                        Role::Text,
                    );
                }
                for (k, filter) in member.filters.iter().enumerate() {
                    c.add(
                        format!("{mp}.filters[{k}]"),
                        Some(filter),
                        On::Pod,
                        Role::Any,
                    );
                }
            }
            min_member(
                &mut c,
                &format!("{gp}.minMemberPath"),
                group.min_member_path.as_ref(),
            );
        }
        if let Some(group) = &gang.pod_group {
            min_member(
                &mut c,
                &format!("{base}.podGroup.minMemberPath"),
                group.min_member_path.as_ref(),
            );
        }
    }
    c.out
}

fn min_member(c: &mut Collect, path: &str, source: Option<&String>) {
    if let Some(source) = source.filter(|s| !s.trim().is_empty()) {
        c.out.push(Target {
            path: path.to_owned(),
            source: source.clone(),
            on: On::Workload,
            role: Role::Count,
            globals: MIN_MEMBER_VARS,
        });
    }
}

fn component(c: &mut Collect, comp: &ComponentDefinition, path: &str) {
    if let Some(spec) = &comp.spec_definition {
        let sp = format!("{path}.specDefinition");
        let w = On::Workload;
        c.add(
            format!("{sp}.podTemplateSpecPath"),
            spec.pod_template_spec_path.as_ref(),
            w,
            Role::PodTemplate,
        );
        c.add(
            format!("{sp}.podSpecPath"),
            spec.pod_spec_path.as_ref(),
            w,
            Role::PodSpec,
        );
        c.add(
            format!("{sp}.metadataPath"),
            spec.metadata_path.as_ref(),
            w,
            Role::Metadata,
        );
        c.add(
            format!("{sp}.extendedResourcesPath"),
            spec.extended_resources_path.as_ref(),
            w,
            Role::Any,
        );
        c.add(
            format!("{sp}.gpuResourceNamesPath"),
            spec.gpu_resource_names_path.as_ref(),
            w,
            Role::Any,
        );
        if let Some(f) = &spec.fragmented_pod_spec_definition {
            let fp = format!("{sp}.fragmentedPodSpecDefinition");
            let fields = [
                ("schedulerNamePath", &f.scheduler_name_path, Role::Text),
                ("labelsPath", &f.labels_path, Role::StringMap),
                ("annotationsPath", &f.annotations_path, Role::StringMap),
                ("resourcesPath", &f.resources_path, Role::Resources),
                (
                    "resourceClaimsPath",
                    &f.resource_claims_path,
                    Role::ResourceClaims,
                ),
                ("podAffinityPath", &f.pod_affinity_path, Role::Any),
                ("nodeAffinityPath", &f.node_affinity_path, Role::Any),
                ("containersPath", &f.containers_path, Role::Containers),
                ("containerPath", &f.container_path, Role::Container),
                (
                    "priorityClassNamePath",
                    &f.priority_class_name_path,
                    Role::Text,
                ),
                ("imagePath", &f.image_path, Role::Text),
            ];
            for (field, value, role) in fields {
                c.add(format!("{fp}.{field}"), value.as_ref(), w, role);
            }
        }
    }
    if let Some(scale) = &comp.scale_definition {
        let sp = format!("{path}.scaleDefinition");
        for (field, value) in [
            ("replicasPath", &scale.replicas_path),
            ("minReplicasPath", &scale.min_replicas_path),
            ("maxReplicasPath", &scale.max_replicas_path),
        ] {
            c.add(
                format!("{sp}.{field}"),
                value.as_ref(),
                On::Workload,
                Role::Count,
            );
        }
    }
    if let Some(status) = &comp.status_definition {
        let sp = format!("{path}.statusDefinition");
        let m = &status.status_mappings;
        let lists: [(&str, &Vec<StatusMatcher>); 8] = [
            ("initializing", &m.initializing),
            ("running", &m.running),
            ("completed", &m.completed),
            ("failed", &m.failed),
            ("degraded", &m.degraded),
            ("suspended", &m.suspended),
            ("suspending", &m.suspending),
            ("resuming", &m.resuming),
        ];
        let matchers = || {
            lists
                .iter()
                .flat_map(|(k, l)| l.iter().enumerate().map(move |(i, m)| (*k, i, m)))
        };
        if let Some(phase) = &status.phase_definition {
            let mut phases: Vec<String> = matchers()
                .filter_map(|(_, _, m)| m.by_phase.clone())
                .filter(|p| !p.is_empty())
                .collect();
            phases.dedup();
            c.add(
                format!("{sp}.phaseDefinition.path"),
                Some(&phase.path),
                On::Workload,
                Role::Phase(phases),
            );
        }
        if let Some(cond) = &status.conditions_definition {
            let mut used = ConditionsUse {
                fields: vec![cond.type_field_name.clone(), cond.status_field_name.clone()],
                expected: Vec::new(),
            };
            for (_, _, m) in matchers() {
                for e in &m.by_conditions {
                    used.expected
                        .push((cond.type_field_name.clone(), e.type_.clone()));
                    if let Some(s) = e.status.as_ref().filter(|s| !s.is_empty()) {
                        used.expected
                            .push((cond.status_field_name.clone(), s.clone()));
                    }
                    if let Some(r) = e.reason.as_ref().filter(|r| !r.is_empty()) {
                        if !used.fields.contains(&cond.reason_field_name) {
                            used.fields.push(cond.reason_field_name.clone());
                        }
                        used.expected
                            .push((cond.reason_field_name.clone(), r.clone()));
                    }
                }
            }
            c.add(
                format!("{sp}.conditionsDefinition.path"),
                Some(&cond.path),
                On::Workload,
                Role::Conditions(used),
            );
        }
        for (key, i, m) in matchers() {
            if let Some(e) = &m.by_expression {
                c.add(
                    format!("{sp}.statusMappings.{key}[{i}].byExpression.expression"),
                    Some(&e.expression),
                    On::Workload,
                    Role::Expected(e.expected_result.clone()),
                );
            }
        }
    }
    if let Some(suspend) = &comp.suspend_definition {
        let sp = format!("{path}.suspendDefinition");
        for (list, actions) in [
            ("suspendActions", &suspend.suspend_actions),
            ("resumeActions", &suspend.resume_actions),
        ] {
            for (i, action) in actions.iter().enumerate() {
                let value = match &action.value {
                    serde_json::Value::String(text) => {
                        serde_json::from_str(text).unwrap_or(serde_json::Value::Null)
                    }
                    other => other.clone(),
                };
                c.add(
                    format!("{sp}.{list}[{i}].path"),
                    Some(&action.path),
                    On::Workload,
                    Role::Assignment(value),
                );
            }
        }
    }
    c.add(
        format!("{path}.instanceIdPath"),
        comp.instance_id_path.as_ref(),
        On::Workload,
        Role::Text,
    );
    if let Some(sel) = &comp.pod_selector {
        let psp = format!("{path}.podSelector");
        if let Some(t) = &sel.component_type_selector {
            c.add(
                format!("{psp}.componentTypeSelector.keyPath"),
                t.key_path.as_ref(),
                On::Pod,
                Role::Text,
            );
        }
        if let Some(i) = &sel.component_instance_selector {
            c.add(
                format!("{psp}.componentInstanceSelector.idPath"),
                Some(&i.id_path),
                On::Pod,
                Role::Text,
            );
        }
        if let Some(r) = &sel.replica_selector {
            c.add(
                format!("{psp}.replicaSelector.keyPath"),
                Some(&r.key_path),
                On::Pod,
                Role::Text,
            );
        }
    }
}
