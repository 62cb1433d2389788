//! Schema drift: the catalog against the upstream CRDs in `tests/crds/`, and deliberately
//! drifted copies of them (a renamed field, a moved status, a new version, a narrowed enum, a
//! changed shape) caught with the right message.

use crate::common::*;
use kartograf::definition::{Definition, catalog, load};
use kartograf::drift::report::code;
use kartograf::drift::{self, Crd, DefinitionReport, Finding, Schemas, Severity};
use serde_json::{Value, json};
use std::sync::Arc;

const JOBSET: &str = "jobset-x-k8s-io-jobset-v1alpha2";

fn upstream_crds() -> Vec<Crd> {
    let (crds, errors) = drift::crd::load_path(&fixture_root().join("tests/crds"));
    assert!(errors.is_empty(), "{errors:?}");
    crds
}

fn fixture_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A CRD of `tests/crds/` as JSON, to drift.
fn crd_json(file: &str) -> Value {
    let text = std::fs::read_to_string(fixture_root().join("tests/crds").join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn crd(json: &Value) -> Crd {
    Crd::from_json(json, "drifted.json").unwrap().unwrap()
}

/// The `openAPIV3Schema` of `version`.
fn schema<'a>(crd: &'a mut Value, version: &str) -> &'a mut Value {
    let versions = crd["spec"]["versions"].as_array_mut().unwrap();
    let v = versions.iter_mut().find(|v| v["name"] == version).unwrap();
    &mut v["schema"]["openAPIV3Schema"]
}

/// The schema node at `path` (`properties` names; `[]` for array items).
fn node<'a>(schema: &'a mut Value, path: &[&str]) -> &'a mut Value {
    let mut at = schema;
    for p in path {
        at = if *p == "[]" {
            &mut at["items"]
        } else {
            &mut at["properties"][*p]
        };
    }
    at
}

fn rename(props: &mut Value, from: &str, to: &str) {
    let map = props["properties"].as_object_mut().unwrap();
    let v = map.remove(from).unwrap();
    map.insert(to.into(), v);
}

fn definition(name: &str) -> Arc<Definition> {
    catalog()
        .definitions()
        .find(|d| d.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no definition {name}"))
}

fn compile(text: &str) -> Arc<Definition> {
    let (parsed, errors) = load::parse_text(text, "test.yaml");
    assert!(errors.is_empty(), "{errors:?}");
    let (mut defs, errors) = catalog::compile_all(parsed, "test", Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    defs.remove(0)
}

fn check(def: &Definition, crds: Vec<Crd>) -> DefinitionReport {
    let report = drift::check_all([def], &Schemas::new(crds), vec![]);
    report.definitions.into_iter().next().unwrap()
}

fn errors(r: &DefinitionReport) -> Vec<&Finding> {
    r.findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect()
}

fn find<'a>(r: &'a DefinitionReport, code: &str, path_end: &str) -> &'a Finding {
    r.findings
        .iter()
        .find(|f| f.code == code && f.path.ends_with(path_end))
        .unwrap_or_else(|| panic!("no {code} at …{path_end} in {:#?}", r.findings))
}

#[test]
fn the_catalog_fits_the_upstream_crds() {
    let crds = upstream_crds();
    let sources = vec!["tests/crds".to_owned()];
    let report = drift::check_all(
        catalog().definitions().map(|d| d.as_ref()),
        &Schemas::new(crds),
        sources,
    );
    let errors: Vec<String> = report
        .definitions
        .iter()
        .flat_map(|d| d.findings.iter().filter(|f| f.severity == Severity::Error))
        .map(ToString::to_string)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // Every definition is checked against a schema.
    let unchecked: Vec<&str> = report
        .definitions
        .iter()
        .filter(|d| d.schema.is_none())
        .map(|d| d.name.as_str())
        .collect();
    assert!(unchecked.is_empty(), "{unchecked:?}");
    let s = report.stats;
    assert!(s.expressions > 500, "{s:?}");
    assert!(
        s.checked + s.open > s.field_paths * 9 / 10,
        "most field paths are checked: {s:?}"
    );
    // Built-in kinds are checked against the Kubernetes schema.
    let job = report
        .definitions
        .iter()
        .find(|d| d.name == "batch-job-v1")
        .unwrap();
    assert_eq!(job.schema.as_deref(), Some("batch/v1 Job (Kubernetes)"));
    assert!(job.stats.checked > 10, "{:?}", job.stats);
}

