//! Findings of an adversarial review of the index, directory sources and budgets, each
//! fixed and kept as a test: the incremental index agrees with a fresh one, source problems
//! clear when their cause does, partial answers are not remembered, relative watch roots.

use kartograf::board::PodMiss;
use kartograf::definition::Catalog;
use kartograf::definition::catalog::load_embedded;
use kartograf::index::{Index, Write};
use kartograf::proto::v1 as pb;
use serde_json::Value as Json;
use std::path::PathBuf;

const WORKER: &str = "llama-train-workers-0-0-m4rhn";

fn demo_docs() -> Vec<Json> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/cluster/jobset.yaml"
    ))
    .expect("demo file");
    kartograf::manifest::parse_documents(&text).expect("parses")
}

fn jobset_ref() -> pb::ObjectRef {
    pb::ObjectRef {
        kind: "JobSet".into(),
        namespace: "ml".into(),
        name: "llama-train".into(),
        ..Default::default()
    }
}

fn pod_ref(name: &str) -> pb::ObjectRef {
    pb::ObjectRef {
        kind: "Pod".into(),
        api_version: "v1".into(),
        namespace: "ml".into(),
        name: name.into(),
        ..Default::default()
    }
}

/// A pod that leaves its workload for an owner that is not cached belongs to no workload (as
/// in a fresh index), not to the graph it left.
#[test]
fn pod_that_leaves_for_an_uncached_owner_is_in_no_workload() {
    let docs = demo_docs();
    let index = Index::new(Catalog::embedded().expect("catalog"), &[]);
    assert!(index.batch().write(Write::reset("demo", &docs)).is_empty());
    assert!(
        index
            .published_of_pod(&pod_ref(WORKER))
            .map(|(p, at)| (p.graph(), at))
            .is_ok()
    );
    let mut pod = docs
        .iter()
        .find(|d| d["metadata"]["name"] == WORKER)
        .expect("worker")
        .clone();
    // Now owned by a Job that is not cached (a Job of another JobSet, not seen yet).
    pod["metadata"]["ownerReferences"][0]["uid"] = Json::from("not-cached-job-uid");
    pod["metadata"]["ownerReferences"][0]["name"] = Json::from("elsewhere");
    assert!(
        index
            .batch()
            .write(Write::apply("demo", pod.clone()))
            .is_empty()
    );
    // The JobSet's graph no longer has the pod...
    let graph = index
        .published(&jobset_ref())
        .map(|p| p.graph())
        .expect("jobset");
    let text = format!("{graph:?}");
    assert!(
        !text.contains(WORKER),
        "the JobSet graph still lists the pod"
    );
    // ... so the pod belongs to no known workload (a fresh index says so).
    let mut moved = docs.clone();
    for d in &mut moved {
        if d["metadata"]["name"] == WORKER {
            *d = pod.clone();
        }
    }
    let fresh = Index::new(Catalog::embedded().expect("catalog"), &[]);
    assert!(fresh.batch().write(Write::reset("demo", &moved)).is_empty());
    assert_eq!(
        fresh
            .published_of_pod(&pod_ref(WORKER))
            .map(|(p, at)| (p.graph(), at))
            .err(),
        Some(PodMiss::InNoWorkload)
    );
    let incremental = index
        .published_of_pod(&pod_ref(WORKER))
        .map(|(p, at)| (p.graph(), at))
        .map(|(w, p)| (w.r#ref.clone(), p));
    assert_eq!(
        incremental.clone().err(),
        Some(PodMiss::InNoWorkload),
        "the incremental index answers {incremental:?}"
    );
}

/// The embedded catalog, and the same definitions (shared) without the one for `kind`.
fn with_and_without(kind: &str) -> (Catalog, Catalog) {
    let (defs, errors) = load_embedded();
    assert!(errors.is_empty());
    let fewer = defs
        .iter()
        .filter(|d| d.root_kind.kind != kind)
        .cloned()
        .collect();
    (
        Catalog::from_layers(2, [defs]),
        Catalog::from_layers(3, [fewer]),
    )
}

fn listed(index: &Index) -> Vec<String> {
    let (page, _, _) = index.board().list(&Default::default(), 0, 1000);
    let mut names: Vec<String> = page
        .iter()
        .map(|w| {
            let r = w.r#ref.clone().unwrap_or_default();
            format!("{}/{}", r.kind, r.name)
        })
        .collect();
    names.sort();
    names
}

fn docs_without(file: &str, kind: &str) -> Vec<Json> {
    let text = std::fs::read_to_string(format!(
        "{}/examples/cluster/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("demo file");
    kartograf::manifest::parse_documents(&text)
        .expect("parses")
        .into_iter()
        .filter(|d| d["kind"] != kind)
        .collect()
}

/// A definition added or removed for a kind whose objects are not cached (only named in
/// the owner references of pods) changes which objects are roots: the incremental index
/// ends up with the same workloads as a fresh one.
fn catalog_change_case(file: &str, kind: &str, add: bool) {
    let docs = docs_without(file, kind);
    let (with, without) = with_and_without(kind);
    let (from, to) = if add {
        (without, with)
    } else {
        (with, without)
    };
    let index = Index::new(from, &[]);
    assert!(index.batch().write(Write::reset("demo", &docs)).is_empty());
    index.batch().set_catalog(to.clone());
    let fresh = Index::new(to, &[]);
    assert!(fresh.batch().write(Write::reset("demo", &docs)).is_empty());
    assert_eq!(
        listed(&index),
        listed(&fresh),
        "incremental vs fresh after {} the {kind} definition",
        if add { "adding" } else { "removing" }
    );
}

#[test]
fn catalog_removal_for_an_uncached_owner_kind() {
    catalog_change_case("jobset.yaml", "JobSet", false);
}

#[test]
fn catalog_addition_for_an_uncached_owner_kind() {
    catalog_change_case("jobset.yaml", "JobSet", true);
}

#[test]
fn catalog_removal_for_an_uncached_pod_owner_kind() {
    catalog_change_case("pytorchjob.yaml", "PyTorchJob", false);
}

#[test]
fn catalog_addition_for_an_uncached_pod_owner_kind() {
    catalog_change_case("pytorchjob.yaml", "PyTorchJob", true);
}

fn has_code(w: &pb::Workload, code: &str) -> bool {
    w.diagnostics.iter().any(|d| d.code == code)
}

/// A root evaluation cut short by a budget is not remembered like a complete one: once the
/// budget allows it again (a transient time overrun, a quarantine that ended, a raised
/// `--eval-*` flag...), the next pod change resolves the root answers in full.
/// Changes the process-wide budget: run alone (`cargo test --test service review_prepared
/// -- --ignored`).
#[test]
#[ignore = "changes the process-wide budget: run alone"]
fn root_answers_cut_short_by_a_budget_are_not_remembered() {
    use kartograf::expr::{Budget, budget};
    let docs = demo_docs();
    // 120 units: exactly one root expression of the JobSet runs out (the breaker does not
    // trip, so nothing else keeps the graph partial).
    budget::configure(Budget {
        work: 120,
        ..Budget::DEFAULT
    });
    let index = Index::new(Catalog::embedded().expect("catalog"), &[]);
    assert!(index.batch().write(Write::reset("demo", &docs)).is_empty());
    let cut = index
        .published(&jobset_ref())
        .map(|p| p.graph())
        .expect("jobset");
    budget::configure(Budget::DEFAULT);
    assert!(has_code(&cut, "budget_exceeded"), "{:?}", cut.diagnostics);
    // A pod change that the graph reads: the workload is resolved again.
    let mut pod = docs
        .iter()
        .find(|d| d["metadata"]["name"] == WORKER)
        .expect("worker")
        .clone();
    pod["status"]["phase"] = Json::from("Failed");
    let resolutions = index.resolutions();
    assert!(
        index
            .batch()
            .write(Write::apply("demo", pod.clone()))
            .is_empty()
    );
    assert!(index.resolutions() > resolutions, "re-resolved");
    let after = index
        .published(&jobset_ref())
        .map(|p| p.graph())
        .expect("jobset");
    let codes: Vec<&str> = after.diagnostics.iter().map(|d| d.code.as_str()).collect();
    eprintln!("codes after: {codes:?}");
    assert!(
        !has_code(&after, "budget_exceeded"),
        "still partial after the budget allows it: {:?}",
        after.diagnostics
    );
}

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "kartograf-consistency-{}-{tag}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, uid: p-uid}\nspec: {containers: [{name: c}]}\n";

/// A file that could not be read (not UTF-8 here; a permission error or a file that
/// vanished between the walk and the read are alike) loses its problem once it reads again
/// with the content it had.
#[test]
fn manifest_problem_clears_when_the_file_reads_again() {
    use kartograf::source::manifests::ManifestSet;
    let d = temp("unreadable");
    std::fs::write(d.join("a.yaml"), POD).unwrap();
    let mut set = ManifestSet::new(&d, Default::default());
    set.scan();
    assert!(set.problems().is_empty());
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(d.join("a.yaml"), b"\xff\xfe not utf-8").unwrap();
    set.scan();
    assert_eq!(set.problems().len(), 1);
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(d.join("a.yaml"), POD).unwrap();
    set.scan();
    assert!(set.problems().is_empty(), "stale: {:?}", set.problems());
}

/// A new file that cannot be read and is then removed takes its problem with it.
#[test]
fn manifest_problem_of_a_removed_unreadable_file_clears() {
    use kartograf::source::manifests::ManifestSet;
    let d = temp("vanished");
    std::fs::write(d.join("a.yaml"), POD).unwrap();
    let mut set = ManifestSet::new(&d, Default::default());
    set.scan();
    std::fs::write(d.join("tmp.yaml"), b"\xff\xfe not utf-8").unwrap();
    set.scan();
    assert_eq!(set.problems().len(), 1);
    std::fs::remove_file(d.join("tmp.yaml")).unwrap();
    set.scan();
    assert!(set.problems().is_empty(), "stale: {:?}", set.problems());
}

/// The same for the definitions directory: the error of a removed file leaves the next
/// layer (ListDefinitions, the load report).
#[test]
fn definition_error_of_a_removed_unreadable_file_clears() {
    use kartograf::source::definitions::Reloader;
    let d = temp("defs-vanished");
    let mut r = Reloader::new(&d, Default::default());
    let (_, errors) = r.reload().expect("first load");
    assert!(errors.is_empty());
    std::fs::write(d.join("tmp.yaml"), b"\xff\xfe not utf-8").unwrap();
    let (_, errors) = r.reload().expect("a change");
    assert_eq!(errors.len(), 1);
    std::fs::remove_file(d.join("tmp.yaml")).unwrap();
    // Nothing else changed: no new layer, the published errors stay as they were.
    let layer = r.reload();
    let errors = layer.map(|(_, e)| e);
    assert!(
        errors.as_ref().is_some_and(|e| e.is_empty()),
        "after the file is gone: {errors:?}"
    );
}

/// A source note on an intermediate object (a Job between the JobSet and its pods, e.g.
/// defined in two manifest files) reaches the workload's diagnostics.
#[test]
fn note_on_an_intermediate_object_reaches_the_workload() {
    let docs = demo_docs();
    let index = Index::new(Catalog::embedded().expect("catalog"), &[]);
    assert!(index.batch().write(Write::reset("demo", &docs)).is_empty());
    {
        let mut batch = index.batch();
        // The workers-0 Job.
        batch.write(Write::Note {
            uid: "3f1c2a9e-0001-4000-8000-000000000004".to_owned(),
            note: Some("defined in two files".to_owned()),
        });
    }
    let w = index
        .published(&jobset_ref())
        .map(|p| p.graph())
        .expect("jobset");
    assert!(
        w.diagnostics
            .iter()
            .any(|d| d.code == "source_note" && d.message.contains("two files")),
        "{:?}",
        w.diagnostics.iter().map(|d| &d.code).collect::<Vec<_>>()
    );
}

/// The index remembers root answers for one version per root: a root whose status changes
/// often (every controller status write) does not fill memory with dead versions.
#[test]
#[ignore = "measures process RSS: run alone"]
fn prepared_cache_keeps_one_version_per_root() {
    let docs = demo_docs();
    let index = Index::new(Catalog::embedded().expect("catalog"), &[]);
    assert!(index.batch().write(Write::reset("demo", &docs)).is_empty());
    let mut root = docs
        .iter()
        .find(|d| d["kind"] == "JobSet")
        .expect("jobset")
        .clone();
    // Warm up, then measure.
    for n in 0..500 {
        root["status"]["observedGeneration"] = Json::from(n);
        assert!(
            index
                .batch()
                .write(Write::apply("demo", root.clone()))
                .is_empty()
        );
    }
    let before = crate::process::status_kib("self", "VmRSS:");
    const N: u64 = 5000;
    for n in 0..N {
        root["status"]["observedGeneration"] = Json::from(1000 + n);
        assert!(
            index
                .batch()
                .write(Write::apply("demo", root.clone()))
                .is_empty()
        );
    }
    let grew = crate::process::status_kib("self", "VmRSS:").saturating_sub(before);
    eprintln!(
        "{N} root versions: RSS +{grew} KiB ({} bytes per version)",
        grew * 1024 / N
    );
    assert!(grew < 2 * 1024, "RSS grew {grew} KiB for one workload");
}

async fn recreate_case(root: &std::path::Path) -> Result<(), String> {
    use kartograf::source::files::DirWatch;
    use std::time::Duration;
    std::fs::create_dir_all(root).unwrap();
    let (mut watch, mut ticks) = DirWatch::start(root, Duration::from_secs(600));
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::remove_dir_all(root).unwrap();
    if tokio::time::timeout(Duration::from_secs(3), ticks.recv())
        .await
        .is_err()
    {
        return Err("the removal raised no tick".into());
    }
    watch.refresh();
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("a.yaml"), "x: 1").unwrap();
    if tokio::time::timeout(Duration::from_secs(3), ticks.recv())
        .await
        .is_err()
    {
        return Err("the recreated directory raised no tick within 3 s".into());
    }
    Ok(())
}

/// Control: an absolute directory removed and recreated is seen at once.
#[tokio::test]
async fn absolute_directory_recreated_is_seen() {
    let base = temp("absolute");
    assert_eq!(recreate_case(&base.join("defs")).await, Ok(()));
}

/// With a relative directory name (`--definitions defs`), removal and recreation are seen
/// at once, not at the periodic rescan. Changes the working directory: run alone.
#[tokio::test]
#[ignore = "changes the working directory: run alone"]
async fn relative_directory_recreated_is_seen_at_once() {
    let base = temp("relative");
    std::env::set_current_dir(&base).unwrap();
    assert_eq!(recreate_case(std::path::Path::new("defs")).await, Ok(()));
}

/// With a relative directory (`serve --manifests examples/cluster`, as the README runs it),
/// an edit raises a tick at once (notify reports absolute event paths). Changes the working
/// directory: run alone.
#[tokio::test]
#[ignore = "changes the working directory: run alone"]
async fn relative_directory_edits_raise_a_tick() {
    use kartograf::source::files::DirWatch;
    use std::time::Duration;
    let base = temp("relative-edit");
    std::env::set_current_dir(&base).unwrap();
    std::fs::create_dir_all("cluster").unwrap();
    std::fs::write("cluster/a.yaml", "x: 1").unwrap();
    let (_watch, mut ticks) =
        DirWatch::start(std::path::Path::new("cluster"), Duration::from_secs(600));
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write("cluster/a.yaml", "x: 2").unwrap();
    let edited = tokio::time::timeout(Duration::from_secs(3), ticks.recv()).await;
    assert!(
        edited.is_ok(),
        "an edit below a relative root raised no tick"
    );
}

/// Runs each test of this file that must run alone (it changes the process-wide budget or
/// working directory, or measures the process's memory) in a process of its own.
#[test]
fn tests_that_run_alone_pass_in_their_own_process() {
    for name in [
        "consistency::prepared_cache_keeps_one_version_per_root",
        "consistency::relative_directory_edits_raise_a_tick",
        "consistency::relative_directory_recreated_is_seen_at_once",
        "consistency::root_answers_cut_short_by_a_budget_are_not_remembered",
    ] {
        crate::process::run_alone(name);
    }
}
