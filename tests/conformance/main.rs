//! Conformance with NVIDIA Workload Map (formerly Karta): every state its own e2e suite
//! recorded from real operators on kind clusters (`fixtures/karta`, from run-ai/karta), replayed
//! offline through kartograf's engine, once with the embedded catalog and once with Workload
//! Map's own definitions (`definitions/karta`), loaded unchanged. See `README.md` here.
//!
//! Workload Map's later e2e recordings of LLMInferenceService (`fixtures/workload-map`, from
//! dsx-ai-factory/workload-map, schema 1) are replayed in `e2e.rs`.
//!
//! Upstream's rule: a recorded state agrees when the statuses kartograf matches contain it.
//! `cargo test --test conformance -- --nocapture report` prints the agreement per framework.

mod e2e;
mod events;
mod extraction;
mod known;
mod reading;
mod recording;
mod upstream;

use kartograf::definition::Catalog;
use reading::Reading;
use recording::{Flow, Step};
use serde_json::json;
use std::collections::BTreeMap;

/// The agreement the embedded catalog must reach under upstream's rule.
const MIN_AGREEMENT: f64 = 0.98;

fn embedded() -> &'static Catalog {
    static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    CATALOG.get_or_init(|| Catalog::embedded().expect("embedded catalog is valid"))
}

fn flows() -> &'static [Flow] {
    static FLOWS: std::sync::OnceLock<Vec<Flow>> = std::sync::OnceLock::new();
    FLOWS.get_or_init(recording::load_all)
}

/// Every recorded state with kartograf's reading of it under `catalog`.
fn read_all(catalog: &Catalog) -> Vec<(&'static Flow, usize, &'static Step, Reading)> {
    let mut out = Vec::new();
    for flow in flows() {
        for (i, step) in flow.steps.iter().enumerate() {
            let reading = reading::read(catalog, &step.cr)
                .unwrap_or_else(|e| panic!("{} step {i}: {e}", flow.id));
            out.push((flow, i, step, reading));
        }
    }
    out
}

/// Upstream's rule: the matched statuses contain the recorded state.
fn agrees(step: &Step, reading: &Reading) -> bool {
    reading.matched.contains(&step.state)
}

/// A lenient reading: upstream's rule, or kartograf's phase is the recorded state's finer
/// counterpart (Suspending or Resuming for Suspended, Resuming for Initializing, Degraded for
/// Running and Running for Degraded).
fn agrees_leniently(step: &Step, reading: &Reading) -> bool {
    let close: &[&str] = match step.state.as_str() {
        "Suspended" => &["Suspending", "Resuming"],
        "Initializing" => &["Resuming"],
        "Running" => &["Degraded"],
        "Degraded" => &["Running"],
        _ => &[],
    };
    agrees(step, reading) || close.contains(&reading.phase.as_str())
}

#[test]
fn merge_patch_follows_rfc_7386() {
    let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
    recording::merge_patch(
        &mut doc,
        &json!({"a": "z", "c": {"f": null, "h": {"i": 1}}, "l": [3]}),
    );
    assert_eq!(
        doc,
        json!({"a": "z", "c": {"d": "e", "h": {"i": 1}}, "l": [3]})
    );
    let mut scalar = json!({"a": 1});
    recording::merge_patch(&mut scalar, &json!(["x"]));
    assert_eq!(
        scalar,
        json!(["x"]),
        "a non-object patch replaces the target"
    );
    let mut from_scalar = json!("text");
    recording::merge_patch(&mut from_scalar, &json!({"a": {"b": null}}));
    assert_eq!(from_scalar, json!({"a": {}}));
}

#[test]
fn a_flow_without_a_first_cr_or_a_patch_is_refused() {
    let no_cr = "schemaVersion: 6\noperator: x\nkartaName: x\nkartaFile: x\nsteps:\n- state: Running\n  expected: {matchedStatuses: [Running]}\n";
    assert!(recording::parse_flow(no_cr, "t").is_err());
    let no_patch = "schemaVersion: 6\noperator: x\nkartaName: x\nkartaFile: x\nsteps:\n- state: Running\n  cr: {kind: X}\n  expected: {matchedStatuses: [Running]}\n- state: Failed\n";
    let err = recording::parse_flow(no_patch, "t").unwrap_err();
    assert!(err.contains("step 1 has no patch"), "{err}");
    let old = no_patch.replace("schemaVersion: 6", "schemaVersion: 5");
    assert!(
        recording::parse_flow(&old, "t")
            .unwrap_err()
            .contains("schemaVersion")
    );
}

