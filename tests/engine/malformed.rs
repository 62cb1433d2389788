//! Malformed input never panics: the CLI exits with a clear error or resolves a partial
//! graph with diagnostics; the library resolves arbitrary JSON without panicking.

use crate::common::*;
use kartograf::definition::Catalog;
use kartograf::expr::Limits;
use kartograf::source::offline::Snapshot;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Exit status of the binary; a panic would be 101.
fn run_resolve(text: &str, extra: &[&str]) -> (i32, String, String) {
    let path = temp_file("input.yaml", text);
    let path = path.to_str().unwrap().to_owned();
    let mut args = vec!["resolve", "-f", path.as_str(), "-o", "json"];
    args.extend_from_slice(extra);
    let out = kartograf(&args);
    let code = out.status.code().unwrap_or(-1);
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const JOBSET_HEAD: &str = "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: js, namespace: ml, uid: js-1}\n";

#[test]
fn not_yaml_is_a_clear_error() {
    let (code, _, err) = run_resolve("{{{ this is : not [ yaml", &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not valid YAML or JSON"), "{err}");
}

#[test]
fn duplicate_keys_are_a_clear_error() {
    let (code, _, err) = run_resolve(&format!("{JOBSET_HEAD}spec: {{}}\nspec: {{}}\n"), &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.to_lowercase().contains("duplicate"), "{err}");
}

#[test]
fn wrong_types_and_missing_status_give_a_partial_graph() {
    let text = format!(
        "{JOBSET_HEAD}spec:\n  replicatedJobs:\n    - name: 7\n      replicas: many\n      template: [1, 2]\n"
    );
    let (code, out, err) = run_resolve(&text, &[]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["workload"]["diagnostics"]
            .as_array()
            .is_some_and(|d| !d.is_empty()),
        "{out}"
    );
}

#[test]
fn pods_without_owners_and_objects_without_names_are_handled() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: lonely}\nspec: {containers: 5}\n---\napiVersion: v1\nkind: Pod\nmetadata: {}\n";
    let (code, out, err) = run_resolve(text, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("skipped a document"), "{err}");
    assert!(out.contains("lonely"));
}

#[test]
fn deep_nesting_is_survived() {
    let mut nested = String::from("1");
    for _ in 0..200 {
        nested = format!("[{nested}]");
    }
    let text = format!(
        "{{\"apiVersion\":\"jobset.x-k8s.io/v1alpha2\",\"kind\":\"JobSet\",\"metadata\":{{\"name\":\"deep\",\"uid\":\"d\"}},\"spec\":{{\"x\":{nested}}}}}"
    );
    let (code, _, err) = run_resolve(&text, &[]);
    assert!(code == 0 || code == 1, "no crash: {code} {err}");
}

#[test]
fn a_five_megabyte_object_is_reported_not_fatal() {
    let big = "x".repeat(5 * 1024 * 1024);
    let doc = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                     "metadata": {"name": "huge", "uid": "h", "annotations": {"blob": big}}, "spec": {}});
    let (code, out, err) = run_resolve(&doc.to_string(), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("object_unreadable"),
        "the size budget is reported"
    );
}

#[test]
fn no_definition_and_not_found_have_their_exit_codes() {
    let (code, _, err) = run_resolve(
        "apiVersion: example.com/v1\nkind: Mystery\nmetadata: {name: m}\n",
        &["mystery/m"],
    );
    assert_eq!(
        code, 3,
        "a kind without a definition is never a root: {err}"
    );
    let (code, _, err) = run_resolve(JOBSET_HEAD, &["jobset/absent"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("JobSet/ml/js"),
        "lists what the files hold: {err}"
    );
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z0-9./-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("1"),
            Just("4Gi"),
            Just("500m"),
            Just("True"),
            Just("Running"),
            Just("0")
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        let keys = prop_oneof![
            Just("spec".to_owned()),
            Just("status".to_owned()),
            Just("replicatedJobs".to_owned()),
            Just("template".to_owned()),
            Just("replicas".to_owned()),
            Just("parallelism".to_owned()),
            Just("name".to_owned()),
            Just("containers".to_owned()),
            Just("resources".to_owned()),
            Just("requests".to_owned()),
            Just("limits".to_owned()),
            Just("nvidia.com/gpu".to_owned()),
            Just("conditions".to_owned()),
            Just("type".to_owned()),
            Just("labels".to_owned()),
            Just("metadata".to_owned()),
            Just("pytorchReplicaSpecs".to_owned()),
            Just("Worker".to_owned()),
            "[a-zA-Z]{1,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn resolve_arbitrary(
    catalog: &Catalog,
    api_version: &str,
    kind: &str,
    spec: Value,
    status: Value,
    pod_spec: Value,
) {
    let mut snapshot = Snapshot::default();
    let root = json!({"apiVersion": api_version, "kind": kind,
                      "metadata": {"name": "w", "namespace": "ml", "uid": "root"},
                      "spec": spec, "status": status});
    snapshot.add(&root, Limits::default(), "prop");
    for i in 0..3 {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": format!("p{i}"), "namespace": "ml", "uid": format!("p{i}"),
                                      "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "workers",
                                                 "training.kubeflow.org/replica-type": if i == 0 { "master" } else { "worker" }},
                                      "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "w", "uid": "root", "controller": true}]},
                         "spec": pod_spec, "status": {"phase": "Running"}});
        snapshot.add(&pod, Limits::default(), "prop");
    }
    let root = snapshot
        .select(catalog, Some(&format!("{kind}/w")), None)
        .expect("selects");
    let r = snapshot.resolve(catalog, &root, None).expect("resolves");
    assert!(r.workload.status.is_some());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn resolve_never_panics_on_arbitrary_objects(spec in arbitrary_json(), status in arbitrary_json(), pod_spec in arbitrary_json()) {
        let catalog = catalog();
        resolve_arbitrary(catalog, "jobset.x-k8s.io/v1alpha2", "JobSet", spec.clone(), status.clone(), pod_spec.clone());
        resolve_arbitrary(catalog, "kubeflow.org/v1", "PyTorchJob", spec.clone(), status.clone(), pod_spec.clone());
        resolve_arbitrary(catalog, "apps/v1", "Deployment", spec, status, pod_spec);
    }

    #[test]
    fn resolve_never_panics_on_mutated_real_objects(path in prop::collection::vec(0usize..8, 1..4), replacement in arbitrary_json()) {
        // Replace one subtree of the seed JobSet with arbitrary JSON.
        let text = std::fs::read_to_string(fixture("jobset-seed.yaml")).unwrap();
        let mut docs = kartograf::manifest::parse_documents(&text).unwrap();
        let mut pointer = String::new();
        let mut at = &docs[0];
        for step in path {
            let (key, next) = match at {
                Value::Object(m) if !m.is_empty() => { let (k, v) = m.iter().nth(step % m.len()).unwrap(); (k.replace('~', "~0").replace('/', "~1"), v) }
                Value::Array(a) if !a.is_empty() => { let i = step % a.len(); (i.to_string(), &a[i]) }
                _ => break,
            };
            pointer.push('/');
            pointer.push_str(&key);
            at = next;
        }
        if let Some(target) = docs[0].pointer_mut(&pointer) {
            *target = replacement;
        }
        let catalog = catalog();
        let mut snapshot = Snapshot::default();
        for d in &docs { snapshot.add(d, Limits::default(), "mutated"); }
        if let Ok(root) = snapshot.select(catalog, None, None) {
            let _ = snapshot.resolve(catalog, &root, None);
        }
    }
}