#[test]
fn a_renamed_field_is_an_unknown_field() {
    let mut json = crd_json("jobset.json");
    rename(
        node(
            schema(&mut json, "v1alpha2"),
            &["spec", "replicatedJobs", "[]"],
        ),
        "replicas",
        "count",
    );
    let r = check(&definition(JOBSET), vec![crd(&json)]);
    let f = find(&r, code::UNKNOWN_FIELD, "scaleDefinition.replicasPath");
    assert_eq!(f.field, ".spec.replicatedJobs[].replicas");
    assert_eq!(f.at, ".spec.replicatedJobs[]");
    assert_eq!(
        f.path,
        "spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath"
    );
    assert!(
        f.message
            .contains("has no field `replicas` at `.spec.replicatedJobs[]`"),
        "{}",
        f.message
    );
    assert!(f.expression.contains(".replicas // 1"));
    assert_eq!(errors(&r).len(), 1, "{:#?}", r.findings);
}

const DYNAMO_V1ALPHA1: &str = "nvidia-com-dynamographdeployment-v1alpha1";
const DYNAMO_V1BETA1: &str = "nvidia-com-dynamographdeployment-v1beta1";

#[test]
fn the_dynamo_definitions_are_checked_against_the_dynamo_crd() {
    let json = crd_json("dynamo-dynamographdeployment.json");
    for (name, version) in [(DYNAMO_V1ALPHA1, "v1alpha1"), (DYNAMO_V1BETA1, "v1beta1")] {
        let r = check(&definition(name), vec![crd(&json)]);
        assert_eq!(
            r.schema.as_deref(),
            Some(format!("nvidia.com/{version} DynamoGraphDeployment (drifted.json)").as_str())
        );
        assert!(errors(&r).is_empty(), "{:#?}", r.findings);
        // The DGD schema is typed all the way down (services, extraPodSpec, podTemplate):
        // every path is checked to its end, none stops at an open schema.
        assert!(r.stats.field_paths > 15, "{name}: {:?}", r.stats);
        assert_eq!(
            r.stats.checked, r.stats.field_paths,
            "{name}: {:?}",
            r.stats
        );
    }
    // `.status.state` has an enum: the empty string the definitions once compared it with is
    // not a state (an object without one has no `state` at all).
    let text = std::fs::read_to_string(
        fixture_root().join("catalog/nvidia-com-dynamographdeployment-v1beta1.yaml"),
    )
    .unwrap()
    .replace(
        ".status.state | . == null",
        r#"(.status.state // "") | . == """#,
    );
    let r = check(&compile(&text), vec![crd(&json)]);
    let f = find(
        &r,
        code::NOT_IN_ENUM,
        "initializing[0].byExpression.expression",
    );
    assert_eq!(f.field, ".status.state");
    assert_eq!(errors(&r).len(), 1, "{:#?}", r.findings);
    // v1alpha1 is deprecated in favour of v1beta1 (still served; the storage version up to 1.3).
    let r = check(&definition(DYNAMO_V1ALPHA1), vec![crd(&json)]);
    let deprecated = find(&r, code::VERSION_DEPRECATED, "");
    assert_eq!(deprecated.severity, Severity::Warning);
}

