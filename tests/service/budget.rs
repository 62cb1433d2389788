//! Hostile expressions against the real `kartograf serve` process: every cost bomb through
//! `ValidateDefinition` and as a hot-reloaded definition file ends with `budget_exceeded`
//! while the process stays up with bounded memory; health, `/livez` and `Resolve` keep
//! answering while hostile evaluations occupy every evaluation thread.

#[path = "../common/bombs.rs"]
mod bombs;

use super::observability::{Process, get, spawn_serving};
use super::{copy_dir, temp_dir};
use kartograf::proto::v1 as pb;
use kartograf::proto::v1::definitions_client::DefinitionsClient;
use kartograf::proto::v1::workload_resolver_client::WorkloadResolverClient;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

fn alive(p: &mut Process) -> bool {
    matches!(p.child.try_wait(), Ok(None))
}

/// Writes `text` to `path` atomically (a reader never sees half a file).
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

async fn channel(p: &Process) -> Channel {
    Channel::from_shared(format!("http://{}", p.grpc))
        .expect("uri")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect")
}

fn has_budget_exceeded(diags: &[pb::Diagnostic], expression: &str) -> bool {
    diags
        .iter()
        .any(|d| d.code == "budget_exceeded" && d.expression == expression)
}

fn bomb_ref() -> pb::ObjectRef {
    pb::ObjectRef {
        kind: "BombRun".into(),
        namespace: "default".into(),
        name: "bomb".into(),
        ..Default::default()
    }
}

