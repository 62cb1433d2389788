//! The write path over the whole catalog: every definition, on every realistic object of its
//! kind (`tests/catalog/<framework>/*.yaml` snapshots and `examples/cluster/`), gets a
//! scheduler name and a pod label; the patch is applied with an independent RFC 6902
//! implementation (the `json-patch` crate), the result is read again through the definition
//! (as resolution reads it), and must carry both on every pod spec the graph shows; a second
//! patch is empty; nothing outside those fields changes. Suspend and resume round-trip for
//! every definition with a `suspendDefinition` and are refused for the others. New
//! definitions and snapshots are covered as they are added.

use crate::common::catalog;
use kartograf::definition::Definition;
use kartograf::definition::model::ComponentDefinition;
use kartograf::definition::plan::PodSpecSource;
use kartograf::expr::{Expr, Limits, value};
use kartograf::model::Object;
use kartograf::patch::{self, Intents, Lifecycle, PatchRefused};
use kartograf::resolve::{Want, prepare_with};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) const SCHEDULER: &str = "kai-scheduler";
pub(crate) const LABEL: (&str, &str) = ("kai.scheduler/queue", "team-a");

/// Every object of a kind the catalog defines (exact version) in the realistic snapshots.
pub(crate) fn realistic() -> Vec<(Arc<Definition>, String, Json)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for f in crate::workloads::snapshot_files() {
        let text = std::fs::read_to_string(&f).expect("readable");
        let Ok(docs) = kartograf::manifest::parse_documents(&text) else {
            continue;
        };
        for doc in docs {
            let (Some(api), Some(kind)) = (doc["apiVersion"].as_str(), doc["kind"].as_str()) else {
                continue;
            };
            let Some(found) = catalog().lookup(api, kind) else {
                continue;
            };
            if found.fallback_from.is_some() {
                continue;
            }
            let label = format!(
                "{}:{}/{}",
                f.strip_prefix(&root).unwrap_or(&f).display(),
                kind,
                doc["metadata"]["name"].as_str().unwrap_or("?")
            );
            out.push((found.definition, label, doc));
        }
    }
    out
}

fn component_model<'a>(def: &'a Definition, name: &str) -> Option<&'a ComponentDefinition> {
    let s = &def.karta.spec.structure_definition;
    std::iter::once(&s.root_component)
        .chain(&s.child_components)
        .find(|c| c.name == name)
}

/// Whether the definition gives component `name` a place for pod labels: a template, a
/// metadata path that builds or reads labels, or a fragment labels path.
pub(crate) fn has_label_place(def: &Definition, name: &str) -> bool {
    let Some(spec) = component_model(def, name).and_then(|c| c.spec_definition.as_ref()) else {
        return true;
    };
    spec.pod_template_spec_path.is_some()
        || spec
            .metadata_path
            .as_deref()
            .is_some_and(|m| m.contains("labels") || !m.contains('{'))
        || spec
            .fragmented_pod_spec_definition
            .as_ref()
            .is_some_and(|f| f.labels_path.is_some())
}

pub(crate) fn has_scheduler_place(def: &Definition, name: &str) -> bool {
    let Some(spec) = component_model(def, name).and_then(|c| c.spec_definition.as_ref()) else {
        return true;
    };
    spec.pod_template_spec_path.is_some()
        || spec.pod_spec_path.is_some()
        || spec
            .fragmented_pod_spec_definition
            .as_ref()
            .is_some_and(|f| f.scheduler_name_path.is_some())
}

/// Applies `ops` with the `json-patch` crate (not kartograf's code).
pub(crate) fn apply_ops(doc: &Json, ops: &Json) -> Json {
    apply(doc, ops)
}

fn apply(doc: &Json, ops: &Json) -> Json {
    let p: json_patch::Patch = serde_json::from_value(ops.clone()).expect("a valid RFC 6902 patch");
    let mut out = doc.clone();
    json_patch::patch(&mut out, &p).expect("the patch applies");
    out
}

