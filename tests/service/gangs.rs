//! Gang objects against the scripted fake API server (real kube-rs watchers): KubeRay's
//! stale coscheduling PodGroup (#5205: workers scaled 2 → 4, PodGroup left at 3; suspend),
//! a JobSet with Workload API objects, a KAI PodGroup with a wrong subgroup minimum, a gang
//! that loses a member after placement, and hostile gang objects (10k subgroups, a parent
//! cycle). Findings are read where users read them: the graph's diagnostics and the
//! per-gang verdicts behind `kartograf_gang_intact` / `kartograf_gang_stale`.

use crate::fake_apiserver::FakeApiServer;
use crate::kube::{Running, settings, start_with};
use kartograf::definition::LoadReport;
use kartograf::gangs::{self, Format, live};
use kartograf::index::Index;
use kartograf::proto::v1 as pb;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NS: &str = "ml";

/// A fake cluster serving pods, RayClusters, JobSets, Jobs and every gang object kind.
fn cluster() -> FakeApiServer {
    let fake = FakeApiServer::new();
    fake.register("v1", "Pod", "pods", true);
    fake.register("ray.io/v1", "RayCluster", "rayclusters", true);
    fake.register("batch/v1", "Job", "jobs", true);
    fake.register("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", true);
    fake.register(
        "scheduling.x-k8s.io/v1alpha1",
        "PodGroup",
        "podgroups",
        true,
    );
    fake.register("scheduling.run.ai/v2alpha2", "PodGroup", "podgroups", true);
    fake.register("scheduling.k8s.io/v1beta1", "Workload", "workloads", true);
    fake.register("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups", true);
    fake.register(
        "scheduling.k8s.io/v1alpha3",
        "CompositePodGroup",
        "compositepodgroups",
        true,
    );
    fake
}

/// The Kubernetes source over `fake`, as `kube.rs` runs it (fast settings, a publisher).
fn start(fake: &FakeApiServer) -> (Arc<Index>, Running) {
    let (index, _, running) = start_with(fake.client(), settings(Duration::from_millis(200)));
    (index, running)
}

fn workload(index: &Index, kind: &str, name: &str) -> Option<Arc<pb::Workload>> {
    index
        .published(&pb::ObjectRef {
            kind: kind.into(),
            namespace: NS.into(),
            name: name.into(),
            ..Default::default()
        })
        .map(|p| Arc::new(p.graph()))
}

/// Waits (≤ 8 s) until the workload's graph satisfies `cond`; returns that graph.
async fn until(
    index: &Index,
    kind: &str,
    name: &str,
    what: &str,
    cond: impl Fn(&pb::Workload) -> bool,
) -> Arc<pb::Workload> {
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        if let Some(w) = workload(index, kind, name)
            && cond(&w)
        {
            return w;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last graph diagnostics: {:?}",
            workload(index, kind, name).map(|w| w.diagnostics.clone())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn codes(w: &pb::Workload) -> Vec<&str> {
    w.diagnostics
        .iter()
        .filter(|d| d.code.starts_with("gang_"))
        .map(|d| d.code.as_str())
        .collect()
}

fn has(w: &pb::Workload, code: &str) -> bool {
    codes(w).contains(&code)
}

/// The workload's diagnostic with this code (the test fails without one).
fn finding<'a>(w: &'a pb::Workload, code: &str) -> &'a pb::Diagnostic {
    w.diagnostics
        .iter()
        .find(|d| d.code == code)
        .unwrap_or_else(|| panic!("no {code} in {:?}", w.diagnostics))
}

/// The verdicts of one root, as the metrics export them.
fn verdicts(index: &Index, root_uid: &str) -> Vec<live::GangStatus> {
    index
        .board()
        .get(root_uid)
        .map(|e| live::sorted([e.gangs.as_ref()]))
        .unwrap_or_default()
}

