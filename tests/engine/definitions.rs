//! Definition loading and validation: every error reported with file, path and expression;
//! upstream-shaped definitions load unchanged; layering and version fallback.

use crate::common::*;
use kartograf::definition::Definition;
use kartograf::definition::catalog::{Catalog, load_embedded, load_path};
use kartograf::definition::load::parse_text;

fn compile(text: &str) -> Result<Definition, Vec<kartograf::definition::DefinitionError>> {
    let (mut parsed, errors) = parse_text(text, "test.yaml");
    assert!(errors.is_empty(), "{errors:?}");
    Definition::compile(
        parsed.remove(0).karta,
        "test.yaml",
        "test",
        Default::default(),
    )
}

#[test]
fn every_error_is_reported_with_its_path_and_expression() {
    let text = r#"
apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: broken}
spec:
  structureDefinition:
    rootComponent:
      name: root
      kind: {group: example.com, version: v1, kind: Thing}
      instanceIdPath: .spec.items[].name
      scaleDefinition:
        replicasPath: '.spec.replicas |'
    childComponents:
      - name: orphan
        ownerRef: nobody
      - name: labelled
        ownerRef: root
        podSelector:
          componentTypeSelector:
            matchLabels: {"bad key!": x}
  optimizationInstructions:
    gangScheduling:
      podGroups:
        - name: g
          members: [{componentName: ghost}]
      podGroup:
        name: v2
        subGroups: [{componentName: phantom}]
"#;
    let errors = compile(text).expect_err("invalid");
    let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let all = lines.join("\n");
    for needle in [
        "rootComponent.statusDefinition: root component must have a status definition",
        "rootComponent.instanceIdPath: component `root` has an instance id path but no podSelector.componentInstanceSelector",
        "childComponents[0].ownerRef: child component `orphan` names owner `nobody`",
        "invalid label key `bad key!`",
        "replicasPath: invalid jq expression",
        "(expression: `.spec.replicas |`)",
        "podGroups[0].members[0].componentName: pod-group member `ghost` is not a component",
    ] {
        assert!(all.contains(needle), "missing `{needle}` in:\n{all}");
    }
    assert!(lines.iter().all(|l| l.starts_with("test.yaml: ")), "{all}");
}

#[test]
fn structural_rules() {
    let base = |root_extra: &str, children: &str| {
        format!(
            "apiVersion: run.ai/v1alpha1\nkind: Karta\nspec:\n  structureDefinition:\n    rootComponent:\n      name: root\n      kind: {{group: x.io, version: v1, kind: X}}\n      statusDefinition: {{statusMappings: {{}}}}\n{root_extra}    childComponents:\n{children}"
        )
    };
    let dup = base("", "      - {name: root, ownerRef: root}\n");
    assert!(compile(&dup).unwrap_err()[0].message.contains("not unique"));
    let cycle = base(
        "",
        "      - {name: a, ownerRef: b}\n      - {name: b, ownerRef: a}\n",
    );
    assert!(
        compile(&cycle)
            .unwrap_err()
            .iter()
            .any(|e| e.message.contains("cycle"))
    );
    let two_specs = base(
        "      specDefinition: {podTemplateSpecPath: .a, podSpecPath: .b}\n",
        "      []\n",
    );
    assert!(
        compile(&two_specs).unwrap_err()[0]
            .message
            .contains("multiple pod spec definitions")
    );
    // Upstream accepts a selector on a component without pods: a warning, not an error.
    let selector_without_pods = base(
        "",
        "      - {name: c, ownerRef: root, podSelector: {componentTypeSelector: {keyPath: .x}}}\n",
    );
    let def = compile(&selector_without_pods).expect("loads");
    assert_eq!(def.warnings.len(), 1, "{:?}", def.warnings);
    assert!(
        def.warnings[0]
            .message
            .contains("pod selector but neither it nor its children")
    );
    let ok = base(
        "",
        "      - {name: c, ownerRef: root, specDefinition: {podSpecPath: .spec}, podSelector: {componentTypeSelector: {keyPath: .x, value: 1}}}\n",
    );
    let def = compile(&ok).expect("valid");
    assert_eq!(
        def.name, "x-io-x-v1",
        "name derived from the root kind when metadata.name is empty"
    );
    assert_eq!(def.pod_bearing_count(), 1);
}

