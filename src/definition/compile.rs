//! Validation and compilation of a [`Karta`] into a [`Definition`] the resolver runs.
//!
//! Every upstream validation rule applies (component names unique, root with a full kind and
//! a status definition, owner references that exist and form no cycle, one pod spec shape,
//! instance id path paired with an instance selector, type selector well-formed, pod-group
//! members defined), plus: every jq expression must parse, pass the safety gate and compile;
//! All errors are collected, each with the YAML path and the expression.
//!
//! Checks kartograf adds where upstream's validator is lenient are warnings, never errors,
//! so every definition upstream accepts loads unchanged: pod selectors on components that
//! have no pods, v2 subgroups naming no component, unnamed or duplicate pod groups, condition
//! matchers without a type, suspend action values that are not JSON-encoded.

use super::breaker::Breaker;
use super::model::*;
use super::plan::*;
use super::{DefinitionError, LoadOptions};
use crate::expr::{CompileError, Expr};
use std::collections::HashMap;

/// A new [`Definition::id`]: a random 64-bit number (never 0). Ids must not repeat within the
/// process (pods remember answers per definition id; the write path keeps plans per id),
/// across every path that compiles: the embedded catalog, directory reloads, Karta objects,
/// `ValidateDefinition` candidates and the CLI. Drawn at random instead of counted, so no
/// folder of the engine holds a counter: two draws agree with probability 2^-64 (a million
/// definitions in one process: about 3 in 10^8).
fn new_id() -> u64 {
    crate::random::next_u64().max(1)
}

/// Global variables of `minMemberPath` expressions.
pub const MIN_MEMBER_VARS: &[&str] = &["$keys", "$pod"];

struct Ctx<'a> {
    source: &'a str,
    errors: Vec<DefinitionError>,
    warnings: Vec<DefinitionError>,
}

impl Ctx<'_> {
    fn error(&mut self, path: &str, message: impl Into<String>) {
        self.errors.push(DefinitionError::new(
            self.source,
            path,
            None,
            message.into(),
        ));
    }

    /// A problem upstream's validator accepts: reported, the definition still loads.
    fn warn(&mut self, path: &str, message: impl Into<String>) {
        self.warnings.push(DefinitionError::new(
            self.source,
            path,
            None,
            message.into(),
        ));
    }

    fn expr_with(
        &mut self,
        path: &str,
        source: &Option<String>,
        vars: &[&str],
    ) -> Option<Compiled> {
        let source = source.as_deref()?;
        self.compile(path, source, vars)
    }

    fn expr(&mut self, path: &str, source: &Option<String>) -> Option<Compiled> {
        self.expr_with(path, source, &[])
    }

    fn compile(&mut self, path: &str, source: &str, vars: &[&str]) -> Option<Compiled> {
        if source.trim().is_empty() {
            self.error(path, "expression is empty");
            return None;
        }
        match Expr::compile_with(source, vars) {
            Ok(expr) => Some(Compiled {
                expr,
                path: path.to_owned(),
            }),
            Err(e) => {
                let message = match e {
                    CompileError::Refused(_) => {
                        format!("expression refused by the safety gate: {e}")
                    }
                    other => format!("invalid jq expression: {other}"),
                };
                self.errors.push(DefinitionError::new(
                    self.source,
                    path,
                    Some(source),
                    message,
                ));
                None
            }
        }
    }
}

/// The slug upstream uses for a root kind: `<group with dots as dashes>-<kind>-<version>`.
pub fn slug(gvk: &GroupVersionKind) -> String {
    let group = if gvk.group.is_empty() {
        "core".to_owned()
    } else {
        gvk.group.replace('.', "-")
    };
    format!("{group}-{}-{}", gvk.kind.to_lowercase(), gvk.version)
}

/// A component definition with its YAML path.
type Located<'k> = (&'k ComponentDefinition, String);

