//! The offline CLI: canonical JSON that parses back into the API types, YAML, listing and
//! checking definitions.

use crate::common::*;
use kartograf::proto::v1 as pb;

#[test]
fn json_output_is_the_proto3_canonical_mapping() {
    let out = kartograf(&[
        "resolve",
        "-f",
        "tests/fixtures/engine/pytorchjob-readme.yaml",
        "-o",
        "json",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let response: pb::ResolveResponse =
        serde_json::from_str(&text).expect("parses back as a ResolveResponse");
    let w = response.workload.unwrap();
    assert_eq!(w.pods.unwrap().desired, 5);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let w = &v["workload"];
    assert_eq!(w["status"]["phase"], "PHASE_RUNNING", "enums as names");
    assert_eq!(
        w["totals"]["desired"]["cpuMillis"], "20000",
        "int64 as strings, camelCase names"
    );
    assert!(w.get("revision").is_none(), "default values are omitted");
    assert!(w["unattributedPods"].is_null());
}

#[test]
fn yaml_output_and_summary() {
    let out = kartograf(&[
        "resolve",
        "-f",
        "tests/fixtures/engine/jobset-seed.yaml",
        "-o",
        "yaml",
        "--summary",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("phase: PHASE_RUNNING"), "{text}");
    assert!(!text.contains("components:"), "summary drops the tree");
}

#[test]
fn several_files_and_a_namespace() {
    let out = kartograf(&[
        "resolve",
        "-f",
        "tests/fixtures/engine/jobset-seed.yaml",
        "-f",
        "tests/fixtures/engine/deployment.yaml",
        "deployment/web",
        "-n",
        "serving",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kartograf(&["resolve", "-f", "tests/fixtures/engine"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a folder of many workloads needs KIND/NAME"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("name one as KIND/NAME"));
}

#[test]
fn definitions_lists_the_catalog() {
    let out = kartograf(&["definitions"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("NAME"));
    for name in [
        "batch-job-v1",
        "batch-cronjob-v1",
        "apps-deployment-v1",
        "apps-statefulset-v1",
        "core-pod-v1",
        "jobset-x-k8s-io-jobset-v1alpha2",
        "kubeflow-org-pytorchjob-v1",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let out = kartograf(&["definitions", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "KartaList");
    assert!(
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k["apiVersion"] == "run.ai/v1alpha1")
    );
}

#[test]
fn check_passes_the_catalog_and_fails_bad_files() {
    let out = kartograf(&["check", "catalog"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let bad = temp_file(
        "bad.yaml",
        "apiVersion: run.ai/v1alpha1\nkind: Karta\nspec: {}\n",
    );
    let out = kartograf(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("INVALID"));
    let out = kartograf(&[
        "resolve",
        "-f",
        "tests/fixtures/engine/jobset-seed.yaml",
        "-d",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "invalid --definitions are an error, listed"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("structureDefinition"));
}
