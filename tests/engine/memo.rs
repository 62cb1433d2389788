//! Answers of evaluations on pods are remembered on the pod per definition (see
//! `resolve::memo`): a second resolve reuses them and gives the same graph, evaluation errors
//! are reported again from memory, and another definition asks again.

use crate::common::*;
use kartograf::definition::catalog::{Catalog, load_embedded, load_path};
use kartograf::expr::Limits;
use kartograf::source::offline::Snapshot;
use serde_json::json;

/// A test-only kind whose pods are keyed by a label the definition reads with `KEY`.
fn catalog(generation: u64, key: &str) -> Catalog {
    let text = format!(
        r#"apiVersion: run.ai/v1alpha1
kind: Karta
metadata:
  name: test-trainer
spec:
  structureDefinition:
    rootComponent:
      name: trainer
      kind: {{group: example.com, version: v1, kind: Trainer}}
      statusDefinition:
        conditionsDefinition: {{path: .status.conditions}}
        statusMappings:
          running: [{{byConditions: [{{type: Running, status: "True"}}]}}]
    childComponents:
      - name: worker
        ownerRef: trainer
        specDefinition:
          podTemplateSpecPath: .spec.template
        scaleDefinition:
          replicasPath: .spec.replicas
        podSelector:
          componentTypeSelector:
            matchLabels: {{role: worker}}
          replicaSelector:
            keyPath: '{key}'
"#
    );
    let path = temp_file("trainer.yaml", &text);
    let (extra, errors) = load_path(&path, Default::default());
    assert!(errors.is_empty(), "{errors:?}");
    let (embedded, errors) = load_embedded();
    assert!(errors.is_empty());
    Catalog::from_layers(generation, [embedded, extra])
}

fn snapshot() -> Snapshot {
    let mut docs = vec![json!({
        "apiVersion": "example.com/v1", "kind": "Trainer",
        "metadata": {"name": "t", "namespace": "ml", "uid": "t"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "main"}]}}},
        "status": {"conditions": [{"type": "Running", "status": "True"}]}
    })];
    for i in 0..3 {
        docs.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("t-{i}"), "namespace": "ml", "uid": format!("p{i}"),
                         "labels": {"role": "worker", "rank": i.to_string(), "slot": format!("s{i}")},
                         "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Trainer",
                                              "name": "t", "uid": "t", "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }));
    }
    let mut snapshot = Snapshot::default();
    for d in &docs {
        snapshot.add(d, Limits::default(), "test");
    }
    snapshot
}

fn replicas(catalog: &Catalog, snapshot: &Snapshot) -> (Vec<String>, Vec<String>) {
    let root = snapshot.select(catalog, None, None).expect("root");
    let w = snapshot
        .resolve(catalog, &root, None)
        .expect("resolves")
        .workload;
    let keys = component(&w, "trainer").instances[0].children[0]
        .instances
        .iter()
        .map(|i| i.replica.clone())
        .collect();
    let errors = w
        .diagnostics
        .iter()
        .filter(|d| d.code == "eval_error")
        .map(|d| d.message.clone())
        .collect();
    (keys, errors)
}

#[test]
fn a_second_resolve_reuses_the_answers_and_gives_the_same_graph() {
    let catalog = catalog(1, r#".metadata.labels.rank"#);
    let snapshot = snapshot();
    assert!(snapshot.pods().iter().all(|p| p.remembered() == 0));
    let first = replicas(&catalog, &snapshot);
    assert_eq!(first.0, ["0", "1", "2"]);
    // Type selector and replica key, per pod.
    assert!(snapshot.pods().iter().all(|p| p.remembered() == 2));
    let second = replicas(&catalog, &snapshot);
    assert_eq!(first, second);
    assert!(snapshot.pods().iter().all(|p| p.remembered() == 2));
}

#[test]
fn remembered_evaluation_errors_are_reported_again() {
    let catalog = catalog(1, r#".metadata.labels.slot | tonumber | tostring"#);
    let snapshot = snapshot();
    let (keys, errors) = replicas(&catalog, &snapshot);
    assert!(!errors.is_empty(), "tonumber of s0 fails");
    assert!(keys.iter().all(String::is_empty), "{keys:?}");
    let again = replicas(&catalog, &snapshot);
    assert_eq!(again, (keys, errors), "same keys and the same diagnostics");
}

#[test]
fn another_definition_asks_the_pods_again() {
    let snapshot = snapshot();
    let by_rank = catalog(1, r#".metadata.labels.rank"#);
    let by_slot = catalog(2, r#".metadata.labels.slot"#);
    assert_eq!(replicas(&by_rank, &snapshot).0, ["0", "1", "2"]);
    assert_eq!(replicas(&by_slot, &snapshot).0, ["s0", "s1", "s2"]);
    assert_eq!(replicas(&by_rank, &snapshot).0, ["0", "1", "2"]);
}