fn ray_pod(
    ray: &str,
    name: &str,
    uid: &str,
    node_type: &str,
    group: &str,
    gang_label: Option<&str>,
) -> Value {
    let mut labels = json!({"ray.io/node-type": node_type, "ray.io/cluster": "ray"});
    if !group.is_empty() {
        labels["ray.io/group"] = json!(group);
    }
    if let Some(pg) = gang_label {
        labels["scheduling.x-k8s.io/pod-group"] = json!(pg);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": labels,
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ray",
                                 "uid": ray, "controller": true}]},
        "spec": {"nodeName": format!("node-{name}"), "containers": [{"name": "ray",
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn raycluster(ray: &str, workers: u32, suspend: bool) -> Value {
    let template = json!({"spec": {"containers": [{"name": "ray",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}});
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "ray", "namespace": NS, "uid": ray},
        "spec": {"suspend": suspend, "headGroupSpec": {"template": template},
                 "workerGroupSpecs": [{"groupName": "workers", "replicas": workers,
                                       "minReplicas": 0, "maxReplicas": 8, "template": template}]},
        "status": {"state": "ready"}
    })
}

fn worker_uid(ray: &str, i: u32) -> String {
    format!("{ray}-w{i}")
}

/// A RayCluster of 1 head + `workers` workers, every pod carrying coscheduling's label.
fn ray_cluster(fake: &FakeApiServer, ray: &str, workers: u32) {
    fake.upsert(raycluster(ray, workers, false));
    fake.upsert(ray_pod(
        ray,
        "ray-head",
        &format!("{ray}-head"),
        "head",
        "headgroup",
        Some("ray"),
    ));
    for i in 0..workers {
        fake.upsert(ray_pod(
            ray,
            &format!("ray-worker-{i}"),
            &worker_uid(ray, i),
            "worker",
            "workers",
            Some("ray"),
        ));
    }
}

/// KubeRay's coscheduling PodGroup: named after the RayCluster, owned by it, `minMember`
/// written once.
fn kuberay_pod_group(ray: &str, min_member: u32) -> Value {
    json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "ray", "namespace": NS, "uid": format!("{ray}-pg"),
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ray",
                                 "uid": ray, "controller": true}]},
        "spec": {"minMember": min_member},
        "status": {"phase": "Running", "running": min_member}
    })
}

#[tokio::test]
async fn kuberay_5205_a_pod_group_left_at_3_after_scaling_to_4_workers_is_stale() {
    let ray = "9a000001-0000-4000-8000-000000000001";
    let fake = cluster();
    ray_cluster(&fake, ray, 2);
    fake.upsert(kuberay_pod_group(ray, 3));
    let (index, _run) = start(&fake);
    // Right at first: 1 head + 2 workers = 3.
    let w = until(&index, "RayCluster", "ray", "the verified graph", |w| {
        verdicts(&index, ray).len() == 1 && w.pods.is_some_and(|p| p.current == 3)
    })
    .await;
    assert!(codes(&w).is_empty(), "{:?}", w.diagnostics);
    assert_eq!(
        verdicts(&index, ray),
        vec![live::GangStatus {
            namespace: NS.into(),
            kind: "coscheduling",
            name: "ray".into(),
            workload: "RayCluster/ray".into(),
            intact: true,
            stale: false,
        }]
    );
    // The autoscaler scales workers 2 → 4; KubeRay never updates the PodGroup.
    fake.upsert(raycluster(ray, 4, false));
    for i in 2..4 {
        fake.upsert(ray_pod(
            ray,
            &format!("ray-worker-{i}"),
            &worker_uid(ray, i),
            "worker",
            "workers",
            Some("ray"),
        ));
    }
    let w = until(&index, "RayCluster", "ray", "gang_min_stale", |w| {
        has(w, "gang_min_stale")
    })
    .await;
    let d = finding(&w, "gang_min_stale");
    assert!(
        d.message
            .contains("minMember is 3 but gang raycluster needs 5 pods"),
        "{}",
        d.message
    );
    assert!(
        d.message.contains("below what the workload needs"),
        "{}",
        d.message
    );
    assert!(verdicts(&index, ray)[0].stale);
    // KubeRay fixes it (or an operator patches it): the finding goes.
    fake.upsert(kuberay_pod_group(ray, 5));
    let w = until(&index, "RayCluster", "ray", "no finding", |w| {
        codes(w).is_empty()
    })
    .await;
    assert_eq!(w.pods.unwrap().current, 5);
    assert!(!verdicts(&index, ray)[0].stale);
}

#[tokio::test]
async fn kuberay_5205_a_suspended_cluster_keeps_a_pod_group_above_what_can_exist() {
    let ray = "9a000002-0000-4000-8000-000000000001";
    let fake = cluster();
    ray_cluster(&fake, ray, 2);
    fake.upsert(kuberay_pod_group(ray, 3));
    let (index, _run) = start(&fake);
    until(&index, "RayCluster", "ray", "the verified graph", |w| {
        verdicts(&index, ray).len() == 1 && codes(w).is_empty()
    })
    .await;
    // Suspend: KubeRay deletes the pods, the PodGroup keeps minMember 3.
    fake.upsert(raycluster(ray, 2, true));
    fake.delete(&format!("{ray}-head"), false);
    for i in 0..2 {
        fake.delete(&worker_uid(ray, i), false);
    }
    let w = until(
        &index,
        "RayCluster",
        "ray",
        "gang_min_stale on suspend",
        |w| has(w, "gang_min_stale") && w.pods.is_some_and(|p| p.current == 0),
    )
    .await;
    let d = finding(&w, "gang_min_stale");
    assert!(
        d.message.contains("above what the workload has"),
        "{}",
        d.message
    );
    // Nothing placed: a suspended gang is not "broken".
    assert!(!has(&w, "gang_broken"), "{:?}", w.diagnostics);
    assert!(verdicts(&index, ray)[0].intact && verdicts(&index, ray)[0].stale);
}

