//! Karmada's own test data (`tests/karmada/`, copied unchanged) replayed against the
//! webhook: each case posted as Karmada would call the interpreter, the answer compared
//! with the expected output the way Karmada's `thirdparty_test.go` compares (quantities by
//! value, components and dependencies sorted, `{{EXCLUDE}}` fields left out). The cases
//! that differ must be exactly [`KNOWN_DIFFERENCES`] (each explained in docs/karmada.md):
//! a new difference, or a difference that went away, fails.

use super::{apply_patch, context, decode_patch, post, serve_webhook, verify};
use kartograf::model::resources::parse_quantity;
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// (kind, operation, case name, reason) of every case whose answer differs from Karmada's;
/// each reason is a row of the differences table in docs/karmada.md.
const KNOWN_DIFFERENCES: &[(&str, &str, &str, &str)] = &[
    (
        "Job",
        "AggregateStatus",
        "VCJob with controlledResources aggregation",
        "aggregate-rule",
    ),
    (
        "Job",
        "AggregateStatus",
        "VCJob with duration handling (string format)",
        "aggregate-rule",
    ),
    (
        "Job",
        "AggregateStatus",
        "VCJob with multiple status items, mixed states",
        "aggregate-rule",
    ),
    (
        "Job",
        "AggregateStatus",
        "VCJob with taskStatusCount aggregation",
        "aggregate-rule",
    ),
    (
        "Job",
        "InterpretComponent",
        "VCJob with mixed tasks (some with names, some without)",
        "volcano-replicas",
    ),
    (
        "Job",
        "InterpretComponent",
        "VCJob with tasks having names",
        "volcano-replicas",
    ),
    (
        "Job",
        "InterpretComponent",
        "VCJob with tasks without minAvailable (should use default 1)",
        "volcano-replicas",
    ),
    (
        "Job",
        "InterpretComponent",
        "VCJob with tasks without names (should use task-0, task-1, etc.)",
        "volcano-replicas",
    ),
    (
        "MPIJob",
        "AggregateStatus",
        "MPIJob with failed cluster",
        "aggregate-rule",
    ),
    (
        "MPIJob",
        "AggregateStatus",
        "MPIJob with partial success",
        "aggregate-rule",
    ),
    (
        "MPIJob",
        "AggregateStatus",
        "MPIJob with three status items",
        "aggregate-rule",
    ),
    (
        "MPIJob",
        "InterpretComponent",
        "MPIJob with nil template (should handle gracefully)",
        "no-template",
    ),
    (
        "MPIJob",
        "InterpretComponent",
        "MPIJob with nil/empty replicas (should default to 1 for Launcher, 0 for Worker)",
        "invalid-replicas",
    ),
    (
        "MPIJob",
        "InterpretHealth",
        "MPIJob with Failed condition status False should be healthy",
        "health-normalized",
    ),
    (
        "PyTorchJob",
        "AggregateStatus",
        "PyTorchJob with empty status items",
        "aggregate-empty",
    ),
    (
        "PyTorchJob",
        "AggregateStatus",
        "PyTorchJob with failed cluster",
        "aggregate-rule",
    ),
    (
        "PyTorchJob",
        "AggregateStatus",
        "PyTorchJob with partial success",
        "aggregate-rule",
    ),
    (
        "PyTorchJob",
        "AggregateStatus",
        "PyTorchJob with two status items",
        "aggregate-rule",
    ),
    (
        "PyTorchJob",
        "InterpretComponent",
        "PyTorchJob with nil template (should handle gracefully)",
        "no-template",
    ),
    (
        "RayCluster",
        "AggregateStatus",
        "RayCluster with CPU millicores and various memory units",
        "aggregate-rule",
    ),
    (
        "RayCluster",
        "AggregateStatus",
        "RayCluster with two status items",
        "aggregate-rule",
    ),
    (
        "RayCluster",
        "AggregateStatus",
        "RayCluster with unhealthy cluster",
        "aggregate-rule",
    ),
    (
        "RayCluster",
        "InterpretComponent",
        "RayCluster with worker groups without explicit names",
        "unnamed-group",
    ),
    (
        "RayJob",
        "AggregateStatus",
        "RayJob with mixed statuses",
        "aggregate-rule",
    ),
    (
        "RayJob",
        "AggregateStatus",
        "RayJob with retrying status",
        "aggregate-rule",
    ),
    (
        "RayJob",
        "AggregateStatus",
        "RayJob with two status items",
        "aggregate-rule",
    ),
    (
        "RayJob",
        "InterpretComponent",
        "RayJob with head and multiple worker groups",
        "submitter",
    ),
    (
        "RayJob",
        "InterpretComponent",
        "RayJob with head and single worker group",
        "submitter",
    ),
    (
        "RayJob",
        "InterpretComponent",
        "RayJob with submitter pod template",
        "submitter",
    ),
    (
        "RayJob",
        "InterpretComponent",
        "RayJob with worker groups without explicit names",
        "unnamed-group",
    ),
    (
        "RayJob",
        "InterpretComponent",
        "RayJob with zero replica worker group",
        "submitter",
    ),
    (
        "RayService",
        "AggregateStatus",
        "RayService multi-cluster with mixed app statuses",
        "aggregate-rule",
    ),
    (
        "RayService",
        "ReviseReplica",
        "Multiple worker groups with proportional distribution",
        "divided-count",
    ),
    (
        "RayService",
        "ReviseReplica",
        "Partial zero group preserves ratio",
        "divided-count",
    ),
    (
        "RayService",
        "ReviseReplica",
        "Scale from 0 workers with equal distribution",
        "divided-count",
    ),
    (
        "SparkApplication",
        "AggregateStatus",
        "SparkApplication picks latest lastSubmissionAttemptTime",
        "aggregate-rule",
    ),
    (
        "SparkApplication",
        "AggregateStatus",
        "SparkApplication picks latest terminationTime",
        "aggregate-rule",
    ),
    (
        "SparkApplication",
        "AggregateStatus",
        "SparkApplication with missing attempts fields",
        "aggregate-rule",
    ),
    (
        "SparkApplication",
        "AggregateStatus",
        "SparkApplication with three status items",
        "aggregate-rule",
    ),
    (
        "SparkApplication",
        "AggregateStatus",
        "SparkApplication worst state selected by priority",
        "aggregate-rule",
    ),
    (
        "SparkApplication",
        "InterpretComponent",
        "SparkApplication interpret component for non-JVM job",
        "spark-memory",
    ),
    (
        "SparkApplication",
        "InterpretComponent",
        "SparkApplication interpret component with pod template",
        "fragmented-claim",
    ),
    (
        "SparkApplication",
        "InterpretHealth",
        "SparkApplication healthy when applicationState.state is empty",
        "health-normalized",
    ),
    (
        "TFJob",
        "AggregateStatus",
        "TFJob with failed cluster",
        "aggregate-rule",
    ),
    (
        "TFJob",
        "AggregateStatus",
        "TFJob with multiple replica types",
        "aggregate-rule",
    ),
    (
        "TFJob",
        "AggregateStatus",
        "TFJob with nil status items",
        "aggregate-empty",
    ),
    (
        "TFJob",
        "AggregateStatus",
        "TFJob with partial success",
        "aggregate-rule",
    ),
    (
        "TFJob",
        "AggregateStatus",
        "TFJob with two status items (both succeeded)",
        "aggregate-rule",
    ),
    (
        "TFJob",
        "InterpretComponent",
        "TFJob with nil template (should handle gracefully)",
        "no-template",
    ),
];