impl Definition {
    /// Validates and compiles `karta`, read from `source`, with the given origin label and
    /// the loader's `options`.
    /// The phases: the document header; component names (unique, before anything else can
    /// be checked); the root's rules; owner references and cycles; each component's shape;
    /// then compilation of every component, parents first, and of the gang plan. Every
    /// error of a phase is collected, and expressions are compiled even when a structural
    /// rule failed, so one pass reports everything.
    pub fn compile(
        karta: Karta,
        source: &str,
        origin: &str,
        options: LoadOptions,
    ) -> Result<Definition, Vec<DefinitionError>> {
        let mut cx = Ctx {
            source,
            errors: Vec::new(),
            warnings: Vec::new(),
        };
        check_header(&mut cx, &karta);
        let phase_precedence = phase_precedence(&mut cx, &karta, origin, options);
        let structure = &karta.spec.structure_definition;
        let located = locate_components(structure);
        let Some(index) = unique_names(&mut cx, &located) else {
            return Err(cx.errors);
        };
        let root_kind = check_root(&mut cx, &located[0]);
        let parents = link_parents(&mut cx, &located, &index);
        for (c, path) in &located {
            check_component_shape(&mut cx, c, path);
        }
        if cx.errors.is_empty() {
            check_cycles(&mut cx, &located, &parents);
        }
        if !cx.errors.is_empty() {
            // Expressions are still checked so every error is reported at once.
            for (c, path) in &located {
                let _ = compile_component(&mut cx, c, path, None);
            }
            compile_gang(&mut cx, &karta, &index);
            return Err(cx.errors);
        }
        let components = compile_components(&mut cx, &located, &parents);
        let names: HashMap<&str, usize> = components
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_str(), i))
            .collect();
        let gang = compile_gang(&mut cx, &karta, &names);
        if !cx.errors.is_empty() {
            return Err(cx.errors);
        }
        let name = if karta.metadata.name.is_empty() {
            slug(&root_kind)
        } else {
            karta.metadata.name.clone()
        };
        let breaker = Breaker::new(&name);
        Ok(Definition {
            phase_precedence,
            breaker,
            published: std::sync::atomic::AtomicU64::new(0),
            name,
            origin: origin.to_owned(),
            source: source.to_owned(),
            root_kind,
            additional_child_kinds: structure.additional_child_kinds.clone(),
            karta,
            components,
            gang,
            warnings: cx.warnings,
            id: new_id(),
        })
    }
}

/// The [`PHASE_PRECEDENCE`] annotation: absent is kartograf's precedence for the embedded
/// catalog and the loader's (`--phase-precedence`, in `options`) for any other origin; any other value
/// than the two known ones is an error.
fn phase_precedence(
    cx: &mut Ctx<'_>,
    karta: &Karta,
    origin: &str,
    options: LoadOptions,
) -> PhasePrecedence {
    let Some(value) = karta.metadata.annotations.get(PHASE_PRECEDENCE) else {
        if origin == super::catalog::EMBEDDED {
            return PhasePrecedence::Kartograf;
        }
        return options.phase_precedence;
    };
    PhasePrecedence::parse(value).unwrap_or_else(|| {
        cx.error(
            &format!("metadata.annotations[\"{PHASE_PRECEDENCE}\"]"),
            format!(
                "must be `kartograf` or `workload-map`, found `{}`",
                crate::excerpt::echo(value)
            ),
        );
        PhasePrecedence::default()
    })
}

/// `apiVersion` and `kind` of the document.
fn check_header(cx: &mut Ctx<'_>, karta: &Karta) {
    if karta.api_version != API_VERSION {
        cx.error(
            "apiVersion",
            format!("must be `{API_VERSION}`, found `{}`", karta.api_version),
        );
    }
    if karta.kind != KIND {
        cx.error("kind", format!("must be `{KIND}`, found `{}`", karta.kind));
    }
}

/// The root and child components with their YAML paths, root first.
fn locate_components(structure: &StructureDefinition) -> Vec<Located<'_>> {
    std::iter::once((
        &structure.root_component,
        "spec.structureDefinition.rootComponent".to_owned(),
    ))
    .chain(
        structure
            .child_components
            .iter()
            .enumerate()
            .map(|(i, c)| (c, format!("spec.structureDefinition.childComponents[{i}]"))),
    )
    .collect()
}