#[test]
fn a_dynamo_crd_without_component_min_available_is_drift() {
    // Dynamo up to 1.2 had no `minAvailable` on v1beta1 components (added for Grove-backed
    // DGDs in 1.3): both expressions that read it are reported against such a CRD.
    let mut json = crd_json("dynamo-dynamographdeployment.json");
    let component = node(schema(&mut json, "v1beta1"), &["spec", "components", "[]"]);
    component["properties"]
        .as_object_mut()
        .unwrap()
        .remove("minAvailable")
        .unwrap();
    let r = check(&definition(DYNAMO_V1BETA1), vec![crd(&json)]);
    for at in [
        "scaleDefinition.minReplicasPath",
        "podGroups[0].minMemberPath",
    ] {
        let f = find(&r, code::UNKNOWN_FIELD, at);
        assert_eq!(f.field, ".spec.components[].minAvailable");
        assert!(
            f.message
                .contains("has no field `minAvailable` at `.spec.components[]`"),
            "{}",
            f.message
        );
    }
    assert_eq!(errors(&r).len(), 2, "{:#?}", r.findings);
}

#[test]
fn a_moved_status_names_where_it_went() {
    let mut json = crd_json("jobset.json");
    let status = node(schema(&mut json, "v1alpha2"), &["status"]);
    let conditions = status["properties"]
        .as_object_mut()
        .unwrap()
        .remove("conditions")
        .unwrap();
    status["properties"]["summary"] =
        json!({"type": "object", "properties": {"conditions": conditions}});
    let r = check(&definition(JOBSET), vec![crd(&json)]);
    let f = find(&r, code::UNKNOWN_FIELD, "conditionsDefinition.path");
    assert_eq!(f.field, ".status.conditions");
    assert!(
        f.message
            .contains("a field `conditions` exists at `.status.summary.conditions`"),
        "{}",
        f.message
    );
    // The matcher expressions that read conditions are caught too.
    assert!(
        r.findings
            .iter()
            .any(|f| f.path.contains("statusMappings.suspending")
                && f.field.starts_with(".status.conditions")),
        "{:#?}",
        r.findings
    );
}

/// JobSet with a v1 whose replicatedJobs use `count`, the storage version.
fn jobset_with_v1(keep_old: bool) -> Value {
    let mut json = crd_json("jobset.json");
    let versions = json["spec"]["versions"].as_array_mut().unwrap();
    let mut v1 = versions[0].clone();
    v1["name"] = json!("v1");
    v1["storage"] = json!(true);
    rename(
        node(
            &mut v1["schema"]["openAPIV3Schema"],
            &["spec", "replicatedJobs", "[]"],
        ),
        "replicas",
        "count",
    );
    versions[0]["storage"] = json!(false);
    if !keep_old {
        versions.clear();
    }
    versions.push(v1);
    json
}

#[test]
fn a_new_version_is_reported_with_the_paths_it_breaks() {
    let def = definition(JOBSET);
    // v1 added beside v1alpha2: a warning that names what v1 lacks.
    let r = check(&def, vec![crd(&jobset_with_v1(true))]);
    assert!(errors(&r).is_empty(), "{:#?}", r.findings);
    let w = find(&r, code::NEWER_VERSION, "");
    assert_eq!(w.severity, Severity::Warning);
    assert!(
        w.message
            .contains("jobset.x-k8s.io/v1 JobSet (storage version)")
            && w.message.contains("`.spec.replicatedJobs[].replicas`"),
        "{}",
        w.message
    );
    // v1alpha2 gone: the definition's version is not served.
    let r = check(&def, vec![crd(&jobset_with_v1(false))]);
    let e = find(&r, code::VERSION_NOT_SERVED, "");
    assert_eq!(e.severity, Severity::Error);
    assert!(e.message.contains("it serves v1"), "{}", e.message);
    assert!(r.schema.is_none(), "nothing else can be checked");
    // A definition written for v1 that still reads v1alpha2's field: moved in v1.
    let text = std::fs::read_to_string(
        fixture_root().join("catalog/jobset-x-k8s-io-jobset-v1alpha2.yaml"),
    )
    .unwrap()
    .replace("version: v1alpha2", "version: v1")
    .replace("name: jobset-x-k8s-io-jobset-v1alpha2", "name: jobset-v1");
    let r = check(&compile(&text), vec![crd(&jobset_with_v1(true))]);
    let f = find(&r, code::UNKNOWN_FIELD, "scaleDefinition.replicasPath");
    assert_eq!(f.present_in, ["v1alpha2"]);
    assert!(
        f.message
            .contains("it exists in v1alpha2: moved in v1 from v1alpha2?"),
        "{}",
        f.message
    );
}