/// The reasons docs/karmada.md explains.
const REASONS: &[&str] = &[
    "aggregate-rule",
    "aggregate-empty",
    "volcano-replicas",
    "unnamed-group",
    "submitter",
    "no-template",
    "invalid-replicas",
    "divided-count",
    "spark-memory",
    "fragmented-claim",
    "health-normalized",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else if p.to_string_lossy().ends_with("-test.yaml") {
            out.push(p);
        }
    }
}

/// Quantities as numbers (milli-units), so `"1"` equals `1000m`, as Go's `Quantity.Equal`.
fn normalize_quantities(v: &Json) -> Json {
    match v {
        Json::Object(m) => Json::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("resourceRequest", Json::Object(q)) => Json::Object(
                            q.iter()
                                .map(|(n, x)| {
                                    let text = x
                                        .as_str()
                                        .map(str::to_owned)
                                        .unwrap_or_else(|| x.to_string());
                                    (
                                        n.clone(),
                                        json!(parse_quantity(&text).map(|m| m.to_string())),
                                    )
                                })
                                .collect(),
                        ),
                        _ => normalize_quantities(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Json::Array(a) => Json::Array(a.iter().map(normalize_quantities).collect()),
        other => other.clone(),
    }
}

/// Drops empty objects, arrays and null members (Go's `omitempty` and nil are the same).
fn prune(v: &Json) -> Json {
    match v {
        Json::Object(m) => Json::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), prune(v)))
                .filter(|(_, v)| !(v.is_null() || v == &json!({}) || v == &json!([])))
                .collect(),
        ),
        Json::Array(a) => Json::Array(a.iter().map(prune).collect()),
        other => other.clone(),
    }
}

