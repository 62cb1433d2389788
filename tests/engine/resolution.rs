//! Resolution of the core catalog on realistic snapshots.

use crate::common::*;
use kartograf::proto::v1 as pb;

#[test]
fn seed_jobset_leader_and_two_workers() {
    let r = resolve("jobset-seed.yaml", None);
    let w = &r.workload;
    assert_eq!(w.r#ref.as_ref().unwrap().name, "llama-train");
    assert_eq!(phase(w), pb::Phase::Running);
    assert_eq!(
        pods(w),
        pb::PodCounts {
            desired: 3,
            current: 3,
            ready: 3
        }
    );
    assert_eq!(gpus(w), (12.0, 12.0));
    let gang = &w.gang.as_ref().unwrap().groups;
    assert_eq!(gang.len(), 1, "one gang for the whole JobSet");
    assert_eq!(gang[0].min_member, 3);
    assert_eq!(gang[0].pods.len(), 3);
    let leader = instance(w, "replicatedjob", "leader", "");
    assert_eq!(leader.pods.unwrap().desired, 1);
    assert_eq!(leader.per_pod.as_ref().unwrap().gpus, 4.0);
    let workers = instance(w, "replicatedjob", "workers", "");
    assert_eq!(
        workers.pods.unwrap(),
        pb::PodCounts {
            desired: 2,
            current: 2,
            ready: 2
        }
    );
    assert_eq!(workers.pod_list.len(), 2);
    let subgroups: Vec<(&str, u32)> = gang[0].subgroups[0]
        .subgroups
        .iter()
        .map(|g| (g.name.as_str(), g.min_member))
        .collect();
    assert_eq!(
        subgroups,
        [("replicatedjob/leader", 1), ("replicatedjob/workers", 2)]
    );
    assert!(w.unattributed_pods.is_empty());
    assert!(w.diagnostics.is_empty(), "{:?}", w.diagnostics);
    let placement = &r.placements["3f1c2a9e-0001-4000-8000-000000000007"];
    assert_eq!(
        (
            placement.component.as_str(),
            placement.instance.as_str(),
            placement.replica.as_str()
        ),
        ("replicatedjob", "workers", "")
    );
    assert_eq!(placement.gang_group, "jobset");
}

#[test]
fn seed_jobset_tree_view_shows_leader_and_workers_under_it() {
    let out = kartograf(&[
        "resolve",
        "-f",
        "tests/fixtures/engine/jobset-seed.yaml",
        "-o",
        "tree",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} missing in\n{text}"))
    };
    let rj = line("replicatedjob");
    let (leader, workers) = (line("leader"), line("workers"));
    assert!(leader > rj && workers > leader, "{text}");
    let pods_under_workers = text
        .lines()
        .skip(workers + 1)
        .take_while(|l| l.contains("pod llama-train-workers"))
        .count();
    assert_eq!(pods_under_workers, 2, "{text}");
    assert!(text.contains("Running"));
    assert!(text.contains("12 held / 12 desired"), "{text}");
    assert!(text.contains("min 3"), "{text}");
}

#[test]
fn pods_of_other_workloads_are_not_counted() {
    let r = resolve("jobset-pending.yaml", Some("jobset/llama-train-b"));
    let w = &r.workload;
    assert_eq!(
        pods(w),
        pb::PodCounts {
            desired: 3,
            current: 3,
            ready: 2
        }
    );
    assert_eq!(
        gpus(w),
        (12.0, 8.0),
        "the pending worker holds nothing; the unrelated 1-GPU pod is not ours"
    );
    assert!(
        !r.placements
            .contains_key("3f1c2a9e-0002-4000-8000-000000000009"),
        "other-job's pod"
    );
    assert!(
        !r.placements
            .contains_key("3f1c2a9e-0002-4000-8000-000000000010"),
        "bare debug pod"
    );
    let workers = instance(w, "replicatedjob", "workers", "");
    assert_eq!(
        workers.pods.unwrap(),
        pb::PodCounts {
            desired: 2,
            current: 2,
            ready: 1
        }
    );
    assert!(workers.pod_list.iter().any(|p| p.reason == "Unschedulable"));
    assert_eq!(phase(w), pb::Phase::Running);
}

#[test]
fn the_other_roots_resolve_on_their_own() {
    let job = resolve("jobset-pending.yaml", Some("job/other-job")).workload;
    assert_eq!(pods(&job).current, 1);
    assert_eq!(gpus(&job), (1.0, 1.0));
    let pod = resolve("jobset-pending.yaml", Some("pod/debug-shell")).workload;
    assert_eq!(
        pods(&pod),
        pb::PodCounts {
            desired: 1,
            current: 1,
            ready: 1
        }
    );
}

#[test]
fn pytorchjob_readme_numbers() {
    let w = resolve("pytorchjob-readme.yaml", None).workload;
    assert_eq!(
        pods(&w),
        pb::PodCounts {
            desired: 5,
            current: 5,
            ready: 4
        }
    );
    let t = w.totals.clone().unwrap();
    let (desired, held) = (t.desired.unwrap(), t.current.unwrap());
    assert_eq!(desired.gpus, 33.0);
    assert_eq!(desired.cpu_millis, 20_000);
    assert_eq!(desired.memory_bytes, 80 * (1 << 30));
    assert_eq!(held.gpus, 25.0);
    assert_eq!(phase(&w), pb::Phase::Running);
    assert_eq!(instance(&w, "master", "", "").pod_list.len(), 1);
    assert_eq!(
        instance(&w, "worker", "", "").pods.unwrap(),
        pb::PodCounts {
            desired: 4,
            current: 4,
            ready: 3
        }
    );
    let gang = &w.gang.as_ref().unwrap().groups[0];
    assert_eq!((gang.min_member, gang.min_subgroups), (5, 2));
    let subs: Vec<(&str, u32, usize)> = gang
        .subgroups
        .iter()
        .map(|s| (s.name.as_str(), s.min_member, s.pods.len()))
        .collect();
    assert_eq!(subs, [("master", 1, 1), ("worker", 4, 4)]);
}

#[test]
fn deployment_counts_sidecars_and_init_containers_like_the_scheduler() {
    let w = resolve("deployment.yaml", None).workload;
    let per_pod = instance(&w, "deployment", "", "").per_pod.clone().unwrap();
    assert_eq!(
        per_pod.cpu_millis, 1000,
        "max(init 1 CPU, 250m + 100m sidecar)"
    );
    assert_eq!(
        per_pod.memory_bytes,
        288 * (1 << 20),
        "256Mi + 32Mi sidecar beats the 64Mi init"
    );
    assert_eq!(
        pods(&w),
        pb::PodCounts {
            desired: 3,
            current: 3,
            ready: 2
        }
    );
    // Rolling out below minimum availability (Available=False, MinimumReplicasUnavailable)
    // while Progressing, two of three replicas available: the service answers.
    assert_eq!(phase(&w), pb::Phase::Running);
    assert!(
        component(&w, "deployment").instances[0].children.is_empty(),
        "the empty ReplicaSet placeholder is dropped"
    );
    assert_eq!(
        w.gang.as_ref().unwrap().groups.len(),
        3,
        "serving pods gang one by one"
    );
}

#[test]
fn statefulset_cronjob_job_and_bare_pod() {
    let sts = resolve("statefulset.yaml", None).workload;
    assert_eq!(phase(&sts), pb::Phase::Running);
    assert_eq!(
        pods(&sts),
        pb::PodCounts {
            desired: 2,
            current: 2,
            ready: 2
        }
    );

    let cron = resolve("cronjob.yaml", None).workload;
    assert_eq!(
        cron.r#ref.as_ref().unwrap().kind,
        "CronJob",
        "the Job is not a workload of its own"
    );
    assert_eq!(phase(&cron), pb::Phase::Running);
    let (desired, held) = gpus(&cron);
    assert!(
        (desired - 3.0 / 7.0).abs() < 1e-6 && (held - 3.0 / 7.0).abs() < 1e-6,
        "MIG 3g slice = 3/7 GPU"
    );

    let failed = resolve("job-failed.yaml", None).workload;
    assert_eq!(phase(&failed), pb::Phase::Failed);
    assert_eq!(
        pods(&failed),
        pb::PodCounts {
            desired: 2,
            current: 0,
            ready: 0
        }
    );
    assert_eq!(gpus(&failed), (4.0, 0.0), "terminal pods hold nothing");
    assert!(
        failed.gang.as_ref().unwrap().groups.is_empty(),
        "terminal pods join no gang"
    );

    let pod = resolve("pod-bare.yaml", None).workload;
    assert_eq!(gpus(&pod), (0.5, 0.5), "KAI gpu-fraction annotation");
    assert_eq!(phase(&pod), pb::Phase::Running);
}

#[test]
fn a_pod_that_belongs_but_matches_no_component_is_unattributed_with_a_diagnostic() {
    let w = resolve("malformed.yaml", None).workload;
    assert_eq!(w.unattributed_pods.len(), 1);
    assert_eq!(w.unattributed_pods[0].name, "broken-main-0");
    assert!(codes(&w).contains(&"unattributed_pod".to_owned()));
    assert_eq!(pods(&w).current, 1, "it still counts as the workload's pod");
    assert_eq!(
        w.totals.clone().unwrap().current.unwrap().cpu_millis,
        2000,
        "numeric cpu is read"
    );
    assert!(
        codes(&w).contains(&"bad_quantity".to_owned()),
        "memory: lots is reported"
    );
}

#[test]
fn owner_cycles_end_the_walk() {
    let w = resolve("owner-cycle.yaml", Some("job/a")).workload;
    assert_eq!(pods(&w).current, 1);
}
