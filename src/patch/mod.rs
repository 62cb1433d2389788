//! The write path: intents (scheduler name, pod labels and annotations, priority class, node
//! selector, tolerations, suspend/resume, replicas) become one RFC 6902 patch on a workload's
//! root object, written through its definition's pod template, pod spec and fragment paths,
//! suspend actions and scale paths.
//!
//! Pure: a definition and a JSON object in, a [`Patch`] or a [`PatchRefused`] out; no client,
//! no server. The CLI (`kartograf patch`), the gRPC `Patch` and admission policies call
//! [`plan`]. A patch is idempotent (planning again on its result gives an empty patch),
//! touches only the locations the definition reads, and is refused whole when any part of
//! an intent cannot be written — never half made. Every write is read back through the
//! definition before the patch is returned, so what the patch writes is what resolution
//! will read.

mod content;
pub mod intents;
pub mod ops;
pub mod pathmode;
mod plan;

pub use intents::{IntentError, Intents, Lifecycle, Toleration};
pub use ops::Op;

use crate::definition::Definition;
use crate::expr::{EvalError, Limits, Val, value};
use ops::{WriteError, Writer, pointer};
use pathmode::{Loc, Stop, Target};
use plan::{Field, Shape, WritePlan};
use serde_json::Value as Json;
use std::time::{Duration, Instant};

/// Most operations in one patch.
pub const MAX_OPS: usize = 4096;
/// Largest patch, as JSON text.
pub const MAX_PATCH_BYTES: usize = 1024 * 1024;
/// How long the reads of one plan may take together.
const DEADLINE: Duration = Duration::from_millis(100);

/// Why no patch was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchRefused {
    /// An intent Kubernetes (or a bound) refuses.
    #[error("{0}")]
    Intent(#[from] IntentError),
    /// The definition cannot express an intent for this object.
    #[error("definition `{definition}`, component `{component}`: {part}")]
    Unsupported {
        /// The definition.
        definition: String,
        /// The component.
        component: String,
        /// What is missing or not writable.
        part: String,
    },
    /// A bound on the patch.
    #[error("{what} exceed the bound of {limit}")]
    Bound {
        /// What is too large.
        what: &'static str,
        /// The bound.
        limit: usize,
    },
    /// The object cannot be patched (not an object, too large, no uid to guard with).
    #[error("object: {0}")]
    Object(String),
}

/// A computed patch.
#[derive(Debug, Clone)]
pub struct Patch {
    ops: Vec<Op>,
    roots: Vec<Loc>,
    patched: Json,
    guard: Option<(String, String)>,
}

impl Patch {
    /// True when the object already is as the intents want it.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The number of operations that change something (preconditions not counted).
    pub fn changes(&self) -> usize {
        self.ops.len()
    }

    /// True when the merge patch sends an array whole (a write inside an array element).
    pub fn merge_patch_sends_arrays(&self) -> bool {
        self.ops
            .iter()
            .zip(&self.roots)
            .any(|(op, root)| op.path().matches('/').count() > root.len())
    }

    /// The RFC 6902 operations, the `test` preconditions first when [`Patch::guarded`]
    /// (none for an empty patch).
    pub fn operations(&self) -> Vec<Op> {
        let mut out = Vec::with_capacity(self.ops.len() + 2);
        if let (Some((uid, rv)), false) = (&self.guard, self.ops.is_empty()) {
            out.push(Op::Test {
                path: "/metadata/uid".into(),
                value: Json::String(uid.clone()),
            });
            out.push(Op::Test {
                path: "/metadata/resourceVersion".into(),
                value: Json::String(rv.clone()),
            });
        }
        out.extend(self.ops.iter().cloned());
        out
    }

    /// The RFC 6902 patch as JSON (an array).
    pub fn json_patch(&self) -> Json {
        serde_json::to_value(self.operations()).unwrap_or(Json::Array(Vec::new()))
    }

    /// The RFC 7386 merge patch with the same effect (`{}` when empty). It carries no
    /// precondition.
    pub fn merge_patch(&self) -> Json {
        ops::merge_patch(&self.patched, &self.roots)
    }

