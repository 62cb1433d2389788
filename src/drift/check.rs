//! Checking one definition against the schemas of the kinds its expressions run on.

use super::crd::{Crd, CrdVersion};
use super::report::{DefinitionReport, Finding, NotChecked, Severity, Stats, code};
use super::schema::{self, Core, Node, Overlay, Problem, Shape, Walk, walk};
use super::targets::{On, Role, Target, targets};
use crate::definition::catalog::version_priority;
use crate::definition::{Definition, GroupVersionKind};
use crate::expr::paths::{self, Analysis, FieldPath, Output, Root, Step};
use crate::expr::value::Keep;
use serde_json::Value as Json;
use std::sync::OnceLock;

/// The schemas a check uses: CRDs (files or a cluster) and the embedded core schema.
#[derive(Debug, Default)]
pub struct Schemas {
    /// The CRDs.
    pub crds: Vec<Crd>,
}

impl Schemas {
    /// Schemas over `crds`.
    pub fn new(crds: Vec<Crd>) -> Schemas {
        Schemas { crds }
    }

    /// The CRD of `group`/`kind` (the first given, when several are).
    pub fn crd(&self, group: &str, kind: &str) -> Option<&Crd> {
        self.crds
            .iter()
            .find(|c| c.group == group && c.kind == kind)
    }

    /// Every CRD given for `group`/`kind`, in order: several releases of one framework
    /// (release lines) can be checked in one run.
    pub fn crds_of<'a>(&'a self, group: &'a str, kind: &'a str) -> impl Iterator<Item = &'a Crd> {
        self.crds
            .iter()
            .filter(move |c| c.group == group && c.kind == kind)
    }
}

/// The object schema expressions run on, and how to name it.
#[derive(Clone)]
struct Subject<'a> {
    node: Node<'a>,
    label: String,
    /// Kept as kartograf caches pods (a projection).
    projected: bool,
    /// The CRD and the version, when it is one.
    crd: Option<(&'a Crd, &'a CrdVersion)>,
}

fn pod_subject() -> Option<Subject<'static>> {
    Some(Subject {
        node: Core::get().schema(schema::POD)?,
        label: "v1 Pod (as kartograf caches pods)".to_owned(),
        projected: true,
        crd: None,
    })
}

fn crd_subject<'a>(crd: &'a Crd, version: &'a CrdVersion) -> Subject<'a> {
    Subject {
        node: Node {
            value: &version.schema,
            pruned: true,
        },
        label: format!("{} ({})", crd.describe(&version.name), crd.source),
        projected: false,
        crd: Some((crd, version)),
    }
}

