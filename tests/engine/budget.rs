//! The evaluation budget: every cost bomb ends with `budget_exceeded`, within its time.

#[path = "../common/bombs.rs"]
mod bombs;

use kartograf::expr::{Budget, EvalError, Expr, Limits, value};
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
    let depth = Budget::DEFAULT.depth - 2;
    let source = format!(
        "reduce range({depth}) as $i (1; [.]) | [flatten, (tojson | length), (. == .), ([., .] | sort | length)]"
    );
    let source = source.replace(&format!("range({depth})"), "range(500)");
    let expr = Expr::compile(&source).expect("compiles");
    let (out, error) = expr.eval_budgeted(&kartograf::expr::Val::Null, &[], None, Budget::DEFAULT);
    assert_eq!(error, None);
    assert_eq!(
        value::to_json(&out[0]),
        serde_json::json!([[1], 1001, true, 2])
    );
}