/// Component names, each unique and not empty: the index by name, or `None` (errors
/// reported) when they are not.
fn unique_names<'k>(cx: &mut Ctx<'_>, located: &[Located<'k>]) -> Option<HashMap<&'k str, usize>> {
    let before = cx.errors.len();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, (c, path)) in located.iter().enumerate() {
        if c.name.is_empty() {
            cx.error(&format!("{path}.name"), "component name is empty");
        } else if index.insert(c.name.as_str(), i).is_some() {
            cx.error(
                &format!("{path}.name"),
                format!("component name `{}` is not unique", c.name),
            );
        }
    }
    (cx.errors.len() == before).then_some(index)
}

/// The root's rules (a full kind, no owner, a status definition); returns its kind.
fn check_root(cx: &mut Ctx<'_>, (root, root_path): &Located<'_>) -> GroupVersionKind {
    let root_kind = root.kind.clone().unwrap_or_default();
    if root_kind.version.is_empty()
        || root_kind.kind.is_empty()
        || (root_kind.group.is_empty() && root_kind.kind != "Pod")
    {
        cx.error(
            &format!("{root_path}.kind"),
            "root component must have a full kind (group, version, kind)",
        );
    }
    if root.owner_ref.is_some() {
        cx.error(
            &format!("{root_path}.ownerRef"),
            "root component cannot have an owner reference",
        );
    }
    if root.status_definition.is_none() {
        cx.error(
            &format!("{root_path}.statusDefinition"),
            "root component must have a status definition",
        );
    }
    root_kind
}

/// Each child's parent (by its owner reference), reporting references to no component.
fn link_parents(
    cx: &mut Ctx<'_>,
    located: &[Located<'_>],
    index: &HashMap<&str, usize>,
) -> Vec<Option<usize>> {
    let mut parents: Vec<Option<usize>> = vec![None; located.len()];
    for (i, (c, path)) in located.iter().enumerate().skip(1) {
        match c.owner_ref.as_deref() {
            None | Some("") => cx.error(
                &format!("{path}.ownerRef"),
                format!("child component `{}` has no owner reference", c.name),
            ),
            Some(owner) => match index.get(owner) {
                Some(&p) => parents[i] = Some(p),
                None => cx.error(
                    &format!("{path}.ownerRef"),
                    format!(
                        "child component `{}` names owner `{owner}`, which is not a component",
                        c.name
                    ),
                ),
            },
        }
    }
    parents
}

/// Owner references that form a cycle.
fn check_cycles(cx: &mut Ctx<'_>, located: &[Located<'_>], parents: &[Option<usize>]) {
    for (i, (c, path)) in located.iter().enumerate() {
        let mut seen = vec![false; located.len()];
        let mut at = Some(i);
        while let Some(j) = at {
            if seen[j] {
                cx.error(
                    &format!("{path}.ownerRef"),
                    format!("ownership cycle involving component `{}`", c.name),
                );
                break;
            }
            seen[j] = true;
            at = parents[j];
        }
    }
}