/// Every leaf (JSON pointer) where `a` and `b` differ.
fn changed(a: &Json, b: &Json, at: String, out: &mut Vec<String>) {
    match (a, b) {
        (Json::Object(x), Json::Object(y)) => {
            for (k, v) in y {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match x.get(k) {
                    Some(old) => changed(old, v, p, out),
                    None => changed(&Json::Null, v, p, out),
                }
            }
            for k in x.keys() {
                if !y.contains_key(k) {
                    out.push(format!("{at}/{k} (removed)"));
                }
            }
        }
        (Json::Null, Json::Object(y)) => {
            for (k, v) in y {
                changed(
                    &Json::Null,
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        (Json::Array(x), Json::Array(y)) if x.len() == y.len() => {
            for (n, (p, q)) in x.iter().zip(y).enumerate() {
                changed(p, q, format!("{at}/{n}"), out);
            }
        }
        _ if a != b => out.push(at),
        _ => {}
    }
}

/// The labels of every pod the definition shows on `object`, by component.
fn pod_labels(def: &Definition, object: &Json) -> Vec<(String, Json)> {
    let val = value::from_json(object, Limits::default()).expect("converts");
    let mut out = Vec::new();
    for c in &def.components {
        let outputs = |source: &str| -> Vec<Json> {
            Expr::compile(source)
                .expect("compiles")
                .eval(&val)
                .unwrap_or_default()
                .iter()
                .map(value::to_json)
                .collect()
        };
        match &c.spec {
            Some(PodSpecSource::Template(e)) => {
                for t in outputs(e.source()).into_iter().filter(|t| !t.is_null()) {
                    out.push((c.name.clone(), t["metadata"]["labels"].clone()));
                }
            }
            Some(PodSpecSource::Spec { spec, metadata }) => {
                let specs = outputs(spec.source());
                let metas = metadata
                    .as_ref()
                    .map(|m| outputs(m.source()))
                    .unwrap_or_default();
                for (i, s) in specs.iter().enumerate() {
                    if !s.is_null() {
                        let m = metas.get(i).cloned().unwrap_or(Json::Null);
                        out.push((c.name.clone(), m["labels"].clone()));
                    }
                }
            }
            Some(PodSpecSource::Fragmented { .. }) => {
                let f = component_model(def, &c.name)
                    .and_then(|m| m.spec_definition.as_ref())
                    .and_then(|s| s.fragmented_pod_spec_definition.as_ref())
                    .and_then(|f| f.labels_path.clone());
                if let Some(src) = f {
                    for l in outputs(&src) {
                        out.push((c.name.clone(), l));
                    }
                }
            }
            None => {}
        }
    }
    out
}

/// The scheduler name of every pod the definition shows, as resolution reads it.
fn pod_schedulers(def: &Definition, object: &Json) -> Vec<(String, Json)> {
    let obj = Object::from_json(object, Limits::default()).expect("an object");
    let prepared = prepare_with(
        def,
        &obj,
        None,
        Want {
            status: false,
            pod_specs: true,
        },
    );
    let val = value::from_json(object, Limits::default()).expect("converts");
    let mut out = Vec::new();
    for (ci, c) in def.components.iter().enumerate() {
        match &c.spec {
            Some(PodSpecSource::Fragmented { .. }) => {
                let src = component_model(def, &c.name)
                    .and_then(|m| m.spec_definition.as_ref())
                    .and_then(|s| s.fragmented_pod_spec_definition.as_ref())
                    .and_then(|f| f.scheduler_name_path.clone());
                if let Some(src) = src {
                    for v in Expr::compile(&src)
                        .expect("compiles")
                        .eval(&val)
                        .unwrap_or_default()
                    {
                        out.push((c.name.clone(), value::to_json(&v)));
                    }
                }
            }
            Some(_) => {
                for i in 0..prepared.instances(ci).count() {
                    if let Some(spec) = prepared.pod_spec(ci, i) {
                        out.push((
                            c.name.clone(),
                            value::to_json(spec)["schedulerName"].clone(),
                        ));
                    }
                }
            }
            None => {}
        }
    }
    out
}

fn intents(scheduler: bool, label: bool) -> Intents {
    let mut i = Intents::default();
    if scheduler {
        i.scheduler_name = Some(SCHEDULER.into());
    }
    if label {
        i.labels = BTreeMap::from([(LABEL.0.to_owned(), LABEL.1.to_owned())]);
    }
    i
}

/// Checks one object: patched pods, a second empty patch, no change outside the targets.
/// Returns the number of pod specs checked.
fn check(def: &Definition, what: &str, object: &Json, want_label: bool) -> Result<usize, String> {
    let i = intents(true, want_label);
    let patch = patch::plan(def, object, &i).map_err(|e| format!("{what}: refused: {e}"))?;
    let ops = patch.json_patch();
    let patched = apply(object, &ops);
    if &patched != patch.patched() {
        return Err(format!(
            "{what}: kartograf's patched object differs from json-patch's"
        ));
    }
    let mut merged = object.clone();
    json_patch::merge(&mut merged, &patch.merge_patch());
    if merged != patched {
        return Err(format!("{what}: the merge patch has another effect"));
    }
    check_patched(def, what, object, &ops, want_label)
}

/// Checks `ops` (a patch of `object` for a scheduler name, and the label when `want_label`)
/// applied with `json-patch`: both on every pod the definition shows, a second plan empty,
/// nothing changed outside those fields. Returns the number of pod specs checked.
pub(crate) fn check_patched(
    def: &Definition,
    what: &str,
    object: &Json,
    ops: &Json,
    want_label: bool,
) -> Result<usize, String> {
    let i = intents(true, want_label);
    let patched = apply(object, ops);
    let schedulers = pod_schedulers(def, &patched);
    for (c, s) in &schedulers {
        if s != SCHEDULER {
            return Err(format!(
                "{what}: component {c}: schedulerName {s} after the patch"
            ));
        }
    }
    if want_label {
        for (c, l) in pod_labels(def, &patched) {
            if l[LABEL.0] != LABEL.1 {
                return Err(format!("{what}: component {c}: labels {l} after the patch"));
            }
        }
    }
    let again = patch::plan(def, &patched, &i).map_err(|e| format!("{what}: second plan: {e}"))?;
    if !again.is_empty() {
        return Err(format!("{what}: second patch is {}", again.json_patch()));
    }
    let mut diff = Vec::new();
    changed(object, &patched, String::new(), &mut diff);
    let label_leaf = format!("/{}", LABEL.0.replace('/', "~1"));
    for leaf in &diff {
        if !(leaf.ends_with("/schedulerName") || (want_label && leaf.ends_with(&label_leaf))) {
            return Err(format!(
                "{what}: the patch changed `{leaf}`, outside the target fields"
            ));
        }
    }
    for op in ops.as_array().into_iter().flatten() {
        if op["op"] != "add" && op["op"] != "replace" {
            return Err(format!("{what}: unexpected operation {op}"));
        }
    }
    Ok(schedulers.len())
}

#[test]
fn every_definition_patches_every_realistic_object_of_its_kind() {
    let objects = realistic();
    let mut failures = Vec::new();
    let mut pods = 0;
    let mut covered: BTreeMap<String, usize> = BTreeMap::new();
    for (def, what, object) in &objects {
        let pod_bearing: Vec<&str> = def
            .components
            .iter()
            .filter(|c| c.pod_bearing())
            .map(|c| c.name.as_str())
            .collect();
        if pod_bearing.is_empty() {
            continue;
        }
        let scheduler_ok = pod_bearing.iter().all(|c| has_scheduler_place(def, c));
        let label_ok = pod_bearing.iter().all(|c| has_label_place(def, c));
        let what = format!("{} on {what}", def.name);
        if !scheduler_ok {
            // Refused whole, naming the definition and a component without the place.
            match patch::plan(def, object, &intents(true, false)) {
                Err(PatchRefused::Unsupported {
                    definition,
                    component,
                    part,
                }) if definition == def.name
                    && !has_scheduler_place(def, &component)
                    && part.contains("schedulerNamePath") => {}
                other => failures.push(format!("{what}: expected a refusal, got {other:?}")),
            }
            continue;
        }
        if !label_ok {
            match patch::plan(def, object, &intents(true, true)) {
                Err(PatchRefused::Unsupported {
                    definition,
                    component,
                    ..
                }) if definition == def.name && !has_label_place(def, &component) => {}
                other => failures.push(format!("{what}: expected a label refusal, got {other:?}")),
            }
        }
        match check(def, &what, object, label_ok) {
            Ok(n) => {
                pods += n;
                *covered.entry(def.name.clone()).or_default() += 1;
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every definition that writes pod templates met at least one realistic object.
    let missing: Vec<&str> = catalog()
        .definitions()
        .filter(|d| {
            let pb: Vec<&str> = d
                .components
                .iter()
                .filter(|c| c.pod_bearing())
                .map(|c| c.name.as_str())
                .collect();
            !pb.is_empty() && pb.iter().all(|c| has_scheduler_place(d, c))
        })
        .map(|d| d.name.as_str())
        .filter(|n| !covered.contains_key(*n))
        .collect();
    assert!(missing.is_empty(), "no realistic object for {missing:?}");
    assert!(pods > 50, "only {pods} pod specs checked");
    eprintln!(
        "patched {pods} pod specs of {} objects: {covered:?}",
        covered.values().sum::<usize>()
    );
}

/// The values a definition's suspend (or resume) actions read back on `object`.
fn actions_hold(def: &Definition, object: &Json, l: Lifecycle) -> Result<(), String> {
    let val = value::from_json(object, Limits::default()).expect("converts");
    let s = &def.karta.spec.structure_definition;
    for c in std::iter::once(&s.root_component).chain(&s.child_components) {
        let Some(sd) = &c.suspend_definition else {
            continue;
        };
        let actions = match l {
            Lifecycle::Suspend => &sd.suspend_actions,
            Lifecycle::Resume => &sd.resume_actions,
        };
        // Later actions win: check the last value per path.
        let mut last: BTreeMap<&str, Json> = BTreeMap::new();
        for a in actions {
            let v = match &a.value {
                Json::String(t) => serde_json::from_str(t).expect("JSON-encoded"),
                other => other.clone(),
            };
            last.insert(&a.path, v);
        }
        for (path, want) in last {
            for got in Expr::compile(path)
                .expect("compiles")
                .eval(&val)
                .unwrap_or_default()
            {
                if value::to_json(&got) != want {
                    return Err(format!(
                        "{}: `{path}` reads {} after {l:?}",
                        def.name,
                        value::to_json(&got)
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn suspend_and_resume_round_trip_where_defined_and_are_refused_elsewhere() {
    let mut failures = Vec::new();
    let mut round_trips = 0;
    for (def, what, object) in realistic() {
        let what = format!("{} on {what}", def.name);
        let defined = {
            let s = &def.karta.spec.structure_definition;
            std::iter::once(&s.root_component)
                .chain(&s.child_components)
                .any(|c| c.suspend_definition.is_some())
        };
        let suspend = Intents {
            lifecycle: Some(Lifecycle::Suspend),
            ..Intents::default()
        };
        let resume = Intents {
            lifecycle: Some(Lifecycle::Resume),
            ..Intents::default()
        };
        if !defined {
            match patch::plan(&def, &object, &suspend) {
                Err(PatchRefused::Unsupported {
                    definition, part, ..
                }) if definition == def.name && part.contains("suspendDefinition") => {}
                other => failures.push(format!("{what}: suspend should be refused, got {other:?}")),
            }
            continue;
        }
        let run = || -> Result<(), String> {
            let p = patch::plan(&def, &object, &suspend).map_err(|e| e.to_string())?;
            let suspended = apply(&object, &p.json_patch());
            actions_hold(&def, &suspended, Lifecycle::Suspend)?;
            let again = patch::plan(&def, &suspended, &suspend).map_err(|e| e.to_string())?;
            if !again.is_empty() {
                return Err(format!("second suspend patch {}", again.json_patch()));
            }
            let r = patch::plan(&def, &suspended, &resume).map_err(|e| e.to_string())?;
            let resumed = apply(&suspended, &r.json_patch());
            actions_hold(&def, &resumed, Lifecycle::Resume)?;
            Ok(())
        };
        match run() {
            Ok(()) => round_trips += 1,
            Err(e) => failures.push(format!("{what}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(round_trips >= 10, "only {round_trips} round trips");
}

#[test]
fn server_patches_start_with_preconditions_and_an_idle_patch_has_none() {
    let (def, _, object) = realistic()
        .into_iter()
        .find(|(d, _, o)| {
            d.root_kind.kind == "JobSet" && o["metadata"]["resourceVersion"].is_string()
        })
        .expect("a JobSet snapshot");
    let p = patch::plan(&def, &object, &intents(true, true))
        .unwrap()
        .guarded(&object)
        .unwrap();
    let ops = p.json_patch();
    assert_eq!(
        ops[0],
        json!({"op": "test", "path": "/metadata/uid", "value": object["metadata"]["uid"]})
    );
    assert_eq!(ops[1]["path"], "/metadata/resourceVersion");
    let patched = apply(&object, &ops);
    // Stale: another resourceVersion makes the whole patch fail.
    let mut newer = object.clone();
    newer["metadata"]["resourceVersion"] = json!("999999999");
    let p2: json_patch::Patch = serde_json::from_value(ops).unwrap();
    assert!(json_patch::patch(&mut newer, &p2).is_err());
    let idle = patch::plan(&def, &patched, &intents(true, true))
        .unwrap()
        .guarded(&patched)
        .unwrap();
    assert_eq!(idle.json_patch(), json!([]));
}

#[test]
fn the_cli_prints_a_patch_kubectl_takes_and_refuses_whole() {
    let object = realistic()
        .into_iter()
        .find(|(_, what, _)| what.starts_with("examples/cluster/jobset.yaml:JobSet/llama-train"))
        .expect("the demo JobSet")
        .2;
    let args = [
        "patch",
        "-f",
        "examples/cluster",
        "jobset/llama-train",
        "--scheduler-name",
        SCHEDULER,
        "--label",
        "kai.scheduler/queue=team-a",
        "--toleration",
        "nvidia.com/gpu:NoSchedule",
    ];
    let out = crate::common::kartograf(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one line for kubectl -p");
    let patched = apply(&object, &serde_json::from_str(&text).unwrap());
    for job in patched["spec"]["replicatedJobs"].as_array().unwrap() {
        let t = &job["template"]["spec"]["template"];
        assert_eq!(t["spec"]["schedulerName"], SCHEDULER);
        assert_eq!(t["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
        // The file's document, env and all, is what was patched.
        assert_eq!(
            t["spec"]["containers"],
            object["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
        );
    }
    let yaml = crate::common::kartograf(&[&args[..], &["-o", "yaml"]].concat());
    assert!(yaml.status.success());
    let from_yaml = kartograf::manifest::parse_documents(&String::from_utf8(yaml.stdout).unwrap())
        .unwrap()
        .remove(0);
    assert_eq!(from_yaml, patched);
    let merge = crate::common::kartograf(&[&args[..], &["-o", "merge-patch"]].concat());
    let mut merged = object.clone();
    json_patch::merge(&mut merged, &serde_json::from_slice(&merge.stdout).unwrap());
    assert_eq!(merged, patched);
    // A kind whose definition has no place for a scheduler name: exit 7, nothing printed.
    let out = crate::common::kartograf(&[
        "patch",
        "-f",
        "examples/cluster/spark.yaml",
        "--scheduler-name",
        SCHEDULER,
    ]);
    assert_eq!(out.status.code(), Some(7));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("schedulerNamePath"));
    // A label Kubernetes refuses, and no intent at all: exit 1.
    for bad in [&["--label", "Bad Key=x"][..], &[]] {
        let out = crate::common::kartograf(
            &[
                &["patch", "-f", "examples/cluster", "jobset/llama-train"][..],
                bad,
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(1), "{bad:?}");
        assert!(out.stdout.is_empty());
    }
}

/// A pod template path whose outputs depend on what the patch writes: located by its path
/// alone, its outputs on the patched object no longer line up, so the plan is made again
/// reading the original, and refused because the write does not read back (as it always
/// was); where the outputs stay put, the same definition plans.
#[test]
fn a_path_whose_outputs_the_writes_change_is_planned_again_and_refused() {
    let text = r#"apiVersion: run.ai/v1alpha1
kind: Karta
metadata:
  name: shifting
spec:
  structureDefinition:
    rootComponent:
      name: root
      kind: {group: example.com, version: v1, kind: Shifting}
      specDefinition:
        podTemplateSpecPath: '.spec.templates[] | select(.metadata.labels["kai.scheduler/queue"] != "team-a")'
      statusDefinition:
        statusMappings: {}
"#;
    let (parsed, errors) = kartograf::definition::load::parse_text(text, "test.yaml");
    assert!(errors.is_empty(), "{errors:?}");
    let (defs, errors) =
        kartograf::definition::catalog::compile_all(parsed, "test", Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    let def = &defs[0];
    let object = json!({
        "apiVersion": "example.com/v1", "kind": "Shifting",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
        "spec": {"templates": [
            {"metadata": {}, "spec": {"containers": [{"name": "a"}]}},
            {"metadata": {"labels": {"kai.scheduler/queue": "team-a"}},
             "spec": {"containers": [{"name": "b"}]}}
        ]}
    });
    let err = patch::plan(def, &object, &intents(false, true)).expect_err("refused");
    assert!(err.to_string().contains("reads back"), "{err}");
    // The scheduler name does not move the selection: planned on the first pass.
    let p = patch::plan(def, &object, &intents(true, false)).expect("planned");
    let patched = apply(&object, &p.json_patch());
    assert_eq!(
        patched["spec"]["templates"][0]["spec"]["schedulerName"],
        SCHEDULER
    );
    assert!(patched["spec"]["templates"][1]["spec"]["schedulerName"].is_null());
}