#[tokio::test]
async fn a_gang_that_loses_a_member_after_placement_is_broken_until_it_is_whole() {
    let ray = "9a000003-0000-4000-8000-000000000001";
    let fake = cluster();
    ray_cluster(&fake, ray, 2);
    fake.upsert(kuberay_pod_group(ray, 3));
    let (index, _run) = start(&fake);
    until(&index, "RayCluster", "ray", "intact", |w| {
        verdicts(&index, ray).first().is_some_and(|v| v.intact) && codes(w).is_empty()
    })
    .await;
    // A worker is evicted: the scheduler never updates the PodGroup's status after placement.
    fake.delete(&worker_uid(ray, 1), false);
    let w = until(&index, "RayCluster", "ray", "gang_broken", |w| {
        has(w, "gang_broken")
    })
    .await;
    let d = finding(&w, "gang_broken");
    assert_eq!(d.severity, "error");
    assert!(d.message.contains("2 member(s) placed"), "{}", d.message);
    assert!(!verdicts(&index, ray)[0].intact);
    // The metrics export it: kartograf_gang_intact 0, kartograf_gang_stale 0.
    let metrics = kartograf::metrics::Metrics::new(index.clone(), Arc::new(LoadReport::default()));
    let text = metrics.encode();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains("workload=\"RayCluster/ray\""))
            .map(str::to_owned)
    };
    let intact = line("kartograf_gang_intact{").expect("kartograf_gang_intact");
    assert!(intact.ends_with(" 0"), "{intact}");
    assert!(
        intact.contains("kind=\"coscheduling\"") && intact.contains("name=\"ray\""),
        "{intact}"
    );
    assert!(line("kartograf_gang_stale{").unwrap().ends_with(" 0"));
    // The replacement pod lands: whole again.
    fake.upsert(ray_pod(
        ray,
        "ray-worker-9",
        &worker_uid(ray, 9),
        "worker",
        "workers",
        Some("ray"),
    ));
    until(&index, "RayCluster", "ray", "intact again", |w| {
        !has(w, "gang_broken")
    })
    .await;
    assert!(verdicts(&index, ray)[0].intact);
}