/// Compiles every component, parents before children (definition order otherwise), links
/// the children and checks that selectors sit on components with pods.
fn compile_components(
    cx: &mut Ctx<'_>,
    located: &[Located<'_>],
    parents: &[Option<usize>],
) -> Vec<Component> {
    let mut order: Vec<usize> = Vec::with_capacity(located.len());
    fn visit(i: usize, parents: &[Option<usize>], order: &mut Vec<usize>) {
        if order.contains(&i) {
            return;
        }
        if let Some(p) = parents[i] {
            visit(p, parents, order);
        }
        order.push(i);
    }
    for i in 0..located.len() {
        visit(i, parents, &mut order);
    }
    let position: HashMap<usize, usize> =
        order.iter().enumerate().map(|(pos, &i)| (i, pos)).collect();
    let mut components: Vec<Component> = Vec::with_capacity(order.len());
    for &i in &order {
        let (c, path) = &located[i];
        let parent = parents[i].map(|p| position[&p]);
        if let Some(component) = compile_component(cx, c, path, parent) {
            components.push(component);
        }
    }
    if cx.errors.is_empty() {
        for i in 0..components.len() {
            if let Some(p) = components[i].parent {
                components[p].children.push(i);
            }
        }
        check_selectors_have_pods(cx, &components);
    }
    components
}

fn check_component_shape(cx: &mut Ctx<'_>, c: &ComponentDefinition, path: &str) {
    if let Some(spec) = &c.spec_definition {
        let shapes = [
            spec.pod_template_spec_path.is_some(),
            spec.pod_spec_path.is_some(),
            spec.fragmented_pod_spec_definition.is_some(),
        ];
        if shapes.iter().filter(|s| **s).count() > 1 {
            cx.error(
                &format!("{path}.specDefinition"),
                format!("component `{}` has multiple pod spec definitions", c.name),
            );
        }
    }
    let instance_selector = c
        .pod_selector
        .as_ref()
        .and_then(|s| s.component_instance_selector.as_ref());
    match (&c.instance_id_path, instance_selector) {
        (Some(_), None) => cx.error(
            &format!("{path}.instanceIdPath"),
            format!("component `{}` has an instance id path but no podSelector.componentInstanceSelector", c.name),
        ),
        (None, Some(_)) => cx.error(
            &format!("{path}.podSelector.componentInstanceSelector"),
            format!("component `{}` has a component instance selector but no instanceIdPath", c.name),
        ),
        _ => {}
    }
    if let Some(sel) = c
        .pod_selector
        .as_ref()
        .and_then(|s| s.component_type_selector.as_ref())
    {
        let sel_path = format!("{path}.podSelector.componentTypeSelector");
        if sel.key_path.is_none() && sel.match_labels.is_none() {
            cx.error(&sel_path, "needs keyPath or matchLabels");
        }
        if sel.value.is_some() && sel.key_path.is_none() {
            cx.error(&format!("{sel_path}.value"), "value requires keyPath");
        }
        if let Some(labels) = &sel.match_labels {
            if labels.is_empty() {
                cx.error(&format!("{sel_path}.matchLabels"), "must not be empty");
            }
            for (k, v) in labels {
                if let Err(e) = check_label_key(k) {
                    cx.error(
                        &format!("{sel_path}.matchLabels[{k:?}]"),
                        format!("invalid label key `{k}`: {e}"),
                    );
                }
                if let Err(e) = check_label_value(v) {
                    cx.error(
                        &format!("{sel_path}.matchLabels[{k:?}]"),
                        format!("invalid label value `{v}`: {e}"),
                    );
                }
            }
        }
    }
}

fn label_name(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters");
    }
    let ok_edge = |c: char| c.is_ascii_alphanumeric();
    let ok_mid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !s.starts_with(ok_edge) || !s.ends_with(ok_edge) || !s.chars().all(ok_mid) {
        return Err("must be alphanumeric, '-', '_' or '.', starting and ending alphanumeric");
    }
    Ok(())
}

fn check_label_key(key: &str) -> Result<(), &'static str> {
    match key.split_once('/') {
        Some((prefix, name)) => {
            let dns = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|p| {
                    !p.is_empty()
                        && p.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !p.starts_with('-')
                        && !p.ends_with('-')
                });
            if !dns {
                return Err("prefix must be a DNS subdomain");
            }
            label_name(name)
        }
        None => label_name(key),
    }
}

fn check_label_value(value: &str) -> Result<(), &'static str> {
    if value.is_empty() {
        Ok(())
    } else {
        label_name(value)
    }
}

