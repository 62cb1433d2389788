//! The offline CLI: canonical JSON that parses back into the API types, YAML, listing and
//! checking definitions.

use crate::common::*;
use kartograf::proto::v1 as pb;
use std::process::Command;

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

/// A Deployment as the only document of a file.
fn deployment(namespace: &str, uid: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {namespace}, uid: {uid}}}\nspec: {{replicas: 1, template: {{spec: {{containers: [{{name: c}}]}}}}}}\n"
    )
}

#[test]
fn ambiguity_messages_say_what_would_disambiguate() {
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    // The same object (same uid) in two files: the first file's copy is used, as the server
    // does, and the warning names both files.
    let a = temp_file("a.yaml", &deployment("serving", "u-1"));
    let b = temp_file("b.yaml", &deployment("serving", "u-1"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    for args in [
        vec![
            "resolve",
            "-f",
            a,
            "-f",
            b,
            "deployment/web",
            "-n",
            "serving",
        ],
        vec!["resolve", "-f", a, "-f", b],
    ] {
        let out = kartograf(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let err = text(&out);
        assert!(
            err.contains("Deployment/serving/web (uid u-1) is also in")
                && err.contains(&format!("the copy in {a} is used"))
                && err.contains(b),
            "{err}"
        );
    }
    // Two workloads of one name in two namespaces: -n is what tells them apart.
    let c = temp_file("c.yaml", &deployment("other", "u-2"));
    let out = kartograf(&[
        "resolve",
        "-f",
        a,
        "-f",
        c.to_str().unwrap(),
        "deployment/web",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out).contains("narrow with -n NAMESPACE"),
        "{}",
        text(&out)
    );
    let out = kartograf(&[
        "resolve",
        "-f",
        a,
        "-f",
        c.to_str().unwrap(),
        "deployment/web",
        "-n",
        "other",
        "-o",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // Two different objects (different uids) with one kind, namespace and name.
    let d = temp_file("d.yaml", &deployment("serving", "u-3"));
    let out = kartograf(&[
        "resolve",
        "-f",
        a,
        "-f",
        d.to_str().unwrap(),
        "deployment/web",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out);
    assert!(
        err.contains("different objects with the same kind, namespace and name")
            && err.contains("uid u-1")
            && err.contains("uid u-3"),
        "{err}"
    );
    // KIND.GROUP/NAME names the group, as kubectl does.
    let out = kartograf(&["resolve", "-f", a, "deployment.apps/web", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = kartograf(&["resolve", "-f", a, "deployment.other.io/web"]);
    assert_eq!(out.status.code(), Some(3), "another group is another kind");
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

/// `resolve` of `file` with `extra` arguments: (phase, matched) as the JSON enum names.
fn phase_and_matched(file: &str, extra: &[&str]) -> (String, Vec<String>) {
    let mut args = vec!["resolve", "-f", file, "-o", "json"];
    args.extend_from_slice(extra);
    let out = kartograf(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = &v["workload"]["status"];
    let matched = status["matched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    (status["phase"].as_str().unwrap().to_owned(), matched)
}

const UPSTREAM_DEFINITIONS: &str = "tests/conformance/definitions/karta";
const RUNNING_DEGRADED: [&str; 2] = ["PHASE_RUNNING", "PHASE_DEGRADED"];

#[test]
fn phase_precedence_workload_map_applies_to_unannotated_definitions_from_a_folder() {
    // Workload Map's batch-job-v1 matches Running and Degraded on this Indexed Job.
    let file = "tests/fixtures/engine/job-running-degraded.yaml";
    let (phase, matched) = phase_and_matched(file, &["-d", UPSTREAM_DEFINITIONS]);
    assert_eq!(matched, RUNNING_DEGRADED);
    assert_eq!(phase, "PHASE_DEGRADED", "kartograf's precedence by default");
    let flag = [
        "-d",
        UPSTREAM_DEFINITIONS,
        "--phase-precedence",
        "workload-map",
    ];
    let (phase, matched) = phase_and_matched(file, &flag);
    assert_eq!(matched, RUNNING_DEGRADED, "matched does not change");
    assert_eq!(phase, "PHASE_RUNNING", "the first matched status");
    let out = Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args([
            "resolve",
            "-f",
            file,
            "-o",
            "json",
            "-d",
            UPSTREAM_DEFINITIONS,
        ])
        .env("KARTOGRAF_PHASE_PRECEDENCE", "workload-map")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["workload"]["status"]["phase"], "PHASE_RUNNING",
        "from the environment"
    );
}

#[test]
fn phase_precedence_leaves_the_embedded_catalog_and_annotated_definitions_alone() {
    // The embedded catalog matches Running and Degraded on a Job with a failed pod.
    let file = "tests/fixtures/engine/job-running-failed-pod.yaml";
    for flag in [[].as_slice(), &["--phase-precedence", "workload-map"]] {
        let (phase, matched) = phase_and_matched(file, flag);
        assert_eq!(matched, RUNNING_DEGRADED);
        assert_eq!(phase, "PHASE_DEGRADED", "embedded, {flag:?}");
    }
    // A definition annotated `kartograf` keeps kartograf's precedence under the flag.
    let upstream = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(UPSTREAM_DEFINITIONS)
            .join("docs/catalog/batch-job-v1.yaml"),
    )
    .unwrap();
    let annotated = upstream.replace(
        "metadata:\n  name: batch-job-v1\n",
        "metadata:\n  name: batch-job-v1\n  annotations:\n    kartograf.io/phase-precedence: kartograf\n",
    );
    assert_ne!(annotated, upstream);
    let def = temp_file("batch-job-v1.yaml", &annotated);
    let dir = def.parent().unwrap().to_str().unwrap();
    let (phase, _) = phase_and_matched(
        "tests/fixtures/engine/job-running-degraded.yaml",
        &["-d", dir, "--phase-precedence", "workload-map"],
    );
    assert_eq!(phase, "PHASE_DEGRADED", "the annotation wins");
}

#[test]
fn an_unknown_phase_precedence_is_a_usage_error() {
    let out = kartograf(&[
        "resolve",
        "-f",
        "tests/fixtures/engine/job-running-degraded.yaml",
        "--phase-precedence",
        "first",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--phase-precedence"), "{err}");
}
