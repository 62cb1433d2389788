//! The evaluation budget: every cost bomb ends with `budget_exceeded`, within its time.

#[path = "../common/bombs.rs"]
mod bombs;

use kartograf::expr::{Budget, EvalError, Expr, Limits, value};
use kartograf::proto::v1 as pb;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn every_bomb_ends_within_its_budget_when_evaluated() {
    let input = value::from_json(&bombs::sample_object(), Limits::default()).expect("converts");
    let mut failures = Vec::new();
    for (name, source) in bombs::BOMBS {
        let expr = match Expr::compile(source) {
            Ok(e) => e,
            Err(e) => {
                failures.push(format!("{name}: refused at load: {e}"));
                continue;
            }
        };
        let start = Instant::now();
        let (_, error) = expr.eval_budgeted(&input, &[], None, Budget::DEFAULT);
        let took = start.elapsed();
        eprintln!("{name}: {error:?} in {took:?}");
        match error {
            Some(EvalError::Budget(_)) => {}
            other => failures.push(format!("{name}: ended with {other:?}")),
        }
        if took > Duration::from_millis(1500) {
            failures.push(format!("{name}: took {took:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn values_up_to_the_depth_limit_are_printed_compared_and_flattened_on_a_test_thread() {
    // Test threads have 2 MiB stacks: the deepest value the budget allows must still be
    // safe to recurse through.
    const { assert!(Budget::DEFAULT.depth >= 501) };
    let source = "reduce range(500) as $i (1; [.]) | [flatten, (tojson | length), (. == .), ([., .] | sort | length)]";
    let expr = Expr::compile(source).expect("compiles");
    let (out, error) = expr.eval_budgeted(&kartograf::expr::Val::Null, &[], None, Budget::DEFAULT);
    assert_eq!(error, None);
    assert_eq!(
        value::to_json(&out[0]),
        serde_json::json!([[1], 1001, true, 2])
    );
}

#[test]
fn every_bomb_ends_with_budget_exceeded_in_offline_resolve() {
    // One kind, object and definition per bomb, resolved by one `kartograf resolve --all`.
    let dir = std::env::temp_dir().join(format!("kartograf-bombs-{}", std::process::id()));
    let (cluster, defs) = (dir.join("cluster"), dir.join("defs"));
    for d in [&cluster, &defs] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).expect("temp dir");
    }
    let object = bombs::sample_object();
    for (i, (_, source)) in bombs::BOMBS.iter().enumerate() {
        let kind = format!("BombRun{i}");
        let mut o = object.clone();
        o["kind"] = kind.clone().into();
        o["metadata"]["name"] = format!("bomb-{i}").into();
        o["metadata"]["uid"] = format!("bomb-uid-{i}").into();
        std::fs::write(cluster.join(format!("{i}.json")), o.to_string()).expect("object");
        let def = bombs::definition(source)
            .replace("kind: BombRun}", &format!("kind: {kind}}}"))
            .replace("name: bombrun", &format!("name: bombrun{i}"));
        std::fs::write(defs.join(format!("{i}.yaml")), def).expect("definition");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .args(["resolve", "--all", "-o", "json", "-f"])
        .arg(&cluster)
        .arg("-d")
        .arg(&defs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    let pid = child.id();
    // Poll the peak RSS while it runs (it is gone once the process is reaped).
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(stdout), &mut text);
        text
    });
    let mut peak = 0;
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        peak = peak.max(crate::process::status_kib(&pid.to_string(), "VmHWM:"));
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "offline resolve hangs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().expect("exit status");
    let text = reader.join().expect("stdout reader");
    assert!(status.success(), "exit {status:?}");
    let list: pb::ListResponse = serde_json::from_str(&text).expect("a ListResponse");
    let mut failures = Vec::new();
    for (i, (name, source)) in bombs::BOMBS.iter().enumerate() {
        let kind = format!("BombRun{i}");
        let w = list
            .workloads
            .iter()
            .find(|w| w.r#ref.as_ref().is_some_and(|r| r.kind == kind));
        let ok = w.is_some_and(|w| {
            w.diagnostics
                .iter()
                .any(|d| d.code == "budget_exceeded" && d.expression == *source)
        });
        if !ok {
            failures.push(format!("{name}: {:?}", w.map(|w| &w.diagnostics)));
        }
    }
    eprintln!(
        "offline: {} bombs in {:?}, peak RSS {peak} KiB",
        bombs::BOMBS.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{failures:#?}");
    // About 60 MB of input is held; each evaluation adds at most 64 MiB of values.
    assert!(peak < 1024 * 1024, "peak RSS {peak} KiB");
    let _ = std::fs::remove_dir_all(&dir);
}