/// Removes from `actual` the fields `expected` marks `{{EXCLUDE}}` (and from `expected`).
fn exclude(expected: &mut Json, actual: &mut Json) {
    if let (Json::Object(e), Json::Object(a)) = (expected, actual) {
        let marked: Vec<String> = e
            .iter()
            .filter(|(_, v)| *v == "{{EXCLUDE}}")
            .map(|(k, _)| k.clone())
            .collect();
        for k in marked {
            e.remove(&k);
            a.remove(&k);
        }
        for (k, ev) in e.iter_mut() {
            if let Some(av) = a.get_mut(k) {
                exclude(ev, av);
            }
        }
    }
}

fn sorted_by(v: &Json, key: &dyn Fn(&Json) -> String) -> Json {
    let mut items = v.as_array().cloned().unwrap_or_default();
    items.sort_by_key(|i| key(i));
    Json::Array(items)
}

/// The answer in the shape of Karmada's expected output for `key`.
fn actual(key: &str, response: &Json, case: &Json) -> Json {
    match key {
        "replica" => response["replicas"].clone(),
        "requires" => response
            .get("replicaRequirements")
            .cloned()
            .unwrap_or(Json::Null),
        "components" => sorted_by(&response["components"], &|c| {
            c["name"].as_str().unwrap_or("").to_owned()
        }),
        "dependencies" => sorted_by(&response["dependencies"], &|d| {
            format!(
                "{}|{}|{}|{}",
                d["apiVersion"], d["kind"], d["namespace"], d["name"]
            )
        }),
        "healthy" => response["healthy"].clone(),
        "status" => response["rawStatus"].clone(),
        "aggregatedStatus" => {
            // Karmada's expected objects carry the status alone: it is what is compared.
            let mut object = case["desiredObj"].clone();
            if let Some(p) = response["patch"].as_str() {
                apply_patch(&mut object, &decode_patch(p));
            }
            object["status"].clone()
        }
        "revised" | "retained" => {
            let mut object = case["desiredObj"].clone();
            if let Some(p) = response["patch"].as_str() {
                apply_patch(&mut object, &decode_patch(p));
            }
            object
        }
        _ => Json::Null,
    }
}

