//! Workload Map's quickstart (JobSet and LeaderWorkerSet, `schedulerName` and a pod label,
//! upstream's own definitions) through kartograf's patch engine gives the pod templates
//! upstream's library gives: the read-back equals upstream's recorded output
//! (`tests/engine/data/quickstart/`, provenance in its README).

use kartograf::definition::catalog::load_path;
use kartograf::definition::plan::PodSpecSource;
use kartograf::expr::{Expr, Limits, value};
use kartograf::patch::{self, Intents};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/engine/data/quickstart")
        .join(name)
}

#[test]
fn the_quickstart_read_back_equals_upstreams_recorded_output() {
    let (defs, errors) = load_path(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/conformance/definitions/karta/docs/catalog"),
        kartograf::definition::LoadOptions::default(),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let intents = Intents {
        scheduler_name: Some("kai-scheduler".into()),
        labels: BTreeMap::from([("app.kubernetes.io/managed-by".into(), "karta".into())]),
        ..Intents::default()
    };
    let mut lines = Vec::new();
    for file in ["jobset.yaml", "lws.yaml"] {
        let text = std::fs::read_to_string(data(file)).unwrap();
        let object = kartograf::manifest::parse_documents(&text)
            .unwrap()
            .remove(0);
        let def = defs
            .iter()
            .find(|d| d.root_kind.kind == object["kind"])
            .expect("upstream's definition");
        let p = patch::plan(def, &object, &intents).expect("plans");
        let ops: json_patch::Patch = serde_json::from_value(p.json_patch()).unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &ops).expect("applies");
        let val = value::from_json(&patched, Limits::default()).unwrap();
        // Upstream's order: child components (root skipped), instances by id.
        for c in def.components.iter().skip(1) {
            let Some(PodSpecSource::Template(t)) = &c.spec else {
                continue;
            };
            let ids: Vec<String> = match &c.instance_ids {
                Some(e) => e
                    .expr
                    .eval(&val)
                    .unwrap()
                    .iter()
                    .map(value::to_text)
                    .collect(),
                None => vec![String::new()],
            };
            let templates: Vec<Value> = Expr::compile(t.source())
                .unwrap()
                .eval(&val)
                .unwrap()
                .iter()
                .map(value::to_json)
                .collect();
            let mut rows: Vec<(String, &Value)> = ids.into_iter().zip(&templates).collect();
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            for (id, t) in rows {
                let label = if id.is_empty() {
                    c.name.clone()
                } else {
                    format!("{}[{id}]", c.name)
                };
                let q = |v: &Value| format!("\"{}\"", v.as_str().unwrap_or_default());
                lines.push(format!(
                    "  {label:<28} schedulerName={:<20} managed-by={}",
                    q(&t["spec"]["schedulerName"]),
                    q(&t["metadata"]["labels"]["app.kubernetes.io/managed-by"])
                ));
            }
        }
        // Upstream writes the whole template back; kartograf writes only the two fields:
        // nothing else of the object changed.
        let mut unpatched = patched.clone();
        for t in p.json_patch().as_array().unwrap() {
            let path = t["path"].as_str().unwrap();
            assert!(
                path.ends_with("/schedulerName") || path.contains("/metadata"),
                "{path}"
            );
        }
        unpatched["spec"] = object["spec"].clone();
        assert_eq!(unpatched, object);
    }
    let expected = std::fs::read_to_string(data("expected.txt")).unwrap();
    assert_eq!(lines.join("\n"), expected.trim_end());
}