    /// The object with the patch applied.
    pub fn patched(&self) -> &Json {
        &self.patched
    }

    /// The patch preceded by `test` operations on the object's `metadata.uid` and
    /// `metadata.resourceVersion`, so that it fails on any other version of the object.
    pub fn guarded(mut self, object: &Json) -> Result<Patch, PatchRefused> {
        let field = |name: &str| {
            object["metadata"][name]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| PatchRefused::Object(format!("no metadata.{name} to guard with")))
        };
        self.guard = Some((field("uid")?, field("resourceVersion")?));
        Ok(self)
    }
}

/// Computes the patch that makes `object` (a root workload of `definition`'s kind) carry
/// `intents`.
pub fn plan(
    definition: &Definition,
    object: &Json,
    intents: &Intents,
) -> Result<Patch, PatchRefused> {
    plan_with(definition, object, None, intents)
}

/// [`plan`] with `object` already converted to a jq value (`val`, which must be the same
/// object): a cached root is unpacked once for both.
pub fn plan_with(
    definition: &Definition,
    object: &Json,
    val: Option<Val>,
    intents: &Intents,
) -> Result<Patch, PatchRefused> {
    intents.validate()?;
    if !object.is_object() {
        return Err(PatchRefused::Object("not a JSON object".into()));
    }
    let wp = plan::of(definition);
    let deadline = Instant::now() + DEADLINE;
    let planner = |val: Option<Val>, trust_paths: bool| Planner {
        definition,
        wp: &wp,
        original: object,
        original_val: val,
        writer: Writer::new(object.clone()),
        checks: Vec::new(),
        located: Vec::new(),
        trust_paths,
        deadline,
    };
    // First trusting each path's locations (no read of the original).
    let mut p = planner(val, true);
    p.apply(intents)?;
    if !p.verify()? {
        // A trusted path's outputs do not line up with its locations: again, reading the
        // original first (nothing is trusted, so the read-back has no count to check).
        p = planner(p.original_val.take(), false);
        p.apply(intents)?;
        let lined_up = p.verify()?;
        debug_assert!(lined_up, "nothing was trusted");
    }
    let Writer {
        doc, ops, roots, ..
    } = p.writer;
    Ok(Patch {
        ops,
        roots,
        patched: doc,
        guard: None,
    })
}

/// What a written value must read back as.
enum Expect {
    /// The value at the check's path equals this.
    Equals(Json),
    /// The array at the check's path holds this.
    Holds(Json),
    /// Replicas: a number (or numeric text) equal to this, at every output.
    Count(i64),
}

/// A read-back check: output `index` of `field` (`None`: every output), at `at` below it.
struct Check<'p> {
    component: &'p str,
    field: &'p Field,
    index: Option<usize>,
    at: Vec<&'static str>,
    key: Option<String>,
    expect: Expect,
    written: String,
}

struct Planner<'a, 'p> {
    definition: &'a Definition,
    wp: &'p WritePlan,
    original: &'a Json,
    original_val: Option<Val>,
    writer: Writer,
    checks: Vec<Check<'p>>,
    /// Fields located by their paths alone, with how many outputs they must have.
    located: Vec<(&'p Field, usize)>,
    /// Locate by path mode without reading the original (the count is checked on the
    /// patched object in [`Planner::verify`]).
    trust_paths: bool,
    deadline: Instant,
}

/// The place of one pod's fields: its spec and metadata (template and spec shapes).
struct PodPlace {
    spec: Option<Target>,
    metadata: Option<Target>,
}

impl<'a, 'p> Planner<'a, 'p> {
    fn refuse(&self, component: &str, part: impl Into<String>) -> PatchRefused {
        PatchRefused::Unsupported {
            definition: self.definition.name.clone(),
            component: component.to_owned(),
            part: part.into(),
        }
    }

