//! The safety gate, end to end: `kartograf check` rejects runaway and impure expressions
//! with a message naming the construct, and never hangs or aborts.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn definition_with(expr: &str) -> String {
    format!(
        r#"apiVersion: run.ai/v1alpha1
kind: Karta
metadata:
  name: hostile
spec:
  structureDefinition:
    rootComponent:
      name: root
      kind: {{group: example.com, version: v1, kind: Hostile}}
      specDefinition:
        podTemplateSpecPath: .spec.template
      scaleDefinition:
        replicasPath: '{}'
      statusDefinition:
        statusMappings: {{}}
"#,
        expr.replace('\'', "''")
    )
}

/// Runs `kartograf check FILE` with a hard time limit; returns (exit code, stdout).
fn check_bounded(path: &std::path::Path) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kartograf"))
        .arg("check")
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return (
                status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            );
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("kartograf check hung on {}", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn runaway_and_impure_constructs_are_rejected_by_name() {
    let cases = [
        ("def f: 1 + f; f", "def f"),
        ("repeat(.)", "repeat"),
        ("range(1e9)", "range"),
        ("..", ".."),
        ("recurse", "recurse"),
        ("env", "env"),
        ("$ENV", "$ENV"),
        ("input", "input"),
        ("halt", "halt"),
        (".a = 1", "`=`"),
        ("del(.a)", "del"),
        ("[limit(.n; .[])]", "limit"),
        ("label $out | 1, halt_error", "halt_error"),
    ];
    for (expr, construct) in cases {
        let path = temp_file("hostile.yaml", &definition_with(expr));
        let (code, stdout) = check_bounded(&path);
        assert_eq!(
            code,
            Some(1),
            "`{expr}` must be rejected (exit 1), got {code:?}:\n{stdout}"
        );
        assert!(stdout.contains("INVALID"), "{stdout}");
        assert!(
            stdout.contains(construct),
            "message for `{expr}` must name `{construct}`:\n{stdout}"
        );
        assert!(
            stdout.contains("replicasPath"),
            "message must give the YAML path:\n{stdout}"
        );
        assert!(
            stdout.contains("hostile.yaml"),
            "message must give the file:\n{stdout}"
        );
    }
}

#[test]
fn a_safe_expression_passes() {
    let path = temp_file("fine.yaml", &definition_with("[.spec.a // 1, 2] | min"));
    let (code, stdout) = check_bounded(&path);
    assert_eq!(code, Some(0), "{stdout}");
}