fn compile_component(
    cx: &mut Ctx<'_>,
    c: &ComponentDefinition,
    path: &str,
    parent: Option<usize>,
) -> Option<Component> {
    let before = cx.errors.len();
    let spec = c
        .spec_definition
        .as_ref()
        .and_then(|s| compile_spec(cx, s, &format!("{path}.specDefinition")));
    let (extended_resources, gpu_resource_names) = match &c.spec_definition {
        Some(s) => (
            cx.expr(
                &format!("{path}.specDefinition.extendedResourcesPath"),
                &s.extended_resources_path,
            ),
            cx.expr(
                &format!("{path}.specDefinition.gpuResourceNamesPath"),
                &s.gpu_resource_names_path,
            ),
        ),
        None => (None, None),
    };
    let scale = c.scale_definition.clone().unwrap_or_default();
    let sp = format!("{path}.scaleDefinition");
    let replicas = cx.expr(&format!("{sp}.replicasPath"), &scale.replicas_path);
    let min_replicas = cx.expr(&format!("{sp}.minReplicasPath"), &scale.min_replicas_path);
    let max_replicas = cx.expr(&format!("{sp}.maxReplicasPath"), &scale.max_replicas_path);
    let status = c
        .status_definition
        .as_ref()
        .map(|s| compile_status(cx, s, &format!("{path}.statusDefinition")));
    // The extension (Karmada's interpreter): compiled once, with the definition.
    let mut interpreter = super::plan::Interpreter::default();
    if let Some(ext) = &c.interpreter_definition {
        let ip = format!("{path}.interpreterDefinition");
        interpreter.name_path =
            cx.expr(&format!("{ip}.componentNamePath"), &ext.component_name_path);
        if let Some(source) = &ext.replicas_assign_path {
            match super::assign::AssignPath::parse(source) {
                Ok(parsed) => interpreter.assign_path = Some(parsed),
                Err(e) => cx.error(&format!("{ip}.replicasAssignPath"), e.to_string()),
            }
        }
    }
    if let Some(suspend) = &c.suspend_definition {
        let sp = format!("{path}.suspendDefinition");
        for (list, actions) in [
            ("suspendActions", &suspend.suspend_actions),
            ("resumeActions", &suspend.resume_actions),
        ] {
            for (i, action) in actions.iter().enumerate() {
                let ap = format!("{sp}.{list}[{i}]");
                cx.compile(&format!("{ap}.path"), &action.path, &[]);
                if let serde_json::Value::String(text) = &action.value
                    && serde_json::from_str::<serde_json::Value>(text).is_err()
                {
                    cx.warn(
                        &format!("{ap}.value"),
                        format!("`{text}` is not JSON-encoded (write strings as \"\\\"x\\\"\")"),
                    );
                }
            }
        }
    }
    let instance_ids = cx.expr(&format!("{path}.instanceIdPath"), &c.instance_id_path);
    let selector = c.pod_selector.clone().unwrap_or_default();
    let psp = format!("{path}.podSelector");
    let type_selector = selector.component_type_selector.map(|t| TypeSelector {
        key_path: cx.expr(&format!("{psp}.componentTypeSelector.keyPath"), &t.key_path),
        value: t.value,
        match_labels: t.match_labels.unwrap_or_default(),
    });
    let instance_selector = selector.component_instance_selector.and_then(|s| {
        cx.compile(
            &format!("{psp}.componentInstanceSelector.idPath"),
            &s.id_path,
            &[],
        )
    });
    let replica_selector = selector
        .replica_selector
        .and_then(|s| cx.compile(&format!("{psp}.replicaSelector.keyPath"), &s.key_path, &[]));
    if cx.errors.len() > before {
        return None;
    }
    Some(Component {
        name: c.name.clone(),
        kind: c.kind.clone(),
        parent,
        children: Vec::new(),
        spec,
        extended_resources,
        gpu_resource_names,
        replicas,
        min_replicas,
        max_replicas,
        status,
        instance_ids,
        type_selector,
        instance_selector,
        replica_selector,
        interpreter,
        path: path.to_owned(),
    })
}

