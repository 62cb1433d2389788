//! Pod updates that change nothing the graph reads skip re-resolution; every other update
//! re-resolves. Checked on the demo JobSet through the index.

use kartograf::definition::Catalog;
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use serde_json::Value as Json;

const WORKER: &str = "llama-train-workers-0-0-m4rhn";

fn demo() -> (Index, Vec<Json>) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/cluster/jobset.yaml"
    ))
    .expect("demo file");
    let docs = kartograf::manifest::parse_documents(&text).expect("parses");
    let index = Index::new(Catalog::embedded().expect("catalog"), &[]);
    assert!(index.batch().write(Write::reset("demo", &docs)).is_empty());
    (index, docs)
}

fn worker(docs: &[Json]) -> Json {
    docs.iter()
        .find(|d| d["metadata"]["name"] == WORKER)
        .expect("worker pod")
        .clone()
}

fn jobset(index: &Index) -> std::sync::Arc<pb::Workload> {
    index
        .published(&pb::ObjectRef {
            kind: "JobSet".into(),
            namespace: "ml".into(),
            name: "llama-train".into(),
            ..Default::default()
        })
        .map(|p| std::sync::Arc::new(p.graph()))
        .expect("the JobSet resolves")
}

fn instances(w: &pb::Workload) -> Vec<(String, u32)> {
    w.components[0].instances[0].children[0]
        .instances
        .iter()
        .map(|i| (i.id.clone(), i.pods.unwrap_or_default().current))
        .collect()
}

#[test]
fn a_restart_count_change_skips_re_resolution() {
    let (index, docs) = demo();
    let before = index.board().revision();
    let resolved = index.resolutions();
    let graph = jobset(&index);
    let mut pod = worker(&docs);
    for n in 1..=3 {
        pod["metadata"]["resourceVersion"] = Json::from(format!("99{n}"));
        pod["status"]["containerStatuses"][0]["restartCount"] = Json::from(n);
        assert!(
            index
                .batch()
                .write(Write::apply("demo", pod.clone()))
                .is_empty()
        );
    }
    assert_eq!(
        index.board().revision(),
        before,
        "nothing the graph shows changed"
    );
    assert_eq!(index.resolutions(), resolved, "and nothing was re-resolved");
    assert_eq!(*jobset(&index), *graph);
}

#[test]
fn a_pod_that_comes_to_name_a_gang_object_re_resolves() {
    let (index, docs) = demo();
    let mut pod = worker(&docs);
    // Nothing a definition asks or accounting reads changes: only the gang object the pod
    // names, which its workload's gang check reads.
    pod["spec"]["schedulingGroup"] = serde_json::json!({"podGroupName": "llama-train-workers"});
    let resolved = index.resolutions();
    assert!(
        index
            .batch()
            .write(Write::apply("demo", pod.clone()))
            .is_empty()
    );
    assert_eq!(index.resolutions(), resolved + 1);
}

#[test]
fn a_label_a_selector_reads_re_resolves() {
    let (index, docs) = demo();
    let before = instances(&jobset(&index));
    assert!(before.contains(&("workers".to_owned(), 2)), "{before:?}");
    let mut pod = worker(&docs);
    // Same node, phase, readiness and request; another replicated job by its label.
    pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = Json::from("leader");
    let resolved = index.resolutions();
    assert!(
        index
            .batch()
            .write(Write::apply("demo", pod.clone()))
            .is_empty()
    );
    assert_eq!(index.resolutions(), resolved + 1);
    let after = instances(&jobset(&index));
    assert!(after.contains(&("workers".to_owned(), 1)), "{after:?}");
    assert!(after.contains(&("leader".to_owned(), 2)), "{after:?}");
    // And back: the first version's answers are asked again.
    assert!(
        index
            .batch()
            .write(Write::apply("demo", worker(&docs)))
            .is_empty()
    );
    assert_eq!(instances(&jobset(&index)), before);
}

#[test]
fn a_readiness_change_re_resolves() {
    let (index, docs) = demo();
    let ready = |w: &pb::Workload| w.pods.unwrap_or_default().ready;
    let was = ready(&jobset(&index));
    let mut pod = worker(&docs);
    for c in pod["status"]["conditions"]
        .as_array_mut()
        .expect("conditions")
    {
        if c["type"] == "Ready" {
            c["status"] = Json::from("False");
        }
    }
    assert!(
        index
            .batch()
            .write(Write::apply("demo", pod.clone()))
            .is_empty()
    );
    assert_eq!(ready(&jobset(&index)), was - 1);
}

/// A remembered `minMemberPath` result that reads `$pod` follows the pod's content.
#[test]
fn a_min_member_read_from_the_pod_follows_the_pod() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/cluster/knative.yaml"
    ))
    .expect("demo file");
    let docs = kartograf::manifest::parse_documents(&text).expect("parses");
    let index = Index::new(Catalog::embedded().expect("catalog"), &[]);
    assert!(index.batch().write(Write::reset("demo", &docs)).is_empty());
    let service = pb::ObjectRef {
        kind: "Service".into(),
        namespace: docs[0]["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .into(),
        name: "reranker".into(),
        ..Default::default()
    };
    let minimums = |index: &Index| -> Vec<u32> {
        let w = index
            .published(&service)
            .map(|p| p.graph())
            .expect("the Service resolves");
        w.gang.as_ref().map_or(Vec::new(), |g| {
            g.groups.iter().map(|g| g.min_member).collect::<Vec<_>>()
        })
    };
    assert!(minimums(&index).contains(&2), "{:?}", minimums(&index));
    for mut pod in docs.into_iter().filter(|d| d["kind"] == "Pod") {
        pod["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = Json::from("5");
        assert!(
            index
                .batch()
                .write(Write::apply("demo", pod.clone()))
                .is_empty()
        );
    }
    let after = minimums(&index);
    assert!(after.contains(&5) && !after.contains(&2), "{after:?}");
}