    /// Writes every intent (read back by [`Planner::verify`]).
    fn apply(&mut self, intents: &Intents) -> Result<(), PatchRefused> {
        if intents.touches_pods() {
            self.pods(intents)?;
        }
        for (component, n) in &intents.replicas {
            self.replicas(component, *n)?;
        }
        if let Some(l) = intents.lifecycle {
            self.lifecycle(l)?;
        }
        Ok(())
    }

    fn val(&mut self) -> Result<&Val, PatchRefused> {
        if self.original_val.is_none() {
            let v = value::from_json(self.original, Limits::default())
                .map_err(|e| PatchRefused::Object(e.to_string()))?;
            self.original_val = Some(v);
        }
        Ok(self.original_val.as_ref().expect("set above"))
    }

    /// The outputs of `field` on the original object (an error reads as none, as in
    /// resolution).
    fn read(&mut self, field: &Field) -> Result<Vec<Val>, PatchRefused> {
        let deadline = self.deadline;
        let val = self.val()?;
        let Some(e) = &field.read else {
            return Ok(Vec::new());
        };
        match crate::resolve::evaluate::bounded(e, val, &[], Some(deadline)) {
            Ok(out) => Ok(out),
            // As in resolution: an expression that fails on this object shows nothing.
            Err(EvalError::Runtime(_)) => Ok(Vec::new()),
            // A bound: what the graph shows is not known, so nothing is written.
            Err(EvalError::TooManyOutputs) => Err(PatchRefused::Bound {
                what: "outputs of one expression",
                limit: crate::expr::MAX_OUTPUTS,
            }),
            Err(_) => Err(PatchRefused::Bound {
                what: "milliseconds of evaluation",
                limit: DEADLINE.as_millis() as usize,
            }),
        }
    }

