//! The definition extensions for devices a controller adds to its pods:
//! `specDefinition.extendedResourcesPath` (requests beyond the spec shape) and
//! `specDefinition.gpuResourceNamesPath` (device-plugin resources that are GPUs).

use crate::common::*;
use kartograf::definition::{Catalog, catalog, load};
use kartograf::expr::Limits;
use kartograf::source::offline::Snapshot;
use std::time::{Duration, Instant};

const DEFINITION: &str = r#"
apiVersion: run.ai/v1alpha1
kind: Karta
spec:
  structureDefinition:
    rootComponent:
      name: box
      kind: {group: example.com, version: v1, kind: Box}
      specDefinition:
        fragmentedPodSpecDefinition:
          resourcesPath: .spec.resources
        extendedResourcesPath: .spec.devices
        gpuResourceNamesPath: .spec.gpuNames
      statusDefinition:
        statusMappings:
          running: [{}]
"#;

fn resolve_box(spec: &str, pod_requests: &str) -> kartograf::resolve::Resolution {
    let (parsed, errors) = load::parse_text(DEFINITION, "box.yaml");
    assert!(errors.is_empty(), "{errors:?}");
    let (defs, errors) = catalog::compile_all(
        parsed,
        "test",
        kartograf::definition::LoadOptions::default(),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let cat = Catalog::from_layers(1, [defs]);
    let snapshot = format!(
        r#"
apiVersion: example.com/v1
kind: Box
metadata: {{name: b, namespace: ns, uid: box-1}}
spec: {spec}
---
apiVersion: v1
kind: Pod
metadata:
  name: b-pod
  namespace: ns
  uid: pod-1
  ownerReferences: [{{apiVersion: example.com/v1, kind: Box, name: b, uid: box-1, controller: true}}]
spec:
  nodeName: n1
  containers: [{{name: c, resources: {{requests: {pod_requests}}}}}]
status: {{phase: Running, conditions: [{{type: Ready, status: "True"}}]}}
"#
    );
    let file = temp_file("box.yaml", &snapshot);
    let snap = Snapshot::load(&[file], Limits::default()).expect("loads");
    let root = snap.select(&cat, None, None).expect("root");
    snap.resolve(&cat, &root, Some(Instant::now() + Duration::from_secs(10)))
        .expect("resolves")
}

#[test]
fn declared_devices_add_to_the_request_and_named_ones_count_as_gpus() {
    let r = resolve_box(
        r#"{resources: {requests: {cpu: "4"}}, devices: {"vendor.com/Model_X": 2, "vendor.com/nic": "1"},
            gpuNames: ["vendor.com/Model_X"]}"#,
        r#"{cpu: "4", "vendor.com/Model_X": "2", "vendor.com/nic": "1"}"#,
    );
    let w = &r.workload;
    assert!(codes(w).is_empty(), "{:?}", w.diagnostics);
    // Desired from the spec: two GPUs per pod; held from the bound pod's own request.
    assert_eq!(gpus(w), (2.0, 2.0));
    let desired = w.totals.as_ref().unwrap().desired.as_ref().unwrap();
    assert_eq!(desired.cpu_millis, 4000);
    assert_eq!(
        desired.raw.get("vendor.com/nic").map(String::as_str),
        Some("1")
    );
    assert_eq!(
        desired.raw.get("vendor.com/Model_X").map(String::as_str),
        Some("2")
    );
}

#[test]
fn without_the_declaration_the_device_is_kept_but_not_a_gpu() {
    let r = resolve_box(
        r#"{devices: {"vendor.com/Model_X": 1}}"#,
        r#"{"vendor.com/Model_X": "1"}"#,
    );
    let w = &r.workload;
    assert_eq!(gpus(w), (0.0, 0.0));
    let held = w.totals.as_ref().unwrap().current.as_ref().unwrap();
    assert_eq!(
        held.raw.get("vendor.com/Model_X").map(String::as_str),
        Some("1")
    );
}

#[test]
fn a_name_already_counted_is_not_counted_twice_and_odd_outputs_are_ignored() {
    // `nvidia.com/gpu` counts on its own; naming it again changes nothing. Numbers, objects,
    // nulls and empty names among the outputs are skipped.
    let r = resolve_box(
        r#"{resources: {limits: {"nvidia.com/gpu": "1"}},
            gpuNames: ["nvidia.com/gpu", 3, null, "", {a: 1}, ["x"]]}"#,
        r#"{"nvidia.com/gpu": "1"}"#,
    );
    let w = &r.workload;
    assert_eq!(gpus(w), (1.0, 1.0));
    assert!(codes(w).is_empty(), "{:?}", w.diagnostics);
}

#[test]
fn a_bad_device_quantity_is_reported_and_skipped() {
    let r = resolve_box(
        r#"{devices: {"vendor.com/Model_X": "lots", "vendor.com/Model_Y": -1}, gpuNames: ["vendor.com/Model_X"]}"#,
        r#"{cpu: "1"}"#,
    );
    let w = &r.workload;
    assert_eq!(gpus(w), (0.0, 0.0));
    let got = codes(w);
    assert!(got.contains(&"bad_quantity".to_owned()), "{got:?}");
    assert!(got.contains(&"negative_quantity".to_owned()), "{got:?}");
}