#[tokio::test]
async fn a_kai_pod_group_with_a_wrong_subgroup_minimum_is_stale() {
    let ray = "9a000004-0000-4000-8000-000000000001";
    let fake = cluster();
    ray_cluster(&fake, ray, 2);
    let (index, _run) = start(&fake);
    let w = until(&index, "RayCluster", "ray", "the graph", |w| {
        w.pods.is_some_and(|p| p.current == 3)
    })
    .await;
    // KAI's pod-grouper's object, as kartograf renders it: right at first.
    let mut pg = gangs::render(&w, Format::Kai).unwrap().objects.remove(0);
    pg["metadata"]["uid"] = json!(format!("{ray}-kai"));
    let name = pg["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(name, format!("pg-{ray}-raycluster"));
    // A plain owner reference, as KAI writes it: the object still joins the RayCluster.
    assert!(
        pg["metadata"]["ownerReferences"][0]
            .get("controller")
            .is_none()
    );
    fake.upsert(pg.clone());
    until(
        &index,
        "RayCluster",
        "ray",
        "a verified KAI PodGroup",
        |w| verdicts(&index, ray).len() == 1 && codes(w).is_empty(),
    )
    .await;
    // The workers subgroup says 3 where the workload has 2.
    let subs = pg["spec"]["subGroups"].as_array_mut().unwrap();
    let workers = subs.iter_mut().find(|s| s["name"] == "worker").unwrap();
    workers["minMember"] = json!(3);
    fake.upsert(pg);
    let w = until(
        &index,
        "RayCluster",
        "ray",
        "gang_subgroup_min_stale",
        |w| has(w, "gang_subgroup_min_stale"),
    )
    .await;
    let d = finding(&w, "gang_subgroup_min_stale");
    assert!(
        d.message
            .contains("subgroup worker has minMember 3 but the workload needs 2"),
        "{}",
        d.message
    );
    assert_eq!(verdicts(&index, ray)[0].kind, "kai");
    assert!(verdicts(&index, ray)[0].stale);
}

#[tokio::test]
async fn hostile_kai_pod_groups_ten_thousand_subgroups_and_a_parent_cycle_are_bounded() {
    let ray = "9a000005-0000-4000-8000-000000000001";
    let fake = cluster();
    ray_cluster(&fake, ray, 2);
    // As KAI's pod-grouper writes it: a plain owner reference (no `controller`).
    let owner =
        json!([{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ray", "uid": ray}]);
    let many: Vec<Value> = (0..10_001)
        .map(|i| json!({"name": format!("s{i}"), "minMember": 1}))
        .collect();
    fake.upsert(json!({
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "many", "namespace": NS, "uid": format!("{ray}-many"),
                     "ownerReferences": owner},
        "spec": {"minSubGroup": 10_001, "subGroups": many}
    }));
    fake.upsert(json!({
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "cycle", "namespace": NS, "uid": format!("{ray}-cycle"),
                     "ownerReferences": owner},
        "spec": {"minSubGroup": 1, "subGroups": [
            {"name": "a", "parent": "b", "minSubGroup": 1},
            {"name": "b", "parent": "a", "minSubGroup": 1}]}
    }));
    let (index, _run) = start(&fake);
    let w = until(&index, "RayCluster", "ray", "both objects checked", |w| {
        verdicts(&index, ray).len() == 2
            && w.diagnostics
                .iter()
                .any(|d| d.message.contains("cycle detected in subgroups"))
    })
    .await;
    // Each object gets a bounded list of findings: over the subgroup bound (not walked),
    // the cycle, and that no gang of the workload corresponds to either.
    let messages: Vec<&str> = w.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("kai many: has 10001 subgroups; kartograf checks at most 10000")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("kai cycle: cycle detected in subgroups"))
    );
    assert_eq!(
        codes(&w)
            .iter()
            .filter(|c| **c == "gang_object_unmatched")
            .count(),
        2
    );
    assert!(w.diagnostics.len() < 10, "{messages:?}");
    // The graph itself is intact: pods, components.
    assert_eq!(w.pods.unwrap().current, 3);
}

/// The JobSet seed (leader ×1, workers ×2; 3 pods running).
fn jobset_docs() -> Vec<Value> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/engine/jobset-seed.yaml"
    ))
    .unwrap();
    kartograf::manifest::parse_documents(&text).unwrap()
}

#[tokio::test]
async fn a_jobset_with_workload_api_objects_verifies_and_catches_a_stale_min_count() {
    let fake = cluster();
    let docs = jobset_docs();
    for d in &docs {
        fake.upsert(d.clone());
    }
    let (index, _run) = start(&fake);
    // The whole graph: three pods current and every one in a leaf gang group (the groups
    // are what the pods below are wired to).
    let w = until(&index, "JobSet", "llama-train", "the graph", |w| {
        w.pods.is_some_and(|p| p.current == 3)
            && w.gang.is_some()
            && all_leaf_groups(w)
                .iter()
                .map(|(_, p)| p.len())
                .sum::<usize>()
                == 3
    })
    .await;
    let root_uid = w.r#ref.as_ref().unwrap().uid.clone();
    let rendered = gangs::render(&w, Format::Workload).unwrap();
    // Workload first; every object owned by the JobSet; names as workloadbuilder makes them.
    assert_eq!(rendered.objects[0]["kind"], "Workload");
    let wl_name = rendered.objects[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        wl_name,
        gangs::names::workload_name("llama-train", &root_uid)
    );
    let mut leaf_of_pod: Vec<(String, String)> = Vec::new();
    for (i, mut o) in rendered.objects.clone().into_iter().enumerate() {
        o["metadata"]["uid"] = json!(format!("9b000000-0000-4000-8000-{i:012}"));
        fake.upsert(o);
    }
    // Each pod names the leaf PodGroup of its gang group (as the JobSet controller sets
    // spec.schedulingGroup.podGroupName).
    let leaves: Vec<&Value> = rendered
        .objects
        .iter()
        .filter(|o| o["kind"] == "PodGroup")
        .collect();
    let groups = all_leaf_groups(&w);
    for (group, pods) in &groups {
        let template = gangs::names::dns_label(group).unwrap();
        let pg = leaves
            .iter()
            .find(|o| o["spec"]["workloadRef"]["templateName"] == template.as_str())
            .unwrap_or_else(|| panic!("a PodGroup for {group}"));
        for p in pods {
            leaf_of_pod.push((
                p.clone(),
                pg["metadata"]["name"].as_str().unwrap().to_owned(),
            ));
        }
    }
    for mut d in docs.into_iter().filter(|d| d["kind"] == "Pod") {
        let name = d["metadata"]["name"].as_str().unwrap().to_owned();
        let (_, pg) = leaf_of_pod
            .iter()
            .find(|(p, _)| *p == name)
            .unwrap_or_else(|| panic!("pod {name} is in no leaf gang group: {groups:?}"));
        d["spec"]["schedulingGroup"] = json!({"podGroupName": pg});
        fake.upsert(d);
    }
    let w = until(
        &index,
        "JobSet",
        "llama-train",
        "verified Workload API objects",
        // Every pod's schedulingGroup update arrives on its own: wait for the last one too.
        |w| verdicts(&index, &root_uid).len() == rendered.objects.len() - 1 && codes(w).is_empty(),
    )
    .await;
    assert!(codes(&w).is_empty(), "{:?}", w.diagnostics);
    assert!(
        verdicts(&index, &root_uid)
            .iter()
            .all(|v| v.intact && !v.stale)
    );
    // Someone sets a leaf's gang.minCount (mutable since v1.37) above what exists.
    let mut pg = (*leaves[0]).clone();
    let i = rendered.objects.iter().position(|o| *o == pg).unwrap();
    pg["metadata"]["uid"] = json!(format!("9b000000-0000-4000-8000-{i:012}"));
    pg["spec"]["schedulingPolicy"]["gang"]["minCount"] = json!(9);
    fake.upsert(pg);
    let w = until(&index, "JobSet", "llama-train", "gang_min_stale", |w| {
        has(w, "gang_min_stale")
    })
    .await;
    let d = finding(&w, "gang_min_stale");
    assert!(d.message.contains("gang.minCount is 9"), "{}", d.message);
}