#[test]
fn matched_values_outside_an_enum_are_errors() {
    let mut json = crd_json("jobset.json");
    *node(
        schema(&mut json, "v1alpha2"),
        &["status", "conditions", "[]", "type"],
    ) = json!({"type": "string", "enum": ["Complete", "Failed", "Suspended", "StartupPolicyCompleted"]});
    let r = check(&definition(JOBSET), vec![crd(&json)]);
    let by_conditions = find(&r, code::NOT_IN_ENUM, "conditionsDefinition.path");
    assert!(
        by_conditions
            .message
            .contains("matched (byConditions) with \"Completed\""),
        "{}",
        by_conditions.message
    );
    let by_expression = find(&r, code::NOT_IN_ENUM, "running[0].byExpression.expression");
    assert_eq!(by_expression.field, ".status.conditions[].type");
    assert!(by_expression.message.contains("\"Complete\""));

    // A phase mapping against a phase enum.
    let widget = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
          "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema":
            {"type": "object", "properties": {
              "spec": {"type": "object", "properties": {"suspend": {"type": "boolean"}}},
              "status": {"type": "object", "properties": {
                "phase": {"type": "string", "enum": ["Pending", "Running", "Succeeded", "Failed"]}}}}}}}]}});
    let def = compile(
        r#"
apiVersion: run.ai/v1alpha1
kind: Karta
spec:
  structureDefinition:
    rootComponent:
      name: widget
      kind: {group: example.com, version: v1, kind: Widget}
      statusDefinition:
        phaseDefinition: {path: .status.phase}
        statusMappings:
          running: [{byPhase: Running}]
          completed: [{byPhase: Completed}]
          suspended: [{byExpression: {expression: '.spec.suspend == "true"', expectedResult: "true"}}]
"#,
    );
    let r = check(&def, vec![crd(&widget)]);
    let phase = find(&r, code::NOT_IN_ENUM, "phaseDefinition.path");
    assert!(
        phase.message.contains("byPhase) with \"Completed\"")
            && phase.message.contains("\"Succeeded\""),
        "{}",
        phase.message
    );
    let ty = find(&r, code::WRONG_TYPE, "byExpression.expression");
    assert!(ty.message.contains("a boolean"), "{}", ty.message);
    assert_eq!(errors(&r).len(), 2, "{:#?}", r.findings);
}

#[test]
fn a_changed_shape_is_caught() {
    let mut json = crd_json("jobset.json");
    *node(
        schema(&mut json, "v1alpha2"),
        &["spec", "replicatedJobs", "[]", "template"],
    ) = json!({"type": "string"});
    let r = check(&definition(JOBSET), vec![crd(&json)]);
    let f = find(&r, code::WRONG_SHAPE, "scaleDefinition.replicasPath");
    assert_eq!(f.at, ".spec.replicatedJobs[].template");
    assert!(
        f.message.contains("is a string in") && f.message.contains("uses it as an object"),
        "{}",
        f.message
    );
    // An array read as an object.
    let mut json = crd_json("jobset.json");
    let rj = node(schema(&mut json, "v1alpha2"), &["spec", "replicatedJobs"]);
    let item = rj["items"].take();
    *rj = json!({"type": "array", "items": {"type": "array", "items": item}});
    let r = check(&definition(JOBSET), vec![crd(&json)]);
    let f = find(&r, code::WRONG_SHAPE, "instanceIdPath");
    assert!(f.message.contains("is an array"), "{}", f.message);
}