#[test]
fn checks_upstream_does_not_make_are_warnings_and_the_definition_loads() {
    let text = r#"
apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: lenient}
spec:
  structureDefinition:
    rootComponent:
      name: root
      kind: {group: example.com, version: v1, kind: Thing}
      statusDefinition:
        conditionsDefinition: {path: .status.conditions, reasonFieldName: null}
        statusMappings:
          running: [{byConditions: [{status: "True"}]}]
      suspendDefinition:
        suspendActions: [{path: .spec.mode, value: Suspended}]
        resumeActions: [{path: .spec.mode, value: '"Running"'}]
    childComponents:
      - name: workers
        ownerRef: root
        specDefinition: {podTemplateSpecPath: .spec.template}
      - name: grouping
        ownerRef: root
        instanceIdPath: .spec.groups[].name
        podSelector:
          componentInstanceSelector: {idPath: '.metadata.labels["group"]'}
  optimizationInstructions:
    gangScheduling:
      podGroups:
        - {name: g, members: [{componentName: workers}]}
        - {name: g, members: [{componentName: grouping}]}
        - {members: [{componentName: workers}]}
      podGroup:
        name: v2
        subGroups: [{componentName: workers}, {componentName: phantom}]
"#;
    let def = compile(text).expect("upstream's validator accepts all of this");
    let warnings: Vec<String> = def.warnings.iter().map(|w| w.to_string()).collect();
    let all = warnings.join("\n");
    for needle in [
        "statusMappings.running[0].byConditions[0].type: condition type is empty",
        "suspendActions[0].value: `Suspended` is not JSON-encoded",
        "childComponents[1].podSelector: component `grouping` has a pod selector but neither it nor its children declare a pod spec",
        "podGroups[1].name: pod group name `g` is not unique",
        "podGroups[2].name: pod group has no name",
        "podGroup.subGroups[1].componentName: subgroup component `phantom` is not a component: the subgroup is ignored",
    ] {
        assert!(all.contains(needle), "missing `{needle}` in:\n{all}");
    }
    assert_eq!(warnings.len(), 6, "{all}");
    assert!(
        warnings.iter().all(|w| w.starts_with("test.yaml: ")),
        "{all}"
    );
    // `null` reads as the default field name, as Go's decoder leaves the field unset.
    let plan = def.root().status.as_ref().expect("status");
    assert_eq!(
        plan.conditions.as_ref().expect("conditions").reason_field,
        "reason"
    );
    // The unknown subgroup is dropped; the known one stays.
    match &def.gang {
        Some(kartograf::definition::plan::GangPlan::PodGroup(g)) => {
            assert_eq!(
                g.subgroups,
                [def.component_index("workers").expect("workers")]
            );
        }
        other => panic!("expected the v2 plan, got {other:?}"),
    }
}

#[test]
fn null_fields_load_as_go_reads_them() {
    let text = "apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {name: nulls, labels: null}\nspec:\n  structureDefinition:\n    rootComponent: {name: r, kind: {group: a.b, version: v1, kind: R}, statusDefinition: {statusMappings: {running: null}}}\n    childComponents: null\n    additionalChildKinds: null\n  optimizationInstructions: null\n";
    let def = compile(text).expect("nulls read as unset");
    assert!(def.warnings.is_empty(), "{:?}", def.warnings);
    assert_eq!(def.components.len(), 1);
}

#[test]
fn wrong_api_version_and_wrong_field_types_are_named() {
    let (_, errors) = parse_text(
        "apiVersion: run.ai/v1alpha1\nkind: Karta\nspec:\n  structureDefinition:\n    rootComponent: [1]\n",
        "f.yaml",
    );
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .path
            .contains("spec.structureDefinition.rootComponent"),
        "{errors:?}"
    );
    let text = "apiVersion: v1\nkind: Nope\nspec:\n  structureDefinition:\n    rootComponent: {name: r, kind: {group: a.b, version: v1, kind: R}, statusDefinition: {statusMappings: {}}}\n";
    let errors = compile(text).unwrap_err();
    assert!(
        errors.iter().any(|e| e.path == "apiVersion") && errors.iter().any(|e| e.path == "kind")
    );
}

#[test]
fn both_gang_formats_load_and_v2_wins() {
    let text = std::fs::read_to_string(fixture(
        "../../../tests/engine/data/definitions/jobset-per-replicatedjob.yaml",
    ))
    .unwrap();
    let with_v2 = text.replace(
        "    gangScheduling:\n",
        "    gangScheduling:\n      podGroup:\n        name: whole\n        subGroups: [{componentName: replicatedjob}]\n",
    );
    let def = compile(&with_v2).expect("valid");
    assert!(matches!(
        def.gang,
        Some(kartograf::definition::plan::GangPlan::PodGroup(_))
    ));
}