fn compile_spec(cx: &mut Ctx<'_>, s: &SpecDefinition, path: &str) -> Option<PodSpecSource> {
    if let Some(p) = &s.pod_template_spec_path {
        return cx
            .compile(&format!("{path}.podTemplateSpecPath"), p, &[])
            .map(PodSpecSource::Template);
    }
    if let Some(p) = &s.pod_spec_path {
        let spec = cx.compile(&format!("{path}.podSpecPath"), p, &[]);
        let metadata = cx.expr(&format!("{path}.metadataPath"), &s.metadata_path);
        return spec.map(|spec| PodSpecSource::Spec { spec, metadata });
    }
    if let Some(f) = &s.fragmented_pod_spec_definition {
        let fp = format!("{path}.fragmentedPodSpecDefinition");
        // Paths resource accounting does not read are still validated.
        for (field, value) in [
            ("schedulerNamePath", &f.scheduler_name_path),
            ("labelsPath", &f.labels_path),
            ("podAffinityPath", &f.pod_affinity_path),
            ("nodeAffinityPath", &f.node_affinity_path),
            ("priorityClassNamePath", &f.priority_class_name_path),
            ("imagePath", &f.image_path),
        ] {
            cx.expr(&format!("{fp}.{field}"), value);
        }
        return Some(PodSpecSource::Fragmented {
            resources: cx.expr(&format!("{fp}.resourcesPath"), &f.resources_path),
            containers: cx.expr(&format!("{fp}.containersPath"), &f.containers_path),
            container: cx.expr(&format!("{fp}.containerPath"), &f.container_path),
            resource_claims: cx.expr(&format!("{fp}.resourceClaimsPath"), &f.resource_claims_path),
            annotations: cx.expr(&format!("{fp}.annotationsPath"), &f.annotations_path),
        });
    }
    // `metadataPath` alone declares no pod spec.
    if let Some(p) = &s.metadata_path {
        cx.compile(&format!("{path}.metadataPath"), p, &[]);
    }
    None
}

fn compile_status(cx: &mut Ctx<'_>, s: &StatusDefinition, path: &str) -> StatusPlan {
    let phase = s
        .phase_definition
        .as_ref()
        .and_then(|p| cx.compile(&format!("{path}.phaseDefinition.path"), &p.path, &[]));
    let conditions = s.conditions_definition.as_ref().and_then(|c| {
        let compiled = cx.compile(&format!("{path}.conditionsDefinition.path"), &c.path, &[])?;
        Some(ConditionsPlan {
            path: compiled,
            type_field: c.type_field_name.clone(),
            status_field: c.status_field_name.clone(),
            message_field: c.message_field_name.clone(),
            reason_field: c.reason_field_name.clone(),
        })
    });
    let m = &s.status_mappings;
    let lists = [
        (StatusKind::Resuming, "resuming", &m.resuming),
        (StatusKind::Suspending, "suspending", &m.suspending),
        (StatusKind::Suspended, "suspended", &m.suspended),
        (StatusKind::Running, "running", &m.running),
        (StatusKind::Failed, "failed", &m.failed),
        (StatusKind::Completed, "completed", &m.completed),
        (StatusKind::Initializing, "initializing", &m.initializing),
        (StatusKind::Degraded, "degraded", &m.degraded),
    ];
    let mut mappings = Vec::new();
    for (kind, key, matchers) in lists {
        let mut plans = Vec::new();
        for (i, matcher) in matchers.iter().enumerate() {
            let mp = format!("{path}.statusMappings.{key}[{i}]");
            for (j, cond) in matcher.by_conditions.iter().enumerate() {
                if cond.type_.is_empty() {
                    cx.warn(
                        &format!("{mp}.byConditions[{j}].type"),
                        "condition type is empty: this matcher never matches",
                    );
                }
            }
            let by_expression = matcher.by_expression.as_ref().and_then(|e| {
                cx.compile(&format!("{mp}.byExpression.expression"), &e.expression, &[])
                    .map(|c| (c, e.expected_result.clone()))
            });
            plans.push(MatcherPlan {
                by_phase: matcher.by_phase.clone().filter(|p| !p.is_empty()),
                by_conditions: matcher.by_conditions.clone(),
                by_expression,
            });
        }
        if !plans.is_empty() {
            mappings.push((kind, plans));
        }
    }
    StatusPlan {
        phase,
        conditions,
        mappings,
    }
}