/// (group name, pods) of every leaf gang group.
fn all_leaf_groups(w: &pb::Workload) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut stack: Vec<&pb::GangGroup> = w.gang.as_ref().unwrap().groups.iter().collect();
    while let Some(g) = stack.pop() {
        if g.subgroups.is_empty() {
            out.push((g.name.clone(), g.pods.clone()));
        }
        stack.extend(g.subgroups.iter());
    }
    out
}

/// The `Gangs` RPC through the real server: each format, named as each ecosystem names it,
/// and its errors.
#[tokio::test]
async fn the_gangs_rpc_renders_every_format_and_names_its_errors() {
    let mut h = crate::start(0).await;
    let lws = crate::by_name("LeaderWorkerSet", "inference", "vllm-70b");
    let graph = h
        .client
        .resolve(lws.clone())
        .await
        .unwrap()
        .into_inner()
        .workload
        .unwrap();
    let uid = graph.r#ref.as_ref().unwrap().uid.clone();
    let ask = |format: pb::GangFormat| pb::GangsRequest {
        workload: Some(lws.clone()),
        format: format as i32,
    };
    let parse = |r: pb::GangsResponse| -> Vec<Value> {
        r.objects_json
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect()
    };
    let kai = parse(
        h.client
            .gangs(ask(pb::GangFormat::Kai))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(kai.len(), 2);
    assert_eq!(kai[0]["metadata"]["name"], format!("pg-{uid}-0"));
    assert_eq!(kai[0]["apiVersion"], "scheduling.run.ai/v2alpha2");
    // Offline rendering of the same graph gives the same objects.
    assert_eq!(kai, gangs::render(&graph, Format::Kai).unwrap().objects);
    let wl = parse(
        h.client
            .gangs(ask(pb::GangFormat::Workload))
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(wl[0]["kind"], "Workload");
    assert_eq!(
        wl[0]["metadata"]["name"],
        gangs::names::workload_name("vllm-70b", &uid)
    );
    let cos = h
        .client
        .gangs(ask(pb::GangFormat::Coscheduling))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(parse(cos)[0]["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
    for bad in [0, 99] {
        let e = h
            .client
            .gangs(pb::GangsRequest {
                workload: Some(lws.clone()),
                format: bad,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().contains("not a gang format"), "{}", e.message());
    }
    let missing = pb::GangsRequest {
        workload: Some(crate::by_name("LeaderWorkerSet", "inference", "nope")),
        format: pb::GangFormat::Kai as i32,
    };
    assert_eq!(
        h.client.gangs(missing).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let none = pb::GangsRequest {
        workload: None,
        format: pb::GangFormat::Kai as i32,
    };
    assert_eq!(
        h.client.gangs(none).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
}