#[test]
fn condition_field_names_default_like_the_crd() {
    // No reasonFieldName given, yet a reason matcher fires (upstream Go-built definitions
    // never matched reasons in this case).
    let text = r#"
apiVersion: run.ai/v1alpha1
kind: Karta
spec:
  structureDefinition:
    rootComponent:
      name: d
      kind: {group: apps, version: v1, kind: Deployment}
      statusDefinition:
        conditionsDefinition: {path: .status.conditions}
        statusMappings:
          failed: [{byConditions: [{type: Progressing, status: "False", reason: ProgressDeadlineExceeded}]}]
"#;
    let def = compile(text).unwrap();
    let plan = def
        .root()
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap();
    assert_eq!(
        (
            plan.type_field.as_str(),
            plan.status_field.as_str(),
            plan.reason_field.as_str()
        ),
        ("type", "status", "reason")
    );
}

#[test]
fn suspend_values_not_json_encoded_are_warned_about() {
    let text = "apiVersion: run.ai/v1alpha1\nkind: Karta\nspec:\n  structureDefinition:\n    rootComponent:\n      name: r\n      kind: {group: a.b, version: v1, kind: R}\n      statusDefinition: {statusMappings: {}}\n      suspendDefinition:\n        suspendActions: [{path: .spec.mode, value: Suspended}]\n        resumeActions: [{path: .spec.mode, value: '\"Running\"'}]\n";
    let warnings = compile(text).expect("upstream accepts it").warnings;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].path.ends_with("suspendActions[0].value"));
}

#[test]
fn the_embedded_catalog_is_valid_and_upstream_shaped_files_load() {
    let (defs, errors) = load_embedded();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(defs.len() >= 7);
    let (defs, errors) = load_path(
        &fixture("../../../tests/engine/data/definitions"),
        Default::default(),
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        errors.first()
    );
    assert_eq!(defs.len(), 2);
}

#[test]
fn a_directory_overrides_the_embedded_definition_and_versions_fall_back() {
    let (embedded, _) = load_embedded();
    let (extra, _) = load_path(
        &fixture("../../../tests/engine/data/definitions/jobset-per-replicatedjob.yaml"),
        Default::default(),
    );
    let catalog = Catalog::from_layers(2, [embedded, extra]);
    let exact = catalog
        .lookup("jobset.x-k8s.io/v1alpha2", "JobSet")
        .unwrap();
    assert_eq!(exact.definition.name, "test-jobset-per-rj");
    assert!(exact.fallback_from.is_none());
    let other = catalog.lookup("jobset.x-k8s.io/v1beta1", "JobSet").unwrap();
    assert_eq!(
        other.fallback_from.as_deref(),
        Some("jobset.x-k8s.io/v1beta1/JobSet")
    );
    assert!(catalog.lookup("example.com/v1", "JobSet").is_none());
    assert!(catalog.covers("batch", "Job") && catalog.is_child_kind("batch", "Job"));
}

#[test]
fn two_loaders_in_one_process_keep_their_own_phase_precedence() {
    use kartograf::definition::LoadOptions;
    use kartograf::definition::plan::PhasePrecedence;
    let workload_map = LoadOptions {
        phase_precedence: PhasePrecedence::WorkloadMap,
    };
    let dir = fixture("../../../tests/engine/data/definitions/jobset-per-replicatedjob.yaml");
    // Loaded with one loader's options, then with the other's, then the first's again: each
    // keeps what it was given (no process-wide switch).
    for _ in 0..2 {
        let (mapped, errors) = load_path(&dir, workload_map);
        assert!(errors.is_empty(), "{errors:?}");
        let (plain, _) = load_path(&dir, LoadOptions::default());
        assert!(!mapped.is_empty());
        for d in &mapped {
            assert_eq!(
                d.phase_precedence,
                PhasePrecedence::WorkloadMap,
                "{}",
                d.name
            );
        }
        for d in &plain {
            assert_eq!(d.phase_precedence, PhasePrecedence::Kartograf, "{}", d.name);
        }
    }
    // The embedded catalog keeps kartograf's whatever a loader sets; a cluster Karta object
    // follows the layers' options.
    let text = std::fs::read_to_string(&dir).expect("fixture");
    let object = kartograf::manifest::parse_documents(&text)
        .expect("parses")
        .remove(0);
    for options in [workload_map, LoadOptions::default()] {
        let mut layers = kartograf::definition::layers::Layers::new(options);
        assert!(layers.apply_cluster("k", "cluster:k", &object));
        let (catalog, errors) = layers.build();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(catalog.options(), options);
        for d in catalog.definitions() {
            let expected = if d.origin == "cluster:k" {
                options.phase_precedence
            } else {
                PhasePrecedence::Kartograf
            };
            assert_eq!(d.phase_precedence, expected, "{} ({})", d.name, d.origin);
        }
        assert!(catalog.definitions().any(|d| d.origin == "cluster:k"));
    }
}
