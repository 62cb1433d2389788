//! Cost bombs: jq expressions that pass the load-time gate but would run for minutes, take
//! gigabytes or overflow a stack without the evaluation budget. Shared by the engine tests
//! (offline resolve) and the service tests (ValidateDefinition, hot-reloaded definitions).
//! Every one must end with `budget_exceeded`.

#![allow(dead_code)]

/// (name, expression). Each is evaluated as a definition's `replicasPath` on
/// [`sample_object`].
pub const BOMBS: &[(&str, &str)] = &[
    (
        "string doubling",
        r#"reduce range(1000) as $i ("ab"; . + .)"#,
    ),
    ("array doubling", "reduce range(1000) as $i ([1]; . + .)"),
    (
        "object doubling",
        r#"reduce range(1000) as $i ({}; . + {("k\($i)"): ., x: .})"#,
    ),
    (
        "object merge doubling",
        r#"reduce range(1000) as $i ({a: 1}; . * {("k\($i)"): .})"#,
    ),
    (
        "reduce building depth over the items",
        "reduce .spec.items[] as $i (null; {a: .}) | tojson",
    ),
    (
        "reduce building depth from a literal range",
        "reduce range(1000) as $i (null; [.]) | tojson",
    ),
    (
        "deep value compared",
        "(reduce range(1000) as $i (0; [.])) as $x | $x == $x",
    ),
    (
        "nested iteration, depth 2",
        "[.spec.items[] as $a | .spec.items[] as $b | 1] | length",
    ),
    (
        "nested iteration, depth 3",
        "[.spec.items[] as $a | .spec.items[] as $b | .spec.items[] | 1] | length",
    ),
    (
        "nested iteration, depth 4",
        "[.spec.items[] as $a | .spec.items[] as $b | .spec.items[] as $c | .spec.items[] | 1] | length",
    ),
    (
        "nested iteration over a generated array",
        "[range(1000)] as $r | [$r[] as $a | $r[] as $b | $r[] | 1] | length",
    ),
    ("big-number squaring", "reduce range(1000) as $i (3; . * .)"),
    (
        "big-number cubing",
        "reduce range(1000) as $i (7; . * . * .)",
    ),
    (
        "string repetition of the whole object",
        r#""\(.)" * 100000"#,
    ),
    ("string repetition by a huge count", r#""ab" * 4000000000"#),
    ("tojson of tojson", "reduce range(60) as $i (.; tojson)"),
    (
        "tostring of a huge generated array",
        "[.spec.items[] as $a | .spec.items[0:50][] | {a: $a}] | tostring",
    ),
    (
        "splits of a huge string into characters",
        r#".spec.items | tostring | [splits("")] | length"#,
    ),
    (
        "regex match over a huge string",
        r#".spec.items | tostring | [match("(a|aa)*b"; "g")] | length"#,
    ),
    (
        "gsub growing a huge string",
        r#"reduce range(20) as $i (.spec.items | tostring; gsub("a"; "aa"))"#,
    ),
    (
        "base64 round trips",
        "reduce range(100) as $i (.spec.items | tostring; @base64)",
    ),
    (
        "explode of a huge string",
        ".spec.items | tostring | explode | implode | explode | length",
    ),
    (
        "join of a huge generated array",
        r#"[.spec.items[] as $a | .spec.items[0:100][] | .name] | join(",") | length"#,
    ),
    (
        "sort of a huge generated array",
        "[.spec.items[] as $a | .spec.items[0:200][] | [.value, $a.value]] | sort | length",
    ),
    (
        "sort_by printing every item",
        "[.spec.items[] as $a | .spec.items[0:100][]] | sort_by(tojson) | length",
    ),
    (
        "unique of distinct copies of a big array",
        "[range(500) as $i | .spec.items | map(.)] | unique | length",
    ),
    (
        "contains over all pairs",
        ".spec.items as $a | [$a[] | select($a | contains([.]))] | length",
    ),
    (
        "indices of a long window",
        "[.spec.items[] | 0] | indices(.[0:10000]) | length",
    ),
    (
        "array subtraction of big arrays",
        "[.spec.items[] as $a | .spec.items[0:30][]] - .spec.items | length",
    ),
    (
        "comma fan-out",
        "[(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|1] | length",
    ),
    (
        "comma fan-out folded without building anything",
        "reduce ((.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)|(.,.)) as $x (0; .)",
    ),
    (
        "quadratic string concatenation",
        "[.spec.items[] as $a | .spec.items[0:20][] | .name] | add | length",
    ),
    (
        "quadratic array concatenation",
        "reduce .spec.items[] as $x ([]; [$x] + .) | length",
    ),
    (
        "pairwise equality",
        "[.spec.items[] as $a | .spec.items[] as $b | select($a == $b)] | length",
    ),
    (
        "select over every pair",
        "[.spec.items[] as $a | .spec.items | map(select(.value == $a.value))] | length",
    ),
    (
        "fromjson of deeply nested text",
        r#"("[" * 100000) + ("]" * 100000) | fromjson"#,
    ),
    (
        "flatten of a deep value",
        "reduce range(1000) as $i (1; [.]) | flatten",
    ),
    (
        "group_by of a huge generated array",
        "[.spec.items[] as $a | .spec.items[0:100][] | {v: ($a.value % 97)}] | group_by(.v) | length",
    ),
    (
        "to_entries of a huge generated object",
        r#"[.spec.items[] as $a | .spec.items[0:50][] | {("k\($a.value)_\(.value)"): 1}] | add | to_entries | length"#,
    ),
    (
        "transpose of a generated matrix",
        "[.spec.items[] | [.spec.items[]?, .value]] | [range(1000) as $i | .] | transpose | length",
    ),
    (
        "split of a big string into one-character parts",
        r#""a" * 60000000 | . / """#,
    ),
    (
        "fromjson of many small containers",
        r#""[" + ("{}," * 4000000) + "{}]" | fromjson | length"#,
    ),
    (
        "@html of a big string of escapes",
        r#""<" * 60000000 | @html | length"#,
    ),
    (
        "trim of a big string in a loop",
        r#"" " * 10000000 | . as $s | reduce range(1000) as $i (0; . + ($s | trim | length))"#,
    ),
    (
        "startswith of a big string in a loop",
        r#""a" * 10000000 | . as $s | reduce range(1000) as $i (0; if ($s | startswith($s)) then . + 1 else . end)"#,
    ),
    (
        "merge copying a shared big object in a loop",
        r#"([.spec.items | keys[] | {key: "k\(.)", value: .}] | from_entries) as $big | reduce range(1000) as $i (0; ($big * {}) | length)"#,
    ),
];

/// Items in [`sample_object`]'s `.spec.items`.
pub const ITEMS: usize = 20_000;

/// The object every bomb runs on: an `example.com/v1` `BombRun` with [`ITEMS`] small
/// items (about 1.5 MB of JSON, within the object size limit).
pub fn sample_object() -> serde_json::Value {
    let items: Vec<serde_json::Value> = (0..ITEMS)
        .map(|i| {
            serde_json::json!({
                "name": format!("item-{i:05}"),
                "value": i,
                "labels": {"team": format!("t{}", i % 7), "tier": "a"},
            })
        })
        .collect();
    serde_json::json!({
        "apiVersion": "example.com/v1",
        "kind": "BombRun",
        "metadata": {"name": "bomb", "namespace": "default", "uid": "bomb-uid"},
        "spec": {"items": items},
    })
}

/// A definition for `BombRun` whose root `replicasPath` is `expression`.
pub fn definition(expression: &str) -> String {
    let quoted = serde_json::to_string(expression).expect("a string serializes");
    format!(
        r#"apiVersion: run.ai/v1alpha1
kind: Karta
metadata:
  name: bombrun
spec:
  structureDefinition:
    rootComponent:
      name: bomb
      kind: {{group: example.com, version: v1, kind: BombRun}}
      scaleDefinition:
        replicasPath: {quoted}
      statusDefinition:
        statusMappings:
          running:
            - byExpression: {{expression: 'true', expectedResult: "true"}}
"#
    )
}