/// A synthetic array schema of `item` (a core schema name).
fn array_of(item: &'static str) -> Node<'static> {
    static CONTAINERS: OnceLock<Json> = OnceLock::new();
    static CLAIMS: OnceLock<Json> = OnceLock::new();
    let cell = if item == schema::CONTAINER {
        &CONTAINERS
    } else {
        &CLAIMS
    };
    let value = cell.get_or_init(|| {
        serde_json::json!({"type": "array", "items": {"$ref": format!("#/components/schemas/{item}")}})
    });
    Node {
        value,
        pruned: false,
    }
}

/// What a spec role's output must be: a core schema for overlays, and a path below the
/// output that must exist in a concrete schema.
fn role_schema(role: &Role) -> Option<(Node<'static>, &'static [&'static str], &'static str)> {
    let core = Core::get();
    Some(match role {
        Role::PodTemplate => (
            core.schema(schema::POD_TEMPLATE_SPEC)?,
            &["spec", "containers"],
            "a PodTemplateSpec",
        ),
        Role::PodSpec => (core.schema(schema::POD_SPEC)?, &["containers"], "a PodSpec"),
        Role::Metadata => (core.schema(schema::OBJECT_META)?, &[], "an ObjectMeta"),
        Role::Containers => (
            array_of(schema::CONTAINER),
            &["[]", "resources"],
            "a list of containers",
        ),
        Role::Container => (
            core.schema(schema::CONTAINER)?,
            &["resources"],
            "a container",
        ),
        Role::Resources => (
            core.schema(schema::RESOURCES)?,
            &[],
            "a ResourceRequirements",
        ),
        Role::ResourceClaims => (
            array_of(schema::POD_RESOURCE_CLAIM),
            &[],
            "a list of pod resource claims",
        ),
        _ => return None,
    })
}

fn steps_of(spec: &[&str]) -> Vec<Step> {
    spec.iter()
        .map(|s| {
            if *s == "[]" {
                Step::Each
            } else {
                Step::Key((*s).to_owned())
            }
        })
        .collect()
}

/// One analysed target.
struct Analysed {
    target: Target,
    analysis: Analysis,
}

/// Checks one definition against `schemas`. `covered` are the root kinds all definitions in
/// effect cover (a newer CRD version that one of them covers is not reported).
///
/// When several CRDs of the root kind are given (releases of one framework), the definition
/// is checked against each; the report holds the findings of all of them, its `schema`
/// names every one, and its counts are those of the first.
pub fn check_definition(
    def: &Definition,
    schemas: &Schemas,
    covered: &[GroupVersionKind],
) -> DefinitionReport {
    let root = &def.root_kind;
    let is_core = (root.group.is_empty() && root.kind == "Pod")
        || Core::get()
            .kind(&root.group, &root.version, &root.kind)
            .is_some();
    let lines: Vec<&Crd> = if is_core {
        Vec::new()
    } else {
        schemas.crds_of(&root.group, &root.kind).collect()
    };
    let mut reports = lines
        .iter()
        .map(|crd| check_against(def, schemas, Some(crd), covered));
    let Some(mut first) = reports.next() else {
        return check_against(def, schemas, None, covered);
    };
    for r in reports {
        if let Some(label) = r.schema {
            first.schema = Some(match first.schema.take() {
                Some(s) => format!("{s}; {label}"),
                None => label,
            });
        }
        first.findings.extend(r.findings);
        for n in r.not_checked {
            if !first.not_checked.contains(&n) {
                first.not_checked.push(n);
            }
        }
    }
    dedup(&mut first.findings);
    first
}

/// [`check_definition`] against one CRD of the root kind (`None`: the first given).
fn check_against(
    def: &Definition,
    schemas: &Schemas,
    root_crd: Option<&Crd>,
    covered: &[GroupVersionKind],
) -> DefinitionReport {
    let root = &def.root_kind;
    let mut report = DefinitionReport {
        name: def.name.clone(),
        source: def.source.clone(),
        root_kind: root.to_string(),
        schema: None,
        findings: Vec::new(),
        not_checked: Vec::new(),
        stats: Stats::default(),
    };
    let analysed: Vec<Analysed> = targets(&def.karta)
        .into_iter()
        .map(|target| {
            let analysis = paths::analyse(&target.source, target.globals, &["$pod"])
                .unwrap_or_else(|e| Analysis {
                    unchecked: vec![format!("the expression {e}")],
                    ..Analysis::default()
                });
            Analysed { target, analysis }
        })
        .collect();
    report.stats.expressions = analysed.len();
    report.stats.analysed = analysed
        .iter()
        .filter(|a| a.analysis.unchecked.is_empty())
        .count();
    for a in &analysed {
        for reason in &a.analysis.unchecked {
            report.not_checked.push(NotChecked {
                path: a.target.path.clone(),
                expression: a.target.source.clone(),
                reason: reason.clone(),
            });
        }
    }

    let core = Core::get();
    let is_pod = root.group.is_empty() && root.kind == "Pod";
    let mut cx = Cx {
        report: &mut report,
    };
    // The schema of the root kind.
    let workload: Option<Subject<'_>> = if is_pod {
        pod_subject()
    } else if let Some(node) = core.kind(&root.group, &root.version, &root.kind) {
        Some(Subject {
            node,
            label: format!("{} {} (Kubernetes)", root.api_version(), root.kind),
            projected: false,
            crd: None,
        })
    } else if let Some(crd) = root_crd.or_else(|| schemas.crd(&root.group, &root.kind)) {
        cx.versions(crd, root, covered, &analysed);
        crd.version(&root.version)
            .filter(|v| v.served)
            .map(|v| crd_subject(crd, v))
    } else {
        None
    };
    match &workload {
        Some(s) => cx.report.schema = Some(s.label.clone()),
        None => {
            let why = if schemas.crd(&root.group, &root.kind).is_some() {
                format!("{} is not served by its CRD", root)
            } else {
                format!("no CRD for {}/{} given", root.group, root.kind)
            };
            for a in analysed.iter().filter(|a| a.target.on == On::Workload) {
                cx.report.not_checked.push(NotChecked {
                    path: a.target.path.clone(),
                    expression: a.target.source.clone(),
                    reason: why.clone(),
                });
            }
        }
    }
    let pod = pod_subject();
    let overlays = workload
        .as_ref()
        .map(|w| overlays(w, &analysed))
        .unwrap_or_default();
    for a in &analysed {
        let on = match a.target.on {
            On::Workload => workload.as_ref(),
            On::Pod => pod.as_ref(),
        };
        cx.target(a, on, pod.as_ref(), &overlays);
    }
    cx.children(def, schemas);
    dedup(&mut report.findings);
    report
}

/// Overlays for the open parts of the workload schema that spec paths say are pod
/// templates, pod specs, containers, ….
fn overlays<'a>(workload: &Subject<'a>, analysed: &[Analysed]) -> Vec<Overlay<'a>> {
    let mut out = Vec::new();
    if workload.projected {
        return out;
    }
    for a in analysed.iter().filter(|a| a.target.on == On::Workload) {
        let Some((core_node, _, _)) = role_schema(&a.target.role) else {
            continue;
        };
        for output in &a.analysis.outputs {
            let Output::Field(p) = output else { continue };
            if p.root != Root::Input {
                continue;
            }
            let open = match walk(workload.node, true, &p.steps, &[]) {
                Walk::Open(_) | Walk::Undeclared(..) => true,
                Walk::Found(n) => matches!(
                    n.shape(),
                    Shape::Any
                        | Shape::Object {
                            properties: None,
                            values: None,
                            open: true,
                            ..
                        }
                ),
                _ => false,
            };
            let at = schema::normalize(&p.steps);
            if open && !out.iter().any(|o: &Overlay<'_>| o.at == at) {
                out.push(Overlay {
                    at,
                    node: core_node,
                });
            }
        }
    }
    out
}