#[test]
fn recordings_rebuild_every_state() {
    let flows = flows();
    let states: usize = flows.iter().map(|f| f.steps.len()).sum();
    assert!(
        flows.len() >= 50 && states >= 120,
        "{} flows, {states} states",
        flows.len()
    );
    for flow in flows {
        let last = flow.steps.last().expect("steps");
        if let Some(want) = &flow.want {
            assert_eq!(&last.state, want, "{}: the flow ends in its want", flow.id);
        }
        for (i, step) in flow.steps.iter().enumerate() {
            // Upstream's own invariant: Workload Map matched the state it recorded.
            assert!(
                step.expected_matched().contains(&step.state),
                "{} step {i}: recorded {} but Workload Map matched {:?}",
                flow.id,
                step.state,
                step.expected_matched()
            );
            assert!(step.cr["kind"].is_string(), "{} step {i}: a CR", flow.id);
        }
    }
}

#[test]
fn embedded_catalog_reads_what_workload_map_recorded() {
    let mut differences = Vec::new();
    let mut agreed = 0usize;
    let all = read_all(embedded());
    for (flow, i, step, reading) in &all {
        if agrees(step, reading) {
            agreed += 1;
        } else {
            differences.push((
                flow.id.as_str(),
                *i,
                step.state.as_str(),
                reading.matched.clone(),
            ));
        }
    }
    let mut problems = Vec::new();
    for (flow, step, state, matched) in &differences {
        match known::STATUS.iter().find(|k| k.flow == *flow && k.step == *step) {
            None => problems.push(format!(
                "new difference: {flow} step {step}: recorded {state}, kartograf matches {matched:?}"
            )),
            Some(k) if k.state != *state || k.matched != matched.as_slice() => problems.push(
                format!(
                    "listed difference changed: {flow} step {step}: recorded {state}, kartograf \
                     matches {matched:?}; listed {} / {:?}",
                    k.state, k.matched
                ),
            ),
            Some(_) => {}
        }
    }
    for k in known::STATUS {
        if !differences.iter().any(|d| d.0 == k.flow && d.1 == k.step) {
            problems.push(format!(
                "listed difference is gone (remove it from known.rs and docs/catalog.md): {} step {}",
                k.flow, k.step
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let ratio = agreed as f64 / all.len() as f64;
    assert!(
        ratio >= MIN_AGREEMENT,
        "agreement {agreed}/{} = {:.1}% is below {:.0}%",
        all.len(),
        ratio * 100.0,
        MIN_AGREEMENT * 100.0
    );
}

#[test]
fn upstream_definitions_load_unchanged() {
    let (defs, errors) = upstream::load_all();
    assert!(errors.is_empty(), "{errors:#?}");
    let mut warned: Vec<(String, String)> = defs
        .iter()
        .flat_map(|d| {
            d.warnings
                .iter()
                .map(|w| (d.name.clone(), w.message.clone()))
        })
        .collect();
    warned.sort();
    // The one check kartograf adds that an upstream definition trips: a warning, not an error.
    assert_eq!(
        warned,
        [(
            "grove-io-podcliqueset-v1alpha1".to_owned(),
            "component `scalinggroup` has a pod selector but neither it nor its children \
             declare a pod spec: the pods it selects are placed in no component"
                .to_owned()
        )]
    );
    for flow in flows() {
        let cr = &flow.steps[0].cr;
        let api = cr["apiVersion"].as_str().unwrap_or_default();
        let kind = cr["kind"].as_str().unwrap_or_default();
        let lookup = upstream::catalog().lookup(api, kind);
        assert!(
            lookup.is_some_and(|l| l.fallback_from.is_none()),
            "{}: no upstream definition for {api} {kind} (recorded with `{}` from {})",
            flow.id,
            flow.karta_name,
            flow.karta_file
        );
    }
}

#[test]
fn upstream_definitions_read_exactly_what_workload_map_recorded() {
    let mut problems = Vec::new();
    for (flow, i, step, reading) in read_all(upstream::catalog()) {
        let mut want = step.expected_matched();
        if want.is_empty() {
            want.push("Undefined".to_owned());
        }
        // In order: Workload Map lists its matched statuses in its fixed order (its
        // `StatusMappings.Entries()`), and `kli get` prints that list as the PHASE column.
        let got = reading.matched.clone();
        if want != got {
            problems.push(format!(
                "{} step {i} ({}): Workload Map matched {want:?}, kartograf with its definition {got:?}",
                flow.id, step.state
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The phase Workload Map shows for a state: the first of its matched statuses (they are in
/// its fixed order), `Undefined` when none.
fn workload_map_phase(step: &Step) -> String {
    step.expected_matched()
        .into_iter()
        .next()
        .unwrap_or_else(|| "Undefined".to_owned())
}

#[test]
fn the_workload_map_phase_precedence_gives_workload_map_s_phase_on_every_recorded_state() {
    let mut differ = Vec::new();
    let mut states = 0;
    for (flow, i, step, reading) in read_all(upstream::catalog_workload_map_phase()) {
        states += 1;
        let want = workload_map_phase(step);
        if reading.phase != want {
            differ.push(format!(
                "{} step {i}: Workload Map {want}, kartograf {}",
                flow.id, reading.phase
            ));
        }
    }
    assert!(states > 100, "{states}");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn without_the_setting_upstream_definitions_keep_kartograf_s_precedence() {
    // Where several statuses match, kartograf's precedence may pick another phase than
    // Workload Map's first; every such state must be listed in known.rs.
    const PRECEDENCE: [&str; 8] = [
        "Failed",
        "Completed",
        "Suspending",
        "Resuming",
        "Suspended",
        "Degraded",
        "Running",
        "Initializing",
    ];
    let mut differ = Vec::new();
    let mut states = 0;
    for (flow, i, step, reading) in read_all(upstream::catalog()) {
        states += 1;
        let want = PRECEDENCE
            .iter()
            .find(|p| reading.matched.iter().any(|m| m == *p))
            .map_or("Undefined", |p| *p);
        assert_eq!(reading.phase, want, "{} step {i}", flow.id);
        if reading.phase != workload_map_phase(step) {
            println!(
                "{} step {i} (recorded {}): matched {:?}; kartograf's phase {}, Workload Map's first {}",
                flow.id,
                step.state,
                reading.matched,
                reading.phase,
                workload_map_phase(step)
            );
            differ.push((
                flow.id.clone(),
                i,
                workload_map_phase(step),
                reading.phase.clone(),
            ));
        }
    }
    println!(
        "upstream definitions: kartograf's phase differs from Workload Map's first matched status on {} of {states} states",
        differ.len()
    );
    let listed = known::precedence_rows(known::PRECEDENCE);
    // Also keeps the setting above tested on at least one state where the two differ.
    assert_eq!(differ, listed);
}

/// Checks every extraction difference of `catalog` against `listed`: each one found must be
/// listed (by definition, component and field) and each listed one must still occur.
fn check_extraction(catalog: &Catalog, listed: &[known::ExtractionDifference]) -> Vec<String> {
    let mut found: BTreeMap<(String, String, &'static str), Vec<String>> = BTreeMap::new();
    for (flow, i, step, reading) in read_all(catalog) {
        let expected = extraction::expected_instances(&step.expected);
        let definition = flow.id.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
        for d in extraction::compare(&expected, &reading, &|c| c.to_owned()) {
            found
                .entry((definition.clone(), d.component.clone(), d.field))
                .or_default()
                .push(format!("{} step {i}: {d}", flow.id));
        }
    }
    let mut problems = Vec::new();
    for ((definition, component, field), lines) in &found {
        let is_listed = listed
            .iter()
            .any(|k| k.definition == definition && k.component == component && k.field == *field);
        if !is_listed {
            problems.push(format!("new difference: {}", lines.join("\n  ")));
        }
    }
    for k in listed {
        if !found.contains_key(&(k.definition.to_owned(), k.component.to_owned(), k.field)) {
            problems.push(format!(
                "listed difference is gone (remove it from known.rs and docs/catalog.md): {} {}.{}",
                k.definition, k.component, k.field
            ));
        }
    }
    problems
}

#[test]
fn upstream_definitions_extract_what_workload_map_recorded() {
    let problems = check_extraction(upstream::catalog(), known::UPSTREAM_EXTRACTION);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn embedded_catalog_extracts_what_workload_map_recorded() {
    let problems = check_extraction(embedded(), known::EXTRACTION);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A documentation file of the repository with every run of whitespace made one space, so
/// that wrapped lines read as one.
fn doc_text(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_known_difference_is_documented_with_its_reason() {
    let docs = doc_text("docs/catalog.md");
    let section = docs
        .split("## Conformance with Workload Map")
        .nth(1)
        .expect("docs/catalog.md has a `Conformance with Workload Map` section");
    for k in known::STATUS {
        assert!(!k.reason.is_empty());
        let entry = format!("`{}` step {}", k.flow, k.step);
        assert!(section.contains(&entry), "docs/catalog.md lacks {entry}");
    }
    for k in known::E2E_STATUS {
        assert!(!k.reason.is_empty());
        let entry = format!("`{}` step {}", k.flow, k.step);
        assert!(section.contains(&entry), "docs/catalog.md lacks {entry}");
    }
    for k in known::PRECEDENCE.iter().chain(known::E2E_PRECEDENCE) {
        let entry = format!("`{}` step {}", k.flow, k.step);
        let resolution = doc_text("docs/resolution.md");
        assert!(
            resolution.contains(&entry),
            "docs/resolution.md lacks {entry}"
        );
    }
    for k in known::EXTRACTION {
        assert!(!k.reason.is_empty());
        let entry = format!("`{}` `{}.{}`", k.definition, k.component, k.field);
        assert!(section.contains(&entry), "docs/catalog.md lacks {entry}");
    }
    for k in known::UPSTREAM_EXTRACTION {
        assert!(!k.reason.is_empty());
    }
}

/// Prints the agreement per framework (`-- --nocapture report`) and checks that README.md and
/// docs/catalog.md state the measured figures.
#[test]
fn report() {
    let mut per: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (flow, _, step, reading) in read_all(embedded()) {
        let e = per.entry(flow.operator.clone()).or_default();
        e.0 += 1;
        e.1 += usize::from(agrees(step, &reading));
        e.2 += usize::from(agrees_leniently(step, &reading));
    }
    println!(
        "{:<12} {:>6} {:>16} {:>10}",
        "framework", "states", "upstream's rule", "lenient"
    );
    let mut total = (0, 0, 0);
    for (operator, (n, strict, lenient)) in &per {
        println!("{operator:<12} {n:>6} {strict:>16} {lenient:>10}");
        total = (total.0 + n, total.1 + strict, total.2 + lenient);
    }
    let pct = |k: usize| 100.0 * k as f64 / total.0 as f64;
    println!(
        "{:<12} {:>6} {:>9} {:>5.1}% {:>3} {:>5.1}%",
        "all",
        total.0,
        total.1,
        pct(total.1),
        total.2,
        pct(total.2)
    );
    let strict = format!(
        "{} of {} recorded states ({:.1}%)",
        total.1,
        total.0,
        pct(total.1)
    );
    let lenient = format!(
        "{} of {} ({:.1}%) under the lenient rule",
        total.2,
        total.0,
        pct(total.2)
    );
    for (file, figures) in [
        ("docs/catalog.md", vec![&strict, &lenient]),
        ("README.md", vec![&strict]),
    ] {
        let text = doc_text(file);
        for figure in figures {
            assert!(
                text.contains(figure.as_str()),
                "{file} does not state the measured `{figure}`"
            );
        }
    }
}