fn expected(key: &str, value: &Json) -> Json {
    match key {
        "aggregatedStatus" => value["status"].clone(),
        "components" => sorted_by(value, &|c| c["name"].as_str().unwrap_or("").to_owned()),
        "dependencies" => sorted_by(value, &|d| {
            format!(
                "{}|{}|{}|{}",
                d["apiVersion"], d["kind"], d["namespace"], d["name"]
            )
        }),
        _ => value.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karmada_test_data_agrees_except_for_the_documented_differences() {
    let (addr, _shared, _stop) = serve_webhook(kartograf::webhook::Settings::default()).await;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/karmada");
    let mut all = Vec::new();
    files(&root, &mut all);
    assert!(all.len() >= 30, "Karmada's test files are there");
    // (kind, operation) -> (agreeing, total)
    let mut table: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    let mut differing: BTreeSet<(String, String, String)> = BTreeSet::new();
    let mut details = String::new();
    for path in &all {
        let text = std::fs::read_to_string(path).unwrap();
        let cases: Vec<Json> = serde_saphyr::from_multiple(&text).unwrap();
        for (n, case) in cases.iter().enumerate().filter(|(_, c)| c.is_object()) {
            let op = case["operation"].as_str().unwrap().to_owned();
            let name = case["name"].as_str().unwrap_or("").to_owned();
            // The object Karmada's rule reads: the observed one for status and health, the
            // desired one otherwise (either when the case gives only one).
            let (first, second) = match op.as_str() {
                "InterpretStatus" | "InterpretHealth" => ("observedObj", "desiredObj"),
                _ => ("desiredObj", "observedObj"),
            };
            let object = case
                .get(first)
                .or_else(|| case.get(second))
                .cloned()
                .unwrap_or_default();
            let kind = object["kind"].as_str().unwrap().to_owned();
            let mut extra = json!({});
            if let Some(items) = case.get("statusItems") {
                extra["aggregatedStatus"] = items.clone();
            }
            if let Some(observed) = case.get("observedObj").filter(|_| op == "Retain") {
                extra["observedObject"] = observed.clone();
            }
            let replicas = case["inputReplicas"].as_i64().unwrap_or(0) as i32;
            let uid = format!("case-{n}");
            let (status, body) = post(addr, &context(&uid, &op, &object, replicas, extra)).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            let response = verify(&uid, &op, &body);
            let mut agree = response["successful"] == true;
            let mut why = String::new();
            if !agree {
                why = format!("unsuccessful: {}", response["status"]);
            }
            for (key, want) in case["output"].as_object().into_iter().flatten() {
                if !agree {
                    break;
                }
                let mut want = prune(&normalize_quantities(&expected(key, want)));
                let mut got = prune(&normalize_quantities(&actual(key, &response, case)));
                exclude(&mut want, &mut got);
                if want != got {
                    agree = false;
                    why = format!("{key}: expected {want}\n      got {got}");
                }
            }
            let entry = table.entry((kind.clone(), op.clone())).or_default();
            entry.1 += 1;
            if agree {
                entry.0 += 1;
            } else {
                details.push_str(&format!(
                    "    ({kind:?}, {op:?}, {name:?}, \"?\"),\n      // {}\n",
                    why.chars().take(300).collect::<String>()
                ));
                differing.insert((kind, op, name));
            }
        }
    }
    let mut report = String::from("| Kind | Operation | Agree | Cases |\n|---|---|---|---|\n");
    for ((kind, op), (agree, total)) in &table {
        report.push_str(&format!("| {kind} | {op} | {agree} | {total} |\n"));
    }
    println!("{report}");
    let known: BTreeSet<(String, String, String)> = KNOWN_DIFFERENCES
        .iter()
        .map(|(k, o, n, _)| (k.to_string(), o.to_string(), n.to_string()))
        .collect();
    let docs =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/karmada.md"))
            .unwrap();
    for (_, _, _, reason) in KNOWN_DIFFERENCES {
        assert!(REASONS.contains(reason), "unknown reason {reason}");
        assert!(
            docs.contains(&format!("`{reason}`")),
            "docs/karmada.md explains `{reason}`"
        );
    }
    for line in report.lines().skip(2) {
        assert!(
            docs.contains(line),
            "docs/karmada.md shows the agreement row `{line}`"
        );
    }
    let new: Vec<_> = differing.difference(&known).collect();
    let gone: Vec<_> = known.difference(&differing).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "differences not in KNOWN_DIFFERENCES: {new:#?}\nknown differences that agree now: {gone:#?}\n{details}\n{report}"
    );
}