/// Where `steps` leaves the pod projection (the depth of the first dropped step), read with
/// the packer's own rule ([`Keep::field`], [`Keep::item`]): what the cache keeps is what
/// this says is kept.
fn leaves_projection(steps: &[Step]) -> Option<usize> {
    let mut keep = &crate::model::POD_PROJECTION;
    for (depth, step) in steps.iter().enumerate() {
        if matches!(keep, Keep::All) {
            return None;
        }
        let next = match step {
            Step::Key(k) => keep.field(k),
            Step::Each | Step::Index(_) | Step::Dynamic | Step::Slice => keep.item(),
        };
        match next {
            Some(rule) => keep = rule,
            None => return Some(depth),
        }
    }
    None
}

struct Cx<'r> {
    report: &'r mut DefinitionReport,
}

fn prefix(p: &FieldPath, depth: usize) -> String {
    FieldPath {
        root: p.root.clone(),
        steps: p.steps[..depth.min(p.steps.len())].to_vec(),
    }
    .to_string()
}

fn join(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

impl Cx<'_> {
    fn push(&mut self, f: Finding) {
        self.report.findings.push(f);
    }

    fn finding(
        &mut self,
        severity: Severity,
        code: &'static str,
        target: Option<&Target>,
        (field, at): (String, String),
        schema: &str,
        message: String,
    ) {
        self.push(Finding {
            severity,
            code,
            path: target.map(|t| t.path.clone()).unwrap_or_default(),
            expression: target.map(|t| t.source.clone()).unwrap_or_default(),
            field,
            at,
            schema: schema.to_owned(),
            present_in: Vec::new(),
            message,
        });
    }

    /// Version rules of the root kind's CRD.
    fn versions(
        &mut self,
        crd: &Crd,
        root: &GroupVersionKind,
        covered: &[GroupVersionKind],
        analysed: &[Analysed],
    ) {
        let served: Vec<String> = crd
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect();
        let schema = format!("CRD {} ({})", crd.name, crd.source);
        match crd.version(&root.version) {
            Some(v) if v.served => {
                if v.deprecated {
                    let others: Vec<String> =
                        served.iter().filter(|n| **n != v.name).cloned().collect();
                    self.finding(
                        Severity::Warning,
                        code::VERSION_DEPRECATED,
                        None,
                        (String::new(), String::new()),
                        &schema,
                        if others.is_empty() {
                            format!("{root} is deprecated by its CRD")
                        } else {
                            format!(
                                "{root} is deprecated by its CRD, which also serves {}",
                                join(&others)
                            )
                        },
                    );
                }
            }
            _ => self.finding(
                Severity::Error,
                code::VERSION_NOT_SERVED,
                None,
                (String::new(), String::new()),
                &schema,
                format!(
                    "the CRD does not serve {}: it serves {} (a new version replaced it? add a definition for it)",
                    root,
                    if served.is_empty() { "no version".to_owned() } else { join(&served) }
                ),
            ),
        }
        let mine = version_priority(&root.version);
        for newer in crd.versions.iter().filter(|v| {
            v.served
                && version_priority(&v.name) > mine
                && !covered
                    .iter()
                    .any(|c| c.group == crd.group && c.kind == crd.kind && c.version == v.name)
        }) {
            let subject = crd_subject(crd, newer);
            let missing: Vec<String> = analysed
                .iter()
                .filter(|a| a.target.on == On::Workload)
                .flat_map(|a| a.analysis.reads.iter())
                .filter(|r| r.path.root == Root::Input)
                .filter(|r| matches!(walk(subject.node, true, &r.path.steps, &[]), Walk::Fail(..)))
                .map(|r| format!("`{}`", r.path))
                .fold(Vec::new(), |mut acc, p| {
                    if !acc.contains(&p) {
                        acc.push(p);
                    }
                    acc
                });
            let tail = if missing.is_empty() {
                "every field path of this definition exists there too".to_owned()
            } else {
                format!("there, {} do not exist", join(&missing))
            };
            self.finding(
                Severity::Warning,
                code::NEWER_VERSION,
                None,
                (String::new(), String::new()),
                &schema,
                format!(
                    "the CRD also serves the newer {}{} with no definition for it; {tail}",
                    crd.describe(&newer.name),
                    if newer.storage {
                        " (storage version)"
                    } else {
                        ""
                    },
                ),
            );
        }
    }

    /// Child and additional kinds whose CRD is given must be served at their version.
    fn children(&mut self, def: &Definition, schemas: &Schemas) {
        for gvk in def.child_kinds() {
            let Some(crd) = schemas.crd(&gvk.group, &gvk.kind) else {
                continue;
            };
            if crd.version(&gvk.version).is_some_and(|v| v.served) {
                continue;
            }
            let served: Vec<String> = crd
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect();
            self.finding(
                Severity::Warning,
                code::CHILD_VERSION_NOT_SERVED,
                None,
                (String::new(), String::new()),
                &format!("CRD {} ({})", crd.name, crd.source),
                format!(
                    "child kind {gvk} is not served (the CRD serves {}): owner chains through it are not watched",
                    join(&served)
                ),
            );
        }
    }

    /// Checks one expression.
    fn target(
        &mut self,
        a: &Analysed,
        on: Option<&Subject<'_>>,
        pod: Option<&Subject<'_>>,
        overlays: &[Overlay<'_>],
    ) {
        let target = &a.target;
        let subject_of = |root: &Root| -> Option<&Subject<'_>> {
            match root {
                Root::Input => on,
                Root::Var(v) if v == "$pod" => pod,
                Root::Var(_) => None,
            }
        };
        for read in &a.analysis.reads {
            self.report.stats.field_paths += 1;
            let Some(subject) = subject_of(&read.path.root) else {
                self.report.stats.not_checked += 1;
                continue;
            };
            let overlays = if subject.projected { &[][..] } else { overlays };
            if subject.projected
                && let Some(depth) = leaves_projection(&read.path.steps)
            {
                self.report.stats.checked += 1;
                let at = prefix(&read.path, depth + 1);
                self.finding(
                    Severity::Error,
                    code::NOT_CACHED,
                    Some(target),
                    (read.path.to_string(), prefix(&read.path, depth)),
                    &subject.label,
                    format!(
                        "`{}` always reads null: kartograf caches pods without `{at}` (docs/definitions.md §2)",
                        read.path
                    ),
                );
                continue;
            }
            match walk(subject.node, true, &read.path.steps, overlays) {
                Walk::Found(_) => self.report.stats.checked += 1,
                Walk::Open(_) => self.report.stats.open += 1,
                Walk::Undeclared(depth, key) => {
                    self.report.stats.open += 1;
                    self.finding(
                        Severity::Warning,
                        code::UNDECLARED_FIELD,
                        Some(target),
                        (read.path.to_string(), prefix(&read.path, depth)),
                        &subject.label,
                        format!(
                            "`{}`: `{}` does not declare `{key}` but keeps unknown fields in {}: a typo, or a field of another release?",
                            read.path,
                            prefix(&read.path, depth),
                            subject.label
                        ),
                    );
                }
                Walk::NotChecked(depth, why) => {
                    self.report.stats.not_checked += 1;
                    self.report.not_checked.push(NotChecked {
                        path: target.path.clone(),
                        expression: target.source.clone(),
                        reason: format!(
                            "`{}`: {why} at `{}`",
                            read.path,
                            prefix(&read.path, depth)
                        ),
                    });
                }
                Walk::Fail(depth, problem) => {
                    self.report.stats.checked += 1;
                    self.mismatch(
                        target,
                        subject,
                        &read.path,
                        depth,
                        &problem,
                        read.optional,
                        overlays,
                    );
                }
            }
        }
        for c in &a.analysis.comparisons {
            if let Some(subject) = subject_of(&c.path.root) {
                self.compare(
                    target,
                    subject,
                    &c.path,
                    &c.value,
                    overlays,
                    "is compared with",
                );
            }
        }
        self.role(a, on, overlays);
    }

    /// A path that does not fit: the finding, the versions that have it, where it moved.
    #[allow(clippy::too_many_arguments)]
    fn mismatch(
        &mut self,
        target: &Target,
        subject: &Subject<'_>,
        path: &FieldPath,
        depth: usize,
        problem: &Problem,
        optional: bool,
        overlays: &[Overlay<'_>],
    ) {
        let at = prefix(path, depth);
        let mut present_in = Vec::new();
        if let Some((crd, mine)) = subject.crd {
            for v in crd.versions.iter().filter(|v| v.name != mine.name) {
                let other = crd_subject(crd, v);
                if matches!(
                    walk(other.node, true, &path.steps, overlays),
                    Walk::Found(_) | Walk::Open(_) | Walk::Undeclared(..)
                ) {
                    present_in.push(v.name.clone());
                }
            }
        }
        let (code, mut message) = match problem {
            Problem::UnknownField(key) => (
                code::UNKNOWN_FIELD,
                format!("`{path}`: {} has no field `{key}` at `{at}`", subject.label),
            ),
            Problem::WrongShape { needs, found } => (
                code::WRONG_SHAPE,
                format!(
                    "`{path}`: `{at}` is {found} in {}, but the path uses it as {needs}",
                    subject.label
                ),
            ),
        };
        if optional {
            message.push_str(" (under `?`: it silently yields nothing)");
        }
        if let Some((_, mine)) = subject.crd
            && !present_in.is_empty()
        {
            let mine_priority = version_priority(&mine.name);
            let (newer, older): (Vec<String>, Vec<String>) = present_in
                .iter()
                .cloned()
                .partition(|v| version_priority(v) > mine_priority);
            if !older.is_empty() {
                message.push_str(&format!(
                    "; it exists in {}: moved in {} from {}?",
                    join(&older),
                    mine.name,
                    join(&older)
                ));
            }
            if !newer.is_empty() {
                message.push_str(&format!(
                    "; it exists in {}: added or moved in {}, while this definition reads {}?",
                    join(&newer),
                    join(&newer),
                    mine.name
                ));
            }
        } else if let Problem::UnknownField(key) = problem {
            let moved: Vec<String> = schema::find_field(subject.node, key, 12, 3)
                .into_iter()
                .map(|steps| {
                    format!(
                        "`{}`",
                        FieldPath {
                            root: path.root.clone(),
                            steps
                        }
                    )
                })
                .collect();
            if !moved.is_empty() {
                message.push_str(&format!("; a field `{key}` exists at {}", join(&moved)));
            }
        }
        self.push(Finding {
            severity: Severity::Error,
            code,
            path: target.path.clone(),
            expression: target.source.clone(),
            field: path.to_string(),
            at,
            schema: subject.label.clone(),
            present_in,
            message,
        });
    }

    /// `path` compared with (or matched against) the literal `value`.
    fn compare(
        &mut self,
        target: &Target,
        subject: &Subject<'_>,
        path: &FieldPath,
        value: &Json,
        overlays: &[Overlay<'_>],
        verb: &str,
    ) {
        // Matchers (`byPhase`, `byConditions`, `expectedResult`) compare text: a number field
        // matches "1". jq comparisons and written values are typed.
        let as_text = verb.contains("matched");
        if value.is_null() || (subject.projected && leaves_projection(&path.steps).is_some()) {
            return;
        }
        let Walk::Found(node) = walk(subject.node, true, &path.steps, overlays) else {
            return;
        };
        let shape = node.shape();
        let (types, allowed) = match &shape {
            Shape::Scalar { types, allowed } => (types.clone(), *allowed),
            Shape::Any => return,
            Shape::Object { .. } | Shape::Array(_) => (Vec::new(), None),
        };
        let text = |v: &Json| match v {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        };
        let fits = match value {
            _ if as_text => !types.is_empty(),
            Json::String(_) => types.contains(&"string"),
            Json::Bool(_) => types.contains(&"boolean"),
            Json::Number(_) => types.contains(&"integer") || types.contains(&"number"),
            _ => true,
        };
        if !fits {
            self.finding(
                Severity::Error,
                code::WRONG_TYPE,
                Some(target),
                (path.to_string(), path.to_string()),
                &subject.label,
                format!(
                    "`{path}` {verb} {value}, but it is {} in {}: they are never equal",
                    shape.describe(),
                    subject.label
                ),
            );
            return;
        }
        let listed = |allowed: &[Json]| {
            if as_text {
                allowed.iter().any(|a| text(a) == text(value))
            } else {
                allowed.contains(value)
            }
        };
        if let Some(allowed) = allowed
            && !listed(allowed)
        {
            let list: Vec<String> = allowed.iter().map(ToString::to_string).collect();
            self.finding(
                Severity::Error,
                code::NOT_IN_ENUM,
                Some(target),
                (path.to_string(), path.to_string()),
                &subject.label,
                format!(
                    "`{path}` {verb} {value}, which its enum in {} does not contain ({})",
                    subject.label,
                    list.join(", ")
                ),
            );
        }
    }

    /// What the expression's outputs must be, by the field it is written in.
    fn role(&mut self, a: &Analysed, on: Option<&Subject<'_>>, overlays: &[Overlay<'_>]) {
        let Some(subject) = on else {
            return;
        };
        let target = &a.target;
        let fields = a.analysis.outputs.iter().filter_map(|o| match o {
            Output::Field(p) if p.root == Root::Input => Some(p),
            _ => None,
        });
        for p in fields {
            if subject.projected && leaves_projection(&p.steps).is_some() {
                continue;
            }
            let Walk::Found(node) = walk(subject.node, true, &p.steps, overlays) else {
                continue;
            };
            let shape = node.shape();
            if matches!(shape, Shape::Any) {
                continue;
            }
            match &target.role {
                Role::Phase(values) => {
                    for v in values {
                        self.compare(
                            target,
                            subject,
                            p,
                            &Json::String(v.clone()),
                            overlays,
                            "is matched (byPhase) with",
                        );
                    }
                }
                Role::Conditions(used) => {
                    let mut item = p.steps.clone();
                    item.push(Step::Each);
                    if !matches!(shape, Shape::Array(_)) {
                        self.role_mismatch(target, subject, p, &shape, "an array of conditions");
                        continue;
                    }
                    for field in &used.fields {
                        let mut steps = item.clone();
                        steps.push(Step::Key(field.clone()));
                        let fp = FieldPath {
                            root: Root::Input,
                            steps,
                        };
                        if let Walk::Fail(depth, problem) =
                            walk(subject.node, true, &fp.steps, overlays)
                        {
                            self.mismatch(target, subject, &fp, depth, &problem, false, overlays);
                        }
                    }
                    for (field, value) in &used.expected {
                        let mut steps = item.clone();
                        steps.push(Step::Key(field.clone()));
                        let fp = FieldPath {
                            root: Root::Input,
                            steps,
                        };
                        self.compare(
                            target,
                            subject,
                            &fp,
                            &Json::String(value.clone()),
                            overlays,
                            "is matched (byConditions) with",
                        );
                    }
                }
                Role::Count => {
                    if !matches!(&shape, Shape::Scalar { types, .. }
                        if types.iter().any(|t| matches!(*t, "integer" | "number" | "string")))
                    {
                        self.role_mismatch(target, subject, p, &shape, "a number");
                    }
                }
                Role::Text => {
                    if !matches!(shape, Shape::Scalar { .. }) {
                        self.role_mismatch(target, subject, p, &shape, "a scalar (used as text)");
                    }
                }
                Role::StringMap => {
                    if !matches!(shape, Shape::Object { .. }) {
                        self.role_mismatch(target, subject, p, &shape, "a map of strings");
                    }
                }
                Role::Expected(expected) => self.compare(
                    target,
                    subject,
                    p,
                    &Json::String(expected.clone()),
                    overlays,
                    "is matched (expectedResult) with",
                ),
                Role::Assignment(value) => {
                    if !value.is_null() {
                        self.compare(target, subject, p, value, overlays, "is set to");
                    }
                }
                role => {
                    let Some((_, below, what)) = role_schema(role) else {
                        continue;
                    };
                    let steps = steps_of(below);
                    let fits = match (&shape, role) {
                        (Shape::Array(_), Role::Containers | Role::ResourceClaims) => true,
                        (_, Role::Containers | Role::ResourceClaims) => false,
                        (Shape::Object { .. }, _) => true,
                        _ => false,
                    };
                    let inner = if fits && !steps.is_empty() {
                        matches!(
                            walk(node, false, &steps, &[]),
                            Walk::Found(_) | Walk::Open(_) | Walk::Undeclared(..)
                        )
                    } else {
                        fits
                    };
                    if !inner {
                        self.role_mismatch(target, subject, p, &shape, what);
                    }
                }
            }
        }
    }

    fn role_mismatch(
        &mut self,
        target: &Target,
        subject: &Subject<'_>,
        p: &FieldPath,
        shape: &Shape<'_>,
        what: &str,
    ) {
        let field = target
            .path
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_owned();
        self.finding(
            Severity::Error,
            code::WRONG_TARGET,
            Some(target),
            (p.to_string(), p.to_string()),
            &subject.label,
            format!(
                "{field} yields `{p}`, which is {} in {}, not {what}",
                shape.describe(),
                subject.label
            ),
        );
    }
}

/// One finding per (expression, failing place, code, schema): a path prefix that fails fails
/// every path below it; each release line checked keeps its own.
fn dedup(findings: &mut Vec<Finding>) {
    let mut seen: Vec<(String, String, &'static str, String, String)> = Vec::new();
    findings.retain(|f| {
        let by_place = matches!(
            f.code,
            code::UNKNOWN_FIELD | code::WRONG_SHAPE | code::NOT_CACHED
        );
        let key = (
            f.path.clone(),
            f.at.clone(),
            f.code,
            if by_place {
                String::new()
            } else {
                f.message.clone()
            },
            f.schema.clone(),
        );
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::value::{Doc, Limits, Packed};

    fn key(k: &str) -> Step {
        Step::Key(k.to_owned())
    }

    /// The drift check's reading of the pod projection is the packer's: a path it says stays
    /// is in a packed pod, one it says leaves is not.
    #[test]
    fn leaving_the_projection_is_what_the_packer_drops() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"x": 1}]},
            "spec": {"hostname": "h", "nodeName": "n",
                     "containers": [{"name": "c", "env": [{"name": "E"}],
                                     "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"}
        });
        let packed =
            Packed::pack(&pod, &crate::model::POD_PROJECTION, Limits::default()).expect("packs");
        let paths: Vec<Vec<Step>> = vec![
            vec![key("metadata"), key("labels"), key("a")],
            vec![key("metadata"), key("managedFields")],
            vec![key("spec"), key("hostname")],
            vec![key("spec"), key("nodeName")],
            vec![key("spec"), key("containers"), Step::Index(0), key("name")],
            vec![key("spec"), key("containers"), Step::Index(0), key("env")],
            vec![key("status"), key("phase")],
        ];
        let mut kept = 0;
        for steps in &paths {
            let present = packed.with_node(|n| {
                let mut at = Some(n);
                for s in steps {
                    at = at.and_then(|d| match s {
                        Step::Key(k) => d.get(k),
                        Step::Index(i) => d.items().nth(usize::try_from(*i).ok()?),
                        _ => None,
                    });
                }
                at.is_some()
            });
            let stays = leaves_projection(steps).is_none();
            assert_eq!(stays, present, "{steps:?}");
            kept += usize::from(stays);
        }
        assert!(kept > 0 && kept < paths.len(), "both cases are exercised");
    }
}