const WIDGET_OPEN: &str = r#"
apiVersion: run.ai/v1alpha1
kind: Karta
spec:
  structureDefinition:
    rootComponent:
      name: widget
      kind: {group: example.com, version: v1, kind: Widget}
      specDefinition:
        podTemplateSpecPath: .spec.template
      scaleDefinition:
        replicasPath: .spec.extra.replicas // 1
        minReplicasPath: .spec.minReplicaz
      statusDefinition:
        statusMappings:
          running:
            - byExpression:
                expression: '(.spec.template.spec.containers[0].resources.limits | length) > 0'
                expectedResult: "true"
          degraded:
            - byExpression:
                expression: '.spec.template.spec.containerz != null'
                expectedResult: "true"
"#;

#[test]
fn open_schemas_are_open_and_embedded_pod_templates_use_the_core_schema() {
    let widget = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
          "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema":
            {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
              "template": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
              "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}});
    let r = check(&compile(WIDGET_OPEN), vec![crd(&widget)]);
    // `.spec.extra` is open: nothing to report there. The template is open in the CRD, but
    // the definition says it is a PodTemplateSpec: `containerz` is not one of its fields.
    assert_eq!(errors(&r).len(), 1, "{:#?}", r.findings);
    let f = find(
        &r,
        code::UNKNOWN_FIELD,
        "degraded[0].byExpression.expression",
    );
    assert_eq!(f.field, ".spec.template.spec.containerz");
    assert!(
        f.message
            .contains("no field `containerz` at `.spec.template.spec`")
    );
    assert!(r.stats.open >= 1, "{:?}", r.stats);
    // `.spec` keeps unknown fields but declares others: an undeclared one is a warning.
    let w = find(&r, code::UNDECLARED_FIELD, "minReplicasPath");
    assert_eq!(w.severity, Severity::Warning);
    assert!(
        w.message.contains("`.spec` does not declare `minReplicaz`"),
        "{}",
        w.message
    );
}

#[test]
fn built_in_kinds_and_pods_use_the_kubernetes_schema() {
    let def = compile(
        r#"
apiVersion: run.ai/v1alpha1
kind: Karta
spec:
  structureDefinition:
    rootComponent:
      name: job
      kind: {group: batch, version: v1, kind: Job}
      specDefinition: {podTemplateSpecPath: .spec.template}
      statusDefinition:
        statusMappings:
          completed: [{byExpression: {expression: '(.status.succeded // 0) > 0', expectedResult: "true"}}]
      podSelector:
        componentTypeSelector:
          keyPath: '.spec.hostname'
    childComponents: []
"#,
    );
    let r = check(&def, vec![]);
    let f = find(&r, code::UNKNOWN_FIELD, "byExpression.expression");
    assert!(
        f.message
            .contains("batch/v1 Job (Kubernetes) has no field `succeded` at `.status`"),
        "{}",
        f.message
    );
    let p = find(&r, code::NOT_CACHED, "componentTypeSelector.keyPath");
    assert!(
        p.message.contains("caches pods without `.spec.hostname`"),
        "{}",
        p.message
    );
}

#[test]
fn what_cannot_be_analysed_is_reported_as_not_checked() {
    let r = check(
        &definition("workload-codeflare-dev-appwrapper-v1beta2"),
        upstream_crds(),
    );
    assert!(errors(&r).is_empty(), "{:#?}", r.findings);
    assert!(
        r.not_checked
            .iter()
            .any(|n| n.reason.contains("`getpath` with a computed path")
                && n.path.ends_with("podTemplateSpecPath")),
        "{:#?}",
        r.not_checked
    );
    assert!(r.stats.analysed < r.stats.expressions);
    // No schema at all: every workload expression is listed, none is guessed.
    let r = check(&definition(JOBSET), vec![]);
    assert!(r.findings.is_empty());
    assert_eq!(r.schema, None);
    assert!(
        r.not_checked
            .iter()
            .all(|n| n.reason == "no CRD for jobset.x-k8s.io/JobSet given"
                || n.path.contains("podSelector")),
        "{:#?}",
        r.not_checked
    );
}

#[test]
fn check_cli_passes_the_catalog_and_fails_on_drift() {
    let out = kartograf(&["check", "--crds", "tests/crds"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    assert!(text.contains(", 0 error(s)"), "{text}");
    assert!(text.contains("UNCHECKED"), "{text}");

    let out = kartograf(&["check", "--crds", "tests/crds", "-o", "json"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["drift"]["errors"], 0);
    assert_eq!(v["valid"].as_array().unwrap().len(), catalog().len());
    assert!(
        v["drift"]["definitions"][0]["stats"]["expressions"]
            .as_u64()
            .unwrap()
            > 0
    );

    let mut json = crd_json("jobset.json");
    rename(
        node(
            schema(&mut json, "v1alpha2"),
            &["spec", "replicatedJobs", "[]"],
        ),
        "replicas",
        "count",
    );
    let file = temp_file("jobset.json", &json.to_string());
    let out = kartograf(&["check", "--crds", file.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("DRIFT"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("catalog/jobset-x-k8s-io-jobset-v1alpha2.yaml: spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath: `.spec.replicatedJobs[].replicas`")
            && line.contains("(expression: `"),
        "{line}"
    );
}

/// Several CRDs of one kind (releases of one framework) are each checked: a path that only the
/// newer release has is drift against the older one, whichever file comes first.
#[test]
fn every_release_line_of_a_kind_is_checked() {
    let line = |file: &str| Crd::from_json(&crd_json(file), file).unwrap().unwrap();
    let old = line("kubevirt-virtualmachineinstance-v1.4.0.json");
    let new = line("kubevirt-virtualmachineinstance.json");
    // KubeVirt v1.9 added DRA claims to GPUs (`claimName`, `requestName`); v1.4 has no such field.
    let def = compile(
        r#"
apiVersion: run.ai/v1alpha1
kind: Karta
spec:
  structureDefinition:
    rootComponent:
      name: vmi
      kind: {group: kubevirt.io, version: v1, kind: VirtualMachineInstance}
      specDefinition:
        fragmentedPodSpecDefinition:
          resourcesPath: .spec.domain.resources
        gpuResourceNamesPath: '.spec.domain.devices.gpus[] | select(.claimName == null) | .deviceName'
      statusDefinition:
        phaseDefinition: {path: .status.phase}
        statusMappings:
          running: [{byPhase: Running}]
"#,
    );
    for order in [
        vec![new.clone(), old.clone()],
        vec![old.clone(), new.clone()],
    ] {
        let r = check(&def, order);
        let errs = errors(&r);
        assert_eq!(errs.len(), 1, "{:#?}", r.findings);
        let f = find(&r, code::UNKNOWN_FIELD, "gpuResourceNamesPath");
        assert!(f.schema.contains("v1.4.0"), "{f:?}");
        let schema = r.schema.as_deref().unwrap_or_default();
        assert!(
            schema.contains("kubevirt-virtualmachineinstance.json")
                && schema.contains("kubevirt-virtualmachineinstance-v1.4.0.json"),
            "{schema}"
        );
    }
    // Against the newer release alone it fits.
    assert!(errors(&check(&def, vec![new])).is_empty());
    // The catalog's VMI definition reads only what both releases have.
    let r = check(
        &definition("kubevirt-io-virtualmachineinstance-v1"),
        vec![old, line("kubevirt-virtualmachineinstance.json")],
    );
    assert!(errors(&r).is_empty(), "{:#?}", r.findings);
}
