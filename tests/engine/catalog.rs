//! Catalog conformance: every `tests/catalog/<framework>/<case>.yaml` cluster snapshot is
//! resolved with the embedded catalog and checked against `<case>.expect.yaml`.
//!
//! Expectation format (all keys but `phase` optional):
//!
//! ```yaml
//! target: jobset/llama-train          # KIND/NAME; default: the only root workload
//! phase: Running                      # primary phase
//! matched: [Running, Degraded]        # every matched status
//! pods: {desired: 3, current: 3, ready: 2}
//! gpus: {desired: 12, held: 8}
//! gangs:                              # every gang group, in name order
//!   - {name: jobset, minMember: 3, pods: 3, minSubgroups: 3}
//! placements:                         # pod name -> where it sits ("" = unattributed)
//!   llama-train-workers-1-0-x7k2p: {component: replicatedjob, instance: workers, replica: "1"}
//! unattributed: [debug-pod]
//! diagnostics: [unattributed_pod]     # the exact set of diagnostic codes (default: none)
//! ```

use crate::common::*;
use kartograf::expr::Limits;
use kartograf::proto::v1 as pb;
use kartograf::source::offline::Snapshot;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn cases() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/catalog");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root)
        .expect("tests/catalog exists")
        .flatten()
    {
        if !dir.path().is_dir() {
            continue;
        }
        for file in std::fs::read_dir(dir.path()).expect("readable").flatten() {
            let p = file.path();
            if p.to_string_lossy().ends_with(".expect.yaml") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn phase_name(p: i32) -> String {
    kartograf::proto::phase_name(p).to_owned()
}

fn check_case(expect_path: &Path, catalog: &kartograf::definition::Catalog) -> Vec<String> {
    let mut errors = Vec::new();
    let snapshot_path = PathBuf::from(
        expect_path
            .to_string_lossy()
            .replace(".expect.yaml", ".yaml"),
    );
    let text = std::fs::read_to_string(expect_path).expect("expectation readable");
    let expect: Value = match serde_saphyr::from_str(&text) {
        Ok(v) => v,
        Err(e) => return vec![format!("bad expectation file: {e}")],
    };
    let snapshot = match Snapshot::load(std::slice::from_ref(&snapshot_path), Limits::default()) {
        Ok(s) => s,
        Err(e) => return vec![format!("snapshot: {e}")],
    };
    if !snapshot.warnings.is_empty() {
        errors.push(format!("snapshot warnings: {:?}", snapshot.warnings));
    }
    let root = match snapshot.select(catalog, expect["target"].as_str(), None) {
        Ok(r) => r,
        Err(e) => return vec![format!("select: {e}")],
    };
    let r = match snapshot.resolve(catalog, &root, None) {
        Ok(r) => r,
        Err(e) => return vec![format!("resolve: {e}")],
    };
    let w = &r.workload;
    fn diff(errors: &mut Vec<String>, what: &str, want: String, got: String) {
        if want != got {
            errors.push(format!("{what}: expected {want}, got {got}"));
        }
    }
    let status = w.status.clone().unwrap_or_default();
    if let Some(p) = expect["phase"].as_str() {
        diff(&mut errors, "phase", p.to_owned(), phase_name(status.phase));
    }
    if let Some(m) = expect["matched"].as_array() {
        let want: Vec<String> = m
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .collect();
        diff(
            &mut errors,
            "matched",
            want.join(","),
            status
                .matched
                .iter()
                .map(|p| phase_name(*p))
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    let pods = w.pods.unwrap_or_default();
    for (key, got) in [
        ("desired", pods.desired),
        ("current", pods.current),
        ("ready", pods.ready),
    ] {
        if let Some(n) = expect["pods"][key].as_u64() {
            diff(
                &mut errors,
                &format!("pods.{key}"),
                n.to_string(),
                got.to_string(),
            );
        }
    }
    let (gd, gh) = gpus(w);
    for (key, got) in [("desired", gd), ("held", gh)] {
        if let Some(n) = expect["gpus"][key].as_f64()
            && (n - got).abs() > 1e-6
        {
            errors.push(format!("gpus.{key}: expected {n}, got {got}"));
        }
    }
    if let Some(gangs) = expect["gangs"].as_array() {
        let groups = &w.gang.clone().unwrap_or_default().groups;
        let got: Vec<String> = groups.iter().map(describe_gang).collect();
        let want: Vec<String> = gangs
            .iter()
            .map(|g| {
                format!(
                    "{} min={} pods={} subgroups={}",
                    g["name"].as_str().unwrap_or_default(),
                    g["minMember"].as_u64().unwrap_or(0),
                    g["pods"].as_u64().map_or("?".into(), |n| n.to_string()),
                    g["minSubgroups"].as_u64().unwrap_or(0)
                )
            })
            .collect();
        let got: Vec<String> = got
            .iter()
            .zip(
                gangs
                    .iter()
                    .map(|g| g["pods"].is_null())
                    .chain(std::iter::repeat(false)),
            )
            .map(|(s, any_pods)| if any_pods { replace_pods(s) } else { s.clone() })
            .collect();
        diff(&mut errors, "gangs", want.join("; "), got.join("; "));
    }
    if let Some(map) = expect["placements"].as_object() {
        for (pod, want) in map {
            let uid = snapshot
                .pods()
                .iter()
                .find(|p| p.meta.name == *pod)
                .map(|p| p.meta.identity());
            let Some(uid) = uid else {
                errors.push(format!("placement: no pod {pod} in the snapshot"));
                continue;
            };
            let got = r.placements.get(&uid).cloned().unwrap_or_default();
            let want = format!(
                "{}/{}[{}]",
                want["component"].as_str().unwrap_or_default(),
                want["instance"].as_str().unwrap_or_default(),
                want["replica"].as_str().unwrap_or_default()
            );
            diff(
                &mut errors,
                &format!("placement of {pod}"),
                want,
                format!("{}/{}[{}]", got.component, got.instance, got.replica),
            );
        }
    }
    let unattributed: BTreeSet<String> =
        w.unattributed_pods.iter().map(|p| p.name.clone()).collect();
    let want_unattributed: BTreeSet<String> = expect["unattributed"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    diff(
        &mut errors,
        "unattributed",
        format!("{want_unattributed:?}"),
        format!("{unattributed:?}"),
    );
    let codes: BTreeSet<String> = w.diagnostics.iter().map(|d| d.code.clone()).collect();
    let want_codes: BTreeSet<String> = expect["diagnostics"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    if codes != want_codes {
        let details: Vec<String> = w
            .diagnostics
            .iter()
            .map(|d| format!("{}: {}", d.code, d.message))
            .collect();
        errors.push(format!(
            "diagnostics: expected {want_codes:?}, got {details:?}"
        ));
    }
    errors
}

fn describe_gang(g: &pb::GangGroup) -> String {
    format!(
        "{} min={} pods={} subgroups={}",
        g.name,
        g.min_member,
        g.pods.len(),
        g.min_subgroups
    )
}

fn replace_pods(s: &str) -> String {
    let mut parts: Vec<String> = s.split(' ').map(str::to_owned).collect();
    for p in parts.iter_mut() {
        if p.starts_with("pods=") {
            *p = "pods=?".to_owned();
        }
    }
    parts.join(" ")
}

#[test]
fn every_catalog_case_resolves_as_expected() {
    let catalog = catalog();
    let cases = cases();
    let mut failures = Vec::new();
    for case in &cases {
        let errors = check_case(case, catalog);
        if !errors.is_empty() {
            let name = case
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap_or(case)
                .display()
                .to_string();
            failures.push(format!("{name}:\n  {}", errors.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} catalog cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