fn check_selectors_have_pods(cx: &mut Ctx<'_>, components: &[Component]) {
    fn has_pods(components: &[Component], i: usize) -> bool {
        components[i].pod_bearing()
            || components[i]
                .children
                .iter()
                .any(|&c| has_pods(components, c))
    }
    for (i, c) in components.iter().enumerate() {
        let has_selector = c.type_selector.is_some()
            || c.instance_selector.is_some()
            || c.replica_selector.is_some();
        if has_selector && !has_pods(components, i) {
            cx.warn(
                &format!("{}.podSelector", c.path),
                format!("component `{}` has a pod selector but neither it nor its children declare a pod spec: the pods it selects are placed in no component", c.name),
            );
        }
    }
}

fn compile_gang<T: std::borrow::Borrow<str> + std::hash::Hash + Eq>(
    cx: &mut Ctx<'_>,
    karta: &Karta,
    names: &HashMap<T, usize>,
) -> Option<GangPlan> {
    let gang = karta
        .spec
        .optimization_instructions
        .gang_scheduling
        .as_ref()?;
    let base = "spec.optimizationInstructions.gangScheduling";
    let lookup = |name: &str| names.get(name).copied();
    let mut groups = Vec::new();
    let mut seen = Vec::new();
    for (i, group) in gang.pod_groups.iter().enumerate() {
        let gp = format!("{base}.podGroups[{i}]");
        if group.name.is_empty() {
            cx.warn(&format!("{gp}.name"), "pod group has no name");
        } else if seen.contains(&group.name) {
            cx.warn(
                &format!("{gp}.name"),
                format!("pod group name `{}` is not unique", group.name),
            );
        }
        seen.push(group.name.clone());
        let mut members = Vec::new();
        for (j, member) in group.members.iter().enumerate() {
            let mp = format!("{gp}.members[{j}]");
            let component = lookup(&member.component_name);
            if component.is_none() {
                cx.error(
                    &format!("{mp}.componentName"),
                    format!(
                        "pod-group member `{}` is not a component",
                        member.component_name
                    ),
                );
            }
            let keys = member
                .group_by_key_paths
                .iter()
                .enumerate()
                .filter_map(|(k, p)| cx.compile(&format!("{mp}.groupByKeyPaths[{k}]"), p, &[]))
                .collect();
            let filters = member
                .filters
                .iter()
                .enumerate()
                .filter_map(|(k, p)| cx.compile(&format!("{mp}.filters[{k}]"), p, &[]))
                .collect();
            if let Some(component) = component {
                members.push(MemberPlan {
                    component,
                    keys,
                    filters,
                });
            }
        }
        let min_member = cx.expr_with(
            &format!("{gp}.minMemberPath"),
            &group.min_member_path,
            MIN_MEMBER_VARS,
        );
        groups.push(PodGroupPlan {
            name: group.name.clone(),
            members,
            min_member,
        });
    }
    let v2 = gang.pod_group.as_ref().map(|g| {
        let gp = format!("{base}.podGroup");
        if g.name.is_empty() {
            cx.warn(&format!("{gp}.name"), "pod group has no name");
        }
        let mut subgroups = Vec::new();
        for (j, sub) in g.sub_groups.iter().enumerate() {
            match lookup(&sub.component_name) {
                Some(c) => subgroups.push(c),
                None => cx.warn(
                    &format!("{gp}.subGroups[{j}].componentName"),
                    format!(
                        "subgroup component `{}` is not a component: the subgroup is ignored",
                        sub.component_name
                    ),
                ),
            }
        }
        let min_member = cx.expr_with(
            &format!("{gp}.minMemberPath"),
            &g.min_member_path,
            MIN_MEMBER_VARS,
        );
        PodGroupV2Plan {
            name: g.name.clone(),
            subgroups,
            min_member,
        }
    });
    match v2 {
        Some(plan) => Some(GangPlan::PodGroup(plan)),
        None if !groups.is_empty() => Some(GangPlan::PodGroups(groups)),
        None => None,
    }
}