/// A manifest directory holding the bomb object, and a definitions directory holding a
/// harmless definition for it.
fn bomb_dirs() -> (PathBuf, PathBuf) {
    let cluster = temp_dir("bomb-cluster");
    std::fs::write(
        cluster.join("bomb.json"),
        bombs::sample_object().to_string(),
    )
    .expect("write the bomb object");
    let defs = temp_dir("bomb-defs");
    write_atomically(&defs.join("bomb.yaml"), &bombs::definition("1"));
    (cluster, defs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bomb_through_validate_and_hot_reload_leaves_the_server_up_and_bounded() {
    let (cluster, defs) = bomb_dirs();
    let mut p = spawn_serving(
        &cluster,
        &["--definitions".as_ref(), defs.as_os_str()],
        "text",
        &[],
    );
    let channel = channel(&p).await;
    let mut resolver = WorkloadResolverClient::new(channel.clone());
    let mut definitions = DefinitionsClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let pid = p.child.id();
    // Ready once the bomb workload resolves under the harmless definition.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = resolver
            .resolve(pb::ResolveRequest {
                target: Some(pb::resolve_request::Target::Workload(bomb_ref())),
                view: 0,
                cluster: String::new(),
            })
            .await;
        if r.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bomb workload never resolved: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let baseline = crate::process::status_kib(&pid.to_string(), "VmRSS:");
    let sample = bombs::sample_object().to_string();
    let mut failures = Vec::new();

    // (a) ValidateDefinition with the bomb object as the sample.
    for (name, source) in bombs::BOMBS {
        let started = Instant::now();
        let answer = definitions
            .validate_definition(pb::ValidateDefinitionRequest {
                definition: bombs::definition(source),
                sample: Some(pb::InlineWorkload {
                    object_json: sample.clone(),
                    pods_json: Vec::new(),
                }),
            })
            .await;
        let took = started.elapsed();
        match answer {
            Ok(r) => {
                let r = r.into_inner();
                let diags = r.preview.map(|w| w.diagnostics).unwrap_or_default();
                if !r.valid || !has_budget_exceeded(&diags, source) {
                    failures.push(format!("validate {name}: valid={} {diags:?}", r.valid));
                }
            }
            Err(e) => failures.push(format!("validate {name}: {e}")),
        }
        if took > Duration::from_secs(5) {
            failures.push(format!("validate {name}: took {took:?}"));
        }
        assert!(
            alive(&mut p),
            "the server died on ValidateDefinition of {name}"
        );
    }
    let after_validate = crate::process::status_kib(&pid.to_string(), "VmRSS:");

    // (b) The same bombs as a hot-reloaded definition file.
    for (name, source) in bombs::BOMBS {
        write_atomically(&defs.join("bomb.yaml"), &bombs::definition(source));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let diags = resolver
                .resolve(pb::ResolveRequest {
                    target: Some(pb::resolve_request::Target::Workload(bomb_ref())),
                    view: 0,
                    cluster: String::new(),
                })
                .await
                .ok()
                .and_then(|r| r.into_inner().workload)
                .map(|w| w.diagnostics)
                .unwrap_or_default();
            if has_budget_exceeded(&diags, source) {
                break;
            }
            if Instant::now() > deadline {
                failures.push(format!("reload {name}: no budget_exceeded ({diags:?})"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(alive(&mut p), "the server died on the reload of {name}");
    }
    let after_reload = crate::process::status_kib(&pid.to_string(), "VmRSS:");
    let peak = crate::process::status_kib(&pid.to_string(), "VmHWM:");
    eprintln!(
        "RSS: baseline {baseline} KiB, after validate {after_validate} KiB, after reload {after_reload} KiB, peak {peak} KiB"
    );
    assert!(failures.is_empty(), "{failures:#?}");
    // Every evaluation creates at most 64 MiB of values; the peak stays within a few of
    // those above the starting point however many bombs went off.
    assert!(
        peak.saturating_sub(baseline) < 512 * 1024,
        "peak RSS grew by {} KiB",
        peak - baseline
    );
    assert!(
        after_reload.saturating_sub(baseline) < 256 * 1024,
        "RSS after the bombs grew by {} KiB",
        after_reload - baseline
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_livez_and_resolve_answer_while_hostile_evaluations_run() {
    let cluster = temp_dir("hostile-cluster");
    copy_dir(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/cluster"),
        &cluster,
    );
    std::fs::write(
        cluster.join("bomb.json"),
        bombs::sample_object().to_string(),
    )
    .expect("write the bomb object");
    let mut p = spawn_serving(&cluster, &[], "text", &[]);
    let channel = channel(&p).await;
    let mut resolver = WorkloadResolverClient::new(channel.clone());
    let mut health = HealthClient::new(channel.clone());
    let wanted = pb::ObjectRef {
        kind: "JobSet".into(),
        namespace: "ml".into(),
        name: "llama-train".into(),
        ..Default::default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while resolver
        .resolve(pb::ResolveRequest {
            target: Some(pb::resolve_request::Target::Workload(wanted.clone())),
            view: 0,
            cluster: String::new(),
        })
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the demo cluster never loaded");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Two hostile callers per core, each sending the slowest bombs back to back.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let sample = bombs::sample_object().to_string();
    let stop = Instant::now() + Duration::from_secs(4);
    let mut attackers = Vec::new();
    for i in 0..2 * cores {
        let mut client = DefinitionsClient::new(channel.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let sample = sample.clone();
        attackers.push(tokio::spawn(async move {
            let (mut done, mut shed) = (0u32, 0u32);
            let slow = [
                "[.spec.items[] as $a | .spec.items[] as $b | .spec.items[] | 1] | length",
                "reduce ((.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)) as $x (0; .)",
            ];
            while Instant::now() < stop {
                let r = client
                    .validate_definition(pb::ValidateDefinitionRequest {
                        definition: bombs::definition(slow[i % slow.len()]),
                        sample: Some(pb::InlineWorkload {
                            object_json: sample.clone(),
                            pods_json: Vec::new(),
                        }),
                    })
                    .await;
                match r {
                    Ok(_) => done += 1,
                    Err(e) if e.code() == tonic::Code::ResourceExhausted => shed += 1,
                    Err(e) => panic!("hostile call failed unexpectedly: {e}"),
                }
            }
            (done, shed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (mut check, mut livez, mut resolve) = (Vec::new(), Vec::new(), Vec::new());
    while Instant::now() < stop {
        let t = Instant::now();
        let h = tokio::time::timeout(
            Duration::from_secs(2),
            health.check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            }),
        )
        .await;
        check.push(t.elapsed());
        assert!(matches!(h, Ok(Ok(_))), "health Check failed: {h:?}");
        let t = Instant::now();
        let (status, _, _) = tokio::time::timeout(Duration::from_secs(2), get(p.admin, "/livez"))
            .await
            .expect("/livez answered within 2 s");
        livez.push(t.elapsed());
        assert_eq!(status, 200);
        let t = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(2),
            resolver.resolve(pb::ResolveRequest {
                target: Some(pb::resolve_request::Target::Workload(wanted.clone())),
                view: 0,
                cluster: String::new(),
            }),
        )
        .await;
        resolve.push(t.elapsed());
        assert!(
            matches!(r, Ok(Ok(_))),
            "Resolve of an unaffected workload failed: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut hostile = (0, 0);
    for a in attackers {
        let (d, s) = a.await.expect("attacker task");
        hostile = (hostile.0 + d, hostile.1 + s);
    }
    let p99 = |v: &mut Vec<Duration>| {
        v.sort();
        v[(v.len() * 99 / 100).min(v.len() - 1)]
    };
    eprintln!(
        "while {} hostile calls ran ({} shed): health p99 {:?} ({} calls), /livez p99 {:?}, Resolve p99 {:?}",
        hostile.0,
        hostile.1,
        p99(&mut check),
        check.len(),
        p99(&mut livez),
        p99(&mut resolve)
    );
    assert!(hostile.0 > 0, "no hostile evaluation ran");
    assert!(check.len() > 20, "too few health checks answered");
    assert!(alive(&mut p));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_that_keeps_exceeding_its_budget_is_quarantined_until_it_changes() {
    let h = super::start(1000).await;
    for i in 0..4 {
        let object = serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "BombRun",
            "metadata": {"name": format!("bomb-{i}"), "namespace": "default", "uid": format!("bomb-{i}")},
            "spec": {"items": [1, 2, 3]},
        });
        std::fs::write(h.dir.join(format!("bomb-{i}.json")), object.to_string()).unwrap();
    }
    let depth_bomb = "reduce range(1000) as $i (null; [.])";
    write_atomically(&h.defs.join("bomb.yaml"), &bombs::definition(depth_bomb));
    let mut definitions = DefinitionsClient::new(h.channel.clone());
    let info = |list: &pb::ListDefinitionsResponse| {
        list.definitions
            .iter()
            .find(|d| d.name == "bombrun")
            .cloned()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let quarantined = loop {
        let list = definitions
            .list_definitions(pb::ListDefinitionsRequest {})
            .await
            .unwrap()
            .into_inner();
        if let Some(d) = info(&list).filter(|d| d.quarantined) {
            break d;
        }
        assert!(
            Instant::now() < deadline,
            "never quarantined: {:?}",
            info(&list)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        quarantined.origin.starts_with("directory:"),
        "{quarantined:?}"
    );
    assert!(
        quarantined.quarantine_reason.contains("depth"),
        "{}",
        quarantined.quarantine_reason
    );
    // Every bomb workload is partial: exceeded, or not evaluated at all once quarantined.
    let mut client = h.client.clone();
    let mut codes = Vec::new();
    for i in 0..4 {
        let w = client
            .resolve(super::by_name("BombRun", "default", &format!("bomb-{i}")))
            .await
            .unwrap()
            .into_inner()
            .workload
            .unwrap();
        let c: Vec<String> = w.diagnostics.iter().map(|d| d.code.clone()).collect();
        assert!(
            c.iter()
                .any(|c| c == "budget_exceeded" || c == "definition_quarantined"),
            "{c:?}"
        );
        codes.extend(c);
    }
    assert!(
        codes.iter().any(|c| c == "definition_quarantined"),
        "{codes:?}"
    );
    // Metrics carry the quarantine and the exhaustions.
    let metrics = kartograf::metrics::Metrics::new(
        h.index.clone(),
        Arc::new(kartograf::definition::LoadReport::default()),
    )
    .encode();
    assert!(
        metrics.contains("kartograf_definition_quarantined{definition=\"bombrun\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "kartograf_evaluation_budget_exceeded_total{definition=\"bombrun\",budget=\"depth\"}"
        ),
        "{metrics}"
    );
    // A new version of the definition starts with a closed breaker.
    write_atomically(&h.defs.join("bomb.yaml"), &bombs::definition("1"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let w = client
            .resolve(super::by_name("BombRun", "default", "bomb-3"))
            .await
            .unwrap()
            .into_inner()
            .workload
            .unwrap();
        if w.diagnostics.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still {:?}", w.diagnostics);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let list = definitions
        .list_definitions(pb::ListDefinitionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!info(&list).expect("bombrun listed").quarantined);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_evaluations_are_shed_at_the_concurrency_limit_and_sigterm_exits_promptly() {
    let (cluster, _defs) = bomb_dirs();
    let mut p = spawn_serving(
        &cluster,
        &["--concurrency-limit".as_ref(), "4".as_ref()],
        "text",
        &[],
    );
    let channel = channel(&p).await;
    let sample = bombs::sample_object().to_string();
    let slow = "[.spec.items[] as $a | .spec.items[] as $b | .spec.items[] | 1] | length";
    // Ten slow calls at once against a limit of four: some are shed at once.
    let mut calls = Vec::new();
    for _ in 0..10 {
        let mut client = DefinitionsClient::new(channel.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let request = pb::ValidateDefinitionRequest {
            definition: bombs::definition(slow),
            sample: Some(pb::InlineWorkload {
                object_json: sample.clone(),
                pods_json: Vec::new(),
            }),
        };
        calls.push(tokio::spawn(async move {
            let started = Instant::now();
            let r = client.validate_definition(request).await;
            (r.map(|_| ()).map_err(|e| e.code()), started.elapsed())
        }));
    }
    let mut shed = 0;
    for c in calls {
        let (r, took) = c.await.expect("call task");
        match r {
            Ok(()) => {}
            Err(tonic::Code::ResourceExhausted) => {
                shed += 1;
                assert!(took < Duration::from_secs(2), "shedding took {took:?}");
            }
            Err(code) => panic!("unexpected {code:?}"),
        }
    }
    assert!(shed > 0, "nothing was shed at a concurrency limit of 4");
    // SIGTERM with hostile evaluations in flight: the process exits within 10 s.
    let mut hostile = Vec::new();
    for _ in 0..4 {
        let mut client = DefinitionsClient::new(channel.clone())
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        let request = pb::ValidateDefinitionRequest {
            definition: bombs::definition(slow),
            sample: Some(pb::InlineWorkload {
                object_json: sample.clone(),
                pods_json: Vec::new(),
            }),
        };
        hostile.push(tokio::spawn(async move {
            for _ in 0..50 {
                let _ = client.validate_definition(request.clone()).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let started = Instant::now();
    loop {
        if p.child.try_wait().expect("wait").is_some() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("exited {:?} after SIGTERM", started.elapsed());
    for h in hostile {
        h.abort();
    }
}

/// A `ValidateDefinition` preview that exhausts a budget is counted where every exhaustion
/// is: in the serving catalog's totals (`kartograf_evaluation_budget_exceeded_total`), under
/// the candidate's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_that_exhausts_a_budget_is_counted() {
    let h = crate::start(16).await;
    let mut definitions = DefinitionsClient::new(h.channel.clone());
    let (_, source) = bombs::BOMBS[0];
    let r = definitions
        .validate_definition(pb::ValidateDefinitionRequest {
            definition: bombs::definition(source),
            sample: Some(pb::InlineWorkload {
                object_json: bombs::sample_object().to_string(),
                pods_json: Vec::new(),
            }),
        })
        .await
        .expect("answered")
        .into_inner();
    let diags = r.preview.map(|w| w.diagnostics).unwrap_or_default();
    assert!(has_budget_exceeded(&diags, source), "{diags:?}");
    let counted: u64 = h
        .index
        .catalog()
        .exceeded_totals()
        .iter()
        .filter(|(name, _, _)| name == "bombrun")
        .map(|(_, _, n)| n)
        .sum();
    assert!(counted >= 1, "{:?}", h.index.catalog().exceeded_totals());
}
