//! gojq compatibility: every case of `data/jq_compat.json` (expectations generated with jq
//! 1.8 by `scripts/jq_expectations.py`, gojq-specific ones written by hand and checked
//! against gojq) must give the same outputs, and the same error/no-error outcome. Cases
//! marked `refused` must be rejected by the safety gate; `divergence` cases document where
//! kartograf deliberately errors instead.

use kartograf::expr::{Expr, Limits, value};
use serde_json::Value;

#[test]
fn every_case_matches_gojq() {
    let text = include_str!("data/jq_compat.json");
    let cases: Vec<Value> = serde_json::from_str(text).expect("case file is JSON");
    assert!(
        cases.len() > 100,
        "the table should cover the definition feature set"
    );
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("?");
        let filter = case["filter"].as_str().unwrap_or_default();
        let expected: &Vec<Value> = case["outputs"].as_array().expect("outputs");
        let expect_error = case["error"].as_bool().unwrap_or(false) || case["divergence"] == true;
        if case["refused"] == true {
            if !matches!(
                Expr::compile(filter),
                Err(kartograf::expr::CompileError::Refused(_))
            ) {
                failures.push(format!(
                    "{name}: `{filter}` should be refused by the safety gate"
                ));
            }
            continue;
        }
        let expected: &Vec<Value> = if case["divergence"] == true {
            &Vec::new()
        } else {
            expected
        };
        let expr = match Expr::compile(filter) {
            Ok(e) => e,
            Err(e) => {
                failures.push(format!("{name}: `{filter}` does not compile: {e}"));
                continue;
            }
        };
        let input = value::from_json(&case["input"], Limits::default()).expect("input converts");
        // Outputs before the first error are compared too.
        let (outputs, errored) = run_collecting(&expr, &input);
        if outputs != *expected || errored != expect_error {
            failures.push(format!(
                "{name}: `{filter}`: expected {expected:?} (error: {expect_error}), got {outputs:?} (error: {errored})"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Outputs up to the first error, and whether an error occurred.
fn run_collecting(expr: &Expr, input: &kartograf::expr::Val) -> (Vec<Value>, bool) {
    let (outputs, error) = expr.eval_outputs(input, &[], None);
    (
        outputs.iter().map(value::to_json).collect(),
        error.is_some(),
    )
}
