//! Directory sources as users run them: nothing read at rest, the scanner's own reads raise no
//! event, link loops read each file once, large YAML files load, a file that stops parsing
//! keeps its objects, a definitions folder replaced is watched again at once, and a reload
//! that changes no workload sends no event.

use super::temp_dir;
use kartograf::definition::{Catalog, LoadReport};
use kartograf::expr::Limits;
use kartograf::index::Index;
use kartograf::proto::v1 as pb;
use kartograf::source::files::DirWatch;
use kartograf::source::manifests::{self, ManifestSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pod(name: &str, ns: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}")},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

fn deployment(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: web, uid: uid-{name}}}\nspec: {{replicas: {replicas}, template: {{spec: {{containers: [{{name: c}}]}}}}}}\n"
    )
}

/// Waits until `done` or panics after `secs`.
async fn eventually(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_directory_at_rest_is_not_read_again() {
    let dir = temp_dir("rest");
    for i in 0..20 {
        std::fs::write(
            dir.join(format!("p{i}.json")),
            pod(&format!("p{i}"), "a").to_string(),
        )
        .unwrap();
    }
    let mut set = ManifestSet::new(&dir, Limits::default());
    let first = set.scan();
    assert_eq!(first.upserts.len(), 20);
    assert_eq!(set.reads(), 20, "each file read once");
    for _ in 0..5 {
        assert!(set.scan().is_empty(), "nothing changed");
    }
    assert_eq!(set.reads(), 20, "a scan with nothing changed reads no file");
    // One edit: that file alone is read and sent.
    std::fs::write(dir.join("p3.json"), pod("p3-renamed", "a").to_string()).unwrap();
    let update = set.scan();
    assert_eq!(set.reads(), 21);
    assert_eq!(update.upserts.len(), 1);
    assert_eq!(update.deletes, ["uid-a-p3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scanners_own_reads_raise_no_event() {
    let dir = temp_dir("self-events");
    for i in 0..10 {
        std::fs::write(
            dir.join(format!("p{i}.json")),
            pod(&format!("p{i}"), "a").to_string(),
        )
        .unwrap();
    }
    let (_watch, mut ticks) = DirWatch::start(&dir, Duration::from_secs(600));
    tokio::time::sleep(Duration::from_millis(300)).await;
    while ticks.try_recv().is_ok() {}
    // Read every file the way the scanner does (open, read, close) several times.
    for _ in 0..3 {
        for (path, _) in kartograf::folder::walk(&dir, kartograf::folder::is_manifest).files {
            let _ = std::fs::read(&path).unwrap();
        }
    }
    let tick = tokio::time::timeout(Duration::from_secs(1), ticks.recv()).await;
    assert!(tick.is_err(), "reading the files raised a tick");
    // A write does.
    std::fs::write(dir.join("p0.json"), pod("p0b", "a").to_string()).unwrap();
    let tick = tokio::time::timeout(Duration::from_secs(5), ticks.recv()).await;
    assert!(matches!(tick, Ok(Some(()))), "a write raised no tick");
}

#[test]
fn link_loops_are_walked_once_and_every_file_read_once() {
    let dir = temp_dir("loops");
    std::fs::create_dir_all(dir.join("a/b")).unwrap();
    std::fs::write(dir.join("a/one.json"), pod("one", "a").to_string()).unwrap();
    std::fs::write(dir.join("a/b/two.json"), pod("two", "a").to_string()).unwrap();
    std::os::unix::fs::symlink(".", dir.join("self")).unwrap();
    std::os::unix::fs::symlink(".", dir.join("a/b/again")).unwrap();
    std::os::unix::fs::symlink("../..", dir.join("a/b/up")).unwrap();
    let mut set = ManifestSet::new(&dir, Limits::default());
    let update = set.scan();
    assert_eq!(update.upserts.len(), 2);
    assert_eq!(set.reads(), 2, "each file once, whatever the loops");
    assert!(set.problems().is_empty(), "{:?}", set.problems());
}

#[test]
fn large_yaml_files_and_lists_load_whole() {
    let dir = temp_dir("large-yaml");
    // 5,000 documents in one multi-document YAML file.
    let mut text = String::new();
    for i in 0..5000 {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: d{i}\n  namespace: docs\n  uid: d-{i}\nspec:\n  nodeName: n1\n"
        ));
    }
    std::fs::write(dir.join("docs.yaml"), text).unwrap();
    // A `kubectl get pods -o yaml` List of 12,000 pods.
    let mut list = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..12_000 {
        list.push_str(&format!(
            "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: l{i}\n    namespace: list\n    uid: l-{i}\n    labels:\n      app: x\n  spec:\n    nodeName: n1\n    containers:\n    - name: c\n      resources:\n        requests:\n          cpu: 100m\n  status:\n    phase: Running\n"
        ));
    }
    std::fs::write(dir.join("list.yaml"), list).unwrap();
    let mut set = ManifestSet::new(&dir, Limits::default());
    let update = set.scan();
    assert!(set.problems().is_empty(), "{:?}", set.problems());
    assert_eq!(update.upserts.len(), 17_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_stops_parsing_keeps_its_objects_and_a_fix_sends_only_changes() {
    let dir = temp_dir("truncated");
    std::fs::write(
        dir.join("web.yaml"),
        format!("{}---\n{}", deployment("a", 1), deployment("b", 1)),
    )
    .unwrap();
    let index = Arc::new(Index::new(
        Catalog::embedded().unwrap(),
        &[manifests::SOURCE],
    ));
    let task = tokio::spawn(manifests::run_with(
        index.clone(),
        dir.clone(),
        Duration::from_secs(600),
    ));
    eventually(20, "first sync", || {
        index.synced() && index.sizes().workloads == 2
    })
    .await;
    let (channel, _shutdown) =
        super::serve_index(index.clone(), Arc::new(LoadReport::default())).await;
    let mut client = pb::workload_resolver_client::WorkloadResolverClient::new(channel.clone());
    let mut stream = client
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    loop {
        let e = super::next_event(&mut stream, 10).await;
        if e.r#type == pb::EventType::Synced as i32 {
            break;
        }
    }
    // A half-saved edit: the file no longer parses.
    std::fs::write(
        dir.join("web.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a\n",
    )
    .unwrap();
    eventually(10, "the problem is reported", || {
        index
            .source_problems()
            .iter()
            .any(|(s, p)| s == manifests::SOURCE && p.iter().any(|p| p.path.ends_with("web.yaml")))
    })
    .await;
    let quiet = tokio::time::timeout(Duration::from_millis(800), stream.message()).await;
    assert!(quiet.is_err(), "an unparseable file sent {quiet:?}");
    assert_eq!(index.sizes().workloads, 2, "its objects stay");
    let mut definitions = pb::definitions_client::DefinitionsClient::new(channel);
    let sources = definitions
        .list_sources(pb::ListSourcesRequest {})
        .await
        .unwrap()
        .into_inner()
        .sources;
    let manifests_source = sources
        .iter()
        .find(|s| s.name == manifests::SOURCE)
        .expect("the manifests source is listed");
    assert!(manifests_source.synced);
    assert!(
        manifests_source
            .problems
            .iter()
            .any(|p| p.path.ends_with("web.yaml") && p.message.contains("YAML")),
        "{manifests_source:?}"
    );
    // Fixed, with one real change: exactly that workload comes as MODIFIED.
    std::fs::write(
        dir.join("web.yaml"),
        format!("{}---\n{}", deployment("a", 1), deployment("b", 3)),
    )
    .unwrap();
    let e = super::next_event(&mut stream, 10).await;
    assert_eq!(e.r#type, pb::EventType::Modified as i32);
    assert_eq!(e.workload.unwrap().r#ref.unwrap().name, "b");
    let quiet = tokio::time::timeout(Duration::from_millis(800), stream.message()).await;
    assert!(
        quiet.is_err(),
        "more than the one change was sent: {quiet:?}"
    );
    eventually(5, "the problem clears", || {
        index.source_problems().iter().all(|(_, p)| p.is_empty())
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_directory_removed_and_created_again_is_watched_at_once() {
    let parent = temp_dir("recreated-manifests");
    let dir = parent.join("cluster");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("web.yaml"), deployment("a", 1)).unwrap();
    let index = Arc::new(Index::new(
        Catalog::embedded().unwrap(),
        &[manifests::SOURCE],
    ));
    // A rescan period far beyond the test: only events can make it pass.
    let task = tokio::spawn(manifests::run_with(
        index.clone(),
        dir.clone(),
        Duration::from_secs(600),
    ));
    eventually(20, "first sync", || {
        index.synced() && index.sizes().workloads == 1
    })
    .await;
    std::fs::rename(&dir, parent.join("cluster.old")).unwrap();
    eventually(10, "the missing directory is reported", || {
        index
            .source_problems()
            .iter()
            .any(|(_, p)| p.iter().any(|p| p.message.contains("does not exist")))
    })
    .await;
    assert_eq!(
        index.sizes().workloads,
        1,
        "objects stay while the directory is gone"
    );
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("web.yaml"), deployment("b", 1)).unwrap();
    eventually(10, "the new directory is read", || {
        index
            .published(&pb::ObjectRef {
                kind: "Deployment".into(),
                namespace: "web".into(),
                name: "b".into(),
                ..Default::default()
            })
            .map(|p| p.graph())
            .is_some()
    })
    .await;
    // Edits in the new directory are seen by events too.
    std::fs::write(dir.join("more.yaml"), deployment("c", 1)).unwrap();
    eventually(10, "an edit in the new directory", || {
        index.sizes().workloads == 2
    })
    .await;
    task.abort();
}

fn write_definition(dir: &Path, name: &str, kind: &str, replicas_path: &str) {
    let text = format!(
        "apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {{name: {name}}}\nspec:\n  structureDefinition:\n    rootComponent:\n      name: root\n      kind: {{group: example.com, version: v1, kind: {kind}}}\n      scaleDefinition: {{replicasPath: '{replicas_path}'}}\n      statusDefinition:\n        statusMappings:\n          running: [{{byExpression: {{expression: 'true', expectedResult: 'true'}}}}]\n"
    );
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, dir.join(format!("{name}.yaml"))).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_that_change_no_workload_send_no_event_and_a_replaced_folder_is_watched() {
    let h = super::start(1000).await;
    std::fs::write(
        h.dir.join("widget.json"),
        serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default", "uid": "widget-1"},
            "spec": {"n": 2}})
        .to_string(),
    )
    .unwrap();
    write_definition(&h.defs, "widget", "Widget", ".spec.n");
    let mut client = h.client.clone();
    let widget = super::by_name("Widget", "default", "w");
    eventually(20, "the widget resolves", || {
        h.index
            .published(&pb::ObjectRef {
                kind: "Widget".into(),
                namespace: "default".into(),
                name: "w".into(),
                ..Default::default()
            })
            .map(|p| p.graph())
            .is_some()
    })
    .await;
    let mut stream = client
        .watch(pb::WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    loop {
        let e = super::next_event(&mut stream, 10).await;
        if e.r#type == pb::EventType::Synced as i32 {
            break;
        }
    }
    let resolutions = h.index.resolutions();
    // An empty file, an invalid file and a definition of an unrelated kind: no workload
    // changes, so no event and no re-resolution.
    std::fs::write(h.defs.join("empty.yaml"), "").unwrap();
    std::fs::write(
        h.defs.join("broken.yaml"),
        "apiVersion: run.ai/v1alpha1\nkind: Karta\nspec: {",
    )
    .unwrap();
    write_definition(&h.defs, "gadget", "Gadget", ".spec.n");
    let report_seen = || h.index.catalog().definitions().any(|d| d.name == "gadget");
    eventually(10, "the unrelated definition is published", report_seen).await;
    // The widget's own definition edited in comments and layout only: the same definition,
    // so its workload is neither re-resolved nor sent again.
    let widget_file = h.defs.join("widget.yaml");
    let text = std::fs::read_to_string(&widget_file).unwrap();
    let generation = h.index.catalog().generation();
    std::fs::write(
        &widget_file,
        format!(
            "# edited by hand
{}

# nothing else changed
",
            text.trim_end()
        ),
    )
    .unwrap();
    eventually(10, "the edited file is reloaded", || {
        h.index.catalog().generation() > generation
    })
    .await;
    let quiet = tokio::time::timeout(Duration::from_millis(1000), stream.message()).await;
    assert!(
        quiet.is_err(),
        "a reload that changes no workload sent {quiet:?}"
    );
    assert_eq!(
        h.index.resolutions(),
        resolutions,
        "nothing was re-resolved"
    );
    // The definitions folder renamed away: its definitions stay; created again with a
    // changed definition: picked up at once (the periodic rescan is 30 s away).
    let moved = h.defs.with_extension("old");
    std::fs::rename(&h.defs, &moved).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        h.index.catalog().definitions().any(|d| d.name == "widget"),
        "definitions stay while their folder is gone"
    );
    std::fs::create_dir_all(&h.defs).unwrap();
    write_definition(&h.defs, "widget", "Widget", ".spec.n + 1");
    let started = Instant::now();
    let e = super::next_event(&mut stream, 10).await;
    assert_eq!(e.r#type, pb::EventType::Modified as i32);
    let w = e.workload.unwrap();
    assert_eq!(w.r#ref.as_ref().unwrap().name, "w");
    let replicas = |w: &pb::Workload| {
        w.components[0].instances[0]
            .scale
            .as_ref()
            .and_then(|s| s.replicas)
    };
    assert_eq!(
        replicas(&w),
        Some(3),
        "the new definition is in effect: {w:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let w = client
        .resolve(widget)
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    assert_eq!(replicas(&w), Some(3));
}

/// The first load hands the index each batch of files as soon as it is parsed (so reading
/// and indexing overlap); what it hands over, together, is what one whole scan gives.
#[tokio::test]
async fn the_first_load_is_streamed_in_batches_and_loads_everything() {
    let dir = temp_dir("streamed");
    let files = 150;
    for i in 0..files {
        let doc = pod(&format!("p{i:03}"), "s");
        std::fs::write(dir.join(format!("p{i:03}.json")), doc.to_string()).unwrap();
    }
    let mut streamed = ManifestSet::new(&dir, Limits::default());
    let mut batches = Vec::new();
    let rest = streamed.scan_streaming(&mut |u| batches.push(u.upserts.len()));
    assert!(
        batches.len() >= 3,
        "one update per batch of files: {batches:?}"
    );
    assert_eq!(batches.iter().sum::<usize>() + rest.upserts.len(), files);
    let mut whole = ManifestSet::new(&dir, Limits::default());
    assert_eq!(whole.scan().upserts.len(), files);

    // Served: every pod is a workload once the source says it synced.
    let index = Arc::new(Index::new(
        Catalog::embedded().unwrap(),
        &[manifests::SOURCE],
    ));
    tokio::spawn(manifests::run(index.clone(), dir.clone()));
    eventually(10, "synced", || index.synced()).await;
    assert_eq!(index.sizes().pods, files);
    assert_eq!(index.sizes().workloads, files);
}