    /// Where each output of `field` is written; `None` for an output that is absent
    /// (`null`) when `objects` (a template, spec or metadata) is asked for.
    fn locate(
        &mut self,
        component: &'p str,
        field: &'p Field,
        objects: bool,
    ) -> Result<Vec<Option<Target>>, PatchRefused> {
        let targets = field.path.as_ref().map(|p| p.targets(self.original));
        // Trusted: locations that all hold something, where an output is the value at its
        // location (or an object built on it) and so is never absent. An absent location
        // may still output something (`l // {default}` writes at `l`): read those.
        let original = self.original;
        let trusted = |t: &Target| match t {
            Target::At(loc) => {
                !objects || !matches!(pathmode::get(original, loc), None | Some(Json::Null))
            }
            Target::Object(..) => true,
            Target::Computed(_) => false,
        };
        let targets = match targets {
            Some(Ok(ts)) if self.trust_paths && field.read.is_some() && ts.iter().all(trusted) => {
                self.located.push((field, ts.len()));
                return Ok(ts.into_iter().map(Some).collect());
            }
            other => other,
        };
        let reads = self.read(field)?;
        let shown = |r: &Val| !objects || !matches!(r, Val::Null);
        let why = match targets {
            Some(Ok(ts))
                if ts.len() == reads.len()
                    && !ts.iter().any(|t| matches!(t, Target::Computed(_))) =>
            {
                return Ok(reads
                    .iter()
                    .zip(ts)
                    .map(|(r, t)| shown(r).then_some(t))
                    .collect());
            }
            Some(Err(Stop::TooMany)) => {
                return Err(PatchRefused::Bound {
                    what: "locations of one path",
                    limit: pathmode::MAX_LOCATIONS,
                });
            }
            Some(Ok(_)) => "its locations do not line up with its outputs".to_owned(),
            Some(Err(e)) => e.to_string(),
            None => "it does not parse".to_owned(),
        };
        if !objects {
            return Err(self.refuse(
                component,
                format!(
                    "{} `{}` cannot be written ({why})",
                    field.yaml,
                    excerpt(&field.source)
                ),
            ));
        }
        // Found by content: the outputs as JSON, only on this path.
        let reads_json: Vec<Json> = reads.iter().map(value::to_json).collect();
        let outputs: Vec<Option<&Json>> = reads_json.iter().map(Some).collect();
        let found = content::locate(self.original, &outputs);
        let mut out = Vec::with_capacity(reads.len());
        for (n, (r, t)) in reads.iter().zip(found).enumerate() {
            if !shown(r) {
                out.push(None);
                continue;
            }
            match t {
                Some(t) => out.push(Some(t)),
                None => {
                    return Err(self.refuse(
                        component,
                        format!(
                            "cannot find where {} `{}` reads output {n} ({why}; not found by content)",
                            field.yaml,
                            excerpt(&field.source)
                        ),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Stops as soon as the patch passes a bound (checked after every write).
    fn bounded(&self) -> Result<(), PatchRefused> {
        if self.writer.ops.len() > MAX_OPS {
            return Err(PatchRefused::Bound {
                what: "patch operations",
                limit: MAX_OPS,
            });
        }
        if self.writer.bytes > MAX_PATCH_BYTES {
            return Err(PatchRefused::Bound {
                what: "patch bytes",
                limit: MAX_PATCH_BYTES,
            });
        }
        Ok(())
    }

    fn set(
        &mut self,
        component: &str,
        what: &str,
        target: Option<Target>,
        value: Json,
        append: bool,
    ) -> Result<String, PatchRefused> {
        let loc = match target {
            Some(Target::At(loc)) => loc,
            Some(_) => {
                return Err(self.refuse(
                    component,
                    format!(
                        "the definition builds the value that holds {what}: no place to write it"
                    ),
                ));
            }
            None => {
                return Err(
                    self.refuse(component, format!("the definition has no place for {what}"))
                );
            }
        };
        let result = if append {
            self.writer.append(&loc, value)
        } else {
            self.writer.set(&loc, value)
        };
        result
            .map_err(|e: WriteError| self.refuse(component, format!("cannot write {what}: {e}")))?;
        self.bounded()?;
        Ok(pointer(&loc))
    }

    /// Writes the pod intents into one pod place; `spec_field`/`meta_field` read back
    /// output `index` (with `spec_at`/`meta_at` below it).
    #[allow(clippy::too_many_arguments)]
    fn write_pod(
        &mut self,
        component: &'p str,
        place: PodPlace,
        intents: &Intents,
        spec_field: &'p Field,
        spec_at: &[&'static str],
        meta: Option<(&'p Field, &[&'static str])>,
        index: usize,
        meta_index: usize,
    ) -> Result<(), PatchRefused> {
        let spec = place.spec;
        let field = |t: &Option<Target>, k: &str| t.as_ref().and_then(|t| t.field(k));
        let mut spec_writes: Vec<(&'static str, Json, bool, Expect)> = Vec::new();
        if let Some(s) = &intents.scheduler_name {
            spec_writes.push((
                "schedulerName",
                Json::from(s.as_str()),
                false,
                Expect::Equals(Json::from(s.as_str())),
            ));
        }
        if let Some(s) = &intents.priority_class_name {
            spec_writes.push((
                "priorityClassName",
                Json::from(s.as_str()),
                false,
                Expect::Equals(Json::from(s.as_str())),
            ));
        }
        for (name, value, append, expect) in spec_writes {
            let at = self.set(
                component,
                &format!("`{name}`"),
                field(&spec, name),
                value,
                append,
            )?;
            self.checks.push(Check {
                component,
                field: spec_field,
                index: Some(index),
                at: [spec_at, &[name]].concat(),
                key: None,
                expect,
                written: at,
            });
        }
        for (k, v) in &intents.node_selector {
            let t = field(&spec, "nodeSelector").and_then(|t| t.field(k));
            let at = self.set(
                component,
                "`nodeSelector`",
                t,
                Json::from(v.as_str()),
                false,
            )?;
            self.checks.push(Check {
                component,
                field: spec_field,
                index: Some(index),
                at: [spec_at, &["nodeSelector"]].concat(),
                key: Some(k.clone()),
                expect: Expect::Equals(Json::from(v.as_str())),
                written: at,
            });
        }
        for t in &intents.tolerations {
            let item = t.to_json();
            let at = self.set(
                component,
                "`tolerations`",
                field(&spec, "tolerations"),
                item.clone(),
                true,
            )?;
            self.checks.push(Check {
                component,
                field: spec_field,
                index: Some(index),
                at: [spec_at, &["tolerations"]].concat(),
                key: None,
                expect: Expect::Holds(item),
                written: at,
            });
        }
        for (name, map) in [
            ("labels", &intents.labels),
            ("annotations", &intents.annotations),
        ] {
            if map.is_empty() {
                continue;
            }
            let Some((meta_field, meta_at)) = meta else {
                return Err(self.refuse(
                    component,
                    format!(
                        "pod {name}: {} has no metadataPath beside it",
                        spec_field.yaml
                    ),
                ));
            };
            for (k, v) in map {
                let t = field(&place.metadata, name).and_then(|t| t.field(k));
                let at = self.set(
                    component,
                    &format!("pod {name}"),
                    t,
                    Json::from(v.as_str()),
                    false,
                )?;
                self.checks.push(Check {
                    component,
                    field: meta_field,
                    index: Some(meta_index),
                    at: [meta_at, &[name]].concat(),
                    key: Some(k.clone()),
                    expect: Expect::Equals(Json::from(v.as_str())),
                    written: at,
                });
            }
        }
        Ok(())
    }

    fn pods(&mut self, intents: &Intents) -> Result<(), PatchRefused> {
        let wp = self.wp;
        for cp in &wp.components {
            let component = cp.name.as_str();
            match &cp.shape {
                None => {}
                Some(Shape::Template(f)) => {
                    let targets = self.locate(component, f, true)?;
                    for (i, t) in targets.into_iter().enumerate() {
                        let Some(t) = t else { continue };
                        let place = PodPlace {
                            spec: t.field("spec"),
                            metadata: t.field("metadata"),
                        };
                        self.write_pod(
                            component,
                            place,
                            intents,
                            f,
                            &["spec"],
                            Some((f, &["metadata"])),
                            i,
                            i,
                        )?;
                    }
                }
                Some(Shape::Spec { spec, metadata }) => {
                    let specs = self.locate(component, spec, true)?;
                    let needs_meta = !intents.labels.is_empty() || !intents.annotations.is_empty();
                    let metas = match metadata {
                        Some(m) if needs_meta => Some(self.locate(component, m, true)?),
                        _ => None,
                    };
                    for (i, t) in specs.into_iter().enumerate() {
                        let Some(t) = t else { continue };
                        let place = PodPlace {
                            spec: Some(t),
                            metadata: metas.as_ref().and_then(|m| m.get(i).cloned().flatten()),
                        };
                        let meta = metadata.as_ref().map(|m| (m, &[][..]));
                        self.write_pod(component, place, intents, spec, &[], meta, i, i)?;
                    }
                }
                Some(Shape::Fragmented {
                    scheduler_name,
                    priority_class_name,
                    labels,
                    annotations,
                }) => {
                    let yaml = |name: &str| format!("fragmentedPodSpecDefinition has no {name}");
                    let mut scalars = Vec::new();
                    if let Some(s) = &intents.scheduler_name {
                        scalars.push((scheduler_name, "schedulerNamePath", s));
                    }
                    if let Some(s) = &intents.priority_class_name {
                        scalars.push((priority_class_name, "priorityClassNamePath", s));
                    }
                    for (f, name, s) in scalars {
                        let Some(f) = f else {
                            return Err(self.refuse(component, yaml(name)));
                        };
                        for (i, t) in self.locate(component, f, false)?.into_iter().enumerate() {
                            let at = self.set(component, name, t, Json::from(s.as_str()), false)?;
                            self.checks.push(Check {
                                component,
                                field: f,
                                index: Some(i),
                                at: Vec::new(),
                                key: None,
                                expect: Expect::Equals(Json::from(s.as_str())),
                                written: at,
                            });
                        }
                    }
                    if !intents.node_selector.is_empty() {
                        return Err(self.refuse(
                            component,
                            yaml("nodeSelector path (the fragmented shape cannot hold one)"),
                        ));
                    }
                    if !intents.tolerations.is_empty() {
                        return Err(self.refuse(
                            component,
                            yaml("tolerations path (the fragmented shape cannot hold one)"),
                        ));
                    }
                    for (f, name, map) in [
                        (labels, "labelsPath", &intents.labels),
                        (annotations, "annotationsPath", &intents.annotations),
                    ] {
                        if map.is_empty() {
                            continue;
                        }
                        let Some(f) = f else {
                            return Err(self.refuse(component, yaml(name)));
                        };
                        for (i, t) in self.locate(component, f, false)?.into_iter().enumerate() {
                            for (k, v) in map {
                                let tk = t.as_ref().and_then(|t| t.field(k));
                                let at =
                                    self.set(component, name, tk, Json::from(v.as_str()), false)?;
                                self.checks.push(Check {
                                    component,
                                    field: f,
                                    index: Some(i),
                                    at: Vec::new(),
                                    key: Some(k.clone()),
                                    expect: Expect::Equals(Json::from(v.as_str())),
                                    written: at,
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn replicas(&mut self, component: &str, n: i32) -> Result<(), PatchRefused> {
        let wp = self.wp;
        let Some(cp) = wp.components.iter().find(|c| c.name == component) else {
            let known: Vec<&str> = wp.components.iter().map(|c| c.name.as_str()).collect();
            return Err(self.refuse(
                component,
                format!(
                    "no such component (the definition has {})",
                    known.join(", ")
                ),
            ));
        };
        let name = cp.name.as_str();
        let Some((assign, read)) = &cp.replicas else {
            return Err(self.refuse(name, "replicas: no scaleDefinition.replicasPath"));
        };
        let targets = match assign.path.as_ref().map(|p| p.targets(&self.writer.doc)) {
            Some(Ok(ts)) => ts,
            Some(Err(Stop::TooMany)) => {
                return Err(PatchRefused::Bound {
                    what: "locations of one path",
                    limit: pathmode::MAX_LOCATIONS,
                });
            }
            other => {
                let why = match other {
                    Some(Err(e)) => e.to_string(),
                    _ => "it does not parse".into(),
                };
                return Err(self.refuse(
                    name,
                    format!(
                        "replicas: {} `{}` cannot be written ({why}); a definition can name a writable path in interpreterDefinition.replicasAssignPath",
                        assign.yaml,
                        excerpt(&assign.source)
                    ),
                ));
            }
        };
        for t in targets {
            let value = match &t {
                Target::At(loc) => match pathmode::get(&self.writer.doc, loc) {
                    Some(Json::String(_)) => Json::String(n.to_string()),
                    _ => Json::from(n),
                },
                _ => Json::from(n),
            };
            let at = self.set(name, "replicas", Some(t), value, false)?;
            self.checks.push(Check {
                component: name,
                field: read,
                index: None,
                at: Vec::new(),
                key: None,
                expect: Expect::Count(i64::from(n)),
                written: at,
            });
        }
        Ok(())
    }

    fn lifecycle(&mut self, l: Lifecycle) -> Result<(), PatchRefused> {
        let wp = self.wp;
        let root = wp.components.first().map_or("", |c| c.name.as_str());
        let what = match l {
            Lifecycle::Suspend => "suspend",
            Lifecycle::Resume => "resume",
        };
        let mut any = false;
        for cp in &wp.components {
            let actions = match l {
                Lifecycle::Suspend => &cp.suspend,
                Lifecycle::Resume => &cp.resume,
            };
            for a in actions {
                any = true;
                let value = a
                    .value
                    .clone()
                    .map_err(|e| self.refuse(&cp.name, format!("{what}: {}: {e}", a.path.yaml)))?;
                let targets = match a.path.path.as_ref().map(|p| p.targets(&self.writer.doc)) {
                    Some(Ok(ts)) if !ts.is_empty() => ts,
                    other => {
                        let why = match other {
                            Some(Err(e)) => e.to_string(),
                            Some(Ok(_)) => "it yields no location".into(),
                            None => "it does not parse".into(),
                        };
                        return Err(self.refuse(
                            &cp.name,
                            format!(
                                "{what}: {} `{}` cannot be written ({why})",
                                a.path.yaml,
                                excerpt(&a.path.source)
                            ),
                        ));
                    }
                };
                for t in targets {
                    self.set(&cp.name, what, Some(t), value.clone(), false)?;
                }
            }
        }
        if !any {
            return Err(self.refuse(
                root,
                format!("{what}: the definition has no suspendDefinition"),
            ));
        }
        Ok(())
    }

    /// Reads every written value back through the definition. `Ok(false)`: a path located
    /// without reading ([`Planner::trust_paths`]) does not line up with its outputs.
    fn verify(&mut self) -> Result<bool, PatchRefused> {
        if self.checks.is_empty() && self.located.is_empty() {
            return Ok(true);
        }
        let converted = || {
            value::from_json(&self.writer.doc, Limits::default())
                .map_err(|e| PatchRefused::Object(format!("patched object: {e}")))
        };
        // The writes replayed on the original's jq value: no second conversion of the
        // whole object (the patch's own bounds, MAX_OPS and MAX_PATCH_BYTES, bound what
        // the writes add to an object that converted within its budget).
        let patched = match self
            .original_val
            .as_ref()
            .and_then(|v| ops::replay(v, &self.writer.ops, &self.writer.edits))
        {
            Some(v) => v,
            None => converted()?,
        };
        debug_assert!(
            converted().map_or(true, |c| value::identical(&c, &patched)),
            "replayed writes differ from the converted document"
        );
        let mut cache = ReadBack {
            patched: &patched,
            deadline: self.deadline,
            outputs: Vec::new(),
        };
        for (field, n) in &self.located {
            if cache.outputs(field).len() != *n {
                return Ok(false);
            }
        }
        for check in &self.checks {
            let outputs = cache.outputs(check.field);
            let at = |o: &Val| -> Option<Json> {
                let mut cur = o;
                for k in &check.at {
                    cur = value::get(cur, k)?;
                }
                match &check.key {
                    Some(k) => value::get(cur, k),
                    None => Some(cur),
                }
                .map(value::to_json)
            };
            let ok = match (&check.expect, check.index) {
                (Expect::Count(n), _) => {
                    !outputs.is_empty()
                        && outputs.iter().all(|o| match value::as_f64(o) {
                            Some(x) => x == *n as f64,
                            None => value::as_str(o)
                                .is_some_and(|s| s.trim().parse::<i64>().ok() == Some(*n)),
                        })
                }
                (Expect::Equals(v), Some(i)) => outputs.get(i).and_then(at).as_ref() == Some(v),
                (Expect::Holds(v), Some(i)) => outputs
                    .get(i)
                    .and_then(at)
                    .and_then(|a| a.as_array().map(|a| a.contains(v)))
                    .unwrap_or(false),
                (_, None) => false,
            };
            if !ok {
                return Err(self.refuse(
                    check.component,
                    format!(
                        "the write at `{}` is not what {} `{}` reads back",
                        check.written,
                        check.field.yaml,
                        excerpt(&check.field.source)
                    ),
                ));
            }
        }
        Ok(true)
    }
}

/// The outputs of fields on the patched object, read once per field and kept as jq values:
/// only the leaves a check compares are turned into JSON.
struct ReadBack<'v> {
    patched: &'v Val,
    deadline: Instant,
    outputs: Vec<(*const Field, Vec<Val>)>,
}

impl ReadBack<'_> {
    /// The outputs of `field` (an error reads as none).
    fn outputs(&mut self, field: &Field) -> &[Val] {
        let key = field as *const Field;
        let slot = match self.outputs.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let o: Vec<Val> = field
                    .read
                    .as_ref()
                    .and_then(|e| {
                        crate::resolve::evaluate::bounded(e, self.patched, &[], Some(self.deadline))
                            .ok()
                    })
                    .unwrap_or_default();
                self.outputs.push((key, o));
                self.outputs.len() - 1
            }
        };
        &self.outputs[slot].1
    }
}

fn excerpt(s: &str) -> String {
    crate::excerpt::excerpt(s.trim(), 200).into_owned()
}
